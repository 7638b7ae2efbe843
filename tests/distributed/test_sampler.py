"""DistributedSampler (torch's contract, pad=False evaluation mode, resume) and DataLoader, in one process."""
import itertools
import math

import numpy as np
import pytest

import tg.distributed as dist
from tg.distributed.sampler import DataLoader, DistributedSampler


def shards(n, replicas, **kwargs):
    return [list(DistributedSampler(n, num_replicas=replicas, rank=r, **kwargs)) for r in range(replicas)]


def torch_reference(n, replicas, rank, drop_last, order=None):
    """torch's DistributedSampler.__iter__, written out step by step."""
    indices = list(range(n)) if order is None else list(order)
    if drop_last and n % replicas != 0:
        num_samples = math.ceil((n - replicas) / replicas)
    else:
        num_samples = math.ceil(n / replicas)
    total_size = num_samples * replicas
    if not drop_last:
        padding_size = total_size - len(indices)
        if padding_size <= len(indices):
            indices += indices[:padding_size]
        else:
            indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    else:
        indices = indices[:total_size]
    return indices[rank:total_size:replicas]


# --- torch's contract, hand-written -------------------------------------------------------------------------


def test_padded_no_shuffle_hand_written():
    assert shards(10, 3, shuffle=False) == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    assert shards(4, 2, shuffle=False) == [[0, 2], [1, 3]]
    assert shards(7, 1, shuffle=False) == [list(range(7))]


def test_drop_last_hand_written():
    assert shards(10, 3, shuffle=False, drop_last=True) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert shards(2, 5, shuffle=False, drop_last=True) == [[]] * 5
    assert len(DistributedSampler(10, num_replicas=3, rank=0, drop_last=True)) == 3


def test_padding_longer_than_data():
    assert shards(2, 5, shuffle=False) == [[0], [1], [0], [1], [0]]
    assert shards(1, 3, shuffle=False) == [[0], [0], [0]]
    assert shards(3, 8, shuffle=False) == [[0], [1], [2], [0], [1], [2], [0], [1]]


@pytest.mark.parametrize("n", [0, 1, 2, 5, 7, 10, 13, 64])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("drop_last", [False, True])
def test_matches_torch_rule(n, replicas, drop_last):
    for rank in range(replicas):
        s = DistributedSampler(n, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        want = torch_reference(n, replicas, rank, drop_last)
        assert list(s) == want and len(s) == len(want)
        assert s.total_size == len(s) * replicas


@pytest.mark.parametrize("n,replicas", [(13, 3), (7, 4), (2, 5), (100, 7)])
def test_shuffled_matches_torch_rule_on_the_same_permutation(n, replicas):
    for drop_last in (False, True):
        for rank in range(replicas):
            s = DistributedSampler(n, num_replicas=replicas, rank=rank, seed=5, drop_last=drop_last)
            s.set_epoch(3)
            order = np.random.default_rng(5 + 3).permutation(n).tolist()
            assert list(s) == torch_reference(n, replicas, rank, drop_last, order)


def test_dataset_with_len_and_yields_python_ints():
    s = DistributedSampler(np.zeros((6, 2)), num_replicas=2, rank=1, shuffle=False)
    got = list(s)
    assert got == [1, 3, 5] and all(type(i) is int for i in got)
    assert list(DistributedSampler(["a", "b", "c"], num_replicas=1, rank=0, shuffle=False)) == [0, 1, 2]


def test_empty_dataset():
    for kwargs in ({}, {"drop_last": True}, {"pad": False}):
        for s in (
            DistributedSampler(0, num_replicas=3, rank=2, **kwargs),
            DistributedSampler([], 1, 0, **kwargs),
        ):
            assert list(s) == [] and len(s) == 0 and s.indices().dtype == np.int64
            assert s.state_dict() == {"epoch": 0, "position": 0, "consumed": 0}


# --- shuffling ----------------------------------------------------------------------------------------------


def test_shuffle_deterministic_across_instances_and_ranks():
    for rank in range(3):
        a = DistributedSampler(17, num_replicas=3, rank=rank, seed=11)
        b = DistributedSampler(17, num_replicas=3, rank=rank, seed=11)
        a.set_epoch(4)
        b.set_epoch(4)
        assert list(a) == list(b) == list(a)  # and again: iterating does not change the order


def test_shuffle_epochs_and_seeds_differ():
    s = DistributedSampler(50, num_replicas=1, rank=0, seed=0)
    epoch0 = list(s)
    s.set_epoch(1)
    epoch1 = list(s)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1) == list(range(50))
    assert list(DistributedSampler(50, num_replicas=1, rank=0, seed=1)) != epoch0
    assert epoch0 != list(range(50))


