"""A realized tensor's memory seen from the host, outside the lazy graph: what collectives read and
write (they work on host numpy arrays). `HostView` is a zero-copy view on CPU and NUMPY, and on other
devices a reused (pinned) staging block, copied from the device each read and back each write;
`own_memory` gives a tensor memory of its own first; `view_tensor` makes a tensor over part of a buffer.

    >>> import numpy as np
    >>> from tg import Tensor
    >>> t = Tensor([1.0, 2.0, 3.0]).realize()
    >>> view = HostView(t)
    >>> view.write(view.read() * 10)
    >>> t.tolist()
    [10.0, 20.0, 30.0]
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


def view_tensor(buf: Buffer, first: int, shape: tuple[int, ...]) -> Tensor:
    """Elements first.. of buf as a realized tensor of `shape` sharing buf's memory (no copy): writes
    through either are seen by the other. `first` must start at the allocator's view alignment."""
    from tg.core.lazy import LazyBuffer
    from tg.core.tensor import Tensor
    numel = int(np.prod(shape)) if shape else 1
    view = LazyBuffer.realized_as(buf.view(first * buf.dtype.itemsize, numel), shape)
    return Tensor(view, device=buf.device)
