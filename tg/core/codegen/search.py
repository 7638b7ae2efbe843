"""How a contraction runs, chosen by timing candidates (tinygrad calls its search BEAM), the winner
remembered on disk per kernel and machine, so a second run pays nothing.

The rules of thumb in heuristics.py (worth, params, direct_rule, broadcast_rule) were measured
on one machine for a few shapes; a shape with a short side, a long reduce or another CPU may want other
tiles, another nest, or the one-pass kernel. The search builds the candidates (the one-pass kernel, the
rule's nest, packed nests of other register tiles and K blocks, and the nests reading y in place where
they can), one compiler run per core, all of a batch built before any is timed, runs each on scratch
buffers of the kernel's sizes, and keeps the fastest. Safe by construction: a candidate's first run is
a check against the one-pass kernel on the same random inputs, on guarded buffers (canaries around
each, a page no access beyond, inputs read-only), so one that computes other values or writes next
to its output is never timed or chosen; and the record marks each candidate in flight before it runs,
so one that crashes its process (once) is counted bad by the next, which goes on with the others.
It runs for contractions of at least TG_BEAM_MIN_MACS multiply-adds (where a kernel runs long enough
that a few percent matter), within TG_BEAM seconds for the whole process (so a cold first step pays at
most that; a kernel met after the budget is spent takes the rule, unrecorded, and is searched by a later
process); TG_BEAM=0 turns it off. Results live in TG_CACHE_DIR/search/<key>.json, keyed by the kernel's
normalized AST, the thread count, the CPU and the compiler, written atomically, with every candidate's
time: a search that one budget did not finish goes on in the next process with the candidates not yet
timed.

    >>> from tg.core.codegen.search import candidates
    >>> len(candidates(16)) > 1
    True
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tg import config
from tg.core import lower_cache
from tg.core.codegen import gemm, heuristics, nests
from tg.core.compiler import CompileError
from tg.core.dtype import dtypes

log = logging.getLogger("tg.core.codegen.search")


def candidates(lanes: int) -> list[tuple[int, int, int, int, int]]:
    """(MR, NR, KC, MC, NC) to try: register tiles that fit the vector registers (32 with AVX-512, 16
    with AVX2, a few left for the loads), each with a short and a long K block."""
    if lanes >= 16:
        tiles = [(6, 4 * lanes), (8, 2 * lanes), (12, 2 * lanes), (8, 3 * lanes)]
    else:
        tiles = [(6, 2 * lanes), (4, 3 * lanes), (8, lanes)]
    return [(mr, nr, kc, mc, 4096) for mr, nr in tiles for kc, mc in ((256, 144), (512, 256))]


def direct_candidates(lanes: int) -> list[tuple[int, int, int, int, int, str]]:
    """Register tiles for the nest that reads y where it lies (nests.render_direct)."""
    tiles = [(8, 3 * lanes), (6, 4 * lanes), (8, 2 * lanes), (4, 6 * lanes)] if lanes >= 16 else \
        [(4, 3 * lanes), (6, 2 * lanes)]
    return [(mr, nr, 0, 0, 0, "direct") for mr, nr in tiles]


def broadcast_candidates(lanes: int) -> list[tuple[int, int, int, int, int, str]]:
    """Register tiles (vectors of rows x columns) for the nest that broadcasts y where it lies
    (nests.render_broadcast), a K block of 1024."""
    tiles = [(4, 6), (2, 12), (4, 5), (3, 8)] if lanes >= 16 else [(2, 6), (3, 4)]
    return [(mr, nr, 1024, 0, 0, "broadcast") for mr, nr in tiles]


VERSION = 4      # of the candidates and what their block sizes mean: a change makes earlier records moot


def _key_of(c: gemm.Contraction, threads: int, ident: str, lanes: int) -> str:
    raw = repr((VERSION, c.ast.key, threads, lanes, lower_cache.HOST, ident))
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def _path(key: str) -> Path:
    return Path(config.TG_CACHE_DIR) / "search" / f"{key}.json"


Timed = dict[tuple | None, float]    # seconds of a run per candidate (astuple; None: the one-pass kernel)
BAD = float("inf")                   # the time of a candidate that is no choice (see _time)


def _params(won: list) -> heuristics.Params:
    mr, nr, kc, mc, nc = (int(v) for v in won[:5])
    return heuristics.Params(mr, nr, kc, mc, nc, str(won[5]) if len(won) > 5 else "packed")


def _key(p: heuristics.Params | None) -> tuple | None:
    return None if p is None else astuple(p)


def _recall(path: Path, c: gemm.Contraction, lanes: int) -> tuple[str, heuristics.Params | None, Timed]:
    """("none" | "partial" | "done", the winner: block sizes, or None for the one-pass kernel, and the
    seconds of every candidate timed so far, so that a later process times only the others). Block
    sizes that the nest could not run as they are (edited, or from another CPU) count as none. A
    candidate the record says was running when its process ended (it crashed there, or hung and was
    killed) counts as bad."""
    try:
        record = json.loads(path.read_text())
        won = record["params"]
        timed: Timed = {None if t is None else astuple(_params(t)):
                        BAD if sec is None else float(sec) for t, sec in record.get("timed", [])}
        if "running" in record:
            running = record["running"]
            timed[None if running is None else astuple(_params(running))] = BAD
            log.warning("[search] a %s candidate for %s did not finish in an earlier process (it crashed "
                        "or was stopped there); it is left out", "one-pass" if running is None else
                        running, record.get("sizes"))
        done = "done" if len(timed) >= record["of"] else "partial"
        if won is None:
            return done, None, timed
        p = _params(won)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return "none", None, {}   # absent, or damaged (a crash mid-write cannot leave one: writes are atomic)
    if min(astuple(p)[:5]) < 1 or heuristics.clamp(c, p, lanes) != p or not nests.runs(c, p, lanes):
        return "none", None, {}
    return done, p, timed


# Each buffer of the scratch lies in a mapping of its own: canary bytes on both sides of it and a page no
# access beyond them, so that a candidate's write past its output (or before it) is seen, and its access
# far past any buffer stops it at once instead of corrupting this process's memory. 0xFF bytes are a
# float NaN: a read of a canary shows in the result.
_ZONE = 64
_CANARY = 0xFF
_PAGE = mmap.PAGESIZE
_PROT_NONE, _PROT_READ = 0, 1


@functools.cache
def _mprotect() -> Any:
    return getattr(ctypes.CDLL(None), "mprotect", None)


def _protect(address: int, nbytes: int, prot: int) -> None:
    """mprotect, where libc has it (else the canaries alone watch the buffers)."""
    mprotect = _mprotect()
    if mprotect is not None:
        mprotect(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), ctypes.c_int(prot))


def guarded(nbytes: int) -> tuple[np.ndarray, list[np.ndarray], Callable[[], None]]:
    """nbytes of memory in a mapping of its own (above): (the bytes, starting at a multiple of 64; the
    canary zones on either side of them; a call making the bytes read-only). The mapping lives as long
    as any of these."""
    area = -(-(nbytes + 4 * _ZONE) // _PAGE) * _PAGE
    whole = np.frombuffer(mmap.mmap(-1, area + 2 * _PAGE), np.uint8)
    base = whole.ctypes.data
    _protect(base, _PAGE, _PROT_NONE)
    _protect(base + _PAGE + area, _PAGE, _PROT_NONE)
    start = (_PAGE + area - _ZONE - nbytes) // 64 * 64
    whole[_PAGE:_PAGE + area] = _CANARY
    zones = [whole[_PAGE:start], whole[start + nbytes:_PAGE + area]]
    return whole[start:start + nbytes], zones, lambda: _protect(base + _PAGE, area, _PROT_READ)


class Scratch:
    """The kernel's buffers for the search, of its sizes and dtypes, each guarded (above): small random
    floats in (read-only: a candidate writing into one stops at once), the output 64-byte aligned as
    the device's allocator gives it (a one-pass kernel's streaming stores need that; numpy's arrays are
    16-byte aligned, and a search on them crashed in the one-pass kernel). A contraction indexes memory
    by its loop variables only, so the values cannot send a load out of bounds."""

    def __init__(self, kernel: Any) -> None:
        rng = np.random.default_rng(0)
        self.args: list[ctypes.c_void_p] = []
        self.zones: list[np.ndarray] = []
        self.bufs: list[np.ndarray] = []
        for i, (size, dt) in enumerate(zip(kernel.buf_sizes, kernel.buf_dtypes)):
            raw, zones, read_only = guarded(max(size, 1) * dt.itemsize)
            buf = raw.view(dt.np)
            if dt.is_float and dt != dtypes.bfloat16:     # bfloat16's bits stay 0: a zero is a zero
                buf[...] = rng.random(buf.size, np.float32)
            elif i > 0:
                buf[...] = 0
            if i > 0:
                read_only()
            self.zones += zones
            self.bufs.append(buf)
            self.args.append(ctypes.c_void_p(buf.ctypes.data))
        self.out = self.bufs[0]

    def clear(self) -> None:
        """The output all canary bytes (NaNs): an output a candidate does not write shows; and the
        output's canaries afresh, after a candidate that overwrote them (the inputs' are read-only)."""
        self.out.view(np.uint8)[...] = _CANARY
        for zone in self.zones[:2]:
            zone[...] = _CANARY

    def overran(self) -> bool:
        """Whether something wrote next to a buffer."""
        return any(bool((zone != _CANARY).any()) for zone in self.zones)


def wrong(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why a candidate's output is not the reference's (None where it is): each element within float32
    rounding of a reduce in another order (relative to the output's scale), NaN and inf where the
    reference has them."""
    finite = np.isfinite(want)
    scale = float(np.abs(want[finite]).max(initial=0.0)) + 1e-30
    bad = ~np.isclose(got, want, rtol=1e-3, atol=1e-4 * scale, equal_nan=True)
    if not bad.any():
        return None
    at = int(np.argmax(bad))
    return f"{int(bad.sum())} of {bad.size} outputs differ (at {at}: {got.flat[at]} for {want.flat[at]})"


