"""ZeroOptimizer: ZeRO stage 2. Each rank keeps optimizer state and summed gradients for 1/N of the
parameters only, steps the wrapped per-parameter optimizer on that shard, then all-gathers.

    import tg.distributed as dist
    opt = dist.ZeroOptimizer(get_parameters(model), nn.optim.AdamW, lr=3e-3, weight_decay=0.01)
    loss.backward()      # gradients are reduce-scattered bucket by bucket; full gradients freed
    opt.step()           # AdamW on this rank's shard, then every rank gets every updated parameter
    opt.zero_grad()

The flat space. Parameters are laid out end to end, last first, in buckets of about bucket_mb MiB,
each padded to a multiple of the world size N; rank r owns the r-th of the N equal parts of every
bucket, so every rank owns the same number of elements (total / N, plus padding). Each bucket is one
flat device buffer and every parameter becomes a view of it (the model keeps its Tensor objects).

Memory, per rank, with P the parameters' bytes: P + the optimizer's state for P/N + the summed
gradient of P/N + at most SLOTS buckets of full gradients.
- backward: bucket by bucket, the gradients are computed into one of SLOTS flat buffers and
  reduce-scattered (mean) from it on the group's worker thread while the next bucket computes; the
  rank keeps only its part and the full gradients are dropped. With one rank they are computed
  straight into the summed gradient (no copy, no slot: ZeRO costs what the plain optimizer does).
- step: the wrapped optimizer sees one 1-d "parameter" per bucket part: for float32 parameters the
  part's view of the flat buffer itself (updated in place, no master copy), for float16/bfloat16 a
  float32 master, cast back into the view after the update. Then one all-gather (per host dtype)
  moves every bucket's updated part at once and lands in place, in the flat buffers the parameters
  are views of: it cannot overlap backward, so it is one call (one agreement, one pass of the ring),
  not a round trip per bucket.
Every host step (reduce-scatter, all-gather) is a `host_step`, so a TinyJit replay of the whole
training step replays them too. As with DDP, a parameter that got no gradient on some ranks
counts zeros there; one that got none on any rank (frozen, or unused) is not stepped at all, as a
plain optimizer skips a parameter whose .grad is None (no weight decay, no momentum). Parameters
must be tensors of their own (not views of another tensor), not share memory with each other, and
live on one device; anything else is refused at construction.

    >>> from tg import Tensor, nn
    >>> w = Tensor([1.0, -1.0], requires_grad=True)
    >>> opt = ZeroOptimizer([w], nn.optim.SGD, lr=0.5)     # no process group: one rank owns it all
    >>> _ = (w * w).sum().backward(); opt.step(); w.tolist()
    [0.0, 0.0]

Between backward and step, ZeRO-2 keeps no `.grad` (None, as FSDP's sharded gradients are not the
parameter's): tg.nn.utils.clip_grad_norm_ and clip_grad_value_ find this rank's part of the gradients
through the optimizer (tg.nn.optim.hold_gradients) and clip it, with the norm of the whole model (the
ranks' partial norms combined), so the step is unsharded training's; `clip_grad_norm_(params,
float("inf"))` measures without clipping (a grad-norm log).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np

from tg.core import trace
from tg.core.capture import host_step
from tg.core.dtype import dtypes
from tg.core.host import HostView, view_tensor
from tg.core.realize import realize_readers
from tg.core.tensor import Tensor
from tg.distributed.ddp import (
    _world,
    combine_partial,
    ddp_owner,
    new_gradients,
    used_anywhere,
    watch_backward,
)
from tg.distributed.flat import (
    Bucket,
    check_params,
    from_wire,
    make_buckets,
    to_wire,
    wire_format,
)
from tg.nn.optim import Optimizer, hold_gradients
from tg.utils.warn import warn_once

SLOTS = 2   # buckets of full gradients alive at once (one reduce-scattered while the next is computed)


class _Done:
    def wait(self) -> bool:
        return True


def _same_group(a: Any, b: Any) -> bool:
    import tg.distributed as dist
    world = dist.group.WORLD
    return a is b or (dist.is_initialized() and (world if a is None else a) is (world if b is None else b))


def _param_groups(params: Iterable[Any]) -> list[tuple[list[Tensor], dict[str, Any]]]:
    """(parameters, options) of each group, from a list of Tensors (one group) or of dicts with a
    'params' entry (torch's param groups)."""
    given = list(params)
    if not any(isinstance(g, Mapping) for g in given):
        return [(given, {})]
    if not all(isinstance(g, Mapping) and "params" in g for g in given):
        raise TypeError("[distributed] ZeroOptimizer: expected a list of Tensors or a list of param groups "
                        "(dicts with a 'params' entry), got a mix. Fix: pass one or the other")
    out = []
    for g in given:
        ps = g["params"]
        options = {k: v for k, v in g.items() if k != "params"}
        out.append(([ps] if isinstance(ps, Tensor) else list(ps), options))
    return out


def _check_distinct(groups: list[list[Tensor]]) -> None:
    """torch's rule: a parameter is in one group only (it would be packed, and stepped, twice)."""
    seen: set[int] = set()
    for g, ps in enumerate(groups):
        for p in ps:
            if id(p) in seen:
                raise ValueError(f"[distributed] ZeroOptimizer: some parameters appear in more than one "
                                 f"parameter group (one in group {g}); fix: put each parameter in one group")
            seen.add(id(p))


class ZeroOptimizer(Optimizer):
    """ZeRO-2 around any tg optimizer class: `ZeroOptimizer(params, nn.optim.Adam, lr=1e-3)`.

    `lr` and `t` are the wrapped optimizer's, so learning-rate schedulers work unchanged;
    `state_dict()` is this rank's shard (see `shard_index()` for what it covers). torch's nearest is
    FSDP with SHARD_GRAD_OP; ZeroRedundancyOptimizer shards optimizer state only (ZeRO-1).
    Extra keyword arguments go to `optimizer_class`; `bucket_mb` as in DistributedDataParallel.
    `params` is a list of Tensors or of torch's param groups (dicts with "params" and their own options,
    nanoGPT's decayed and undecayed weights); each group is packed into buckets of its own, and the
    wrapped optimizer steps this rank's parts of them as that group (`param_groups[i]["lr"]` writes
    reach it); `add_param_group` adds one between steps.
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

    def __init__(self, params: Iterable[Any], optimizer_class: type[Optimizer], group: Any = None,
                 bucket_mb: float = 25.0, reduce_dtype: Any = None, **kwargs: Any):
        groups = _param_groups(params)
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(f"[distributed] ZeroOptimizer: optimizer_class must be a tg.nn.optim.Optimizer "
                            f"subclass (e.g. nn.optim.AdamW), got {optimizer_class!r}")
        if bucket_mb <= 0:
            raise ValueError(f"[distributed] ZeroOptimizer: bucket_mb must be > 0, got {bucket_mb}")
        _check_distinct([ps for ps, _ in groups])
        every = [p for ps, _ in groups for p in ps]
        if every and all(isinstance(p, Tensor) for p in every):
            check_params(every, "ZeroOptimizer")      # before the optimizer's own checks: names the parameter
        super().__init__(every, kwargs.get("lr", 1e-3))
        self.group = group
        self.rank, self.world_size = _world(group)
        # mixed precision: the gradients' reduce-scatter in reduce_dtype on the wire (float32 sums inside);
        # the shards, the optimizer's state and the checkpoints stay float32
        self.wire = wire_format(reduce_dtype, "ZeroOptimizer")
        self.bucket_bytes = int(bucket_mb * (1 << 20))
        self.buckets: list[Bucket] = []
        self.bucket_group: list[int] = []   # the parameter group of each bucket (a bucket holds one group's)
        self.group_params: list[list[Tensor]] = []   # each group's parameters, as given
        self.flats: list[HostView] = []
        self.masters: list[Tensor] = []     # this rank's part of each bucket, in the master dtype
        self.sends: list[Tensor] = []       # the part in the parameters' dtype: a view of the flat buffer
        self.position: dict[int, int] = {}
        packed = [(self._add_group(ps), options) for ps, options in groups]
        # the wrapped optimizer, made once from every group (an empty first group included, as torch's)
        self.optimizer = optimizer_class([{"params": masters, **options} for masters, options in packed],
                                         **kwargs)
        # the wrapped optimizer's groups and step count: lr writes and schedulers reach the shard's step
        self.param_groups, self.t = self.optimizer.param_groups, self.optimizer.t
        self._make_gradients()
        self._has_grad = False        # a backward since the last zero_grad
        # which parameters got a gradient on some rank since zero_grad: only their elements are stepped
        self._used = np.zeros(len(self.params), bool)
        self._synced: list[Tensor | None] = [None] * len(self.params)
        self._hook = watch_backward(self, "_after_backward")
        hold_gradients(self.params, self)     # clip_grad_norm_ / clip_grad_value_ find the shards here

    def _add_group(self, params: list[Tensor]) -> list[Tensor]:
        """Pack a parameter group into buckets of its own (every parameter becomes a view of its bucket's
        flat buffer); this rank's parts of them, for the wrapped optimizer to step as one group."""
        if self.world_size > 1:
            import tg.distributed as dist
            for p in params:
                dist.broadcast(p, 0, self.group)
        g = len(self.group_params)
        self.group_params.append(params)
        first = len(self.position)
        self.position.update((id(p), first + i) for i, p in enumerate(params))
        # this rank's part of each bucket is what the wrapped optimizer steps (float32: in place, no
        # copy; half types: a float32 master)
        masters = []
        for bucket in make_buckets(params, self.bucket_bytes, multiple=self.world_size):
            flat = HostView(bucket.adopt())
            part = self._part(bucket)
            own = view_tensor(flat.buf, part.start, (part.stop - part.start,))
            half = bucket.dtype in (dtypes.float16, dtypes.bfloat16)
            masters.append(own if not half else own.float().realize().requires_grad_(False))
            self.buckets.append(bucket)
            self.bucket_group.append(g)
            self.flats.append(flat)
            self.sends.append(own)
        self.masters += masters
        return masters

    def _make_gradients(self) -> None:
        """The summed gradient of each bucket's part, and where backward's full gradients are computed:
        with one rank, the summed gradient itself; with more, one of SLOTS flat buffers the buckets take
        in turn, so that only SLOTS buckets of full gradients exist at once."""
        # one rank: the bucket's gradients are views of it (its dtype); more: the host's dtype of the
        # reduced values (bfloat16's mean stays float32)
        self.grads: list[Tensor] = []       # the summed (mean) gradient of this rank's part of each bucket
        for bucket in self.buckets:
            part = self._part(bucket)
            self.grads.append(Tensor(np.zeros(part.stop - part.start, bucket.np_dtype), device=self.device,
                                     dtype=bucket.dtype if self.world_size == 1 else None))
        self._grad_views = [HostView(g) for g in self.grads]
        if self.world_size == 1:
            self._targets = [bucket.views(g.buf) for bucket, g in zip(self.buckets, self._grad_views)]
            self._slots: list[HostView] = []
            return
        from tg.core.device import Buffer
        raw = [Buffer(self.device, max(b.nbytes for b in self.buckets), dtypes.uint8)
               for _ in range(min(SLOTS, len(self.buckets)))]
        slot_bufs = [bucket.alloc(raw[b % len(raw)]) for b, bucket in enumerate(self.buckets)]
        self._targets = [bucket.views(buf) for bucket, buf in zip(self.buckets, slot_bufs)]
        self._slots = [HostView(view_tensor(buf, 0, (bucket.padded,)))
                       for bucket, buf in zip(self.buckets, slot_bufs)]

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add a parameter group (torch's add_param_group; every rank, between steps: gradients not yet
        stepped are dropped): its parameters are packed into buckets of their own and sharded, and the
        wrapped optimizer steps this rank's parts with the group's options."""
        if "optimizer" not in self.__dict__:       # Optimizer.__init__ registering the model's parameters
            Optimizer.add_param_group(self, group)
            return
        (params, options), = _param_groups([group])
        _check_distinct([*self.group_params, params])
        if params:
            check_params([*self.params, *params], "ZeroOptimizer.add_param_group")
        self.params += params
        self.state += [None] * len(params)
        self.optimizer.add_param_group({"params": self._add_group(params), **options})
        self._make_gradients()
        self._has_grad = False
        self._used = np.zeros(len(self.params), bool)
        self._synced = [None] * len(self.params)
        hold_gradients(self.params, self)

    # ------------------------------------------------------------ the flat space
    def _part(self, bucket: Bucket) -> slice:
        n = bucket.padded // self.world_size
        return slice(self.rank * n, (self.rank + 1) * n)

    def _pack_params(self, bucket: Bucket) -> np.ndarray:
        """The bucket's parameters end to end (a copy of its flat buffer, as the host sees it)."""
        return self.flats[self.buckets.index(bucket)].read().copy()

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

    # ------------------------------------------------------------ clipping between backward and step
    def held_gradients(self, params: list[Tensor]) -> list[Tensor]:
        """This rank's part of the reduced gradients of params (tensors clipping may write in place):
        the whole parts when params are all of ours, else each parameter's piece; [] with none held."""
        if self.stage == 1 or not self._has_grad:
            return []           # stage 1 keeps the full gradients in .grad
        wanted = {id(p) for p in params}
        if wanted >= set(map(id, self.params)):
            return list(self.grads)
        pieces = []
        for b, part in enumerate(self.shard_index()):
            pieces += [self.grads[b][offset:offset + length] for position, _first, length, offset
                       in part["pieces"] if id(self.params[position]) in wanted]
        return pieces

    def combine(self, partial: Tensor, op: str) -> Tensor:
        """A 0-d float32 partial (of a norm: "sum" or "max") combined over the group's ranks: the same
        bits on every rank (one small all_reduce, a host step)."""
        return combine_partial(partial, op, self.group, self.world_size)

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
        averaged already are only sliced.

        Bucket by bucket, backward's gradients are computed into the bucket's slot of flat memory (with
        one rank, straight into the summed gradient) and the slot is reduce-scattered on the group's
        worker thread while the next bucket computes; a slot is reused once its reduce-scatter is done,
        so at most SLOTS buckets of full gradients exist at once."""
        accumulate, averaged = self._has_grad, self._averaged_by_ddp()
        self._used |= used_anywhere(self.params, self.group, self.world_size)
        works: dict[int, tuple[Any, np.ndarray]] = {}
        for b, bucket in enumerate(self.buckets):
            if b >= SLOTS and self._slots:
                host_step(partial(self._finish, b - SLOTS, works, accumulate))   # frees the slot
            self._compute_into(b, accumulate and not self._slots)
            if self._slots:
                host_step(partial(self._start, b, works, averaged, accumulate))
            if self.stage == 2:
                for p in bucket.params:
                    p.grad = None        # ZeRO-2: the full gradient is not kept
        if self._slots:
            def finish() -> None:
                for done in sorted(works):
                    self._finish(done, works, accumulate)
            host_step(finish)
        self._has_grad = True
        self._synced = [p.grad for p in self.params]

    def _compute_into(self, b: int, add: bool) -> None:
        """Compute bucket b's gradients into their target views (adding to what is there when add)."""
        targets = self._targets[b]
        for p, target in zip(self.buckets[b].params, targets):
            if p.grad is not None:
                target.assign(target + p.grad if add else p.grad)
            elif not add:
                target.assign(Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device))
        targets[0].realize(*targets[1:])

    def _start(self, b: int, works: dict[int, tuple[Any, np.ndarray]], averaged: bool,
               accumulate: bool) -> None:
        """Start bucket b's reduce-scatter (mean) from its slot: into the summed gradient's own memory
        when it can be (host memory, nothing to add to), else into a host array _finish stores."""
        bucket, slot = self.buckets[b], self._slots[b]
        flat = slot.read()           # the slot's memory itself on CPU, a staged copy on other devices
        for lo, hi in bucket.gaps():
            flat[lo:hi] = 0          # the slot's last bucket may have left values between the parameters
        if averaged:                 # ZeRO-1 under DDP: the mean is there already, keep this rank's part
            works[b] = (_Done(), flat[self._part(bucket)].copy())
            return
        grad = self._grad_views[b]
        if self.wire is not None and self.world_size > 1:     # narrowed for the wire, widened in _finish
            recv = np.empty(grad.numel, self.wire)
            sent = to_wire(flat, np.empty(flat.size, self.wire))
            works[b] = (self._collective("reduce_scatter", recv, sent), recv)
            return
        recv = grad.read() if grad.zero_copy and not accumulate else np.empty(grad.numel, grad.np_dtype)
        works[b] = (self._collective("reduce_scatter", recv, flat), recv)

    def _finish(self, b: int, works: dict[int, tuple[Any, np.ndarray]], accumulate: bool) -> None:
        """Wait for bucket b's reduce-scatter and store (or add) this rank's part."""
        work, recv = works.pop(b)
        work.wait()
        grad = self._grad_views[b]
        if recv.dtype != grad.np_dtype:       # the wire's narrow values
            recv = from_wire(recv)
        if accumulate:
            recv += grad.read()
        grad.write(recv)      # no copy when recv is the gradient's memory

    def zero_grad(self, set_to_none: bool = True) -> None:
        # ZeRO-2 keeps no full gradients, so there is nothing to fill with zeros: both forms drop them
        for p in self.params:
            p.grad = None
        self._has_grad = False
        self._used[:] = False
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
        if not self._has_grad or not self._used.any():
            return
        # the update writes the parameters' memory through another Buffer (the part's view): whatever
        # still reads the old weights (the loss of the last backward too) is computed first
        root = Tensor.last_backward_root()
        if root is not None and root.lazydata.base.realized is None:
            root.realize()
        host_step(trace.optimizer_phase)        # the step's time from here is the optimizer's
        realize_readers([p.lazydata for p in self.params])
        self._follow_writes()
        self.optimizer.apply(self._step_items())
        for b, (send, master) in enumerate(zip(self.sends, self.masters)):
            written = [master, *self.optimizer.state_of(b).values()] + ([self.optimizer.t] if b == 0 else [])
            if send is not master:
                written.append(send.assign(master.cast(send.dtype)))
            written[0].realize(*written[1:])
        if self.world_size > 1:
            host_step(self._gather)

    def _follow_writes(self) -> None:
        """A half-precision part whose values differ from its float32 master's cast was written since the
        last step (p.assign, a load): the master takes the written values there, so the step starts
        from them, as a plain optimizer's would (float32 parts are the parameters' memory itself)."""
        halves = [(send, master) for send, master in zip(self.sends, self.masters) if send is not master]
        for send, master in halves:
            master.assign((send != master.cast(send.dtype)).where(send.cast(master.dtype), master))
        if halves:
            halves[0][1].realize(*(master for _, master in halves[1:]))

    def _step_items(self) -> list[tuple[Any, ...]]:
        """(master, gradient, state, group) for the wrapped optimizer: each bucket part whole, or, where
        some parameter in it got no gradient on any rank, only the runs of elements of those that did (as
        torch's optimizers, which skip a parameter whose .grad is None: no decay, no momentum), each with
        its group's options."""
        items: list[tuple[Any, ...]] = []
        for b, (bucket, master, grad) in enumerate(zip(self.buckets, self.masters, self.grads)):
            state = self.optimizer.state_of(b)
            group = self.optimizer.param_groups[self.bucket_group[b]]
            used = [bool(self._used[self.position[id(p)]]) for p in bucket.params]
            if all(used):
                items.append((master, grad, state, group))
                continue
            part = self._part(bucket)
            runs: list[list[int]] = []      # [first, end) in the part of each run of stepped elements
            for p_used, off, n in zip(used, bucket.offsets, bucket.sizes):
                lo, hi = max(part.start, off) - part.start, min(part.stop, off + n) - part.start
                if not p_used or lo >= hi:
                    continue
                if runs and runs[-1][1] == lo:
                    runs[-1][1] = hi
                else:
                    runs.append([lo, hi])
            items += [(master[lo:hi], grad[lo:hi], {k: v[lo:hi] for k, v in state.items()}, group)
                      for lo, hi in runs]
        return items

    def _gather(self) -> None:
        """Every rank's updated parts into every rank's flat buffers, in place (the parameters see them):
        one all-gather for all the buckets of a host dtype, so one agreement and one pass of the ring
        instead of a round trip per bucket (an all-gather cannot overlap backward, so its latency shows)."""
        import tg.distributed as dist
        runs: dict[np.dtype, list[int]] = {}
        for b, flat in enumerate(self.flats):
            runs.setdefault(flat.np_dtype, []).append(b)
        for run in runs.values():
            # the memory itself on CPU, a staged copy on other devices
            values = [self.flats[b].read() for b in run]
            parts = [v[self._part(self.buckets[b])] for v, b in zip(values, run)]   # sent from where they lie
            dist.all_gather_into_tensor_coalesced(values, parts, self.group)
            for b, v in zip(run, values):
                self.flats[b].write(v)     # no copy on CPU

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard: the wrapped optimizer's state of each bucket part and the masters."""
        return self.shard_state_dict()

    def flat_state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard, a flat dict of tensors already (what shard_state_dict() returns)."""
        return self.shard_state_dict()

    def shard_state_dict(self) -> dict[str, Tensor | np.ndarray]:
        """This rank's shard, whatever state_dict() returns (tg.distributed.save_checkpoint's form)."""
        # the flat names load_zero_shards reshards: "t", "lr" (and "lr.<group>" past the first group),
        # "state.<part>.<buffer>", "master.<part>"
        out: dict[str, Tensor | np.ndarray] = {"t": self.optimizer.t}
        out.update({"lr" if g == 0 else f"lr.{g}": group.lr_tensor
                    for g, group in enumerate(self.optimizer.param_groups)})
        for b in range(len(self.masters)):
            out.update({f"state.{b}.{k}": v for k, v in self.optimizer.state_of(b).items()})
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
        for group in self.optimizer.param_groups:      # each group's host copy of its loaded lr
            group["lr"] = float(group.lr_tensor.item())
        self._write_masters_to_params()

    def _write_masters_to_params(self) -> None:
        """After loading masters: every rank's parameters from everyone's masters."""
        for send, master in zip(self.sends, self.masters):
            if send is not master:
                send.assign(master.cast(send.dtype)).realize()
        if self.world_size > 1:
            self._gather()
