"""The torch-style names at tg's top level: `tg.zeros`, `tg.cat`, `tg.float32`, `tg.device("cuda:1")`,
`tg.Generator`. `import tg` resolves them here on first use (tg/__init__.py's lazy table).

Each factory is the Tensor static of the same name with torch's signature: shapes as ints or one
tuple, keyword `dtype=` (a DType, its name, or a numpy dtype), `device=` (a tg name "CPU", "CUDA:1",
a torch name "cpu", "cuda:1", or a tg.device), `requires_grad=`. Tensor methods have function forms
(`tg.exp(x)` is `x.exp()`), and rand / randn / randint take torch's `generator=`.

    >>> import tg
    >>> x = tg.zeros(2, 3, dtype=tg.long)
    >>> x.shape, x.dtype
    ((2, 3), dtypes.int64)
    >>> tg.cat([tg.tensor([1, 2]), tg.tensor([3])]).tolist()
    [1, 2, 3]
    >>> g = tg.Generator().manual_seed(0)
    >>> tg.rand(3, generator=g).tolist() == tg.rand(3, generator=tg.Generator().manual_seed(0)).tolist()
    True
"""
from __future__ import annotations

import builtins
import secrets
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from tg.core import random as _random
from tg.core.autocast import autocast_op
from tg.core.device import Device, split_device
from tg.core.dtype import DType, dtypes, promote_types, scalar_result_type
from tg.core.tensor import Tensor
from tg.nn.functional import einsum  # noqa: F401  (torch.einsum)

__all__ = [
    "device", "dtype", "Generator", "tensor", "from_numpy", "is_tensor", "zeros", "ones", "full", "empty",
    "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "rand",
    "randn", "randint", "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "cat",
    "concat", "stack", "flatten", "where", "einsum", "multinomial", "randperm", "as_tensor", "empty_like",
    "logspace", "tril_indices", "triu_indices", "concatenate", "hstack", "vstack", "row_stack", "dstack",
    "column_stack", "meshgrid", "broadcast_tensors", "tensordot", "cdist", "var_mean", "std_mean",
    "searchsorted", "bucketize", "result_type", "promote_types", "can_cast", "finfo", "iinfo",
    "set_grad_enabled", "enable_grad", "is_grad_enabled", "inference_mode",
]


dtype = DType   # torch.dtype: the class of tg.float32, tg.long, ...

# ---------------------------------------------------------------- devices

class device(str):  # noqa: N801  (torch's spelling: tg.device("cuda:1"))
    """A device name, torch-style: `device("cuda:1")`, `device("cuda", 1)`, `device("cpu")`.

    It is the tg device name itself (a str: "CUDA:1", "CPU", also in its repr, so tg's errors name it
    as they name any device), so it goes wherever a device string does; `.type` and `.index` read as
    torch's do. Only the spelling is checked here, not whether
    this machine has the device: a tensor made on a missing one raises tg's own error.

        >>> d = device("cuda:1")
        >>> d, d.type, d.index
        ('CUDA:1', 'cuda', 1)
        >>> device("cpu") == "CPU", device(device("cl", 0)), device("cl", 0).index
        (True, 'CL:0', 0)
    """

    def __new__(cls, type: str | device, index: int | None = None) -> device:  # noqa: A002  (torch's name)
        if isinstance(type, device) and index is None:
            return type
        if not isinstance(type, str):
            raise TypeError(f"[core] device: expected a device name such as 'cpu' or 'cuda:1', got "
                            f"{type.__class__.__name__}")
        kind, parsed = split_device(type)
        if parsed is not None and index is not None:
            raise ValueError(f"[core] device: {type!r} already names index {parsed}, and index={index} was "
                             f"given too; pass one of them")
        index = parsed if index is None else index
        if index is not None and (not isinstance(index, int) or isinstance(index, bool) or index < 0):
            raise ValueError(f"[core] device: the index must be an int >= 0, got {index!r}")
        if kind not in Device.kinds():
            known = ", ".join(k.lower() for k in Device.kinds())
            raise ValueError(f"[core] device: unknown device type {type!r}; expected one of {known}, "
                             f"optionally with an index ('cuda:1')")
        made = super().__new__(cls, kind if index is None else f"{kind}:{index}")
        made._index = index
        return made

    _index: int | None

    @property
    def type(self) -> str:
        """The device kind in torch's lower case: "cuda", "cpu", "cl"."""
        return split_device(self)[0].lower()

    # torch's meaning of index; it shadows str.index, which nothing in tg calls on a device name
    @property
    def index(self) -> int | None:  # type: ignore[override]
        """The device index, or None when the name gave none (as in torch)."""
        return self._index


# ---------------------------------------------------------------- random numbers

