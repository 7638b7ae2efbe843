"""Tensor: the user API, PyTorch names and broadcasting, every method composed from the
primitive ops through the Functions in function.py (so gradients come by composition).

    >>> from tg import Tensor
    >>> x = Tensor([[1.0, -2.0], [3.0, 4.0]])
    >>> (x.relu() * 2 + 1).sum(axis=1).tolist()
    [4.0, 16.0]
"""
from __future__ import annotations

import builtins
import functools
import itertools
import math
import sys
import weakref
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar, overload

import numpy as np

from tg.core import autograd, fused, indexing, random
from tg.core import function as F
from tg.core.autocast import autocast_op
from tg.core.device import Device
from tg.core.dtype import (
    DType,
    dtype_of_scalar,
    dtypes,
    max_value,
    min_value,
    promote_types,
    scalar_result_type,
)
from tg.core.indexing import TgIndexError
from tg.core.lazy import LazyBuffer, Readers
from tg.core.ops import BinaryOps, BufferOps, UnaryOps
from tg.core.realize import known_values
from tg.core.shape import ShapeTracker, View, broadcast_shape, contiguous_strides, prod


class MinMax(NamedTuple):
    """What aminmax gives: (min, max)."""
    min: Tensor
    max: Tensor


class ValuesIndices(NamedTuple):
    """What max and min along a dim, sort, topk, kthvalue, median, mode, cummax and cummin give: a
    (values, indices) pair whose parts also have torch's names (`x.max(1).indices`, `x.topk(2).values`)."""
    values: Tensor
    indices: Tensor


# fdlibm's s_erf.c coefficients (Sun Microsystems, 1993, freely redistributable), lowest power first:
# erf(a) = a + a P(a^2)/Q(a^2) below 0.84375; erx + P(a - 1)/Q(a - 1) below 1.25; above, erfc(a) from
# exp and R(1/a^2)/S(1/a^2), RA/SA below 1/0.35 and RB/SB beyond (Tensor._erf_parts)
ERF_ERX = 8.45062911510467529297e-01
ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
          -5.77027029648944159157e-03, -2.37630166566501626084e-05)
ERF_QQ = (3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
          1.32494738004321644526e-04, -3.96022827877536812320e-06)
ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
          3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
          -2.16637559486879084300e-03)
ERF_QA = (1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
          1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
          -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
          -8.12874355063065934246e+01, -9.81432934416914548592e+00)
ERF_SA = (1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
          6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
          6.57024977031928170135e+00, -6.04244152148580987438e-02)
ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
          -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
          -4.83519191608651397019e+02)
ERF_SB = (3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
          3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
          -2.24409524465858183362e+01)

# Cephes' atanf (float32) and atan (float64) coefficients (Stephen L. Moshier, 1984-2000, freely
# redistributable), lowest power first: atan(r) = r + r z P(z) (float32), r + r z P(z)/(Q(z) + z^5) (float64),
# z = r^2
ATANF_P = (-3.33329491539e-1, 1.99777106478e-1, -1.38776856032e-1, 8.05374449538e-2)
ATAN_P = (-6.485021904942025371773e1, -1.228866684490136173410e2, -7.500855792314704667340e1,
          -1.615753718733365076637e1, -8.750608600031904122785e-1)
ATAN_Q = (1.945506571482613964425e2, 4.853903996359136964868e2, 4.328810604912902668951e2,
          1.650270098316988542046e2, 2.485846490142306297962e1)
ATAN_MOREBITS = 6.123233995736765886130e-17    # pi/2 - float64(pi/2)


