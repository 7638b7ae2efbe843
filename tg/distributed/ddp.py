"""DistributedDataParallel: every rank holds the whole model; gradients are averaged after backward.

    import tg.distributed as dist
    dist.init_process_group()
    model = dist.DistributedDataParallel(GPT(), bucket_mb=25)   # parameters broadcast from rank 0
    loss = model(x).loss(y); loss.backward()                    # .grad is now the mean over ranks
    with model.no_sync():                                       # accumulate locally, no communication
        model(x2).loss(y2).backward()

After each `backward()` that reached the model's parameters (outside `no_sync()`), the gradients
are computed straight into flat buckets of about `bucket_mb` MiB (last layers first), and each
bucket is all-reduced (mean) in place on the group's worker thread while the next bucket's gradients
are computed. Every `.grad` is then a view of its bucket's memory (torch's gradient_as_bucket_view),
so DDP keeps no second copy of the gradients, and an optimizer (and a TinyJit replay of the whole
step) reads them as usual. A parameter with no gradient on this rank contributes zeros and is given
the mean of the others; one no rank used keeps `.grad` None (as torch), so the optimizer leaves
it. With one rank nothing is synchronised and the gradients stay as backward
made them.

    >>> from tg import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> ddp = DistributedDataParallel({"w": w})        # no process group: a one-rank job
    >>> _ = (w * w).sum().backward(); w.grad.tolist()
    [2.0, 4.0]
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

from tg.core.capture import host_step
from tg.core.dtype import dtypes
from tg.core.host import HostView, view_tensor
from tg.core.tensor import Tensor
from tg.distributed.flat import (
    check_params,
    from_wire,
    make_buckets,
    to_wire,
    wire_format,
)
from tg.nn.state import get_parameters, get_state_dict


def _world(group: Any) -> tuple[int, int]:
    import tg.distributed as dist
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def broadcast_state(obj: Any, src: int = 0, group: Any = None) -> None:
    """Make every tensor reachable from obj (parameters and buffers) equal to rank src's."""
    import tg.distributed as dist
    if _world(group)[1] == 1:
        return
    for t in get_state_dict(obj).values():
        dist.broadcast(t, src, group)


def watch_backward(owner: Any, method: str) -> Any:
    """Call owner.<method>(root) after every backward(), for as long as owner lives."""
    ref = weakref.ref(owner)

    def hook(root: Tensor) -> None:
        target = ref()
        if target is not None:
            getattr(target, method)(root)
    remove = Tensor.register_post_backward_hook(hook)
    weakref.finalize(owner, remove)
    return remove


# id(parameter) -> the DistributedDataParallel averaging its gradients (it holds the parameter, so the
# id stays valid while the entry lives); a ZeroOptimizer asks it whether a gradient is averaged already
_OWNERS: weakref.WeakValueDictionary[int, DistributedDataParallel] = weakref.WeakValueDictionary()


def ddp_owner(p: Tensor) -> DistributedDataParallel | None:
    """The live DistributedDataParallel that averages p's gradient, if any."""
    return _OWNERS.get(id(p))


def used_anywhere(params: list[Tensor], group: Any, world_size: int) -> np.ndarray:
    """Which of params have a gradient on some rank of the group: one bit each, OR-ed over the ranks
    (one small all_reduce). torch leaves the .grad of a parameter no rank used None, so no optimizer
    steps it (no weight decay, no momentum); one used on some rank only gets the mean, zeros elsewhere."""
    bits = np.packbits(np.array([p.grad is not None for p in params], bool))
    if world_size > 1:
        import tg.distributed as dist
        host_step(partial(dist.all_reduce, bits, op=dist.ReduceOp.BOR, group=group))
    return np.unpackbits(bits, count=len(params)).astype(bool)


def combine_partial(partial: Tensor, op: str, group: Any, world_size: int) -> Tensor:
    """A 0-d float32 partial (of a norm: "sum" or "max") combined over the group's ranks, the same bits
    on every rank (one small all_reduce, a host step): how clipping sees a norm of gradients held in
    shards (ZeRO-2's, FSDP's)."""
    if world_size == 1:
        return partial
    import tg.distributed as dist
    total = partial.cast(dtypes.float32).contiguous()
    view = HostView(total)       # realizes it

    def reduce() -> None:
        values = view.read()
        how = dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX
        dist.all_reduce(values, op=how, group=group)
        view.write(values)
    host_step(reduce)
    return total


def new_gradients(params: list[Tensor], synced: list[Tensor | None]) -> bool:
    """Whether a backward gave some parameter a gradient since the last synchronisation."""
    return any(p.grad is not None and p.grad is not s for p, s in zip(params, synced))