@pytest.mark.parametrize("n,replicas", [(10, 3), (7, 2), (31, 4), (2, 5), (1, 1)])
def test_shuffle_union_covers_every_index(n, replicas):
    for epoch in range(3):
        parts = []
        for rank in range(replicas):
            s = DistributedSampler(n, num_replicas=replicas, rank=rank, seed=2)
            s.set_epoch(epoch)
            parts.append(list(s))
        assert len({len(p) for p in parts}) == 1
        flat = list(itertools.chain(*parts))
        assert set(flat) == set(range(n)) and len(flat) == math.ceil(n / replicas) * replicas


def test_drop_last_shuffled_ranks_are_disjoint():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n, replicas = int(rng.integers(0, 40)), int(rng.integers(1, 6))
        parts = shards(n, replicas, seed=3, drop_last=True)
        flat = list(itertools.chain(*parts))
        assert len(flat) == len(set(flat)) == (n // replicas) * replicas


# --- pad=False: unpadded evaluation -------------------------------------------------------------------------


def test_unpadded_hand_written():
    assert shards(10, 3, shuffle=False, pad=False) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert shards(2, 5, shuffle=False, pad=False) == [[0], [1], [], [], []]
    assert [len(DistributedSampler(10, 3, r, pad=False)) for r in range(3)] == [4, 3, 3]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unpadded_covers_each_index_exactly_once(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n, replicas = int(rng.integers(0, 50)), int(rng.integers(1, 8))
        for shuffle in (False, True):
            parts = shards(n, replicas, shuffle=shuffle, seed=seed, pad=False)
            assert sorted(itertools.chain(*parts)) == list(range(n))
            assert [len(p) for p in parts] == [len(DistributedSampler(n, replicas, r, pad=False))
                                                for r in range(replicas)]


# --- defaults from the process group, validation ------------------------------------------------------------


def test_defaults_without_a_process_group():
    assert not dist.is_initialized()
    s = DistributedSampler(5)
    assert (s.num_replicas, s.rank, s.shuffle, s.seed, s.drop_last, s.pad) == (1, 0, True, 0, False, True)
    assert DistributedSampler(5, num_replicas=4).rank == 0
    assert DistributedSampler(5, rank=0).num_replicas == 1


def test_defaults_from_the_process_group():
    dist.init_process_group()
    try:
        s = DistributedSampler(5)
        assert (s.num_replicas, s.rank) == (dist.get_world_size(), dist.get_rank()) == (1, 0)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("kwargs,match", [
    ({"num_replicas": 3, "rank": 3}, "rank must be in 0..2"),
    ({"num_replicas": 3, "rank": -1}, "rank must be >= 0"),
    ({"num_replicas": 0, "rank": 0}, "num_replicas must be >= 1"),
    ({"rank": 1}, "rank must be in 0..0"),
    ({"pad": False, "drop_last": True}, "drop_last=True needs pad=True"),
    ({"seed": -1}, "seed must be >= 0"),
])
def test_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=r"\[distributed\] DistributedSampler: " + match):
        DistributedSampler(10, **kwargs)


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="dataset with __len__"):
        DistributedSampler(object())
    with pytest.raises(TypeError, match="num_replicas must be an int"):
        DistributedSampler(10, num_replicas=2.0, rank=0)
    with pytest.raises(ValueError, match="dataset length must be >= 0"):
        DistributedSampler(-1)
    with pytest.raises(TypeError, match="epoch must be an int"):
        DistributedSampler(10).set_epoch("1")


# --- resume -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,replicas,pad", [(10, 3, True), (23, 4, True), (23, 4, False), (7, 1, True)])
def test_resume_gives_exactly_the_remaining_indices(n, replicas, pad):
    for rank in range(replicas):
        s = DistributedSampler(n, num_replicas=replicas, rank=rank, seed=9, pad=pad)
        s.set_epoch(2)
        full = list(s)
        for stop in range(len(full) + 1):
            it = iter(s)
            seen = [next(it) for _ in range(stop)]
            state = s.state_dict()
            assert state == {"epoch": 2, "position": stop, "consumed": min(stop * replicas, n)}
            fresh = DistributedSampler(n, num_replicas=replicas, rank=rank, seed=9, pad=pad)
            fresh.load_state_dict(state)
            # saving right after loading round-trips (the position now counts from where it resumed)
            assert fresh.state_dict() == {**state, "position": 0}
            assert seen + list(fresh) == full
            assert fresh.state_dict()["consumed"] == min(len(full) * replicas, n)
            fresh.load_state_dict({"epoch": 2, "position": stop})    # the same ranks, by position
            assert seen + list(fresh) == full
            assert list(fresh) == full  # the skip applies once


