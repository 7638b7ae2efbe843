"""Every rule of thumb and threshold of code generation, in one place (a leaf: the modules that write
kernels read their numbers here). For the CPU's contractions: which are large enough to block
(`large_enough`), whether the packed nest beats the one-pass kernel without timing them (`worth`), the
nests' block sizes (`Params`, `params`, `direct_rule`, `broadcast_rule`, `unit_params`, fitted by
`clamp`) and which nest `rule` picks when no search has decided (codegen/search.py times them where
TG_BEAM allows); whether a bfloat16 unit pays (`UNIT_PAYS`). For every kernel: the row groups'
thresholds (`ROW_*`, codegen/rows.py) and the loop nest's (the linearizer's `Dims`: threads, lanes,
unrolling, work-groups, streaming stores). Each says what it was measured on; docs/PERF_NOTES.md keeps
the numbers' history.

    >>> MIN_MACS == 1 << 22
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tg.core.codegen.gemm import Contraction

# -- contractions (codegen/gemm.py finds them, codegen/cpu.py and codegen/mma.py choose) --
MIN_MACS = 1 << 22        # smaller contractions are not blocked (nothing to amortize packing)
MIN_MACS_LOW = 1 << 16    # ... unless a factor is float16 (the one-pass kernel widens x a scalar at a time)
MIN_MACS_NARROW = 1 << 20     # ... or bfloat16 (widened in the one-pass kernel: 2x its float32 time here)
MMA_MIN_MACS = 1 << 15    # CUDA tensor cores (codegen/mma.py): smaller stay one-pass (a block is 64^3)

# -- the bfloat16 units' nest (codegen/bf16.py) --
UNIT_PAYS = 1.25   # what a unit's micro-kernel must beat the packed float32 nest by (its packs cost more)
UNIT_KC, UNIT_MC, UNIT_NC = 256, 256, 64   # measured at 2048 on a 2-core Xeon: a micro-panel of 16 KB

# -- row groups (codegen/rows.py) --
ROW_GROUP_MIN_BYTES = 1 << 20   # re-read (or internal) bytes from which a group pays
ROW_BLOCK_BYTES = 64 << 10      # a block of rows reads about this much of its external buffers
ROW_SCRATCH_BYTES = 64 << 10    # internal buffers' block, on each thread's stack, at most
ROW_GROUP_MAX_MEMBERS = 8
ROW_GROUP_MAX_SCAN = 32         # items a group may span, set-aside ones included

# -- the loop nest of every other kernel (codegen/linearizer.py's Dims) --
PARALLEL_ITEMS = 2048          # OpenMP collapses outer loops until there are this many pieces of work
PARALLEL_OPS = 4               # a kernel's work, against the renderer's parallel threshold: its elements,
                               # or its ALU ops / this when more (a small sigmoid or tanh is ~40 an element)
REORDER_MIN_BYTES = 256 << 10  # lane-dim strips of a tile's reduce at least this big are walked outermost
RAGGED_MIN = 4                 # vectors a ragged lane dim with a scalar tail spans at least (Dims.ragged)
MASK_UNROLL = 16               # output dims at most this long, masked on, are unrolled (_unroll_masks)
GROUP_MAX_OUTPUTS = 1 << 14    # a reduce with fewer outputs, over at least GROUP_MIN_REDUCE
GROUP_MIN_REDUCE = 256         # elements each, may be shared by a work-group
OUTLINE_CALLS = 8              # CUDA: a heavy math function called more often in one kernel is outlined
STREAM_MIN_BYTES = 4 << 20     # float32 outputs from this size are stored past the cache (non-temporal)

@dataclass(frozen=True)
class Params:
    """Block sizes: an MR x NR register tile, KC of the reduce per block, MC rows of A per thread's
    block, NC columns of B per shared block."""
    mr: int
    nr: int
    kc: int
    mc: int
    nc: int
    nest: str = "packed"     # render_packed, render_direct, render_broadcast or a bf16 unit's


def clamp(c: Contraction, p: Params, lanes: int) -> Params:
    """p fitted to the contraction: no block larger than its matrix."""
    _, m, n, k = c.sizes
    nr = max(lanes, min(p.nr, -(-n // lanes) * lanes))
    if p.nest == "direct":     # whole vectors only: the last tile overlaps the one before, never passes N
        nr = max(lanes, min(p.nr, n // lanes * lanes))
        return Params(p.mr, nr, k, p.mr, nr, "direct")
    if p.nest == "broadcast":  # MR vectors of rows, NR columns, the reduce in blocks of KC
        mr = max(1, min(p.mr, -(-m // lanes)))
        return Params(mr, max(1, min(p.nr, n)), max(1, min(p.kc, k)), mr, 1, "broadcast")
    kc = min(p.kc, k)
    mc = p.mc
    if c.narrow:     # K whole (no partial sums to keep), A's block held to about 256 KB of L2
        kc, mc = k, min(mc, max(p.mr, (1 << 16) // max(k, 1)))
    mc = max(p.mr, min(mc, -(-m // p.mr) * p.mr) // p.mr * p.mr)     # whole panels
    nc = max(nr, min(p.nc // nr * nr, -(-n // nr) * nr))       # whole panels: the packed block holds nc
    return Params(p.mr, nr, kc, mc, nc)


def large_enough(c: Contraction, lanes: int, least: int | None = None) -> bool:
    """Whether a contraction is worth blocking (lanes: float32s per SIMD vector; `least`: the fewest
    multiply-adds, by default MIN_MACS, or MIN_MACS_LOW / MIN_MACS_NARROW with a float16 / bfloat16
    factor): at least 16 rows, two vectors of columns and a reduce of 16 too."""
    _, m, n, k = c.sizes
    fewest = least if least is not None else \
        MIN_MACS_LOW if c.half else MIN_MACS_NARROW if c.low else MIN_MACS
    return m * n * k >= fewest and m >= 16 and n >= 2 * lanes and k >= 16


def worth(c: Contraction) -> bool:
    """Whether the nest beats the one-pass kernel (linearizer.py's register tiles over unpacked operands)
    without timing them: only once the matrices outgrow the caches that kernel relies on. Measured on a
    Zen 5 core at 1 and 2 threads: the one-pass kernel is 5-25% faster below 1024 columns or a reduce
    of 256, the nest 5-30% faster from 1024 x 1024 x 256 up."""
    _, m, n, k = c.sizes
    return m >= 512 and n >= 1024 and k >= 256


def params(c: Contraction, lanes: int) -> Params:
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
    return clamp(c, Params(mr, nr, kc, 256, 4096), lanes)


def direct_rule(c: Contraction, lanes: int) -> Params | None:
    """The direct nest (render_direct) by rule of thumb, for a reduce over several dims whose y reads
    in place (a conv's Cin x kh x kw over the input rows): measured 1.2-1.5x the one-pass kernel at
    64->64 channels, 56x56 and 32->64, 26x26, where that kernel loads each weight row with a stride.
    A plain matmul, within +-20% of the one-pass kernel either way below 1024, is left to the search."""
    if worth(c) or len(c.k_dims) < 2 or not c.direct_ok(lanes):
        return None
    mr = 8 if lanes >= 16 else 4          # 24 of AVX-512's 32 registers, 12 of AVX2's 16
    return clamp(c, Params(mr, 3 * lanes, 0, 0, 0, "direct"), lanes)


def broadcast_rule(c: Contraction, lanes: int) -> Params | None:
    """render_broadcast by rule of thumb, for columns that are a run of several dims (a conv's weight
    gradient: Cin x kh x kw, over images x positions of the window copy), which the one-pass kernel
    and the packed nest read badly (a gather per column, or a pack per row of C), over a reduce of at
    least 1024 (each batch index packs its x block anew): measured 64->64 at 56x56 (a reduce of 3136
    per image): 11.4-12.3 ms against 19.8-20.1 ms for the one-pass kernel; 32->64 at 26x26 (576 per
    image, 128 images): 10-12 ms against 9.4 ms, left to the one-pass kernel."""
    if worth(c) or len(c.n_dims) < 2 or c.size(c.k_dims) < 1024 or not c.broadcast_ok():
        return None
    mr, nr = (4, 6) if lanes >= 16 else (2, 6)      # 24 of AVX-512's 32 registers, 12 of AVX2's 16
    return clamp(c, Params(mr, nr, 1024, 0, 0, "broadcast"), lanes)


def rule(c: Contraction, lanes: int) -> Params | None:
    """The rules' choice for c: the packed nest for float16 / bfloat16 factors or output (the one-pass
    kernel reads narrow values a scalar at a time) or where it is worth it, else the direct or the
    broadcast nest where their rule says so, else None (the one-pass kernel)."""
    if c.narrow or c.low or worth(c):
        return params(c, lanes)
    return direct_rule(c, lanes) or broadcast_rule(c, lanes)


def unit_params(c: Contraction, unit: str, tile: int) -> Params:
    """A bfloat16 unit's block sizes (codegen/bf16.py; `unit` its name, the nest; `tile` its
    micro-kernel's block of C, bf16.TILE): whole tiles, a thread's x block of at most 1 MB, no block
    larger than the padded matrix."""
    _, m, n, k = c.sizes

    def up(v: int) -> int:
        return -(-v // tile) * tile
    mc = max(tile, min(UNIT_MC, (1 << 19) // up(k) // tile * tile))
    return Params(tile, tile, min(UNIT_KC, up(k)), min(mc, up(m)), min(UNIT_NC, up(n)), unit)