class Generator:
    """A random stream of its own for rand / randn / randint(generator=), as torch.Generator.

    It holds a seed and how far it has drawn on each device; a draw with it swaps that state in for
    the global one and back, so it never moves the global stream (Tensor.manual_seed's). A fresh
    Generator starts where the global stream starts, at seed 0. Numbers are the same on every device,
    so `device=` is accepted for torch's signature and only kept as an attribute.

        >>> g = Generator().manual_seed(42)
        >>> a = rand(3, generator=g).tolist()
        >>> g.manual_seed(42).initial_seed(), rand(3, generator=g).tolist() == a
        (42, True)
    """

    def __init__(self, device: str | None = None):
        self.device = device
        self._state: dict[str, Any] = {"seed": 0, "counters": {}}

    def manual_seed(self, seed: int) -> Generator:
        """Seed this generator (all devices start again from the seed's first number); returns self.

            >>> Generator().manual_seed(7).initial_seed()
            7
        """
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"[core] Generator.manual_seed: expected an int seed, got {type(seed).__name__}")
        self._state = {"seed": seed & 0xFFFFFFFF, "counters": {}}
        return self

    def seed(self) -> int:
        """Seed with a fresh random 32-bit value from the OS and return it.

            >>> g = Generator()
            >>> g.seed() == g.initial_seed()
            True
        """
        value = secrets.randbits(32)
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with.

            >>> Generator().initial_seed()
            0
        """
        return int(self._state["seed"])

    def get_state(self) -> dict[str, Any]:
        """The state, in Tensor.get_rng_state()'s form ({"seed", "counters"} of ints): save it to replay.

            >>> g = Generator().manual_seed(1)
            >>> state = g.get_state()
            >>> a = randn(2, generator=g).tolist()
            >>> randn(2, generator=g.set_state(state)).tolist() == a
            True
        """
        counters = {d: int(c.numpy()[0]) if isinstance(c, Tensor) else int(c)
                    for d, c in self._state["counters"].items()}
        return {"seed": self.initial_seed(), "counters": counters}

    def set_state(self, state: dict[str, Any]) -> Generator:
        """Restore a state from get_state(); returns self.

            >>> Generator().set_state({"seed": 3, "counters": {"CPU": 8}}).get_state()
            {'seed': 3, 'counters': {'CPU': 8}}
        """
        if not _random.is_state(state):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"[core] Generator.set_state: expected the dict get_state() returns, with keys "
                             f"['counters', 'seed'], got {got}")
        self._state = {"seed": int(state["seed"]) & 0xFFFFFFFF, "counters": dict(state["counters"])}
        return self

    def draw(self, sample: Callable[[], Tensor]) -> Tensor:
        """Run sample() with this generator's state as the global random state, then put both back.

            >>> g = Generator().manual_seed(5)
            >>> g.draw(lambda: Tensor.randint(0, 10, size=(4,))).shape
            (4,)
        """
        outer = Tensor.get_rng_state(on_device=True)     # device copies: no host read, no sync
        Tensor.set_rng_state(self._state)
        try:
            out = sample().realize()
            self._state = Tensor.get_rng_state(on_device=True)
        finally:
            Tensor.set_rng_state(outer)
        return out


def _sample(generator: Generator | None, sample: Callable[[], Tensor]) -> Tensor:
    if generator is None:
        return sample()
    if not isinstance(generator, Generator):
        raise TypeError(f"[core] generator= expects a tg.Generator, got {type(generator).__name__}; make "
                        f"one with tg.Generator().manual_seed(seed)")
    return generator.draw(sample)


def rand(*size: Any, generator: Generator | None = None, **kw: Any) -> Tensor:
    """Uniform samples in [0, 1) (Tensor.rand), from `generator` when given.

        >>> x = rand(2, 3, dtype=dtypes.float16)
        >>> x.shape, x.dtype
        ((2, 3), dtypes.float16)
    """
    return _sample(generator, lambda: Tensor.rand(*size, **kw))


def randn(*size: Any, generator: Generator | None = None, **kw: Any) -> Tensor:
    """Standard normal samples (Tensor.randn), from `generator` when given.

        >>> randn((4,), generator=Generator().manual_seed(0)).shape
        (4,)
    """
    return _sample(generator, lambda: Tensor.randn(*size, **kw))


def multinomial(input: Any, num_samples: int, replacement: bool = False, *,  # noqa: A002
                generator: Generator | None = None) -> Tensor:
    """Draw category indices from each row of probabilities (Tensor.multinomial), from `generator`
    when given.

        >>> multinomial(tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist()
        [1, 1]
    """
    x = input if isinstance(input, Tensor) else Tensor(input)
    return _sample(generator, lambda: x.multinomial(num_samples, replacement))


def randperm(n: int, *, generator: Generator | None = None, dtype: Any = None, device: Any = None) -> Tensor:
    """A random permutation of 0..n-1, int64 unless dtype is given (torch.randperm). The order comes
    from n uniform draws of tg's random stream, ranked on the host.

        >>> sorted(randperm(5, generator=Generator().manual_seed(0)).tolist())
        [0, 1, 2, 3, 4]
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"[core] randperm: n must be an int >= 0, got {n!r}")
    keys = _sample(generator, lambda: Tensor.rand(n)).numpy() if n else np.zeros(0, np.float32)
    return Tensor(np.argsort(keys, kind="stable"), dtype=dtype or dtypes.int64, device=device)


