"""tg.utils.data: datasets, samplers, default_collate and DataLoader (serial and with worker processes)."""
import collections
import gc

import numpy as np
import pytest

import tg
from tg import Tensor
from tg.distributed.sampler import DistributedSampler as DistSampler
from tg.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)

X = np.arange(30, dtype=np.float32).reshape(10, 3)
Y = np.arange(10) * 7


class PerItem(Dataset):
    """__getitem__ only (one item at a time), items a tuple of an array, an int and a float."""

    def __init__(self, n=10, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not isinstance(i, int):
            raise TypeError(f"per-item dataset got {type(i).__name__}")
        if i == self.fail_at:
            raise KeyError(f"item {i} is broken")
        return X[i], int(Y[i]), float(i) / 2


def as_numpy(tree):
    if isinstance(tree, Tensor):
        return tree.numpy()
    if isinstance(tree, dict):
        return {k: as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [as_numpy(v) for v in tree]
    return tree


def assert_same_batches(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = as_numpy(g), as_numpy(w)
        assert type(g) is type(w)
        if isinstance(g, list):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(g, w)


def test_tensor_dataset_indexing_and_len():
    ds = TensorDataset(Tensor(X), Y)
    assert len(ds) == 10
    x, y = ds[4]
    assert isinstance(x, Tensor) and x.tolist() == X[4].tolist() and y == Y[4]
    with pytest.raises(ValueError, match=r"share their first dimension, got shapes \[\(10, 3\), \(4,\)\]"):
        TensorDataset(X, np.zeros(4))
    with pytest.raises(TypeError, match="tg Tensors or numpy arrays, got list"):
        TensorDataset(X, [1, 2])


@pytest.mark.parametrize("batch_size", [1, 3, 7])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_equal_numpy_slicing(batch_size, drop_last):
    ds = TensorDataset(X, Y)
    loader = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
    want = [(X[i:i + batch_size], Y[i:i + batch_size]) for i in range(0, 10, batch_size)]
    if drop_last and 10 % batch_size:
        want = want[:-1]
    got = list(loader)
    assert len(got) == len(want) == len(loader)
    assert len(loader.dataset) == 10
    for (xb, yb), (xw, yw) in zip(got, want):
        assert isinstance(xb, Tensor) and xb.dtype.name == "float32" and yb.dtype.name == "int64"
        np.testing.assert_array_equal(xb.numpy(), xw)
        np.testing.assert_array_equal(yb.numpy(), yw)
    per_item = list(DataLoader(PerItem(), batch_size=batch_size, drop_last=drop_last))
    assert len(per_item) == len(want)
    for (xb, yb, hb), (xw, yw) in zip(per_item, want):
        np.testing.assert_array_equal(xb.numpy(), xw)
        np.testing.assert_array_equal(yb.numpy(), yw)
        assert hb.dtype.name == "float64"


def test_fast_path_indexes_whole_arrays_and_subsets():
    ds = TensorDataset(X, Y)
    loader = DataLoader(ds, batch_size=4)
    assert loader._batch_fetch is not None
    sub = Subset(ds, [9, 2, 5])
    (xb, yb), = list(DataLoader(sub, batch_size=3))
    np.testing.assert_array_equal(xb.numpy(), X[[9, 2, 5]])
    got = [b.tolist() for b in DataLoader(Y, batch_size=4)]
    assert got == [Y[:4].tolist(), Y[4:8].tolist(), Y[8:].tolist()]


def test_getitems_hook_gets_the_whole_index_list():
    class Batched(Dataset):
        def __init__(self):
            self.calls = []

        def __len__(self):
            return 5

        def __getitem__(self, i):
            raise AssertionError("the loader should use __getitems__")

        def __getitems__(self, indices):
            self.calls.append(indices)
            return [{"i": i, "name": f"n{i}"} for i in indices]

    ds = Batched()
    got = list(DataLoader(ds, batch_size=2))
    assert ds.calls == [[0, 1], [2, 3], [4]]
    assert got[0]["i"].tolist() == [0, 1] and got[0]["name"] == ["n0", "n1"]


def test_shuffle_is_a_permutation_new_each_epoch_and_seedable():
    loader = DataLoader(np.arange(10), batch_size=3, shuffle=True, generator=123)
    epochs = [np.concatenate([b.numpy() for b in loader]).tolist() for _ in range(3)]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert epochs[0] != epochs[1] or epochs[1] != epochs[2]
    again = DataLoader(np.arange(10), batch_size=3, shuffle=True, generator=np.random.default_rng(123))
    assert [np.concatenate([b.numpy() for b in again]).tolist() for _ in range(3)] == epochs
    unseeded = [np.concatenate([b.numpy() for b in DataLoader(np.arange(50), 50, shuffle=True)]).tolist()
                for _ in range(2)]
    assert unseeded[0] != unseeded[1]


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_shuffle_without_a_generator_follows_manual_seed(seed):
    """As torch's default generator: after the same tg.manual_seed the same orders, epoch after epoch and
    loader after loader (random_split too); another seed, other orders."""
    def run(s: int) -> list:
        tg.manual_seed(s)
        loaders = [DataLoader(np.arange(40), batch_size=7, shuffle=True) for _ in range(2)]
        orders = [np.concatenate([b.numpy() for b in ld]).tolist() for ld in loaders for _ in range(2)]
        split = [list(part.indices) for part in random_split(range(30), [10, 20])]
        return orders + split
    first = run(seed)
    assert run(seed) == first and run(seed + 1) != first
    assert all(sorted(o) == list(range(40)) for o in first[:4]) and len(set(map(tuple, first[:4]))) == 4


def test_sampler_and_batch_sampler_are_honoured():
    got = [b.tolist() for b in DataLoader(np.arange(10) * 10, batch_size=2, sampler=[9, 0, 4, 4, 1])]
    assert got == [[90, 0], [40, 40], [10]]
    batches = [[3, 1], [0], [9, 8, 7]]
    loader = DataLoader(np.arange(10) * 10, batch_sampler=batches)
    assert len(loader) == 3 and [b.tolist() for b in loader] == [[30, 10], [0], [90, 80, 70]]
    loader = DataLoader(list(range(7)), batch_sampler=BatchSampler(SequentialSampler(range(7)), 3, True))
    assert [b.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(X, batch_size=2, batch_sampler=batches)
    with pytest.raises(ValueError, match="both a sampler and shuffle=True"):
        DataLoader(X, sampler=[0, 1], shuffle=True)


def test_distributed_sampler_is_the_same_class_and_works_here():
    assert DistributedSampler is DistSampler
    sampler = DistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
    got = [b.tolist() for b in DataLoader(np.arange(10), batch_size=2, sampler=sampler)]
    assert got == [[1, 3], [5, 7], [9]]


def test_default_collate_follows_torch_rules():
    ints = default_collate([1, 2, 3])
    assert ints.dtype.name == "int64" and ints.tolist() == [1, 2, 3]
    floats = default_collate([0.5, 1.5])
    assert floats.dtype.name == "float64" and floats.tolist() == [0.5, 1.5]
    assert default_collate([True, False]).dtype.name == "bool"
    assert default_collate(["a", "b"]) == ["a", "b"]
    stacked = default_collate([np.ones(2, np.float32), np.zeros(2, np.float32)])
    assert stacked.shape == (2, 2) and stacked.dtype.name == "float32"
    assert default_collate([np.int32(4), np.int32(5)]).dtype.name == "int32"
    assert default_collate([Tensor([1.0, 2.0]), Tensor([3.0, 4.0])]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    pairs = default_collate([(1, "x"), (2, "y")])
    assert isinstance(pairs, list) and pairs[0].tolist() == [1, 2] and pairs[1] == ["x", "y"]
    lists = default_collate([[1, 2], [3, 4]])
    assert isinstance(lists, list) and [t.tolist() for t in lists] == [[1, 3], [2, 4]]
    nested = default_collate([{"a": 1, "b": {"c": 0.5}}, {"a": 2, "b": {"c": 1.5}}])
    assert nested["a"].tolist() == [1, 2] and nested["b"]["c"].tolist() == [0.5, 1.5]
    Point = collections.namedtuple("Point", "x y")
    point = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(point, Point) and point.x.tolist() == [1, 3]
    with pytest.raises(ValueError, match="equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"shapes \[\(2,\), \(3,\)\]"):
        default_collate([np.ones(2), np.ones(3)])
    with pytest.raises(TypeError, match="got object"):
        default_collate([object()])


def test_custom_collate_fn_gets_the_items():
    loader = DataLoader(TensorDataset(X, Y), batch_size=4, collate_fn=lambda items: len(items))
    assert list(loader) == [4, 4, 2]


def test_concat_subset_random_split():
    ds = ConcatDataset([[1, 2], [3, 4, 5]])
    assert len(ds) == 5 and [ds[i] for i in range(5)] == [1, 2, 3, 4, 5]
    with pytest.raises(IndexError):
        ds[5]
    parts = random_split(range(10), [3, 7], generator=1)
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    assert [list(p) for p in random_split(range(10), [3, 7], generator=1)] == [list(p) for p in parts]
    assert [len(p) for p in random_split(range(11), [0.5, 0.5], generator=0)] == [6, 5]
    with pytest.raises(ValueError, match="lengths sum to 9, the dataset has 10"):
        random_split(range(10), [4, 5])


def test_random_sampler_with_replacement_and_num_samples():
    s = RandomSampler(range(4), num_samples=10, generator=0)
    got = list(s)
    assert len(got) == len(s) == 10 and sorted(got[:4]) == [0, 1, 2, 3]
    r = list(RandomSampler(range(3), replacement=True, num_samples=20, generator=0))
    assert len(r) == 20 and set(r) <= {0, 1, 2}


@pytest.mark.parametrize("dataset", ["tensors", "per_item"])
def test_workers_give_the_same_batches_in_order(dataset):
    ds = TensorDataset(X, Y) if dataset == "tensors" else PerItem()
    serial = list(DataLoader(ds, batch_size=3))
    loader = DataLoader(ds, batch_size=3, num_workers=2)
    assert_same_batches(list(loader), serial)
    assert_same_batches(list(loader), serial)  # a second epoch starts fresh workers
    assert_same_batches(list(DataLoader(ds, batch_size=1, num_workers=2, prefetch_factor=1)),
                        list(DataLoader(ds, batch_size=1)))


def test_workers_with_dicts_strings_sampler_and_custom_collate():
    class Records(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return {"id": i, "name": f"r{i}", "x": np.full(2, i, np.int16), "s": np.float32(i)}

    order = [5, 3, 1, 0, 2, 4]
    serial = list(DataLoader(Records(), batch_size=4, sampler=order))
    parallel = list(DataLoader(Records(), batch_size=4, sampler=order, num_workers=3))
    for a, b in zip(serial, parallel):
        assert a["name"] == b["name"] and b["x"].dtype.name == "int16" and b["s"].dtype.name == "float32"
        assert a["id"].tolist() == b["id"].tolist() and a["x"].tolist() == b["x"].tolist()
    ids = [[r["id"] for r in items] for items in
           DataLoader(Records(), batch_size=4, sampler=order, num_workers=2, collate_fn=list)]
    assert ids == [[5, 3, 1, 0], [2, 4]]


def test_persistent_workers_and_worker_init_fn():
    loader = DataLoader(PerItem(), batch_size=2, num_workers=2, persistent_workers=True,
                        worker_init_fn=lambda worker_id: None)
    first = list(loader)
    pool = loader._pool
    it = iter(loader)
    next(it)
    del it  # dropped mid-epoch: the pool stays, without stale batches
    gc.collect()
    assert loader._pool is pool and all(p.is_alive() for p in pool.procs)
    assert_same_batches(list(loader), first)
    procs = pool.procs
    del loader, pool
    gc.collect()
    for p in procs:
        p.join(5)
        assert not p.is_alive()


def test_worker_errors_name_the_worker_and_batch():
    loader = DataLoader(PerItem(fail_at=7), batch_size=3, num_workers=2)
    it = iter(loader)
    assert len([next(it), next(it)]) == 2
    with pytest.raises(KeyError, match=r"worker 0 raised KeyError while loading batch 2: .*item 7 is broken"):
        next(it)

    class Objects(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return object()

    match = r"worker 0 raised TypeError while loading batch 0: .*type object.*num_workers=0"
    with pytest.raises(TypeError, match=match):
        list(DataLoader(Objects(), batch_size=2, num_workers=2, collate_fn=list))
    assert [len(b) for b in DataLoader(Objects(), batch_size=2, collate_fn=list)] == [2, 2]

    def bad_init(worker_id):
        raise RuntimeError(f"init failed in {worker_id}")

    match = "worker 0 raised RuntimeError while loading batch 0: init failed in 0"
    with pytest.raises(RuntimeError, match=match):
        list(DataLoader(PerItem(), batch_size=2, num_workers=2, worker_init_fn=bad_init))


def test_workers_shut_down_at_the_end_and_when_dropped():
    loader = DataLoader(PerItem(), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    procs = it.gi_frame.f_locals["pool"].procs
    assert all(p.is_alive() for p in procs)
    del it
    gc.collect()
    for p in procs:
        p.join(5)
        assert not p.is_alive()


def test_argument_errors():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        DataLoader(X, batch_size=0)
    with pytest.raises(ValueError, match="need num_workers > 0"):
        DataLoader(X, prefetch_factor=2)
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        DataLoader(X, num_workers=-1)
    with pytest.raises(TypeError, match="map-style dataset"):
        DataLoader(iter(range(3)))
    with pytest.raises(TypeError, match="generator must be None, an int seed"):
        DataLoader(X, shuffle=True, generator="seed")
    DataLoader(X, pin_memory=True, timeout=5)  # accepted


def test_loader_state_dict_resumes_with_a_distributed_sampler():
    sampler = DistributedSampler(10, num_replicas=1, rank=0, seed=3)
    loader = DataLoader(TensorDataset(X), batch_size=3, sampler=sampler)
    loader.set_epoch(2)
    full = [b[0].tolist() for b in loader]
    fresh = DataLoader(TensorDataset(X), batch_size=3, sampler=DistributedSampler(10, 1, 0, seed=3))
    fresh.load_state_dict({"epoch": 2, "batches": 2})
    assert [b[0].tolist() for b in fresh] == full[2:]


def test_distributed_loader_is_this_loader_yielding_numpy_with_workers():
    from tg.distributed.sampler import DataLoader as NumpyLoader

    assert issubclass(NumpyLoader, DataLoader)
    x, y = np.arange(20) * 3, np.arange(20)
    serial = list(NumpyLoader((x, y), 3, shuffle=True, seed=5))
    parallel = list(NumpyLoader((x, y), 3, shuffle=True, seed=5, num_workers=2))
    assert all(isinstance(a, np.ndarray) for batch in parallel for a in batch)
    assert [(a.tolist(), b.tolist()) for a, b in serial] == [(a.tolist(), b.tolist()) for a, b in parallel]


def test_a_slow_consumer_can_drop_workers_blocked_on_big_batches():
    import time

    loader = DataLoader(np.zeros((64, 256, 256), np.float32), batch_size=8, num_workers=2, prefetch_factor=4)
    it = iter(loader)
    next(it)
    procs = it.gi_frame.f_locals["pool"].procs
    time.sleep(0.2)  # the workers fill their pipes and block sending
    it.close()
    # each ended on its own when its pipe closed: exit code 0, not the -SIGTERM that close() gives a
    # worker still alive after its 2 s join (a count, not a wall-clock bound, on a shared machine)
    assert [p.exitcode for p in procs] == [0, 0]


def test_worker_timeout_and_a_dying_worker_raise_clearly():
    import os
    import time

    class Slow(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            time.sleep(1)
            return i

    with pytest.raises(RuntimeError, match=r"worker 0 \(pid \d+\) gave no batch 0 within timeout=0.2s"):
        list(DataLoader(Slow(), batch_size=2, num_workers=1, timeout=0.2))

    class Dies(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            os._exit(3)

    with pytest.raises(RuntimeError, match=r"worker 0 \(pid \d+\) exited unexpectedly \(exit code 3\) while "
                                           r"loading batch 0"):
        list(DataLoader(Dies(), batch_size=2, num_workers=2))
