"""torch.utils.data.sampler's place in tg: the samplers (an order of dataset indices) and the
position-in-epoch bookkeeping that lets a sampler or a loader resume mid-epoch."""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Sized
from typing import Any, ClassVar

import numpy as np

from tg.core import random


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(who: str, name: str, value: Any, minimum: int) -> int:
    """``who`` carries the subsystem prefix, e.g. ``[data] DataLoader``."""
    if not _is_int(value):
        raise TypeError(f"{who}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{who}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _numpy_rng(generator: Any, who: str) -> np.random.Generator:
    """None: seeded from tg's global seed (``tg.manual_seed``; the next ``random.host_seed``, as torch
    seeds from its default generator); an int: that seed; a numpy Generator: itself; a tg/torch-like
    Generator: seeded from its ``initial_seed()``."""
    if generator is None:
        return np.random.default_rng(random.host_seed())
    if _is_int(generator):
        return np.random.default_rng(int(generator))
    if isinstance(generator, np.random.Generator):
        return generator
    if callable(getattr(generator, "initial_seed", None)):
        return np.random.default_rng(int(generator.initial_seed()))
    raise TypeError(f"[data] {who}: generator must be None, an int seed, a numpy Generator or a "
                    f"tg.Generator, got {type(generator).__name__}")


class Sampler:
    """Base class of samplers: an iterable of dataset indices with a length. A DataLoader also takes
    any sized iterable of ints (a list, a range) as a sampler.

        >>> class Backwards(Sampler):
        ...     def __init__(self, n):
        ...         self.n = n
        ...     def __iter__(self):
        ...         return iter(range(self.n - 1, -1, -1))
        ...     def __len__(self):
        ...         return self.n
        >>> list(Backwards(3))
        [2, 1, 0]
    """

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"[data] {type(self).__name__}: subclasses of Sampler define __iter__")

    def __len__(self) -> int:
        raise NotImplementedError(f"[data] {type(self).__name__}: subclasses of Sampler define __len__")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``.

        >>> list(SequentialSampler("abc"))
        [0, 1, 2]
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new random order of ``data_source``'s indices each pass (each epoch). ``generator``: None
    (seeded from ``tg.manual_seed``'s sequence, as torch's default generator), an int seed, a numpy
    Generator or a tg.Generator; each makes the sequence of epochs repeatable. ``replacement=True``
    draws ``num_samples`` indices independently.

        >>> s = RandomSampler(range(5), generator=0)
        >>> first, second = list(s), list(s)
        >>> sorted(first), first != second, first == list(RandomSampler(range(5), generator=0))
        ([0, 1, 2, 3, 4], True, True)
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None,
                 generator: Any = None) -> None:
        self.data_source, self.replacement, self.generator = data_source, bool(replacement), generator
        self._num_samples = None if num_samples is None else _check_int(
            "[data] RandomSampler", "num_samples", num_samples, 1)
        # None: a generator per pass, seeded then from tg's sequence (torch draws each epoch's seed from
        # its default generator when the pass starts, so manual_seed before a pass fixes its order)
        self._rng = None if generator is None else _numpy_rng(generator, "RandomSampler")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, count = len(self.data_source), self.num_samples
        rng = self._rng if self._rng is not None else _numpy_rng(None, "RandomSampler")
        if self.replacement:
            return iter(rng.integers(0, n, count).tolist())
        if n == 0:
            return iter([])
        # torch's rule for num_samples > n: whole permutations, then part of one more
        whole = [rng.permutation(n) for _ in range(count // n)]
        return iter(np.concatenate([*whole, rng.permutation(n)[:count % n]]).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``; the last one shorter unless ``drop_last``.

        >>> list(BatchSampler(range(7), 3, drop_last=False)), len(BatchSampler(range(7), 3, True))
        ([[0, 1, 2], [3, 4, 5], [6]], 2)
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        self.sampler = sampler
        self.batch_size = _check_int("[data] BatchSampler", "batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class _EpochPosition:
    """Epoch number plus how far the running iterator got into that epoch, shared by samplers
    (counting indices) and loaders (counting batches) so both save and resume the same way."""

    _COUNT_KEY: ClassVar[str]
    _PREFIX: ClassVar[str] = "[data]"

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
        epoch = _check_int(f"{self._PREFIX} {type(self).__name__}.set_epoch", "epoch", epoch, 0)
        if epoch != self.epoch:
            self._done = self._skip = 0
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        """The epoch and how many items of it were yielded so far; give it to ``load_state_dict`` to
        resume."""
        return {"epoch": self.epoch, self._COUNT_KEY: self._done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the epoch and make the next iteration (only the next) skip the items already yielded."""
        who = f"{self._PREFIX} {type(self).__name__}.load_state_dict"
        keys = {"epoch", self._COUNT_KEY}
        if not isinstance(state, dict):
            raise ValueError(f"{who}: expected a dict with keys {sorted(keys)}, "
                             f"got {type(state).__name__}; pass what state_dict() returned")
        missing, unexpected = sorted(keys - state.keys()), sorted(set(state) - keys)
        if missing or unexpected:
            raise ValueError(
                f"{who}: expected keys {sorted(keys)}, missing {missing}, "
                f"unexpected {unexpected}; pass what {type(self).__name__}.state_dict() returned"
            )
        wrong = [
            f"{k}={state[k]!r} ({type(state[k]).__name__})" for k in sorted(keys) if not _is_int(state[k])
        ]
        if wrong:
            raise ValueError(f"{who}: expected int values, got {', '.join(wrong)}")
        epoch, count, limit = int(state["epoch"]), int(state[self._COUNT_KEY]), self._count_limit()
        if epoch < 0 or not 0 <= count <= limit:
            raise ValueError(
                f"{who}: expected epoch >= 0 and {self._COUNT_KEY} in 0..{limit}, "
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
