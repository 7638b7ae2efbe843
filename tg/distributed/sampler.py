"""Data sharding for data-parallel training: which indices each rank reads, and batches of them.

``DistributedSampler`` has the contract of ``torch.utils.data.distributed.DistributedSampler``:
every rank builds the same (optionally shuffled) order of ``range(len(dataset))``, pads it by
repeating its start (or drops its tail with ``drop_last``) to a multiple of the world size, and
takes every ``num_replicas``-th index starting at its rank. ``pad=False`` is the evaluation mode:
no padding and no dropping, so every element is seen exactly once across ranks.

``DataLoader`` batches numpy arrays (or a dataset that takes a whole index array at once) in the
order of a sampler. Both can save where they are in an epoch and resume there:

    >>> import numpy as np
    >>> x = np.arange(10) * 10
    >>> sampler = DistributedSampler(x, num_replicas=2, rank=1, shuffle=False)
    >>> loader = DataLoader(x, batch_size=2, sampler=sampler)
    >>> [batch.tolist() for batch in loader]
    [[10, 30], [50, 70], [90]]
"""
from __future__ import annotations

import numbers
from collections.abc import Iterator, Sized
from typing import Any, ClassVar, Protocol

import numpy as np


class Sampler(Protocol):
    """What ``DataLoader`` needs from a sampler: a length and an iterable of int indices."""

    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(who: str, name: str, value: Any, minimum: int) -> int:
    if not _is_int(value):
        raise TypeError(f"[distributed] {who}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"[distributed] {who}: {name} must be >= {minimum}, got {value}")
    return int(value)


class _EpochPosition:
    """Epoch number plus how far the running iterator got into that epoch, shared by the sampler
    (counting indices) and the loader (counting batches) so both save and resume the same way."""

    _COUNT_KEY: ClassVar[str]

    def __init__(self) -> None:
        self.epoch = 0
        self._done = 0  # items yielded so far in this epoch by the running iterator
        self._skip = 0  # items the next iterator skips (set by load_state_dict, used once)

    def _count_limit(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration uses (the shuffle seed is ``seed + epoch``).

        A position loaded by ``load_state_dict`` is kept only if ``epoch`` is the loaded epoch.
        """
        epoch = _check_int(f"{type(self).__name__}.set_epoch", "epoch", epoch, 0)
        if epoch != self.epoch:
            self._done = self._skip = 0
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        """The epoch and how many items of it were yielded so far; give it to ``load_state_dict`` to
        resume."""
        return {"epoch": self.epoch, self._COUNT_KEY: self._done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the epoch and make the next iteration (only the next) skip the items already yielded."""
        who = f"{type(self).__name__}.load_state_dict"
        keys = {"epoch", self._COUNT_KEY}
        if not isinstance(state, dict):
            raise ValueError(f"[distributed] {who}: expected a dict with keys {sorted(keys)}, "
                             f"got {type(state).__name__}; pass what state_dict() returned")
        missing, unexpected = sorted(keys - state.keys()), sorted(set(state) - keys)
        if missing or unexpected:
            raise ValueError(
                f"[distributed] {who}: expected keys {sorted(keys)}, missing {missing}, "
                f"unexpected {unexpected}; pass what {type(self).__name__}.state_dict() returned"
            )
        wrong = [
            f"{k}={state[k]!r} ({type(state[k]).__name__})" for k in sorted(keys) if not _is_int(state[k])
        ]
        if wrong:
            raise ValueError(f"[distributed] {who}: expected int values, got {', '.join(wrong)}")
        epoch, count, limit = int(state["epoch"]), int(state[self._COUNT_KEY]), self._count_limit()
        if epoch < 0 or not 0 <= count <= limit:
            raise ValueError(
                f"[distributed] {who}: expected epoch >= 0 and {self._COUNT_KEY} in 0..{limit}, "
                f"got epoch={epoch}, {self._COUNT_KEY}={count}; was the state saved with another "
                "dataset size, world size or batch size?"
            )
        self.set_epoch(epoch)
        self._done = self._skip = count

    def _begin(self) -> int:
        """Start a pass over the epoch: return how many items to skip, and forget the skip for later
        passes."""
        start, self._skip = self._skip, 0
        self._done = start
        return start


class DistributedSampler(_EpochPosition):
    """This rank's share of the indices of a dataset, with torch's ``DistributedSampler`` contract.

    ``dataset`` is anything with ``len()`` or an int length. ``num_replicas`` and ``rank`` default to
    the world size and rank of the default process group, or 1 and 0 when none is initialized.
    Call ``set_epoch(epoch)`` before each epoch so shuffling differs between epochs.

        >>> [list(DistributedSampler(10, num_replicas=3, rank=r, shuffle=False)) for r in range(3)]
        [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
        >>> list(DistributedSampler(10, num_replicas=3, rank=0, shuffle=False, drop_last=True))
        [0, 3, 6]
        >>> [list(DistributedSampler(10, num_replicas=3, rank=r, shuffle=False, pad=False)) for r in range(3)]
        [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]

    ``state_dict()`` records the epoch and how many indices the running iterator yielded;
    ``load_state_dict`` makes the next iteration continue from there:

        >>> sampler = DistributedSampler(10, num_replicas=2, rank=0, seed=1)
        >>> it = iter(sampler); first = [next(it), next(it)]
        >>> state = sampler.state_dict(); state
        {'epoch': 0, 'position': 2}
        >>> resumed = DistributedSampler(10, num_replicas=2, rank=0, seed=1)
        >>> resumed.load_state_dict(state)
        >>> first + list(resumed) == list(sampler)
        True
    """

    _COUNT_KEY = "position"

    def __init__(self, dataset: Sized | int, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, pad: bool = True) -> None:
        super().__init__()
        who = "DistributedSampler"
        if _is_int(dataset):
            self.dataset_len = _check_int(who, "dataset length", dataset, 0)
        elif isinstance(dataset, Sized):
            self.dataset_len = len(dataset)
        else:
            raise TypeError(f"[distributed] {who}: expected a dataset with __len__ or an int length, "
                            f"got {type(dataset).__name__}")
        if num_replicas is None or rank is None:
            from tg import distributed as dist  # lazy: tg/distributed/__init__.py may import this module
            initialized = dist.is_initialized()
            num_replicas = (
                (dist.get_world_size() if initialized else 1) if num_replicas is None else num_replicas
            )
            rank = (dist.get_rank() if initialized else 0) if rank is None else rank
        self.num_replicas = _check_int(who, "num_replicas", num_replicas, 1)
        self.rank = _check_int(who, "rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(
                f"[distributed] {who}: rank must be in 0..{self.num_replicas - 1} for num_replicas="
                f"{self.num_replicas}, got rank {self.rank}"
            )
        if drop_last and not pad:
            raise ValueError(
                f"[distributed] {who}: drop_last=True needs pad=True (pad=False already gives every "
                "element exactly once); pass one of them"
            )
        self.shuffle, self.seed = bool(shuffle), _check_int(who, "seed", seed, 0)
        self.drop_last, self.pad = bool(drop_last), bool(pad)
        n, replicas = self.dataset_len, self.num_replicas
        if not pad:
            self.num_samples = len(range(self.rank, n, replicas))
        else:
            # torch's ceil((n - replicas) / replicas) for drop_last with a remainder is n // replicas
            self.num_samples = n // replicas if drop_last else -(-n // replicas)
        self.total_size = self.num_samples * replicas if pad else n

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch as an int64 array, from the start of the epoch.

            >>> DistributedSampler(5, num_replicas=2, rank=1, shuffle=False).indices().tolist()
            [1, 3, 0]
        """
        n = self.dataset_len
        order = np.random.default_rng(self.seed + self.epoch).permutation(n) if self.shuffle else np.arange(n)
        # np.resize repeats the order cyclically (torch's padding) or truncates it (drop_last)
        padded = np.resize(order, self.total_size) if self.pad else order
        return padded[self.rank::self.num_replicas].astype(np.int64, copy=False)

    def __len__(self) -> int:
        return self.num_samples

    def _count_limit(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        start = self._begin()
        return self._yield_from(self.indices()[start:].tolist())

    def _yield_from(self, indices: list[int]) -> Iterator[int]:
        for index in indices:
            self._done += 1
            yield index


class DataLoader(_EpochPosition):
    """Batches of a numpy-backed dataset in the order of a sampler.

    ``dataset`` is a numpy array, a tuple or list of numpy arrays with the same first dimension, or
    an object with ``__len__`` and ``__getitem__(index_array)`` that takes a whole int64 index array.
    Each batch is ``array[idx]``, a tuple ``(a[idx], b[idx], ...)``, or ``dataset[idx]`` respectively.
    Without a sampler the order is ``range(len(dataset))``, or with ``shuffle`` a permutation seeded
    by ``seed + epoch``.

        >>> x, y = np.arange(7) * 10, np.arange(7)
        >>> [(xb.tolist(), yb.tolist()) for xb, yb in DataLoader((x, y), batch_size=3)]
        [([0, 10, 20], [0, 1, 2]), ([30, 40, 50], [3, 4, 5]), ([60], [6])]
        >>> len(DataLoader(x, batch_size=3, drop_last=True))
        2

    ``state_dict()`` counts the batches yielded in this epoch; after ``load_state_dict`` the next
    iteration skips them without reading them:

        >>> loader = DataLoader(x, batch_size=3)
        >>> loader.load_state_dict({"epoch": 0, "batches": 2})
        >>> [b.tolist() for b in loader]
        [[60]]
    """

    _COUNT_KEY = "batches"

    def __init__(self, dataset: Any, batch_size: int, sampler: Sampler | None = None, drop_last: bool = False,
                 shuffle: bool = False, seed: int = 0) -> None:
        super().__init__()
        who = "DataLoader"
        self.batch_size = _check_int(who, "batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)
        self._arrays: tuple[np.ndarray, ...] | None = None  # None: dataset[idx] does the indexing
        self._single = isinstance(dataset, np.ndarray)
        if isinstance(dataset, (np.ndarray, tuple, list)):
            arrays = (dataset,) if isinstance(dataset, np.ndarray) else tuple(dataset)
            if not arrays or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in arrays):
                raise TypeError(f"[distributed] {who}: expected a numpy array or a non-empty tuple of numpy "
                                f"arrays with at least one dimension, got {_describe(dataset)}; "
                                "wrap data with np.asarray")
            if len({a.shape[0] for a in arrays}) > 1:
                raise ValueError(f"[distributed] {who}: arrays must share their first dimension, got shapes "
                                 f"{[a.shape for a in arrays]}; pass arrays with one row per example")
            self._arrays, length = arrays, arrays[0].shape[0]
        elif isinstance(dataset, Sized) and hasattr(dataset, "__getitem__"):
            length = len(dataset)
        else:
            raise TypeError(f"[distributed] {who}: expected numpy arrays or an object with __len__ and "
                            f"__getitem__, got {type(dataset).__name__}")
        self.dataset = dataset
        if sampler is None:
            # one index path: the default order is a one-replica sampler's
            sampler = DistributedSampler(length, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
        elif shuffle:
            raise ValueError(
                f"[distributed] {who}: got both a sampler and shuffle=True; shuffle in the sampler "
                "(DistributedSampler(..., shuffle=True)) and leave shuffle=False here"
            )
        elif not isinstance(sampler, Sized):
            raise TypeError(
                f"[distributed] {who}: the sampler must have __len__, got {type(sampler).__name__}"
            )
        self.sampler = sampler

    def __len__(self) -> int:
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def _count_limit(self) -> int:
        return len(self)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch for this loader and its sampler (which reshuffles with ``seed + epoch``)."""
        super().set_epoch(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)

    def __iter__(self) -> Iterator[Any]:
        start = self._begin()
        if isinstance(self.sampler, DistributedSampler):
            order = self.sampler.indices()  # not iter(): the loader, not the sampler, tracks the position
        else:
            order = np.fromiter(self.sampler, dtype=np.int64)
        return self._batches(order, start)

    def _batches(self, order: np.ndarray, start: int) -> Iterator[Any]:
        for batch in range(start, len(self)):
            idx = order[batch * self.batch_size:(batch + 1) * self.batch_size]
            self._done += 1
            yield self._fetch(idx)

    def _fetch(self, idx: np.ndarray) -> Any:
        if self._arrays is None:
            return self.dataset[idx]
        if self._single:
            return self._arrays[0][idx]
        return tuple(a[idx] for a in self._arrays)


def _describe(dataset: Any) -> str:
    if isinstance(dataset, np.ndarray):
        return f"a {dataset.ndim}-d array"
    return f"{type(dataset).__name__} of {sorted({type(a).__name__ for a in dataset})}"
