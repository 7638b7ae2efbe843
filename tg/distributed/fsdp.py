"""ZeRO-3 in torch's FSDP2 form: `fully_shard(module)` makes the module a unit whose parameters live
sharded, 1/N per rank, and are gathered only while the unit computes.

    from tg.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)               # bottom-up: each block a unit
    fully_shard(model)                   # the root: the parameters left over (embeddings, head)
    opt = nn.optim.AdamW(model.parameters(), lr=3e-4)    # this rank's shards: any tg optimizer
    loss = model(x, y); loss.backward(); opt.step(); opt.zero_grad()

Sharding. Each parameter of a unit is split along its first dim as torch's FSDP2 does (Shard(0)): its
rows padded to a multiple of the world size N, rank r keeps rows [r c, (r + 1) c) with c = ceil(rows /
N). Those shards are the module's registered parameters between uses (what `model.parameters()`,
`state_dict()` and the optimizer see: tensors of shape (c, *rest), so an optimizer's `p.dim() >= 2`
rules still hold), and all of a unit's shards lie end to end in one flat buffer of S elements: one
collective moves a unit.

Forward. Before a unit runs, one all-gather brings every rank's S elements (plus a header naming the
unit) into a host staging block, copied out into a full buffer where each parameter lies whole;
tensors over it are registered on the modules for the forward (fresh leaf tensors each time, so
autograd sees this forward's). The next unit of the previous forward's order is gathered ahead while
this one computes (prefetch, on the group's worker thread). After a unit's forward, its outputs are
computed (the lazy graph reading its full parameters runs while they are there) and, with
`reshard_after_forward` (the default), the shards are registered again and the full buffer is free
for another unit: full buffers are a pool of slots (one for a chain of units, one more per level of
nesting; a gather ahead waits in host staging and takes a slot only when its unit starts). The root
unit (the outermost one called) keeps its parameters gathered until its backward is done.

Backward. `loss.backward()` builds the whole gradient graph lazily; then, last unit first, each unit
is gathered again (the next one ahead), its parameters' gradients and the gradient of its inputs
are computed, its parameters resharded, and its gradients reduce-scattered (mean over ranks, started
on the worker thread while the next unit computes) into this rank's shard gradients: the shard
parameters' `.grad`. A parameter no rank used keeps `.grad` None (not stepped, as DDP).

Activation checkpointing (tg.nn.checkpoint) around units works: a unit called again between the
forward and the end of its backward is a recompute, gathered again with that forward's full tensors
(whose gradients the checkpoint computes) and given back when the next recompute begins.
`MixedPrecisionPolicy` gathers and computes in param_dtype on float32 shards.

A resharded unit's full memory is taken by others, so reading it is refused: a kernel that reads a
parameter of a resharded unit (a value computed from it that escaped the unit's forward unevaluated)
raises DistributedError naming the unit, never reads another unit's values. Every gather carries the
unit's index and each rank checks every other's: a rank that runs units in another order, or skips
one, makes every rank raise naming it.

Memory per rank, with P the parameters' bytes: shards P/N + their gradients P/N + the optimizer's
state (2P/N for Adam) + the root's full parameters + one unit's full parameters (a slot) + one unit's
full gradients (computed in one buffer, then reduce-scattered from host staging) + activations. With
every parameter in a non-root unit that is 4P/N + 2 units + activations (tests/distributed/test_fsdp.py
and `scripts/bench_train_dist.py --tables memory` measure it); host staging holds up to two units more.
"""
from __future__ import annotations

import json
import weakref
import zlib
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Iterator

import numpy as np

from tg import config
from tg.core.capture import host_step
from tg.core.device import Buffer, Device
from tg.core.dtype import DType
from tg.core.function import Function
from tg.core.host import HostView, host_dtype, view_tensor
from tg.core.lazy import LazyBuffer, Readers
from tg.core.realize import realize
from tg.core.tensor import Tensor
from tg.distributed.ddp import _world, combine_partial, watch_backward
from tg.distributed.errors import DistributedError
from tg.distributed.flat import from_wire, to_wire, wire_format
from tg.nn.module import Module
from tg.nn.optim import hold_gradients

__all__ = ["fully_shard", "FSDPModule", "MixedPrecisionPolicy"]

_HEADER = 2      # elements ahead of each rank's part of a gather or reduce-scatter: the unit's index, squared


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """torch's FSDP2 MixedPrecisionPolicy: `param_dtype` is the dtype a unit's parameters are gathered
    in and computed with (half the bytes of each all-gather for bfloat16 or float16; the shards, which
    the optimizer steps, stay in their own dtype, float32 master weights); `reduce_dtype` the dtype the
    gradients are reduce-scattered in (default: param_dtype; float32 sums them in float32 on the wire);
    `output_dtype` casts the unit's floating outputs; `cast_forward_inputs` casts its floating inputs to
    param_dtype."""
    param_dtype: Any = None
    reduce_dtype: Any = None
    output_dtype: Any = None
    cast_forward_inputs: bool = True

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, DType) or not value.is_float):
                raise ValueError(f"[distributed] MixedPrecisionPolicy: {name} must be a floating tg dtype "
                                 f"(tg.bfloat16, tg.float16, tg.float32) or None, got {value!r}")


class _Resharded(Buffer):
    """Stands in for a unit's full memory while the unit is resharded (another unit may hold that slot
    now): a kernel that would read a parameter there raises, naming the unit."""

    def __init__(self, real: Buffer, unit: str):          # no memory of its own: Buffer.__init__ not run
        self.device, self.size, self.dtype, self.nbytes = real.device, real.size, real.dtype, real.nbytes
        self.allocator, self.aliases, self._c_pointer = real.allocator, Readers(), None
        self.owner, self.view_offset, self.unit = real, real.view_offset, unit

    @property
    def _buf(self) -> Any:      # type: ignore[override]
        raise DistributedError(
            f"[distributed] fully_shard: a computation reads a parameter of unit {self.unit} after that "
            f"unit's forward resharded it (its memory now holds another unit's parameters). A value "
            f"computed from the unit's parameters escaped its forward without being returned. Fix: return "
            f"it from the module's forward, or fully_shard the unit with reshard_after_forward=False")

    def __del__(self) -> None:
        """Nothing to free: the memory is the real buffer's (Buffer.__del__ would free it)."""


class _Stash(Function):
    """The identity on a unit's input; its backward keeps the gradient arriving there, which the
    unit's backward computes before the unit is resharded (the units before it start from it)."""

    def forward(self, x: LazyBuffer, unit: _Unit) -> LazyBuffer:  # type: ignore[override]
        self.unit = unit
        return x

    def backward(self, grad: LazyBuffer) -> LazyBuffer:
        self.unit.input_grads.append(grad)
        return grad


