"""Tensor: the user API, PyTorch names and broadcasting, every method composed from the
primitive ops through the Functions in function.py (so gradients come by composition).

    >>> from tg import Tensor
    >>> x = Tensor([[1.0, -2.0], [3.0, 4.0]])
    >>> (x.relu() * 2 + 1).sum(axis=1).tolist()
    [4.0, 16.0]
"""
from __future__ import annotations

import builtins
import copy
import math
import sys
import weakref
from typing import Any, Callable, Iterable

import numpy as np

from tg.core import autograd, mixin, random, trace
from tg.core import function as F
from tg.core.device import Device, split_device
from tg.core.dtype import (
    DType,
    dtype_of_scalar,
    dtypes,
    promote_types,
    scalar_result_type,
)
from tg.core.indexing import TgIndexError
from tg.core.lazy import LazyBuffer, Readers
from tg.core.mixin.base import (
    NoGrad,
    _argfix,
    _replay,
    _strided_window,
    _view_op,
    _window,
    _wrap,
    apply,
    index_range,
)
from tg.core.mixin.elementwise import ElementwiseMixin
from tg.core.mixin.indexing import IndexingMixin
from tg.core.mixin.math import MathMixin
from tg.core.mixin.movement import MovementMixin
from tg.core.mixin.nn import NNMixin
from tg.core.mixin.reduce import MinMax, ReduceMixin, ValuesIndices
from tg.core.ops import BufferOps, UnaryOps
from tg.core.shape import View, broadcast_shape, prod

__all__ = ["Tensor", "NoGrad", "apply", "index_range", "MinMax", "ValuesIndices"]


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


def _shape(shape: tuple) -> tuple[int, ...]:
    s = _argfix(*shape)
    if any(not isinstance(x, (int, np.integer)) or x < 0 for x in s):
        raise ValueError(f"[core] a shape must be non-negative ints, got {s}")
    return tuple(int(x) for x in s)


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


def _grad_dtype_checked(requires_grad: bool | None, dtype: DType) -> bool | None:
    if requires_grad and not dtype.is_float:
        raise RuntimeError(f"[autograd] only tensors of a floating point dtype can require grad, got "
                           f"{dtype.name}; cast first (x.float().requires_grad_())")
    return requires_grad


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


