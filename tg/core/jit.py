"""TinyJit: run a function eagerly once, capture the kernels it launches on the second call, and
from the third call on replay that kernel list with the new inputs' buffers swapped in: no graph
building, scheduling or Python per op in steady state.

    >>> from tg import Tensor, TinyJit
    >>> @TinyJit
    ... def step(x: Tensor) -> Tensor:
    ...     return (x * 2 + 1).sum()
    >>> [step(Tensor([1.0, 2.0])).item() for _ in range(4)]
    [8.0, 8.0, 8.0, 8.0]

Rules: tensors the function reads must be passed as arguments (or be state it updates in place,
like parameters and optimizer buffers); host data created inside the function is frozen at
capture. Reading tensor values to the host inside it (`.numpy()`, `.item()`, `if t:`, `x[mask]`,
`nonzero`, `unique`, any value-dependent shape) raises "[jit] ...", from the first call: a replay runs
no Python, so it could only repeat the first values. Arguments of another shape, dtype or device get
their own capture (a retrace). As in tinygrad, replays write into the same output buffers and return
the same Tensor objects: copy (`.numpy()`, `.item()`, `.contiguous()`) what you want to keep from one
call to the next.

Host work between kernels (a collective on gradient buffers, say) is recorded with `capture.host_step(fn)`:
fn runs now and again at the same point of every replay, so it must touch only buffers that stay
the same from call to call (realized tensors the function keeps, as DDP's gradient buckets are).
Python decisions are made once, at capture: capture a whole training step (zero_grad, forward,
backward, step), not a piece whose behaviour depends on state outside it (DDP's no_sync, ZeRO's
accumulate-or-overwrite after zero_grad).
"""
from __future__ import annotations

import functools
import gc
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from tg import config
from tg.core import trace
from tg.core.capture import Capture, CapturedCall, capturing, tracing_call
from tg.core.device import Buffer, GlobalCounters
from tg.core.realize import flush_assigns
from tg.core.tensor import Tensor

ReturnType = TypeVar("ReturnType")


@dataclass
class _Replay:
    calls: list[CapturedCall]
    input_slots: list[tuple[int, int, int]]   # (call index, buffer position, input index)
    ret: Any
    fast: list[tuple[Callable | None, list]] = field(default_factory=list)
    kernels: int = 0      # per replay, for GlobalCounters: launches (copies too) and their own counts
    flops: int = 0
    mem_bytes: int = 0

    def __post_init__(self) -> None:
        infos = [getattr(c.prog, "info", None) for c in self.calls if c.kind == "kernel"]
        self.kernels = sum(c.kind != "host" for c in self.calls)
        self.flops = sum(getattr(i, "flops", 0) for i in infos)
        self.mem_bytes = sum(getattr(i, "mem_bytes", 0) for i in infos)


def _input_tensors(args: tuple, kwargs: dict) -> list[Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]


def _signature(args: tuple, kwargs: dict) -> tuple:
    sig: list[tuple] = []
    for a in (*args, *kwargs.items()):
        value = a[1] if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) else a
        if isinstance(value, Tensor):
            sig.append(("T", value.shape, value.dtype, value.device))
        else:
            try:
                hash(value)
                sig.append(("V", value))
            except TypeError:
                sig.append(("V", id(value)))
    return tuple(sig)


