"""bfloat16 and float16 contractions (issue 36 item 3): matmul, linear and conv of narrow tensors multiply
and sum in float32 and round once (fused.sum_of_products), on a bfloat16 unit of the CPU (codegen/bf16.py:
AMX tiles, or AVX512_BF16's VDPBF16PS where it pays), else in the packed float32 nest with the conversion
in its packing (codegen/gemm.py). Every path the CPU has runs here: TG_CPU_DISABLE turns AMX off for the
others, and the VDPBF16PS nest is forced where the CPU has the instruction but it does not pay (half the
FMAs' rate on Sapphire Rapids); a path the CPU lacks is skipped and the tests of the choice prove the
fallback is taken. References: float64 sums of the narrow inputs, rounded once (numpy's bit arithmetic
in test_half_precision)."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import tg
from tests.core.test_half_precision import narrow, ulp
from tg import Device, Tensor
from tg.core.codegen import bf16, heuristics
from tg.core.runtime import ops_cpu

HAS = {u.name: u.features <= ops_cpu.features() for u in bf16.UNITS}
HAS_AMX = HAS["amx"]
PATHS = ["amx", "dpbf16", "fallback"]
MARKS = {"amx": "_tile_dpbf16ps", "dpbf16": "_mm512_dpbf16_ps"}    # each unit's instruction in its nest


def force(monkeypatch, name: str) -> None:
    """Kernels lowered from now on take the path `name` (a unit of bf16.UNITS, or "fallback")."""
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    dev = Device["CPU"]
    monkeypatch.setattr(dev, "_by_key", OrderedDict())
    if name != "amx":
        monkeypatch.setenv("TG_CPU_DISABLE", "amx_bf16,amx_tile")
    monkeypatch.setattr(dev, "_usable", {"dpbf16": name == "dpbf16"} if name != "amx" else {})


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """The contraction path under test, each kernel lowered afresh; yields the path's name and a check
    that a program of it ran."""
    if request.param != "fallback" and not HAS[request.param]:
        pytest.skip(f"this CPU has no {request.param} (or Linux did not grant AMX's tile state): "
                    "test_without_a_unit_the_fallback_is_chosen covers it")
    force(monkeypatch, request.param)
    dev = Device["CPU"]

    def ran() -> bool:
        """Whether the path's nest ran: a nest with its unit's instruction; on "fallback" the packed
        nest and neither."""
        nest = any("gemm" in prog.info.extra for prog in dev._by_key.values())
        srcs = [prog.src for prog in dev._by_key.values()]
        marks = {name for name, mark in MARKS.items() if any(mark in src for src in srcs)}
        return nest and marks == ({request.param} if request.param in MARKS else set())
    return request.param, ran


def narrow_rand(rng, shape, dtype) -> np.ndarray:
    return narrow(rng.standard_normal(shape).astype(np.float32), dtype)


def T(values: np.ndarray, dtype) -> Tensor:
    return Tensor(values, device="CPU").cast(dtype)


def assert_rounded_once(got: np.ndarray, exact: np.ndarray, dtype, slack: np.ndarray | float = 0.0) -> None:
    """got is the float64 value rounded to dtype: within half a step of dtype at each value, plus what a
    float32 sum may be off (`slack`: K * 2^-24 times the sum of the terms' sizes, the bound of a float32
    sum in any order; where it cancels to near 0 that is more than a step), a full step where that
    slack straddles a rounding boundary."""
    err = np.abs(got.astype(np.float64) - exact)
    step = ulp(exact, dtype)
    excess = err - (step + slack)
    assert (excess <= 0).all(), f"{int((excess > 0).sum())} of {err.size} off by more than a step; " \
        f"worst {err.flat[int(np.argmax(excess))]} at {exact.flat[int(np.argmax(excess))]}"
    assert (err <= step / 2 + slack).mean() > 0.99


def slack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The bound of a float32 sum's error for a @ b (see assert_rounded_once)."""
    return a.shape[-1] * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


SIZES = [(197, 301, 83), (64, 1000, 257), (300, 167, 130), (33, 2050, 96)]     # each a contraction
LAYOUTS = ["A B", "A B^T", "A^T B", "A^T B^T"]