def randint(*args: Any, size: Any = None, generator: Generator | None = None, **kw: Any) -> Tensor:
    """Integers uniform in [low, high), int64 unless dtype is given, with torch's signatures:
    randint(high, size) and randint(low, high, size) (size positional or keyword).

        >>> x = randint(3, 7, (100,))
        >>> x.dtype, x.min().item() >= 3, x.max().item() < 7
        (dtypes.int64, True, True)
        >>> randint(5, size=(2, 2)).shape
        (2, 2)
    """
    if size is None and len(args) in (2, 3) and isinstance(args[-1], (tuple, list)):
        args, size = args[:-1], args[-1]
    if len(args) not in (1, 2) or size is None:
        raise TypeError(f"[core] randint: expected randint(high, size) or randint(low, high, size), got "
                        f"{len(args)} positional arguments and size={size!r}; size is a tuple such as (3,)")
    low, high = (0, args[0]) if len(args) == 1 else args
    return _sample(generator, lambda: Tensor.randint(low, high, size=size, **kw))


class _GradMode:
    """Gradient recording on (mode True) or off inside a `with` block, the previous mode back after it;
    as a decorator, inside each call of the function."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self.prev, Tensor.no_grad = Tensor.no_grad, not self.mode

    def __exit__(self, *exc: Any) -> None:
        Tensor.no_grad = self.prev

    def __call__(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _GradMode(self.mode):
                return fn(*args, **kwargs)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


class set_grad_enabled(_GradMode):  # noqa: N801  (torch's spelling)
    """Turn gradient recording on or off, torch's way: a call sets the mode at once (until it is set
    again); `with set_grad_enabled(mode):` sets it for the block and restores the previous mode after;
    `@set_grad_enabled(mode)` runs a function in that mode.

        >>> x = tensor([1.0], requires_grad=True)
        >>> with set_grad_enabled(False):
        ...     (x * 2).requires_grad, is_grad_enabled()
        (False, False)
        >>> (x * 2).requires_grad, is_grad_enabled()
        (True, True)
    """

    def __init__(self, mode: bool) -> None:
        super().__init__(mode)
        self.before, Tensor.no_grad = Tensor.no_grad, not self.mode      # at once, as torch's

    def __enter__(self) -> None:
        self.prev = self.before

    def __call__(self, fn: Callable) -> Callable:
        Tensor.no_grad = self.before         # as a decorator it changes only the function's calls
        return super().__call__(fn)


def enable_grad() -> _GradMode:
    """Context manager and decorator: gradients recorded inside, also within no_grad()."""
    return _GradMode(True)


def inference_mode(mode: bool = True) -> _GradMode:
    """torch's inference_mode: no_grad() while mode is True (tg has no separate inference tensors)."""
    return _GradMode(not mode)


def is_grad_enabled() -> bool:
    """Whether gradients are recorded now (False inside no_grad())."""
    return not Tensor.no_grad


def manual_seed(seed: int) -> None:
    """Seed the global random stream (Tensor.manual_seed).

        >>> manual_seed(3)
        >>> a = rand(2).tolist()
        >>> manual_seed(3)
        >>> rand(2).tolist() == a
        True
    """
    Tensor.manual_seed(seed)


def seed() -> int:
    """Seed the global random stream with a fresh random 32-bit value from the OS and return it.

        >>> 0 <= seed() < 2 ** 32
        True
    """
    value = secrets.randbits(32)
    Tensor.manual_seed(value)
    return value


def initial_seed() -> int:
    """The seed of the global random stream.

        >>> manual_seed(11)
        >>> initial_seed()
        11
    """
    return int(Tensor.get_rng_state(on_device=True)["seed"])


