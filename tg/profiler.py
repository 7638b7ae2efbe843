"""What a run does, as torch.profiler shows it: `profile` (a context manager with torch's `schedule`,
`record_function` regions, `key_averages().table()` and `export_chrome_trace`), reading the event log
that tg's own code writes while a profile records (tg/core/trace.py):

- `kernel`: every kernel launch, named as DEBUG=2 prints it, waited for, with its own FLOP and byte counts;
- `lower`: scheduling, compiling (kernels found cached, lowered, recalled from the lowering cache) and
  the C compiler's builds;
- `module`, `autograd`, `optimizer`, `jit`, `host step`: nn.Module calls, backward's graph building, an
  optimizer step's gradient and update phases, TinyJit replays, host steps;
- `collective` (the transfer, on the group's thread, with group, ranks, dtype, count, bytes and how long
  it queued) and `collective wait` (a Work.wait that blocked);
- the `memory` counter: bytes of device buffers alive, at every allocation and free.

While no profile records, nothing is recorded (each site reads one flag). Under tglaunch --profile DIR
(TG_PROFILE=DIR) every rank profiles its whole run and writes DIR/trace.rank<R>.json at exit; the
launcher merges them (merge_traces) into DIR/trace.json, one process row per rank on the wall clock.

    >>> import tg
    >>> with profile() as prof:
    ...     with record_function("double"):
    ...         _ = (tg.Tensor([1.0, 2.0]) * 2).tolist()
    >>> "double" in {e.name for e in prof.events()}
    True
"""
from __future__ import annotations

import atexit
import enum
import json
import os
import socket
import time
from contextlib import ContextDecorator
from dataclasses import dataclass
from typing import Any, Callable

from tg import config
from tg.core import trace
from tg.nn.state import write_atomic

__all__ = ["profile", "record_function", "schedule", "ProfilerAction", "ProfilerActivity", "Event",
           "merge_traces", "tensorboard_trace_handler", "phase", "phase_seconds", "synchronize_phases"]


def phase(name: str) -> str:
    """Count the main thread's time from now on to phase `name` (a training loop marks "data",
    "forward+backward", ...; tg itself marks "optimizer" inside Optimizer.step, also in a TinyJit
    replay, and "communication" while the main thread waits in a collective). Always on: a clock
    read a mark. Returns the phase before.

        >>> _ = phase("data"); _ = phase("other"); phase_seconds()["data"] > 0
        True
    """
    return trace.phase(name)


def phase_seconds() -> dict[str, float]:
    """Seconds the main thread has spent in each phase since the process started (two readings around
    a step give the step's split); the current phase's time counts up to its last mark."""
    return {k: v / 1e9 for k, v in trace.phase_ns.items()}


class ProfilerActivity(enum.Enum):
    """Accepted for torch's signature; tg records host and device work in one log either way."""
    CPU = "cpu"
    CUDA = "cuda"


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Callable[[int], ProfilerAction]:
    """torch's schedule: skip `skip_first` steps, then cycles of `wait` idle steps, `warmup` steps
    recorded and thrown away, `active` steps recorded (the last one saves: on_trace_ready runs after it);
    `repeat` cycles (0: forever).

        >>> s = schedule(wait=1, warmup=1, active=2)
        >>> [s(i).name for i in range(5)]
        ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE', 'NONE']
    """
    if wait < 0 or warmup < 0 or active < 1 or repeat < 0 or skip_first < 0:
        raise ValueError(f"[profiler] schedule: wait, warmup, repeat, skip_first >= 0 and active >= 1 "
                         f"expected, got wait={wait} warmup={warmup} active={active} repeat={repeat} "
                         f"skip_first={skip_first}")

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat and step >= cycle * repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if at == cycle - 1 else ProfilerAction.RECORD
    return action


class record_function(trace.region, ContextDecorator):
    """A named span of the trace around a block or a decorated function (while a profile records)."""

    def __init__(self, name: str, args: dict | None = None):
        super().__init__(name, "user", args)


@dataclass
class Event:
    """One event: ph "X" (a span), "C" (a counter sample) or "i" (an instant); times in microseconds of
    the monotonic clock; `self_us` is the span's time less its children's (on its thread)."""
    name: str
    cat: str
    ph: str
    ts_us: float
    dur_us: float
    tid: int
    args: dict
    self_us: float = 0.0