class Tensor(ElementwiseMixin, MathMixin, MovementMixin, IndexingMixin, ReduceMixin, NNMixin):
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
    lazydata: LazyBuffer
    requires_grad: bool | None
    grad: Tensor | None
    _ctx: F.Function | None
    _prior: list[Tensor] | None
    # the old global mode (tinygrad's): None until code sets it; a Module whose mode train()/eval() never
    # set follows it once set, and is in training mode, as torch's, while it is None
    training: bool | None = None
    no_grad: bool = False
    _last_root: weakref.ref[Tensor] | None = None
    _post_backward_hooks: list[Callable[[Tensor], None]] = []

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None):
        device = Device.canonicalize(device)
        dt = dtypes.from_any(dtype) if dtype is not None else None
        self.grad = None
        self._ctx = None
        self._prior = None
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
        self.lazydata = lb
        self.requires_grad = _grad_dtype_checked(requires_grad, lb.dtype)
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

    def cpu(self) -> Tensor:
        """This tensor on the CPU (torch's cpu()): self when it is there already, else a copy.

            >>> x = Tensor([1, 2])
            >>> x.cpu() is x if x.device == "CPU" else x.cpu().device == "CPU"
            True
        """
        return self.to("CPU")

    def cuda(self, device: int | str | None = None, **ignored: Any) -> Tensor:
        """This tensor on a CUDA GPU (torch's cuda(device=None, non_blocking=False)): the default CUDA
        device when the process's default is one (tglaunch gives each rank its own), else CUDA:0; an int
        or "cuda:N" names one. Raises, saying what is missing, where no CUDA device is usable: pick the
        device as torch scripts do, `device = "cuda" if tg.cuda.is_available() else "cpu"`."""
        if device is None:
            default = Device.DEFAULT
            name = default if split_device(default)[0] == "CUDA" else "CUDA"
        else:
            name = f"CUDA:{device}" if isinstance(device, int) else str(device)
        if split_device(name)[0] != "CUDA":
            raise ValueError(f"[core] Tensor.cuda: expected a CUDA device (an index or 'cuda:N'), got "
                             f"{device!r}; use .to({device!r}) for other devices")
        return self.to(Device[name].name)       # opening the device raises here, saying why, without one

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor is on a CUDA GPU (torch's is_cuda).

            >>> Tensor([1.0]).is_cuda if Tensor([1.0]).device == "CPU" else False
            False
        """
        return split_device(self.device)[0] == "CUDA"

    @property
    def is_cpu(self) -> bool:
        """Whether the tensor is in the CPU's memory (CPU or the NUMPY reference device; torch's is_cpu)."""
        return split_device(self.device)[0] in ("CPU", "NUMPY")

    @property
    def is_xpu(self) -> bool:
        """torch's is_xpu (Intel GPUs through its XPU backend): always False, tg reaches them through
        OpenCL as device CL."""
        return False

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

    @property
    @_view_op
    def data(self) -> Tensor:
        """The same memory outside autograd, as torch's `.data`: writes through it (`p.data.add_(g,
        alpha=-lr)`, `p.data.fill_(0)`) change this tensor and are not recorded. Assigning `p.data = t`
        makes p hold t's values (t's memory, as torch; any shape, dtype or device), keeping p's
        requires_grad.

            >>> p = Tensor([1.0, 2.0], requires_grad=True)
            >>> p.data.tolist(), p.data.requires_grad, p.requires_grad
            ([1.0, 2.0], False, True)
        """
        return self._detached()

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"[core] Tensor.data: expected a Tensor to take the values of, got "
                            f"{type(value).__name__}; to fill in place use .data.copy_(value) or .fill_(v)")
        self.lazydata = value.lazydata
        # other memory now: the views made of the old one keep it (writes through them go there), and
        # this tensor is no longer a view of another's
        self._views = None
        self._alias = None

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
        """The random number generator's state: {"seed": int, "counters": {device: count}, "host": int},
        where a device's count is how many random 32-bit words it has drawn since the seed was set, and
        "host" how many seeds the samplers and loaders without a generator took (random.host_seed).

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
        if not random.is_state(state):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"[core] set_rng_state: expected the dict get_rng_state() returns, with keys "
                             f"['counters', 'seed'] and maybe 'host', got {got}")
        random.set_state(state["seed"], {Device.canonicalize(d): v.lazydata if isinstance(v, Tensor) else v
                                         for d, v in state["counters"].items()}, state.get("host", 0))

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

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
        """Fill with N(mean, std^2) samples in place (torch's normal_; a leaf that requires grad only
        under no_grad(), as torch); returns self. `generator`: a tg.Generator to draw from instead of the
        global stream.

            >>> w = Tensor.zeros(10000).normal_(2.0, 0.5)
            >>> abs(w.mean().item() - 2.0) < 0.05, abs(w.std().item() - 0.5) < 0.05
            (True, True)
        """
        if std < 0:
            raise ValueError(f"[core] normal_: expected a non-negative std, got {std}")
        return self._fill_random("normal_", lambda: Tensor.normal(*self.shape, mean=mean, std=std,
                                                                  **self._like_kw({})), generator)

    def uniform_(self, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
        """Fill with U(a, b) samples in place (torch's uniform_(from, to)); returns self.

            >>> w = Tensor.zeros(1000).uniform_(-2.0, 2.0)
            >>> bool(((w >= -2) & (w < 2)).all())
            True
        """
        if not a <= b:
            raise ValueError(f"[core] uniform_: expected from <= to, got {a} and {b}")
        return self._fill_random("uniform_", lambda: Tensor.uniform(*self.shape, low=a, high=b,
                                                                    **self._like_kw({})), generator)

    def _fill_random(self, name: str, sample: Callable[[], Tensor], generator: Any) -> Tensor:
        if not self.dtype.is_float:
            raise TypeError(f"[core] {name}: expected a floating-point tensor, got {self.dtype.name}")
        if generator is not None and not callable(getattr(generator, "draw", None)):
            raise TypeError(f"[core] {name}: generator= expects a tg.Generator, got "
                            f"{type(generator).__name__}")
        value = (sample() if generator is None else generator.draw(sample)).cast(self.dtype)
        return self._write_in_place(name, lambda old: value)

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
        t0 = trace.now() if trace.ON else 0
        for leaf, g in autograd.backprop(self, self._root_gradient(gradient, "backward"), None, retain_graph):
            new = Tensor(g, device=leaf.device)
            leaf.grad = new if leaf.grad is None else (leaf.grad + new)
        if t0:
            trace.span("backward (graph)", "autograd", t0)
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
            xl, yl = x.lazydata, y.lazydata
            if xl.dtype is yl.dtype and (out_dtype is None or out_dtype is xl.dtype) \
                    and xl.shape == yl.shape and xl.device == yl.device:   # nothing to promote or broadcast
                return (y, x) if reverse else (x, y)
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
    ndimension = dim
    nelement = numel
    def clone(self) -> Tensor:
        """A copy of the values in a buffer of its own (gradients flow through it): later writes to self
        do not change it.

            >>> x = Tensor([1, 2])
            >>> y = x.clone()
            >>> x.assign(Tensor([5, 6])).tolist(), y.tolist()
            ([5, 6], [1, 2])
        """
        return apply(F.Contiguous, self, copy=True)

    def __deepcopy__(self, memo: dict) -> Tensor:
        """copy.deepcopy (a best-model snapshot, a Module copied whole): a tensor with the same values in
        memory of its own, on the same device, the same requires_grad, and a copy of its grad. As torch,
        only a tensor the program made itself (no graph behind it: a leaf, or detached) can be copied.

            >>> import copy
            >>> x = Tensor([1.0, 2.0], requires_grad=True)
            >>> y = copy.deepcopy(x)
            >>> x.data.add_(1.0) is not None, y.tolist(), y.requires_grad
            (True, [1.0, 2.0], True)
        """
        if self._ctx is not None:
            raise RuntimeError("[core] deepcopy: only a tensor with no graph behind it (a leaf, or "
                               ".detach()ed) can be deep-copied, as in torch; copy x.detach() instead")
        with NoGrad():
            out = self.clone().realize()
        if type(self) is not Tensor:           # a subclass (nn.Parameter) stays of its class
            copied = object.__new__(type(self))
            copied.lazydata, copied.grad, copied._ctx, copied._prior = out.lazydata, None, None, None
            out = copied
        out.requires_grad = self.requires_grad
        if self.grad is not None:
            out.grad = copy.deepcopy(self.grad, memo)
        memo[id(self)] = out
        return out

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


mixin.bind(Tensor)