def get_rng_state() -> dict[str, Any]:
    """The global random state, ready to save (Tensor.get_rng_state()).

        >>> state = get_rng_state()
        >>> a = rand(2).tolist()
        >>> set_rng_state(state)
        >>> rand(2).tolist() == a
        True
    """
    return Tensor.get_rng_state()


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state from get_rng_state() (Tensor.set_rng_state).

        >>> set_rng_state({"seed": 0, "counters": {}})
        >>> initial_seed()
        0
    """
    Tensor.set_rng_state(state)


# ---------------------------------------------------------------- making tensors

def tensor(data: Any, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool = False) -> Tensor:
    """A tensor from data (nested lists, a scalar, a numpy array, a Tensor), as torch.tensor.

        >>> t = tensor([[1, 2], [3, 4]], dtype=dtypes.float32, device="cpu")
        >>> t.tolist(), t.device
        ([[1.0, 2.0], [3.0, 4.0]], 'CPU')
    """
    return Tensor(data, device=device, dtype=dtype, requires_grad=requires_grad or None)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor with a numpy array's values and dtype, on the default device. Unlike torch's, it does
    not share the array's memory: later writes to the array are not seen.

        >>> from_numpy(np.arange(3, dtype=np.int16)).dtype
        dtypes.int16
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"[core] from_numpy: expected a numpy ndarray, got {type(array).__name__}; for "
                        f"lists use tg.tensor")
    return Tensor(array)


def is_tensor(obj: Any) -> bool:
    """True for a tg Tensor.

        >>> is_tensor(zeros(1)), is_tensor([0.0])
        (True, False)
    """
    return isinstance(obj, Tensor)


def zeros(*size: Any, **kw: Any) -> Tensor:
    """Zeros of the given shape, float32 unless dtype is given (Tensor.zeros).

        >>> zeros(2, dtype="int32").tolist()
        [0, 0]
    """
    return Tensor.zeros(*size, **kw)


def ones(*size: Any, **kw: Any) -> Tensor:
    """Ones of the given shape, float32 unless dtype is given (Tensor.ones).

        >>> ones((1, 2)).tolist()
        [[1.0, 1.0]]
    """
    return Tensor.ones(*size, **kw)


def full(size: Any, fill_value: Any, **kw: Any) -> Tensor:
    """A tensor of `size` filled with fill_value (Tensor.full).

        >>> full((2,), True).tolist()
        [True, True]
    """
    return Tensor.full(size, fill_value, **kw)


def empty(*size: Any, **kw: Any) -> Tensor:
    """A tensor whose values are not set, float32 unless dtype is given (Tensor.empty).

        >>> empty(2, 2).shape
        (2, 2)
    """
    return Tensor.empty(*size, **kw)


def arange(start: int | float, end: int | float | None = None, step: int | float = 1, **kw: Any) -> Tensor:
    """start, start + step, ... up to but not including end (Tensor.arange).

        >>> arange(4).tolist(), arange(1, 2, 0.5).tolist()
        ([0, 1, 2, 3], [1.0, 1.5])
    """
    return Tensor.arange(start, end, step, **kw)


def linspace(start: float, end: float, steps: int, **kw: Any) -> Tensor:
    """`steps` evenly spaced values from start to end, both included (Tensor.linspace).

        >>> linspace(0, 1, 3).tolist()
        [0.0, 0.5, 1.0]
    """
    return Tensor.linspace(start, end, steps, **kw)


def eye(n: int, m: int | None = None, **kw: Any) -> Tensor:
    """The n x m identity matrix (Tensor.eye).

        >>> eye(2, dtype=dtypes.int64).tolist()
        [[1, 0], [0, 1]]
    """
    return Tensor.eye(n, m, **kw)


def zeros_like(input: Tensor, **kw: Any) -> Tensor:  # noqa: A002  (torch's name)
    """Zeros with input's shape, dtype and device unless given.

        >>> zeros_like(tensor([1, 2])).tolist()
        [0, 0]
    """
    return input.zeros_like(**kw)


def ones_like(input: Tensor, **kw: Any) -> Tensor:  # noqa: A002
    """Ones with input's shape, dtype and device unless given.

        >>> ones_like(tensor([1.5])).tolist()
        [1.0]
    """
    return input.ones_like(**kw)


def full_like(input: Tensor, fill_value: Any, **kw: Any) -> Tensor:  # noqa: A002
    """fill_value in input's shape, dtype and device unless given.

        >>> full_like(tensor([1, 2]), 7).tolist()
        [7, 7]
    """
    return input.full_like(fill_value, **kw)


def rand_like(input: Tensor, **kw: Any) -> Tensor:  # noqa: A002
    """Uniform samples in [0, 1) with input's shape, dtype and device unless given.

        >>> rand_like(zeros(3)).shape
        (3,)
    """
    return input.rand_like(**kw)


def randn_like(input: Tensor, **kw: Any) -> Tensor:  # noqa: A002
    """Standard normal samples with input's shape, dtype and device unless given.

        >>> randn_like(zeros(2, 2)).shape
        (2, 2)
    """
    return input.randn_like(**kw)


def as_tensor(data: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """data as a tensor: a Tensor already of that dtype and device is returned as it is, anything else is
    copied (torch.as_tensor; tg never shares a numpy array's memory).

        >>> t = tensor([1, 2])
        >>> as_tensor(t) is t, as_tensor(np.zeros(2, np.float32)).dtype
        (True, dtypes.float32)
    """
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype)
    return Tensor(data, device=device, dtype=dtype)


def empty_like(input: Tensor, **kw: Any) -> Tensor:  # noqa: A002
    """A tensor of input's shape, dtype and device (unless given) whose values are not set.

        >>> empty_like(tensor([[1, 2]])).shape
        (1, 2)
    """
    return input.empty_like(**kw)


def logspace(start: float, end: float, steps: int, base: float = 10.0, **kw: Any) -> Tensor:
    """base ** linspace(start, end, steps) (torch.logspace).

        >>> logspace(0, 2, 3).tolist()
        [1.0, 10.0, 100.0]
    """
    exponents = Tensor.linspace(start, end, steps, dtype=dtypes.float64, device=kw.get("device"))
    return (float(base) ** exponents).cast(kw.get("dtype") or dtypes.default_float)


def _tri_indices(row: int, col: int, offset: int, lower: bool, **kw: Any) -> Tensor:
    r, c = np.indices((row, col))
    keep = (c - r <= offset) if lower else (c - r >= offset)
    return Tensor(np.stack([r[keep], c[keep]]).astype(np.int64), device=kw.get("device"),
                  dtype=kw.get("dtype") or dtypes.int64)


def tril_indices(row: int, col: int, offset: int = 0, **kw: Any) -> Tensor:
    """The (2, n) row and column indices of the lower triangle of a row x col matrix, row by row.

        >>> tril_indices(2, 2).tolist()
        [[0, 1, 1], [0, 0, 1]]
    """
    return _tri_indices(row, col, offset, True, **kw)


def triu_indices(row: int, col: int, offset: int = 0, **kw: Any) -> Tensor:
    """The (2, n) row and column indices of the upper triangle of a row x col matrix, row by row.

        >>> triu_indices(2, 2).tolist()
        [[0, 0, 1], [0, 1, 1]]
    """
    return _tri_indices(row, col, offset, False, **kw)


# ---------------------------------------------------------------- joining and picking

@autocast_op
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along the existing dim `dim`, promoting dtypes (torch.cat).

        >>> cat([tensor([[1, 2]]), tensor([[3, 4]])], dim=1).tolist()
        [[1, 2, 3, 4]]
    """
    if isinstance(tensors, Tensor) or not tensors:
        got = "a Tensor" if isinstance(tensors, Tensor) else "nothing"
        raise TypeError(f"[core] cat: expected a non-empty list or tuple of tensors, got {got}; "
                        f"write tg.cat([a, b])")
    first, *others = tensors
    return first.cat(*others, dim=dim)


concat = cat


concatenate = cat


def _at_least(t: Tensor, n: int) -> Tensor:
    """t with dims of size 1 added until it has n: in front for 2, numpy's (1, k, 1) for 3."""
    if t.ndim >= n:
        return t
    if n == 3 and t.ndim == 2:
        return t.unsqueeze(-1)
    return _at_least(t.reshape((1,) * (builtins.min(n, 2) - t.ndim) + t.shape), n) if t.ndim < 2 else t


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """cat along dim 1, or dim 0 for 1-d tensors (torch.hstack).

        >>> hstack([tensor([1, 2]), tensor([3])]).tolist()
        [1, 2, 3]
    """
    return cat(tensors, dim=0 if builtins.all(t.ndim <= 1 for t in tensors) else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """cat along dim 0, 1-d tensors becoming rows (torch.vstack).

        >>> vstack([tensor([1, 2]), tensor([3, 4])]).tolist()
        [[1, 2], [3, 4]]
    """
    return cat([_at_least(t, 2) for t in tensors], dim=0)


row_stack = vstack


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """cat along dim 2, after making each tensor at least 3-d (torch.dstack).

        >>> dstack([tensor([1, 2]), tensor([3, 4])]).tolist()
        [[[1, 3], [2, 4]]]
    """
    return cat([_at_least(t, 3) for t in tensors], dim=2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """1-d tensors as columns, joined with 2-d ones along dim 1 (torch.column_stack).

        >>> column_stack([tensor([1, 2]), tensor([3, 4])]).tolist()
        [[1, 3], [2, 4]]
    """
    return cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors], dim=1)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors: indexing="ij" (matrix order, the default here; torch warns
    when it is not given) or "xy" (Cartesian: the first two dims swapped).

        >>> [g.tolist() for g in meshgrid(tensor([1, 2]), tensor([3, 4, 5]))][1]
        [[3, 4, 5], [3, 4, 5]]
    """
    ts = tuple(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    if indexing not in ("ij", "xy"):
        raise ValueError(f"[core] meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    swap = indexing == "xy" and len(ts) >= 2
    order = (ts[1], ts[0], *ts[2:]) if swap else ts
    shape = tuple(t.numel() for t in order)
    grids = [t.reshape(tuple(-1 if i == k else 1 for i in range(len(order)))).expand(shape)
             for k, t in enumerate(order)]
    if swap:
        grids = [grids[1], grids[0], *grids[2:]]
        grids = [g.transpose(0, 1) for g in grids]
        grids = [g.transpose(0, 1) for g in grids]
    return tuple(grids)


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors expanded to their common broadcast shape.

        >>> [t.shape for t in broadcast_tensors(zeros(2, 1), zeros(3))]
        [(2, 3), (2, 3)]
    """
    from tg.core.shape import broadcast_shape
    shape: tuple[int, ...] = ()
    for t in tensors:
        shape = broadcast_shape(shape, t.shape)
    return tuple(t.expand(shape) for t in tensors)


@autocast_op
def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """Sums of products over a's last `dims` dims and b's first ones, or over the dims listed in
    dims=([a dims], [b dims]) (torch.tensordot).

        >>> tensordot(ones(2, 3), ones(3, 4), dims=1).shape
        (2, 4)
    """
    if isinstance(dims, int):
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    dims_a, dims_b = [d % a.ndim for d in dims_a], [d % b.ndim for d in dims_b]
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = int(np.prod([a.shape[d] for d in dims_a]))
    left = a.permute(free_a + dims_a).reshape(-1, k)
    right = b.permute(dims_b + free_b).reshape(k, -1)
    return left.matmul(right).reshape(tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b))


