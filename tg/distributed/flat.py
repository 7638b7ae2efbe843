"""Host views of tensors and flat buckets of parameters: what DDP and ZeRO hand to collectives.

Collectives work on host numpy arrays. `HostView` is a realized tensor's memory seen from the host:
on CPU and NUMPY a zero-copy view, on other devices a reused (pinned) staging block, copied from the
device each read and back each write.
A `Bucket` is a run of parameters packed end to end in one flat host array (padded to a multiple of
the world size, so it splits evenly across ranks): one collective moves the whole bucket.

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
        self.numel = t.numel()
        self.bf16 = t.dtype == dtypes.bfloat16
        self.np_dtype = host_dtype(t.dtype)
        self.zero_copy = t.device in HOST_DEVICES and not self.bf16
        self._array = self.buf._buf.view(self.np_dtype) if self.zero_copy else None
        self._stage: np.ndarray | None = None

    def _staged(self) -> np.ndarray:
        if self._stage is None:
            self._stage = self.buf.allocator.staging(self.buf.nbytes)
        return self._stage

    def read(self) -> np.ndarray:
        """The values: the live memory itself when zero_copy, else the staging block, freshly copied
        from the device (valid until the next read or write of this view)."""
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
        self.buf.read_into(self.staged()[lo:hi], lo * self.np_dtype.itemsize)

    def write_part(self, lo: int, hi: int) -> None:
        """Copy elements lo:hi of the staging block back to the device."""
        self.buf.copyin(self.staged()[lo:hi], lo * self.np_dtype.itemsize)

    def write(self, values: np.ndarray) -> None:
        """Store values (any shape with numel elements) into the tensor's memory."""
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


class Bucket:
    """Parameters packed end to end: `offsets[i]` is where params[i] starts in the flat space of
    `numel` elements, padded with zeros to `padded` (a multiple of the world size)."""

    def __init__(self, params: list[Tensor], multiple: int):
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.offsets = [int(x) for x in np.cumsum([0, *self.sizes[:-1]])]
        self.numel = sum(self.sizes)
        self.padded = -(-self.numel // multiple) * multiple
        self.np_dtype = host_dtype(params[0].dtype)
        self.host = np.zeros(self.padded, self.np_dtype)

    def realize_grads(self) -> list[HostView | None]:
        """Compute every gradient of the bucket (one schedule) and return host views of them."""
        grads = [p.grad for p in self.params]
        live = [g for g in grads if g is not None]
        if live:
            live[0].realize(*live[1:])
        return [HostView(g) if g is not None else None for g in grads]

    def pack(self, views: list[HostView | None]) -> np.ndarray:
        """Copy the gradients into the flat host array (zeros for a parameter without one)."""
        for view, off, n in zip(views, self.offsets, self.sizes):
            if view is None:
                self.host[off:off + n] = 0
            else:
                self.host[off:off + n] = view.read()
        return self.host

    def unpack(self, views: list[HostView | None], flat: np.ndarray) -> None:
        """Write the flat array's pieces back into the tensors behind views."""
        for view, off, n in zip(views, self.offsets, self.sizes):
            if view is not None:
                view.write(flat[off:off + n])


def make_buckets(params: list[Tensor], bucket_bytes: int, multiple: int = 1) -> list[Bucket]:
    """Group params into buckets of about bucket_bytes, last parameter first (backward produces the
    last layers' gradients first), one dtype per bucket."""
    buckets: list[Bucket] = []
    run: list[Tensor] = []
    size = 0
    for p in reversed(params):
        if run and (p.dtype != run[0].dtype or size + p.nbytes > bucket_bytes):
            buckets.append(Bucket(run, multiple))
            run, size = [], 0
        run.append(p)
        size += p.nbytes
    if run:
        buckets.append(Bucket(run, multiple))
    return buckets
