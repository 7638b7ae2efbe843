"""The CPU's rules of thumb and thresholds for code generation, in one place: which contractions are
large enough to block (`contraction`), whether the packed nest beats the one-pass kernel without timing
them (`worth`), the nests' block sizes (`params`, `direct_rule`, `broadcast_rule`), and which of them
`rule` picks when no search has decided (codegen/search.py times them where TG_BEAM allows). The row
groups' thresholds are codegen/rows.py's (`rows.MIN_BYTES`), the loop nest's the linearizer's (`Dims`).
Each rule says what it was measured on; docs/PERF_NOTES.md keeps the numbers' history.

    >>> MIN_MACS == 1 << 22
    True
"""
from __future__ import annotations

from tg.core.codegen import gemm
from tg.core.kernel import Kernel

MIN_MACS = 1 << 22        # smaller contractions are not blocked (nothing to amortize packing)
MIN_MACS_LOW = 1 << 16    # ... unless a factor is float16 (the one-pass kernel widens x a scalar at a time)
MIN_MACS_NARROW = 1 << 20     # ... or bfloat16 (widened in the one-pass kernel: 2x its float32 time here)
MMA_MIN_MACS = 1 << 15    # CUDA tensor cores (codegen/mma.py): smaller stay one-pass (a block is 64^3)


def contraction(kernel: Kernel, lanes: int, least: int | None = None) -> gemm.Contraction | None:
    """The kernel as a contraction worth blocking (lanes: float32s per SIMD vector; `least`: the fewest
    multiply-adds, by default MIN_MACS, or MIN_MACS_LOW / MIN_MACS_NARROW with a float16 / bfloat16
    factor), or None: at least 16 rows, two vectors of columns and a reduce of 16."""
    c = gemm.find(kernel)
    if c is None:
        return None
    _, m, n, k = c.sizes
    fewest = least if least is not None else \
        MIN_MACS_LOW if c.half else MIN_MACS_NARROW if c.low else MIN_MACS
    if m * n * k < fewest or m < 16 or n < 2 * lanes or k < 16:
        return None
    return c


def worth(c: gemm.Contraction) -> bool:
    """Whether the nest beats the one-pass kernel (linearizer.py's register tiles over unpacked operands)
    without timing them: only once the matrices outgrow the caches that kernel relies on. Measured on a
    Zen 5 core at 1 and 2 threads: the one-pass kernel is 5-25% faster below 1024 columns or a reduce
    of 256, the nest 5-30% faster from 1024 x 1024 x 256 up."""
    _, m, n, k = c.sizes
    return m >= 512 and n >= 1024 and k >= 256


def params(c: gemm.Contraction, lanes: int) -> gemm.Params:
    """Block sizes by rule of thumb (what the search on a Zen 5 core found best across sizes): a 6 x 4
    vector tile for long reduces, 8 x 2 otherwise; KC of a few hundred; MC and NC capped by the
    matrix."""
    _, m, n, k = c.sizes
    if lanes < 16:                      # AVX2: 16 vector registers, 12 of them accumulators
        mr, nr, kc = 6, 2 * lanes, 256
    elif k >= 1024 and n >= 4 * lanes:  # AVX-512: 32 registers, 24 of them accumulators
        mr, nr, kc = 6, 4 * lanes, 512
    else:
        mr, nr, kc = 8, 2 * lanes, 384
    return gemm.clamp(c, gemm.Params(mr, nr, kc, 256, 4096), lanes)


def direct_rule(c: gemm.Contraction, lanes: int) -> gemm.Params | None:
    """The direct nest (render_direct) by rule of thumb, for a reduce over several dims whose y reads
    in place (a conv's Cin x kh x kw over the input rows): measured 1.2-1.5x the one-pass kernel at
    64->64 channels, 56x56 and 32->64, 26x26, where that kernel loads each weight row with a stride.
    A plain matmul, within +-20% of the one-pass kernel either way below 1024, is left to the search."""
    if worth(c) or len(c.k_dims) < 2 or not gemm.direct_ok(c, lanes):
        return None
    mr = 8 if lanes >= 16 else 4          # 24 of AVX-512's 32 registers, 12 of AVX2's 16
    return gemm.clamp(c, gemm.Params(mr, 3 * lanes, 0, 0, 0, "direct"), lanes)


def broadcast_rule(c: gemm.Contraction, lanes: int) -> gemm.Params | None:
    """render_broadcast by rule of thumb, for columns that are a run of several dims (a conv's weight
    gradient: Cin x kh x kw, over images x positions of the window copy), which the one-pass kernel
    and the packed nest read badly (a gather per column, or a pack per row of C), over a reduce of at
    least 1024 (each batch index packs its x block anew): measured 64->64 at 56x56 (a reduce of 3136
    per image): 11.4-12.3 ms against 19.8-20.1 ms for the one-pass kernel; 32->64 at 26x26 (576 per
    image, 128 images): 10-12 ms against 9.4 ms, left to the one-pass kernel."""
    if worth(c) or len(c.n_dims) < 2 or c.size(c.k_dims) < 1024 or not gemm.broadcast_ok(c):
        return None
    mr, nr = (4, 6) if lanes >= 16 else (2, 6)      # 24 of AVX-512's 32 registers, 12 of AVX2's 16
    return gemm.clamp(c, gemm.Params(mr, nr, 1024, 0, 0, "broadcast"), lanes)


def rule(c: gemm.Contraction, lanes: int) -> gemm.Params | None:
    """The rules' choice for c: the packed nest for float16 / bfloat16 factors or output (the one-pass
    kernel reads narrow values a scalar at a time) or where it is worth it, else the direct or the
    broadcast nest where their rule says so, else None (the one-pass kernel)."""
    if c.narrow or c.low or worth(c):
        return params(c, lanes)
    return direct_rule(c, lanes) or broadcast_rule(c, lanes)