class TinyJit(Generic[ReturnType]):
    """`keep_inputs=False` lets go of the input buffers after each call (the captured launch list
    otherwise holds the last call's inputs until the next call): for inputs that are freed between
    calls, as an optimizer's gradients are."""

    def __init__(self, fn: Callable[..., ReturnType], keep_inputs: bool = True):
        self.fn = fn
        self.keep_inputs = keep_inputs
        self.calls_seen: dict[tuple, int] = {}
        self.replays: dict[tuple, _Replay] = {}
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def reset(self) -> None:
        self.calls_seen.clear()
        self.replays.clear()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        flush_assigns()
        inputs = _input_tensors(args, kwargs)
        for t in inputs:
            if not t.lazydata.is_base or t.lazydata.op is not None and t.lazydata.realized is None:
                t.lazydata = t.lazydata.contiguous()
        if inputs:
            inputs[0].realize(*inputs[1:])
        # which inputs share memory is part of the signature: a capture binds each buffer to one input
        first: dict[int, int] = {}
        shared = tuple(first.setdefault(id(t.lazydata.base.realized), i) for i, t in enumerate(inputs))
        key = (_signature(args, kwargs), shared)
        replay = self.replays.get(key)
        if replay is not None:
            return self._replay(replay, inputs)
        seen = self.calls_seen.get(key, 0)
        self.calls_seen[key] = seen + 1
        name = getattr(self.fn, "__name__", "fn")
        if seen == 0:
            with tracing_call(name):
                ret = self.fn(*args, **kwargs)        # warm-up: compile everything eagerly
            flush_assigns()
            return ret
        with capturing(Capture()) as capture, tracing_call(name):
            ret = self.fn(*args, **kwargs)
            outs = [t for t in _flatten(ret) if isinstance(t, Tensor)]
            if outs:
                outs[0].realize(*outs[1:])
            flush_assigns()
        in_bufs = {id(t.lazydata.base.realized): i for i, t in enumerate(inputs)}
        if any(id(t.lazydata.base.realized) in in_bufs for t in outs):
            raise ValueError(
                f"[jit] {getattr(self.fn, '__name__', 'fn')} returns one of its inputs (or a view of "
                f"it) unchanged; a replay would hand back the captured call's tensor. Fix: return "
                f"a computed value, e.g. x.contiguous() for a copy, or call the function without "
                f"TinyJit"
            )
        saved = _share_memory(capture.calls)
        slots = [(ci, bi, in_bufs[id(b)]) for ci, call in enumerate(capture.calls)
                 for bi, b in enumerate(call.bufs) if id(b) in in_bufs]
        rep = _Replay(capture.calls, slots, ret)
        rep.fast = [
            (
                c.prog.replay_fn(c.bufs) if c.kind == "kernel" and hasattr(c.prog, "replay_fn") else None,
                c.bufs,
            )
            for c in capture.calls
        ]
        self.replays[key] = rep
        if config.DEBUG >= 1:
            print(f"[jit] captured {len(capture.calls)} launches for {getattr(self.fn, '__name__', 'fn')}; "
                  f"{saved / 2**20:.1f} MiB of intermediates share memory")
        self._let_go(rep)
        return ret

    def _let_go(self, rep: _Replay) -> None:
        if self.keep_inputs:
            return
        for ci, bi, _ in rep.input_slots:
            rep.calls[ci].bufs[bi] = None   # type: ignore[call-overload]  # set again by the next replay
            rep.fast[ci] = (None, rep.calls[ci].bufs)

    def _replay(self, rep: _Replay, inputs: list[Tensor]) -> Any:
        changed: set[int] = set()
        for ci, bi, ii in rep.input_slots:
            buf = inputs[ii].lazydata.base.realized
            assert buf is not None
            if rep.calls[ci].bufs[bi] is not buf:
                rep.calls[ci].bufs[bi] = buf
                changed.add(ci)
        for ci in changed:
            call = rep.calls[ci]
            if hasattr(call.prog, "replay_fn"):
                rep.fast[ci] = (call.prog.replay_fn(call.bufs), call.bufs)
        if trace.ON:
            _run_traced(rep, f"TinyJit replay {getattr(self.fn, '__name__', 'fn')}")
        else:
            _run(rep)
        GlobalCounters.kernel_count += rep.kernels
        GlobalCounters.global_ops += rep.flops
        GlobalCounters.global_mem += rep.mem_bytes
        if config.DEBUG >= 1:
            print(f"[jit] replayed {len(rep.calls)} kernels of {getattr(self.fn, '__name__', 'fn')}")
        self._let_go(rep)
        return rep.ret


def _run(rep: _Replay) -> None:
    for (fast, bufs), call in zip(rep.fast, rep.calls):
        if call.kind == "copy":
            bufs[0].copyin(bufs[1].numpy())
        elif call.kind == "host":
            call.prog()
        elif fast is not None:
            fast()
        else:
            call.prog(bufs)


