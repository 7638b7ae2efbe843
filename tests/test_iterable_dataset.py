"""tg.utils.data.IterableDataset, ChainDataset and get_worker_info: a DataLoader iterates the dataset,
batching as torch does, in the main process and in forked workers that split the work."""
import gc

import numpy as np
import pytest

from tg import Tensor
from tg.utils.data import (
    ChainDataset,
    ConcatDataset,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    get_worker_info,
)

rng = np.random.default_rng(3)
ROWS = rng.standard_normal((23, 3)).astype(np.float32)


class Rows(IterableDataset):
    """Yields (row, label) pairs; with workers each takes every num_workers-th row (torch's pattern)."""

    def __init__(self, rows=ROWS, split=True):
        self.rows, self.split = rows, split

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None or not self.split else (info.id, info.num_workers)
        for i in range(start, len(self.rows), step):
            yield self.rows[i], i


class SizedRows(Rows):
    def __len__(self):
        return len(self.rows)


class WorkerInfoRows(IterableDataset):
    """One item per worker describing its WorkerInfo."""

    def __iter__(self):
        info = get_worker_info()
        yield {"id": info.id, "n": info.num_workers, "seed": info.seed, "same": info.dataset is self}


def batches_of(order, size, drop_last):
    """The reference: consecutive pieces of the row indices in `order`."""
    pieces = [order[i:i + size] for i in range(0, len(order), size)]
    return [p for p in pieces if len(p) == size or not drop_last]


def round_robin(num_workers, size, drop_last, n=23):
    """torch's order with split workers: worker w yields rows w, w+k, ...; batches alternate."""
    per_worker = [batches_of(list(range(w, n, num_workers)), size, drop_last) for w in range(num_workers)]
    out = []
    for turn in range(max(len(b) for b in per_worker)):
        out += [b[turn] for b in per_worker if turn < len(b)]
    return out


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (4, False), (5, True), (30, False)])
def test_batches_match_the_reference(num_workers, batch_size, drop_last):
    loader = DataLoader(Rows(), batch_size=batch_size, drop_last=drop_last, num_workers=num_workers)
    want = (batches_of(list(range(len(ROWS))), batch_size, drop_last) if num_workers == 0
            else round_robin(num_workers, batch_size, drop_last))
    for _ in range(2):                       # a second pass starts the dataset again
        got = list(loader)
        assert [b[1].tolist() for b in got] == [list(w) for w in want]
        for (x, _), w in zip(got, want):
            assert isinstance(x, Tensor) and x.shape == (len(w), 3)
            np.testing.assert_array_equal(x.numpy(), ROWS[w])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_size_none_gives_items_unbatched(num_workers):
    got = list(DataLoader(Rows(ROWS[:5]), batch_size=None, num_workers=num_workers))
    assert [y for _, y in got] == [0, 1, 2, 3, 4]   # with workers: 0, 2, 4 and 1, 3 alternate
    for x, y in got:
        assert isinstance(y, int) and x.shape == (3,)
        np.testing.assert_array_equal(x.numpy(), ROWS[y])


def test_unsplit_workers_each_yield_everything():
    got = list(DataLoader(Rows(ROWS[:4], split=False), batch_size=3, num_workers=2))
    assert [b[1].tolist() for b in got] == [[0, 1, 2], [0, 1, 2], [3], [3]]


def test_worker_info_and_seeds():
    assert get_worker_info() is None
    got = list(DataLoader(WorkerInfoRows(), batch_size=None, num_workers=3))
    assert [(d["id"], d["n"], d["same"]) for d in got] == [(0, 3, True), (1, 3, True), (2, 3, True)]
    seeds = [d["seed"] for d in got]
    assert seeds[1] == seeds[0] + 1 and seeds[2] == seeds[0] + 2
    again = [d["seed"] for d in DataLoader(WorkerInfoRows(), batch_size=None, num_workers=3, generator=5)]
    assert again == [d["seed"] for d in DataLoader(WorkerInfoRows(), batch_size=None, num_workers=3,
                                                  generator=5)]


def test_persistent_workers_start_a_new_pass_each_epoch():
    loader = DataLoader(Rows(), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3)
    want = [list(w) for w in round_robin(2, 4, False)]
    first = [b[1].tolist() for b in loader]
    it = iter(loader)
    next(it)                                    # a pass dropped early leaves no stale batches
    del it
    gc.collect()
    assert first == want and [b[1].tolist() for b in loader] == want
    pool = loader._pool
    del loader
    gc.collect()
    for p in pool.procs if pool is not None else []:
        p.join(5)


def test_len_custom_collate_and_resume():
    with pytest.raises(TypeError, match="needs the dataset's __len__"):
        len(DataLoader(Rows(), batch_size=4))
    assert len(DataLoader(SizedRows(), batch_size=4)) == 6
    assert len(DataLoader(SizedRows(), batch_size=4, drop_last=True)) == 5
    assert len(DataLoader(SizedRows(), batch_size=None)) == 23
    sums = list(DataLoader(Rows(), batch_size=10, collate_fn=lambda items: sum(i for _, i in items)))
    assert sums == [45, 145, 63]
    loader = DataLoader(Rows(), batch_size=5, num_workers=2)
    loader.load_state_dict({"epoch": 0, "batches": 2})
    rest = [b[1].tolist() for b in loader]
    assert rest == [list(w) for w in round_robin(2, 5, False)[2:]]


def test_worker_errors_are_raised_in_the_main_process():
    class Broken(IterableDataset):
        def __iter__(self):
            yield np.zeros(2)
            raise KeyError("row 1 is broken")

    with pytest.raises(KeyError, match="row 1 is broken"):
        list(DataLoader(Broken(), batch_size=None, num_workers=2))
    with pytest.raises(KeyError, match="row 1 is broken"):
        list(DataLoader(Broken(), batch_size=None))


def test_chain_and_concat():
    chained = Rows(ROWS[:3]) + Rows(ROWS[3:5])
    assert isinstance(chained, ChainDataset)
    assert [int(y) for _, y in chained] == [0, 1, 2, 0, 1]
    with pytest.raises(TypeError, match="needs every dataset's __len__"):
        len(chained)
    assert len(ChainDataset([range(3), [7, 8]])) == 5
    got = list(DataLoader(ChainDataset([range(3), range(10, 12)]), batch_size=2))
    assert [b.tolist() for b in got] == [[0, 1], [2, 10], [11]]
    with pytest.raises(TypeError, match="ChainDataset instead"):
        ConcatDataset([range(3), Rows()])


def test_argument_errors():
    with pytest.raises(ValueError, match="gives its own order, got shuffle=True"):
        DataLoader(Rows(), shuffle=True)
    with pytest.raises(ValueError, match="takes no sampler"):
        DataLoader(Rows(), sampler=SequentialSampler(range(3)))
    with pytest.raises(ValueError, match="takes no sampler"):
        DataLoader(Rows(), batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DataLoader(Rows(), batch_size=0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        DataLoader(list(range(4)), batch_size=None)   # unbatched loading is for iterable datasets
    with pytest.raises(TypeError, match="no __getitem__"):
        Rows()[0]
    with pytest.raises(TypeError, match="map-style dataset.*subclass IterableDataset"):
        DataLoader(iter(range(3)))
    DataLoader(Rows(), shuffle=False)                 # accepted, as in torch