@pytest.mark.parametrize("dtype", [tg.bfloat16, tg.float16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,n", SIZES)
def test_a_narrow_matmul_is_its_float64_sum_rounded_once(m, k, n, layout, dtype, path):
    rng = np.random.default_rng(m * k + n)
    a, b = narrow_rand(rng, (m, k), dtype), narrow_rand(rng, (k, n), dtype)
    ta = T(np.ascontiguousarray(a.T), dtype).T if layout.startswith("A^T") else T(a, dtype)
    tb = T(np.ascontiguousarray(b.T), dtype).T if layout.endswith("B^T") else T(b, dtype)
    out = ta @ tb
    assert out.dtype == dtype
    got = out.float().numpy()
    assert_rounded_once(got, a.astype(np.float64) @ b.astype(np.float64), dtype, slack(a, b))
    name, ran = path
    if dtype == tg.bfloat16 or name == "fallback":      # float16 has no unit: the packed nest
        assert ran()


@pytest.mark.parametrize("k", [65536, 4096 + 37])
def test_the_sums_are_float32_a_long_reduce_of_ones_is_exact(k, path):
    for dtype in (tg.bfloat16, tg.float16):
        ones_a = Tensor.ones(33, k, device="CPU", dtype=dtype).contiguous().realize()     # loads, not
        ones_b = Tensor.ones(k, 40, device="CPU", dtype=dtype).contiguous().realize()     # constants
        out = ones_a @ ones_b
        with np.errstate(over="ignore"):       # float16's 65536 is inf
            want = narrow(np.array([k], np.float32), dtype)[0]    # k rounded once (a narrow sum: 256)
        np.testing.assert_array_equal(out.float().numpy(), np.full((33, 40), want, np.float32))
    assert path[1]()


def test_batched_linear_with_a_bias_and_its_gradients(path):
    """Every operand layout of a training step: x @ W^T + b forward, and the backward's products
    (grad @ W, grad^T @ x: x read along its rows by the weight gradient), against float64."""
    rng = np.random.default_rng(3)
    dtype = tg.bfloat16
    x, w, bias = narrow_rand(rng, (3, 70, 200), dtype), narrow_rand(rng, (130, 200), dtype), \
        narrow_rand(rng, (130,), dtype)
    tx = T(x, dtype).requires_grad_()
    tw, tb = T(w, dtype).requires_grad_(), T(bias, dtype).requires_grad_()
    out = tx.linear(tw, tb)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    # the product rounds once, then the bias add rounds again (bfloat16 ops)
    prod = narrow((x64 @ w64.T).astype(np.float32), dtype)
    assert_rounded_once(out.float().numpy(), prod.astype(np.float64) + bias, dtype, 2 * ulp(prod, dtype))
    g = narrow_rand(rng, out.shape, dtype)
    out.backward(T(g, dtype))
    g64 = g.astype(np.float64)
    assert_rounded_once(tx.grad.float().numpy(), g64 @ w64, dtype, slack(g, w))
    g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
    assert_rounded_once(tw.grad.float().numpy(), g2.T.astype(np.float64) @ x2, dtype, slack(g2.T, x2))
    assert path[1]()


@pytest.mark.parametrize("stride", [1, 2])
def test_a_bf16_conv_is_its_float64_sum_rounded_once(stride, path):
    rng = np.random.default_rng(stride)
    dtype = tg.bfloat16
    x, w = narrow_rand(rng, (2, 48, 33, 31), dtype), narrow_rand(rng, (64, 48, 3, 3), dtype)    # contractions
    got = T(x, dtype).conv2d(T(w, dtype), stride=stride, padding=1).float().numpy()
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = got.shape[2:]
    want, size = np.zeros(got.shape), np.zeros(got.shape)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            want += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
            size += np.einsum("nchw,oc->nohw", np.abs(patch), np.abs(w[:, :, i, j].astype(np.float64)))
    assert_rounded_once(got, want, dtype, 48 * 9 * 2.0 ** -24 * size)
    assert path[1]()


def test_nan_and_inf_in_a_bf16_product_come_out_as_in_float32(path):
    rng = np.random.default_rng(5)
    a, b = narrow_rand(rng, (128, 512), tg.bfloat16), narrow_rand(rng, (512, 128), tg.bfloat16)
    a[3, 7], a[10, 0], b[5, 9] = np.nan, np.inf, -np.inf
    got = (T(a, tg.bfloat16) @ T(b, tg.bfloat16)).float().numpy()
    with np.errstate(invalid="ignore", over="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert_rounded_once(got[finite], want[finite], tg.bfloat16, slack(a, b)[finite])
    assert path[1]()


def test_without_a_unit_the_fallback_is_chosen_and_the_cache_key_says_which(monkeypatch):
    """The CPU features kernels are built for are part of every kernel's cache key (a library using AMX
    is never loaded where AMX is not), and a contraction takes a unit exactly when the CPU has it (and,
    for VDPBF16PS, where it pays)."""
    a, b = Tensor.empty(256, 512, device="CPU", dtype=tg.bfloat16), Tensor.empty(512, 64, device="CPU",
                                                                                   dtype=tg.bfloat16)
    from tests.core.test_gemm import contraction
    c = contraction(a @ b)
    assert c is not None and c.narrow
    compiler = ops_cpu.ClangCompiler()
    with_all = compiler.cached_path("int x;")
    yes, no = (lambda u: True), (lambda u: False)
    assert bf16.unit(c, ops_cpu.features(), yes) == next((u for u in bf16.UNITS if HAS[u.name]), None)
    assert bf16.unit(c, ops_cpu.features(), no) is None       # TG_CC lacks the intrinsics, or none pays
    monkeypatch.setenv("TG_CPU_DISABLE", "amx_bf16")
    assert bf16.unit(c, ops_cpu.features(), yes) == (bf16.DPBF16 if HAS["dpbf16"] else None)
    assert "amx_bf16" not in ops_cpu.features()
    if HAS_AMX or "amx_bf16" in ops_cpu._cpu_flags():
        assert compiler.cached_path("int x;") != with_all
    monkeypatch.setenv("TG_CPU_DISABLE", "amx_bf16,avx512_bf16")
    assert bf16.unit(c, ops_cpu.features(), yes) is None
    monkeypatch.setenv("TG_CPU_DISABLE", "")
    assert compiler.cached_path("int x;") == with_all
    # float32 factors never take a unit
    f = contraction(Tensor.empty(256, 512, device="CPU") @ Tensor.empty(512, 64, device="CPU"))
    every = frozenset().union(*(u.features for u in bf16.UNITS))
    assert f is not None and not f.narrow and bf16.unit(f, every, yes) is None


@pytest.mark.skipif(not HAS["dpbf16"], reason="this CPU has no AVX512_BF16: nothing to measure")
def test_vdpbf16ps_is_used_exactly_where_it_measures_faster_than_the_fmas(monkeypatch):
    """The measured speedup decides (ops_cpu.CPUDevice.usable): a bound the unit cannot reach turns it
    off, one it always reaches turns it on, and the device's verdict is the measurement's."""
    import ctypes
    dev = Device["CPU"]
    lib = ctypes.CDLL(str(dev.compiler.compile(bf16.DPBF16.speedup)))
    lib.tg_speedup.restype = ctypes.c_double
    speedup = lib.tg_speedup()
    assert 0.05 < speedup < 20
    for bound, want in ((1e9, False), (1e-9, True)):
        monkeypatch.setattr(dev, "_usable", {})
        monkeypatch.setattr(heuristics, "UNIT_PAYS", bound)
        assert dev.usable(bf16.DPBF16) is want
    monkeypatch.setattr(dev, "_usable", {})
    monkeypatch.setattr(heuristics, "UNIT_PAYS", 1.25)
    clear = abs(speedup - 1.25) > 0.3         # (a speedup near the bound may measure either way)
    assert not clear or dev.usable(bf16.DPBF16) == (speedup >= 1.25)


@pytest.mark.parametrize("pays", [True, False])
def test_amp_names_the_unit_the_contractions_take(monkeypatch, pays):
    """tg.amp.bf16_units (what train.py --precision auto asks) says AVX512_BF16 only where the VDPBF16PS
    nest is what a bfloat16 matmul runs on: where it pays; AMX where AMX is there."""
    dev = Device["CPU"]
    monkeypatch.setattr(dev, "_usable", {"amx": True, "dpbf16": pays})
    dp = "AVX512_BF16" if HAS["dpbf16"] and pays else None
    assert tg.amp.bf16_units("CPU") == ("AMX" if HAS_AMX else dp)
    monkeypatch.setenv("TG_CPU_DISABLE", "amx_bf16,amx_tile")
    assert tg.amp.bf16_units("CPU") == ("AVX512_BF16" if HAS["dpbf16"] and pays else None)
    force(monkeypatch, "dpbf16" if HAS["dpbf16"] and pays else "fallback")
    monkeypatch.setattr(dev, "_usable", {"dpbf16": pays})
    a = Tensor.ones(64, 512, device="CPU", dtype=tg.bfloat16).contiguous().realize()
    (a @ Tensor.ones(512, 128, device="CPU", dtype=tg.bfloat16).contiguous().realize()).realize()
    used = any(MARKS["dpbf16"] in prog.src for prog in dev._by_key.values())
    assert used == (tg.amp.bf16_units("CPU") == "AVX512_BF16")


@pytest.mark.parametrize("m,n,k,batch", [(512, 64, 64, 1), (256, 64, 64, 1), (64, 64, 32, 16),
                                         (128, 64, 64, 4)])
def test_a_bf16_contraction_takes_a_nest_from_a_million_multiply_adds(m, n, k, batch):
    """The one-pass kernel widens a bfloat16 factor at every use (2x its float32 time on a 512 x 64 x 64
    product), so bfloat16 contractions take a nest from heuristics.MIN_MACS_NARROW multiply-adds of one batch
    index (float32 ones from MIN_MACS): a batch of small attention products stays one-pass."""
    from tests.core.test_gemm import contraction
    e = lambda *s, dt=tg.bfloat16: Tensor.empty(*s, device="CPU", dtype=dt)     # noqa: E731
    found = contraction(e(batch, m, k) @ e(batch, k, n)) is not None
    assert found == (m * n * k >= heuristics.MIN_MACS_NARROW)
    assert contraction(e(batch, m, k, dt=tg.float32) @ e(batch, k, n, dt=tg.float32)) is None


def test_the_scratch_pool_keeps_its_buffers_until_released(path):
    """The nests' packing buffers (the tile nest's, and the packed nest's: float16 factors take it)."""
    rng = np.random.default_rng(9)
    dtype = tg.bfloat16 if path[0] in MARKS else tg.float16
    a, b = narrow_rand(rng, (300, 500), dtype), narrow_rand(rng, (500, 200), dtype)
    ops_cpu.release_scratch()
    first = (T(a, dtype) @ T(b, dtype)).float().numpy()
    assert path[1]()
    assert ops_cpu.release_scratch() >= 2 * 500 * 200        # at least the packed copy of b
    assert ops_cpu.release_scratch() == 0
    again = (T(a, dtype) @ T(b, dtype)).float().numpy()     # taken afresh after the release
    np.testing.assert_array_equal(again, first)


UNIT_NAMES = [u.name for u in bf16.UNITS]


def _unit(name: str) -> bf16.Unit:
    if not HAS[name]:
        pytest.skip(f"this CPU has no {name}: nothing to build its nest for")
    return next(u for u in bf16.UNITS if u.name == name)


@pytest.mark.parametrize("unit", UNIT_NAMES)
@pytest.mark.parametrize("threads", [1, 3, 8])
@pytest.mark.parametrize("memory", [True, False])
def test_the_unit_nests_at_any_thread_count_and_without_scratch_memory(threads, memory, unit):
    """Threads that do not divide the blocks (3), more threads than blocks (8): each packs its own
    rows of x and waits for the others before the next batch index's pack of y. The scratch pool
    failing takes the plain loops."""
    import ctypes

    from tests.core.test_gemm import contraction
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    u = _unit(unit)
    rng = np.random.default_rng(threads)
    batch, m, k, n = 2, 131, 400, 81
    a, b = narrow_rand(rng, (batch, m, k), tg.bfloat16), narrow_rand(rng, (batch, k, n), tg.bfloat16)
    c = contraction(T(a, tg.bfloat16).realize() @ T(b, tg.bfloat16).realize())
    assert c is not None and bf16.unit(c, ops_cpu.features()) is not None and c.sizes == (batch, m, n, k)
    assert c.kernel.buf_dtypes == [tg.bfloat16] * 3 and c.x.src[0].arg[0] == 1    # out, a, b: their words
    renderer = CStyleRenderer(DIALECTS["c"], threads=threads)
    prefix = "" if memory else \
        "static void* no_memory(long n) { return 0; }\n#define tg_scratch_take no_memory\n"
    ops_cpu.scratch_library()
    src = prefix + bf16.render(c, heuristics.unit_params(c, u.name, bf16.TILE), renderer, "unit_test", 16)
    assert MARKS[unit] in src
    fn = ctypes.CDLL(str(ops_cpu.ClangCompiler().compile(src))).unit_test
    words = [np.ascontiguousarray((x.view(np.uint32) >> 16).astype(np.uint16)) for x in (a, b)]
    out = np.zeros((batch, m, n), np.uint16)
    fn(*[ctypes.c_void_p(x.ctypes.data) for x in (out, *words)])
    got = (out.astype(np.uint32) << 16).view(np.float32)
    assert_rounded_once(got, a.astype(np.float64) @ b.astype(np.float64), tg.bfloat16,
                        k * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))))