def _run_traced(rep: _Replay, name: str) -> None:
    """A replay while a profile records: each kernel recorded, waited for (trace.launch), or where the
    device's calls return once the kernel ran (the CPU's), its bound call timed as it is."""
    t0, now = trace.now(), trace.now
    timed: list[tuple[str, int, int, str, int, int]] = []
    for (fast, bufs), call in zip(rep.fast, rep.calls):
        if call.kind == "copy":
            bufs[0].copyin(bufs[1].numpy())
        elif call.kind == "host":
            trace.kernels(timed)        # in order: a host step may record too
            timed = []
            call.prog()
        else:
            info = getattr(call.prog, "info", None)
            flops, nbytes = getattr(info, "flops", 0), getattr(info, "mem_bytes", 0)
            if fast is not None and call.prog.synchronous:
                start = now()
                fast()
                timed.append((call.prog.name, start, now() - start, bufs[0].device, flops, nbytes))
            else:
                trace.launch(call.prog, bufs, bufs[0].device, flops, nbytes)
    trace.kernels(timed)
    trace.span(name, "jit", t0, None, {"launches": len(rep.calls)})


def _share_memory(calls: list[CapturedCall]) -> int:
    """Let intermediate buffers whose lifetimes do not overlap share memory in the replays.

    A buffer is an intermediate when a kernel of the capture writes it before anything reads it
    (host data frozen into the capture is read first), nothing but the capture refers to it
    (not an input, a parameter, optimizer state, a returned tensor or a host step's view) and it is
    memory of its own (not a Buffer.view of another's). Its lifetime is
    the span of calls that use it; buffers of one device and byte size whose spans are disjoint are
    mapped onto one. Returns the bytes saved (the replaced buffers are freed)."""
    gc.collect()   # lazy buffers that died in reference cycles must not count as users
    span, by_id, count, written_first = _usage(calls)
    copies = {id(x) for call in calls if call.kind != "kernel" for x in call.bufs}
    # references to an intermediate: one per appearance in a call, by_id's and getrefcount's argument
    # (a view of another buffer's memory, Buffer.view, never is: that memory is its owner's, which host
    # steps and later calls reach through other Buffer objects, as FSDP's gradient slot is)
    internal = [by_id[key] for key in list(by_id) if key in written_first and key not in copies
                and by_id[key].owner is None and sys.getrefcount(by_id[key]) == count[key] + 2]
    internal.sort(key=lambda x: span[id(x)][0])
    free: dict[tuple[str, int], list[tuple[int, Buffer]]] = {}   # (device, bytes) -> (last use, buffer)
    mapping: dict[int, Buffer] = {}
    saved = 0
    for buf in internal:
        first, last = span[id(buf)]
        pool = free.setdefault((buf.device, buf.nbytes), [])
        reuse = next((i for i, (end, _) in enumerate(pool) if end < first), None)
        if reuse is None:
            pool.append((last, buf))
            continue
        target = pool[reuse][1]
        pool[reuse] = (last, target)
        mapping[id(buf)] = target
        saved += buf.nbytes
    for call in calls:
        call.bufs = [mapping.get(id(x), x) for x in call.bufs]
    return saved


def _usage(
    calls: list[CapturedCall],
) -> tuple[dict[int, list[int]], dict[int, Buffer], dict[int, int], set[int]]:
    """Per buffer (by id): the first and last call using it, the buffer, how many times the calls
    list it, and whether a kernel writes it before anything reads it."""
    span: dict[int, list[int]] = {}
    by_id: dict[int, Buffer] = {}
    count: dict[int, int] = {}
    written_first: set[int] = set()
    for ci, call in enumerate(calls):
        for pos, b in enumerate(call.bufs):
            if id(b) not in by_id and call.kind == "kernel" and pos == 0:
                written_first.add(id(b))
            by_id[id(b)] = b
            count[id(b)] = count.get(id(b), 0) + 1
            span.setdefault(id(b), [ci, ci])[1] = ci
    return span, by_id, count, written_first


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flatten(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flatten(v)]
    return [x]