class _Param:
    """One parameter of a unit: where it is registered, its shape, its rows per rank, and where its shard
    (in the unit's flat shard of S elements) and its whole value (in a full buffer) lie."""

    def __init__(self, places: list[tuple[Module, str]], shape: tuple[int, ...], requires_grad: bool):
        self.places, self.shape, self.requires_grad = places, shape, requires_grad
        self.rows = shape[0] if shape else 1
        self.rest = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        self.numel = self.rows * self.rest
        self.shard_off = self.full_off = 0
        self.c = 0
        self.shard: Tensor        # registered between uses: rows [r c, (r + 1) c) of this rank
        self.grad: Tensor         # the shard's gradient: a view of the unit's gradient buffer
        self.full: Tensor | None = None     # this forward's whole parameter (a leaf over a full buffer)
        self.real: Buffer | None = None     # the memory the full tensor reads while gathered

    def pieces(self, world: int) -> Iterator[tuple[int, int, int]]:
        """(rank, first row, rows) of each rank that holds some of this parameter's rows."""
        for r in range(world):
            lo = r * self.c
            count = min(self.c, self.rows - lo)
            if count <= 0:
                return
            yield r, lo, count

    def rows_of(self, rank: int) -> tuple[int, int]:
        """(first row, rows) of the parameter that rank holds (rows past the end are padding)."""
        first = min(rank * self.c, self.rows)
        return first, min(self.rows, first + self.c) - first

    def lay_out(self, blocks: np.ndarray, src: int, out: np.ndarray, at: int, narrow: bool = False) -> None:
        """Every rank's rows of this parameter, from row r of blocks (one rank's shard each, this
        parameter's at column src) into out from `at` on, where it lies whole (widened from wire words
        when narrow)."""
        for r, lo, count in self.pieces(blocks.shape[0]):
            part = blocks[r, src:src + count * self.rest]
            out[at + lo * self.rest:at + (lo + count) * self.rest] = from_wire(part) if narrow else part

    def register(self, t: Tensor) -> None:
        """t as the parameter, under each name it has (a tied parameter has several)."""
        for owner, name in self.places:
            owner._parameters[name] = t


class _Slots:
    """Full buffers shared by the units of one root: a unit being gathered takes a free one (a new one
    when none is free), sized for the largest unit."""

    def __init__(self, device: str, dtype: Any, size: int):
        self.device, self.dtype, self.size = device, dtype, size
        self.free: list[Buffer] = []
        self.views: dict[int, HostView] = {}
        self.count = 0

    def take(self) -> Buffer:
        if self.free:
            return self.free.pop()
        self.count += 1
        return Buffer(self.device, self.size, self.dtype)

    def view(self, slot: Buffer) -> HostView:
        """slot's memory from the host (made once per slot)."""
        view = self.views.get(id(slot))
        if view is None:
            view = self.views[id(slot)] = HostView(view_tensor(slot, 0, (slot.size,)))
        return view


class _Shards:
    """Clipping's view of FSDP's shard parameters (tg.nn.optim.hold_gradients): their .grad is this
    rank's part, and a norm of them is the ranks' partial norms combined."""
    shards = True

    def __init__(self, group: Any):
        self.group = group

    def held_gradients(self, params: list[Tensor]) -> list[Tensor]:
        return [p.grad for p in params if p.grad is not None]

    def combine(self, partial: Tensor, op: str) -> Tensor:
        return combine_partial(partial, op, self.group, _world(self.group)[1])   # (the group as it is now)


_SHARDS: dict[int, _Shards] = {}       # one per process group (by id; None: the default group)


class _Staging:
    """Host blocks for the collectives of one root's units (a gather's every-rank block, a
    reduce-scatter's send), reused: fresh ones of megabytes cost their page faults every step."""

    def __init__(self, size: int, dtype: Any):
        self.size, self.dtype = size, dtype
        self.free: list[np.ndarray] = []

    def take(self, n: int) -> np.ndarray:
        block = self.free.pop() if self.free else np.empty(self.size, self.dtype)
        return block[:n]

    def give(self, block: np.ndarray) -> None:
        base = block.base if block.base is not None else block
        if base.size == self.size:
            self.free.append(base)