def test_resume_survives_set_epoch_of_the_same_epoch_only():
    s = DistributedSampler(12, num_replicas=2, rank=1)
    s.load_state_dict({"epoch": 3, "position": 4})
    s.set_epoch(3)  # the usual loop calls set_epoch(epoch) after loading: the skip stays
    assert len(list(s)) == 2
    s.load_state_dict({"epoch": 3, "position": 4})
    s.set_epoch(4)  # another epoch: the loaded position belonged to epoch 3
    assert s.state_dict() == {"epoch": 4, "position": 0, "consumed": 0} and len(list(s)) == 6


def test_position_counts_what_was_yielded():
    s = DistributedSampler(9, num_replicas=1, rank=0)
    it = iter(s)
    assert s.state_dict()["position"] == 0
    next(it)
    next(it)
    assert s.state_dict() == {"epoch": 0, "position": 2, "consumed": 2}
    list(it)
    assert s.state_dict() == {"epoch": 0, "position": 9, "consumed": 9}
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "position": 0, "consumed": 0}


@pytest.mark.parametrize("state,match", [
    ({"epoch": 0}, r"missing \['position'\]"),
    ({"position": 0}, r"missing \['epoch'\]"),
    ({"epoch": 0, "position": 0, "batches": 1}, r"unexpected \['batches'\]"),
    ({"epoch": "0", "position": 0}, "epoch='0' \\(str\\)"),
    ({"epoch": 0, "position": 1.5}, r"position=1.5 \(float\)"),
    ({"epoch": 0, "position": True}, r"position=True \(bool\)"),
    ({"epoch": 0, "position": 5}, r"position in 0..4"),
    ({"epoch": -1, "position": 0}, "epoch >= 0"),
    ([0, 0], "expected a dict"),
])
def test_load_state_dict_validates(state, match):
    s = DistributedSampler(10, num_replicas=3, rank=0)
    with pytest.raises(ValueError, match=match):
        s.load_state_dict(state)


def test_load_state_dict_accepts_numpy_ints():
    s = DistributedSampler(10, num_replicas=1, rank=0, shuffle=False)
    s.load_state_dict({"epoch": np.int64(0), "position": np.int64(8)})
    assert list(s) == [8, 9]


# --- DataLoader ---------------------------------------------------------------------------------------------


def reference_batches(order, batch_size, drop_last):
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return batches[:-1] if drop_last and batches and len(batches[-1]) < batch_size else batches