@autocast_op
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm distance between each row of x1 (..., n, d) and each row of x2 (..., m, d): (..., n, m).

        >>> cdist(tensor([[0.0, 0.0]]), tensor([[3.0, 4.0], [0.0, 1.0]])).tolist()
        [[5.0, 1.0]]
    """
    return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(p, dim=-1)


def var_mean(input: Tensor, dim: Any = None, *args: Any, **kw: Any) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(var, mean) over dim, with var's correction / unbiased / keepdim arguments.

        >>> [t.item() for t in var_mean(tensor([1.0, 2.0, 3.0]))]
        [1.0, 2.0]
    """
    keepdim = kw.get("keepdim", args[1] if len(args) > 1 else False)
    return input.var(dim, *args, **kw), input.mean(dim, keepdim)


def std_mean(input: Tensor, dim: Any = None, *args: Any, **kw: Any) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(std, mean) over dim, with std's correction / unbiased / keepdim arguments.

        >>> [t.item() for t in std_mean(tensor([1.0, 2.0, 3.0]))]
        [1.0, 2.0]
    """
    keepdim = kw.get("keepdim", args[1] if len(args) > 1 else False)
    return input.std(dim, *args, **kw), input.mean(dim, keepdim)


def searchsorted(sorted_sequence: Tensor, values: Any, *, right: bool = False, side: str | None = None,
                 out_int32: bool = False) -> Tensor:
    """For each value, the index where it would go in the sorted last dim of sorted_sequence (before
    equal entries, after them with right=True or side="right"), as torch.searchsorted. A 1-d sequence
    serves every value; an n-d one pairs with values' leading dims.

        >>> searchsorted(tensor([1, 3, 5]), tensor([0, 3, 6])).tolist()
        [0, 1, 3]
    """
    values = values if isinstance(values, Tensor) else Tensor(values, device=sorted_sequence.device)
    right = right or side == "right"
    seq = sorted_sequence.reshape((1,) * values.ndim + sorted_sequence.shape) if sorted_sequence.ndim == 1 \
        else sorted_sequence.unsqueeze(-2)
    v = values.unsqueeze(-1)
    before = (seq <= v) if right else (seq < v)
    return before.sum(-1).cast(dtypes.int32 if out_int32 else dtypes.int64)


def bucketize(input: Any, boundaries: Tensor, *, right: bool = False, out_int32: bool = False) -> Tensor:  # noqa: A002
    """The bucket of each value among the sorted 1-d boundaries: boundaries[i-1] < x <= boundaries[i]
    (boundaries[i-1] <= x < boundaries[i] with right=True), as torch.bucketize.

        >>> bucketize(tensor([1, 4, 6]), tensor([1, 3, 5])).tolist()
        [0, 2, 3]
    """
    return searchsorted(boundaries, input, right=right, out_int32=out_int32)


# ---------------------------------------------------------------- dtypes

def result_type(tensor1: Any, tensor2: Any) -> DType:
    """The dtype a binary op of the two (tensors or Python scalars) gives, torch's promotion rules.

        >>> result_type(tensor([1, 2]), 1.5), result_type(tensor([1.0]), tensor(1, dtype=dtypes.float64))
        (dtypes.float32, dtypes.float32)
    """
    if not isinstance(tensor1, Tensor):
        tensor1, tensor2 = tensor2, tensor1
    if not isinstance(tensor1, Tensor):
        return Tensor([tensor1]).dtype if not isinstance(tensor2, float) else dtypes.default_float
    if not isinstance(tensor2, Tensor):
        return scalar_result_type(tensor1.dtype, tensor2)
    return tensor1._broadcasted(tensor2)[0].dtype


def can_cast(from_: DType, to: DType) -> bool:
    """Whether torch allows an in-place op to cast from_ into to: never to a lower kind (float to int,
    int to bool).

        >>> can_cast(dtypes.int32, dtypes.float16), can_cast(dtypes.float32, dtypes.int64)
        (True, False)
    """
    def kind(d: DType) -> int:
        return 2 if d.is_float else 0 if d == dtypes.bool else 1
    return kind(from_) <= kind(to)


class finfo:  # noqa: N801  (torch's name)
    """Limits of a float dtype (torch.finfo): bits, eps, max, min, tiny (= smallest_normal), resolution.

        >>> finfo(dtypes.float16).max, finfo().bits
        (65504.0, 32)
    """

    def __init__(self, type: DType | None = None) -> None:  # noqa: A002  (torch's name)
        self.dtype = dtypes.default_float if type is None else dtypes.from_any(type)
        if not self.dtype.is_float:
            raise TypeError(f"[core] finfo: {self.dtype.name} is not a float dtype; use iinfo")
        if self.dtype == dtypes.bfloat16:
            self.bits, self.eps, self.max = 16, 2.0 ** -7, 3.3895313892515355e38
            self.tiny, self.resolution = 2.0 ** -126, 0.01
        else:
            info = np.finfo(self.dtype.np_value)
            self.bits, self.eps, self.max = info.bits, float(info.eps), float(info.max)
            self.tiny, self.resolution = float(info.tiny), float(info.resolution)
        self.min, self.smallest_normal = -self.max, self.tiny

    def __repr__(self) -> str:
        return f"finfo(eps={self.eps}, max={self.max}, dtype={self.dtype.name})"


class iinfo:  # noqa: N801  (torch's name)
    """Limits of an int dtype (torch.iinfo): bits, min, max.

        >>> iinfo(dtypes.int8).min, iinfo(dtypes.uint8).max
        (-128, 255)
    """

    def __init__(self, type: DType) -> None:  # noqa: A002  (torch's name)
        self.dtype = dtypes.from_any(type)
        if self.dtype.is_float:
            raise TypeError(f"[core] iinfo: {self.dtype.name} is a float dtype; use finfo")
        info = np.iinfo(np.uint8 if self.dtype == dtypes.bool else self.dtype.np_value)
        self.bits, self.min, self.max = info.bits, int(info.min), int(info.max)

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype.name})"


@autocast_op
def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new dim `dim` (Tensor.stack).

        >>> stack([tensor([1, 2]), tensor([3, 4])], dim=1).tolist()
        [[1, 3], [2, 4]]
    """
    return Tensor.stack(tensors, dim=dim)


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # noqa: A002
    """Merge dims start_dim..end_dim into one (Tensor.flatten).

        >>> flatten(zeros(2, 3, 4), 1).shape
        (2, 12)
    """
    return input.flatten(start_dim, end_dim)