class _Unit:
    """The state of one fully_shard call: its parameters, their flat shard, and the gather in flight."""

    def __init__(self, module: Module, params: list[tuple[list[tuple[Module, str]], Tensor]], group: Any,
                 reshard_after_forward: bool, mp: MixedPrecisionPolicy | None = None):
        import tg.distributed as dist
        self.module, self.group, self.reshard_after_forward = module, group, reshard_after_forward
        self.mp = mp
        self.name = type(module).__name__
        self.index = 0             # position in its root's units, set at the first forward
        self.rank, self.world = _world(group)
        self.params: list[_Param] = []
        self.parent: _Unit | None = None
        self.root: _Root | None = None       # set at its root's first forward
        self.input_grads: list[LazyBuffer] = []
        self.slot: Buffer | None = None      # the full buffer held while gathered
        self.private: Buffer | None = None   # the unit's own full buffer (the root's), else one of a pool
        self.private_view: HostView | None = None
        self.work: Any = None                # a gather in flight: (Work, staging)
        self.sync = True                     # set_requires_gradient_sync: reduce-scatter after backward
        self.held: Buffer | None = None      # full gradients accumulated while sync is off
        self.held_set: set[int] = set()      # (ids of the _Params in it)
        self.gathered = False
        self.dtype: Any = None
        self.device: Any = None
        self.S = self.F = self.H = 0
        self.compute: Any = None     # the full parameters' dtype
        self.np_dtype: Any = None
        self.gather_wire: Any = None
        self.reduce_wire: Any = None
        if not params:
            return
        first = params[0][1]
        self.dtype, self.device = first.dtype, first.device
        for places, p in params:
            if p.dtype != self.dtype or p.device != self.device:
                raise ValueError(
                    f"[distributed] fully_shard({self.name}): parameter {places[0][1]!r} is {p.dtype.name} "
                    f"on {p.device}, the unit's first is {self.dtype.name} on {self.device}; expected one "
                    f"dtype and device per unit. Fix: fully_shard the differing sub-module on its own")
        view_align = Device[self.device].allocator.view_align
        align = max(view_align // self.dtype.itemsize, 1)
        # the full parameters' dtype (mp_policy's param_dtype), the gradients' on the reduce-scatter, and
        # the host dtypes each collective carries (wire.BF16 words for bfloat16)
        self.compute = mp.param_dtype if mp is not None and mp.param_dtype is not None else self.dtype
        reduce = mp.reduce_dtype if mp is not None and mp.reduce_dtype is not None else self.compute
        falign = max(view_align // self.compute.itemsize, 1)
        # a header block ahead of the shard (and of its gradient): the unit's index and its square, sent
        # with every gather and reduce-scatter so each rank checks the others run the same unit
        self.H = -(-_HEADER // align) * align
        n, s_end, f_end = self.world, 0, 0
        values = []
        for places, p in params:
            if self.world > 1:
                dist.broadcast(p, 0, group)       # every rank starts from rank 0's values, as DDP
            q = _Param(places, p.shape, bool(p.requires_grad))
            q.c = -(-q.rows // n)
            q.shard_off, q.full_off = s_end, f_end
            s_end = -(-(s_end + q.c * q.rest) // align) * align
            f_end = -(-(f_end + q.numel) // falign) * falign
            self.params.append(q)
            values.append(p.numpy().reshape(-1))
        self.S, self.F = max(s_end, align), max(f_end, falign)
        self.np_dtype = host_dtype(self.dtype)
        self.gather_wire = wire_format(self.compute, "fully_shard") if self.compute != self.dtype else None
        self.reduce_wire = wire_format(reduce, "fully_shard") if reduce != self.dtype else None
        flat = np.zeros(self.H + self.S, self.np_dtype)
        for q, v in zip(self.params, values):
            for r, lo, count in q.pieces(self.world):
                if r == self.rank:
                    flat[self.H + q.shard_off:self.H + q.shard_off + count * q.rest] = \
                        v[lo * q.rest:(lo + count) * q.rest]
        shard, grads = (Buffer(self.device, self.H + self.S, self.dtype) for _ in range(2))
        self.shard_host = HostView(view_tensor(shard, 0, (self.H + self.S,)))
        self.grad_host = HostView(view_tensor(grads, 0, (self.H + self.S,)))
        self.shard_host.write(flat)           # (through the host's view: bfloat16 is narrowed there)
        self.grad_host.write(np.zeros_like(flat))
        for q in self.params:
            shape = (q.c, *q.shape[1:])
            q.shard = view_tensor(shard, self.H + q.shard_off, shape).requires_grad_(q.requires_grad)
            q.grad = view_tensor(grads, self.H + q.shard_off, shape)
            q.register(q.shard)
            _SHARD_OF[id(q.shard)] = q.shard
        holder = _SHARDS.setdefault(id(group), _Shards(group))
        hold_gradients([q.shard for q in self.params], holder)

    def __repr__(self) -> str:
        return f"unit {self.index} ({self.name})"

    def cast_inputs(self, args: Any, kwargs: Any) -> tuple[Any, Any]:
        """The forward's floating inputs in the policy's param_dtype (cast_forward_inputs)."""
        mp = self.mp
        if mp is None or mp.param_dtype is None or not mp.cast_forward_inputs:
            return args, kwargs
        return _each_tensor(args, lambda t: _cast(t, mp.param_dtype)), \
            _each_tensor(kwargs, lambda t: _cast(t, mp.param_dtype))

    def cast_output(self, out: Any) -> Any:
        """The forward's floating outputs in the policy's output_dtype."""
        mp = self.mp
        if mp is None or mp.output_dtype is None:
            return out
        return _each_tensor(out, lambda t: _cast(t, mp.output_dtype))

    def number(self, index: int) -> None:
        """The unit's index in its root, written into the shard's header (what its gathers carry)."""
        self.index = index
        if self.params:
            head = self.shard_host.read()
            head[:2] = (index, index * index)
            self.shard_host.write(head)

    def pool(self) -> _Slots | None:
        """The pool of full buffers this unit gathers into (None: its own buffer)."""
        root = self.root
        return root.pools.get(self.compute) if root is not None and self in root._pooled() else None

    def _staging(self, dtype: Any) -> _Staging:
        root = self.root
        if root is not None:
            return root.staging_for(dtype)
        return _Staging(self.world * (self.H + self.S), dtype)

    def _header(self, wire: Any) -> bytes:
        """The unit's header words as they travel in wire (None: the shard's own dtype)."""
        head = np.array([self.index, self.index * self.index], np.float32)
        words = to_wire(head, np.empty(2, wire)) if wire is not None else head.astype(self.np_dtype)
        return words.tobytes()

    # ------------------------------------------------------------ gather
    def start_gather(self) -> None:
        """Start the all-gather of every rank's shard into host staging (a host step on the group's
        worker thread); the full buffer is taken only when it is finished."""
        if self.gathered or self.work is not None or not self.params:
            return
        host_step(partial(self._start, self._staging(self.gather_wire or self.np_dtype)))

    def _start(self, staging: _Staging) -> None:
        import tg.distributed as dist
        self._log("gather")
        send = self.shard_host.read()            # header and shard: the memory itself on the CPU
        if self.world == 1 and self.gather_wire is None:
            self.work = (None, send, None)       # (nothing to gather: laid out from the shard itself)
            return
        width = self.H + self.S
        block = staging.take(self.world * width)
        if self.gather_wire is not None:         # narrowed to param_dtype: half the bytes on the wire
            send = to_wire(send, block[self.rank * width:(self.rank + 1) * width])
        work = dist.all_gather_into_tensor(block, send, group=self.group, async_op=True) \
            if self.world > 1 else None
        self.work = (work, block, staging)

    def finish_gather(self, slots: _Slots | None) -> None:
        """Wait for the gather (starting it if none is in flight), check every rank gathered this unit,
        and lay each parameter out whole in a full buffer (taken now from slots, or the unit's own); the
        full tensors read it again."""
        if self.gathered or not self.params:
            self.gathered = True
            return
        self.start_gather()
        if self.slot is None:
            if self.private is None and slots is None:
                self.private = Buffer(self.device, self.F, self.compute)
            self.slot = self.private if self.private is not None else slots.take()   # type: ignore[union-attr]
        if self.slot is self.private:
            if self.private_view is None:
                self.private_view = HostView(view_tensor(self.private, 0, (self.F,)))   # type: ignore[arg-type]
            view = self.private_view
        else:
            assert slots is not None
            view = slots.view(self.slot)
        host_step(partial(self._finish, view))
        self.gathered = True
        assert self.slot is not None
        for q in self.params:       # this forward's full tensors read again, from where they lie now
            if q.full is not None:
                q.real = view_tensor(self.slot, q.full_off, q.shape).lazydata.base.realized
                q.full.lazydata.base._realized = q.real

    def discard(self) -> None:
        """Wait for a gather started ahead that nothing used (the unit was not called after all) and drop
        it: a later call gathers afresh, from the shards as they are then (every rank started the same
        gather ahead, so every rank discards it alike)."""
        if self.work is not None and not self.gathered:
            host_step(self._discard)

    def _discard(self) -> None:
        work, block, staging = self.work
        self.work = None
        if work is not None:
            work.wait()
        if staging is not None:
            staging.give(block)

    def _log(self, what: str) -> None:
        if self.root is not None:
            self.root.events.append((what, self.index))

    def _finish(self, view: HostView) -> None:
        self._log("gathered")
        work, block, staging = self.work
        self.work = None
        if work is not None:
            work.wait()
        blocks = block.reshape(self.world, self.H + self.S)
        mine = self._header(self.gather_wire)
        wrong = [r for r in range(self.world) if blocks[r, :2].tobytes() != mine]
        if wrong:
            seen = [int(from_wire(blocks[r, :1])[0]) for r in wrong]
            raise DistributedError(
                f"[distributed] fully_shard: this rank (rank {self.rank}) gathers {self!r} while rank(s) "
                f"{wrong} gather unit(s) {seen}: the ranks run the units in different orders, or some rank "
                f"skipped one. Every rank must call the same FSDP units in the same order each step")
        out = view.read()
        for q in self.params:          # each rank's rows of each parameter, where they lie whole
            q.lay_out(blocks, self.H + q.shard_off, out, q.full_off, self.gather_wire is not None)
        view.write(out)
        if staging is not None:
            staging.give(block)

    def register_full(self, again: bool = False) -> None:
        """Leaf tensors over the full buffer registered on the modules: fresh ones (a new forward's), or
        with again this forward's own (a unit called twice in one forward, a recompute), so every use's
        gradient reaches the same tensors."""
        if not self.params:
            return
        assert self.slot is not None
        for q in self.params:
            if not again or q.full is None:
                q.full = view_tensor(self.slot, q.full_off, q.shape).requires_grad_(q.requires_grad)
                q.real = q.full.lazydata.base.realized
            q.register(q.full)

    def reshard(self, slots: _Slots | None) -> None:
        """The shards registered again; the full buffer back to the pool (the root keeps its own), and
        the full tensors refuse to be read until gathered again."""
        for q in self.params:
            q.register(q.shard)
            if q.full is not None and q.real is not None:
                q.full.lazydata.base._realized = _Resharded(q.real, repr(self))
        self.gathered = False
        if slots is not None and self.slot is not None and self.slot is not self.private:
            slots.free.append(self.slot)
        self.slot = None

    # ------------------------------------------------------------ gradients
    def compute_gradients(self, grad_slot: Buffer) -> list[_Param]:
        """This forward's gradients of the unit's parameters computed into grad_slot (laid out as the full
        buffer), with the gradients reaching the unit's inputs (the units before it start from those);
        the parameters that have one."""
        with_grad = [q for q in self.params if q.full is not None and q.full.grad is not None]
        held = self.held
        into = grad_slot
        if not self.sync:         # accumulated here, whole, until a backward with gradient sync
            if held is None:
                held = self.held = Buffer(self.device, self.F, self.compute).copyin(
                    np.zeros(self.F * self.compute.itemsize, np.uint8))
            into = held
        targets = []
        for q in self.params:
            new = q.full.grad if q.full is not None else None
            before = view_tensor(held, q.full_off, q.shape) if held is not None and id(q) in self.held_set \
                else None
            if new is None and (before is None or into is held):
                continue
            value = new if before is None else before if new is None else before + new
            targets.append(view_tensor(into, q.full_off, q.shape).assign(value))
            if q.full is not None:
                q.full.grad = None
            if into is held:
                self.held_set.add(id(q))
            elif q not in with_grad:
                with_grad.append(q)
        lbs = [t.lazydata for t in targets] + self.input_grads
        self.input_grads = []
        if lbs:
            realize(lbs)
        if self.sync:             # what was held is in grad_slot now
            self.held, self.held_set = None, set()
        host_step(partial(self._log, "computed"))
        return with_grad if self.sync else []

    def scatter_gradients(self, with_grad: list[_Param], grads: HostView, works: list,
                          accumulate: bool) -> None:
        """Start the reduce-scatter (mean) of the gradients in grads (the grad slot) into this rank's shard
        gradients, on the group's worker thread (a host step); at most two are in flight."""
        host_step(partial(self._scatter, with_grad, grads, works, accumulate, self._staging(self.np_dtype),
                          self._staging(self.reduce_wire or self.np_dtype)))

    def _scatter(self, with_grad: list[_Param], grads: HostView, works: list, accumulate: bool,
                 staging: _Staging, wire_staging: _Staging) -> None:
        import tg.distributed as dist
        self._log("scatter")
        full = grads.read()
        if self.world == 1:            # the shard is the whole parameter: the gradients are copied in
            mine = self.grad_host.read()
            for q in with_grad:
                part = full[q.full_off:q.full_off + q.numel]
                dst = mine[self.H + q.shard_off:self.H + q.shard_off + q.numel]
                dst[...] = dst + part if accumulate else part
            self.grad_host.write(mine)
            return
        while len(works) >= 2:         # (each holds a send block: two in flight, as ZeRO's slots)
            _Root._settle(works.pop(0))
        width = self.H + self.S
        send = staging.take(self.world * width).reshape(self.world, width)
        send.fill(0)
        send[:, 0], send[:, 1] = self.index, self.index * self.index
        for q in with_grad:
            at = self.H + q.shard_off
            for r, lo, count in q.pieces(self.world):
                first = q.full_off + lo * q.rest
                send[r, at:at + count * q.rest] = full[first:first + count * q.rest]
        if self.reduce_wire is not None:      # the gradients on the wire in reduce_dtype
            wide, send = send, to_wire(send, wire_staging.take(self.world * width)).reshape(self.world, width)
            staging.give(wide)
            staging = wire_staging
        into_place = not accumulate and self.grad_host.zero_copy and self.reduce_wire is None
        recv = self.grad_host.read() if into_place else np.empty(width, self.reduce_wire or self.np_dtype)
        work = dist.reduce_scatter_tensor(recv, send.reshape(-1), op=dist.ReduceOp.AVG, group=self.group,
                                          async_op=True)
        works.append((self, work, recv, send, staging, into_place, accumulate))

    def store_gradients(self, recv: np.ndarray, into_place: bool, accumulate: bool) -> None:
        if recv[:2].tobytes() != self._header(self.reduce_wire):
            raise DistributedError(
                f"[distributed] fully_shard: the ranks reduce-scattered the gradients of different units "
                f"({self!r} here): they ran the units in different orders, or some rank skipped one")
        if into_place:
            return
        values = from_wire(recv) if self.reduce_wire is not None else recv
        if accumulate:
            values = values + self.grad_host.read()
        self.grad_host.write(values)


class _Root:
    """What the outermost unit called keeps for a forward and its backward: the units in the order
    their forwards began, the full-buffer pool, and the backward hook."""

    def __init__(self, unit: _Unit):
        self.unit = unit
        self.units: list[_Unit] = []
        self.order: list[_Unit] = []         # this forward's units, in the order their forwards began
        self.previous: list[_Unit] = []      # the last forward's (what the next forward gathers ahead)
        self.pools: dict[DType, _Slots] = {}           # full buffers shared by units, per dtype
        self.recomputing = 0                 # activation checkpointing recomputing units (nesting depth)
        self.pending = False                 # a forward of this step made outputs that need a backward
        self.recomputed: list[_Unit] = []    # units a recompute gathered, not given back yet
        self.grad_slots: dict[DType, tuple[Buffer, HostView]] = {}
        self.staging: dict[Any, _Staging] = {}
        self.staging_size = 0
        self.active = False
        self._hook = watch_backward(self, "_after_backward")
        # what the host steps did, in order (also in TinyJit replays): ("gather", unit) when a gather
        # starts, ("gathered", unit) when it is waited for and laid out, ("computed", unit) when a unit's
        # forward or backward kernels have run, ("scatter", unit) when its reduce-scatter starts
        self.events: deque[tuple[str, int]] = deque(maxlen=1024)

    def setup(self, module: Module) -> None:
        """At the first forward: number the units under the root, link each to its enclosing unit and
        make the pool of full buffers."""
        stack: list[tuple[Module, _Unit | None]] = [(module, None)]
        while stack:
            m, parent = stack.pop()
            unit = m.__dict__.get("_fsdp_unit")
            if unit is not None:
                unit.parent = parent
                unit.number(len(self.units))
                self.units.append(unit)
                parent = unit
            stack.extend((c, parent) for c in reversed(list(m._modules.values())) if c is not None)
        pooled = self._pooled()
        with_params = [u for u in self.units if u.params]
        for dtype in {u.compute for u in with_params}:     # per dtype of the full parameters
            alike = [u for u in with_params if u.compute == dtype]
            # where each unit's full gradients are computed, in turn
            grads = Buffer(alike[0].device, max(u.F for u in alike), dtype)
            self.grad_slots[dtype] = (grads, HostView(view_tensor(grads, 0, (grads.size,))))
            if any(u in pooled for u in alike):
                self.pools[dtype] = _Slots(alike[0].device, dtype, max(u.F for u in alike if u in pooled))
        if with_params:
            self.staging_size = with_params[0].world * max(u.H + u.S for u in with_params)
        for u in self.units:
            u.root = self
            if u.params and u not in pooled and u.private is None:
                u.private = Buffer(u.device, u.F, u.compute)   # the root's (and unresharded units') own

    def staging_for(self, dtype: Any) -> _Staging:
        """The reused host blocks of one host dtype."""
        staging = self.staging.get(dtype)
        if staging is None:
            staging = self.staging[dtype] = _Staging(self.staging_size, dtype)
        return staging

    def _pooled(self) -> list[_Unit]:
        return [u for u in self.units if u is not self.unit and u.reshard_after_forward and u.params]

    # ------------------------------------------------------------ forward
    def recompute(self, module: Any, unit: _Unit, args: Any, kwargs: Any) -> Any:
        """A unit called again between this root's forward and its backward's end: activation
        checkpointing recomputing it in backward. The unit (and every unit inside it) is gathered
        again and computes with this forward's full tensors, whose gradients the checkpoint computes
        right after, so it stays gathered until the next recompute begins (backward runs the
        checkpointed segments one after another) or this backward reaches it; at most two units are
        gathered so."""
        held = [u for u in self.recomputed if u is not unit and u not in self._chain(unit)]
        for u in held:
            u.reshard(u.pool())
        self.recomputed = [u for u in self.recomputed if u not in held]
        args, kwargs = unit.cast_inputs(args, kwargs)
        self.recomputing += 1
        _ACTIVE.append(self)
        try:
            self._regather(unit)
            return unit.cast_output(super(FSDPModule, module).__call__(*args, **kwargs))   # type: ignore[misc]
        finally:
            _ACTIVE.pop()
            self.recomputing -= 1

    def _regather(self, unit: _Unit) -> None:
        """unit gathered again for a recompute, its forward's full tensors registered (not new ones)."""
        for u in self._chain(unit):
            if u is not self.unit:
                u.finish_gather(u.pool())
                u.register_full(again=True)
                if u not in self.recomputed:
                    self.recomputed.append(u)

    def before(self, unit: _Unit) -> None:
        if self.recomputing:
            self._regather(unit)
            return
        if unit is self.unit and not self.active:         # a new step (not a second forward before backward)
            self.active, self.pending = True, False
            self.order = []
            shards = [q.shard for u in self.units for q in u.params]
            if shards:
                shards[0].realize(*shards[1:])        # the optimizer's updates, before they are gathered
            for u in self.units:
                u.discard()                           # gathers ahead from before them
        again = unit in self.order
        if not again:
            self.order.append(unit)
        unit.finish_gather(unit.pool())
        unit.register_full(again)
        if unit in self.previous and config.TG_FSDP_PREFETCH:   # the last forward's next unit, ahead
            i = self.previous.index(unit) + 1
            if i < len(self.previous) and self.previous[i] in self._pooled():
                self.previous[i].start_gather()

    def after(self, unit: _Unit, out: Any) -> None:
        if self.recomputing:
            return            # its gradients are computed next, from these parameters
        if unit is self.unit:
            self.previous = list(self.order)
            self.pending = self.pending or any(t.requires_grad for t in _tensors(out))
            if not self.pending:
                # no backward will come (evaluation, no_grad): the root's parameters are given back now
                outs = list(_tensors(out))
                if outs:
                    outs[0].realize(*outs[1:])
                for u in self.units:
                    u.discard()
                    if u.gathered:
                        u.reshard(u.pool())
                self.active = False
            return
        if unit.reshard_after_forward:
            outs = list(_tensors(out))
            if outs:
                outs[0].realize(*outs[1:])      # everything of this forward that reads the unit's parameters
            host_step(partial(unit._log, "computed"))
            unit.reshard(unit.pool())

    # ------------------------------------------------------------ backward
    def _after_backward(self, root: Tensor) -> None:
        if not self.active or not any(q.full is not None and q.full.grad is not None
                                      for u in self.order for q in u.params):
            return
        self.active = self.pending = False
        self.recomputed = []
        # last unit first; then units this forward did not call holding gradients of earlier microbatches
        # (set_requires_gradient_sync), which are reduce-scattered now all the same
        order = list(reversed(self.order)) + [u for u in self.units
                                              if u.held is not None and u.sync and u not in self.order]
        used = self._agree_used()
        accumulate = {id(u): any(q.shard.grad is not None for q in u.params) for u in order}
        self._prepare_accumulation(order, accumulate)
        works: list = []
        for i, unit in enumerate(order):
            self._backward(unit, order[i + 1:], unit.sync and any(used[id(q)] for q in unit.params), works,
                           accumulate[id(unit)])
        host_step(partial(self._stored, works))
        for unit in order:
            for q in unit.params:
                if unit.sync and used[id(q)]:
                    q.shard.grad = q.grad
                elif unit.sync and not accumulate[id(unit)]:
                    q.shard.grad = None
                q.full = q.real = None
            if unit.gathered:
                unit.reshard(unit.pool())
        for unit in self.units:
            unit.discard()               # a gather ahead of a unit nothing called

    @staticmethod
    def _prepare_accumulation(order: list[_Unit], accumulate: dict[int, bool]) -> None:
        """Where a unit's gradients are added to those already there, its gradient memory holds exactly
        what each shard's .grad says first: zeros for one that is None, the values of one a user replaced
        (zero_grad(set_to_none=False) gives new zeros tensors)."""
        writes = []
        for unit in order:
            if not (unit.sync and accumulate[id(unit)]):
                continue
            for q in unit.params:
                if q.shard.grad is None:
                    writes.append(q.grad.assign(Tensor.zeros(*q.grad.shape, dtype=q.grad.dtype,
                                                             device=q.grad.device)))
                elif q.shard.grad is not q.grad:
                    writes.append(q.grad.assign(q.shard.grad.detach()))
        if writes:
            writes[0].realize(*writes[1:])

    def _backward(self, unit: _Unit, rest: list[_Unit], scatter: bool, works: list, accumulate: bool) -> None:
        """One unit's backward: gathered again (with the units enclosing it; the next one started ahead),
        its gradients and its inputs' computed, resharded, and its gradients reduce-scattered when some
        rank has one (every rank then takes part)."""
        for u in self._chain(unit):
            u.finish_gather(u.pool())
        ahead = next((u for u in rest if u.params and not u.gathered), None)
        if ahead is not None and config.TG_FSDP_PREFETCH:
            ahead.start_gather()
        slot = self.grad_slots.get(unit.compute)
        with_grad = unit.compute_gradients(slot[0]) if slot is not None else []
        if unit in self._pooled() and not any(unit in self._chain(u) for u in rest):
            unit.reshard(unit.pool())
        if scatter:
            assert slot is not None
            unit.scatter_gradients(with_grad, slot[1], works, accumulate)

    def _chain(self, unit: _Unit) -> list[_Unit]:
        """unit and the units enclosing it, outermost first (their parameters are read around it)."""
        chain = []
        u: _Unit | None = unit
        while u is not None:
            chain.append(u)
            u = u.parent
        return chain[::-1]

    @staticmethod
    def _settle(item: tuple) -> None:
        """Wait for one reduce-scatter, store its result, give its send block back."""
        unit, work, recv, send, staging, into_place, accumulate = item
        work.wait()
        staging.give(send)
        unit.store_gradients(recv, into_place, accumulate)

    @staticmethod
    def _stored(works: list) -> None:
        while works:          # (a TinyJit replay runs this step again with the same list)
            _Root._settle(works.pop(0))

    def _agree_used(self) -> dict[int, bool]:
        """Which parameters got a gradient on some rank, and a check that every rank ran the same units
        this step: one small all-gather of each rank's bits and a checksum of its units' order."""
        import tg.distributed as dist
        params = [q for u in self.units for q in u.params]
        bits = np.array([q.full is not None and q.full.grad is not None or id(q) in u.held_set
                         for u in self.units for q in u.params], bool)
        order = ",".join(str(u.index) for u in self.order).encode()
        words = np.concatenate([np.array([zlib.crc32(order)], np.uint32).view(np.uint8),
                                np.packbits(bits)]).astype(np.uint8)
        world = self.unit.world
        if world > 1:
            every = np.zeros((world, words.size), np.uint8)
            host_step(partial(dist.all_gather_into_tensor, every.reshape(-1), words, self.unit.group))
        else:
            every = words[None]
        # host_step ran the gather now (eager) or at this point of a replay: read after it
        prints = every[:, :4].copy().view(np.uint32).reshape(-1)
        odd = [r for r in range(world) if prints[r] != prints[self.unit.rank]]
        if odd:
            raise DistributedError(
                f"[distributed] fully_shard: rank(s) {odd} ran other FSDP units in this step's forward than "
                f"rank {self.unit.rank} ({[u.index for u in self.order]}); every rank must call the same "
                f"units in the same order")
        anywhere = np.unpackbits(np.bitwise_or.reduce(every[:, 4:], axis=0), count=len(params)).astype(bool)
        return {id(q): bool(b) for q, b in zip(params, anywhere)}


def _each_tensor(value: Any, fn: Any) -> Any:
    """value with fn applied to each Tensor in it (through lists, tuples and dicts); the rest as is."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_each_tensor(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _each_tensor(v, fn) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[Tensor]:
    found: list[Tensor] = []
    _each_tensor(value, found.append)
    return found


def _cast(t: Tensor, dtype: DType) -> Tensor:
    return t.cast(dtype) if t.dtype.is_float and t.dtype != dtype else t


def _stash(t: Tensor, unit: _Unit) -> Tensor:
    from tg.core.mixin.base import apply
    return apply(_Stash, t, unit=unit) if t.requires_grad else t


class FSDPModule:
    """What fully_shard adds to a module's class (torch's FSDPModule): its forward gathers the unit's
    parameters first and reshards them after; `unshard()` / `reshard()` by hand (evaluation,
    generation), `set_reshard_after_forward`."""

    _fsdp_unit: _Unit
    _fsdp_root: _Root | None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        unit = self._fsdp_unit
        root = _ACTIVE[-1] if _ACTIVE else None
        if root is None and unit.root is not None and unit.root.active and unit is not unit.root.unit:
            return unit.root.recompute(self, unit, args, kwargs)     # activation checkpointing's, in backward
        if root is None:
            root = self.__dict__.get("_fsdp_root")
            if root is None:
                root = _Root(unit)
                object.__setattr__(self, "_fsdp_root", root)
                root.setup(self)        # type: ignore[arg-type]
        args, kwargs = unit.cast_inputs(args, kwargs)
        if unit is not root.unit:
            stash = partial(_stash, unit=unit)
            args, kwargs = _each_tensor(args, stash), _each_tensor(kwargs, stash)
        _ACTIVE.append(root)
        try:
            root.before(unit)
            out = unit.cast_output(super().__call__(*args, **kwargs))     # type: ignore[misc]
            root.after(unit, out)
        finally:
            _ACTIVE.pop()
        return out

    def unshard(self) -> None:
        """Gather the unit's parameters and register them whole (for evaluation or generation outside
        a forward); `reshard()` gives the memory back."""
        unit = self._fsdp_unit
        unit.finish_gather(unit.pool())
        unit.register_full()

    def reshard(self) -> None:
        unit = self._fsdp_unit
        unit.reshard(unit.pool())

    def set_reshard_after_forward(self, value: bool) -> None:
        self._fsdp_unit.reshard_after_forward = bool(value)

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse: bool = True) -> None:
        """torch's gradient accumulation without communication: while False, a backward adds this unit's
        (and, with recurse, every unit's inside it) whole gradients into a buffer of its own (a unit's
        parameters' size each) and reduce-scatters nothing; the next backward with it True adds them in
        and reduce-scatters the sum. Every rank must set it alike."""
        for unit in units_of(self) if recurse else [self._fsdp_unit]:
            unit.sync = bool(requires_gradient_sync)


_ACTIVE: list[_Root] = []          # the roots whose forward is running, innermost last
_CLASSES: dict[type, type] = {}
# the tensors units were made from, while something still holds them: a parent unit finding one among
# its own parameters found a parameter shared across units
_ORIGINALS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_SHARD_OF: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()   # units' shards


def fully_shard(module: Module, *, reshard_after_forward: bool = True,
                mp_policy: MixedPrecisionPolicy | None = None, group: Any = None) -> Module:
    """Make module a unit of ZeRO-3 / FSDP (torch.distributed.fsdp.fully_shard): its parameters not
    already in a unit (apply it to sub-modules first, bottom-up) are sharded 1/N per rank along their
    first dim and gathered only around its forward and its backward. Returns the module (its class
    becomes FSDP<Class>, an FSDPModule)."""
    if not isinstance(module, Module):
        raise TypeError(f"[distributed] fully_shard: expected a tg.nn.Module, got {type(module).__name__}")
    if "_fsdp_unit" in module.__dict__:
        raise ValueError(f"[distributed] fully_shard: {type(module).__name__} is a unit already (fully_shard "
                         f"was called on it twice). Fix: call fully_shard once per module")
    if mp_policy is not None and not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"[distributed] fully_shard: mp_policy must be a MixedPrecisionPolicy, got "
                        f"{type(mp_policy).__name__}")
    params = _collect(module)
    unit = _Unit(module, list(params.values()), group, reshard_after_forward, mp_policy)
    for _, p in params.values():
        _ORIGINALS[id(p)] = p
    cls = type(module)
    new = _CLASSES.get(cls)
    if new is None:
        new = _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    module.__class__ = new
    object.__setattr__(module, "_fsdp_unit", unit)
    object.__setattr__(module, "_fsdp_root", None)
    return module


def _collect(module: Module) -> dict[int, tuple[list[tuple[Module, str]], Tensor]]:
    """module's parameters that no unit inside it holds, each once with every (module, name) it is
    registered under (a tied parameter has several); a parameter a unit inside holds too is refused."""
    params: dict[int, tuple[list[tuple[Module, str]], Tensor]] = {}
    for path, m in module.named_modules():
        if _inside_unit(module, path):
            continue
        for name, p in m._parameters.items():
            if p is None:
                continue
            why = _taken_by_a_unit(p)
            if why is not None:
                where = f"{path}.{name}" if path else name
                raise ValueError(f"[distributed] fully_shard({type(module).__name__}): parameter {where!r} "
                                 f"{why}")
            params.setdefault(id(p), ([], p))[0].append((m, name))   # a tied parameter: one, named twice
    return params


def _taken_by_a_unit(p: Tensor) -> str | None:
    """Why p cannot join a new unit (None: it can): a shard of a unit above, or a parameter of one below."""
    if _SHARD_OF.get(id(p)) is p:
        return ("is already a shard of a unit made by fully_shard on a module enclosing this one. Fix: apply "
                "fully_shard bottom-up: the sub-modules first (a transformer's blocks), then their parents, "
                "the whole model last")
    if _ORIGINALS.get(id(p)) is p:
        return ("is also a parameter of a unit inside it (a parameter shared across units, e.g. tied weights "
                "split between them). Fix: put every module that uses it in one unit (fully_shard their "
                "common parent only)")
    return None


def _inside_unit(module: Module, path: str) -> bool:
    """Whether the sub-module at path is, or lies inside, another unit under module."""
    m = module
    for part in path.split(".") if path else ():
        m = m._modules[part]          # type: ignore[assignment]
        if "_fsdp_unit" in m.__dict__:
            return True
    return False


# ---------------------------------------------------------------- checkpoints

def units_of(model: Any) -> list[_Unit]:
    """The FSDP units in model (pre-order), [] when it has none."""
    if not isinstance(model, Module):
        return []
    return [m.__dict__["_fsdp_unit"] for _, m in model.named_modules() if "_fsdp_unit" in m.__dict__]


def _unit_values(unit: _Unit) -> dict[int, np.ndarray]:
    """Every parameter of unit whole, as host arrays in its own dtype (the master weights, whatever
    dtype the unit computes in), by id of its _Param: every rank's shard gathered (every rank takes
    part) into one host block, so no more than one unit is held for this."""
    import tg.distributed as dist
    if not unit.params:
        return {}
    send = unit.shard_host.read()
    block = np.empty(unit.world * send.size, unit.np_dtype)
    if unit.world > 1:
        dist.all_gather_into_tensor(block, send, group=unit.group)
    else:
        block[:] = send
    blocks = block.reshape(unit.world, send.size)
    out = {}
    for q in unit.params:
        whole = np.empty(q.numel, unit.np_dtype)
        q.lay_out(blocks, unit.H + q.shard_off, whole, 0)
        out[id(q)] = whole.reshape(q.shape)
    return out


def _by_shard(units: list[_Unit]) -> dict[int, tuple[_Unit, _Param]]:
    """id of each unit parameter's tensors (its shard, and its whole tensor while gathered) -> the unit
    and the parameter."""
    out = {id(q.shard): (u, q) for u in units for q in u.params}
    out.update({id(q.full): (u, q) for u in units for q in u.params if q.full is not None})
    return out


def _names(model: Module, units: list[_Unit]) -> dict[int, str]:
    """id of each shard -> the parameter's name in model (its first, for a tied one)."""
    path = {id(m): name for name, m in model.named_modules()}
    out = {}
    for u in units:
        for q in u.params:
            owner, name = q.places[0]
            out[id(q.shard)] = f"{path[id(owner)]}.{name}" if path[id(owner)] else name
    return out


def save_full(model: Module, path: Any, rank: int, metadata: dict[str, str] | None = None) -> None:
    """The whole model's state dict into one safetensors file at path (rank 0 writes; every rank must
    call it): unit by unit as the names come, each gathered, written and resharded before the next, so
    no rank ever holds more than one unit's full parameters (on the device or the host)."""
    from tg.nn.state import Deferred, get_state_dict, safe_save
    shard_of = _by_shard(units_of(model))
    state = get_state_dict(model)
    runs: list[_Unit] = []            # the units in the order the names come (a unit again: again)
    for t in state.values():
        owner = shard_of.get(id(t))
        if owner is not None and (not runs or runs[-1] is not owner[0]):
            runs.append(owner[0])
    if rank != 0:
        for u in runs:
            _unit_values(u)           # the same gathers, in the same order, as rank 0's writes
        return
    held: list[Any] = [None, {}]      # the unit whose values are held, and its values

    def value(unit: _Unit, q: _Param) -> np.ndarray:
        if held[0] is not unit:
            held[0], held[1] = unit, {}           # the unit before is written: one unit at a time
            held[1] = _unit_values(unit)
        return held[1][id(q)]
    tensors: dict[str, Any] = {}
    for name, t in state.items():
        owner = shard_of.get(id(t))
        # a buffer (running statistics) is the same on every rank: written as it is
        tensors[name] = t if owner is None else Deferred(owner[1].shape, t.dtype, partial(value, *owner))
    safe_save(tensors, path, metadata=metadata)


def load_full(model: Module, path: Any) -> None:
    """Each rank's rows of every sharded parameter, and the buffers, from a whole-model file save_full
    wrote (at any world size): only this rank's rows are read."""
    from tg.nn.state import get_state_dict, load_state_dict, safe_read_rows, safe_shapes
    units = units_of(model)
    shard_of = _by_shard(units)
    state = get_state_dict(model)
    saved = safe_shapes(path)
    rest = {}
    done: set[int] = set()
    wrong = [f"{name}: saved {list(saved[name])}, here {list(shard_of[id(t)][1].shape)}"
             for name, t in state.items() if id(t) in shard_of and name in saved
             and tuple(saved[name]) != shard_of[id(t)][1].shape]
    missing = [name for name, t in state.items() if id(t) in shard_of and name not in saved]
    if wrong or missing:
        found = "; ".join(wrong + [f"{m}: missing" for m in missing])
        raise ValueError(f"[distributed] load_checkpoint: {path} does not fit this model: {found}. Fix: "
                         f"build the model as it was when saved")
    for name, t in state.items():
        owner = shard_of.get(id(t))
        if owner is None:
            rest[name] = t
            continue
        u, q = owner
        if id(q) in done:
            continue
        done.add(id(q))
        first, count = q.rows_of(u.rank)
        rows = np.zeros((q.c, *q.shape[1:]), u.np_dtype)
        rows[:count] = safe_read_rows(path, name, first, count).reshape((count, *q.shape[1:]))
        flat = u.shard_host.read()
        flat[u.H + q.shard_off:u.H + q.shard_off + q.c * q.rest] = rows.reshape(-1)
        u.shard_host.write(flat)
    # the buffers (running statistics) only, not the whole file: strict, so a buffer missing raises
    values = {k: safe_read_rows(path, k, 0, saved[k][0] if saved[k] else 1).reshape(saved[k])
              for k in rest if k in saved}
    if rest:
        load_state_dict(rest, values)


def optimizer_shard(model: Module, optimizer: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """What a rank saves of an optimizer over FSDP shards: the step and group options, and each
    parameter's state rows this rank holds (padding cut off) by the parameter's name; and metadata
    saying which rows those are."""
    units = units_of(model)
    names, shard_of = _names(model, units), _by_shard(units)
    flat = optimizer.flat_state_dict()
    out: dict[str, Any] = {k: v for k, v in flat.items() if not k.startswith("state.")}
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(optimizer.params):
        owner = shard_of.get(id(p))
        if owner is None:
            raise ValueError(f"[distributed] save_checkpoint: the optimizer's parameter {i} is no FSDP shard "
                             f"of the model; expected an optimizer made from model.parameters() after "
                             f"fully_shard")
        u, q = owner
        first, count = q.rows_of(u.rank)
        rows[names[id(p)]] = [first, count]
        for key, value in optimizer.state_of(i).items():
            out[f"state.{names[id(p)]}.{key}"] = value[:count] if count < q.c else value
    return out, {"rows": json.dumps(rows)}


def load_optimizer_shards(model: Module, optimizer: Any, paths: list[str]) -> None:
    """Fill an optimizer over FSDP shards (this world size) from the files optimizer_shard's output was
    saved in (any world size): each state tensor's rows gathered from the files that hold them."""
    from tg.nn.state import safe_load, safe_load_metadata, safe_read_rows
    units = units_of(model)
    names, shard_of = _names(model, units), _by_shard(units)
    held = [(path, json.loads(safe_load_metadata(path)["rows"])) for path in paths]
    first_file = safe_load(paths[0])
    new: dict[str, Any] = {k: v for k, v in first_file.items() if not k.startswith("state.")}
    for i, p in enumerate(optimizer.params):
        u, q = shard_of[id(p)]
        name = names[id(p)]
        lo, mine = q.rows_of(u.rank)
        hi = lo + mine
        for key, now in optimizer.state_of(i).items():
            rows = np.zeros((q.c, *q.shape[1:]), host_dtype(now.dtype))
            for path, ranges in held:
                if name not in ranges:
                    raise ValueError(f"[distributed] load_checkpoint: {path} holds no state of parameter "
                                     f"{name!r}: the model changed since the checkpoint")
                first, count = ranges[name]
                a, b = max(lo, first), min(hi, first + count)
                if a < b:
                    got = safe_read_rows(path, f"state.{name}.{key}", a - first, b - a)
                    rows[a - lo:b - lo] = got.reshape((b - a, *q.shape[1:]))
            new[f"state.{i}.{key}"] = rows
    optimizer.load_state_dict(new)
