"""Flat buckets of parameters: what DDP and ZeRO hand to collectives (through tg.core.host's HostView,
a realized tensor's memory seen from the host, as collectives work on host numpy arrays).

A `Bucket` is a run of parameters laid out end to end in one flat space (padded to a multiple of the
world size, so it splits evenly across ranks): one collective moves the whole bucket. The flat space
is device memory: DDP's gradients and ZeRO's parameters are views of their bucket's buffer
(`Buffer.view`), so packing them for a collective copies nothing.

    >>> from tg import Tensor
    >>> a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([[3.0]], requires_grad=True)
    >>> [[p.shape for p in bk.params] for bk in make_buckets([a, b], bucket_bytes=1 << 20, multiple=4)]
    [[(1, 1), (2,)]]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tg.core.host import host_dtype, own_memory, view_tensor

if TYPE_CHECKING:
    from tg.core.device import Buffer
    from tg.core.tensor import Tensor


def wire_format(reduce_dtype: Any, who: str) -> np.dtype | None:
    """The numpy dtype float32 gradients travel in under a mixed-precision reduce policy (DDP's and
    ZeroOptimizer's reduce_dtype): wire.BF16 for bfloat16 (half the bytes on every backend but MPI, which
    has no 16-bit float and reduces in float32), float16 (halved where the C engines reduce: shared
    memory and UCX), None for the gradients' own dtype. Each reduction combines in float32 and rounds."""
    from tg.core.dtype import dtypes
    from tg.distributed.transport import wire
    got = getattr(dtypes, reduce_dtype, reduce_dtype) if isinstance(reduce_dtype, str) else reduce_dtype
    if got is None or got == dtypes.float32:
        return None
    if got == dtypes.bfloat16:
        return wire.BF16
    if got == dtypes.float16:
        return np.dtype(np.float16)
    raise ValueError(f"[distributed] {who}: reduce_dtype must be tg.bfloat16, tg.float16 or tg.float32 "
                     f"(None: the gradients' own dtype), got {reduce_dtype!r}")


def to_wire(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """float32 values rounded into out (wire.BF16 words or float16); returns out."""
    from tg.distributed.transport import wire
    if wire.is_bf16(out.dtype):
        wire.bf16_narrow(values.reshape(-1), out)
    else:
        out[...] = values.reshape(-1)
    return out


def from_wire(arr: np.ndarray) -> np.ndarray:
    """Wire values (wire.BF16 words or float16) as float32."""
    from tg.distributed.transport import wire
    return wire.bf16_widen(arr) if wire.is_bf16(arr.dtype) else arr.astype(np.float32)


def check_params(params: list[Tensor], who: str) -> None:
    """Refuse what cannot be packed into flat buckets, naming the parameter: a view of another tensor's
    memory, two parameters sharing memory, parameters on more than one device."""
    from tg.core.lazy import LazyBuffer
    seen: dict[int, int] = {}      # memory (or the computation that will fill it) -> parameter
    for i, p in enumerate(params):
        lb: LazyBuffer = p.lazydata
        name = f"parameter {i} ({p.dtype.name}{list(p.shape)})"
        if p.device != params[0].device:
            raise ValueError(f"[distributed] {who}: {name} is on {p.device}, parameter 0 on "
                             f"{params[0].device}; expected every parameter on one device. Fix: move the "
                             f"model with .to(device) before wrapping it")
        if not lb.is_base and lb.base.realized is not None:
            raise ValueError(f"[distributed] {who}: {name} is a view of another tensor's memory (not "
                             f"contiguous); its gradients and updates would not reach that memory. Fix: "
                             f"make it a tensor of its own (.contiguous()) before building the model")
        if lb.is_const:
            continue          # an unrealized constant (Tensor.zeros) is shared by design: each gets its own
        key = id(lb.base.realized) if lb.base.realized is not None else id(lb.base)
        if key in seen:
            raise ValueError(f"[distributed] {who}: {name} shares its memory with parameter {seen[key]} "
                             f"(a tensor shared between two modules, e.g. tied weights); each is packed "
                             f"into the flat buckets once. Fix: keep one Tensor object for both uses "
                             f"(assign the same attribute), so it appears once in the parameter list")
        seen[key] = i


class Bucket:
    """Parameters packed end to end: `offsets[i]` is where params[i] starts in the flat space of
    `numel` elements, padded with zeros to `padded`. Each parameter starts at a multiple of `align`
    elements and `padded` is a multiple of `multiple * align` (the world size times it), so a
    parameter and each rank's equal part can be a view of one flat buffer (Buffer.view)."""

    def __init__(self, params: list[Tensor], multiple: int, align: int = 1):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.offsets: list[int] = []
        end = 0
        for n in self.sizes:
            self.offsets.append(end)
            end = -(-(end + n) // align) * align
        self.numel = self.offsets[-1] + self.sizes[-1]
        self.padded = -(-self.numel // (multiple * align)) * multiple * align
        self.dtype, self.device = params[0].dtype, params[0].device
        self.np_dtype = host_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.padded * self.dtype.itemsize

    def gaps(self) -> list[tuple[int, int]]:
        """The element ranges of the flat space no parameter covers (alignment and padding)."""
        ends = [off + n for off, n in zip(self.offsets, self.sizes)]
        starts = [*self.offsets[1:], self.padded]
        return [(lo, hi) for lo, hi in zip(ends, starts) if lo < hi]

    def views(self, buf: Buffer) -> list[Tensor]:
        """One tensor per parameter, shaped like it, over the parameter's range of flat memory buf."""
        return [view_tensor(buf, off, p.shape) for p, off in zip(self.params, self.offsets)]

    def alloc(self, raw: Buffer | None = None) -> Buffer:
        """Zeroed flat memory for the bucket (in the bucket's dtype): fresh, or the start of raw."""
        from tg.core.device import Buffer
        if raw is not None:
            return raw.view(0, self.padded, self.dtype)
        return Buffer(self.device, self.padded, self.dtype).copyin(np.zeros(self.nbytes, np.uint8))

    def adopt(self) -> Tensor:
        """Move the parameters into one flat buffer of this layout (zeros between them) and make each
        parameter a view of it (the model keeps its Tensor objects); returns the flat buffer as a 1-d
        tensor. Whatever still reads a parameter's old memory is computed first."""
        flat = self.alloc()
        for p, off, view in zip(self.params, self.offsets, self.views(flat)):
            flat.copyin(own_memory(p).numpy(), off * self.dtype.itemsize)
            p.lazydata = view.lazydata
        return view_tensor(flat, 0, (self.padded,))


def make_buckets(params: list[Tensor], bucket_bytes: int, multiple: int = 1) -> list[Bucket]:
    """Group params into buckets of about bucket_bytes, last parameter first (backward produces the
    last layers' gradients first), one dtype per bucket. As torch's DDP, a bucket closes once it holds
    bucket_bytes or more, so a small parameter (a bias) rides with the big one after it instead of
    making a tiny bucket (a collective of its own), and a parameter bigger than bucket_bytes still fits."""
    from tg.core.device import Device
    buckets: list[Bucket] = []
    run: list[Tensor] = []
    size = 0

    def close() -> None:
        align = max(Device[run[0].device].allocator.view_align // run[0].dtype.itemsize, 1)
        buckets.append(Bucket(run, multiple, align))
    for p in reversed(params):
        if run and p.dtype != run[0].dtype:
            close()
            run, size = [], 0
        run.append(p)
        size += p.nbytes
        if size >= bucket_bytes:     # full: the next parameter starts a new bucket
            close()
            run, size = [], 0
    if run:
        close()
    return buckets
