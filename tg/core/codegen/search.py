"""How a contraction runs, chosen by timing candidates (tinygrad calls its search BEAM), the winner
remembered on disk per kernel and machine, so a second run pays nothing.

The rules of thumb in gemm.worth, gemm.params, gemm.direct_rule and gemm.broadcast_rule were measured
on one machine for a few shapes; a shape with a short side, a long reduce or another CPU may want other
tiles, another nest, or the one-pass kernel. The search builds the candidates (the one-pass kernel, the
rule's nest, packed nests of other register tiles and K blocks, and the nests reading y in place where
they can), one compiler run per core, all of a batch built before any is timed, runs each on scratch
buffers of the kernel's sizes, and keeps the fastest. It runs for contractions of at least TG_BEAM_MIN_MACS
multiply-adds (where a kernel runs long enough that a few percent matter), within TG_BEAM seconds for
the whole process (so a cold first step pays at most that; a kernel met after the budget is spent takes
the rule, unrecorded, and is searched by a later process); TG_BEAM=0 turns it off. Results live in
TG_CACHE_DIR/search/<key>.json, keyed by the kernel's normalized AST, the thread count, the CPU and
the compiler, written atomically, with every candidate's time: a search that one budget did not finish
goes on in the next process with the candidates not yet timed.

    >>> from tg.core.codegen.search import candidates
    >>> len(candidates(16)) > 1
    True
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tg import config
from tg.core.codegen import gemm
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
    """Register tiles for the nest that reads y where it lies (gemm.render_direct)."""
    tiles = [(8, 3 * lanes), (6, 4 * lanes), (8, 2 * lanes), (4, 6 * lanes)] if lanes >= 16 else \
        [(4, 3 * lanes), (6, 2 * lanes)]
    return [(mr, nr, 0, 0, 0, "direct") for mr, nr in tiles]


def broadcast_candidates(lanes: int) -> list[tuple[int, int, int, int, int, str]]:
    """Register tiles (vectors of rows x columns) for the nest that broadcasts y where it lies
    (gemm.render_broadcast), a K block of 1024."""
    tiles = [(4, 6), (2, 12), (4, 5), (3, 8)] if lanes >= 16 else [(2, 6), (3, 4)]
    return [(mr, nr, 1024, 0, 0, "broadcast") for mr, nr in tiles]


def _cpu() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    names = (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
    return next(names, os.uname().machine)


VERSION = 4      # of the candidates and what their block sizes mean: a change makes earlier records moot


def _key(c: gemm.Contraction, threads: int, ident: str, lanes: int) -> str:
    raw = repr((VERSION, c.ast.key, threads, lanes, _cpu(), ident))
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def _path(key: str) -> Path:
    return Path(config.TG_CACHE_DIR) / "search" / f"{key}.json"


def _remember(path: Path, record: dict) -> None:
    """Write record atomically; a cache that cannot be written (read-only, full) only costs a later
    process the search again."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


Timed = dict[tuple | None, float]    # seconds of a run per candidate (astuple; None: the one-pass kernel)


def _params(won: list) -> gemm.Params:
    mr, nr, kc, mc, nc = (int(v) for v in won[:5])
    return gemm.Params(mr, nr, kc, mc, nc, str(won[5]) if len(won) > 5 else "packed")


def _recall(path: Path, c: gemm.Contraction, lanes: int) -> tuple[str, gemm.Params | None, Timed]:
    """("none" | "partial" | "done", the winner: block sizes, or None for the one-pass kernel, and the
    seconds of every candidate timed so far, so that a later process times only the others). Block
    sizes that the nest could not run as they are (edited, or from another CPU) count as none."""
    try:
        record = json.loads(path.read_text())
        won = record["params"]
        done = "done" if record["tried"] >= record["of"] else "partial"
        timed: Timed = {None if t is None else astuple(_params(t)):
                        float("inf") if sec is None else float(sec) for t, sec in record.get("timed", [])}
        if won is None:
            return done, None, timed
        p = _params(won)
    except (OSError, ValueError, KeyError, TypeError):
        return "none", None, {}   # absent, or damaged (a crash mid-write cannot leave one: writes are atomic)
    if min(astuple(p)[:5]) < 1 or gemm.clamp(c, p, lanes) != p or not gemm.runs(c, p, lanes):
        return "none", None, {}
    return done, p, timed


def _scratch(kernel: Any) -> list[np.ndarray]:
    """Buffers of the kernel's sizes and dtypes: small random floats in, anything out (a contraction
    indexes memory by its loop variables only, so the values cannot send a load out of bounds)."""
    rng = np.random.default_rng(0)
    bufs = []
    for size, dt in zip(kernel.buf_sizes, kernel.buf_dtypes):
        arr = np.zeros(max(size, 1), dt.np)
        if dt.is_float and dt != dtypes.bfloat16:    # bfloat16's bits stay 0: a zero is a zero
            arr[...] = rng.random(arr.size, np.float32)
        bufs.append(arr)
    return bufs


