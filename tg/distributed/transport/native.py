"""The transports' engines written in C (shm_engine.c, ucx_engine.c): how they are built and called.

Each engine is one C source, compiled by the system C compiler on first use and cached on disk like
kernels (the key is the text compiled, the compiler and its flags). What both engines share is C
fragments spliced into each source where it says `#include "<fragment>"` (the compiler reads the
source from standard input, and the cache key must cover the fragments): the reductions
(reductions.c), the agreement's rule and exchange order (agree.c) and the wait (wait.c).

    lib = build(Path("shm_engine.c"), {"tg_barrier": (ctypes.c_void_p, ...)}, {})
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tg.distributed.transport import wire

if TYPE_CHECKING:
    from tg.distributed.transport.algorithms import ReduceOp

REDUCTIONS = Path(__file__).with_name("reductions.c")
WAIT = Path(__file__).with_name("wait.c")             # how both engines wait: poll, yield, sleep
AGREE = Path(__file__).with_name("agree.c")           # when ranks agree, and the exchange's order
# seconds a waiting rank of either C engine yields its core (after its polls) before it sleeps (the shm
# engine on a futex, the ucx engine on the worker's fd): long enough for a peer a few microseconds late
YIELD_S = 2e-4
# -ffp-contract=off: products and sums rounded as written, never fused into multiply-adds
FLAGS = ["-shared", "-fPIC", "-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fwrapv"]


class Memory:
    """A C argument for an array's memory: a ctypes view of it (passed by reference: cheaper than numpy's
    .ctypes.data) when the array is writeable, its address otherwise."""

    @classmethod
    def from_param(cls, arr: np.ndarray) -> Any:
        if arr.flags.writeable and arr.nbytes:
            return ctypes.byref(ctypes.c_char.from_buffer(arr))  # type: ignore[arg-type]  # ndarray: a buffer
        return ctypes.c_void_p(arr.ctypes.data)


def source(path: Path) -> str:
    """An engine's C text with the shared fragments spliced in: the reductions, the agreement, the wait."""
    text = path.read_text()
    for fragment in (REDUCTIONS, AGREE, WAIT):
        text = text.replace(f'#include "{fragment.name}"', fragment.read_text(), 1)
    return text


def build(path: Path, signatures: dict[str, tuple], restypes: dict[str, Any],
          flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The engine at `path`, compiled (or found in the cache) and loaded, its functions typed: argument
    types from `signatures`, results from `restypes` (int when not named). `flags` come after tg's own
    (include and library paths). Raises CompileError when the C compiler is missing or fails."""
    return _build(path, tuple(signatures.items()), tuple(restypes.items()), flags)


@functools.cache
def _build(path: Path, signatures: tuple, restypes: tuple, flags: tuple[str, ...]) -> ctypes.CDLL:
    from tg.core.compiler import CCompiler
    compiler = CCompiler([*FLAGS, "-x", "c", "-", *flags], f"[distributed] {path.name}")
    lib = ctypes.CDLL(str(compiler.compile(source(path))))
    results = dict(restypes)
    for name, args in signatures:
        fn = getattr(lib, name)
        fn.argtypes = list(args)
        fn.restype = results.get(name, ctypes.c_int)
    return lib


@functools.lru_cache(maxsize=256)
def codes(dtype: np.dtype, op: ReduceOp) -> tuple[int, int]:
    """The C side's numbers for a dtype and a reduce op."""
    return wire.DTYPE_CODES.index(dtype.str), op.value