_spent = [0.0]      # seconds this process has searched: TG_BEAM bounds the total


def ways(c: gemm.Contraction, lanes: int) -> list[heuristics.Params | None]:
    """Every way the search may run c, the rule's first: the rule's choice, its other one (one-pass
    kernel or packed nest), the packed nests of candidates() and the direct and broadcast ones where c
    allows them, each fitted to c (duplicates once)."""
    rule = heuristics.rule(c, lanes)
    shapes = candidates(lanes) + (direct_candidates(lanes) if c.direct_ok(lanes) else []) + \
        (broadcast_candidates(lanes) if c.broadcast_ok() else [])
    other = None if rule is not None else heuristics.params(c, lanes)       # the rule's other choice
    fitted = [heuristics.clamp(c, heuristics.Params(*t), lanes) for t in shapes]
    return list(dict.fromkeys([rule, other, *fitted]))


def _seconds(sec: float | None) -> float | None:
    return None if sec is None or sec == BAD else sec


def _record(c: gemm.Contraction, tried: list, timed: Timed, fallback: heuristics.Params | None,
            running: Any = ()) -> dict:
    """What the search file holds: the fastest of the good candidates timed so far (else fallback), the
    time of each (None: bad), and the candidate about to run, if any (`running`, a key)."""
    good = [p for p in tried if timed.get(_key(p), BAD) < BAD]
    won = min(good, key=lambda p: timed[_key(p)]) if good else fallback
    record = {"params": None if won is None else list(astuple(won)),
              "seconds": _seconds(timed.get(_key(won))), "rule_seconds": _seconds(timed.get(_key(tried[0]))),
              "sizes": list(c.sizes), "tried": len(timed), "of": len(tried),
              "timed": [[None if k is None else list(k), _seconds(sec)]
                        for k, sec in timed.items()]}
    if running != ():
        record["running"] = None if running is None else list(running)
    return record