def where(condition: Tensor, input: Any, other: Any) -> Tensor:  # noqa: A002
    """input where condition is true, else other, broadcasting all three (torch.where).

        >>> where(tensor([True, False]), tensor([1, 2]), 0).tolist()
        [1, 0]
    """
    return condition.where(input, other)


# ---------------------------------------------------------------- function forms of Tensor methods

# (names, example arguments): tg.<name>(x, ...) is x.<name>(...); each gets that example in its docstring
_UNARY = ("exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "neg", "sign",
          "square", "floor", "ceil", "round", "sum", "mean", "prod", "amax", "amin", "argmax", "argmin",
          "var", "std", "softmax", "log_softmax", "cumsum", "logsumexp", "isnan", "isinf", "squeeze",
          "clone", "detach", "numel", "all", "any", "atan", "asinh", "sinh", "cosh", "asin", "acos", "atanh",
          "acosh", "tril", "triu", "diag", "diagonal", "trace", "argsort", "sort", "bitwise_not", "t",
          "hardtanh", "hardsigmoid", "hardswish", "celu", "selu", "mish", "erf", "erfc", "expm1", "log1p",
          "log2", "log10", "exp2", "reciprocal", "trunc", "fix", "frac", "sgn", "signbit", "isfinite",
          "isposinf", "isneginf", "nan_to_num", "absolute", "negative", "arctan", "arcsinh", "logical_not",
          "nonzero", "argwhere", "unique", "unique_consecutive", "count_nonzero", "nansum", "nanmean",
          "median", "nanmedian", "msort", "unbind", "fliplr", "flipud", "rot90", "ravel", "aminmax", "norm",
          "diag_embed", "deg2rad", "rad2deg", "is_floating_point", "is_complex", "mode")
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "matmul", "eq", "ne", "lt", "le",
           "gt", "ge", "dot", "atan2", "copysign", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and",
           "logical_or", "logical_xor", "hypot", "logaddexp", "logaddexp2", "xlogy", "fmax", "fmin", "fmod",
           "remainder", "floor_divide", "true_divide", "greater", "greater_equal", "less", "less_equal",
           "not_equal", "isclose", "allclose", "equal", "mm", "kron", "inner", "outer", "ger",
           "float_power", "arctan2", "multiply", "divide", "subtract")