def _poly(x: Tensor, coeffs: Sequence[builtins.float]) -> Tensor:
    """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
    acc: Any = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def _argfix(*x: Any) -> tuple:
    if len(x) == 1 and isinstance(x[0], (tuple, list)):
        return tuple(x[0])
    return tuple(x)


class _NoGrad:
    """`with tg.no_grad():` or `@tg.no_grad()`: no graph is recorded inside."""

    def __enter__(self) -> None:
        self.prev, Tensor.no_grad = Tensor.no_grad, True

    def __exit__(self, *exc: Any) -> None:
        Tensor.no_grad = self.prev

    def __call__(self, fn: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _NoGrad():
                return fn(*args, **kwargs)
        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


def apply(fn: type[F.Function], *x: Tensor, **kwargs: Any) -> Tensor:
    """Run a primitive Function forward on the tensors' lazy buffers; the result remembers the
    Function (and so its inputs) for backward when any input requires grad."""
    ctx = fn(x[0].lazydata.device, *x)
    out = ctx.forward(*[t.lazydata for t in x], **kwargs)
    if out is x[0].lazydata and fn is not F.Contiguous:
        # an op that changes nothing here (a sum over dims of size 1) still makes a new tensor, as torch's:
        # one over the input's memory that keeps its values when that memory is written (alias); torch's
        # contiguous() of a contiguous tensor is that tensor
        out = out.alias()
    if not out.dtype.is_float:
        # integer and bool values have no gradient (torch's rule): a cast to int, a comparison or an
        # index cuts the graph here, whatever its inputs need
        return _wrap(out, False)
    ret = _wrap(out, ctx.requires_grad)
    if ctx.requires_grad and not Tensor.no_grad:
        ret._ctx = ctx
        ctx.parents = x
        if any(t._prior for t in x):      # an input written in place before: which value it read
            ctx.versions = tuple(len(t._prior or ()) for t in x)
    return ret


def _wrap(lb: LazyBuffer, requires_grad: bool | None) -> Tensor:
    """A Tensor of a lazy buffer already on its device and of its dtype: Tensor(lb) without the
    argument checks, which every op would otherwise pay."""
    t = Tensor.__new__(Tensor)
    t.lazydata, t.requires_grad, t.grad, t._ctx, t._prior = lb, requires_grad, None, None, None
    return t


_Method = TypeVar("_Method", bound=Callable[..., Any])

# view methods that name another tensor for its shape only: replayed as the shape's own method
_AS_SHAPE = {"view_as": "reshape", "reshape_as": "reshape", "expand_as": "expand"}

# reshapes, which no strides may express over a view's memory (then torch copies)
_RESHAPES = frozenset(("reshape", "flatten", "unflatten", "view_as", "reshape_as"))


def _view_op(fn: _Method) -> _Method:
    """Mark a Tensor method as one of torch's view ops (its result, or each of its results, shares the
    tensor's memory: a write through either is seen by the other). Only calls from outside tg's core make
    views (the program's, and tg.nn's and tg.distributed's, written as programs are): the core's ops call
    the same methods for values torch computes into new memory (a sum over a dim of size 1 is a reshape),
    so their results stay what torch makes, copies."""
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = fn(self, *args, **kwargs)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("tg.core."):
            return out
        if name in _AS_SHAPE:
            other = args[0] if args else next(iter(kwargs.values()))
            step_fn, args, kwargs = _VIEW_STEPS[_AS_SHAPE[name]], (other.shape,), {}
        else:
            step_fn = fn
        if isinstance(out, tuple):
            for k, o in enumerate(out):
                _link_view(o, self, (step_fn, args, kwargs, k), name in _RESHAPES)
        else:
            _link_view(out, self, (step_fn, args, kwargs, None), name in _RESHAPES)
        return out

    _VIEW_STEPS[name] = fn
    return method  # type: ignore[return-value]  # the same signature


_VIEW_STEPS: dict[str, Callable] = {}


class Tensor:
    """An n-dimensional array on a device, computed lazily."""
    # _prior: the values in-place writes under autograd replaced, oldest first (a version is an index);
    # a Function that read an earlier version is given that value back in backward (autograd.parents)
    # _alias: for a view (in torch's sense) that the program made of another tensor's memory, (root,
    # chain): the tensor that owns the memory and the view calls from it (see _view_op). _views: a
    # root's views, held weakly, re-derived when it is written (_refresh_views). Both are unset on most
    # tensors (read with getattr: every op makes a tensor, few are views or have them).
    __slots__ = ("lazydata", "requires_grad", "grad", "_ctx", "_prior", "_alias", "_views", "__weakref__")
    _alias: tuple[Tensor, tuple] | None
    _views: Readers | None
    training: bool = False
    no_grad: bool = False
    _last_root: weakref.ref[Tensor] | None = None
    _post_backward_hooks: list[Callable[[Tensor], None]] = []

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        device = Device.canonicalize(device)
        dt = dtypes.from_any(dtype) if dtype is not None else None
        self.grad: Tensor | None = None
        self._ctx: F.Function | None = None
        self._prior: list[Tensor] | None = None
        if isinstance(data, LazyBuffer):
            lb = data if data.device == device else data.copy_to_device(device)
            if dt is not None and dt != lb.dtype:
                lb = lb.e(UnaryOps.CAST, arg=dt)
        elif isinstance(data, Tensor):
            # torch.tensor(t) copies t: this one keeps t's values when t is written (alias)
            lb = data.lazydata.alias() if dt is None else data.cast(dt).lazydata
            lb = lb.copy_to_device(device)
        elif isinstance(data, (bool, int, float)):
            lb = LazyBuffer.const(data, dt or dtype_of_scalar(data), device, ())
        elif isinstance(data, (np.ndarray, np.generic)):
            lb = _from_numpy(np.asarray(data), dt, device)
        elif isinstance(data, (list, tuple)):
            lb = _from_numpy(_list_to_numpy(data, dt), dt, device)
        else:
            raise TypeError(f"[core] Tensor() takes a list, tuple, scalar, numpy array or Tensor, "
                            f"got {type(data).__name__}")
        self.lazydata: LazyBuffer = lb
        self.requires_grad = _grad_dtype_checked(requires_grad, lb.dtype)

    # ------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, as a tuple of ints (torch gives a torch.Size).

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).shape
            (2, 3)
        """
        return self.lazydata.shape

    @property
    def dtype(self) -> DType:
        """The element type, a DType from tg.dtypes. Python ints make int64 and floats float32, as in torch.

            >>> Tensor([1, 2]).dtype, Tensor([1.0]).dtype, Tensor([True]).dtype
            (dtypes.int64, dtypes.float32, dtypes.bool)
        """
        return self.lazydata.dtype

    @property
    def device(self) -> str:
        """The name of the device that holds the tensor ("CPU", "NUMPY", "CUDA", ...); see to().

            >>> Tensor([1, 2], device="NUMPY").device
            'NUMPY'
        """
        return self.lazydata.device

    @property
    def ndim(self) -> int:
        """The number of dimensions (0 for a scalar tensor).

            >>> Tensor(3.0).ndim, Tensor([[1, 2]]).ndim
            (0, 2)
        """
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions (torch's name for ndim).

            >>> Tensor([[1, 2]]).dim()
            2
        """
        return self.ndim

    def numel(self) -> int:
        """The number of elements, the product of the shape (1 for a scalar tensor).

            >>> Tensor.zeros(2, 3, 4).numel(), Tensor(3.0).numel()
            (24, 1)
        """
        return prod(self.shape)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape, or with `dim` the size of that one dim (a negative dim counts from the end).

            >>> x = Tensor.zeros(2, 3)
            >>> x.size(), x.size(-1)
            ((2, 3), 3)
        """
        return self.shape if dim is None else self.shape[self._axis(dim)]

    def element_size(self) -> int:
        """How many bytes one element of this dtype takes.

            >>> Tensor([1.0]).element_size(), Tensor([1.0]).half().element_size()
            (4, 2)
        """
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """How many bytes the elements take: numel() * element_size().

            >>> Tensor.zeros(2, 3, dtype="float16").nbytes
            12
        """
        return self.numel() * self.dtype.itemsize

    @property
    @_view_op
    def T(self) -> Tensor:
        """The dims in reverse order, as a view (numpy's .T): the transpose of a matrix, and no change for
        0-d or 1-d tensors.

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).T.tolist()
            [[1, 4], [2, 5], [3, 6]]
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("[core] len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.lazydata!r} grad={'None' if self.grad is None else 'set'}>"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"[core] the truth value of a tensor of shape {self.shape} is ambiguous; "
                             f"use .any() or .all()")
        return bool(self.item())

    # ------------------------------------------------------------ realization
    def realize(self, *others: Tensor) -> Tensor:
        """Run the kernels that compute this tensor (and `others`, in one schedule) now; returns self.
        Reading values (tolist, numpy, item) realizes too, so call it only to choose when work runs.

            >>> a, b = Tensor([1, 2]) + 1, Tensor([3]) * 2
            >>> a.realize(b).tolist(), b.tolist()
            ([2, 3], [6])
        """
        from tg.core.realize import realize
        realize([self.lazydata, *(t.lazydata for t in others)])
        return self

    def numpy(self) -> np.ndarray:
        """A numpy copy of the values (bfloat16 comes back as float32).

            >>> Tensor([[1, 2], [3, 4]]).numpy()
            array([[1, 2],
                   [3, 4]])
            >>> Tensor([1.5]).bfloat16().numpy().dtype
            dtype('float32')
        """
        from tg.core.realize import to_numpy
        return to_numpy(self._detached().lazydata).copy()

    def item(self) -> Any:
        """The value of a one-element tensor (of any shape) as a Python bool, int or float.

            >>> Tensor([[7]]).item(), Tensor(2.5).item(), Tensor([True]).item()
            (7, 2.5, True)
        """
        if self.numel() != 1:
            raise ValueError(f"[core] item() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The values as nested Python lists; a 0-d tensor gives a plain number.

            >>> Tensor([[1, 2], [3, 4]]).tolist(), Tensor(2.5).tolist()
            ([[1, 2], [3, 4]], 2.5)
        """
        return self.numpy().tolist()

    def to(self, *args: Any, dtype: DType | str | None = None, device: str | None = None,
           **ignored: Any) -> Tensor:
        """This tensor on another device and/or in another dtype, torch's forms: to(device),
        to(dtype), to(device, dtype), to(other) (other's device and dtype), or keywords; self when
        nothing changes. Gradients flow back through the copy and the cast. torch's non_blocking=
        and copy= are accepted and change nothing (tg copies run in order).

            >>> x = Tensor([1, 2]).to("NUMPY")
            >>> x.device, x.to("NUMPY") is x, x.to(dtypes.float16).dtype
            ('NUMPY', True, dtypes.float16)
        """
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = arg.device, arg.dtype
            elif isinstance(arg, DType):
                dtype = arg
            else:
                device = arg
        x = self if dtype is None or dtypes.from_any(dtype) == self.dtype else self.cast(dtype)
        if device is None or Device.canonicalize(device) == x.device:
            return x
        return apply(F.Copy, x, device=Device.canonicalize(device))

    @_view_op
    def detach(self) -> Tensor:
        """The same values cut out of the graph: no gradient flows back through the result.

            >>> x = Tensor([3.0], requires_grad=True)
            >>> _ = (x * x.detach()).sum().backward()
            >>> x.grad.tolist()                   # d(x * c)/dx = c, where x * x would give 2x
            [3.0]
        """
        return self._detached()

    def _detached(self) -> Tensor:
        # detach() for tg's core, which makes no views (see _view_op), without the view method's wrapper
        return _wrap(self.lazydata, False)

    @_view_op
    def contiguous(self) -> Tensor:
        """The values written out to a buffer of their own in row-major order (a view such as .T becomes a
        real copy).

            >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
            [[1, 3], [2, 4]]
        """
        return apply(F.Contiguous, self)

    def _fresh(self) -> Tensor:
        """The same values as a new tensor, as torch makes one where tg has nothing to compute (a pad by
        nothing, a sum of a 0-d tensor): over this one's memory, keeping its values when either is
        written (see apply)."""
        return apply(F.Reshape, self, shape=self.shape)

    def _stored(self) -> Tensor:
        """The values as one computation that every kernel reading them sees bit for bit (see
        LazyBuffer.stored): what is compared for equality with a reduce of it is read through this."""
        return apply(F.Stored, self)

    def assign(self, value: Tensor | Any) -> Tensor:
        """Write value into this tensor's memory (used by optimizers); returns self. The value needs the
        same shape and device, and is cast to self's dtype.

            >>> w = Tensor([1.0, 2.0])
            >>> w.assign(Tensor([3, 4])).tolist(), w.dtype
            ([3.0, 4.0], dtypes.float32)
        """
        value = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype)
        if not Tensor.no_grad and (value.requires_grad or self._ctx is not None):
            raise RuntimeError(
                "[autograd] assign: writing a value that requires grad, or into a tensor computed from one, "
                "is not recorded for autograd (its gradient would be wrong); use an in-place operator "
                "(x += y, x.mul_(y), x.copy_(y): recorded as torch records them), build a new tensor, or "
                "wrap the write in `with tg.no_grad():`")
        if value.shape != self.shape:
            raise ValueError(
                f"[core] assign: value of shape {value.shape} into a tensor of shape {self.shape}"
            )
        if value.device != self.device:
            raise ValueError(f"[core] assign: value on {value.device} into a tensor on {self.device}")
        if value.dtype != self.dtype:
            value = value.cast(self.dtype)
        self._store(value)._refresh_views()
        return self

    def _store(self, value: Tensor) -> Tensor:
        """Write value (of self's shape and dtype) into self's memory; returns the tensor that owns that
        memory, whose views the caller re-derives (_refresh_views). A view of another tensor's memory (a
        slice, view, permute, narrow, select, diagonal, detach, ... as in torch) is written there, as a lazy
        assign of the whole owner (the window's elements replaced), so that every view of that memory sees
        the write from here on and every other tensor that read it keeps its values."""
        alias = getattr(self, "_alias", None)
        if alias is not None and self.lazydata.base is not alias[0].lazydata.base:
            alias = self._alias = None      # its memory was set by hand (tg.distributed's flat buffers)
        if alias is None:
            self._store_own(value)
            return self
        root, chain = alias
        view = _written_view(root, chain)
        if view.contiguous and prod(view.shape) == prod(root.shape):
            root._store_own(_wrap(value.lazydata.reshape(root.shape), False))
            return root
        # the whole of root's memory is written (a lazy assign), so a tensor that read it before keeps
        # what it read, as each of torch's copies does (the scheduler stores it first)
        root._store_own(_placed(root, view, value))
        return root

    def _store_own(self, value: Tensor) -> None:
        target = self.lazydata
        if not target.is_base or target.op is BufferOps.CONST:
            # a constant has no memory, and a tensor torch would have copied that tg left as a view (a flip,
            # a pad, tg.tensor(x): a view of all of x) none of its own: it gets its own, fresh, as the write
            # covers all of it
            target = LazyBuffer.empty(self.shape, self.dtype, self.device)
        # an unrealized target is computed first in the same schedule (the scheduler stores it)
        self.lazydata = target.assign(value.lazydata)

    def _refresh_views(self) -> None:
        """Re-derive each live view of self's memory from self's value now (a write made self a new lazy
        buffer), with a graph to self's where it had one, as torch rebases a view on an in-place write."""
        views = getattr(self, "_views", None)
        if not views:
            return
        for t in list(views):
            alias = getattr(t, "_alias", None)
            if alias is None or alias[0] is not self:
                continue
            t._take(_replay(self, alias[1], t._ctx is not None))

    def _take(self, made: Tensor) -> None:
        """Take made's value, and its graph where self had one (a leaf that requires grad stays one);
        Functions that read self before keep the version they read (Tensor._prior)."""
        if self._ctx is not None:
            old = _wrap(self.lazydata, self.requires_grad)
            old._ctx = self._ctx
            self._prior = self._prior or []
            self._prior.append(old)
            self._ctx, self.requires_grad = made._ctx, made.requires_grad
        self.lazydata = made.lazydata

    # ------------------------------------------------------------ creation
    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed rand / randn / randint / dropout: the same seed gives the same numbers on every device.

            >>> Tensor.manual_seed(42)
            >>> a = Tensor.rand(3).tolist()
            >>> Tensor.manual_seed(42)
            >>> Tensor.rand(3).tolist() == a
            True
        """
        random.manual_seed(seed)

    @staticmethod
    def get_rng_state(on_device: bool = False) -> dict[str, Any]:
        """The random number generator's state: {"seed": int, "counters": {device: count}}, where a
        device's count is how many random 32-bit words it has drawn since the seed was set.

        By default the counts are ints read back from the devices, ready to save (a training
        checkpoint). With on_device=True each count is a realized uint32[1] copy made on its device
        by a kernel, with no host read: this is what activation checkpointing saves, and it stays
        right inside a TinyJit, whose replays rerun the copy. set_rng_state() takes either form.

            >>> state = Tensor.get_rng_state()
            >>> a = Tensor.rand(3).tolist()
            >>> Tensor.set_rng_state(state)
            >>> Tensor.rand(3).tolist() == a
            True
        """
        state = random.state(on_device)
        if on_device:
            state["counters"] = {d: Tensor(c, device=d) for d, c in state["counters"].items()}
        return state

    @staticmethod
    def set_rng_state(state: dict[str, Any]) -> None:
        """Restore a state from get_rng_state() (either form): later rand / randn / dropout draw the
        same numbers as they did after it was taken. Counters are written in place on their devices
        (a device with no saved count starts again from 0, as after manual_seed).

            >>> state = Tensor.get_rng_state(on_device=True)
            >>> a = Tensor.randn(2).tolist()
            >>> Tensor.set_rng_state(state)
            >>> Tensor.randn(2).tolist() == a
            True
        """
        if not isinstance(state, dict) or set(state) != {"seed", "counters"}:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"[core] set_rng_state: expected the dict get_rng_state() returns, with keys "
                             f"['counters', 'seed'], got {got}")
        random.set_state(state["seed"], {Device.canonicalize(d): v.lazydata if isinstance(v, Tensor) else v
                                         for d, v in state["counters"].items()})

    @staticmethod
    def _uniform01(shape: tuple[int, ...], device: str | None, mantissa: int = 24) -> Tensor:
        device = Device.canonicalize(device)
        return Tensor(random.uniform01(shape, device, mantissa), device=device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """A tensor of the given shape whose values are not set (float32 unless dtype is given): fill it
        (assign) before reading it.

            >>> x = Tensor.empty(2, 3, dtype="int32")
            >>> x.shape, x.dtype
            ((2, 3), dtypes.int32)
        """
        dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
        return Tensor(LazyBuffer.empty(_shape(shape), dt, Device.canonicalize(device)), device=device, **kw)

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
             **kw: Any) -> Tensor:
        """A tensor of `shape` (an int or a tuple) filled with fill_value; without dtype, the value's type
        picks it (int64, float32 or bool), as torch does.

            >>> Tensor.full((2, 2), 7).tolist()
            [[7, 7], [7, 7]]
            >>> Tensor.full(3, 0.5).dtype
            dtypes.float32
        """
        shape = _shape((shape,) if isinstance(shape, int) else tuple(shape))
        dt = dtypes.from_any(dtype) if dtype is not None else dtype_of_scalar(fill_value)
        lb = LazyBuffer.const(fill_value, dt, Device.canonicalize(device), shape)
        return Tensor(lb, device=device, **kw)

    @staticmethod
    def zeros(*shape: Any, **kw: Any) -> Tensor:
        """A tensor of zeros; the shape as ints or one tuple, float32 unless dtype is given.

            >>> Tensor.zeros(2, 3).tolist()
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
            >>> Tensor.zeros((2,), dtype="int32").tolist()
            [0, 0]
        """
        kw.setdefault("dtype", dtypes.default_float)
        return Tensor.full(_shape(shape), 0, **kw)

    @staticmethod
    def ones(*shape: Any, **kw: Any) -> Tensor:
        """A tensor of ones; the shape as ints or one tuple, float32 unless dtype is given.

            >>> Tensor.ones(2, 2).tolist()
            [[1.0, 1.0], [1.0, 1.0]]
            >>> Tensor.ones(3, dtype="bool").tolist()
            [True, True, True]
        """
        kw.setdefault("dtype", dtypes.default_float)
        return Tensor.full(_shape(shape), 1, **kw)

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """start, start + step, ... up to but not including stop (arange(n) counts 0..n-1). As in torch,
        the result is int64 unless an argument is a float, then float32.

            >>> Tensor.arange(5).tolist(), Tensor.arange(5, 0, -2).tolist()
            ([0, 1, 2, 3, 4], [5, 3, 1])
            >>> Tensor.arange(0, 1, 0.25).tolist()
            [0.0, 0.25, 0.5, 0.75]
        """
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("[core] arange: step must be non-zero")
        is_float = any(isinstance(v, float) for v in (start, stop, step))
        dt = (
            dtypes.from_any(dtype)
            if dtype is not None
            else (dtypes.default_float if is_float else dtypes.default_int)
        )
        n = max(math.ceil((stop - start) / step), 0)
        # the index vector is host data, like any tensor made from numbers
        index: np.ndarray = np.arange(n, dtype=np.float64 if is_float else np.int64)
        values = start + index * step
        return Tensor(values.astype(dt.np_value), device=device, dtype=dt, **kw)

    @staticmethod
    def linspace(start: float, stop: float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None, **kw: Any) -> Tensor:
        """`steps` evenly spaced values from start to stop, both included (float32 unless dtype is given).

            >>> Tensor.linspace(0, 1, 5).tolist()
            [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        if steps < 0:
            raise ValueError(f"[core] linspace: steps must be >= 0, got {steps}")
        dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
        return Tensor(np.linspace(start, stop, steps).astype(dt.np_value), device=device, dtype=dt, **kw)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
            **kw: Any) -> Tensor:
        """The n x m identity matrix (m defaults to n): ones on the diagonal, float32 unless dtype is given.

            >>> Tensor.eye(2).tolist()
            [[1.0, 0.0], [0.0, 1.0]]
            >>> Tensor.eye(2, 3, dtype="int32").tolist()
            [[1, 0, 0], [0, 1, 0]]
        """
        m = n if m is None else m
        rows = index_range(n, Device.canonicalize(device)).reshape(n, 1)
        cols = index_range(m, Device.canonicalize(device)).reshape(1, m)
        return (rows == cols).cast(
            dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
        ).requires_grad_(kw.get("requires_grad"))

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """Samples uniform in [0, 1), float32 unless dtype is given; manual_seed makes them repeatable.

            >>> x = Tensor.rand(2, 3)
            >>> x.shape, x.dtype, bool(((x >= 0) & (x < 1)).all())
            ((2, 3), dtypes.float32, True)
        """
        dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
        if not dt.is_float:
            raise TypeError(f"[core] rand: uniform samples in [0, 1) need a float dtype, got {dt.name} "
                            f"(torch raises too); pass dtype=float (e.g. dtype='float32'), or use randint")
        mantissa = {"float16": 11, "bfloat16": 8}.get(dt.name, 24)
        out = Tensor._uniform01(_shape(shape), device, mantissa).cast(dt)
        return out.contiguous()._detached().requires_grad_(kw.get("requires_grad"))

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any) -> Tensor:
        """Standard normal samples (Box-Muller on two uniform streams), float32 unless dtype is given.

            >>> Tensor.manual_seed(0)
            >>> x = Tensor.randn(10000)
            >>> x.dtype, abs(x.mean().item()) < 0.1, abs(x.std().item() - 1) < 0.1
            (dtypes.float32, True, True)
        """
        dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_float
        shp = _shape(shape)
        u = Tensor._uniform01((2, *shp), device)
        radius = (-2.0 * (1.0 - u[0]).log()).sqrt()           # 1 - u is in (0, 1]: log is finite
        out = (radius * (2 * math.pi * u[1]).cos()).cast(dt)
        return out.contiguous()._detached().requires_grad_(kw.get("requires_grad"))

    @staticmethod
    def randint(low: int, high: Any = None, size: Any = (), dtype: DType | str | None = None,
                device: str | None = None, **kw: Any) -> Tensor:
        """Integers drawn uniformly from [low, high), int64 unless dtype is given; as in torch,
        randint(high, size) means low=0.

            >>> x = Tensor.randint(3, 7, size=(100,))
            >>> x.dtype, x.min().item() >= 3, x.max().item() < 7
            (dtypes.int64, True, True)
            >>> Tensor.randint(5, (2, 3)).shape
            (2, 3)
        """
        if isinstance(high, (tuple, list)):
            high, size = None, high
        if high is None:
            low, high = 0, low
        if high <= low:
            raise ValueError(f"[core] randint: need low < high, got low={low} high={high}")
        dt = dtypes.from_any(dtype) if dtype is not None else dtypes.default_int
        shp = _shape(tuple(size) if isinstance(size, (tuple, list)) else (size,))
        u = Tensor._uniform01(shp, device).cast(dtypes.float64)
        out = (u * (high - low)).floor().cast(dtypes.int64) + low
        return out.cast(dt).contiguous().requires_grad_(kw.get("requires_grad"))

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kw: Any) -> Tensor:
        """Samples uniform in [low, high) (float32 unless dtype is given).

            >>> x = Tensor.uniform(2, 3, low=-2.0, high=2.0)
            >>> x.shape, bool(((x >= -2) & (x < 2)).all())
            ((2, 3), True)
        """
        return (
            (
                Tensor.rand(*shape, **{k: v for k, v in kw.items() if k != "requires_grad"}) * (high - low)
                + low
            )
            ._detached()
            .requires_grad_(kw.get("requires_grad"))
        )

    @staticmethod
    def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, **kw: Any) -> Tensor:
        """Normal samples with the given mean and std (float32 unless dtype is given).

            >>> Tensor.manual_seed(0)
            >>> x = Tensor.normal(10000, mean=5.0, std=2.0)
            >>> abs(x.mean().item() - 5) < 0.1, abs(x.std().item() - 2) < 0.1
            (True, True)
        """
        return (Tensor.randn(*shape, **{k: v for k, v in kw.items() if k != "requires_grad"}) * std + mean) \
            ._detached().requires_grad_(kw.get("requires_grad"))

    def _like_kw(self, kw: dict) -> dict:
        return {"dtype": kw.pop("dtype", self.dtype), "device": kw.pop("device", self.device), **kw}

    def zeros_like(self, **kw: Any) -> Tensor:
        """Zeros with this tensor's shape, dtype and device (dtype= or device= override them).

            >>> Tensor([[1, 2], [3, 4]]).zeros_like().tolist()
            [[0, 0], [0, 0]]
        """
        return Tensor.zeros(*self.shape, **self._like_kw(kw))

    def ones_like(self, **kw: Any) -> Tensor:
        """Ones with this tensor's shape, dtype and device (dtype= or device= override them).

            >>> Tensor([1, 2, 3]).ones_like().tolist(), Tensor([1, 2]).ones_like(dtype="float32").tolist()
            ([1, 1, 1], [1.0, 1.0])
        """
        return Tensor.ones(*self.shape, **self._like_kw(kw))

    def full_like(self, fill_value: Any, **kw: Any) -> Tensor:
        """fill_value in this tensor's shape, dtype and device; as in torch, the value is cast to that dtype.

            >>> Tensor([1.0, 2.0]).full_like(7).tolist()
            [7.0, 7.0]
        """
        return Tensor.full(self.shape, fill_value, **self._like_kw(kw))

    def empty_like(self, **kw: Any) -> Tensor:
        """A tensor with this one's shape, dtype and device whose values are not set (see empty()).

            >>> x = Tensor([[1.0, 2.0]]).empty_like()
            >>> x.shape, x.dtype
            ((1, 2), dtypes.float32)
        """
        return Tensor.empty(*self.shape, **self._like_kw(kw))

    def rand_like(self, **kw: Any) -> Tensor:
        """rand() with this tensor's shape, dtype and device (dtype= or device= override them).

            >>> x = Tensor.zeros(2, 2).rand_like()
            >>> x.shape, bool(((x >= 0) & (x < 1)).all())
            ((2, 2), True)
        """
        kw = self._like_kw(kw)
        return Tensor.rand(*self.shape, **kw)

    def randn_like(self, **kw: Any) -> Tensor:
        """randn() with this tensor's shape, dtype and device (dtype= or device= override them).

            >>> x = Tensor.zeros(3, dtype="float16").randn_like()
            >>> x.shape, x.dtype
            ((3,), dtypes.float16)
        """
        return Tensor.randn(*self.shape, **self._like_kw(kw))

    def new_full(self, size: Any, fill_value: Any, **kw: Any) -> Tensor:
        """fill_value in shape `size`, with this tensor's dtype and device unless dtype=/device= are given.

            >>> Tensor([1.0]).new_full((2, 2), 3).tolist()
            [[3.0, 3.0], [3.0, 3.0]]
        """
        return Tensor.full(size, fill_value, **self._like_kw(kw))

    def new_zeros(self, *size: Any, **kw: Any) -> Tensor:
        """Zeros of shape `size` with this tensor's dtype and device (dtype=/device= override them).

            >>> Tensor([1, 2]).new_zeros(2, 3).tolist()
            [[0, 0, 0], [0, 0, 0]]
        """
        return Tensor.zeros(*size, **self._like_kw(kw))

    def new_ones(self, *size: Any, **kw: Any) -> Tensor:
        """Ones of shape `size` with this tensor's dtype and device (dtype=/device= override them).

            >>> Tensor([1.5]).new_ones(3).tolist()
            [1.0, 1.0, 1.0]
        """
        return Tensor.ones(*size, **self._like_kw(kw))

    def new_empty(self, *size: Any, **kw: Any) -> Tensor:
        """An unset tensor of shape `size` with this tensor's dtype and device (see empty()).

            >>> Tensor([1], dtype="int32").new_empty(2, 2).dtype
            dtypes.int32
        """
        return Tensor.empty(*size, **self._like_kw(kw))

    def new_tensor(self, data: Any, **kw: Any) -> Tensor:
        """A new tensor of `data` (copied, cut from any graph) with this tensor's dtype and device.

            >>> Tensor([1.0]).new_tensor([1, 2]).tolist()
            [1.0, 2.0]
        """
        kw = self._like_kw(kw)
        data = data.detach() if isinstance(data, Tensor) else data
        return Tensor(data, device=kw["device"], dtype=kw["dtype"], requires_grad=kw.get("requires_grad"))

    def requires_grad_(self, requires_grad: bool | None = True) -> Tensor:
        """Set, in place, whether backward() computes a gradient for this tensor; returns self.

            >>> x = Tensor([2.0]).requires_grad_()
            >>> _ = (x * x).sum().backward()
            >>> x.grad.tolist()
            [4.0]
        """
        self.requires_grad = _grad_dtype_checked(requires_grad, self.dtype)
        return self

    # ------------------------------------------------------------ autograd (engine: autograd.py)
    def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
        """Accumulate d(self)/d(leaf) into every leaf's .grad (a scalar loss, or give `gradient`).

        As in torch, the graph is freed as it is consumed: once a Function's gradient is taken it
        lets go of the values it saved, so the forward's activations die with the last kernel that
        reads them. Pass retain_graph=True to go backward through the same graph again.

            >>> x = Tensor([1.0, 2.0], requires_grad=True)
            >>> y = (x * x).sum()
            >>> _ = y.backward(retain_graph=True)
            >>> _ = y.backward()                  # a second pass needs the first to retain the graph
            >>> x.grad.tolist()
            [4.0, 8.0]
        """
        Tensor._last_root = weakref.ref(self)
        for leaf, g in autograd.backprop(self, self._root_gradient(gradient, "backward"), None, retain_graph):
            new = Tensor(g, device=leaf.device)
            leaf.grad = new if leaf.grad is None else (leaf.grad + new)
        for hook in list(Tensor._post_backward_hooks):
            hook(self)
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None,
                 retain_graph: bool = False) -> list[Tensor | None]:
        """d(self)/d(target) for each target, returned rather than accumulated into .grad (no
        tensor's .grad changes); None for a target that self does not depend on. Targets may be
        leaves or intermediate tensors. The graph is freed as in backward() unless retain_graph.

            >>> x = Tensor([1.0, 2.0], requires_grad=True)
            >>> [g.tolist() for g in (x * x).sum().gradient(x)]
            [[2.0, 4.0]]
        """
        if not targets:
            raise ValueError("[autograd] gradient() needs at least one target tensor; got none")
        found = dict(
            autograd.backprop(
                self, self._root_gradient(gradient, "gradient"), {id(t) for t in targets}, retain_graph
            )
        )
        return [Tensor(found[t], device=t.device) if t in found else None for t in targets]

    def _root_gradient(self, gradient: Tensor | None, caller: str) -> LazyBuffer:
        if gradient is None:
            if self.numel() != 1:
                raise ValueError(
                    f"[autograd] {caller}() without a gradient needs a scalar, got shape {self.shape}; "
                    f"pass gradient= of the same shape"
                )
            gradient = Tensor.ones(*self.shape, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(
                f"[autograd] gradient shape {gradient.shape} does not match tensor shape {self.shape}"
            )
        if self._ctx is None and not self.requires_grad:
            raise RuntimeError("[autograd] this tensor does not require grad and has no graph; "
                               "set requires_grad=True on the leaves")
        return gradient.lazydata

    @staticmethod
    def register_post_backward_hook(fn: Callable[[Tensor], None]) -> Callable[[], None]:
        """Call fn(root) at the end of every backward() (DDP and ZeRO start their gradient
        communication there); returns a function that removes the hook.

            >>> seen = []
            >>> remove = Tensor.register_post_backward_hook(lambda root: seen.append(root.shape))
            >>> _ = (Tensor([1.0, 2.0], requires_grad=True) * 3).sum().backward(); remove(); seen
            [()]
        """
        Tensor._post_backward_hooks.append(fn)

        def remove() -> None:
            if fn in Tensor._post_backward_hooks:
                Tensor._post_backward_hooks.remove(fn)
        return remove

    @staticmethod
    def last_backward_root() -> Tensor | None:
        """The tensor .backward() was last called on, while it is alive (optimizers realize it
        with the update, so the old weights need no copy).

            >>> loss = (Tensor([1.0], requires_grad=True) * 2).sum()
            >>> _ = loss.backward()
            >>> Tensor.last_backward_root() is loss
            True
        """
        ref = Tensor._last_root
        return ref() if ref is not None else None

    # ------------------------------------------------------------ helpers
    def _axis(self, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not isinstance(axis, (int, np.integer)):
            raise TypeError(f"[core] an axis must be an int, got {type(axis).__name__}")
        lo = -max(n, 1)
        if not lo <= axis < max(n, 1):
            raise TgIndexError(f"[core] axis {axis} is out of range for a tensor with {n} dims "
                               f"(expected {lo}..{max(n, 1) - 1})")
        return int(axis) % max(n, 1)

    def _axes(self, axis: Any) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = tuple(self._axis(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        if self.ndim == 0:
            return ()   # torch: dim 0 (or -1) of a 0-d tensor is the tensor itself
        if len(set(axes)) != len(axes):
            raise ValueError(f"[core] axis {axis} repeats a dimension")
        return axes

    def _to_tensor(self, y: Any) -> Tensor:
        if isinstance(y, Tensor):
            return y
        if isinstance(y, (bool, int, float)):
            return Tensor(
                LazyBuffer.const(y, scalar_result_type(self.dtype, y), self.device, ()), device=self.device
            )
        return Tensor(y, device=self.device)

    def _broadcasted(
        self, y: Any, reverse: bool = False, out_dtype: DType | None = None
    ) -> tuple[Tensor, Tensor]:
        x: Tensor = self
        if isinstance(y, Tensor):
            if y.device != x.device:
                raise ValueError(f"[core] operands on different devices: {x.device} and {y.device}; "
                                 f"move one with .to()")
            dt = _promote_tensors(x.dtype if x.ndim else None, y.dtype if y.ndim else None, x.dtype, y.dtype)
        elif isinstance(y, (bool, int, float)):
            # a Python number becomes a constant of x's shape at once (no reshape and expand to record)
            dt = out_dtype or scalar_result_type(x.dtype, y)
            const = _wrap(LazyBuffer.const(y, dt, x.lazydata.device, x.shape), None)
            return (const, x.cast(dt)) if reverse else (x.cast(dt), const)
        else:
            y = Tensor(y, device=x.device)
            dt = promote_types(x.dtype, y.dtype)
        dt = out_dtype or dt
        if reverse:
            x, y = y, x
        shape = broadcast_shape(x.shape, y.shape)
        return x.cast(dt)._broadcast_to(shape), y.cast(dt)._broadcast_to(shape)

    def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        src = self if padded == self.shape else apply(F.Reshape, self, shape=padded)
        return apply(F.Expand, src, shape=shape)

    # ------------------------------------------------------------ movement
    @_view_op
    def reshape(self, *shape: Any) -> Tensor:
        """The same elements, in row-major order, in a new shape given as ints or one tuple; one size may
        be -1 to be inferred. `view` is another name for it, so unlike torch's view it also takes a
        non-contiguous tensor (a transpose, say).

            >>> Tensor.arange(6).reshape(2, 3).tolist()
            [[0, 1, 2], [3, 4, 5]]
            >>> Tensor.arange(6).view(-1, 2).shape
            (3, 2)
        """
        new = _argfix(*shape)
        if sum(1 for s in new if s == -1) > 1:
            raise ValueError(f"[core] reshape: only one dimension can be -1, got {new}")
        known = prod(s for s in new if s != -1)
        if -1 in new:
            if known == 0 or self.numel() % known:
                raise ValueError(
                    f"[core] reshape: cannot reshape {self.shape} ({self.numel()} elements) into {new}"
                )
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if any(not isinstance(s, (int, np.integer)) or s < 0 for s in new):
            raise ValueError(f"[core] reshape: sizes must be non-negative ints, got {new}")
        new = tuple(int(s) for s in new)
        if prod(new) != self.numel():
            raise ValueError(f"[core] reshape: cannot reshape {self.shape} ({self.numel()} elements) into "
                             f"{new} ({prod(new)} elements)")
        if new == self.shape:
            return self
        return apply(F.Reshape, self, shape=new)

    view = reshape

    @_view_op
    def permute(self, *order: Any) -> Tensor:
        """The dims in a new order, as a view: dim i of the result is dim order[i] of self.

            >>> Tensor.zeros(1, 2, 3).permute(2, 0, 1).shape
            (3, 1, 2)
        """
        order = tuple(self._axis(o) for o in _argfix(*order))
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"[core] permute: {order} is not a permutation of {self.ndim} dims")
        return apply(F.Permute, self, order=order)

    @_view_op
    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dims, as a view. Without arguments it swaps dims 0 and 1 (torch requires both).

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).transpose(0, 1).tolist()
            [[1, 4], [2, 5], [3, 6]]
        """
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @_view_op
    def t(self) -> Tensor:
        """The transpose of a tensor of at most 2 dims (0-d and 1-d come back as they are), as torch.t.

            >>> Tensor([[1, 2, 3]]).t().shape, Tensor([1, 2]).t().shape
            ((3, 1), (2,))
        """
        if self.ndim > 2:
            raise ValueError(f"[core] t: expects a tensor of at most 2 dims, got shape {self.shape}; use "
                             f"transpose")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @_view_op
    def view_as(self, other: Tensor) -> Tensor:
        """This tensor reshaped to other's shape.

            >>> Tensor([1, 2, 3, 4]).view_as(Tensor.zeros(2, 2)).tolist()
            [[1, 2], [3, 4]]
        """
        return self.reshape(other.shape)

    @_view_op
    def expand(self, *shape: Any) -> Tensor:
        """Broadcast dims of size 1 to a larger size without copying; -1 keeps a dim's size and new dims
        may be added in front, as in torch.

            >>> Tensor([[1], [2]]).expand(-1, 3).tolist()
            [[1, 1, 1], [2, 2, 2]]
            >>> Tensor([1, 2]).expand(2, 2).tolist()
            [[1, 2], [1, 2]]
        """
        new = _argfix(*shape)
        if len(new) < self.ndim:
            raise ValueError(f"[core] expand: target {new} has fewer dims than {self.shape}")
        old = (1,) * (len(new) - self.ndim) + self.shape
        out = tuple(o if n == -1 else n for o, n in zip(old, new))
        for o, n in zip(old, out):
            if o != n and o != 1:
                raise ValueError(f"[core] expand: cannot expand {self.shape} to {new}: size {o} is not 1")
        return self.reshape(old)._expand(out)

    def _expand(self, shape: tuple[int, ...]) -> Tensor:
        return self if shape == self.shape else apply(F.Expand, self, shape=shape)

    @_view_op
    def expand_as(self, other: Tensor) -> Tensor:
        """expand() to other's shape.

            >>> Tensor([1, 2]).expand_as(Tensor.zeros(3, 2)).tolist()
            [[1, 2], [1, 2], [1, 2]]
        """
        return self.expand(other.shape)

    def pad(self, padding: Sequence[Any], value: float = 0.0) -> Tensor:
        """Pad with `value`: pad((l, r)) pads the last dim and (l, r, t, b) the last two, in torch F.pad's
        order (last dim first); pad(((b0, a0), (b1, a1), ...)) gives (before, after) for each dim in
        order, None for a dim left alone. Negative sizes cut elements off.

            >>> Tensor([1, 2, 3]).pad((1, 2)).tolist()
            [0, 1, 2, 3, 0, 0]
            >>> Tensor([[1, 2], [3, 4]]).pad(((1, 0), (0, 1)), value=9).tolist()
            [[9, 9, 9], [1, 2, 9], [3, 4, 9]]
        """
        if padding and all(isinstance(p, (tuple, list)) or p is None for p in padding):
            if len(padding) != self.ndim:
                raise ValueError(f"[core] pad: got {len(padding)} (before, after) pairs for {self.ndim} dims")
            arg = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        else:
            flat = list(padding)
            if len(flat) % 2 or len(flat) // 2 > self.ndim:
                raise ValueError(
                    f"[core] pad: expected an even number of sizes for at most {self.ndim} dims, got {flat}"
                )
            pairs = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
            arg = tuple([(0, 0)] * (self.ndim - len(pairs)) + list(reversed(pairs)))
        if all(p == (0, 0) for p in arg):
            return self._fresh()
        shrink = tuple((max(0, -b), s + min(0, a)) for (b, a), s in zip(arg, self.shape))
        if any(lo > hi for lo, hi in shrink):
            raise ValueError(f"[core] pad: negative padding {arg} removes more than the shape {self.shape}")
        x = self._shrink(shrink)
        grow = tuple((max(0, b), max(0, a)) for b, a in arg)
        if all(g == (0, 0) for g in grow):
            return x
        out = apply(F.Pad, x, arg=grow)
        if value != 0:
            mask = apply(F.Pad, Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device), arg=grow)
            # as torch, the value takes the tensor's dtype (1.5 pads an int tensor with 1), never the reverse
            kind = builtins.bool if self.dtype == dtypes.bool else builtins.float if self.dtype.is_float \
                else builtins.int
            out = mask.where(out, kind(value))
        return out

    def _shrink(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
        if all(a == (0, s) for a, s in zip(arg, self.shape)):
            return self
        return apply(F.Shrink, self, arg=arg)

    def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
        """Keep the range [lo, hi) of each dim (None keeps the whole dim), as a view: a slice with step 1.

            >>> Tensor.arange(12).reshape(3, 4).shrink(((1, 3), None)).tolist()
            [[4, 5, 6, 7], [8, 9, 10, 11]]
        """
        full = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
        for (lo, hi), s in zip(full, self.shape):
            if not 0 <= lo <= hi <= s:
                raise ValueError(f"[core] shrink: range ({lo}, {hi}) is outside a dim of size {s}")
        return self._shrink(full)

    def flip(self, *dims: Any) -> Tensor:
        """Reverse the order of the elements along the given dims.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.flip(0).tolist(), x.flip(0, 1).tolist()
            ([[3, 4], [1, 2]], [[4, 3], [2, 1]])
        """
        axes = self._axes(_argfix(*dims))
        return apply(F.Flip, self, axes=tuple(i in axes for i in range(self.ndim)))

    @_view_op
    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        """Drop dims of size 1: all of them, or only `dim` (an int or a tuple of them); a named dim whose
        size is not 1 is left alone, as in torch.

            >>> x = Tensor.zeros(1, 3, 1)
            >>> x.squeeze().shape, x.squeeze(0).shape, x.squeeze(1).shape, x.squeeze((0, 2)).shape
            ((3,), (3, 1), (1, 3, 1), (3,))
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        if self.ndim == 0:
            return self
        drop = {d for d in self._axes(dim) if self.shape[d] == 1}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in drop))

    @_view_op
    def unsqueeze(self, dim: int) -> Tensor:
        """Insert a dim of size 1 at position `dim` of the result (a negative dim counts from its end).

            >>> x = Tensor([1, 2, 3])
            >>> x.unsqueeze(0).shape, x.unsqueeze(-1).shape
            ((1, 3), (3, 1))
        """
        d = self._axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    @_view_op
    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dims start_dim..end_dim (both included) into one; a 0-d tensor becomes shape (1,).

            >>> x = Tensor.zeros(2, 3, 4)
            >>> x.flatten().shape, x.flatten(1).shape
            ((24,), (2, 12))
        """
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    @_view_op
    def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dim `dim` into dims of the given sizes (one may be -1): the inverse of flatten.

            >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
            (2, 3, 4)
        """
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def repeat(self, *repeats: Any) -> Tensor:
        """Tile the tensor: dim i is repeated repeats[i] times, and extra leading repeats add dims (torch's
        repeat, numpy's tile).

            >>> Tensor([1, 2]).repeat(2, 3).tolist()
            [[1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 1, 2]]
        """
        reps = _argfix(*repeats)
        if len(reps) < self.ndim:
            raise ValueError(f"[core] repeat: {len(reps)} repeats for {self.ndim} dims")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(base)
        # (.., 1, s, ..) -> (.., r, s, ..) -> (.., r*s, ..)
        expanded = x.reshape(tuple(v for s in base for v in (1, s))).expand(
            tuple(v for r, s in zip(reps, base) for v in (r, s)))
        return expanded.reshape(tuple(r * s for r, s in zip(reps, base)))

    @autocast_op
    def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
        """Join self and the others along the existing dim `dim`, promoting dtypes as torch.cat does (a
        method here: the first tensor is self).

            >>> Tensor([1, 2]).cat(Tensor([3]), Tensor([4, 5])).tolist()
            [1, 2, 3, 4, 5]
            >>> Tensor([[1, 2]]).cat(Tensor([[3, 4]]), dim=1).tolist()
            [[1, 2, 3, 4]]
        """
        tensors = [self, *others]
        d = self._axis(dim)
        for t in tensors:
            if t.ndim != self.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d
            ):
                raise ValueError(f"[core] cat: shapes {[t.shape for t in tensors]} differ outside dim {d}")
        dt = tensors[0].dtype
        for t in tensors[1:]:
            dt = promote_types(dt, t.dtype)
        total = sum(t.shape[d] for t in tensors)
        out, offset = None, 0
        for t in tensors:
            arg = [(0, 0)] * self.ndim
            arg[d] = (offset, total - offset - t.shape[d])
            padded = t.cast(dt).pad(tuple(arg))
            out = padded if out is None else out + padded
            offset += t.shape[d]
        assert out is not None
        return out

    @staticmethod
    @autocast_op
    def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        """Join tensors of one shape along a new dim `dim`.

            >>> a, b = Tensor([1, 2]), Tensor([3, 4])
            >>> Tensor.stack([a, b]).tolist(), Tensor.stack([a, b], dim=1).tolist()
            ([[1, 2], [3, 4]], [[1, 3], [2, 4]])
        """
        if not tensors:
            raise ValueError("[core] stack: needs at least one tensor")
        d = tensors[0]._axis(dim, tensors[0].ndim + 1)
        parts = [t.unsqueeze(d) for t in tensors]
        return parts[0].cat(*parts[1:], dim=d)

    @_view_op
    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Consecutive pieces along `dim`, as views: pieces of split_size (the last may be shorter) or of
        each size in a list.

            >>> [t.tolist() for t in Tensor.arange(5).split(2)]
            [[0, 1], [2, 3], [4]]
            >>> [t.tolist() for t in Tensor.arange(5).split([1, 4])]
            [[0], [1, 2, 3, 4]]
        """
        d = self._axis(dim)
        n = self.shape[d]
        if isinstance(split_size, int):
            if split_size <= 0:
                raise ValueError(f"[core] split: split_size must be positive, got {split_size}")
            sizes = [min(split_size, n - i) for i in range(0, n, split_size)] or [0]
        else:
            sizes = list(split_size)
            if sum(sizes) != n:
                raise ValueError(f"[core] split: sizes {sizes} sum to {sum(sizes)}, dim {d} has {n}")
        out, start = [], 0
        for s in sizes:
            arg = [(0, k) for k in self.shape]
            arg[d] = (start, start + s)
            out.append(self._shrink(tuple(arg)))
            start += s
        return tuple(out)

    @_view_op
    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of ceil(n / chunks); as in torch, that can give fewer than `chunks`.

            >>> [t.tolist() for t in Tensor.arange(6).chunk(4)]
            [[0, 1], [2, 3], [4, 5]]
        """
        if chunks <= 0:
            raise ValueError(f"[core] chunk: chunks must be positive, got {chunks}")
        n = self.shape[self._axis(dim)]
        return self.split(max(math.ceil(n / chunks), 1), dim)

    # ------------------------------------------------------------ indexing
    @_view_op
    def __getitem__(self, index: Any) -> Tensor:
        """numpy/torch indexing: ints, slices (any step), None, ..., and integer tensors, lists or
        arrays (advanced indexing, torch's placement of the indexed dims). Basic indices make views.

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x[1, ::-2].tolist(), x[:, [2, 0]].tolist(), x[None, 0].shape
            ([6, 4], [[3, 1], [6, 4]], (1, 3))
        """
        return indexing.getitem(self, index)

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """Pick elements along `dim` at the positions in `index` (torch.gather): for dim=1,
        out[i][j] = self[i][index[i][j]]. The result has index's shape.

            >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
            [[1, 1], [4, 3]]
        """
        d = self._axis(dim)
        if not isinstance(index, Tensor) or not index.dtype.is_int:
            raise TypeError("[core] gather: index must be an integer Tensor")
        if index.ndim != self.ndim:
            raise ValueError(f"[core] gather: index has {index.ndim} dims, input has {self.ndim}")
        for i, (a, b) in enumerate(zip(index.shape, self.shape)):
            if i != d and a > b:
                raise ValueError(
                    f"[core] gather: index shape {index.shape} exceeds input {self.shape} at dim {i}"
                )
        indexing.check_bounds(index, self.shape[d])
        x = self._shrink(tuple((0, index.shape[i]) if i != d else (0, s) for i, s in enumerate(self.shape)))
        n = self.shape[d]
        onehot = indexing.as_index(index).unsqueeze(-1) == index_range(n, self.device)   # (*index.shape, n)
        xs = x.unsqueeze(-1).transpose(d, -1)                                 # (..., 1 at d, ..., n)
        # one position is picked per output, so the sum (which widens ints to int64) casts back exactly
        return onehot.where(xs.expand(*index.shape, n), 0).sum(-1).cast(self.dtype)

    def __setitem__(self, index: Any, value: Any) -> None:
        """x[index] = value, written in place into x's memory as a lazy assign: ints, slices (any step), None
        and ... (value broadcast to x[index]'s shape and cast to x's dtype), or one bool mask of x's leading
        dims with a scalar value. Tensors read x before the write keep the old values. As torch does for
        a leaf, a tensor that requires grad cannot be written outside no_grad(). As in torch, writing into a
        view of another tensor's memory (x = y[0]) writes y.

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x[:, 0] = Tensor([7, 8])
            >>> x[x > 5] = 0
            >>> x.tolist()
            [[0, 2, 3], [0, 5, 0]]
        """
        self._check_inplace("setitem", value)
        self.assign(indexing.setitem_value(self, index, value))

    def _check_inplace(self, name: str, value: Any = None) -> None:
        if Tensor.no_grad:
            return
        if self.requires_grad:
            raise RuntimeError(
                f"[core] {name}: in-place write into a tensor that requires grad (torch raises for a leaf "
                f"too); wrap it in `with tg.no_grad():`, or build a new tensor with where() or masked_fill()")
        if isinstance(value, Tensor) and value.requires_grad:
            raise RuntimeError(f"[core] {name}: the value requires grad, but an in-place write is not "
                               f"recorded for autograd; use where() or masked_fill() to build a new tensor")

    def copy_(self, src: Any) -> Tensor:
        """Write src (broadcast to self's shape, cast to its dtype, moved to its device) into self's memory,
        in place; returns self. Recorded for autograd as torch records it (a leaf that requires grad raises).

            >>> x = Tensor.zeros(2, 2)
            >>> x.copy_(Tensor([1, 2])).tolist()
            [[1.0, 2.0], [1.0, 2.0]]
        """
        src = src if isinstance(src, Tensor) else Tensor(src, device=self.device, dtype=self.dtype)
        return self._write_in_place(
            "copy_", lambda old: src.to(self.device).cast(self.dtype)._broadcast_to(self.shape))

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        """value where mask is true, else self (a new tensor; mask broadcasts to self's shape and value is
        cast to self's dtype, as in torch).

            >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).masked_fill(Tensor([True, False]), -1).tolist()
            [[-1.0, 2.0], [-1.0, 4.0]]
        """
        mask = mask if isinstance(mask, Tensor) else Tensor(mask, device=self.device)
        if mask.dtype != dtypes.bool:
            raise TypeError(f"[core] masked_fill: mask must be a bool tensor, got {mask.dtype.name}")
        if broadcast_shape(mask.shape, self.shape) != self.shape:
            raise ValueError(f"[core] masked_fill: mask of shape {mask.shape} does not broadcast to "
                             f"{self.shape}")
        v = value.cast(self.dtype) if isinstance(value, Tensor) else \
            Tensor(LazyBuffer.const(value, self.dtype, self.device, ()), device=self.device)
        if v.numel() != 1:
            raise ValueError(f"[core] masked_fill: value must be a scalar or a 0-d tensor, got shape "
                             f"{v.shape}")
        return mask._broadcast_to(self.shape).where(v.reshape(()), self)

    def _tri(self, diagonal: builtins.int, lower: builtins.bool) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"[core] tril/triu: need a tensor of at least 2 dims, got shape {self.shape}")
        n, m = self.shape[-2:]
        col_minus_row = index_range(m, self.device).reshape(1, m) - index_range(n, self.device).reshape(n, 1)
        keep = (col_minus_row <= diagonal) if lower else (col_minus_row >= diagonal)
        return keep._broadcast_to(self.shape).where(self, Tensor(0, device=self.device, dtype=self.dtype))

    def tril(self, diagonal: builtins.int = 0) -> Tensor:
        """The lower triangle of the last two dims (elements with col - row <= diagonal), zeros elsewhere.

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).tril().tolist(), Tensor([[1, 2], [3, 4]]).tril(-1).tolist()
            ([[1, 0, 0], [4, 5, 0]], [[0, 0], [3, 0]])
        """
        return self._tri(diagonal, True)

    def triu(self, diagonal: builtins.int = 0) -> Tensor:
        """The upper triangle of the last two dims (elements with col - row >= diagonal), zeros elsewhere.

            >>> Tensor([[1, 2, 3], [4, 5, 6]]).triu().tolist(), Tensor([[1, 2], [3, 4]]).triu(1).tolist()
            ([[1, 2, 3], [0, 5, 6]], [[0, 2], [0, 0]])
        """
        return self._tri(diagonal, False)

    @_view_op
    def diagonal(self, offset: builtins.int = 0, dim1: builtins.int = 0, dim2: builtins.int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes, `offset` above the main one (below when negative), as a
        new last dim (a view, as in torch).

            >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
            >>> x.diagonal().tolist(), x.diagonal(1).tolist(), x.diagonal(-1).tolist()
            ([1, 5], [2, 6], [4])
        """
        d1, d2 = self._axis(dim1), self._axis(dim2)
        if d1 == d2:
            raise ValueError(f"[core] diagonal: dim1 and dim2 are the same dim ({dim1})")
        rest = [i for i in range(self.ndim) if i not in (d1, d2)]
        x = self.permute(rest + [d1, d2])
        n, m = x.shape[-2:]
        rows, cols = (0, n), (0, m)
        rows = (min(-offset, n), n) if offset < 0 else rows
        cols = (min(offset, m), m) if offset > 0 else cols
        k = max(0, min(rows[1] - rows[0], cols[1] - cols[0]))
        lead = x.shape[:-2]
        x = x._shrink(tuple((0, s) for s in lead) + ((rows[0], rows[0] + k), (cols[0], cols[0] + k)))
        # element (i, i) of the k x k block sits at i * (k + 1) of its flattened form
        x = x.reshape(lead + (k * k,)).pad(((0, 0),) * len(lead) + ((0, k),)).reshape(lead + (k, k + 1))
        return x._shrink(tuple((0, s) for s in lead) + ((0, k), (0, 1))).reshape(lead + (k,))

    def diag(self, diagonal: builtins.int = 0) -> Tensor:
        """torch.diag: a 1-d tensor becomes a square matrix with it on the `diagonal`-th diagonal; a 2-d
        tensor gives that diagonal.

            >>> Tensor([1, 2]).diag().tolist(), Tensor([[1, 2], [3, 4]]).diag().tolist()
            ([[1, 0], [0, 2]], [1, 4])
            >>> Tensor([5]).diag(1).tolist()
            [[0, 5], [0, 0]]
        """
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise ValueError(f"[core] diag: expected a 1-d or 2-d tensor, got shape {self.shape}")
        n, k = self.shape[0], abs(diagonal)
        # (n, 1) padded to rows of n + 1 and flattened: the values land n + 1 apart, on the diagonal
        x = self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1))._shrink(((0, n * n),)).reshape(n, n)
        return x.pad(((0, k), (k, 0)) if diagonal > 0 else ((k, 0), (0, k)))

    @autocast_op
    def trace(self) -> Tensor:
        """The sum of the main diagonal of a 2-d tensor (int tensors give int64, as sum does).

            >>> Tensor([[1, 2], [3, 4]]).trace().item()
            5
        """
        if self.ndim != 2:
            raise ValueError(f"[core] trace: expected a 2-d tensor, got shape {self.shape}")
        return self.diagonal().sum()

    # ------------------------------------------------------------ casts
    def cast(self, dtype: DType | str) -> Tensor:
        """The values converted to `dtype` (a DType or its name); float to int rounds toward zero. Returns
        self when the dtype already matches.

            >>> Tensor([1.7, -1.7]).cast("int32").tolist()
            [1, -1]
        """
        if dtype is self.lazydata.dtype:
            return self
        dt = dtypes.from_any(dtype)
        return self if dt == self.dtype else apply(F.Cast, self, dtype=dt)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """The same bits read as another dtype of the same size (torch's view(dtype)): no value changes.

            >>> Tensor([1.0]).bitcast("int32").tolist()
            [1065353216]
        """
        dt = dtypes.from_any(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"[core] bitcast from {self.dtype.name} to {dt.name}: sizes differ "
                            f"({self.dtype.itemsize} vs {dt.itemsize} bytes)")
        return self if dt == self.dtype else apply(F.Cast, self, dtype=dt, bitcast=True)

    def type_as(self, other: Tensor) -> Tensor:
        """This tensor cast to other's dtype.

            >>> Tensor([1.7, 2.2]).type_as(Tensor([0])).tolist()
            [1, 2]
        """
        return self.cast(other.dtype)

    def float(self) -> Tensor:
        """cast() to float32.

            >>> Tensor([1, 2]).float().tolist()
            [1.0, 2.0]
        """
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        """cast() to float16.

            >>> Tensor([1.0, 2.5]).half().dtype
            dtypes.float16
        """
        return self.cast(dtypes.float16)

    def bfloat16(self) -> Tensor:
        """cast() to bfloat16.

            >>> x = Tensor([1.0, 3.0]).bfloat16()
            >>> x.dtype, x.tolist()
            (dtypes.bfloat16, [1.0, 3.0])
        """
        return self.cast(dtypes.bfloat16)

    def double(self) -> Tensor:
        """cast() to float64.

            >>> Tensor([1, 2]).double().dtype
            dtypes.float64
        """
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        """cast() to int32 (floats round toward zero).

            >>> Tensor([1.9, -1.9]).int().tolist()
            [1, -1]
        """
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        """cast() to int64 (floats round toward zero).

            >>> Tensor([2.5]).long().dtype
            dtypes.int64
        """
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        """cast() to bool: nonzero is True.

            >>> Tensor([0, 2, -1]).bool().tolist()
            [False, True, True]
        """
        return self.cast(dtypes.bool)

    def _float_like(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    # ------------------------------------------------------------ elementwise
    def _nograd_op(self, op: Any, *others: Tensor, arg: Any = None) -> Tensor:
        return apply(F.FUNCTIONS[op], self, *others, arg=arg)

    def neg(self) -> Tensor:
        """-self, elementwise (the unary minus operator); a bool tensor raises, as in torch.

            >>> Tensor([1, -2]).neg().tolist(), (-Tensor([1.5])).tolist()
            ([-1, 2], [-1.5])
        """
        if self.dtype == dtypes.bool:
            raise TypeError("[core] negation of a bool tensor; use logical_not() or ~")
        return apply(F.Neg, self)

    def __neg__(self) -> Tensor:
        return self.neg()

    def add(self, y: Any, reverse: builtins.bool = False, *, alpha: Any = 1) -> Tensor:
        """self + alpha * y, broadcasting, with torch's type promotion: a Python int keeps the tensor's dtype
        and a float turns an int tensor into float32. reverse=True computes y + self.

            >>> Tensor([1, 2]).add(Tensor([10, 20])).tolist(), (Tensor([[1], [2]]) + 0.5).tolist()
            ([11, 22], [[1.5], [2.5]])
            >>> Tensor([1, 2], dtype="int32").add(3).dtype
            dtypes.int32
        """
        return apply(F.Add, *self._broadcasted(y if alpha == 1 else self._to_tensor(y) * alpha, reverse))

    def sub(self, y: Any, reverse: builtins.bool = False, *, alpha: Any = 1) -> Tensor:
        """self - alpha * y, broadcasting and promoting as add(); reverse=True computes y - self. Bool
        tensors raise, as in torch.

            >>> Tensor([5, 7]).sub(Tensor([1, 2])).tolist(), Tensor([5, 7]).sub(10, reverse=True).tolist()
            ([4, 5], [5, 3])
        """
        a, b = self._broadcasted(y if alpha == 1 else self._to_tensor(y) * alpha, reverse)
        if a.dtype == dtypes.bool:
            raise TypeError("[core] subtraction of bool tensors; use logical_xor() or ^")
        return apply(F.Add, a, apply(F.Neg, b))

    def mul(self, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self * y, broadcasting and promoting as add(); reverse=True computes y * self.

            >>> Tensor([2, 3]).mul(Tensor([4, 5])).tolist(), (Tensor([2, 3]) * 0.5).tolist()
            ([8, 15], [1.0, 1.5])
        """
        return apply(F.Mul, *self._broadcasted(y, reverse))

    def div(self, y: Any, reverse: builtins.bool = False, rounding_mode: str | None = None) -> Tensor:
        """self / y, broadcasting; as in torch, integer inputs give float32. rounding_mode="floor" is
        floordiv() and "trunc" rounds the quotient toward zero. reverse=True computes y / self.

            >>> Tensor([1, 3]).div(2).tolist(), Tensor([-7, 7]).div(2, rounding_mode="floor").tolist()
            ([0.5, 1.5], [-4, 3])
            >>> Tensor([-7.0, 7.0]).div(2, rounding_mode="trunc").tolist()
            [-3.0, 3.0]
            >>> Tensor([-7, 7]).div(2, rounding_mode="trunc").tolist()
            [-3, 3]
        """
        if rounding_mode == "floor":
            return self.floordiv(y, reverse)
        a, b = self._broadcasted(y, reverse)
        if rounding_mode == "trunc":
            # ints: C division truncates, exactly and in the int dtype (torch keeps it too)
            return (a / b).trunc() if a.dtype.is_float else a._nograd_op(BinaryOps.IDIV, b)
        a, b = a._float_like(), b._float_like()
        return apply(F.Mul, a, apply(F.Reciprocal, b))

    def floordiv(self, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self // y, rounded toward minus infinity (Python's //, torch.floor_divide); ints stay ints.

            >>> Tensor([-7, 7]).floordiv(2).tolist(), (Tensor([-7.0, 7.0]) // 2).tolist()
            ([-4, 3], [-4.0, 3.0])
        """
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            return (a / b).floor()
        q = a._nograd_op(BinaryOps.IDIV, b)
        r = a._nograd_op(BinaryOps.MOD, b)
        adjust = (r != 0) & ((r < 0) != (b < 0))
        return q - adjust.cast(q.dtype)

    def mod(self, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self % y with Python / torch.remainder semantics: the result has the sign of the divisor.

            >>> Tensor([-7, 7]).mod(3).tolist(), (Tensor([-7.5, 7.5]) % -2).tolist()
            ([2, 1], [-1.5, -0.5])
        """
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            return a - (a / b).floor() * b
        r = a._nograd_op(BinaryOps.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def fmod(self, y: Any) -> Tensor:
        """The remainder with the sign of the dividend (C's fmod, torch.fmod); compare mod().

            >>> Tensor([-7, 7]).fmod(3).tolist(), Tensor([-7.5, 7.5]).fmod(2).tolist()
            ([-1, 1], [-1.5, 1.5])
        """
        a, b = self._broadcasted(y)
        return a._nograd_op(BinaryOps.MOD, b) if not a.dtype.is_float else a - (a / b).trunc() * b

    @autocast_op
    def pow(self, y: Any, reverse: builtins.bool = False) -> Tensor:
        """self ** y, broadcasting, with torch's dtypes: int ** int stays int (the promoted int dtype)
        and is exact, wrapping on overflow as torch does; a float on either side gives float. A scalar
        whole-number float exponent with |y| <= 16 is an exact repeated product; other float exponents
        go through exp2/log2, and a negative base gives nan unless the exponent is whole. An int
        tensor to a negative int scalar raises, as in torch. reverse=True is y ** self.

            >>> Tensor([1, 2, 3]).pow(2).tolist(), Tensor([2.0, 4.0]).pow(-1).tolist()
            ([1, 4, 9], [0.5, 0.25])
            >>> Tensor([4.0, 9.0]).pow(0.5).tolist(), Tensor([-2.0, 2.0]).pow(3.0).tolist()
            ([2.0, 3.0], [-8.0, 8.0])
            >>> Tensor([2, 3]).pow(20).tolist(), (2 ** Tensor([1, 2, 3])).tolist()
            ([1048576, 3486784401], [2, 4, 8])
        """
        if not reverse and isinstance(y, (int, float)) and not isinstance(y, bool):
            x = self.cast(scalar_result_type(self.dtype, y))
            if not x.dtype.is_float:
                if y < 0:
                    raise ValueError(f"[core] pow: Integers to negative integer powers are not allowed "
                                     f"(as in torch), got {x.dtype.name} ** {y}; use a float tensor")
                return x._pow_by_squaring(int(y))
            with _NoGrad():
                value = x._detached()._pow_scalar_value(y)
            return x._local(value, (x, lambda: 0 if y == 0 else y * x._detached()._pow_scalar_value(y - 1)))
        a, b = self._broadcasted(y, reverse)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if not a.dtype.is_float:
            return a._int_pow(b)
        ad, bd = a._detached(), b._detached()
        with _NoGrad():
            value = ad._pow_value(bd)
        # torch's derivatives: b * a**(b-1) (0 where b == 0) and a**b * log(a) (0 where a == 0 <= b)
        return a._local(value, (a, lambda: (bd == 0).where(0.0, bd * ad._pow_value(bd - 1))),
                        (b, lambda: ((ad == 0) & (bd >= 0)).where(0.0, value * ad.log())))

    def _pow_by_squaring(self, n: builtins.int) -> Tensor:
        """self ** n for a whole n >= 0 by repeated squaring: exact in integer arithmetic."""
        acc, base = None, self
        while n:
            if n & 1:
                acc = base if acc is None else acc * base
            n >>= 1
            if n:
                base = base * base
        return self.ones_like() if acc is None else acc

    def _pow_scalar_value(self, y: builtins.int | builtins.float) -> Tensor:
        if y == 0.5:
            return self.sqrt()
        if y == -0.5:
            return self.rsqrt()
        if float(y).is_integer() and abs(y) <= 16:
            acc = self._pow_by_squaring(abs(int(y)))
            return acc.reciprocal() if y < 0 else acc
        return self._pow_value(Tensor(LazyBuffer.const(y, self.dtype, self.device, ()), device=self.device)
                               ._broadcast_to(self.shape))

    def _pow_value(self, b: Tensor) -> Tensor:
        """a ** b for float tensors of one shape, with no gradient rule of its own (pow() gives one)."""
        a = self
        mag = (b == 0).where(1.0, (b * a.abs().log2()).exp2())   # 0**0 is 1
        # negative bases: real only for integer exponents; sign flips for odd ones
        is_int = b == b.trunc()
        odd = (b.abs() % 2) == 1
        neg = a < 0
        sign = (neg & odd).where(-1.0, 1.0)
        return (neg & is_int.logical_not()).where(float("nan"), mag * sign)

    def _int_pow(self, e: Tensor) -> Tensor:
        """self ** e for int tensors of one shape and dtype: square-and-multiply over every bit of the
        exponent, so exact (wrapping as the dtype does). A negative exponent gives what torch's
        integer pow gives: 1 for base 1, +-1 for base -1, else 0."""
        bits = self.dtype.itemsize * 8 - (0 if self.dtype.is_unsigned else 1)
        known = known_values(e.lazydata) if e.numel() else None
        if known is not None:   # host data: only the bits in use
            bits = min(bits, max(int(known.max()).bit_length(), 1))
        acc, base = self.ones_like(), self
        for bit in range(bits):
            acc = acc * ((e >> bit) & 1).bool().where(base, 1)
            if bit + 1 < bits:
                base = base * base
            if bit % 6 == 5:
                # each square reads base twice, and kernels inline it as a tree: cut the chain
                acc, base = acc.realize(), base.realize()
        if self.dtype.is_unsigned:
            return acc
        odd = (e & 1) == 1
        neg_pow = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0))
        return (e < 0).where(neg_pow.cast(self.dtype), acc)

    def _local(self, value: Tensor, *inputs: tuple[Tensor, Callable[[], Any]]) -> Tensor:
        """value (computed with no graph) joined to the graph of the given inputs, each with a callable
        giving d(value)/d(input) (a scalar or a tensor of value's shape), called only when a gradient is
        wanted. The inputs have value's shape and dtype."""
        if Tensor.no_grad or not any(t.requires_grad for t, _ in inputs):
            return value
        derivatives = []
        for _, fn in inputs:
            with _NoGrad():
                d = fn()
                d = d.cast(value.dtype) if isinstance(d, Tensor) else \
                    Tensor(LazyBuffer.const(d, value.dtype, value.device, ()), device=value.device)
                derivatives.append(d._broadcast_to(value.shape).lazydata)
        return apply(F.Local, *(t for t, _ in inputs), value=value.lazydata, derivatives=tuple(derivatives))

    def __add__(self, y: Any) -> Tensor: return self.add(y)
    def __radd__(self, y: Any) -> Tensor: return self.add(y, True)
    def __sub__(self, y: Any) -> Tensor: return self.sub(y)
    def __rsub__(self, y: Any) -> Tensor: return self.sub(y, True)
    def __mul__(self, y: Any) -> Tensor: return self.mul(y)
    def __rmul__(self, y: Any) -> Tensor: return self.mul(y, True)
    def __truediv__(self, y: Any) -> Tensor: return self.div(y)
    @autocast_op
    def __rtruediv__(self, y: Any) -> Tensor: return self.div(y, True)
    def __floordiv__(self, y: Any) -> Tensor: return self.floordiv(y)
    def __rfloordiv__(self, y: Any) -> Tensor: return self.floordiv(y, True)
    def __mod__(self, y: Any) -> Tensor: return self.mod(y)
    def __rmod__(self, y: Any) -> Tensor: return self.mod(y, True)
    @autocast_op
    def __pow__(self, y: Any) -> Tensor: return self.pow(y)
    @autocast_op
    def __rpow__(self, y: Any) -> Tensor: return self.pow(y, True)
    @autocast_op
    def __matmul__(self, y: Tensor) -> Tensor: return self.matmul(y)
    @autocast_op
    def __rmatmul__(self, y: Tensor) -> Tensor: return self._to_tensor(y).matmul(self)
    def __iadd__(self, y: Any) -> Tensor: return self._binary_in_place("+=", Tensor.add, y)
    def __isub__(self, y: Any) -> Tensor: return self._binary_in_place("-=", Tensor.sub, y)
    def __imul__(self, y: Any) -> Tensor: return self._binary_in_place("*=", Tensor.mul, y)
    def __itruediv__(self, y: Any) -> Tensor: return self._binary_in_place("/=", Tensor.div, y)

    def add_(self, other: Any, alpha: Any = 1) -> Tensor:
        """self += alpha * other, in place (torch's add_); returns self.

            >>> Tensor([1.0, 2.0]).add_(Tensor([1.0, 1.0]), alpha=3).tolist()
            [4.0, 5.0]
        """
        return self._binary_in_place("add_", Tensor.add, other if alpha == 1 else other * alpha)

    def sub_(self, other: Any, alpha: Any = 1) -> Tensor:
        """self -= alpha * other, in place (torch's sub_); returns self.

            >>> Tensor([1.0, 2.0]).sub_(1).tolist()
            [0.0, 1.0]
        """
        return self._binary_in_place("sub_", Tensor.sub, other if alpha == 1 else other * alpha)

    def mul_(self, other: Any) -> Tensor:
        """self *= other, in place (torch's mul_); returns self.

            >>> Tensor([1.0, 2.0]).mul_(3).tolist()
            [3.0, 6.0]
        """
        return self._binary_in_place("mul_", Tensor.mul, other)

    def div_(self, other: Any) -> Tensor:
        """self /= other, in place (torch's div_); returns self.

            >>> Tensor([1.0, 2.0]).div_(2).tolist()
            [0.5, 1.0]
        """
        return self._binary_in_place("div_", Tensor.div, other)

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002  (torch's names)
        """self clamped to [min, max], in place (torch's clamp_); returns self.

            >>> Tensor([-2.0, 0.5, 3.0]).clamp_(-1, 1).tolist()
            [-1.0, 0.5, 1.0]
        """
        return self._write_in_place("clamp_", lambda old: old.clamp(min, max))

    def fill_(self, value: Any) -> Tensor:
        """Every element set to value, in place (torch's fill_); returns self.

            >>> Tensor([1.0, 2.0]).fill_(7).tolist()
            [7.0, 7.0]
        """
        return self.copy_(value)

    def zero_(self) -> Tensor:
        """Every element set to 0, in place (torch's zero_); returns self.

            >>> Tensor([1.0, 2.0]).zero_().tolist()
            [0.0, 0.0]
        """
        return self.copy_(0)

    def _binary_in_place(self, name: str, op: Callable[[Tensor, Any], Tensor], y: Any) -> Tensor:
        # x += x reads x's old value on both sides
        return self._write_in_place(name, lambda old: op(old, old if y is self else y))

    def _write_in_place(self, name: str, compute: Callable[[Tensor], Tensor]) -> Tensor:
        """Write compute(old) into self's memory, where old stands for self's value before the write;
        returns self. Recorded for autograd as torch records an in-place op: self becomes the result, with
        compute's gradient rule, and old takes self's place in the graph so far (autograd.parents). As in
        torch it raises for a leaf that requires grad (outside no_grad()). Unlike torch, a write under
        autograd names the new value instead of writing memory, so what a Function saved or another
        computation read keeps its value: where torch raises ("modified by an inplace operation") tg
        gives the gradient of the values the program computed."""
        if Tensor.no_grad:
            return self.assign(compute(self))
        if self.requires_grad and self._ctx is None:
            raise RuntimeError(
                f"[autograd] {name}: a leaf tensor that requires grad is written in place (torch raises "
                f"too); wrap the write in `with tg.no_grad():`, or build a new tensor (x = x + y)")
        old = _wrap(self.lazydata, self.requires_grad)
        old._ctx = self._ctx
        value = compute(old)
        if not value.requires_grad and self._ctx is None:     # nothing for autograd to record
            return self.assign(value)
        if _aliases_a_held_tensor(self):
            raise RuntimeError(
                f"[autograd] {name}: an in-place write under autograd through a view of another tensor "
                f"(a slice, reshape, permute, ...) would change that tensor without its graph knowing; "
                f"build a new tensor instead (torch.where, cat), or write under `with tg.no_grad():`")
        # self now names the new value; its memory is not written, because the recorded Function may
        # have saved old (x *= y keeps x for y's gradient) and backward reads it after the forward ran
        if value.shape != self.shape:
            raise ValueError(f"[core] {name}: the result has shape {value.shape}, the tensor written "
                             f"{self.shape}; an in-place op cannot change a tensor's shape (build a new "
                             f"tensor to broadcast: x = x + y)")
        value = value if value.dtype == self.dtype else value.cast(self.dtype)
        self.lazydata = value.lazydata
        # Functions that read self so far (a view, a reshape: they hold self, not a value) get old back in
        # backward: self's version moves on, and old is kept under the version they recorded
        self._prior = self._prior or []
        self._prior.append(old)
        self._ctx, self.requires_grad = value._ctx, value.requires_grad
        self._alias = None         # a view nothing else holds: its tensor is the graph's alone
        self._refresh_views()      # views of self take its new value and graph, as torch rebases them
        return self

    # comparisons and logic (no gradients)
    def __lt__(self, y: Any) -> Tensor: return _cmp(self, y, "lt")
    def __gt__(self, y: Any) -> Tensor: return _cmp(self, y, "gt")
    def __le__(self, y: Any) -> Tensor: return _cmp(self, y, "le")
    def __ge__(self, y: Any) -> Tensor: return _cmp(self, y, "ge")
    def __eq__(self, y: Any) -> Tensor: return _cmp(self, y, "eq")  # type: ignore[override]
    def __ne__(self, y: Any) -> Tensor: return _cmp(self, y, "ne")  # type: ignore[override]

    def lt(self, y: Any) -> Tensor:
        """self < y elementwise, broadcasting, as a bool tensor (comparisons have no gradient).

            >>> Tensor([1, 2, 3]).lt(2).tolist()
            [True, False, False]
        """
        return self < y

    def gt(self, y: Any) -> Tensor:
        """self > y elementwise, broadcasting, as a bool tensor.

            >>> Tensor([1, 2, 3]).gt(2).tolist()
            [False, False, True]
        """
        return self > y

    def le(self, y: Any) -> Tensor:
        """self <= y elementwise, broadcasting, as a bool tensor (False where either side is NaN).

            >>> Tensor([1, 2, 3]).le(2).tolist()
            [True, True, False]
        """
        return self <= y

    def ge(self, y: Any) -> Tensor:
        """self >= y elementwise, broadcasting, as a bool tensor (False where either side is NaN).

            >>> Tensor([1.0, 2.0, float("nan")]).ge(2).tolist()
            [False, True, False]
        """
        return self >= y

    def eq(self, y: Any) -> Tensor:
        """self == y elementwise, broadcasting, as a bool tensor (the == operator does the same).

            >>> Tensor([1, 2, 3]).eq(Tensor([1, 0, 3])).tolist()
            [True, False, True]
        """
        return self == y

    def ne(self, y: Any) -> Tensor:
        """self != y elementwise, broadcasting, as a bool tensor; NaN != NaN is True.

            >>> Tensor([1.0, float("nan")]).ne(Tensor([1.0, float("nan")])).tolist()
            [False, True]
        """
        return self != y

    def _bitwise(self, op: Any, y: Any, reverse: builtins.bool = False) -> Tensor:
        a, b = self._broadcasted(y, reverse)
        if a.dtype.is_float:
            raise TypeError(
                f"[core] bitwise {op.name.lower()} needs integer or bool tensors, got {a.dtype.name}"
            )
        return a._nograd_op(op, b)

    def __and__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.AND, y)
    def __rand__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.AND, y, True)
    def __or__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.OR, y)
    def __ror__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.OR, y, True)
    def __xor__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.XOR, y)
    def __rxor__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.XOR, y, True)
    def __lshift__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.SHL, y)
    def __rshift__(self, y: Any) -> Tensor: return self._bitwise(BinaryOps.SHR, y)

    def __invert__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if self.dtype.is_float:
            raise TypeError(f"[core] ~ needs an integer or bool tensor, got {self.dtype.name}")
        return self ^ -1 if not self.dtype.is_unsigned else self ^ int(max_value(self.dtype))

    def logical_not(self) -> Tensor:
        """Elementwise NOT of the truth values (nonzero is True), as a bool tensor.

            >>> Tensor([0, 3]).logical_not().tolist()
            [True, False]
        """
        return self.bool()._nograd_op(
            BinaryOps.CMPNE, Tensor(True, device=self.device)._broadcast_to(self.shape)
        )

    def logical_and(self, y: Any) -> Tensor:
        """Elementwise AND of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 2]).logical_and(Tensor([1, 1, 0])).tolist()
            [False, True, False]
        """
        return self.bool() & self._to_tensor(y).bool()

    def logical_or(self, y: Any) -> Tensor:
        """Elementwise OR of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 0]).logical_or(Tensor([0, 0, 5])).tolist()
            [False, True, True]
        """
        return self.bool() | self._to_tensor(y).bool()

    def logical_xor(self, y: Any) -> Tensor:
        """Elementwise XOR of the truth values (nonzero is True), broadcasting, as a bool tensor.

            >>> Tensor([0, 1, 2]).logical_xor(Tensor([1, 1, 0])).tolist()
            [True, False, True]
        """
        return self.bool() ^ self._to_tensor(y).bool()

    def where(self, x: Any, y: Any) -> Tensor:
        """x where self is true, else y (torch.where(self, x, y)), broadcasting all three; x and y may be
        tensors or scalars.

            >>> Tensor([True, False, True]).where(Tensor([1, 2, 3]), 0).tolist()
            [1, 0, 3]
        """
        cond = self.bool()
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            a, b = x._broadcasted(y)
        elif isinstance(x, Tensor):
            a, b = x._broadcasted(y)
        elif isinstance(y, Tensor):
            b, a = y._broadcasted(x)
        else:
            dt = promote_types(dtype_of_scalar(x), dtype_of_scalar(y))
            a = Tensor(LazyBuffer.const(x, dt, self.device, ()), device=self.device)
            b = Tensor(LazyBuffer.const(y, dt, self.device, ()), device=self.device)
        shape = broadcast_shape(cond.shape, broadcast_shape(a.shape, b.shape))
        return apply(F.Where, cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape))

    # unary math
    def exp2(self) -> Tensor:
        """2 ** self, elementwise (int inputs give float32).

            >>> Tensor([0, 1, 3]).exp2().tolist()
            [1.0, 2.0, 8.0]
        """
        return apply(F.Exp2, self._float_like())

    @autocast_op
    def log2(self) -> Tensor:
        """The base-2 logarithm, elementwise (int inputs give float32).

            >>> Tensor([1.0, 8.0, 0.5]).log2().tolist()
            [0.0, 3.0, -1.0]
        """
        return apply(F.Log2, self._float_like())

    @autocast_op
    def exp(self) -> Tensor:
        """e ** self, elementwise (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).exp().tolist()]
            [1.0, 2.7183]
        """
        x = self._float_like()
        with _NoGrad():
            out = x.detach()._exp_value()
        return x._local(out, (x, lambda: out))

    def _exp_value(self) -> Tensor:
        """e ** self with Cody-Waite's reduction: x = k ln2 + r, ln2 in two parts (k * the first is
        exact), then 2**k * exp2(r / ln2). exp2(x / ln2) rounds x / ln2 at |x| and loses log2|x| bits
        (60 float32 ulps at x = 80, 400 float64 ulps at 700); here r / ln2 is below 1/2. 2**k is two
        factors so that neither overflows where the result does not."""
        dtype = self.dtype
        x = self.cast(dtypes.float32) if dtype in (dtypes.float16, dtypes.bfloat16) else self
        wide = x.dtype == dtypes.float64
        ln2_hi, ln2_lo = (6.93147180369123816490e-01, 1.90821492927058770002e-10) if wide else \
            (6.93145751953125e-01, 1.428606765330187e-06)
        # adding and taking away 1.5 * 2**mantissa-bits rounds to a whole number (in range: clamped)
        magic = 1.5 * 2.0 ** (52 if wide else 23)
        xc = x.clamp(-1500.0 if wide else -200.0, 1500.0 if wide else 200.0)
        k = (xc * (1 / math.log(2)) + magic) - magic
        r = (xc - k * ln2_hi) - k * ln2_lo
        half = (k * 0.5 + magic) - magic
        out = (r * (1 / math.log(2))).exp2() * half.exp2() * (k - half).exp2()
        return x.isnan().where(x, out).cast(dtype)

    @autocast_op
    def log(self) -> Tensor:
        """The natural logarithm, elementwise: -inf at 0 and nan below it (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([1.0, math.e, 0.0, -1.0]).log().tolist()]
            [0.0, 1.0, -inf, nan]
        """
        return apply(F.Log2, self._float_like()) * math.log(2)

    @autocast_op
    def log10(self) -> Tensor:
        """The base-10 logarithm, elementwise (int inputs give float32).

            >>> [round(v, 4) for v in Tensor([1, 10, 1000]).log10().tolist()]
            [0.0, 1.0, 3.0]
        """
        return self.log2() * math.log10(2)

    @autocast_op
    def log1p(self) -> Tensor:
        """log(1 + self), elementwise, accurate for tiny inputs as torch's is: for |x| < 0.5,
        x * log(u) / (u - 1) with u = 1 + x rounded (its rounding error cancels in the ratio; x where
        u is 1), else log(u).

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).log1p().tolist()]
            [0.0, 0.6931]
            >>> Tensor([1e-8]).log1p().item() == Tensor([1e-8]).item()
            True
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            u = xd + 1
            log_u = u.log()
            den = (u == 1).where(1.0, u - 1)
            out = (xd.abs() < 0.5).where((u == 1).where(xd, xd * (log_u / den)), log_u)
        return x._local(out, (x, lambda: u.reciprocal()))

    @autocast_op
    def expm1(self) -> Tensor:
        """exp(self) - 1, elementwise, accurate for tiny inputs as torch's is: for |x| < 0.5,
        (u - 1) * x / log(u) with u = exp(x) rounded (x where u is 1), else u - 1.

            >>> [round(v, 4) for v in Tensor([0.0, 1.0]).expm1().tolist()]
            [0.0, 1.7183]
            >>> Tensor([1e-8]).expm1().item() == Tensor([1e-8]).item()
            True
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            u = xd.exp()
            log_u = (u == 1).where(1.0, u.log())
            out = (xd.abs() < 0.5).where((u == 1).where(xd, (u - 1) * (xd / log_u)), u - 1)
        return x._local(out, (x, lambda: u))

    def sqrt(self) -> Tensor:
        """The square root, elementwise: nan for negative inputs (int inputs give float32).

            >>> Tensor([1, 4, 9]).sqrt().tolist()
            [1.0, 2.0, 3.0]
        """
        return apply(F.Sqrt, self._float_like())

    @autocast_op
    def rsqrt(self) -> Tensor:
        """1 / sqrt(self), elementwise.

            >>> Tensor([1.0, 4.0, 0.25]).rsqrt().tolist()
            [1.0, 0.5, 2.0]
        """
        return self.sqrt().reciprocal()

    @autocast_op
    def reciprocal(self) -> Tensor:
        """1 / self, elementwise: inf at 0 (int inputs give float32).

            >>> Tensor([2, 4, 0]).reciprocal().tolist()
            [0.5, 0.25, inf]
        """
        return apply(F.Reciprocal, self._float_like())

    def sin(self) -> Tensor:
        """The sine of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 6, math.pi / 2]).sin().tolist()]
            [0.0, 0.5, 1.0]
        """
        return apply(F.Sin, self._float_like())

    def cos(self) -> Tensor:
        """The cosine of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 3, math.pi]).cos().tolist()]
            [1.0, 0.5, -1.0]
        """
        return apply(F.Cos, self._float_like())

    @autocast_op
    def tan(self) -> Tensor:
        """The tangent of angles in radians, elementwise.

            >>> [round(v, 4) for v in Tensor([0.0, math.pi / 4]).tan().tolist()]
            [0.0, 1.0]
        """
        return self.sin() / self.cos()

    def square(self) -> Tensor:
        """self * self, elementwise (the dtype is kept; bool gives int64, as torch's pow(2)).

            >>> Tensor([1, -2, 3]).square().tolist()
            [1, 4, 9]
        """
        x = self.cast(dtypes.int64) if self.dtype == dtypes.bool else self
        return x * x

    def relu(self) -> Tensor:
        """max(self, 0), elementwise; NaN stays NaN and the gradient at 0 is 0, as in torch.

            >>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
            [0.0, 0.0, 2.0]
        """
        return (self <= 0).where(0, self)   # NaN stays NaN; the gradient at 0 is 0, as in torch

    def abs(self) -> Tensor:
        """The absolute value, elementwise (the dtype is kept).

            >>> Tensor([-1.5, 0.0, 2.0]).abs().tolist(), Tensor([-3, 4]).abs().tolist()
            ([1.5, 0.0, 2.0], [3, 4])
        """
        if self.dtype.is_float:
            return self.relu() + (-self).relu()
        return (self < 0).where(-self, self) if self.dtype != dtypes.bool else self

    def sign(self) -> Tensor:
        """-1, 0 or 1 for negative, zero or positive elements, in self's dtype.

            >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist(), Tensor([-7, 0, 3]).sign().tolist()
            ([-1.0, 0.0, 1.0], [-1, 0, 1])
        """
        if self.dtype == dtypes.bool:
            return self.clone()
        with _NoGrad():
            out = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
        return self._local(out, (self, lambda: 0)) if self.dtype.is_float else out   # torch: gradient 0

    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-self)), elementwise.

            >>> [round(v, 4) for v in Tensor([-2.0, 0.0, 2.0]).sigmoid().tolist()]
            [0.1192, 0.5, 0.8808]
        """
        x = self._float_like()
        with _NoGrad():
            out = (1 + (-x._detached()).exp()).reciprocal()
        # s * (1 - s) is 0, not 0 * inf = nan, where exp(-x) overflows
        return x._local(out, (x, lambda: out * (1 - out)))

    def tanh(self) -> Tensor:
        """The hyperbolic tangent, elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).tanh().tolist()]
            [-0.7616, 0.0, 0.7616]
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            # 2 sigmoid(2x) - 1 cancels near 0 (tanh(1e-6) was 7% off in float32): there, the Taylor
            # series, whose terms shrink by (x / (pi/2))^2 each: 9 of them reach float32's precision
            # below 0.55 and float64's below 0.2, where the cancellation costs at most a few ulps
            near = 0.2 if x.dtype == dtypes.float64 else 0.55
            x2, series = xd * xd, xd * 0.0
            for c in _TANH_SERIES[::-1]:
                series = series * x2 + c
            out = (xd.abs() < near).where(xd * series, 2.0 * (2.0 * xd).sigmoid() - 1.0)
        return x._local(out, (x, lambda: 1 - out * out))

    def leaky_relu(self, negative_slope: builtins.float = 0.01) -> Tensor:
        """self where positive, else self * negative_slope (0.01 by default, as in torch).

            >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
            [-1.0, 3.0]
        """
        return (self > 0).where(self, self * negative_slope)

    def elu(self, alpha: builtins.float = 1.0) -> Tensor:
        """self where positive, else alpha * (exp(self) - 1).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).elu().tolist()]
            [-0.6321, 0.0, 2.0]
        """
        return (self > 0).where(self, alpha * (self.exp() - 1))

    def silu(self) -> Tensor:
        """self * sigmoid(self), elementwise; `swish` is another name for it.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).silu().tolist()]
            [-0.2689, 0.0, 1.7616]
            >>> Tensor([2.0]).swish().tolist() == Tensor([2.0]).silu().tolist()
            True
        """
        return self * self.sigmoid()

    swish = silu

    def erf(self) -> Tensor:
        """The Gauss error function, elementwise, to about an ulp of the dtype (fdlibm's algorithm; see
        `_erf_parts`).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 0.5]).erf().tolist()]
            [-0.8427, 0.0, 0.5205]
        """
        x = self._float_like()
        with _NoGrad():
            erf_a, _ = x.detach()._erf_parts()
            out = x.detach()._sign_negative().where(-erf_a, erf_a).cast(x.dtype)
        return x._local(out, (x, lambda: (-(x.detach() * x.detach())).exp() * (2 / math.sqrt(math.pi))))

    def gelu(self, approximate: str = "none") -> Tensor:
        """self * Phi(self), Phi the standard normal CDF, with erf (approximate="none") or torch's tanh
        approximation (approximate="tanh").

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu().tolist()]
            [-0.1587, 0.0, 0.8413]
            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).gelu(approximate="tanh").tolist()]
            [-0.1588, 0.0, 0.8412]
        """
        if approximate == "tanh":
            return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
        if approximate != "none":
            raise ValueError(f"[core] gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        if self.dtype in (dtypes.float16, dtypes.bfloat16):    # in float32, rounded once
            return self.float().gelu().cast(self.dtype)
        x = self._float_like()
        with _NoGrad():        # Phi(x) = erfc(-x / sqrt 2) / 2: the negative tail never 1 - erf rounded to 0
            cdf = (x.detach() * (-1 / math.sqrt(2))).erfc() * 0.5
        return apply(fused.Gelu, x, cdf)

    @autocast_op
    def softplus(self, beta: builtins.float = 1.0, threshold: builtins.float = 20.0) -> Tensor:
        """log(1 + exp(beta * self)) / beta, elementwise, and self itself where beta * self > threshold
        (torch's defaults: beta=1, threshold=20).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 30.0]).softplus().tolist()]
            [0.3133, 0.6931, 30.0]
        """
        bx = self * beta
        soft = (1 + (-bx.abs()).exp()).log() / beta + self.relu()
        return (bx > threshold).where(self, soft)

    def clamp(self, min_: Any = None, max_: Any = None, *, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        """The values limited to [min, max]; either bound may be left out, and each is a scalar or a
        tensor. Int bounds keep an int tensor's dtype, a float bound makes it float32 (torch's
        promotion). `clip` is another name for it.

            >>> Tensor([-2, 0, 5]).clamp(-1, 3).tolist(), Tensor([-2, 0, 5]).clamp(min=0).tolist()
            ([-1, 0, 3], [0, 0, 5])
            >>> Tensor([-2.0, 0.5, 5.0]).clip(0, 1).tolist()
            [0.0, 0.5, 1.0]
        """
        lo = min_ if min_ is not None else min
        hi = max_ if max_ is not None else max
        if lo is None and hi is None:
            raise ValueError("[core] clamp: give at least one of min or max")
        # torch's result type: scalar bounds promote as in any binary op (bool with int bounds gives int64)
        dt = self.dtype
        for bound in (lo, hi):
            if bound is not None and not isinstance(bound, Tensor):
                dt = scalar_result_type(dt, bound)
        x = self.cast(dt)
        if lo is not None:
            x = (x < lo).where(lo, x) if not isinstance(lo, Tensor) else x.maximum(lo)
        if hi is not None:
            x = (x > hi).where(hi, x) if not isinstance(hi, Tensor) else x.minimum(hi)
        return x if isinstance(lo, Tensor) or isinstance(hi, Tensor) else x.cast(dt)

    clip = clamp

    def maximum(self, y: Any) -> Tensor:
        """The larger of self and y, elementwise, broadcasting.

            >>> Tensor([1, 5, 3]).maximum(Tensor([4, 2, 3])).tolist(), Tensor([1, 5, 3]).maximum(2).tolist()
            ([4, 5, 3], [2, 5, 3])
        """
        a, b = self._broadcasted(y)
        return apply(F.Maximum, a, b)

    def minimum(self, y: Any) -> Tensor:
        """The smaller of self and y, elementwise, broadcasting.

            >>> Tensor([1, 5, 3]).minimum(Tensor([4, 2, 3])).tolist(), Tensor([1, 5, 3]).minimum(2).tolist()
            ([1, 2, 3], [1, 2, 2])
        """
        a, b = self._broadcasted(y)
        if not a.dtype.is_float:
            return (a < b).where(a, b) if a.dtype != dtypes.bool else a & b   # -a wraps at INT_MIN
        return -apply(F.Maximum, -a, -b)

    def trunc(self) -> Tensor:
        """Round toward zero, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).trunc().tolist()
            [-1.0, 0.0, 2.0]
        """
        if not self.dtype.is_float:
            return self
        # values beyond 2**23 have no fraction in float32; casting them would overflow ints
        with _NoGrad():
            big = self.abs() >= 2.0 ** 52
            t = self._detached().cast(dtypes.int64).cast(self.dtype)
            out = big.where(self._detached(), t)
        return self._local(out, (self, lambda: 0))   # torch: gradient 0 (floor, ceil, round too)

    def floor(self) -> Tensor:
        """Round down to a whole number, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).floor().tolist()
            [-2.0, 0.0, 2.0]
        """
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self) -> Tensor:
        """Round up to a whole number, elementwise (int tensors are returned as they are).

            >>> Tensor([-1.5, 0.5, 2.7]).ceil().tolist()
            [-1.0, 1.0, 3.0]
        """
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self, decimals: builtins.int = 0) -> Tensor:
        """Round half to even, like torch.round (int tensors are returned as they are); decimals= rounds
        to that many digits after the point (before it when negative) by scaling by 10**decimals.

            >>> Tensor([0.5, 1.5, 2.5, -1.5, 2.7]).round().tolist(), Tensor([3]).round().dtype
            ([0.0, 2.0, 2.0, -2.0, 3.0], dtypes.int64)
            >>> x = Tensor([1.25, 2.375], dtype="float64")
            >>> x.round(decimals=2).tolist(), Tensor([150.0]).round(-2).item()
            ([1.25, 2.38], 200.0)
        """
        if not self.dtype.is_float:
            return self
        if decimals:
            scale = 10.0 ** decimals
            return (self * scale).round() / scale
        f = (self + 0.5).floor()
        tie = (f - self) == 0.5
        odd = (f % 2) == 1
        return (tie & odd).where(f - 1, f)

    def isnan(self) -> Tensor:
        """True where an element is NaN.

            >>> Tensor([1.0, float("nan"), float("inf")]).isnan().tolist()
            [False, True, False]
        """
        return self != self

    def isinf(self) -> Tensor:
        """True where an element is +inf or -inf.

            >>> Tensor([1.0, float("-inf"), float("inf"), float("nan")]).isinf().tolist()
            [False, True, True, False]
        """
        return (self == float("inf")) | (self == float("-inf"))

    def lerp(self, end: Tensor, weight: Any) -> Tensor:
        """self + weight * (end - self): the straight line from self (weight 0) to end (weight 1);
        weight is a scalar or a tensor.

            >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.5).tolist()
            [5.0, 15.0]
        """
        return self + (end - self) * weight

    # inverse trigonometric and hyperbolic functions: values computed without a graph, the derivative
    # given in closed form (so it is exact where the value's rounding would not let a composition be);
    # float16 and bfloat16 computed in float32 and rounded once
    def atan(self) -> Tensor:
        """The arctangent, elementwise, in (-pi/2, pi/2), to about an ulp of the dtype (Cephes' atanf and
        atan; see `_atan_values`).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0, float("inf")]).atan().tolist()]
            [-0.7854, 0.0, 0.7854, 1.5708]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().atan().cast(self.dtype)
        x = self._float_like()
        with _NoGrad():
            out = x._detached()._atan_values()
        return x._local(out, (x, lambda: 1 / (1 + x._detached() * x._detached())))

    def _atan_values(self) -> Tensor:
        """atan of a float32 or float64 tensor: |x| reduced to |r| <= tan(pi/8) (float32) or 0.66 (float64)
        by atan(a) = pi/4 + atan((a - 1) / (a + 1)) and pi/2 - atan(1 / a), then Cephes' polynomial
        (float32) or rational (float64) in r^2; float64 adds the bits of pi/2 and pi/4 its constant drops."""
        a, f64 = self.abs(), self.dtype == dtypes.float64
        big, mid = a > 2.414213562373095, a > (0.66 if f64 else 0.4142135623730951)   # tan(3 pi / 8), ...
        r = big.where(-1 / a, mid.where((a - 1) / (a + 1), a))
        # constants of the dtype: where() of two Python floats is float32 (pi/2 then 4.4e-8 off in float64)
        base = big.where(a.full_like(math.pi / 2), mid.where(a.full_like(math.pi / 4), 0.0))
        z = r * r
        if f64:
            tail = z * _poly(z, ATAN_P) / _poly(z, (*ATAN_Q, 1.0)) * r + r
            more = a.full_like(ATAN_MOREBITS)
            tail = tail + big.where(more, mid.where(more / 2, 0.0))
        else:
            tail = _poly(z, ATANF_P) * z * r + r
        out = base + tail
        return self._sign_negative().where(-out, out)

    @autocast_op
    def asin(self) -> Tensor:
        """The arcsine, elementwise, in [-pi/2, pi/2]; NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 0.5]).asin().tolist()]
            [-1.5708, 0.0, 0.5236]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().asin().cast(self.dtype)
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            out = (xd / ((1 - xd) * (1 + xd)).sqrt())._atan_values()
        return x._local(out, (x, lambda: ((1 - xd) * (1 + xd)).rsqrt()))

    @autocast_op
    def acos(self) -> Tensor:
        """The arccosine, elementwise, in [0, pi]; NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 1.0]).acos().tolist()]
            [3.1416, 1.5708, 0.0]
        """
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.float().acos().cast(self.dtype)
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            # not pi/2 - asin(x), which cancels near x = 1 (67 float32 ulps off at 0.99); 1 - x is exact there
            out = ((1 - xd) / (1 + xd)).sqrt()._atan_values() * 2
        return x._local(out, (x, lambda: -((1 - xd) * (1 + xd)).rsqrt()))

    @autocast_op
    def atan2(self, other: Any) -> Tensor:
        """The angle of the point (other, self) (self is y, other is x), elementwise, in [-pi, pi], with
        the quadrant from both signs (a signed zero x picks 0 or pi, as in torch), broadcasting.

            >>> y, x = Tensor([1.0, 1.0, -1.0, 0.0]), Tensor([1.0, -1.0, -1.0, -1.0])
            >>> [round(v, 4) for v in y.atan2(x).tolist()]
            [0.7854, 2.3562, -2.3562, 3.1416]
        """
        y, x = self._float_like()._broadcasted(other)   # a float operand makes both float
        if y.dtype in (dtypes.float16, dtypes.bfloat16):
            return y.float().atan2(x.float()).cast(y.dtype)
        with _NoGrad():
            yd, xd = y._detached(), x._detached()
            x_neg, y_neg = xd._sign_negative(), yd._sign_negative()
            both_zero = (xd == 0) & (yd == 0)
            ratio = both_zero.where(0.0, yd / xd)
            base = ratio._atan_values()
            out = x_neg.where(y_neg.where(base - math.pi, base + math.pi), base)
            pi = xd.full_like(math.pi)      # of the dtype (where() of two Python floats is float32)
            out = both_zero.where(x_neg.where(y_neg.where(-pi, pi), y_neg.where(-0.0, 0.0)), out)
            r2 = both_zero.where(1.0, xd * xd + yd * yd)
        return y._local(out, (y, lambda: both_zero.where(0.0, xd / r2)),
                        (x, lambda: both_zero.where(0.0, -yd / r2)))

    @autocast_op
    def sinh(self) -> Tensor:
        """The hyperbolic sine, elementwise, (expm1(x) - expm1(-x)) / 2 (accurate near 0).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).sinh().tolist()]
            [-1.1752, 0.0, 3.6269]
        """
        x = self._float_like()
        return (x.expm1() - (-x).expm1()) * 0.5

    @autocast_op
    def cosh(self) -> Tensor:
        """The hyperbolic cosine, elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).cosh().tolist()]
            [1.5431, 1.0, 3.7622]
        """
        x = self._float_like()
        return (x.exp() + (-x).exp()) * 0.5

    def asinh(self) -> Tensor:
        """The inverse hyperbolic sine, elementwise (log1p form near 0, log|x| + log 2 for huge |x|).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).asinh().tolist()]
            [-0.8814, 0.0, 1.4436]
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            a = xd.abs()
            huge = a > 1e15
            a_ok = huge.where(1.0, a)
            small = (a_ok + a_ok * a_ok / (1 + (a_ok * a_ok + 1).sqrt())).log1p()
            out = huge.where(a.log() + math.log(2), small) * xd.sign()
            out = xd.isnan().where(xd, out)
        return x._local(out, (x, lambda: (xd * xd + 1).rsqrt()))

    def acosh(self) -> Tensor:
        """The inverse hyperbolic cosine, elementwise; NaN below 1.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 10.0]).acosh().tolist()]
            [0.0, 1.317, 2.9932]
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            huge = xd > 1e15
            xs = huge.where(2.0, xd)
            out = huge.where(xd.log() + math.log(2), ((xs - 1) + ((xs - 1) * (xs + 1)).sqrt()).log1p())
        return x._local(out, (x, lambda: ((xd - 1) * (xd + 1)).rsqrt()))

    def atanh(self) -> Tensor:
        """The inverse hyperbolic tangent, elementwise: +-inf at +-1, NaN outside [-1, 1].

            >>> [round(v, 4) for v in Tensor([-0.5, 0.0, 0.5]).atanh().tolist()]
            [-0.5493, 0.0, 0.5493]
        """
        x = self._float_like()
        with _NoGrad():
            xd = x._detached()
            out = (2 * xd / (1 - xd)).log1p() * 0.5
        return x._local(out, (x, lambda: 1 / ((1 - xd) * (1 + xd))))

    def copysign(self, other: Any) -> Tensor:
        """|self| with the sign of other, elementwise (-0.0 counts as negative), as float.

            >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
            [-1.0, 2.0, -3.0]
        """
        x, y = self._float_like()._broadcasted(other)   # a float operand makes both float
        with _NoGrad():
            xd = x.detach()
            out = y.detach()._sign_negative().where(-xd.abs(), xd.abs())
        # torch's derivatives: result / self (0 where self is 0) for self, and 0 for other, which still
        # joins the graph so that other's gradient is a zero tensor, not a missing one
        return x._local(out, (x, lambda: (xd == 0).where(0.0, out / xd)), (y, lambda: 0))

    def _sign_negative(self) -> Tensor:
        """Whether a float tensor's sign bit is set: x < 0, and -0.0 (C's signbit; NaN gives False)."""
        return (self < 0) | ((self == 0) & (1 / self < 0))

    def hardtanh(self, min_val: builtins.float = -1.0, max_val: builtins.float = 1.0) -> Tensor:
        """self clamped to [min_val, max_val] (-1 and 1 by default).

            >>> Tensor([-2.0, 0.5, 3.0]).hardtanh().tolist()
            [-1.0, 0.5, 1.0]
        """
        return self.clamp(min_val, max_val)

    def hardsigmoid(self) -> Tensor:
        """clamp(self / 6 + 1 / 2, 0, 1), elementwise: 0 below -3, 1 above 3.

            >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
            [0.0, 0.5, 1.0]
        """
        return (self._float_like() / 6 + 0.5).clamp(0.0, 1.0)

    def hardswish(self) -> Tensor:
        """self * hardsigmoid(self), elementwise.

            >>> Tensor([-4.0, 0.0, 1.0, 4.0]).hardswish().tolist()
            [-0.0, 0.0, 0.6666666865348816, 4.0]
        """
        return self._float_like() * self.hardsigmoid()

    def celu(self, alpha: builtins.float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).celu(2.0).tolist()]
            [-0.7869, 0.0, 2.0]
        """
        x = self._float_like()
        return (x > 0).where(x, (x / alpha).expm1() * alpha)

    def selu(self) -> Tensor:
        """scale * elu(self, alpha) with torch's constants (alpha 1.6733, scale 1.0507).

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).selu().tolist()]
            [-1.1113, 0.0, 2.1014]
        """
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        x = self._float_like()
        return (x > 0).where(x * scale, x.expm1() * (alpha * scale))

    def mish(self) -> Tensor:
        """self * tanh(softplus(self)), elementwise.

            >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 2.0]).mish().tolist()]
            [-0.3034, 0.0, 1.944]
        """
        x = self._float_like()
        return x * x.softplus().tanh()

    def bitwise_and(self, other: Any) -> Tensor:
        """self & other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_and(6).tolist()
            [4, 2]
        """
        return self._bitwise(BinaryOps.AND, other)

    def bitwise_or(self, other: Any) -> Tensor:
        """self | other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_or(1).tolist()
            [13, 11]
        """
        return self._bitwise(BinaryOps.OR, other)

    def bitwise_xor(self, other: Any) -> Tensor:
        """self ^ other, elementwise, for int and bool tensors.

            >>> Tensor([12, 10]).bitwise_xor(6).tolist()
            [10, 12]
        """
        return self._bitwise(BinaryOps.XOR, other)

    def bitwise_not(self) -> Tensor:
        """~self, elementwise, for int and bool tensors.

            >>> Tensor([0, 5]).bitwise_not().tolist(), Tensor([True]).bitwise_not().tolist()
            ([-1, -6], [False])
        """
        return ~self

    # ------------------------------------------------------------ reductions
    def _reduce(self, fn: type[F.Function], axis: Any, keepdim: builtins.bool) -> Tensor:
        axes = self._axes(axis)
        if self.ndim == 0:
            return self._fresh()
        out = apply(fn, self, axes=axes)
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @autocast_op
    def sum(self, axis: Any = None, keepdim: builtins.bool = False, dtype: DType | str | None = None, *,
            dim: Any = None) -> Tensor:
        """The sum over `axis` (an int, a tuple, or None for all dims; `dim` is torch's name for it),
        dropping the summed dims unless keepdim. As in torch, bool and int tensors sum in int64;
        dtype= sets the type to sum in.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.sum().item(), x.sum(0).tolist(), x.sum(dim=1, keepdim=True).tolist()
            (10, [4, 6], [[3], [7]])
            >>> Tensor([True, True, False]).sum().item()
            2
        """
        axis = dim if dim is not None else axis
        x = self
        if dtype is not None:
            x = x.cast(dtype)
        elif x.dtype.is_int or x.dtype == dtypes.bool:
            x = x.cast(dtypes.int64 if not x.dtype.is_unsigned or x.dtype.itemsize < 8 else x.dtype)
        return x._reduce(F.Sum, axis, keepdim)

    @overload
    def max(self, axis: None = None, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def max(self, axis: Tensor, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def max(self, axis: builtins.int, keepdim: builtins.bool = False, *,
            dim: None = None) -> ValuesIndices: ...
    @overload
    def max(self, axis: None = None, keepdim: builtins.bool = False, *,
            dim: builtins.int) -> ValuesIndices: ...

    def max(self, axis: Any = None, keepdim: builtins.bool = False, *,
            dim: Any = None) -> Tensor | ValuesIndices:
        """torch.max: with no dim, the largest element as a 0-d tensor; along one dim, the pair
        (values, indices), also named `.values` and `.indices`: the int64 index is the first largest, as
        argmax() gives, and the gradient flows to it. max(other_tensor) is maximum(). amax() takes
        several dims and gives the values only.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.max().item(), x.max(0).values.tolist(), x.max(dim=1, keepdim=True).indices.tolist()
            (5, [3, 5], [[1], [1]])
            >>> values, indices = x.max(1)
            >>> values.tolist(), indices.tolist()
            ([5, 4], [1, 1])
        """
        return self._extreme(dim if dim is not None else axis, keepdim, True)

    @overload
    def min(self, axis: None = None, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def min(self, axis: Tensor, keepdim: builtins.bool = False, *, dim: None = None) -> Tensor: ...
    @overload
    def min(self, axis: builtins.int, keepdim: builtins.bool = False, *,
            dim: None = None) -> ValuesIndices: ...
    @overload
    def min(self, axis: None = None, keepdim: builtins.bool = False, *,
            dim: builtins.int) -> ValuesIndices: ...

    def min(self, axis: Any = None, keepdim: builtins.bool = False, *,
            dim: Any = None) -> Tensor | ValuesIndices:
        """torch.min: with no dim, the smallest element as a 0-d tensor; along one dim, the pair
        (values, indices), also named `.values` and `.indices` (the first smallest, as argmin()).
        min(other_tensor) is minimum(); amin() takes several dims and gives the values only.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.min().item(), x.min(1).values.tolist(), x.min(1).indices.tolist()
            (1, [1, 3], [0, 0])
        """
        return self._extreme(dim if dim is not None else axis, keepdim, False)

    def _extreme(self, axis: Any, keepdim: builtins.bool,
                 largest: builtins.bool) -> Tensor | ValuesIndices:
        """max()/min(): all elements, elementwise against a tensor, or (values, indices) along a dim."""
        if isinstance(axis, Tensor):
            return self.maximum(axis) if largest else self.minimum(axis)   # torch.max(a, b)
        if axis is None:
            return self.amax(None, keepdim) if largest else self.amin(None, keepdim)
        if isinstance(axis, builtins.bool) or not isinstance(axis, (builtins.int, np.integer)):
            name, values_only = ("max", "amax") if largest else ("min", "amin")
            raise TypeError(f"[core] {name}: expected one int dim (torch.{name} gives (values, indices) "
                            f"along one dim), got {axis!r}; for the values over several dims use "
                            f"x.{values_only}({axis!r})")
        self._check_nonempty(axis, "max" if largest else "min")
        d = self._axis(builtins.int(axis))
        x = self._stored()   # the value at the index is the one the index was found by
        indices = x._arg_extreme(d, True, largest)
        if self.ndim == 0:
            return ValuesIndices(self, indices)
        values = x.gather(d, indices).cast(self.dtype)   # the gradient goes to the picked position
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return ValuesIndices(values, indices)

    def _check_nonempty(self, axis: Any, name: str) -> None:
        axes = self._axes(axis)
        if any(self.shape[a] == 0 for a in axes) or (self.numel() == 0 and axis is None):
            raise ValueError(f"[core] {name}: reduction over an empty dimension of shape {self.shape}")

    def amax(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The largest value over `axis`: one dim, a tuple of dims, or None for all dims, dropping them
        unless keepdim (torch.amax). Ties share the gradient equally.

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.amax(0).tolist(), x.amax((0, 1)).item(), x.amax(dim=1, keepdim=True).tolist()
            ([3, 5], 5, [[5], [4]])
        """
        axis = dim if dim is not None else axis
        self._check_nonempty(axis, "amax")
        return self._reduce(F.Max, axis, keepdim)

    def amin(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The smallest value over `axis`: one dim, a tuple of dims, or None for all dims, dropping them
        unless keepdim (torch.amin).

            >>> x = Tensor([[1, 5], [3, 4]])
            >>> x.amin(1).tolist(), x.amin((0, 1)).item()
            ([1, 3], 1)
        """
        axis = dim if dim is not None else axis
        self._check_nonempty(axis, "amin")
        if self.dtype == dtypes.bool:
            return self.logical_not().amax(axis, keepdim).logical_not()
        if self.dtype.is_unsigned:
            top = int(max_value(self.dtype))
            return top - (top - self).amax(axis, keepdim)
        out = -((-self).amax(axis, keepdim))
        if self.dtype.is_float:
            return out
        # -x wraps at the dtype's minimum (-INT_MIN is INT_MIN, which then never wins the max), so
        # it is looked for on its own. (~x, which has no such case, OpenCL's pocl miscompiles in a max.)
        low = int(min_value(self.dtype))
        return (self == low).any(axis, keepdim).where(low, out)

    def mean(self, axis: Any = None, keepdim: builtins.bool = False, dtype: DType | str | None = None, *,
             dim: Any = None) -> Tensor:
        """The average over `axis` (None for all dims), dropping it unless keepdim. Int and bool tensors
        give float32 (torch raises for them); dtype= sets the type to average in.

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.mean().item(), x.mean(0).tolist(), x.mean(dim=1, keepdim=True).tolist()
            (2.5, [2.0, 3.0], [[1.5], [3.5]])
            >>> x.mean(dtype="float64").dtype
            dtypes.float64
        """
        axis = dim if dim is not None else axis
        x = self.cast(dtype) if dtype is not None else self._float_like()
        axes = self._axes(axis)
        count = prod(self.shape[a] for a in axes)
        s = x.sum(axis, keepdim)
        return s * (1 / count) if count else s * float("nan")

    def var(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, *,
            dim: Any = None, unbiased: builtins.bool | None = None) -> Tensor:
        """The variance over `axis`: the sum of squared deviations divided by N - correction. As in torch,
        correction=1 (Bessel's) is the default, and unbiased=False means correction=0.

            >>> x = Tensor([1.0, 2.0, 3.0, 4.0])
            >>> round(x.var().item(), 4), x.var(correction=0).item()
            (1.6667, 1.25)
        """
        axis = dim if dim is not None else axis
        if unbiased is not None:
            correction = int(unbiased)
        x = self._float_like()
        axes = self._axes(axis)
        n = prod(self.shape[a] for a in axes)
        dev = x - x.mean(axes, keepdim=True)
        return (dev * dev).sum(axes, keepdim) / max(n - correction, 0)

    def std(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, *,
            dim: Any = None, unbiased: builtins.bool | None = None) -> Tensor:
        """The standard deviation over `axis`: sqrt(var()), with the same correction (1 by default).

            >>> x = Tensor([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
            >>> x.std(correction=0).item(), round(x.std().item(), 4)
            (2.0, 2.1381)
        """
        return self.var(axis, keepdim, correction, dim=dim, unbiased=unbiased)._sqrt_of_spread()

    def _sqrt_of_spread(self) -> Tensor:
        """sqrt of a sum of squares (a variance, a squared 2-norm), whose derivative at 0 is 0, torch's
        subgradient for std and norms: a constant channel or a zero vector then gets a zero gradient,
        not 0 * inf = nan from sqrt's."""
        with _NoGrad():
            out = self.detach().sqrt()
        return self._local(out, (self, lambda: (out == 0).where(0.0, 0.5 / out)))

    @autocast_op
    def prod(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """The product over `axis`: floats keep their dtype (float16/bfloat16 multiply in float32); ints
        (and bool) give int64, an exact product (wrapping on overflow, as in torch).

            >>> x = Tensor([[1, 2], [3, 4]])
            >>> x.prod().item(), x.prod(0).tolist(), Tensor([-2.0, 0.5, 3.0]).prod().item()
            (24, [3, 8], -3.0)
        """
        axis = dim if dim is not None else axis
        if self.dtype.is_float:
            return self._tree_prod(axis, keepdim, promote_types(self.dtype, dtypes.float32)).cast(self.dtype)
        return self._tree_prod(axis, keepdim, dtypes.int64 if self.dtype != dtypes.uint64 else self.dtype)

    def _tree_prod(self, axis: Any, keepdim: builtins.bool, acc: DType) -> Tensor:
        """The product in dtype acc as plain multiplications: the reduced dims flattened to one, then
        multiplied in groups of 8 (padded with ones) until one is left. Exact for ints, rounded as torch's
        for floats, and its gradient is the product rule's (the product of the others at a zero, where a
        sum of logs would give 0)."""
        x = self.cast(acc)
        axes = self._axes(axis)
        if self.ndim == 0:
            return x
        kept = [i for i in range(self.ndim) if i not in axes]
        kept_shape = tuple(self.shape[i] for i in kept)
        x = x.permute(kept + list(axes)).reshape(kept_shape + (prod(self.shape[a] for a in axes),))
        if x.shape[-1] == 0:
            x = Tensor.ones(*kept_shape, 1, dtype=x.dtype, device=x.device)
        while x.shape[-1] > 1:
            m = x.shape[-1]
            groups = math.ceil(m / 8)
            x = x.pad(((0, 0),) * len(kept_shape) + ((0, groups * 8 - m),), value=1)
            x = x.reshape(kept_shape + (groups, 8))
            parts = [x[..., j] for j in range(8)]
            x = parts[0]
            for part in parts[1:]:
                x = x * part
            if x.shape[-1] > 1:
                x = x.realize()   # each level reads the last 8 times: inlined, kernels would grow 8x a level
        out = x.reshape(kept_shape)
        if keepdim:
            out = out.reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))
        return out

    def _arg_extreme(
        self, axis: builtins.int | None, keepdim: builtins.bool, largest: builtins.bool
    ) -> Tensor:
        if axis is None:
            return self.flatten()._arg_extreme(0, False, largest) if not keepdim else \
                self.flatten()._arg_extreme(0, False, largest).reshape((1,) * self.ndim)
        d = self._axis(axis)
        if self.ndim == 0:   # torch: dim 0 (or -1) of a 0-d tensor is the tensor itself, at index 0
            return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        n = self.shape[d]
        if n == 0:
            raise ValueError(f"[core] argmax/argmin over an empty dim of shape {self.shape}")
        x = self._stored()   # compared with its own max: one computation, not two kernels' (x.stored)
        best = x.amax(d, keepdim=True) if largest else x.amin(d, keepdim=True)
        hit = x == best
        if self.dtype.is_float:   # a NaN is the extreme, as in torch (NaN == NaN is false)
            hit = hit | (x.isnan() & best.isnan())
        # the first index wins: count down from n so the max picks the lowest index
        rev = (n - index_range(n, self.device)).reshape(tuple(n if i == d else 1 for i in range(self.ndim)))
        idx = n - hit.where(rev, 0).amax(d, keepdim=keepdim)
        return idx.cast(dtypes.int64)

    def argmax(self, axis: builtins.int | None = None, keepdim: builtins.bool = False, *,
               dim: builtins.int | None = None) -> Tensor:
        """The int64 index of the largest value along `axis` (into the flattened tensor when axis is
        None); the first one wins a tie, as in torch.

            >>> x = Tensor([[1, 5, 5], [7, 2, 7]])
            >>> x.argmax().item(), x.argmax(1).tolist(), x.argmax(dim=0).tolist()
            (3, [1, 0], [1, 0, 1])
        """
        return self._arg_extreme(dim if dim is not None else axis, keepdim, True)

    def argmin(self, axis: builtins.int | None = None, keepdim: builtins.bool = False, *,
               dim: builtins.int | None = None) -> Tensor:
        """The int64 index of the smallest value along `axis` (into the flattened tensor when axis is
        None); the first one wins a tie, as in torch.

            >>> x = Tensor([[1, 5, 5], [7, 2, 7]])
            >>> x.argmin().item(), x.argmin(1).tolist()
            (0, [0, 1])
        """
        return self._arg_extreme(dim if dim is not None else axis, keepdim, False)

    def any(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """True where any element over `axis` (None for all dims) is nonzero, as a bool tensor (uint8 for a
        uint8 input, as torch).

            >>> x = Tensor([[0, 0], [0, 3]])
            >>> x.any().item(), x.any(1).tolist()
            (True, [False, True])
        """
        return self.bool()._reduce(F.Max, dim if dim is not None else axis, keepdim)._as_logical_of(self)

    def _as_logical_of(self, x: Tensor) -> Tensor:
        """A bool result of any/all in torch's dtype for input x: uint8 stays uint8 (torch's legacy rule)."""
        return self.cast(dtypes.uint8) if x.dtype == dtypes.uint8 else self

    def all(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """True where every element over `axis` (None for all dims) is nonzero, as a bool tensor (uint8 for a
        uint8 input, as torch).

            >>> x = Tensor([[1, 2], [0, 3]])
            >>> x.all().item(), x.all(1).tolist()
            (False, [True, False])
        """
        out = self.logical_not().any(dim if dim is not None else axis, keepdim).logical_not()
        return out._as_logical_of(self)

    @autocast_op
    def logsumexp(self, axis: Any = None, keepdim: builtins.bool = False, *, dim: Any = None) -> Tensor:
        """log(sum(exp(self))) over `axis`, shifted by the max so that large inputs do not overflow.

            >>> round(Tensor([1000.0, 1000.0]).logsumexp().item(), 3)
            1000.693
        """
        axis = dim if dim is not None else axis
        if any(self.shape[a] == 0 for a in self._axes(axis)):     # log of an empty sum: -inf, as torch
            return self._float_like().sum(axis, keepdim).log()
        m = self.amax(axis, keepdim=True)._detached()
        m = m.isinf().where(0.0, m)
        out = (self - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out._squeeze_axes(self._axes(axis))

    def _squeeze_axes(self, axes: Iterable[builtins.int]) -> Tensor:
        axes = set(axes)
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    @autocast_op
    def softmax(self, axis: builtins.int = -1, *, dim: builtins.int | None = None) -> Tensor:
        """exp(self) / sum(exp(self)) along `axis` (the last dim by default), shifted by the max for
        stability; int inputs give float32.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmax().tolist()]
            [0.09, 0.2447, 0.6652]
            >>> Tensor([[0.0, 0.0], [5.0, 5.0]]).softmax(dim=1).tolist()
            [[0.5, 0.5], [0.5, 0.5]]
        """
        axis = dim if dim is not None else axis
        x = self._float_like()
        if x.ndim > 0:
            return apply(fused.Softmax, x, axis=x._axis(axis))
        e = (x - x.amax(axis, keepdim=True)._detached()).exp()
        return e / e.sum(axis, keepdim=True)

    @autocast_op
    def log_softmax(self, axis: builtins.int = -1, *, dim: builtins.int | None = None) -> Tensor:
        """log(softmax(self)) along `axis` (the last dim by default), computed without taking the log of
        a small number.

            >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).log_softmax().tolist()]
            [-2.4076, -1.4076, -0.4076]
        """
        axis = dim if dim is not None else axis
        x = self._float_like()
        if x.ndim > 0:
            return apply(fused.LogSoftmax, x, axis=x._axis(axis))
        shifted = x - x.amax(axis, keepdim=True)._detached()
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    @autocast_op
    def cumsum(self, axis: builtins.int = 0, *, dim: builtins.int | None = None) -> Tensor:
        """The running sum along `axis` (dim 0 by default; torch requires it). As in torch, int and bool
        tensors give int64.

            >>> Tensor([1, 2, 3, 4]).cumsum().tolist(), Tensor([[1, 2], [3, 4]]).cumsum(dim=1).tolist()
            ([1, 3, 6, 10], [[1, 3], [3, 7]])
        """
        d = self._axis(dim if dim is not None else axis)
        src = self if self.dtype.is_float else self.cast(dtypes.int64)
        if self.ndim == 0 or self.shape[d] == 0:
            return src
        n = self.shape[d]
        x = src.transpose(d, -1) if d != self.ndim - 1 else src
        # out[i] = sum_j x[j] * (j <= i): a masked reduce, so it is one fused kernel
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)
        out = tri.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype if x.dtype.is_float else None)
        out = out if d == self.ndim - 1 else out.transpose(d, -1)
        return out

    # sorting without a sort primitive: each element's rank is counted by comparing it with every other
    # element of its row (O(n^2) work and memory per row), then the values are picked by a one-hot gather
    _SORT_LIMIT = 4096

    def _last_dim(self, dim: builtins.int, name: str) -> tuple[builtins.int, Tensor]:
        """(dim, self with that dim moved last); 0-d tensors become 1-element rows."""
        x = self.reshape(1) if self.ndim == 0 else self
        d = x._axis(dim)
        if x.shape[d] > Tensor._SORT_LIMIT:
            raise ValueError(f"[core] {name}: {x.shape[d]} elements along dim {dim}, above the limit of "
                             f"{Tensor._SORT_LIMIT} (sorting compares every pair, n^2 memory per row); sort "
                             f"on the host (.numpy()) or in smaller pieces")
        return d, x.transpose(d, -1) if d != x.ndim - 1 else x

    def _sort_last(self, k: builtins.int, descending: builtins.bool) -> tuple[Tensor, Tensor]:
        """The first k of the sorted last dim: (values, int64 indices); NaN sorts as the largest value and
        equal values keep their order."""
        n = self.shape[-1]
        src = self._stored()   # every pair compared, and the values picked, from one computation
        with _NoGrad():
            x = src._detached() if self.dtype != dtypes.bool else src._detached().cast(dtypes.int32)
            a, b = x.unsqueeze(-1), x.unsqueeze(-2)          # a: element i, b: element j; (..., i, j)
            before = (b > a) if descending else (b < a)     # j goes before i
            ties = a == b
            if x.dtype.is_float:
                nan_a, nan_b = a.isnan(), b.isnan()
                nan_first = (nan_b & nan_a.logical_not()) if descending else (nan_a & nan_b.logical_not())
                before = before | nan_first
                ties = ties | (nan_a & nan_b)
            ar = index_range(n, self.device)
            earlier = ar.reshape(1, n) < ar.reshape(n, 1)    # [i, j]: j < i
            rank = (before | (ties & earlier)).sum(-1).cast(dtypes.int32)                      # (..., n)
            onehot = rank.unsqueeze(-2) == index_range(k, self.device).reshape(k, 1)           # (..., k, n)
            indices = onehot.where(ar.reshape(1, n), 0).sum(-1).cast(dtypes.int32)             # (..., k)
        return src.gather(-1, indices).cast(self.dtype), indices.cast(dtypes.int64)

    def sort(self, dim: builtins.int = -1, descending: builtins.bool = False, *,
             stable: builtins.bool = True) -> ValuesIndices:
        """(values, int64 indices) sorted along `dim`, ascending unless descending=True; NaN sorts as the
        largest value and equal values keep their order (so stable= changes nothing). `.values` and
        `.indices` name the two, as in torch. The gradient flows to the picked positions.
        O(n^2) in the dim's size n (at most 4096).

            >>> values, indices = Tensor([3.0, 1.0, 2.0, 1.0]).sort()
            >>> values.tolist(), indices.tolist()
            ([1.0, 1.0, 2.0, 3.0], [1, 3, 2, 0])
        """
        d, x = self._last_dim(dim, "sort")
        values, indices = x._sort_last(x.shape[-1], descending)
        if d != x.ndim - 1:
            values, indices = values.transpose(d, -1), indices.transpose(d, -1)
        return ValuesIndices(values.reshape(self.shape), indices.reshape(self.shape))

    def argsort(self, dim: builtins.int = -1, descending: builtins.bool = False) -> Tensor:
        """The int64 indices that sort(dim, descending) picks.

            >>> Tensor([[3, 1, 2]]).argsort(descending=True).tolist()
            [[0, 2, 1]]
        """
        return self.sort(dim, descending)[1]

    def topk(self, k: builtins.int, dim: builtins.int = -1, largest: builtins.bool = True,
             sorted: builtins.bool = True) -> ValuesIndices:  # noqa: A002  (torch's name)
        """The k largest (or smallest) values along `dim` and their int64 indices, always in sorted order
        (so sorted=False gives the same). O(n * (n + k)) in the dim's size n (at most 4096).

            >>> values, indices = Tensor([[1, 5, 3, 4]]).topk(2)
            >>> values.tolist(), indices.tolist()
            ([[5, 4]], [[1, 3]])
        """
        d, x = self._last_dim(dim, "topk")
        if not 0 <= k <= x.shape[-1]:
            raise ValueError(f"[core] topk: k={k} is out of range for a dim of size {x.shape[-1]}")
        values, indices = x._sort_last(k, largest)
        if d != x.ndim - 1:
            values, indices = values.transpose(d, -1), indices.transpose(d, -1)
        if self.ndim == 0:
            values, indices = values.reshape(()), indices.reshape(())
        return ValuesIndices(values, indices)

    def multinomial(self, num_samples: builtins.int = 1, replacement: builtins.bool = False) -> Tensor:
        """int64 indices drawn from the categories whose (unnormalised) probabilities are this 1-d tensor
        or each row of this 2-d one, from tg's RNG (manual_seed makes them repeatable). With replacement
        by the inverse CDF, without by the Gumbel top-k trick.

            >>> Tensor.manual_seed(0)
            >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
            [1, 1]
            >>> sorted(Tensor([1.0, 1.0, 1.0]).multinomial(3).tolist())
            [0, 1, 2]
        """
        if self.ndim not in (1, 2):
            raise ValueError(f"[core] multinomial: expected a 1-d or 2-d tensor of probabilities, got "
                             f"{self.shape}")
        p = self._detached()._float_like()
        p = p.unsqueeze(0) if self.ndim == 1 else p
        rows, n = p.shape
        if num_samples <= 0 or (not replacement and num_samples > n):
            raise ValueError(f"[core] multinomial: cannot draw {num_samples} samples from {n} categories "
                             f"{'with' if replacement else 'without'} replacement")
        with _NoGrad():
            if replacement:
                cdf = p.cumsum(1)
                cdf = cdf / cdf[:, -1:]
                u = Tensor.rand(rows, num_samples, device=self.device)
                out = (cdf.unsqueeze(1) <= u.unsqueeze(2)).sum(2).clamp(max=n - 1)
            else:
                gumbel = -(-Tensor.rand(rows, n, device=self.device).log()).log()
                out = (p.log() + gumbel).topk(num_samples, 1)[1]
        return out.reshape(num_samples) if self.ndim == 1 else out

    @autocast_op
    def cumprod(self, dim: builtins.int) -> Tensor:
        """The running product along `dim` (int and bool tensors give int64, as prod does); O(n^2) in the
        dim's size.

            >>> Tensor([1, 2, 3, 4]).cumprod(0).tolist()
            [1, 2, 6, 24]
        """
        d = self._axis(dim)
        if self.ndim == 0 or self.shape[d] == 0:
            return self if self.dtype.is_float else self.cast(dtypes.int64)
        n = self.shape[d]
        x = self.transpose(d, -1) if d != self.ndim - 1 else self
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)    # [i, j]: j <= i
        out = tri.where(x.unsqueeze(-2), Tensor(1, device=self.device, dtype=x.dtype)).prod(-1)
        return out if d == self.ndim - 1 else out.transpose(d, -1)

    def _cum_extreme(self, dim: builtins.int, largest: builtins.bool) -> ValuesIndices:
        d = self._axis(dim)
        if self.ndim == 0 or self.shape[d] == 0:
            return ValuesIndices(self, Tensor.zeros(*self.shape, dtype=dtypes.int64, device=self.device))
        n = self.shape[d]
        x = self._stored()   # compared with its running extreme, and picked from: one computation
        x = x.transpose(d, -1) if d != self.ndim - 1 else x
        with _NoGrad():
            xd = x._detached() if x.dtype != dtypes.bool else x._detached().cast(dtypes.int32)
            ar = index_range(n, self.device)
            tri = ar.reshape(1, n) <= ar.reshape(n, 1)    # [i, j]: j <= i
            if xd.dtype.is_float:
                fill = -math.inf if largest else math.inf
            else:
                fill = int(min_value(xd.dtype)) if largest else int(max_value(xd.dtype))
            a = tri.where(xd.unsqueeze(-2), Tensor(fill, device=self.device, dtype=xd.dtype))
            best = (a.amax(-1) if largest else a.amin(-1)).unsqueeze(-1)
            hit = xd.unsqueeze(-2) == best
            if xd.dtype.is_float:
                hit = hit | (xd.unsqueeze(-2).isnan() & best.isnan())
            # the last position holding the running extreme, as torch's cummax/cummin give
            idx = (tri & hit).where(ar.reshape(1, n), -1).amax(-1)
        values = x.gather(-1, idx).cast(self.dtype)   # carries the gradient to the picked position
        if x.dtype.is_float:
            # the picked value itself, -0.0 too (gather's one-hot sum gives +0.0 for it): the one
            # element of its row that is not -inf has the max
            with _NoGrad():
                onehot = idx.unsqueeze(-1) == ar
                exact = onehot.where(xd.unsqueeze(-2), -math.inf).amax(-1).cast(self.dtype)
            values = values._local(exact, (values, lambda: 1))
        idx = idx.cast(dtypes.int64)
        if d != self.ndim - 1:
            values, idx = values.transpose(d, -1), idx.transpose(d, -1)
        return ValuesIndices(values, idx)

    def cummax(self, dim: builtins.int) -> tuple[Tensor, Tensor]:
        """(running max, int64 index of it) along `dim`; a tie or NaN takes the latest index, as in torch.
        The gradient flows to the picked positions. O(n^2) in the dim's size.

            >>> values, indices = Tensor([1, 3, 2, 3]).cummax(0)
            >>> values.tolist(), indices.tolist()
            ([1, 3, 3, 3], [0, 1, 1, 3])
        """
        return self._cum_extreme(dim, True)

    def cummin(self, dim: builtins.int) -> tuple[Tensor, Tensor]:
        """(running min, int64 index of it) along `dim`; a tie or NaN takes the latest index, as in torch.

            >>> values, indices = Tensor([3.0, 1.0, 2.0, 1.0]).cummin(0)
            >>> values.tolist(), indices.tolist()
            ([3.0, 1.0, 1.0, 1.0], [0, 1, 1, 3])
        """
        return self._cum_extreme(dim, False)

    # ------------------------------------------------------------ linear algebra and nn
    @autocast_op
    def dot(self, w: Tensor) -> Tensor:
        """matmul() under another name (so, unlike torch.dot, not only for 1-d tensors).

            >>> Tensor([1, 2, 3]).dot(Tensor([4, 5, 6])).item()
            32
        """
        return self.matmul(w)

    @autocast_op
    def matmul(self, w: Tensor) -> Tensor:
        """Batched matmul with torch's broadcasting: (..., n, k) @ (..., k, m) -> (..., n, m); a 1-d
        operand counts as a row (left) or column (right) vector, and its dim is dropped from the result.

            >>> Tensor([[1, 2], [3, 4]]).matmul(Tensor([[5], [6]])).tolist()
            [[17], [39]]
            >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([1, 1])).tolist()
            [3, 7]
            >>> (Tensor.ones(5, 2, 3) @ Tensor.ones(3, 4)).shape
            (5, 2, 4)
        """
        x = self
        if not isinstance(w, Tensor):
            w = self._to_tensor(w)
        if x.ndim == 0 or w.ndim == 0:
            raise ValueError(f"[core] matmul: both operands need at least 1 dim, got {x.shape} and {w.shape}")
        if x.shape[-1] != w.shape[-2 if w.ndim > 1 else -1]:
            raise ValueError(f"[core] matmul: shapes {x.shape} and {w.shape} do not align "
                             f"({x.shape[-1]} != {w.shape[-2 if w.ndim > 1 else -1]})")
        try:
            broadcast_shape(x.shape[:-2], w.shape[:-2])
        except ValueError:
            raise ValueError(
                f"[core] matmul: batch dims of {x.shape} and {w.shape} cannot broadcast"
            ) from None
        dt = promote_types(x.dtype, w.dtype)
        x, w = x.cast(dt), w.cast(dt)
        if w.ndim == 2 and x.ndim > 2:
            # (..., n, k) @ (k, m): one 2-d matmul; broadcasting w over the batch would make its
            # gradient a per-batch product followed by a second sum
            return x.reshape(-1, x.shape[-1]).matmul(w).reshape(*x.shape[:-1], w.shape[-1])
        x1, w1 = x.ndim == 1, w.ndim == 1
        if x1:
            x = x.reshape(1, -1)
        if w1:
            w = w.reshape(-1, 1)
        batch = broadcast_shape(x.shape[:-2], w.shape[:-2])
        n, k, m = x.shape[-2], x.shape[-1], w.shape[-1]
        out = apply(fused.Matmul, x._broadcast_to(batch + (n, k)), w._broadcast_to(batch + (k, m)))
        if x1:
            out = out.squeeze(-2)
        if w1:
            out = out.squeeze(-1)
        return out

    @autocast_op
    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """x @ weight.T + bias, with torch's weight layout (out_features, in_features).

            >>> w = Tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])      # 2 inputs -> 3 outputs
            >>> Tensor([[1.0, 2.0]]).linear(w, Tensor([0.0, 0.5, -1.0])).tolist()
            [[1.0, 3.5, 3.0]]
        """
        if weight.ndim != 2 or self.ndim == 0 or self.shape[-1] != weight.shape[1]:
            in_features = self.shape[-1] if self.ndim else "?"
            raise ValueError(
                f"[core] linear: input {self.shape} needs a weight of shape (out, {in_features}), "
                f"got {weight.shape}"
            )
        if self._fusable_with(weight, bias) and self.numel() > 0:
            return apply(fused.Linear, self, weight, *([bias] if bias is not None else []))
        out = self.matmul(weight.T)
        return out + bias if bias is not None else out

    def _fusable_with(self, weight: Tensor, bias: Tensor | None) -> builtins.bool:
        """Whether a layer op (linear, conv2d) may run as its fused Function: the input a float, the
        weight (and bias, of weight.shape[:1]) of its dtype and device."""
        return (weight.dtype == self.dtype and weight.device == self.device and self.dtype.is_float
                and (bias is None or (bias.shape == weight.shape[:1] and bias.dtype == self.dtype
                                      and bias.device == self.device)))

    def _pool(self, kernel: tuple[builtins.int, ...], stride: tuple[builtins.int, ...],
              dilation: tuple[builtins.int, ...]) -> Tensor:
        """Sliding windows as a view: (..., *spatial) -> (..., *out_spatial, *kernel). No copies."""
        nsp = len(kernel)
        spatial = self.shape[-nsp:]
        outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
        if any(o <= 0 for o in outs):
            raise ValueError(f"[core] pooling window {kernel} (dilation {dilation}) is larger than the "
                             f"input {spatial}")
        lead = self.shape[:-nsp]
        x = self
        n = len(lead)
        if all(s >= k for k, s in zip(kernel, stride)) and all(d == 1 for d in dilation):
            # Windows that never overlap are a pad + reshape: no repeated reads, and a gradient
            # that is a reshape + shrink (no reduce) instead of a sum over repeats.
            x = x.pad(((0, 0),) * n + tuple((0, max(0, o * s - i)) for i, o, s in zip(spatial, outs, stride)))
            x = x.shrink(tuple((0, t) for t in lead) + tuple((0, o * s) for o, s in zip(outs, stride)))
            x = x.reshape(lead + tuple(v for o, s in zip(outs, stride) for v in (o, s)))
            x = x.shrink(
                tuple((0, t) for t in lead) + tuple(v for o, k in zip(outs, kernel) for v in ((0, o), (0, k)))
            )
            order = (
                tuple(range(n))
                + tuple(n + 2 * i for i in range(nsp))
                + tuple(n + 2 * i + 1 for i in range(nsp))
            )
            return x.permute(order)
        # Overlapping windows as a stack of k shifted, strided views: the gradient is then a sum
        # of shifted pads (one elementwise kernel) instead of a masked sum over repeats.
        views = []
        for offs in itertools.product(*[range(k) for k in kernel]):
            if all(s == 1 for s in stride):      # one shrink (indexing costs ~10x more to build)
                views.append(x.shrink(tuple((0, t) for t in lead) + tuple(
                    (off * d, off * d + o) for off, o, d in zip(offs, outs, dilation))))
                continue
            v = x
            for j, (off, o, s, d) in enumerate(zip(offs, outs, stride, dilation)):
                ax = n + j
                start = off * d
                idx = [slice(None)] * v.ndim
                idx[ax] = slice(start, start + (o - 1) * s + 1, s)
                v = v[tuple(idx)]
            views.append(v)
        # stacked ahead of the spatial dims so each window offset is a contiguous image
        win = Tensor.stack(views, dim=n)                                   # (..., prod(kernel), *outs)
        win = win.reshape(lead + tuple(kernel) + tuple(outs))
        return win.permute(tuple(range(n)) + tuple(n + nsp + i for i in range(nsp))
                           + tuple(n + i for i in range(nsp)))

    @autocast_op
    def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
               dilation: Any = 1, groups: builtins.int = 1) -> Tensor:
        """torch.nn.functional.conv2d: input (N, Cin, H, W), weight (Cout, Cin/groups, kh, kw), and
        stride, padding and dilation as ints or (h, w) pairs. As in torch, it is a cross-correlation
        (the kernel is not flipped).

            >>> x = Tensor.arange(9).reshape(1, 1, 3, 3).float()
            >>> x.conv2d(Tensor.ones(1, 1, 2, 2)).tolist()         # each output sums a 2x2 window
            [[[[8.0, 12.0], [20.0, 24.0]]]]
            >>> x.conv2d(Tensor.ones(4, 1, 3, 3), padding=1).shape
            (1, 4, 3, 3)
        """
        if self.ndim != 4 or weight.ndim != 4:
            raise ValueError(
                f"[core] conv2d: expected 4-d input and weight, got {self.shape} and {weight.shape}"
            )
        n, cin, _, _ = self.shape
        cout, cin_g, kh, kw = weight.shape
        if cin % groups or cout % groups or cin_g * groups != cin:
            raise ValueError(
                f"[core] conv2d: input has {cin} channels, weight expects {cin_g}*groups({groups}) "
                f"and {cout} outputs must divide by groups"
            )
        st, dl = _pair(stride), _pair(dilation)
        if isinstance(padding, str):
            raise ValueError("[core] conv2d: string padding is not supported; give ints")
        ph, pw = _pair(padding)
        if self._fusable_with(weight, bias) and self.numel() > 0 and weight.numel() > 0:
            hp, wp = self.shape[2] + 2 * ph, self.shape[3] + 2 * pw
            if hp > dl[0] * (kh - 1) and wp > dl[1] * (kw - 1):      # else _pool says the window is too large
                return apply(fused.Conv2d, self, weight, *([bias] if bias is not None else []), stride=st,
                             padding=(ph, pw), dilation=dl, groups=groups)
        x = self.pad(((0, 0), (0, 0), (ph, ph), (pw, pw)))
        win = x._pool((kh, kw), st, dl)                                       # (N, Cin, oh, ow, kh, kw)
        oh, ow = win.shape[2], win.shape[3]
        g, cout_g = groups, cout // groups
        win = win.reshape(n, g, 1, cin_g, oh, ow, kh, kw)
        w = weight.reshape(1, g, cout_g, cin_g, 1, 1, kh, kw)
        out = (win * w).sum((3, 6, 7), dtype=win.dtype)        # (N, G, Cout/G, 1, oh, ow, 1, 1)
        out = out.reshape(n, cout, oh, ow)
        return out + bias.reshape(1, cout, 1, 1) if bias is not None else out

    def max_pool2d(
        self, kernel_size: Any = 2, stride: Any = None, padding: Any = 0, dilation: Any = 1
    ) -> Tensor:
        """The max over kernel_size windows of the last two dims (torch F.max_pool2d): stride defaults to
        the kernel size, and padding adds -inf (ints keep their dtype: the dtype's minimum).

            >>> Tensor.arange(16).reshape(1, 1, 4, 4).max_pool2d(2).tolist()
            [[[[5, 7], [13, 15]]]]
        """
        k = _pair(kernel_size)
        st = _pair(stride) if stride is not None else k
        ph, pw = _pair(padding)
        x = (
            self.pad(((0, 0),) * (self.ndim - 2) + ((ph, ph), (pw, pw)), value=min_value(self.dtype))
            if ph or pw
            else self
        )
        return x._pool(k, st, _pair(dilation)).amax((-2, -1))

    def avg_pool2d(self, kernel_size: Any = 2, stride: Any = None, padding: Any = 0,
                   count_include_pad: builtins.bool = True) -> Tensor:
        """The mean over kernel_size windows of the last two dims (torch F.avg_pool2d): stride defaults to
        the kernel size; padding adds zeros, which count in the mean unless count_include_pad=False.

            >>> Tensor.arange(16).reshape(1, 1, 4, 4).float().avg_pool2d(2).tolist()
            [[[[2.5, 4.5], [10.5, 12.5]]]]
            >>> Tensor.ones(1, 2, 2).avg_pool2d(2, stride=1, padding=1).tolist()[0][0]
            [0.25, 0.5, 0.25]
        """
        k = _pair(kernel_size)
        st = _pair(stride) if stride is not None else k
        ph, pw = _pair(padding)
        pad_arg = ((0, 0),) * (self.ndim - 2) + ((ph, ph), (pw, pw))
        x = self.pad(pad_arg) if ph or pw else self
        sums = x._pool(k, st, (1, 1)).sum((-2, -1))
        if count_include_pad or not (ph or pw):
            return sums / (k[0] * k[1])
        ones = Tensor.ones(*self.shape[-2:], device=self.device).pad(((ph, ph), (pw, pw)))
        counts = ones._pool(k, st, (1, 1)).sum((-2, -1))
        return sums / counts

    # ------------------------------------------------------------ torch's other names and compositions
    # Each is built from the ops above (so gradients come by composition). Ops whose output shape
    # depends on the values (nonzero, unique, masked_select, bincount) read them to the host, as torch
    # syncs for them too.
    absolute, negative, fix, sgn = abs, neg, trunc, sign
    arcsin, arccos, arctan, arctan2, arcsinh, arccosh, arctanh = asin, acos, atan, atan2, asinh, acosh, atanh
    multiply, divide, true_divide, subtract, remainder, floor_divide = mul, div, div, sub, mod, floordiv
    greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
    swapaxes = swapdims = transpose
    ndimension, nelement = dim, numel

    def clamp_min(self, min: Any) -> Tensor:  # noqa: A002  (torch's name)
        """clamp(min=min).

            >>> Tensor([-1.0, 2.0]).clamp_min(0.5).tolist()
            [0.5, 2.0]
        """
        return self.clamp(min=min)

    def clamp_max(self, max: Any) -> Tensor:  # noqa: A002  (torch's name)
        """clamp(max=max).

            >>> Tensor([-1.0, 2.0]).clamp_max(0.5).tolist()
            [-1.0, 0.5]
        """
        return self.clamp(max=max)

    def frac(self) -> Tensor:
        """The fractional part, self - trunc(self), with self's sign.

            >>> Tensor([1.25, -1.25]).frac().tolist()
            [0.25, -0.25]
        """
        return self - self.trunc()

    def erfc(self) -> Tensor:
        """1 - erf(self), elementwise, to about an ulp of the dtype: never 1 - erf rounded, so the
        tail keeps its digits (erfc(5) is 1.5375e-12 in float32, not 0).

            >>> Tensor([0.0]).erfc().tolist()
            [1.0]
        """
        x = self._float_like()
        with _NoGrad():
            _, erfc_a = x.detach()._erf_parts()
            out = (x.detach() < 0).where(2 - erfc_a, erfc_a).cast(x.dtype)
        return x._local(out, (x, lambda: (-(x.detach() * x.detach())).exp() * (-2 / math.sqrt(math.pi))))

    def _erf_parts(self) -> tuple[Tensor, Tensor]:
        """(erf(|x|), erfc(|x|)) of a float tensor (float32 for a narrow one: the caller rounds once),
        by fdlibm's s_erf.c (Sun Microsystems, 1993, freely redistributable): rational approximations
        on [0, 0.84375), [0.84375, 1.25) and beyond, where erfc(a) = exp(-z^2 - 0.5625) * exp((z - a)
        (z + a) + R/S) / a with z = a cut to half its bits (z^2 is exact, so the large exponent carries
        no rounding error). The coefficients are double's."""
        x = self.cast(dtypes.float32) if self.dtype in (dtypes.float16, dtypes.bfloat16) else self
        word = dtypes.int64 if x.dtype == dtypes.float64 else dtypes.int32
        a = (x.bitcast(word) & ((1 << (8 * word.itemsize - 1)) - 1)).bitcast(x.dtype)   # |x|, x read once
        z2 = a * a
        s = a - 1
        at = (a < 40.0).where(a, 40.0)              # erfc(40) is 0 even in float64; no inf - inf below
        inv = 1 / (at * at)
        near = at < 1 / 0.35
        low, middle = a < 0.84375, a < 1.25
        # each range's rational function is one quotient P/Q, and a value uses one range: the numerators
        # and denominators are chosen first, so the four quotients are one division (the same one in
        # each lane; a division costs what a dozen multiply-adds do)
        q = low.where(_poly(z2, ERF_PP), middle.where(_poly(s, ERF_PA), near.where(_poly(inv, ERF_RA),
                                                                                   _poly(inv, ERF_RB)))) / \
            low.where(_poly(z2, (1.0, *ERF_QQ)), middle.where(_poly(s, (1.0, *ERF_QA)),
                                                              near.where(_poly(inv, (1.0, *ERF_SA)),
                                                                         _poly(inv, (1.0, *ERF_SB)))))
        small = a + a * q
        cut = (at.bitcast(word) & (-(1 << 32) if word == dtypes.int64 else -(1 << 13))).bitcast(x.dtype)
        tail = (-cut * cut - 0.5625).exp() * ((cut - at) * (cut + at) + q).exp() / at
        erf_a = low.where(small, middle.where(q + ERF_ERX, 1 - tail))
        erfc_a = low.where(1 - small, middle.where((1 - ERF_ERX) - q, tail))
        nan = a.isnan()
        return nan.where(a, erf_a), nan.where(a, erfc_a)

    def signbit(self) -> Tensor:
        """True where the sign bit is set: negative numbers and -0.0.

            >>> Tensor([-0.0, 0.0, -2.0, 3.0]).signbit().tolist()
            [True, False, True, False]
        """
        return self.ones_like().copysign(self) < 0 if self.dtype.is_float else self < 0

    def isfinite(self) -> Tensor:
        """True where an element is neither inf nor NaN (always, for ints and bools).

            >>> Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
            [True, False, False]
        """
        return (self - self) == 0 if self.dtype.is_float else Tensor.ones(*self.shape, dtype=dtypes.bool,
                                                                             device=self.device)

    def isposinf(self) -> Tensor:
        """True where an element is +inf.

            >>> Tensor([1.0, float("inf"), -float("inf")]).isposinf().tolist()
            [False, True, False]
        """
        return self == math.inf

    def isneginf(self) -> Tensor:
        """True where an element is -inf.

            >>> Tensor([1.0, float("inf"), -float("inf")]).isneginf().tolist()
            [False, False, True]
        """
        return self == -math.inf

    def nan_to_num(self, nan: builtins.float = 0.0, posinf: builtins.float | None = None,
                   neginf: builtins.float | None = None) -> Tensor:
        """NaN, +inf and -inf replaced by nan, posinf and neginf (by default 0 and the dtype's largest and
        smallest finite values), as torch.nan_to_num.

            >>> Tensor([float("nan"), float("inf"), 1.0]).nan_to_num(posinf=9.0).tolist()
            [0.0, 9.0, 1.0]
        """
        if not self.dtype.is_float:
            return self
        biggest = float(np.finfo(np.float32 if self.dtype == dtypes.bfloat16 else self.dtype.np_value).max)
        if self.dtype == dtypes.bfloat16:
            biggest = 3.3895313892515355e38
        hi = biggest if posinf is None else posinf
        lo = -biggest if neginf is None else neginf
        x = self.isnan().where(nan, self)
        return (x == math.inf).where(hi, (x == -math.inf).where(lo, x))

    def isclose(self, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
                equal_nan: builtins.bool = False) -> Tensor:
        """True where |self - other| <= atol + rtol * |other| (equal infinities are close; NaNs only with
        equal_nan), as torch.isclose.

            >>> Tensor([1.0, 2.0]).isclose(Tensor([1.000001, 2.1])).tolist()
            [True, False]
        """
        a, b = self._broadcasted(other)
        # as torch: an infinite difference (inf vs -inf, inf vs a number) is never within tolerance
        err = (a._float_like() - b).abs()
        close = (a == b) | (err.isfinite() & (err <= atol + rtol * b._float_like().abs()))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def allclose(self, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
                 equal_nan: builtins.bool = False) -> builtins.bool:
        """Whether isclose() holds everywhere (a Python bool, read from the device).

            >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
            True
        """
        return builtins.bool(self.isclose(other, rtol, atol, equal_nan).all().item())

    def equal(self, other: Tensor) -> builtins.bool:
        """True when other has the same shape and the same values (a Python bool), as torch.equal.

            >>> Tensor([1, 2]).equal(Tensor([1, 2])), Tensor([1, 2]).equal(Tensor([1]))
            (True, False)
        """
        return self.shape == other.shape and builtins.bool((self == other).all().item())

    def hypot(self, other: Any) -> Tensor:
        """sqrt(self ** 2 + other ** 2), elementwise.

            >>> Tensor([3.0]).hypot(Tensor([4.0])).tolist()
            [5.0]
        """
        a, b = self._broadcasted(other)
        return (a * a + b * b).sqrt()

    def logaddexp(self, other: Any) -> Tensor:
        """log(exp(self) + exp(other)), without overflow.

            >>> round(Tensor([1000.0]).logaddexp(Tensor([1000.0])).item(), 2)
            1000.69
        """
        a, b = self._broadcasted(other)
        a, b = a._float_like(), b._float_like()
        m = a.maximum(b)._detached()
        m = m.isinf().where(0.0, m)    # both -inf (or an inf): no shift, so no inf - inf
        return ((a - m).exp() + (b - m).exp()).log() + m

    def logaddexp2(self, other: Any) -> Tensor:
        """log2(2 ** self + 2 ** other), without overflow.

            >>> Tensor([3.0]).logaddexp2(Tensor([3.0])).tolist()
            [4.0]
        """
        ln2 = math.log(2)
        return (self._float_like() * ln2).logaddexp(self._to_tensor(other)._float_like() * ln2) / ln2

    def xlogy(self, other: Any) -> Tensor:
        """self * log(other), and 0 where self is 0 (unless other is NaN), as torch.xlogy.

            >>> Tensor([0.0, 2.0]).xlogy(Tensor([0.0, 1.0])).tolist()
            [0.0, 0.0]
        """
        a, b = self._broadcasted(other)
        a, b = a._float_like(), b._float_like()
        return ((a == 0) & b.isnan().logical_not()).where(0.0, a * b.log())

    def float_power(self, exponent: Any) -> Tensor:
        """pow() in float64, as torch.float_power.

            >>> Tensor([2]).float_power(3).dtype
            dtypes.float64
        """
        e = exponent.cast(dtypes.float64) if isinstance(exponent, Tensor) else builtins.float(exponent)
        return self.cast(dtypes.float64).pow(e)

    def fmax(self, other: Any) -> Tensor:
        """maximum() that ignores NaN: where one side is NaN the other is taken. As in torch, self takes
        the whole gradient of a tie.

            >>> Tensor([1.0, float("nan")]).fmax(Tensor([float("nan"), 2.0])).tolist()
            [1.0, 2.0]
        """
        a, b = self._broadcasted(other)
        return ((a >= b) | b.isnan()).where(a, b)   # torch's rule for which side the gradient goes to

    def fmin(self, other: Any) -> Tensor:
        """minimum() that ignores NaN: where one side is NaN the other is taken. As in torch, self takes
        the whole gradient of a tie.

            >>> Tensor([1.0, float("nan")]).fmin(Tensor([float("nan"), 2.0])).tolist()
            [1.0, 2.0]
        """
        a, b = self._broadcasted(other)
        return ((a <= b) | b.isnan()).where(a, b)

    def deg2rad(self) -> Tensor:
        """Degrees to radians.

            >>> round(Tensor([180.0]).deg2rad().item(), 5)
            3.14159
        """
        return self._float_like() * (math.pi / 180)

    def rad2deg(self) -> Tensor:
        """Radians to degrees.

            >>> round(Tensor([math.pi]).rad2deg().item(), 3)
            180.0
        """
        return self._float_like() * (180 / math.pi)

    @autocast_op
    def addcmul(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        """self + value * tensor1 * tensor2.

            >>> Tensor([1.0]).addcmul(Tensor([2.0]), Tensor([3.0]), value=0.5).tolist()
            [4.0]
        """
        return self + tensor1 * tensor2 * value

    @autocast_op
    def addcdiv(self, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
        """self + value * tensor1 / tensor2.

            >>> Tensor([1.0]).addcdiv(Tensor([2.0]), Tensor([4.0]), value=2).tolist()
            [2.0]
        """
        return self + tensor1 / tensor2 * value

    # reductions
    def nansum(self, dim: Any = None, keepdim: builtins.bool = False, *,
               dtype: DType | str | None = None) -> Tensor:
        """sum() with NaNs counted as zero.

            >>> Tensor([1.0, float("nan"), 2.0]).nansum().item()
            3.0
        """
        x = self.isnan().where(0.0, self) if self.dtype.is_float else self
        return x.sum(dim, keepdim, dtype)

    def nanmean(self, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        """mean() of the elements that are not NaN.

            >>> Tensor([1.0, float("nan"), 2.0]).nanmean().item()
            1.5
        """
        return self.nansum(dim, keepdim) / self.isnan().logical_not().sum(dim, keepdim)

    def aminmax(self, *, dim: Any = None, keepdim: builtins.bool = False) -> MinMax:
        """(amin, amax) over dim, named .min and .max as in torch.aminmax.

            >>> Tensor([[1, 5], [3, 4]]).aminmax(dim=1).max.tolist()
            [5, 4]
        """
        return MinMax(self.amin(dim, keepdim), self.amax(dim, keepdim))

    def count_nonzero(self, dim: Any = None) -> Tensor:
        """How many elements are not zero (int64), over dim (all dims when None).

            >>> Tensor([[0, 1], [2, 3]]).count_nonzero(dim=0).tolist()
            [1, 2]
        """
        return (self != 0).sum(dim)

    @autocast_op
    def norm(self, p: Any = "fro", dim: Any = None, keepdim: builtins.bool = False, *,
             dtype: DType | str | None = None) -> Tensor:
        """The vector p-norm over dim (all elements when None; "fro" is 2): (sum |x|^p)^(1/p), inf the
        largest |x|, -inf the smallest, 0 the count of nonzeros (torch.norm, linalg.vector_norm).

            >>> Tensor([[3.0, 4.0]]).norm().item(), Tensor([[3.0, -4.0]]).norm(1, dim=1).tolist()
            (5.0, [7.0])
        """
        x = (self.cast(dtype) if dtype is not None else self._float_like()).abs()
        p = 2 if p == "fro" else p
        if not isinstance(p, (builtins.int, builtins.float)):
            raise ValueError(f"[core] norm: p must be a number or 'fro', got {p!r}")
        if p == math.inf:
            return x.amax(dim, keepdim)
        if p == -math.inf:
            return x.amin(dim, keepdim)
        if p == 0:
            return (x != 0).sum(dim, keepdim).cast(x.dtype)
        if p == 1:
            return x.sum(dim, keepdim)
        if p == 2:
            return (x * x).sum(dim, keepdim)._sqrt_of_spread()
        return (x ** p).sum(dim, keepdim) ** (1 / p)

    def logcumsumexp(self, dim: builtins.int) -> Tensor:
        """log(cumsum(exp(self))) along dim, each prefix shifted by its own max (no overflow or underflow).
        O(n^2) in the dim's size, as cumprod.

            >>> [round(v, 4) for v in Tensor([0.0, 0.0, 1000.0]).logcumsumexp(0).tolist()]
            [0.0, 0.6931, 1000.0]
        """
        d, x = self._last_dim(dim, "logcumsumexp")
        if x.ndim == 0 or x.shape[-1] == 0:
            return self._float_like()
        n = x.shape[-1]
        ar = index_range(n, self.device)
        tri = ar.reshape(1, n) <= ar.reshape(n, 1)                      # [i, j]: j <= i
        out = tri.where(x._float_like().unsqueeze(-2), -math.inf).logsumexp(-1)
        out = out if d == x.ndim - 1 else out.transpose(d, -1)
        return out.reshape(self.shape)

    def kthvalue(self, k: builtins.int, dim: builtins.int = -1,
                 keepdim: builtins.bool = False) -> ValuesIndices:
        """The k-th smallest value along dim (k from 1) and its int64 index.

            >>> values, indices = Tensor([[3.0, 1.0, 2.0]]).kthvalue(2, dim=1)
            >>> values.tolist(), indices.tolist()
            ([2.0], [2])
        """
        values, indices = self.sort(dim)
        d = self._axis(dim) if self.ndim else 0
        if not 1 <= k <= (self.shape[d] if self.ndim else 1):
            raise ValueError(f"[core] kthvalue: k={k} is out of range for dim {dim} of shape {self.shape}")
        return _select_along(values, indices, d, k - 1, keepdim)

    def median(self, dim: builtins.int | None = None, keepdim: builtins.bool = False) -> Any:
        """The lower median (the ((n - 1) // 2)-th smallest) of all elements, or (values, indices) along dim,
        as torch.median; NaN if a NaN is there.

            >>> Tensor([1.0, 4.0, 2.0, 3.0]).median().item(), Tensor([[1, 4, 2]]).median(1).values.tolist()
            (2.0, [2])
        """
        if dim is None:
            return self.flatten().median(0).values.reshape(())
        n = self.shape[self._axis(dim)] if self.ndim else 1
        values, indices = self.kthvalue((n - 1) // 2 + 1, dim, keepdim)
        if self.dtype.is_float:
            values = self.isnan().any(dim, keepdim).where(math.nan, values)
        return ValuesIndices(values, indices)

    def nanmedian(self, dim: builtins.int | None = None, keepdim: builtins.bool = False) -> Any:
        """median() of the elements that are not NaN (NaN where all are).

            >>> Tensor([3.0, float("nan"), 1.0, 2.0]).nanmedian().item()
            2.0
        """
        if dim is None:
            return self.flatten().nanmedian(0).values.reshape(())
        d = self._axis(dim) if self.ndim else 0
        values, indices = self.sort(dim)          # NaN sorts last
        count = self.isnan().logical_not().sum(dim, keepdim=True) if self.ndim else Tensor(1)
        pos = ((count - 1).maximum(0) // 2)
        if not self.ndim:
            return ValuesIndices(self, Tensor(0, device=self.device))
        v, i = values.gather(d, pos), indices.gather(d, pos)
        return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))

    def mode(self, dim: builtins.int = -1, keepdim: builtins.bool = False) -> ValuesIndices:
        """The most frequent value along dim (the smallest of equally frequent ones) and the last index
        holding it, as torch.mode. O(n^2) in the dim's size.

            >>> values, indices = Tensor([[1, 3, 3, 2, 1]]).mode(1)
            >>> values.tolist(), indices.tolist()
            ([1], [4])
        """
        d, x = self._last_dim(dim, "mode")
        x = x._stored()   # each element compared with every other and with the mode: one computation
        n = x.shape[-1]
        with _NoGrad():
            xd = x._detached()
            counts = (xd.unsqueeze(-1) == xd.unsqueeze(-2)).sum(-1)                    # (..., n)
            top = counts == counts.amax(-1, keepdim=True)
            big = math.inf if xd.dtype.is_float else int(max_value(xd.dtype))
            best = top.where(xd, big).amin(-1, keepdim=True)
            idx = (xd == best).where(index_range(n, self.device), -1).amax(-1, keepdim=True)
        values = x.gather(-1, idx)
        out = [t if d == x.ndim - 1 else t.transpose(d, -1) for t in (values, idx.cast(dtypes.int64))]
        if self.ndim == 0:
            return ValuesIndices(out[0].reshape(()), out[1].reshape(()))
        return ValuesIndices(*[t if keepdim else t.squeeze(d) for t in out])

    # ops with value-dependent shapes: read to the host
    def unique(self, sorted: builtins.bool = True, return_inverse: builtins.bool = False,  # noqa: A002
               return_counts: builtins.bool = False, dim: builtins.int | None = None) -> Any:
        """The distinct values, sorted (and, if asked, the index of each element's value and each value's
        count), as torch.unique of the flattened tensor. Reads the values to the host.

            >>> Tensor([3, 1, 3]).unique(return_counts=True)[1].tolist()
            [1, 2]
        """
        if dim is not None:
            raise ValueError("[core] unique: dim= is not supported; call it on the flattened tensor")
        values, inverse, counts = np.unique(self.numpy(), return_inverse=True, return_counts=True)
        out = [Tensor(values, device=self.device, dtype=self.dtype)]
        if return_inverse:
            out.append(Tensor(inverse.reshape(self.shape).astype(np.int64), device=self.device))
        if return_counts:
            out.append(Tensor(counts.astype(np.int64), device=self.device))
        return out[0] if len(out) == 1 else tuple(out)

    def unique_consecutive(self) -> Tensor:
        """The values with each run of equal neighbours kept once (flattened). Reads them to the host.

            >>> Tensor([1, 1, 2, 1]).unique_consecutive().tolist()
            [1, 2, 1]
        """
        a = self.numpy().reshape(-1)
        keep = np.concatenate([[True], a[1:] != a[:-1]]) if a.size else np.zeros(0, bool)
        return Tensor(a[keep], device=self.device, dtype=self.dtype)

    def nonzero(self, as_tuple: builtins.bool = False) -> Any:
        """The int64 indices of the nonzero elements, one row each (n, ndim), or one tensor per dim with
        as_tuple=True. Reads the values to the host.

            >>> Tensor([[0, 1], [1, 0]]).nonzero().tolist()
            [[0, 1], [1, 0]]
        """
        where = np.nonzero(self.numpy())
        cols = [Tensor(w.astype(np.int64), device=self.device) for w in where]
        if as_tuple:
            return tuple(cols)
        return Tensor(np.stack(where, 1).astype(np.int64).reshape(-1, self.ndim), device=self.device)

    def argwhere(self) -> Tensor:
        """nonzero(): the indices of the nonzero elements, one row each.

            >>> Tensor([0, 3, 4]).argwhere().tolist()
            [[1], [2]]
        """
        return self.nonzero()

    def masked_select(self, mask: Tensor) -> Tensor:
        """The elements where mask (broadcast to self) is True, as a 1-d tensor; gradients flow to them.
        Reads the mask to the host.

            >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False])).tolist()
            [1, 3]
        """
        shape = broadcast_shape(self.shape, mask.shape)
        picked = np.flatnonzero(np.broadcast_to(mask.numpy(), shape))
        return self._broadcast_to(shape).reshape(-1)[Tensor(picked.astype(np.int64), device=self.device)]

    def bincount(self, weights: Tensor | None = None, minlength: builtins.int = 0) -> Tensor:
        """How often each value 0..max occurs in this 1-d int tensor (the weights' sums if given), at
        least minlength long. Reads the largest value to the host.

            >>> Tensor([1, 1, 3]).bincount().tolist()
            [0, 2, 0, 1]
        """
        if self.ndim != 1 or self.dtype.is_float:
            raise ValueError(f"[core] bincount: expected a 1-d int tensor, got {self.dtype.name}{self.shape}")
        n = builtins.max(minlength, builtins.int(self.max().item()) + 1 if self.numel() else 0)
        hit = self.unsqueeze(-1) == index_range(n, self.device)                       # (len, n)
        return hit.sum(0) if weights is None else hit.where(weights.unsqueeze(-1), 0).sum(0)

    def histc(self, bins: builtins.int = 100, min: builtins.float = 0, max: builtins.float = 0) -> Tensor:  # noqa: A002
        """A histogram of `bins` equal bins over [min, max] (the data's range when both are 0); values
        outside are left out, as torch.histc.

            >>> Tensor([1.0, 2.0, 1.0, 4.0]).histc(bins=4, min=0, max=4).tolist()
            [0.0, 2.0, 1.0, 1.0]
        """
        x = self._float_like().reshape(-1)
        lo, hi = builtins.float(min), builtins.float(max)
        if lo == hi:
            lo, hi = builtins.float(x.min().item()), builtins.float(x.max().item())
            lo, hi = (lo - 1, hi + 1) if lo == hi else (lo, hi)
        pos = ((x - lo) * (bins / (hi - lo))).floor().cast(dtypes.int32).minimum(bins - 1)
        pos = ((x >= lo) & (x <= hi)).where(pos, -1)
        return (pos.unsqueeze(-1) == index_range(bins, self.device)).sum(0).cast(x.dtype)

    # shape
    @_view_op
    def movedim(self, source: Any, destination: Any) -> Tensor:
        """The dims `source` (an int or a tuple) moved to positions `destination`, the others keeping their
        order (torch.movedim, numpy's moveaxis).

            >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape
            (3, 4, 2)
        """
        src = self._axes(source if isinstance(source, (tuple, list)) else (source,))
        dst = self._axes(destination if isinstance(destination, (tuple, list)) else (destination,))
        if len(src) != len(dst):
            raise ValueError(f"[core] movedim: {len(src)} source dims but {len(dst)} destinations")
        order = [i for i in range(self.ndim) if i not in src]
        for d, s in builtins.sorted(zip(dst, src)):
            order.insert(d, s)
        return self.permute(order)

    moveaxis = movedim

    @_view_op
    def reshape_as(self, other: Tensor) -> Tensor:
        """reshape(other.shape).

            >>> Tensor.zeros(6).reshape_as(Tensor.zeros(2, 3)).shape
            (2, 3)
        """
        return self.reshape(other.shape)

    def ravel(self) -> Tensor:
        """The elements as a 1-d tensor (reshape(-1)).

            >>> Tensor([[1, 2], [3, 4]]).ravel().tolist()
            [1, 2, 3, 4]
        """
        return self.reshape(-1)

    @property
    @_view_op
    def mT(self) -> Tensor:  # noqa: N802  (torch's name)
        """The last two dims swapped (a batch of matrices transposed).

            >>> Tensor.zeros(5, 2, 3).mT.shape
            (5, 3, 2)
        """
        return self.transpose(-2, -1)

    @_view_op
    def broadcast_to(self, *shape: Any) -> Tensor:
        """expand() to `shape` (torch.broadcast_to).

            >>> Tensor([1, 2]).broadcast_to((2, 2)).tolist()
            [[1, 2], [1, 2]]
        """
        return self.expand(*shape)

    def tile(self, *dims: Any) -> Tensor:
        """repeat() whose counts may be fewer than the dims (1s are put in front) or more (the tensor gets
        leading dims of size 1), as torch.tile.

            >>> Tensor([1, 2]).tile(2).tolist(), Tensor([1, 2]).tile((2, 1)).tolist()
            ([1, 2, 1, 2], [[1, 2], [1, 2]])
        """
        reps = _argfix(*dims)
        reps = (1,) * (self.ndim - len(reps)) + tuple(reps)
        return self.reshape((1,) * (len(reps) - self.ndim) + self.shape).repeat(reps)

    def repeat_interleave(self, repeats: Any, dim: builtins.int | None = None) -> Tensor:
        """Each element repeated `repeats` times in place along dim (the flattened tensor when None);
        repeats may be a tensor of counts, one per element (read to the host).

            >>> x = Tensor([1, 2])
            >>> x.repeat_interleave(2).tolist(), x.repeat_interleave(Tensor([0, 3])).tolist()
            ([1, 1, 2, 2], [2, 2, 2])
        """
        x, d = (self.reshape(-1), 0) if dim is None else (self, self._axis(dim))
        if isinstance(repeats, Tensor) and repeats.numel() == 1:
            repeats = builtins.int(repeats.item())
        if isinstance(repeats, Tensor):
            picks = np.repeat(np.arange(x.shape[d]), repeats.numpy().reshape(-1))
            return x.index_select(d, Tensor(picks.astype(np.int64), device=self.device))
        grown = x.unsqueeze(d + 1)
        grown = grown.expand(*grown.shape[:d + 1], repeats, *grown.shape[d + 2:])
        return grown.flatten(d, d + 1)

    def roll(self, shifts: Any, dims: Any = None) -> Tensor:
        """Elements shifted along dims (the flattened tensor when None), wrapping around the end.

            >>> Tensor([1, 2, 3, 4]).roll(1).tolist(), Tensor([[1, 2], [3, 4]]).roll(1, 0).tolist()
            ([4, 1, 2, 3], [[3, 4], [1, 2]])
        """
        if dims is None:
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
        dims = dims if isinstance(dims, (tuple, list)) else (dims,)
        if len(shifts) != len(dims):
            raise ValueError(f"[core] roll: {len(shifts)} shifts for {len(dims)} dims")
        x = self
        for shift, dim in zip(shifts, dims):
            d = x._axis(dim)
            n = x.shape[d]
            s = shift % n if n else 0
            if s:
                x = x.narrow(d, n - s, s).cat(x.narrow(d, 0, n - s), dim=d)
        return x

    def fliplr(self) -> Tensor:
        """flip(1): columns in reverse order.

            >>> Tensor([[1, 2]]).fliplr().tolist()
            [[2, 1]]
        """
        return self.flip(1)

    def flipud(self) -> Tensor:
        """flip(0): rows in reverse order.

            >>> Tensor([[1], [2]]).flipud().tolist()
            [[2], [1]]
        """
        return self.flip(0)

    def rot90(self, k: builtins.int = 1, dims: Sequence[builtins.int] = (0, 1)) -> Tensor:
        """Rotated by 90 degrees k times, from dims[0] toward dims[1] (torch.rot90, numpy's rot90).

            >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
            [[2, 4], [1, 3]]
        """
        d0, d1 = dims
        k %= 4
        if k == 0:
            return self
        if k == 2:
            return self.flip(d0, d1)
        return self.flip(d1).transpose(d0, d1) if k == 1 else self.transpose(d0, d1).flip(d1)

    @_view_op
    def tensor_split(self, indices_or_sections: Any, dim: builtins.int = 0) -> tuple[Tensor, ...]:
        """Pieces along dim: n sections as equal as can be (the first ones one longer), or cut at the
        given indices (torch.tensor_split, numpy's array_split).

            >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split(2)]
            [[1, 2, 3], [4, 5]]
        """
        d = self._axis(dim)
        n = self.shape[d]
        cut = indices_or_sections
        cut = cut.tolist() if isinstance(cut, Tensor) else cut
        if isinstance(cut, builtins.int):
            size, extra = divmod(n, cut)
            cut = list(itertools.accumulate(size + (i < extra) for i in range(cut - 1)))
        bounds = [0] + [builtins.min(builtins.max(c % n if c < 0 else c, 0), n) for c in cut] + [n]
        return tuple(self.narrow(d, a, builtins.max(b - a, 0)) for a, b in zip(bounds, bounds[1:]))

    @_view_op
    def unbind(self, dim: builtins.int = 0) -> tuple[Tensor, ...]:
        """The slices along dim, each without it.

            >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)]
            [[1, 3], [2, 4]]
        """
        d = self._axis(dim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    @_view_op
    def narrow(self, dim: builtins.int, start: Any, length: builtins.int) -> Tensor:
        """The `length` elements from `start` along dim (a view).

            >>> Tensor([1, 2, 3, 4]).narrow(0, 1, 2).tolist()
            [2, 3]
        """
        d = self._axis(dim)
        n = self.shape[d]
        start = builtins.int(start.item() if isinstance(start, Tensor) else start)
        start = start + n if start < 0 else start
        if not (0 <= start <= n and 0 <= length <= n - start):
            raise ValueError(f"[core] narrow: start {start} and length {length} do not fit dim {dim} of "
                             f"size {n}")
        return self._shrink(tuple((start, start + length) if i == d else (0, s)
                                  for i, s in enumerate(self.shape)))

    @_view_op
    def select(self, dim: builtins.int, index: builtins.int) -> Tensor:
        """The slice at `index` along dim, without that dim (x.select(1, 2) is x[:, 2]).

            >>> Tensor([[1, 2], [3, 4]]).select(1, 0).tolist()
            [1, 3]
        """
        return self[(slice(None),) * self._axis(dim) + (index,)]

    def index_select(self, dim: builtins.int, index: Tensor) -> Tensor:
        """The slices along dim at the positions in the 1-d int tensor index.

            >>> Tensor([[1, 2, 3]]).index_select(1, Tensor([2, 0])).tolist()
            [[3, 1]]
        """
        if index.ndim > 1:
            raise ValueError(f"[core] index_select: index must be 0-d or 1-d, got shape {index.shape}")
        return self[(slice(None),) * self._axis(dim) + (index.reshape(-1),)]

    def take(self, index: Tensor) -> Tensor:
        """The elements of the flattened tensor at index, in index's shape.

            >>> Tensor([[1, 2], [3, 4]]).take(Tensor([[3, 0]])).tolist()
            [[4, 1]]
        """
        return self.reshape(-1)[index]

    def take_along_dim(self, indices: Tensor, dim: builtins.int | None = None) -> Tensor:
        """gather() with the other dims broadcast between self and indices; with dim None, of the
        flattened tensor at the flattened indices (numpy's take_along_axis).

            >>> Tensor([[10, 30, 20]]).take_along_dim(Tensor([[1], [2]]), dim=1).tolist()
            [[30], [20]]
        """
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        d = self._axis(dim)
        if indices.ndim != self.ndim:
            raise ValueError(f"[core] take_along_dim: indices have {indices.ndim} dims, input {self.ndim}")
        shape = broadcast_shape(tuple(s for i, s in enumerate(self.shape) if i != d),
                                tuple(s for i, s in enumerate(indices.shape) if i != d))
        grow = list(shape)

        def fit(t: Tensor) -> Tensor:
            return t.expand(*(grow[:d] + [t.shape[d]] + grow[d:]))
        return fit(self).gather(d, fit(indices))

    def _scattered(self, dim: builtins.int, index: Tensor, src: Any,
                   last_wins: builtins.bool) -> tuple[Tensor, Tensor]:
        """(hit, summed): for scatter along dim, whether each position of self is written and the sum of
        the src values written there (only the last write along dim of a duplicate index with last_wins,
        torch's CPU order); both in self's shape."""
        d = self._axis(dim)
        if not isinstance(index, Tensor) or not index.dtype.is_int or index.ndim != self.ndim:
            raise TypeError(f"[core] scatter: index must be an int tensor with {self.ndim} dims")
        indexing.check_bounds(index, self.shape[d])
        n = self.shape[d]
        src = src._shrink(tuple((0, s) for s in index.shape)) if isinstance(src, Tensor) else \
            Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
        onehot = indexing.as_index(index).unsqueeze(-1) == index_range(n, self.device)    # (*index, n)
        if last_wins:
            order = index_range(index.shape[d], self.device).reshape(
                tuple(-1 if i == d else 1 for i in range(index.ndim + 1)))
            onehot = onehot & (order == onehot.where(order, -1).amax(d, keepdim=True))
        hit = onehot.any(d).unsqueeze(d).transpose(d, -1).squeeze(-1)          # index's shape, n at d
        summed = onehot.where(src.cast(self.dtype).unsqueeze(-1), 0).sum(d).unsqueeze(d).transpose(d, -1)
        summed = summed.squeeze(-1).cast(self.dtype)
        pads = tuple((0, s - hs) if i != d else (0, 0)
                     for i, (s, hs) in enumerate(zip(self.shape, hit.shape)))
        return hit.pad(pads, value=False), summed.pad(pads)

    def scatter(self, dim: builtins.int, index: Tensor, src: Any = None, *, value: Any = None) -> Tensor:
        """A copy of self with src's elements (or the scalar value) written along dim at the positions in
        index: for dim=1, out[i][index[i][j]] = src[i][j] (torch.scatter; a position named twice gets the
        last of its values along dim, as torch's CPU kernel writes them in order).

            >>> Tensor.zeros(2, 3).scatter(1, Tensor([[2], [0]]), 1.0).tolist()
            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
        """
        hit, written = self._scattered(dim, index, value if src is None else src, last_wins=True)
        return hit.where(written, self)

    @autocast_op
    def scatter_add(self, dim: builtins.int, index: Tensor, src: Tensor) -> Tensor:
        """A copy of self with src's elements added along dim at the positions in index (repeats add up).

            >>> Tensor.zeros(3).scatter_add(0, Tensor([0, 0, 2]), Tensor([1.0, 2.0, 5.0])).tolist()
            [3.0, 0.0, 5.0]
        """
        return self + self._scattered(dim, index, src, last_wins=False)[1]

    def index_add(self, dim: builtins.int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        """A copy of self plus alpha * source's slices along dim at the positions in index.

            >>> Tensor([1, 1, 1]).index_add(0, Tensor([0, 0, 2]), Tensor([1, 2, 3])).tolist()
            [4, 1, 4]
        """
        return indexing.index_add(self, dim, index, source, alpha)

    def index_fill(self, dim: builtins.int, index: Tensor, value: Any) -> Tensor:
        """A copy of self with value at the positions in index along dim.

            >>> Tensor([[1, 2, 3]]).index_fill(1, Tensor([0, 2]), -1).tolist()
            [[-1, 2, -1]]
        """
        return indexing.index_fill(self, dim, index, value)

    @autocast_op
    def index_copy(self, dim: builtins.int, index: Tensor, source: Tensor) -> Tensor:
        """A copy of self with source's slices along dim written at the positions in index.

            >>> Tensor([0, 0, 0]).index_copy(0, Tensor([2]), Tensor([5])).tolist()
            [0, 0, 5]
        """
        return indexing.index_copy(self, dim, index, source)

    @autocast_op
    def index_put(self, indices: Any, values: Any, accumulate: builtins.bool = False) -> Tensor:
        """A copy of self with values written at the positions `indices` names (a tuple of index
        tensors, one per leading dim; None means a whole dim); accumulate=True adds instead, and
        duplicates add up. Without accumulate, the last write of a duplicate index wins.

            >>> Tensor([0, 0, 0]).index_put((Tensor([0, 2]),), Tensor([5, 7])).tolist()
            [5, 0, 7]
        """
        return indexing.index_put(self, indices, values, accumulate)

    def index_put_(self, indices: Any, values: Any, accumulate: builtins.bool = False) -> Tensor:
        """index_put written into self's memory (a lazy assign); returns self."""
        self._check_inplace("index_put_", values)
        return self.assign(indexing.index_put(self, indices, values, accumulate))

    def index_add_(self, dim: builtins.int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
        """index_add written into self's memory; returns self."""
        self._check_inplace("index_add_", source)
        return self.assign(indexing.index_add(self, dim, index, source, alpha))

    def index_fill_(self, dim: builtins.int, index: Tensor, value: Any) -> Tensor:
        """index_fill written into self's memory; returns self."""
        self._check_inplace("index_fill_", value)
        return self.assign(indexing.index_fill(self, dim, index, value))

    def index_copy_(self, dim: builtins.int, index: Tensor, source: Tensor) -> Tensor:
        """index_copy written into self's memory; returns self."""
        self._check_inplace("index_copy_", source)
        return self.assign(indexing.index_copy(self, dim, index, source))

    def diag_embed(self, offset: builtins.int = 0, dim1: builtins.int = -2,
                   dim2: builtins.int = -1) -> Tensor:
        """Each last-dim vector put on the `offset` diagonal of a matrix in dims (dim1, dim2) of the result.

            >>> Tensor([[1, 2]]).diag_embed().tolist()
            [[[1, 0], [0, 2]]]
        """
        n, k = self.shape[-1], abs(offset)
        out = self.unsqueeze(-1) * Tensor.eye(n, dtype=self.dtype, device=self.device)
        lead = ((0, 0),) * (self.ndim - 1)
        out = out.pad(lead + (((0, k), (k, 0)) if offset > 0 else ((k, 0), (0, k)))) if k else out
        return out.movedim((-2, -1), (dim1, dim2))

    def outer(self, vec2: Tensor) -> Tensor:
        """The outer product of two 1-d tensors: out[i][j] = self[i] * vec2[j].

            >>> Tensor([1, 2]).outer(Tensor([1, 10])).tolist()
            [[1, 10], [2, 20]]
        """
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    ger = outer

    def kron(self, other: Tensor) -> Tensor:
        """The Kronecker product: blocks self[i, j] * other (any number of dims).

            >>> Tensor([[1, 2]]).kron(Tensor([[1], [10]])).tolist()
            [[1, 2], [10, 20]]
        """
        n = builtins.max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + self.shape)
        b = other.reshape((1,) * (n - other.ndim) + other.shape)
        a = a.reshape(tuple(itertools.chain.from_iterable((s, 1) for s in a.shape)))
        b = b.reshape(tuple(itertools.chain.from_iterable((1, s) for s in b.shape)))
        return (a * b).reshape(tuple(x * y for x, y in zip(a.shape[::2], b.shape[1::2])))

    @autocast_op
    def cross(self, other: Tensor, dim: builtins.int | None = None) -> Tensor:
        """The 3-d cross product along dim (the first dim of size 3 when None, as torch.cross).

            >>> Tensor([1.0, 0.0, 0.0]).cross(Tensor([0.0, 1.0, 0.0])).tolist()
            [0.0, 0.0, 1.0]
        """
        a, b = self._broadcasted(other)
        d = next((i for i, s in enumerate(a.shape) if s == 3), None) if dim is None else a._axis(dim)
        if d is None or a.shape[d] != 3:
            raise ValueError(f"[core] cross: dim {dim} of shape {a.shape} must have size 3")
        x, y = a.unbind(d), b.unbind(d)
        parts = [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]
        return Tensor.stack(parts, d)

    def msort(self) -> Tensor:
        """The values sorted along dim 0.

            >>> Tensor([[2, 1], [1, 3]]).msort().tolist()
            [[1, 1], [2, 3]]
        """
        return self.sort(0).values

    # matrix products
    @autocast_op
    def mm(self, mat2: Tensor) -> Tensor:
        """The product of two 2-d tensors.

            >>> Tensor([[1, 2]]).mm(Tensor([[3], [4]])).tolist()
            [[11]]
        """
        _check_ndim("mm", (self, 2), (mat2, 2))
        return self.matmul(mat2)

    @autocast_op
    def mv(self, vec: Tensor) -> Tensor:
        """A 2-d tensor times a 1-d one.

            >>> Tensor([[1, 2], [3, 4]]).mv(Tensor([1, 1])).tolist()
            [3, 7]
        """
        _check_ndim("mv", (self, 2), (vec, 1))
        return self.matmul(vec)

    @autocast_op
    def bmm(self, mat2: Tensor) -> Tensor:
        """A batch of matrix products: (b, n, k) @ (b, k, m).

            >>> Tensor.ones(2, 1, 3).bmm(Tensor.ones(2, 3, 1)).tolist()
            [[[3.0]], [[3.0]]]
        """
        _check_ndim("bmm", (self, 3), (mat2, 3))
        return self.matmul(mat2)

    @autocast_op
    def addmm(self, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat1 @ mat2), self broadcasting (beta=0 ignores self).

            >>> Tensor([1, 1]).addmm(Tensor([[1, 2]]), Tensor([[1, 0], [0, 1]])).tolist()
            [[2, 3]]
        """
        _check_ndim("addmm", (mat1, 2), (mat2, 2))
        return _scaled_sum(self, mat1.matmul(mat2), beta, alpha)

    @autocast_op
    def addmv(self, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (mat @ vec).

            >>> Tensor([1, 1]).addmv(Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
            [4, 8]
        """
        _check_ndim("addmv", (mat, 2), (vec, 1))
        return _scaled_sum(self, mat.matmul(vec), beta, alpha)

    @autocast_op
    def baddbmm(self, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
        """beta * self + alpha * (batch1 @ batch2) for batches of matrices.

            >>> Tensor.zeros(1, 1, 1).baddbmm(Tensor.ones(1, 1, 2), Tensor.ones(1, 2, 1), alpha=2).tolist()
            [[[4.0]]]
        """
        _check_ndim("baddbmm", (batch1, 3), (batch2, 3))
        return _scaled_sum(self, batch1.matmul(batch2), beta, alpha)

    def inner(self, other: Tensor) -> Tensor:
        """Sums of products over the last dims: the result has self's other dims then other's.

            >>> Tensor([[1, 2], [3, 4]]).inner(Tensor([1, 1])).tolist()
            [3, 7]
        """
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        k = self.shape[-1]
        out = self.reshape(-1, k).matmul(other.reshape(-1, k).transpose(0, 1))
        return out.reshape(self.shape[:-1] + other.shape[:-1])

    @autocast_op
    def vdot(self, other: Tensor) -> Tensor:
        """The dot product of two 1-d tensors.

            >>> Tensor([1, 2]).vdot(Tensor([3, 4])).item()
            11
        """
        _check_ndim("vdot", (self, 1), (other, 1))
        return self.matmul(other)

    # dtypes
    def short(self) -> Tensor:
        """cast() to int16.

            >>> Tensor([1.7]).short().tolist()
            [1]
        """
        return self.cast(dtypes.int16)

    def byte(self) -> Tensor:
        """cast() to uint8.

            >>> Tensor([3]).byte().dtype
            dtypes.uint8
        """
        return self.cast(dtypes.uint8)

    def char(self) -> Tensor:
        """cast() to int8.

            >>> Tensor([3]).char().dtype
            dtypes.int8
        """
        return self.cast(dtypes.int8)

    def type(self, dtype: DType | str | None = None) -> Any:
        """cast() to dtype; with no dtype, the dtype's torch type name ("torch.FloatTensor").

            >>> Tensor([1]).type(), Tensor([1]).type(dtypes.float32).dtype
            ('torch.LongTensor', dtypes.float32)
        """
        if dtype is None:
            return f"torch.{_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}Tensor"
        return self.cast(dtype)

    def is_floating_point(self) -> builtins.bool:
        """Whether the dtype is a float type.

            >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
            (True, False)
        """
        return self.dtype.is_float

    def is_complex(self) -> builtins.bool:
        """False: tg has no complex dtypes.

            >>> Tensor([1.0]).is_complex()
            False
        """
        return False

    # ------------------------------------------------------------ misc
    def clone(self) -> Tensor:
        """A copy of the values in a buffer of its own (gradients flow through it): later writes to self
        do not change it.

            >>> x = Tensor([1, 2])
            >>> y = x.clone()
            >>> x.assign(Tensor([5, 6])).tolist(), y.tolist()
            ([5, 6], [1, 2])
        """
        return apply(F.Contiguous, self, copy=True)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


# ---------------------------------------------------------------- module helpers

def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(v)
    if len(t) != 2:
        raise ValueError(f"[core] expected an int or a pair, got {v!r}")
    return (int(t[0]), int(t[1]))


def _shape(shape: tuple) -> tuple[int, ...]:
    s = _argfix(*shape)
    if any(not isinstance(x, (int, np.integer)) or x < 0 for x in s):
        raise ValueError(f"[core] a shape must be non-negative ints, got {s}")
    return tuple(int(x) for x in s)


# tanh(x) = x * sum_k c_k x^(2k): 1, -1/3, 2/15, -17/315, ...
_TANH_SERIES = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075,
                -929569 / 638512875, 6404582 / 10854718875)


def _list_to_numpy(data: Any, dt: DType | None) -> np.ndarray:
    try:
        arr = np.array(data)
    except ValueError as e:
        raise ValueError(f"[core] Tensor(): the nested lists are ragged: {e}") from None
    if dt is not None:
        return arr.astype(dt.np_value)
    if arr.dtype == np.bool_:
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" or arr.size == 0:
        return arr.astype(np.float32)
    raise TypeError(f"[core] Tensor(): cannot make a tensor from elements of type {arr.dtype}")


def _from_numpy(arr: np.ndarray, dt: DType | None, device: str) -> LazyBuffer:
    from tg.core.dtype import f32_to_bf16
    dt = dt or dtypes.from_any(arr.dtype)
    if dt == dtypes.bfloat16:
        bits = f32_to_bf16(arr.astype(np.float32))
    else:
        try:
            bits = arr.astype(dt.np)
        except (ValueError, OverflowError) as e:
            raise TypeError(f"[core] cannot convert {arr.dtype} values to {dt.name}: {e}") from None
    from tg.core.realize import from_numpy
    return from_numpy(bits, dt, device)


_MOVEMENTS = (F.Reshape, F.Permute, F.Expand, F.Shrink)


def _aliases_a_held_tensor(t: Tensor) -> builtins.bool:
    """Whether t is a view, in torch's sense, of memory that another tensor of the program holds: its
    movements, followed back through autograd, reach a tensor referenced from elsewhere, or one with no
    graph. An op's internal result that tg builds as a view (conv's output before its permute, a gather's
    sum) is held by the graph alone, so a write into it aliases nothing the program can see."""
    if getattr(t, "_alias", None) is None:
        return False
    cur = t
    while isinstance(cur._ctx, _MOVEMENTS):
        parent = cur._ctx.parents[0]
        # the references a held-by-the-graph-alone parent has here: ctx.parents, `parent`, the argument,
        # and the alias of each live view of it
        if sys.getrefcount(parent) > 3 + _views_of(parent):
            return True
        cur = parent
    return cur._ctx is None


def _views_of(root: Tensor) -> builtins.int:
    """How many live tensors name root as the tensor whose memory they view (each holds it once)."""
    views: Iterable[Tensor] = getattr(root, "_views", None) or ()
    return builtins.sum(1 for v in views if getattr(v, "_alias", (None,))[0] is root)


# how each movement moves a window over memory (the tracker of a view, relative to its root's memory)
def _link(view: Tensor, parent: Tensor, step: tuple) -> None:
    """Record view (made from parent by step, over parent's memory) as a view of the tensor that owns that
    memory, so that a write through either is seen by the other, in program order, as in torch."""
    alias = getattr(parent, "_alias", None)
    root, chain = (alias[0], alias[1] + (step,)) if alias is not None else (parent, (step,))
    view._alias = (root, chain)
    views = getattr(root, "_views", None)
    if views is None:
        views = root._views = Readers()
    views.add(view)  # type: ignore[arg-type]  # Readers holds any object weakly


def _link_view(out: Any, parent: Tensor, step: tuple, reshape: builtins.bool) -> None:
    if not isinstance(out, Tensor) or out is parent or out.lazydata.base is not parent.lazydata.base:
        return      # new memory (an advanced index, a contiguous copy), or the tensor itself
    alias = getattr(parent, "_alias", None)
    if reshape and alias is not None and not _one_window(out, alias[0]) and (
            _one_window(parent, alias[0]) or _strided_window(alias[0], alias[1] + (step,)) is None):
        # no strides over its tensor's memory express it (a reshape of one window that the tracker cannot
        # merge, or one found element by element): torch's reshape copies
        return
    _link(out, parent, step)


def _one_window(out: Tensor, root: Tensor) -> builtins.bool:
    """Whether out's tracker is one strided window over a root whose tracker is its memory in row-major
    order (the common case, decided without replaying the view's calls)."""
    if not root.lazydata.st.contiguous or out.lazydata.base is not root.lazydata.base:
        return False
    st = out.lazydata.st
    view = st.views[0]
    return len(st.views) == 1 and view.mask is None and builtins.all(s >= 0 for s in view.strides)


def _replay(t: Tensor, chain: tuple, graph: builtins.bool) -> Tensor:
    """The view that chain makes of t, with a graph back to t's when `graph`, as no new view of t. A step
    is (method, args, kwargs, index): a view method's call, and which of its results (None: the one)."""
    prev, Tensor.no_grad = Tensor.no_grad, not graph
    try:
        for fn, args, kwargs, k in chain:
            t = fn(t, *args, **kwargs) if k is None else fn(t, *args, **kwargs)[k]
    finally:
        Tensor.no_grad = prev
    return t


def _window(root: Tensor, chain: tuple) -> ShapeTracker | None:
    """The tracker of the window that the view chain makes of root's memory (None if it computes)."""
    memory = _wrap(LazyBuffer.empty(root.shape, root.dtype, root.device), False)
    lb = _replay(memory, chain, graph=False).lazydata
    return lb.st if lb.base is memory.lazydata else None


def _strided_window(root: Tensor, chain: tuple) -> View | None:
    """The one strided window (without masks or negative strides) that the view chain makes of root's
    memory, or None where it is none."""
    st = _window(root, chain)
    if st is None:
        return None
    view = st.views[0] if len(st.views) == 1 else _affine_view(st)
    if view is None or view.mask is not None or builtins.any(s < 0 for s in view.strides):
        return None
    return view


def _written_view(root: Tensor, chain: tuple) -> View:
    """The one strided window into root's memory that the view chain makes of it stands for, written in
    place; raises for an expanded one (torch refuses too) and for one that is no strided window."""
    view = _strided_window(root, chain)
    if view is None:
        st = _window(root, chain)
        raise ValueError(f"[core] in-place write through a view: expected one strided window into the "
                         f"memory of the tensor it views, got one that is none ({st}); fix: write into a "
                         f"copy (.clone()) or build a new tensor (where, cat)")
    if builtins.any(s == 0 and n > 1 for s, n in zip(view.strides, view.shape)):
        raise ValueError(f"[core] in-place write into an expanded view (shape {view.shape}, strides "
                         f"{view.strides}): several of its elements are one element of memory (torch refuses "
                         f"too); write into the tensor it expands, or into a copy (.contiguous())")
    return view


def _placed(root: Tensor, view: View, value: Tensor) -> Tensor:
    """root's values with value written into the strided window `view` of its memory (row-major, no
    masks, no repeated element): value's elements moved to their places by movements (the inverse of
    the window: dims by stride, innermost first, each spaced out by padding) and picked by a mask that
    the same movements make, so the write is one lazy elementwise kernel over root."""
    dims = sorted((i for i, n in enumerate(view.shape) if n > 1), key=lambda i: -view.strides[i])
    rest = [i for i in range(len(view.shape)) if i not in dims]
    placed = value.reshape(view.shape).permute(dims + rest).reshape(tuple(view.shape[i] for i in dims) + (1,))
    mask = Tensor.ones(*placed.shape, dtype=dtypes.bool, device=root.device)
    length = 1       # elements of memory the dims placed so far span: placed is (..., n, length)
    for i in reversed(dims):
        n, stride = view.shape[i], view.strides[i]
        if stride < length:     # dims that interleave: no window torch's views of memory make
            raise ValueError(f"[core] in-place write through a view: its window {view} interleaves its "
                             f"dims; fix: write into a copy (.clone()) or build a new tensor (where, cat)")
        placed, mask = _spaced(placed, stride, length), _spaced(mask, stride, length)
        length = (n - 1) * stride + length
    flat = ((view.offset, prod(root.shape) - view.offset - length),)
    placed, mask = placed.reshape(length).pad(flat), mask.reshape(length).pad(flat)
    return mask.reshape(root.shape).where(placed.reshape(root.shape), root)


def _spaced(t: Tensor, stride: int, length: int) -> Tensor:
    """t (..., n, length) with each of its n rows padded to `stride` and laid end to end, the padding
    after the last one cut: (..., (n - 1) * stride + length)."""
    *lead, n, _ = t.shape
    t = t.pad(((0, 0),) * (len(lead) + 1) + ((0, stride - length),)).reshape(*lead, n * stride)
    return t._shrink(tuple((0, s) for s in lead) + ((0, (n - 1) * stride + length),))


# elements of a stacked view checked one by one for being one strided window (_affine_view)
AFFINE_CHECK_MAX = 1 << 22


def _affine_view(st: ShapeTracker) -> View | None:
    """The single view equal to a stack of views (which the symbolic merge could not prove, as for the
    diagonal of a non-square matrix), found by evaluating the index of every element; None if none is."""
    shape = st.shape
    n = prod(shape)
    if n == 0 or n > AFFINE_CHECK_MAX:
        return None
    pos = np.indices(shape).reshape(len(shape), n)
    idx, valid = np.zeros(n, np.int64), np.ones(n, np.bool_)
    for i, view in enumerate(reversed(st.views)):
        if i:      # an inner view: unravel the outer index over its shape
            size = prod(view.shape)
            valid &= (idx >= 0) & (idx < size)
            inner = np.unravel_index(np.clip(idx, 0, builtins.max(size - 1, 0)), view.shape)
            pos = np.array(inner, np.int64).reshape(len(view.shape), n)
        idx = view.offset + (pos * np.array(view.strides, np.int64).reshape(-1, 1)).sum(0)
        for p, (lo, hi) in zip(pos, view.mask or ()):
            valid &= (p >= lo) & (p < hi)
    # each dim's stride: the index's step from the first element to the next along that dim
    strides = [builtins.int(idx[step] - idx[0]) if size > 1 else 0
               for size, step in zip(shape, contiguous_strides(shape))]
    full = np.indices(shape).reshape(len(shape), n)
    if not valid.all() or not np.array_equal(idx, idx[0] + (full * np.array(strides).reshape(-1, 1)).sum(0)):
        return None
    return View.create(shape, strides, builtins.int(idx[0]))


def _grad_dtype_checked(requires_grad: bool | None, dtype: DType) -> bool | None:
    if requires_grad and not dtype.is_float:
        raise RuntimeError(f"[autograd] only tensors of a floating point dtype can require grad, got "
                           f"{dtype.name}; cast first (x.float().requires_grad_())")
    return requires_grad


def _cmp(x: Tensor, y: Any, kind: str) -> Tensor:
    a, b = x._broadcasted(y)
    lt = F.FUNCTIONS[BinaryOps.CMPLT]
    ne = F.FUNCTIONS[BinaryOps.CMPNE]
    if kind == "lt":
        return apply(lt, a, b)
    if kind == "gt":
        return apply(lt, b, a)
    if kind == "ne":
        return apply(ne, a, b)
    if kind == "eq":
        return apply(ne, a, b).logical_not()
    if not a.dtype.is_float:
        return apply(lt, b, a).logical_not() if kind == "le" else apply(lt, a, b).logical_not()
    # with NaN neither a < b nor a >= b holds, so >= is "> or ==", not "not <"
    eq = apply(ne, a, b).logical_not()
    return (apply(lt, a, b) if kind == "le" else apply(lt, b, a)) | eq


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
               "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
               "bool": "Bool"}


def _check_ndim(name: str, *operands: tuple[Tensor, int]) -> None:
    for t, n in operands:
        if t.ndim != n:
            shapes = ", ".join(str(o.shape) for o, _ in operands)
            raise ValueError(f"[core] {name}: expected operands of {', '.join(str(k) for _, k in operands)} "
                             f"dims, got shapes {shapes}")


def _scaled_sum(base: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """beta * base + alpha * product, with torch's rule that beta=0 ignores base (even its NaNs)."""
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product
    return (base if beta == 1 else base * beta) + product


def _select_along(values: Tensor, indices: Tensor, d: int, k: int, keepdim: bool) -> ValuesIndices:
    """The k-th entry along dim d of a sorted (values, indices) pair."""
    if values.ndim == 0:
        return ValuesIndices(values, indices)
    v, i = values.narrow(d, k, 1), indices.narrow(d, k, 1)
    return ValuesIndices(v, i) if keepdim else ValuesIndices(v.squeeze(d), i.squeeze(d))


def _category(dt: DType) -> int:
    return 2 if dt.is_float else 0 if dt == dtypes.bool else 1


def _promote_tensors(x_dims: DType | None, y_dims: DType | None, x: DType, y: DType) -> DType:
    """torch's promotion of two tensors: a 0-d tensor next to one with dims counts only when its category
    (bool < int < float) is higher, so float32[n] + float64[] stays float32 and int32[n] + int64[] int32.
    x_dims / y_dims are the dtypes of the operands that have dims (None for a 0-d one)."""
    if (x_dims is None) != (y_dims is None):
        dims, zero = (x, y) if x_dims is not None else (y, x)
        if _category(zero) <= _category(dims):
            return dims
    return promote_types(x, y)


def index_range(n: int, device: str) -> Tensor:
    """0..n-1 as int32, for one-hot selections: 32-bit compares keep the kernel on SIMD lanes."""
    return Tensor(indexing.arange(n, device), device=device)


