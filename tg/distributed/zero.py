"""ZeroOptimizer: ZeRO stage 2. Each rank keeps optimizer state and summed gradients for 1/N of the
parameters only, steps the wrapped per-parameter optimizer on that shard, then all-gathers.

    import tg.distributed as dist
    opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.AdamW, lr=3e-3, weight_decay=0.01)
    loss.backward()      # gradients are reduce-scattered bucket by bucket; full gradients freed
    opt.step()           # AdamW on this rank's shard, then every rank gets every updated parameter
    opt.zero_grad()

The flat space. Parameters are packed end to end, last first, into buckets of about bucket_mb MiB,
each padded to a multiple of the world size N; rank r owns the r-th of the N equal parts of every
bucket, so every rank owns the same number of elements (total / N, plus padding). After backward,
each bucket's gradients are packed and reduce-scattered (mean) on the group's worker thread while
the next bucket's gradients are computed; a rank keeps only its part. The wrapped optimizer sees one
1-d "parameter" per bucket part — a float32 master copy when the parameters are float16/bfloat16 —
so its state (Adam's two moments) is allocated for the shard alone. `step()` updates the shard,
all-gathers each bucket and writes the new values into the parameters' own memory (the model keeps
its tensors; a TinyJit replay of the whole step works). As with DDP, a parameter that got no
gradient contributes zeros, and the whole shard is stepped (Adam's momentum and AdamW's decay still
move it; a plain optimizer would skip it).

    >>> from tg import Tensor, nn
    >>> w = Tensor([1.0, -1.0], requires_grad=True)
    >>> opt = ZeroOptimizer([w], nn.optim.SGD, lr=0.5)     # no process group: one rank owns it all
    >>> _ = (w * w).sum().backward(); opt.step(); w.tolist()
    [0.0, 0.0]
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tg.core.capture import host_step
from tg.core.dtype import dtypes
from tg.core.tensor import Tensor
from tg.distributed.ddp import _world, ddp_owner, new_gradients, warn_once, watch_backward
from tg.distributed.flat import Bucket, HostView, make_buckets, own_memory
from tg.nn.optim import Optimizer


class _Done:
    def wait(self) -> bool:
        return True


def _same_group(a: Any, b: Any) -> bool:
    import tg.distributed as dist
    return a is b or (dist.is_initialized() and dist._group(a) is dist._group(b))


class ZeroOptimizer(Optimizer):
    """ZeRO-2 around any tg optimizer class: `ZeroOptimizer(params, nn.optim.Adam, lr=1e-3)`.

    `lr` and `t` are the wrapped optimizer's, so learning-rate schedulers work unchanged;
    `state_dict()` is this rank's shard (see `shard_index()` for what it covers). torch's nearest is
    FSDP with SHARD_GRAD_OP; ZeroRedundancyOptimizer shards optimizer state only (ZeRO-1).
    Extra keyword arguments go to `optimizer_class`; `bucket_mb` as in DistributedDataParallel.
    Under a DistributedDataParallel wrapper over the same group, the gradients its backward averaged
    are not reduced again: each rank keeps its part of them (no communication).

    >>> from tg import Tensor, nn
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job owns every shard
    >>> model = nn.Linear(3, 1)
    >>> opt = dist.ZeroOptimizer(nn.state.get_parameters(model), nn.optim.SGD, lr=0.1)
    >>> before = model.bias.tolist()
    >>> _ = model(Tensor.ones(4, 3)).sum().backward()     # bias gradient 4: reduce-scattered
    >>> opt.step()                                        # SGD on the shard, then all-gathered
    >>> opt.zero_grad()
    >>> round(model.bias.tolist()[0] - before[0], 4)
    -0.4
    >>> dist.destroy_process_group()
    """

    # 2: gradients reduced after each backward, the full ones dropped; 1: kept, reduced in step()
    stage = 2

    def __init__(self, params: Iterable[Tensor], optimizer_class: type[Optimizer], group: Any = None,
                 bucket_mb: float = 25.0, **kwargs: Any):
        params = list(params)
        if any(isinstance(p, Mapping) for p in params):
            raise TypeError("[distributed] ZeroOptimizer takes a list of Tensors, got param groups (dicts); "
                            "its wrapped optimizer steps one flat shard with one set of options. Fix: pass "
                            "the parameters as one list, or use a plain optimizer for per-group options")
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(f"[distributed] ZeroOptimizer: optimizer_class must be a tg.nn.optim.Optimizer "
                            f"subclass (e.g. nn.optim.AdamW), got {optimizer_class!r}")
        if bucket_mb <= 0:
            raise ValueError(f"[distributed] ZeroOptimizer: bucket_mb must be > 0, got {bucket_mb}")
        super().__init__(params, kwargs.get("lr", 1e-3))
        self.group = group
        self.rank, self.world_size = _world(group)
        if self.world_size > 1:
            import tg.distributed as dist
            for p in self.params:
                dist.broadcast(p, 0, group)
        for p in self.params:
            own_memory(p)
        self.param_views = {id(p): HostView(p) for p in self.params}
        self.buckets = make_buckets(self.params, int(bucket_mb * (1 << 20)), multiple=self.world_size)
        self.position = {id(p): i for i, p in enumerate(self.params)}
        self.masters: list[Tensor] = []     # this rank's part of each bucket, in the master dtype
        self.grads: list[Tensor] = []       # the summed (mean) gradient of that part
        self.sends: list[Tensor] = []       # the updated part in the parameters' dtype, all-gathered
        for bucket in self.buckets:
            part = self._pack_params(bucket)[self._part(bucket)]
            half = bucket.params[0].dtype in (dtypes.float16, dtypes.bfloat16)
            master_dtype = dtypes.float32 if half else bucket.params[0].dtype
            self.masters.append(Tensor(part.astype(master_dtype.np), dtype=master_dtype,
                                       device=self.device).requires_grad_(False))
            self.grads.append(Tensor(np.zeros(part.size, bucket.np_dtype), device=self.device))
            self.sends.append(self.masters[-1] if not half else
                              Tensor(np.zeros(part.size, bucket.np_dtype), device=self.device,
                                     dtype=bucket.params[0].dtype))
        self.optimizer = optimizer_class(self.masters, **kwargs)
        # the wrapped optimizer's groups and step count: lr writes and schedulers reach the shard's step
        self.param_groups, self.t = self.optimizer.param_groups, self.optimizer.t
        self._has_grad = False        # a backward since the last zero_grad
        self._synced: list[Tensor | None] = [None] * len(self.params)
        self._hook = watch_backward(self, "_after_backward")

    # ------------------------------------------------------------ the flat space
    def _part(self, bucket: Bucket) -> slice:
        n = bucket.padded // self.world_size
        return slice(self.rank * n, (self.rank + 1) * n)

    def _pack_params(self, bucket: Bucket) -> np.ndarray:
        flat = np.zeros(bucket.padded, bucket.np_dtype)
        for p, off, n in zip(bucket.params, bucket.offsets, bucket.sizes):
            flat[off:off + n] = self.param_views[id(p)].read()
        return flat

    def shard_index(self) -> list[dict[str, Any]]:
        """What this rank's shard holds: per bucket part b, the pieces of parameters in it, as
        (parameter position in the list, first element within the parameter, length, offset in the part)."""
        out = []
        for b, bucket in enumerate(self.buckets):
            part = self._part(bucket)
            pieces = []
            for p, off, n in zip(bucket.params, bucket.offsets, bucket.sizes):
                lo, hi = max(part.start, off), min(part.stop, off + n)
                if lo < hi:
                    pieces.append([self.position[id(p)], lo - off, hi - lo, lo - part.start])
            out.append({"part": b, "size": part.stop - part.start, "pieces": pieces})
        return out

    def _collective(self, kind: str, out: np.ndarray, inp: np.ndarray) -> Any:
        """Start reduce_scatter (mean) or all_gather on the group's worker thread; a Work handle.
        With one rank both are a copy."""
        import tg.distributed as dist
        if self.world_size == 1:
            out[...] = inp
            return _Done()
        if kind == "reduce_scatter":
            return dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG, group=self.group, async_op=True)
        return dist.all_gather_into_tensor(out, inp, group=self.group, async_op=True)

    def _averaged_by_ddp(self) -> bool:
        """Whether every gradient is one a DistributedDataParallel over this group has just averaged
        (so reducing it again would give the same values); warns once when a stage-1 step would
        reduce a second time gradients such a wrapper reduced already."""
        with_grad = [p for p in self.params if p.grad is not None]
        if not with_grad or self.world_size == 1:
            return False
        owners = [ddp_owner(p) for p in with_grad]
        ddp = [o for o in owners if o is not None and o.world_size > 1 and _same_group(o.group, self.group)]
        if len(ddp) == len(with_grad) and all(o.averaged(p) for o, p in zip(ddp, with_grad)):
            return True   # every rank decides alike: DDP's synchronisation ran on all of them
        if self.stage == 1 and any(o.require_sync for o in ddp):
            warn_once("zero-twice", f"[distributed] {type(self).__name__}: these gradients were averaged by "
                      "DistributedDataParallel and are now reduced again (the result is the same, the "
                      "communication is wasted) because a .grad was replaced after backward. Fix: change "
                      "gradients in place (p.grad.assign(...)) between backward and step")
        return False

    # ------------------------------------------------------------ backward: reduce-scatter
    def _after_backward(self, root: Tensor) -> None:
        if self.stage == 1:
            return   # stage 1 keeps the full gradients and reduces them in step()
        if not new_gradients(self.params, self._synced):
            return   # this backward did not reach these parameters
        self.reduce_gradients()

    def reduce_gradients(self) -> None:
        """Reduce-scatter every bucket's gradients into this rank's shard (mean over ranks) and, at
        stage 2, drop the full gradients. Called after each backward (stage 2; several backwards
        before step() accumulate) or by step() (stage 1). Gradients a DistributedDataParallel has
        averaged already are only sliced."""
        accumulate = self._has_grad
        averaged = self._averaged_by_ddp()
        targets = [Tensor.empty(*g.shape, dtype=g.dtype, device=g.device).realize() if accumulate else g
                   for g in self.grads]
        works: list[Any] = []
        staged = []
        for bucket, target in zip(self.buckets, targets):
            views = bucket.realize_grads()
            out = HostView(target)
            staged.append(out)

            def start(
                bucket: Bucket = bucket, views: list[HostView | None] = views, out: HostView = out
            ) -> None:
                recv = out.read() if out.zero_copy else np.empty(out.numel, out.np_dtype)
                flat = bucket.pack(views)
                if averaged:      # ZeRO-1 under DDP: the mean is there already, keep this rank's part
                    recv[...] = flat[self._part(bucket)]
                    works.append((_Done(), out, recv))
                else:
                    works.append((self._collective("reduce_scatter", recv, flat), out, recv))
            host_step(start)
            if self.stage == 2:
                for p in bucket.params:
                    p.grad = None        # ZeRO-2: the full gradient is not kept

        def finish() -> None:
            for work, out, recv in works:
                work.wait()
                out.write(recv)
            works.clear()
        host_step(finish)
        if accumulate:
            for g, t in zip(self.grads, targets):
                g.assign(g + t)
            self.grads[0].realize(*self.grads[1:])
        self._has_grad = True
        self._synced = [p.grad for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        # ZeRO-2 keeps no full gradients, so there is nothing to fill with zeros: both forms drop them
        for p in self.params:
            p.grad = None
        self._has_grad = False
        self._synced = [None] * len(self.params)

    # ------------------------------------------------------------ step: update the shard, all-gather
    def _reduce_kept_gradients(self) -> None:
        # stage 1: the full gradients hold every backward's sum since zero_grad, so reduce them afresh
        self._has_grad = False
        if any(p.grad is not None for p in self.params):
            self.reduce_gradients()

    def step(self) -> None:
        """Step the wrapped optimizer on this rank's shard, then all-gather the parameters."""
        if self.stage == 1:
            self._reduce_kept_gradients()
        if not self._has_grad:
            return
        items = [(m, g, self.optimizer._state(i)) for i, (m, g) in enumerate(zip(self.masters, self.grads))]
        written = self.optimizer.apply(items)
        for send, master in zip(self.sends, self.masters):
            if send is not master:
                send.assign(master.cast(send.dtype))
                written.append(send)
        root = Tensor.last_backward_root()
        if root is not None and root.lazydata.base.realized is None:
            written.append(root)
        written[0].realize(*written[1:])
        for p in self.params:
            own_memory(p)          # whatever still reads the old weights runs before they change
        sends = [HostView(s) for s in self.sends]

        def gather() -> None:
            works = [self._collective("all_gather", bucket.host, send.read())
                     for bucket, send in zip(self.buckets, sends)]
            for work, bucket in zip(works, self.buckets):
                work.wait()
                for p, off, n in zip(bucket.params, bucket.offsets, bucket.sizes):
                    self.param_views[id(p)].write(bucket.host[off:off + n])
        host_step(gather)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard: the wrapped optimizer's state of each bucket part and the masters."""
        return self.shard_state_dict()

    def flat_state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard, a flat dict of tensors already (what shard_state_dict() returns)."""
        return self.shard_state_dict()

    def shard_state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard, whatever state_dict() returns (tg.distributed.save_checkpoint's form)."""
        # the flat names load_zero_shards reshards: "t", "lr", "state.<part>.<buffer>", "master.<part>"
        out: dict[str, Tensor | np.ndarray] = {"t": self.optimizer.t, "lr": self.optimizer.lr_tensor}
        for b in range(len(self.masters)):
            out.update({f"state.{b}.{k}": v for k, v in self.optimizer._state(b).items()})
        out.update({f"master.{b}": m for b, m in enumerate(self.masters)})
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what state_dict() returned on this rank at the same world size (strict).
        To load at another world size, use tg.distributed.load_checkpoint."""
        from tg.nn.state import StateDictError, load_state_dict
        try:
            load_state_dict(self.state_dict(), state_dict)
        except StateDictError as e:
            raise ValueError(
                f"[distributed] ZeroOptimizer.load_state_dict: this rank's shard has other parts or "
                f"sizes than the state given ({e}). A shard loads only at the world size and "
                f"bucket_mb it was saved with. Fix: save and load with tg.distributed."
                f"save_checkpoint / load_checkpoint, which reshard to any world size"
            ) from None
        self.optimizer.lr = float(self.optimizer.lr_tensor.item())   # the group's host copy of the loaded lr
        self._write_masters_to_params()

    def _write_masters_to_params(self) -> None:
        """After loading masters: every rank's parameters from everyone's masters."""
        for send, master in zip(self.sends, self.masters):
            if send is not master:
                send.assign(master.cast(send.dtype)).realize()
        for bucket, send in zip(self.buckets, self.sends):
            self._collective("all_gather", bucket.host, HostView(send).read()).wait()
            for p, off, n in zip(bucket.params, bucket.offsets, bucket.sizes):
                self.param_views[id(p)].write(bucket.host[off:off + n])