def _ending_at_a_guard_page(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A copy of values whose last byte is the last before a page that may not be read: a kernel that
    reads past the array dies of SIGSEGV instead of reading what happens to be mapped there."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    area = -(-values.nbytes // page) * page
    whole = np.frombuffer(mmap.mmap(-1, area + page), np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(ctypes.c_void_p(whole.ctypes.data + area), page, 0) == 0      # PROT_NONE
    out = whole[area - values.nbytes:area].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out, whole        # (whole keeps the mapping alive)


@pytest.mark.parametrize("unit", UNIT_NAMES)
@pytest.mark.parametrize("m,k,n", [(131, 400, 81), (97, 300, 200), (64, 2048, 33)])
def test_the_unit_nests_read_nothing_past_their_inputs_when_the_cast_is_fused(m, k, n, unit):
    """autocast's usual case: float32 operands cast to bfloat16 inside the contraction (the factors are
    casts of float32 loads, packed element by element). The edge blocks past M, N and K read nothing:
    each operand ends right before a page no one may read."""
    import ctypes

    from tests.core.test_gemm import contraction
    from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
    u = _unit(unit)
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = contraction(Tensor(a, device="CPU").cast(tg.bfloat16) @ Tensor(b, device="CPU").cast(tg.bfloat16))
    assert c is not None and bf16.unit(c, ops_cpu.features()) is not None
    assert c.kernel.buf_dtypes[1:] == [tg.float32] * 2
    ops_cpu.scratch_library()
    renderer = CStyleRenderer(DIALECTS["c"], threads=2)
    src = bf16.render(c, heuristics.unit_params(c, u.name, bf16.TILE), renderer, "unit_fused", 16)
    fn = ctypes.CDLL(str(ops_cpu.ClangCompiler().compile(src))).unit_fused
    (ga, keep_a), (gb, keep_b) = _ending_at_a_guard_page(a), _ending_at_a_guard_page(b)
    out = np.zeros((m, n), np.uint16)
    fn(*[ctypes.c_void_p(x.ctypes.data) for x in (out, ga, gb)])
    del keep_a, keep_b
    an, bn = narrow(a, tg.bfloat16).astype(np.float64), narrow(b, tg.bfloat16).astype(np.float64)
    got = (out.astype(np.uint32) << 16).view(np.float32)
    assert_rounded_once(got, an @ bn, tg.bfloat16, slack(an, bn))


def test_subnormals_flush_to_zero_on_the_tiles_and_stay_elsewhere(path):
    """TDPBF16PS and VDPBF16PS flush subnormal inputs and sums to zero (bf16.py's docstring); the packed
    nest keeps them. Everything at normal scale is the same on both."""
    a = np.full((128, 512), 2.0 ** -60, np.float32)
    b = np.full((512, 128), 2.0 ** -60, np.float32)
    a[0, :], b[:, 0] = 2.0 ** -130, 1.0                      # a subnormal input (bfloat16 keeps 2^-130)
    a[1, :] = 2.0 ** -75                                     # normal inputs, a subnormal product
    got = (T(a, tg.bfloat16).realize() @ T(b, tg.bfloat16).realize()).float().numpy()
    flushed = path[0] in MARKS
    assert got[0, 0] == (0.0 if flushed else np.float32(512 * 2.0 ** -130))
    assert got[1, 1] == (0.0 if flushed else np.float32(512 * 2.0 ** -135))
    assert got[2, 2] == np.float32(512 * 2.0 ** -120)          # normal: equal on both
    assert path[1]()
