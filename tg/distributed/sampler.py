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

from collections.abc import Sized
from typing import Any

import numpy as np

from tg.utils import data as _data
from tg.utils.data import Sampler
from tg.utils.data.distributed import DistributedSampler

__all__ = ["DistributedSampler", "DataLoader", "Sampler"]


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
