"""torch.utils.data.distributed's place in tg: ``DistributedSampler``, this rank's share of a dataset's
indices, with the contract of ``torch.utils.data.distributed.DistributedSampler``: every rank builds the
same (optionally shuffled) order of ``range(len(dataset))``, pads it by repeating its start (or drops
its tail with ``drop_last``) to a multiple of the world size, and takes every ``num_replicas``-th index
starting at its rank. ``pad=False`` is the evaluation mode: no padding and no dropping, so every element
is seen exactly once across ranks. ``tg.distributed.DistributedSampler`` is the same class."""
from __future__ import annotations

import sys
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np

from tg.utils.data.sampler import Sampler, _check_int, _EpochPosition, _is_int

__all__ = ["DistributedSampler"]


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

    ``state_dict()`` records the epoch, how many indices the running iterator yielded, and how much of the
    epoch's order all ranks took together (``consumed``: ranks in step take a prefix of it);
    ``load_state_dict`` makes the next iteration continue from there:

        >>> sampler = DistributedSampler(10, num_replicas=2, rank=0, seed=1)
        >>> it = iter(sampler); first = [next(it), next(it)]
        >>> state = sampler.state_dict(); state
        {'epoch': 0, 'position': 2, 'consumed': 4}
        >>> resumed = DistributedSampler(10, num_replicas=2, rank=0, seed=1)
        >>> resumed.load_state_dict(state)
        >>> first + list(resumed) == list(sampler)
        True

    At another world size (an elastic job that lost or gained a node) the rest of the epoch, from
    ``consumed`` on, is dealt out among the new ranks, so across the change every index is taken once:

        >>> rest = [DistributedSampler(10, num_replicas=3, rank=r, seed=1) for r in range(3)]
        >>> for s in rest: s.load_state_dict(state)
        >>> order = DistributedSampler(10, num_replicas=1, rank=0, seed=1, shuffle=True).indices().tolist()
        >>> sorted(sum((list(s) for s in rest), [])) == sorted(order[4:])    # 6 left: 2 for each of 3
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
            # the default group's, if there is one: one exists only where the distributed layer was loaded
            # (this layer does not load it: tg.distributed builds on tg.utils)
            dist: Any = sys.modules.get("tg.distributed")
            initialized = dist is not None and dist.is_initialized()
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
        self._start_at(0)

    def _start_at(self, start: int, loaded: bool = False) -> None:
        """Deal out the epoch's order from position `start` (0: the whole epoch, torch's split); a start
        loaded from a state serves the next pass only, as a loaded position does."""
        self.start, self._loaded_start = start, loaded
        left, replicas = self.dataset_len - start, self.num_replicas
        if not self.pad:
            self.num_samples = len(range(self.rank, left, replicas))
        else:
            # torch's ceil((n - replicas) / replicas) for drop_last with a remainder is n // replicas
            self.num_samples = left // replicas if self.drop_last else -(-left // replicas)
        self.total_size = self.num_samples * replicas if self.pad else left

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration uses (the shuffle seed is ``seed + epoch``); a
        new epoch is dealt out from its start."""
        changed = epoch != self.epoch
        super().set_epoch(epoch)
        if changed and self.start:
            self._start_at(0)

    def begin_pass(self) -> None:
        """A pass over the epoch begins (iter(), or a loader's pass): a loaded start serves one pass."""
        if self._loaded_start:
            self._loaded_start = False
        elif self.start:
            self._start_at(0)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch as an int64 array, from the start of the epoch (or
        from where a loaded state's ``consumed`` says the ranks were).

            >>> DistributedSampler(5, num_replicas=2, rank=1, shuffle=False).indices().tolist()
            [1, 3, 0]
        """
        n = self.dataset_len
        order = np.random.default_rng(self.seed + self.epoch).permutation(n) if self.shuffle else np.arange(n)
        # np.resize repeats the order cyclically (torch's padding: the epoch's first indices again) or
        # truncates it (drop_last)
        start = self.start
        padded = np.resize(order, start + self.total_size)[start:] if self.pad else order[start:]
        return padded[self.rank::self.num_replicas].astype(np.int64, copy=False)

    def consumed(self, taken: int | None = None) -> int:
        """How much of the epoch's order the ranks took together when each took `taken` indices (default:
        as many as this rank's running iterator yielded): a prefix, whatever the world size was."""
        taken = self._done if taken is None else taken
        return min(self.start + taken * self.num_replicas, self.dataset_len)

    def state_dict(self) -> dict[str, int]:
        return {**super().state_dict(), "consumed": self.consumed()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` says: with ``consumed``, deal the rest of that epoch's order out among
        this sampler's ranks (any world size); a state without it (``{'epoch', 'position'}``) is a
        position among the same ranks."""
        who = f"{self._PREFIX} {type(self).__name__}.load_state_dict"
        if not isinstance(state, dict) or "consumed" not in state:
            self._start_at(0)       # a position counts from the epoch's start
            super().load_state_dict(state)
            return
        consumed = state["consumed"]
        if not _is_int(consumed) or not 0 <= consumed <= self.dataset_len:
            raise ValueError(f"{who}: expected consumed in 0..{self.dataset_len} (the dataset's length), got "
                             f"{consumed!r}; was the state saved with another dataset?")
        super().load_state_dict({"epoch": state.get("epoch"), self._COUNT_KEY: 0})
        self._start_at(int(consumed), loaded=True)

    def __len__(self) -> int:
        return self.num_samples

    def _count_limit(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        self.begin_pass()
        start = self._begin()
        return self._yield_from(self.indices()[start:].tolist())

    def _yield_from(self, indices: list[int]) -> Iterator[int]:
        for index in indices:
            self._done += 1
            yield index