_OTHER = ("reshape", "permute", "transpose", "unsqueeze", "split", "chunk", "clamp", "gather", "max",
          "min", "lerp", "flip", "expand", "repeat", "pad", "unflatten", "topk", "cumprod", "cummax",
          "cummin", "masked_fill", "clip", "movedim", "moveaxis", "swapdims", "swapaxes", "narrow", "select",
          "index_select", "take", "take_along_dim", "tensor_split", "tile", "repeat_interleave", "roll",
          "kthvalue", "logcumsumexp", "scatter", "scatter_add", "index_add", "masked_select", "addcmul",
          "addcdiv", "addmm", "addmv", "baddbmm", "bmm", "mv", "vdot", "cross", "bincount", "histc",
          "broadcast_to")


def _function_form(name: str, example: str) -> Callable[..., Any]:
    def method_as_function(input: Any, *args: Any, **kw: Any) -> Any:  # noqa: A002
        return getattr(input if isinstance(input, Tensor) else Tensor(input), name)(*args, **kw)
    method_as_function.__name__ = method_as_function.__qualname__ = name
    method_as_function.__doc__ = (
        f"tg.{name}(x, ...) is x.{name}(...) (see Tensor.{name}); x may be any data Tensor() takes.\n\n"
        f"        >>> {example}\n        True\n")
    return method_as_function