def test_loader_odd_sizes_hand_written():
    x = np.arange(7)
    assert [b.tolist() for b in DataLoader(x, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(x, 3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    assert len(DataLoader(x, 3)) == 3 and len(DataLoader(x, 3, drop_last=True)) == 2
    assert [b.tolist() for b in DataLoader(x, 7)] == [list(range(7))]
    assert [b.tolist() for b in DataLoader(x, 10, drop_last=True)] == []


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_loader_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    n, batch_size = int(rng.integers(1, 40)), int(rng.integers(1, 9))
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = rng.integers(0, 10, n)
    for shuffle, drop_last in itertools.product((False, True), repeat=2):
        loader = DataLoader((x, y), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
        loader.set_epoch(1)
        order = np.random.default_rng(seed + 1).permutation(n) if shuffle else np.arange(n)
        want = reference_batches(order, batch_size, drop_last)
        got = list(loader)
        assert len(got) == len(want) == len(loader)
        for (xb, yb), idx in zip(got, want):
            np.testing.assert_array_equal(xb, x[idx])
            np.testing.assert_array_equal(yb, y[idx])


def test_loader_with_distributed_sampler():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((23, 2))
    for rank in range(3):
        sampler = DistributedSampler(x, num_replicas=3, rank=rank, seed=4)
        loader = DataLoader(x, 4, sampler=sampler)
        loader.set_epoch(2)
        assert sampler.epoch == 2
        want = reference_batches(np.array(list(sampler)), 4, False)
        got = list(loader)
        assert len(got) == len(want) == len(loader) == 2
        for xb, idx in zip(got, want):
            np.testing.assert_array_equal(xb, x[idx])


def test_loader_with_a_plain_sampler_and_a_list_of_arrays():
    x, y = np.arange(6) * 2, np.arange(6) + 100
    got = list(DataLoader([x, y], 4, sampler=[5, 0, 3, 1, 2]))
    assert [(a.tolist(), b.tolist()) for a, b in got] == [([10, 0, 6, 2], [105, 100, 103, 101]), ([4], [102])]


def test_loader_map_style_dataset_gets_whole_index_arrays():
    class Squares:
        def __init__(self):
            self.calls = []

        def __len__(self):
            return 7

        def __getitem__(self, idx):
            self.calls.append(idx)
            return idx ** 2, idx

    data = Squares()
    loader = DataLoader(data, 3)
    got = list(loader)
    assert [a.tolist() for a, _ in got] == [[0, 1, 4], [9, 16, 25], [36]]
    assert all(isinstance(i, np.ndarray) and i.dtype == np.int64 for i in data.calls)
    data.calls.clear()
    loader.load_state_dict({"epoch": 0, "batches": 2})
    assert [a.tolist() for a, _ in loader] == [[36]]
    assert [i.tolist() for i in data.calls] == [[6]]  # the skipped batches were never read


@pytest.mark.parametrize("shuffle", [False, True])
def test_loader_resume_skips_exactly_the_yielded_batches(shuffle):
    x = np.arange(11)
    loader = DataLoader(x, 3, shuffle=shuffle, seed=7)
    loader.set_epoch(5)
    full = [b.tolist() for b in loader]
    for stop in range(len(full) + 1):
        it = iter(loader)
        seen = [next(it).tolist() for _ in range(stop)]
        state = loader.state_dict()
        assert state == {"epoch": 5, "batches": stop, "samples": min(3 * stop, 11)}
        fresh = DataLoader(x, 3, shuffle=shuffle, seed=7)
        fresh.load_state_dict(state)
        assert fresh.state_dict() == {**state, "batches": 0}     # batches count from where it resumed
        assert seen + [b.tolist() for b in fresh] == full
        assert [b.tolist() for b in fresh] == full  # once only


def test_loader_resume_with_distributed_sampler_restores_its_epoch():
    x = np.arange(20)
    loader = DataLoader(x, 2, sampler=DistributedSampler(x, num_replicas=2, rank=1, seed=3))
    loader.set_epoch(4)
    full = [b.tolist() for b in loader]
    fresh = DataLoader(x, 2, sampler=DistributedSampler(x, num_replicas=2, rank=1, seed=3))
    fresh.load_state_dict({"epoch": 4, "batches": 3})
    assert fresh.sampler.epoch == 4
    assert [b.tolist() for b in fresh] == full[3:]


def test_loader_empty_dataset():
    loader = DataLoader(np.zeros((0, 3)), 2)
    assert len(loader) == 0 and list(loader) == []


def test_loader_errors():
    with pytest.raises(ValueError, match=r"first dimension, got shapes \[\(5, 2\), \(4,\)\]"):
        DataLoader((np.zeros((5, 2)), np.zeros(4)), 2)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        DataLoader(np.zeros(4), 0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        DataLoader(np.zeros(4), 2.0)
    with pytest.raises(ValueError, match="both a sampler and shuffle=True"):
        DataLoader(np.zeros(4), 2, sampler=DistributedSampler(4), shuffle=True)
    with pytest.raises(TypeError, match="numpy array or a non-empty tuple"):
        DataLoader([1, 2, 3], 2)
    with pytest.raises(TypeError, match="numpy array or a non-empty tuple"):
        DataLoader((), 2)
    with pytest.raises(TypeError, match="numpy array or a non-empty tuple"):
        DataLoader(np.array(1.0), 2)
    with pytest.raises(TypeError, match="__len__ and __getitem__"):
        DataLoader(object(), 2)
    with pytest.raises(TypeError, match="sampler must have __len__"):
        DataLoader(np.zeros(4), 2, sampler=iter([0, 1]))
    loader = DataLoader(np.zeros(7), 3)
    with pytest.raises(ValueError, match=r"missing \['batches'\]"):
        loader.load_state_dict({"epoch": 0, "position": 1})
    with pytest.raises(ValueError, match=r"batches in 0..3"):
        loader.load_state_dict({"epoch": 0, "batches": 4})


# --- an elastic job: the world size changes in the middle of an epoch ---------------------------------------


def _lockstep(its, batches):
    """`batches` steps of every rank's loader iterator in step (or until one runs dry); the indices taken."""
    taken = []
    for _ in range(batches):
        step = [next(it, None) for it in its]
        if any(b is None for b in step):
            break
        taken += [int(i) for b in step for i in b]
    return taken


@pytest.mark.parametrize("seed", range(40))
def test_every_index_once_across_world_size_changes(seed):
    """Generated: a dataset, a batch size, world sizes changing two or three times at random steps (as an
    elastic job's checkpoints see them): across the changes no index is taken twice in the epoch, and
    what is left untaken is only the tail the last world size could not fill a step with."""
    rng = np.random.default_rng(seed)
    n, batch = int(rng.integers(20, 400)), int(rng.integers(1, 6))
    x = np.arange(n)
    state, taken, world = None, [], 1
    for _ in range(int(rng.integers(2, 5))):
        world = int(rng.integers(1, 6))
        if n < world * batch:
            break
        loaders = []
        for rank in range(world):
            sampler = DistributedSampler(n, num_replicas=world, rank=rank, seed=seed, drop_last=True)
            loader = DataLoader(x, batch, sampler=sampler, drop_last=True)
            if state is not None:
                loader.load_state_dict(state)
            loader.set_epoch(0)
            loaders.append(loader)
        its = [iter(loader) for loader in loaders]
        taken += _lockstep(its, int(rng.integers(0, len(loaders[0]) + 1)))
        states = [loader.state_dict() for loader in loaders]
        assert all(s == states[0] for s in states), states      # ranks in step agree on where they are
        state = states[0]
        assert state["samples"] == len(taken)
    if n >= world * batch:
        taken += _lockstep(its, n)
    assert len(taken) == len(set(taken)), "an index was taken twice in the epoch"
    assert n - len(taken) < world * batch + world, (n, len(taken), world, batch)


def test_resume_at_another_world_size_continues_the_same_order():
    """The rest of the epoch is the rest of the one shuffled order, dealt out among the new ranks."""
    n = 50
    order = DistributedSampler(n, num_replicas=1, rank=0, seed=4).indices().tolist()
    three = [DistributedSampler(n, num_replicas=3, rank=r, seed=4, drop_last=True) for r in range(3)]
    its = [iter(s) for s in three]
    first = [next(it) for _ in range(4) for it in its]
    assert sorted(first) == sorted(order[:12])
    state = three[0].state_dict()
    assert state["consumed"] == 12
    two = [DistributedSampler(n, num_replicas=2, rank=r, seed=4, drop_last=True) for r in range(2)]
    for s in two:
        s.load_state_dict(state)
    assert [list(s) for s in two] == [order[12::2][:19], order[13::2][:19]]
    assert [list(s) for s in two][0] == order[:50:2][:25], "a second pass is the whole epoch again"


def test_consumed_is_validated():
    s = DistributedSampler(10, num_replicas=2, rank=0)
    for bad in (-1, 11, 2.5, "3"):
        with pytest.raises(ValueError, match="consumed in 0..10"):
            s.load_state_dict({"epoch": 0, "consumed": bad})


def test_loader_state_follows_the_samplers_epoch_in_torchs_idiom():
    """torch's loop calls sampler.set_epoch(e) (never the loader's): the loader's state still resumes that
    epoch where it was, and a later sampler.set_epoch(e) keeps the place."""
    x = np.arange(48)
    sampler = DistributedSampler(48, num_replicas=2, rank=0, seed=5)
    loader = DataLoader(x, 4, sampler=sampler)
    sampler.set_epoch(3)
    it = iter(loader)
    first = [next(it).tolist() for _ in range(2)]
    state = loader.state_dict()
    assert state["epoch"] == 3 and state["samples"] == 16
    again = DistributedSampler(48, num_replicas=2, rank=0, seed=5)
    resumed = DataLoader(x, 4, sampler=again)
    resumed.load_state_dict(state)
    again.set_epoch(3)
    rest = [b.tolist() for b in resumed]
    assert first + rest == [b.tolist() for b in DataLoader(x, 4, sampler=sampler)]
    assert len(sum(first + rest, [])) == 24