def choose(c: gemm.Contraction, name: str, lanes: int, renderer: Any, compiler: Any,
           one_pass: Callable[[str], str]) -> heuristics.Params | None:
    """How to run contraction c: block sizes for the nest, or None for the one-pass kernel whose source
    `one_pass(name)` renders. Remembered from an earlier search, else searched (when the knob, the size
    and what is left of this process's budget allow), else the rule of thumb (heuristics.rule)."""
    rule = heuristics.rule(c, lanes)
    if not _searched(c):
        return rule
    path = _path(_key_of(c, renderer.threads, compiler.ident, lanes))
    state, known, timed = _recall(path, c, lanes)
    budget = config.TG_BEAM - _spent[0]
    if state == "done" or (state == "partial" and budget <= 0):
        return known
    if budget <= 0:
        return rule
    tried = ways(c, lanes)
    timed = {k: v for k, v in timed.items() if k in {_key(p) for p in tried}}
    if timed.get(None) == BAD:    # no reference to check the candidates against: none is a choice
        timed.update({_key(p): BAD for p in tried})
        lower_cache.write_record(path, _record(c, tried, timed, rule))
        return rule
    todo = [p for p in tried if _key(p) not in timed]            # an unfinished search goes on where it was
    start = time.perf_counter()
    try:
        _time(c, todo, timed, name, lanes, renderer, compiler, one_pass, start + budget,
              lambda running: lower_cache.write_record(path, _record(c, tried, timed, None, running)))
    finally:
        _spent[0] += time.perf_counter() - start
    lower_cache.write_record(path, _record(c, tried, timed, rule))
    good = [p for p in tried if timed.get(_key(p), BAD) < BAD]
    return min(good, key=lambda p: timed[_key(p)]) if good else rule