_ONE = "tensor([[0.5, 2.0], [1.0, 4.0]])"
_TWO = "tensor([[1.0, 3.0], [2.0, 5.0]])"
_ARGS = {"reshape": "(4,)", "permute": "(1, 0)", "transpose": "0, 1", "unsqueeze": "0", "split": "1",
         "chunk": "2", "clamp": "1.0, 2.0", "gather": "1, tensor([[1], [0]])", "max": "", "min": "",
         "lerp": f"{_TWO}, 0.5", "flip": "0", "expand": "(2, 2, 2)", "repeat": "(2, 1)", "pad": "(1, 1)",
         "unflatten": "1, (2, 1)", "topk": "1", "cumprod": "1", "cummax": "0", "cummin": "0",
         "masked_fill": "tensor([True, False]), 0.0", "clip": "0.6, 2.0", "movedim": "0, 1",
         "moveaxis": "0, 1", "swapdims": "0, 1", "swapaxes": "0, 1", "narrow": "1, 0, 1", "select": "1, 0",
         "index_select": "1, tensor([1, 0])", "take": "tensor([3, 0])",
         "take_along_dim": "tensor([[1], [0]]), 1",
         "tensor_split": "2", "tile": "(2,)", "repeat_interleave": "2", "roll": "1", "kthvalue": "1",
         "logcumsumexp": "1", "scatter": "1, tensor([[1], [0]]), 9.0",
         "scatter_add": "1, tensor([[1], [0]]), tensor([[1.0], [2.0]])",
         "index_add": "0, tensor([1, 1]), tensor([[1.0, 2.0], [3.0, 4.0]])",
         "masked_select": "tensor([True, False])",
         "addcmul": f"{_TWO}, {_TWO}", "addcdiv": f"{_TWO}, {_TWO}", "addmm": f"{_TWO}, {_TWO}",
         "addmv": f"{_TWO}, tensor([1.0, 1.0])",
         "baddbmm": "tensor([[[2.0, 1.0]]]), tensor([[[1.0], [3.0]]])",
         "bmm": "tensor([[[1.0], [3.0]]])", "mv": "tensor([1.0, 1.0])", "vdot": "tensor([1.0, 2.0])",
         "cross": "tensor([0.0, 1.0, 0.0])", "bincount": "", "histc": "bins=4, min=0, max=4",
         "broadcast_to": "(2, 2, 2)"}
# inputs inside the functions' domains, and ints for the bit functions
_INPUT = {"asin": "tensor([[0.5, -0.25], [0.0, 0.75]])", "acos": "tensor([[0.5, -0.25], [0.0, 0.75]])",
          "atanh": "tensor([[0.5, -0.25], [0.0, 0.75]])", "acosh": "tensor([[1.5, 2.0], [1.0, 4.0]])",
          "bitwise_not": "tensor([[5, -2], [0, 7]])", "bitwise_and": "tensor([[5, -2], [0, 7]])",
          "bitwise_or": "tensor([[5, -2], [0, 7]])", "bitwise_xor": "tensor([[5, -2], [0, 7]])",
          "addmv": "tensor([1.0, 2.0])", "baddbmm": "tensor([[[1.0]]])", "bmm": "tensor([[[1.0, 2.0]]])",
          "vdot": "tensor([3.0, 4.0])", "cross": "tensor([1.0, 0.0, 0.0])", "bincount": "tensor([1, 1, 3])"}
_INT_TWO = "tensor([[3, 6], [1, 2]])"


def _values(x: Any) -> Any:
    """What an example compares: tensors as (dtype, values), tuples of them item by item."""
    if isinstance(x, Tensor):
        return x.dtype, x.tolist()
    return [_values(v) for v in x] if isinstance(x, (tuple, list)) else x


def _same(name: str, args: str) -> str:
    x = _INPUT.get(name, _ONE)
    if args == _TWO and name.startswith("bitwise"):
        args = _INT_TWO
    return f"_values({name}({x}{', ' if args else ''}{args})) == _values({x}.{name}({args}))"


for _name in _UNARY:
    globals()[_name] = _function_form(_name, _same(_name, ""))
for _name in _BINARY:
    globals()[_name] = _function_form(_name, _same(_name, _TWO))
for _name in _OTHER:
    globals()[_name] = _function_form(_name, _same(_name, _ARGS[_name]))
del _name

FUNCTION_FORMS = (*_UNARY, *_BINARY, *_OTHER)
__all__ += FUNCTION_FORMS