class profile:
    """Records while active (between start and stop; with a `schedule`, only in its RECORD steps, and
    `step()` marks a step's end). Profiles may nest or overlap: each reads its own window of the one log."""
    _active: list[profile] = []

    def __init__(self, *, activities: Any = None, schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[[profile], None] | None = None, record_shapes: bool = False,
                 profile_memory: bool = True, with_stack: bool = False, with_flops: bool = True,
                 max_events: int = 1 << 20):
        self.schedule, self.on_trace_ready, self.max_events = schedule, on_trace_ready, max_events
        self.step_num = 0
        self._action = ProfilerAction.NONE
        self._mark: int | None = None        # trace count where this window starts, while recording
        self._events: list[tuple] = []
        self._threads: dict[int, str] = {}

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        if self in profile._active:
            raise RuntimeError("[profiler] this profile is already recording; stop() it before start()")
        profile._active.append(self)
        self.step_num = 0
        self._action = ProfilerAction.RECORD if self.schedule is None else self.schedule(0)
        if self._action is not ProfilerAction.NONE:
            self._mark = trace.start(self.max_events)

    def stop(self) -> None:
        if self not in profile._active:
            return
        if self._action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._keep()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        self._pause()
        profile._active.remove(self)

    def _pause(self) -> None:
        if self._mark is not None:
            trace.stop()
            self._mark = None

    def step(self) -> None:
        """The end of a training step: move along the schedule."""
        self.step_num += 1
        if self.schedule is None:
            return
        before, self._action = self._action, self.schedule(self.step_num)
        RECORD, SAVE, WARMUP = ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE, ProfilerAction.WARMUP
        if before is SAVE or (before is RECORD and self._action in (ProfilerAction.NONE, WARMUP)):
            self._keep()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        if self._action is ProfilerAction.NONE:
            self._pause()
        elif self._mark is None:
            self._mark = trace.start(self.max_events)
        elif before is SAVE or (before is WARMUP and self._action is not WARMUP):
            self._mark = trace.recorded           # a new window: what warmup recorded is left out

    def _keep(self) -> None:
        if self._mark is not None:
            self._events, self._threads = trace.since(self._mark), trace.threads()

    # ------------------------------------------------------------------ reading what was recorded
    def events(self) -> list[Event]:
        """What the last recorded span of steps holds (while recording without a schedule: so far)."""
        if self in profile._active and self.schedule is None:
            self._keep()
        return _with_self_times([Event(name, cat, ph, t / 1000, d / 1000, tid, _args(ph, args))
                                 for ph, name, cat, t, d, tid, args in self._events])

    def key_averages(self) -> Averages:
        return Averages(self.events())

    def export_chrome_trace(self, path: str) -> None:
        """The events as a Chrome trace (Perfetto, chrome://tracing), written atomically."""
        _write_json(path, chrome_trace(self.events(), self._threads))


def _args(ph: str, args: dict | tuple | None) -> dict:
    if isinstance(args, tuple):          # a counter's (series, value); a kernel launch's (trace.KERNEL_ARGS)
        return {args[0]: args[1]} if ph == "C" else dict(zip(trace.KERNEL_ARGS, args))
    return args or {}


def _with_self_times(events: list[Event]) -> list[Event]:
    spans = sorted((e for e in events if e.ph == "X"), key=lambda e: (e.tid, e.ts_us, -e.dur_us))
    stack: list[Event] = []
    for e in spans:
        e.self_us = e.dur_us
        while stack and (stack[-1].tid != e.tid or e.ts_us >= stack[-1].ts_us + stack[-1].dur_us):
            stack.pop()
        if stack:
            stack[-1].self_us -= e.dur_us
        stack.append(e)
    return events


class Averages:
    """Spans grouped by name: calls, total and self time, and for kernels GFLOPS over their time."""
    SORTS = {"self_cpu_time_total": "self", "cpu_time_total": "total", "self_cuda_time_total": "self",
             "cuda_time_total": "total", "self": "self", "total": "total", "count": "calls", "flops": "flops"}

    def __init__(self, events: list[Event]):
        rows: dict[tuple[str, str], dict] = {}
        for e in events:
            if e.ph != "X":
                continue
            r = rows.setdefault((e.name, e.cat), {"name": e.name, "cat": e.cat, "calls": 0, "total": 0.0,
                                                  "self": 0.0, "flops": 0})
            r["calls"] += 1
            r["total"] += e.dur_us
            r["self"] += e.self_us
            r["flops"] += int(e.args.get("flops", 0))
        self.rows = list(rows.values())

    def table(self, sort_by: str = "self_cpu_time_total", row_limit: int = 50) -> str:
        if sort_by not in self.SORTS:
            raise ValueError(f"[profiler] table: sort_by one of {', '.join(self.SORTS)} expected, "
                             f"got {sort_by!r}")
        key = self.SORTS[sort_by]
        rows = sorted(self.rows, key=lambda r: -r[key])[:row_limit]
        whole = sum(r["self"] for r in self.rows) or 1.0
        head = f"{'name':40s} {'kind':16s} {'calls':>7s} {'total ms':>10s} {'self ms':>10s} {'self %':>7s} " \
               f"{'avg us':>9s} {'GFLOPS':>8s}"
        lines = [head, "-" * len(head)]
        for r in rows:
            gflops = f"{r['flops'] / r['total'] / 1e3:8.2f}" if r["flops"] and r["total"] else f"{'':8s}"
            lines.append(f"{r['name'][:40]:40s} {r['cat'][:16]:16s} {r['calls']:7d} {r['total'] / 1e3:10.3f} "
                         f"{r['self'] / 1e3:10.3f} {100 * r['self'] / whole:6.1f}% "
                         f"{r['total'] / r['calls']:9.1f} {gflops}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _clock_offset_us() -> float:
    """Wall clock minus the monotonic clock, in microseconds (the closest of a few readings)."""
    best = None
    for _ in range(5):
        a = time.perf_counter_ns()
        w = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    assert best is not None
    return best[1] / 1000


def chrome_trace(events: list[Event], threads: dict[int, str], rank: int | None = None) -> dict:
    """A Chrome trace dict: one process (this rank), a row per thread, memory as a counter track."""
    rank = config.RANK if rank is None else rank
    pid = max(rank, 0)
    tids = {tid: i for i, tid in enumerate(sorted({e.tid for e in events}))}
    out: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"rank {pid} ({socket.gethostname()} pid {os.getpid()})"}},
                       {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                        "args": {"sort_index": pid}}]
    for tid, i in tids.items():
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": i,
                    "args": {"name": threads.get(tid, f"thread {i}")}})
    for e in events:
        ev: dict[str, Any] = {"ph": e.ph, "name": e.name, "cat": e.cat, "pid": pid, "tid": tids[e.tid],
                              "ts": round(e.ts_us, 3)}
        if e.ph == "X":
            ev["dur"] = round(e.dur_us, 3)
            args = dict(e.args)
            if e.cat == "kernel" and e.dur_us > 0:
                args["GFLOPS"] = round(args.get("flops", 0) / e.dur_us / 1e3, 3)
                args["GB/s"] = round(args.get("bytes", 0) / e.dur_us / 1e3, 3)
            ev["args"] = args
        elif e.ph == "i":
            ev["s"] = "t"
            ev["args"] = e.args
        else:
            ev["args"] = e.args
        out.append(ev)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"rank": pid, "host": socket.gethostname(), "pid": os.getpid(),
                          "wall_minus_monotonic_us": _clock_offset_us()}}