_spent = [0.0]      # seconds this process has searched: TG_BEAM bounds the total


def choose(c: gemm.Contraction, name: str, lanes: int, renderer: Any, compiler: Any,
           one_pass: Callable[[str], str]) -> gemm.Params | None:
    """How to run contraction c: block sizes for the nest, or None for the one-pass kernel whose source
    `one_pass(name)` renders. Remembered from an earlier search, else searched (when the knob, the size
    and what is left of this process's budget allow), else the rule of thumb (gemm.worth and gemm.params,
    gemm.direct_rule, gemm.broadcast_rule)."""
    rule = gemm.params(c, lanes) if gemm.worth(c) else \
        gemm.direct_rule(c, lanes) or gemm.broadcast_rule(c, lanes)
    batch, m, n, k = c.sizes
    if config.TG_BEAM <= 0 or batch * m * n * k < config.TG_BEAM_MIN_MACS:
        return rule
    path = _path(_key(c, renderer.threads, compiler.ident, lanes))
    state, known, timed = _recall(path, c, lanes)
    budget = config.TG_BEAM - _spent[0]
    if state == "done" or (state == "partial" and budget <= 0):
        return known
    if budget <= 0:
        return rule
    shapes = candidates(lanes) + (direct_candidates(lanes) if gemm.direct_ok(c, lanes) else []) + \
        (broadcast_candidates(lanes) if gemm.broadcast_ok(c) else [])
    nests = [gemm.clamp(c, gemm.Params(*t), lanes) for t in shapes]
    other = None if rule is not None else gemm.params(c, lanes)       # the rule's other choice
    tried: list[gemm.Params | None] = list(dict.fromkeys([rule, other, *nests]))
    key = lambda p: None if p is None else astuple(p)           # noqa: E731
    todo = [p for p in tried if key(p) not in timed]            # an unfinished search goes on where it was
    start = time.perf_counter()
    try:
        timings = _time(c, todo, name, lanes, renderer, compiler, one_pass, start + budget)
    finally:
        _spent[0] += time.perf_counter() - start
    timed = {k: v for k, v in timed.items() if k in {key(p) for p in tried}} | \
        {key(todo[i]): sec for i, sec in timings.items()}
    runnable = [p for p in tried if timed.get(key(p), float("inf")) < float("inf")]
    if not runnable:
        return rule
    won = min(runnable, key=lambda p: timed[key(p)])
    _remember(path, {"params": None if won is None else list(astuple(won)), "seconds": timed[key(won)],
                     "rule_seconds": timed.get(key(rule)), "sizes": list(c.sizes), "tried": len(timed),
                     "of": len(tried),
                     "timed": [[None if k is None else list(k), None if sec == float("inf") else sec]
                               for k, sec in timed.items()]})
    return won


def _build(compiler: Any, src: str) -> Path | None:
    try:
        return compiler.compile(src)
    except (CompileError, OSError) as e:
        log.warning("[search] a candidate kernel did not build (%s); it is left out", str(e).splitlines()[0])
        return None


def _time(c: gemm.Contraction, tried: list, name: str, lanes: int, renderer: Any, compiler: Any,
          one_pass: Callable[[str], str], deadline: float) -> dict[int, float]:
    """Seconds of a run of each candidate, in order, until the deadline (the first always): built a
    core's worth at a time (one compiler run each), each run once to warm, then the faster of two."""
    bufs = _scratch(c.kernel)
    args = [ctypes.c_void_p(b.ctypes.data) for b in bufs]
    timings: dict[int, float] = {}
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for first in range(0, len(tried), workers):
            batch = list(enumerate(tried))[first:first + workers]
            srcs = [one_pass(f"{name}_s{i}") if p is None else
                    gemm.render(c, p, renderer, f"{name}_s{i}", lanes) for i, p in batch]
            # every build of the batch done before any timing: a compiler still running on another
            # core would stall the candidate's threads (measured: 0.6 ms runs timed at 4-8 ms)
            libs = list(pool.map(_build, [compiler] * len(srcs), srcs))
            for (i, _), lib in zip(batch, libs):
                if lib is None:
                    timings[i] = float("inf")       # a candidate that does not build is not a choice
                    continue
                fn = getattr(ctypes.CDLL(str(lib)), f"{name}_s{i}")
                fn.restype = None
                fn(*args)
                runs = []
                for _ in range(2):
                    t = time.perf_counter()
                    fn(*args)
                    runs.append(time.perf_counter() - t)
                timings[i] = min(runs)
                if time.perf_counter() > deadline:
                    return timings
    return timings