class DistributedDataParallel:
    """Wrap a model: same forward, gradients averaged across the group's ranks after backward
    (torch.nn.parallel.DistributedDataParallel). Rank `broadcast_from`'s parameters and buffers are
    copied to every rank at construction; gradients move in buckets of about `bucket_mb` MiB while
    backward goes on; `no_sync()` accumulates without communicating. Attributes and methods other
    than these are the wrapped model's.

    >>> from tg import Tensor, nn
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> model = dist.DistributedDataParallel(nn.Linear(3, 1))
    >>> _ = model(Tensor.ones(4, 3)).sum().backward()
    >>> model.weight.grad.tolist()                 # the mean over ranks of each rank's gradient
    [[4.0, 4.0, 4.0]]
    >>> dist.destroy_process_group()
    """

    def __init__(self, module: Any, bucket_mb: float = 25.0, group: Any = None, broadcast_from: int = 0,
                 reduce_dtype: Any = None):
        if bucket_mb <= 0:
            raise ValueError(f"[distributed] DistributedDataParallel: bucket_mb must be > 0, got {bucket_mb}")
        self.module, self.group = module, group
        self.params = [p for p in get_parameters(module) if p.requires_grad]
        if not self.params:
            raise ValueError("[distributed] DistributedDataParallel: the model has no parameters with "
                             "requires_grad=True; nothing to synchronise. Fix: wrap the model whose "
                             "weights train (nn layers create them with requires_grad=True)")
        check_params(self.params, "DistributedDataParallel")
        self.rank, self.world_size = _world(group)
        # mixed precision: the gradients' mean is taken in reduce_dtype on the wire (float32 sums inside)
        self.wire = wire_format(reduce_dtype, "DistributedDataParallel")
        self._wire_bufs: list[np.ndarray] = []
        broadcast_state(module, broadcast_from, group)
        self.buckets = make_buckets(self.params, int(bucket_mb * (1 << 20)))
        # each bucket's gradients as views of one flat buffer, made at the first synchronisation
        self._flats: list[HostView] = []
        self._grad_views: list[list[Tensor]] = []
        self.require_sync = True
        self._synced: list[Tensor | None] = [None] * len(self.params)   # each .grad as left by the last sync
        self._hook = watch_backward(self, "_after_backward")
        self._index = {id(p): i for i, p in enumerate(self.params)}
        for p in self.params:
            _OWNERS[id(p)] = self

    def averaged(self, p: Tensor) -> bool:
        """Whether p.grad is the gradient this wrapper's last synchronisation averaged over the group
        (and nothing has replaced it since)."""
        i = self._index.get(id(p))
        return i is not None and p.grad is not None and self._synced[i] is p.grad

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # model.loss(...), model.blocks, ...: everything else is the wrapped model's
        if name == "module":
            raise AttributeError(name)
        return getattr(self.module, name)

    def parameters(self) -> list[Tensor]:
        return list(self.params)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside, backward() only accumulates local gradients; the first backward after it
        averages everything accumulated."""
        before, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = before

    def _after_backward(self, root: Tensor) -> None:
        if not self.require_sync or self.world_size == 1:
            return
        if not new_gradients(self.params, self._synced):
            return   # this backward did not reach the model
        self.sync_gradients()

    def _bucket_memory(self) -> None:
        for bucket in self.buckets:
            buf = bucket.alloc()
            self._grad_views.append(bucket.views(buf))
            self._flats.append(HostView(view_tensor(buf, 0, (bucket.padded,))))
            if self.wire is not None:
                self._wire_bufs.append(np.empty(bucket.padded, self.wire))

    def sync_gradients(self) -> None:
        """Average every parameter's gradient across the group now (called after backward)."""
        import tg.distributed as dist
        if not self._grad_views:
            self._bucket_memory()
        used = used_anywhere(self.params, self.group, self.world_size)
        works: list[Any] = []
        for b, (bucket, views, flat) in enumerate(zip(self.buckets, self._grad_views, self._flats)):
            for p, view in zip(bucket.params, views):
                if p.grad is not view:      # computed into the bucket (a parameter without one: zeros)
                    view.assign(p.grad if p.grad is not None else Tensor.zeros(*p.shape, dtype=p.dtype,
                                                                               device=p.device))
                    p.grad = view
            views[0].realize(*views[1:])

            def start(flat: HostView = flat, b: int = b) -> None:
                values = flat.read()      # the memory itself on CPU, a staged copy on other devices
                sent = values if self.wire is None else to_wire(values, self._wire_bufs[b])
                works.append((dist.all_reduce(sent, op=dist.ReduceOp.AVG, group=self.group, async_op=True),
                              flat, sent))
            host_step(start)

        def finish() -> None:
            for work, flat, values in works:
                work.wait()
                # no copy when values is the memory itself
                flat.write(values if self.wire is None else from_wire(values))
            works.clear()
        host_step(finish)
        for p, anywhere in zip(self.params, used):
            if not anywhere:
                p.grad = None     # no rank used it: torch leaves .grad None, so the optimizer skips it
        self._synced = [p.grad for p in self.params]