def _searched(c: gemm.Contraction) -> bool:
    """Whether c's nest is chosen by timing (else by rule): not a 16-bit contraction (heuristics.rule says
    why), TG_BEAM on, and at least TG_BEAM_MIN_MACS multiply-adds."""
    batch, m, n, k = c.sizes
    return not (c.narrow or c.low) and config.TG_BEAM > 0 and batch * m * n * k >= config.TG_BEAM_MIN_MACS


def settled(c: gemm.Contraction, lanes: int, renderer: Any, compiler: Any) -> bool:
    """Whether `choose`'s answer for c is final: chosen by rule, or its search finished. An answer given
    while the budget ran out (the rule, or the best so far) is one a later process improves on, so a
    lowering made from it is not kept (lower_cache)."""
    if not _searched(c):
        return True
    state, _, _ = _recall(_path(_key_of(c, renderer.threads, compiler.ident, lanes)), c, lanes)
    return state == "done"


def _build(compiler: Any, src: str) -> Path | None:
    try:
        return compiler.compile(src)
    except (CompileError, OSError) as e:
        log.warning("[search] a candidate kernel did not build (%s); it is left out", str(e).splitlines()[0])
        return None


def _time(c: gemm.Contraction, todo: list, timed: Timed, name: str, lanes: int, renderer: Any,
          compiler: Any, one_pass: Callable[[str], str], deadline: float,
          running: Callable[[tuple | None], None]) -> None:
    """Into timed: seconds of a run of each candidate of todo, in order, until the deadline (the
    one-pass kernel and the first other always), or BAD: it did not build, or its first run (the check)
    wrote next to its output or gave other values than the one-pass kernel on the same random inputs.
    Built a core's worth at a time (one compiler run each); each checked, then timed: the faster of
    two runs. running(key) is called before each runs (the record marks it in flight, so a process it
    crashes leaves it marked bad, and the next one goes on with the others)."""
    scratch = Scratch(c.kernel)
    # the one-pass kernel first: the reference every other is checked against (run only for that
    # where an earlier process timed it)
    order = [None] + [p for p in todo if p is not None]
    want: np.ndarray | None = None
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for first in range(0, len(order), workers):
            batch = list(enumerate(order))[first:first + workers]
            srcs = [one_pass(f"{name}_s{i}") if p is None else
                    nests.render(c, p, renderer, f"{name}_s{i}", lanes) for i, p in batch]
            # every build of the batch done before any timing: a compiler still running on another
            # core would stall the candidate's threads (measured: 0.6 ms runs timed at 4-8 ms)
            libs = list(pool.map(_build, [compiler] * len(srcs), srcs))
            for (i, p), lib in zip(batch, libs):
                fn = None if lib is None else getattr(ctypes.CDLL(str(lib)), f"{name}_s{i}")
                if fn is None or (want is None and p is not None):
                    timed[_key(p)] = BAD          # (no reference: nothing can be checked)
                    continue
                running(_key(p))
                fn.restype = None
                scratch.clear()
                fn(*scratch.args)
                why = "it wrote next to a buffer" if scratch.overran() else \
                    None if want is None else wrong(scratch.out, want)     # (the reference runs first)
                if p is None and why is None:
                    want = scratch.out.copy()
                if why is not None:
                    log.warning("[search] candidate %s for %s computed wrong values (%s); it is left out",
                                p, c.sizes, why)
                    timed[_key(p)] = BAD
                    continue
                if p is not None or None in todo:
                    timed[_key(p)] = _fastest(fn, scratch.args)
                if time.perf_counter() > deadline and i >= 1:
                    return


def _fastest(fn: Any, args: list) -> float:
    runs = []
    for _ in range(2):
        t = time.perf_counter()
        fn(*args)
        runs.append(time.perf_counter() - t)
    return min(runs)
