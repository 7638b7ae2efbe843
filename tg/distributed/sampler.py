"""Data sharding for data-parallel training: which indices each rank reads, and batches of them.

``DistributedSampler`` has the contract of ``torch.utils.data.distributed.DistributedSampler``:
every rank builds the same (optionally shuffled) order of ``range(len(dataset))``, pads it by
repeating its start (or drops its tail with ``drop_last``) to a multiple of the world size, and
takes every ``num_replicas``-th index starting at its rank. ``pad=False`` is the evaluation mode:
no padding and no dropping, so every element is seen exactly once across ranks.

``DataLoader`` is ``tg.utils.data.DataLoader`` for numpy data: it batches numpy arrays (or a dataset
that takes a whole index array at once) in the order of a sampler and yields numpy arrays. Both can
save where they are in an epoch and resume there:

    >>> import numpy as np
    >>> x = np.arange(10) * 10
    >>> sampler = DistributedSampler(x, num_replicas=2, rank=1, shuffle=False)
    >>> loader = DataLoader(x, batch_size=2, sampler=sampler)
    >>> [batch.tolist() for batch in loader]
    [[10, 30], [50, 70], [90]]
"""
from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import numpy as np

from tg.utils import data as _data
from tg.utils.data import Sampler, _check_int, _EpochPosition, _is_int

__all__ = ["DistributedSampler", "DataLoader", "Sampler"]


class DistributedSampler(_EpochPosition, Sampler):
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
    _PREFIX = "[distributed]"

    def __init__(self, dataset: Sized | int, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, pad: bool = True) -> None:
        super().__init__()
        who = "[distributed] DistributedSampler"
        if _is_int(dataset):
            self.dataset_len = _check_int(who, "dataset length", dataset, 0)
        elif isinstance(dataset, Sized):
            self.dataset_len = len(dataset)
        else:
            raise TypeError(f"{who}: expected a dataset with __len__ or an int length, "
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
                f"{who}: rank must be in 0..{self.num_replicas - 1} for num_replicas="
                f"{self.num_replicas}, got rank {self.rank}"
            )
        if drop_last and not pad:
            raise ValueError(
                f"{who}: drop_last=True needs pad=True (pad=False already gives every "
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


class DataLoader(_data.DataLoader):
    """``tg.utils.data.DataLoader`` for numpy-backed data, yielding numpy arrays (not Tensors).

    ``dataset`` is a numpy array, a tuple or list of numpy arrays with the same first dimension, or
    an object with ``__len__`` and ``__getitem__(index_array)`` that takes a whole int64 index array.
    Each batch is ``array[idx]``, a tuple ``(a[idx], b[idx], ...)``, or ``dataset[idx]`` respectively.
    Without a sampler the order is ``range(len(dataset))``, or with ``shuffle`` a permutation seeded
    by ``seed + epoch``. ``num_workers`` loads batches in worker processes, as in tg.utils.data.

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

    _PREFIX = "[distributed]"

    def __init__(self, dataset: Any, batch_size: int, sampler: Any = None, drop_last: bool = False,
                 shuffle: bool = False, seed: int = 0, num_workers: int = 0) -> None:
        who = "[distributed] DataLoader"
        if isinstance(dataset, (np.ndarray, tuple, list)):
            arrays = (dataset,) if isinstance(dataset, np.ndarray) else tuple(dataset)
            if not arrays or not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in arrays):
                raise TypeError(f"{who}: expected a numpy array or a non-empty tuple of numpy "
                                f"arrays with at least one dimension, got {_describe(dataset)}; "
                                "wrap data with np.asarray")
            if len({a.shape[0] for a in arrays}) > 1:
                raise ValueError(f"{who}: arrays must share their first dimension, got shapes "
                                 f"{[a.shape for a in arrays]}; pass arrays with one row per example")
            length = arrays[0].shape[0]
        elif isinstance(dataset, Sized) and hasattr(dataset, "__getitem__"):
            length = len(dataset)
        else:
            raise TypeError(f"{who}: expected numpy arrays or an object with __len__ and "
                            f"__getitem__, got {type(dataset).__name__}")
        if sampler is None:
            # one index path: the default order is a one-replica sampler's
            sampler = DistributedSampler(length, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
        elif shuffle:
            raise ValueError(
                f"{who}: got both a sampler and shuffle=True; shuffle in the sampler "
                "(DistributedSampler(..., shuffle=True)) and leave shuffle=False here"
            )
        super().__init__(dataset, batch_size, sampler=sampler, drop_last=drop_last, num_workers=num_workers)

    def _batch_fetcher(self, dataset: Any) -> Any:
        """Every dataset here is fetched a whole index array at a time."""
        if isinstance(dataset, (tuple, list)):
            return lambda idx: tuple(a[idx] for a in dataset)
        return dataset.__getitem__

    def _output(self, batch: Any) -> Any:
        """Batches stay numpy arrays."""
        return batch


def _describe(dataset: Any) -> str:
    if isinstance(dataset, np.ndarray):
        return f"a {dataset.ndim}-d array"
    return f"{type(dataset).__name__} of {sorted({type(a).__name__ for a in dataset})}"
