"""Host views of tensors and flat buckets of parameters: what DDP and ZeRO hand to collectives.

Collectives work on host numpy arrays. `HostView` is a realized tensor's memory seen from the host:
on CPU and NUMPY a zero-copy view, on other devices a reused (pinned) staging block, copied from the
device each read and back each write.
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

if TYPE_CHECKING:
    from tg.core.device import Buffer
    from tg.core.tensor import Tensor

HOST_DEVICES = ("CPU", "NUMPY")


def host_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype a tensor's values are seen in on the host (numpy has no bfloat16: float32)."""
    from tg.core.dtype import dtypes
    return np.dtype(np.float32) if dtype == dtypes.bfloat16 else np.dtype(dtype.np)


def own_memory(t: Tensor) -> Buffer:
    """Make t a realized tensor with memory of its own (not a view, not a constant), and compute
    first whatever still reads its old contents (so writing in place cannot change their result)."""
    from tg.core.ops import BufferOps
    from tg.core.realize import realize_readers
    lb = t.lazydata
    if not (lb.is_base and lb.op is not BufferOps.CONST) or lb.realized is None:
        t.lazydata = lb.contiguous()
        t.realize()
    buf = t.lazydata.base.realized
    assert buf is not None
    realize_readers([t.lazydata])
    return buf


class HostView:
    """A realized tensor's memory as a flat host array, read and written without the lazy graph, so
    the same view serves every TinyJit replay. bfloat16 is seen as float32 (numpy has no bfloat16).
    On CPU and NUMPY the array is the memory itself; on other devices it is a staging block of the
    device's allocator (pinned where the driver can), taken once per view and reused by every read
    and write, and back in the allocator's pool once nothing uses it."""

    def __init__(self, t: Tensor):
        from tg.core.dtype import dtypes
        self.buf = own_memory(t)
        self._memory = t.lazydata.base      # what lazy work on this memory is registered with
        self.numel = t.numel()
        self.bf16 = t.dtype == dtypes.bfloat16
        self.np_dtype = host_dtype(t.dtype)
        self.zero_copy = t.device in HOST_DEVICES and not self.bf16
        host = self.buf.host_array() if self.zero_copy else None
        self._array = host.view(self.np_dtype) if host is not None else None
        self._stage: np.ndarray | None = None

    def _staged(self) -> np.ndarray:
        if self._stage is None:
            self._stage = self.buf.allocator.staging(self.buf.nbytes)
        return self._stage

    def settle(self) -> None:
        """Complete the lazy work still queued on this memory (an assign into it, a computation that
        reads it) before the memory is read or written outside the lazy graph: a queued assign that ran
        later would put back its own values over a host write (a clip or a GradScaler that wrote ZeRO's
        gradients of a skipped step overwrote the next step's), and a host read would miss it."""
        from tg.core.realize import realize_readers
        realize_readers([self._memory])

    def read(self) -> np.ndarray:
        """The values: the live memory itself when zero_copy, else the staging block, freshly copied
        from the device (valid until the next read or write of this view)."""
        self.settle()
        if self._array is not None:
            return self._array
        from tg.core.dtype import bf16_to_f32
        bits = self.buf.read_into(self._staged()).view(self.buf.dtype.np)
        return bf16_to_f32(bits) if self.bf16 else bits.view(self.np_dtype)

    @property
    def pipelined(self) -> bool:
        """Whether collectives may move this memory in parts (device memory seen as itself: not
        zero-copy host memory, not bfloat16 seen as float32)."""
        return not self.zero_copy and not self.bf16

    def staged(self) -> np.ndarray:
        """The staging block as a flat array of the values' dtype (for `read_part` / `write_part`)."""
        return self._staged().view(self.np_dtype)

    def read_part(self, lo: int, hi: int) -> None:
        """Copy elements lo:hi from the device into the staging block."""
        self.settle()
        self.buf.read_into(self.staged()[lo:hi], lo * self.np_dtype.itemsize)

    def write_part(self, lo: int, hi: int) -> None:
        """Copy elements lo:hi of the staging block back to the device."""
        self.settle()
        self.buf.copyin(self.staged()[lo:hi], lo * self.np_dtype.itemsize)

    def write(self, values: np.ndarray) -> None:
        """Store values (any shape with numel elements) into the tensor's memory."""
        self.settle()
        if self._array is not None:
            if values is not self._array:
                self._array[...] = values.reshape(-1)
            return
        from tg.core.dtype import f32_to_bf16
        stage = self._staged()
        if self.bf16:
            stage.view(np.uint16)[...] = f32_to_bf16(
                np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
            )
        elif not np.may_share_memory(values, stage):      # a read's result written back needs no copy
            stage.view(self.np_dtype)[...] = values.reshape(-1)
        self.buf.copyin(stage)


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


def view_tensor(buf: Buffer, first: int, shape: tuple[int, ...]) -> Tensor:
    """Elements first.. of buf as a realized tensor of `shape` sharing buf's memory (no copy): writes
    through either are seen by the other. `first` must start at the allocator's view alignment."""
    from tg.core.lazy import LazyBuffer
    from tg.core.tensor import Tensor
    numel = int(np.prod(shape)) if shape else 1
    view = LazyBuffer.realized_as(buf.view(first * buf.dtype.itemsize, numel), shape)
    return Tensor(view, device=buf.device)


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