def merge_traces(paths: list[str], out: str) -> dict:
    """One trace of several ranks' (chrome_trace files): each rank's process row kept, times moved onto
    the wall clock (each file's own offset: ranks on other hosts line up as far as their clocks agree),
    counted from the earliest event. Written atomically to out; returned."""
    traces = []
    for p in paths:
        with open(p) as f:
            t = json.load(f)
        if "traceEvents" not in t or "wall_minus_monotonic_us" not in t.get("otherData", {}):
            raise ValueError(f"[profiler] merge_traces: {p} is not a tg trace (no traceEvents/otherData); "
                             f"expected files written by export_chrome_trace")
        traces.append(t)
    starts = [min((e["ts"] for e in t["traceEvents"] if "ts" in e), default=0.0) +
              t["otherData"]["wall_minus_monotonic_us"] for t in traces]
    base = min(starts, default=0.0)
    events: list[dict] = []
    for t in traces:
        shift = t["otherData"]["wall_minus_monotonic_us"] - base
        for e in t["traceEvents"]:
            if "ts" in e:
                e = {**e, "ts": round(e["ts"] + shift, 3)}
            events.append(e)
    merged = {"traceEvents": events, "displayTimeUnit": "ms",
              "otherData": {"ranks": sorted(t["otherData"]["rank"] for t in traces), "wall_start_us": base}}
    _write_json(out, merged)
    return merged


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None) -> Callable[[profile], None]:
    """An on_trace_ready that writes each saved span of steps to dir_name/<worker>.<step>.pt.trace.json
    (worker: rank<R> by default), as torch's handler names them."""
    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        name = worker_name or f"rank{max(config.RANK, 0)}"
        prof.export_chrome_trace(os.path.join(dir_name, f"{name}.{prof.step_num}.pt.trace.json"))
    return handler


def _write_json(path: str, data: dict) -> None:
    write_atomic(path, json.dumps(data, separators=(",", ":")).encode())


_process: list[tuple[profile, Callable[[], None]]] = []     # profile_process's, while its writer is pending


def profile_process(folder: str) -> profile:
    """Profile this whole process (TG_PROFILE): its newest TG_PROFILE_EVENTS events go to
    folder/trace.rank<R>.json at exit (a process killed by a signal writes nothing)."""
    prof = profile(max_events=config.TG_PROFILE_EVENTS)
    prof.start()
    rank = max(config.RANK, 0)

    def write() -> None:
        prof.stop()
        os.makedirs(folder, exist_ok=True)
        prof.export_chrome_trace(os.path.join(folder, f"trace.rank{rank}.json"))
    atexit.register(write)
    _process.append((prof, write))
    return prof


def cancel_process_profile() -> None:
    """Stop profile_process's profile and write nothing (tglaunch's own process: TG_PROFILE in its
    environment is for its workers, whose rank 0 writes trace.rank0.json)."""
    while _process:
        prof, write = _process.pop()
        atexit.unregister(write)
        prof.stop()


def synchronize_phases(on: bool = True) -> None:
    """Wait for every opened device at the optimizer's phase mark (see phase), so that on an asynchronous
    device (CUDA, OpenCL) a step's forward+backward and optimizer times are the devices', not only the
    host's launching; it costs the overlap of the two (nothing on the CPU, whose kernels are synchronous)."""
    trace.phase_sync.clear()
    if on:
        from tg.core.device import Device
        trace.phase_sync.append(Device.synchronize_all)
