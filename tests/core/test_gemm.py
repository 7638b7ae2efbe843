"""Contractions on the CPU go through the blocked, packed loop nest of tg/core/codegen/gemm.py: which
kernels are found to be contractions, and that the nest computes what numpy does in every operand
layout, batched, with epilogues, odd sizes (edges in every block), block sizes of every shape and the
fallback without packing buffers."""
from __future__ import annotations

import ctypes
from collections import OrderedDict

import numpy as np
import pytest

from tg import Device, Tensor
from tg.core.codegen import gemm, heuristics, nests
from tg.core.codegen.linearizer import linearize_for
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.runtime.ops_cpu import ClangCompiler, _vector_bytes, scratch_library
from tg.core.schedule import create_schedule

LANES = _vector_bytes() // 4
rng = np.random.default_rng(7)


def kernels(out: Tensor) -> list:
    return [it.kernel for it in create_schedule([out.lazydata]) if it.kind == "kernel"]


def contraction(out: Tensor) -> gemm.Contraction | None:
    found = [gemm.contraction(k, LANES) for k in kernels(out)]
    return next((c for c in found if c is not None), None)


def T(values: np.ndarray, requires_grad: bool = False) -> Tensor:
    """A tensor on the CPU, whatever the default device (the nest is the CPU's)."""
    return Tensor(values, device="CPU", requires_grad=requires_grad)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def nest(monkeypatch):
    """Every contraction takes the nest (by rule only large ones do), built afresh; nest() afterwards says
    whether one ran."""
    dev = Device["CPU"]
    monkeypatch.setattr(heuristics, "worth", lambda c: True)
    monkeypatch.setenv("TG_BEAM", "0")
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    monkeypatch.setattr(dev, "_by_key", OrderedDict())
    return lambda: any("gemm" in prog.info.extra for prog in dev._by_key.values())


def close(got: np.ndarray, want: np.ndarray) -> None:
    scale = np.abs(want).max() + 1e-9
    assert np.abs(got - want).max() / scale < 2e-6, np.abs(got - want).max() / scale


# ---------------------------------------------------------------------------- what is a contraction

def test_matmul_is_a_contraction_with_the_store_plain():
    c = contraction(T(rand(300, 200)) @ T(rand(200, 150)))
    assert c is not None and c.sizes == (1, 300, 150, 200) and c.ldc == 150 and not c.epilogue


@pytest.mark.parametrize("layout", ["A B^T", "A^T B", "A^T B^T"])
def test_transposed_operands_are_contractions(layout):
    a = T(rand(200, 300)).T if layout.startswith("A^T") else T(rand(300, 200))
    b = T(rand(150, 200)).T if layout.endswith("B^T") else T(rand(200, 150))
    c = contraction(a @ b)
    assert c is not None and c.sizes == (1, 300, 150, 200)


def test_batched_and_broadcast_batches():
    c = contraction(T(rand(3, 100, 210)) @ T(rand(3, 210, 220)))
    assert c is not None and c.sizes == (3, 100, 220, 210)
    c = contraction(T(rand(3, 100, 210)) @ T(rand(210, 220)))
    assert c is not None and c.sizes[1:] == (300, 220, 210)        # the batch merges into M


def test_an_epilogue_fuses_after_the_reduce():
    c = contraction((T(rand(300, 200)) @ T(rand(200, 150)) + T(rand(150))).relu())
    assert c is not None and c.epilogue


def test_what_is_not_a_contraction():
    assert contraction(T(rand(64, 64)) @ T(rand(64, 64))) is None       # too small to pay
    assert contraction((T(rand(2000, 3000)) + 1).sum(axis=1)) is None        # no product
    assert contraction((T(rand(300, 1, 200)) * T(rand(1, 150, 200))).amax(axis=2)) is None


def test_in_place_updates_that_read_their_target_keep_the_one_pass_kernel(nest):
    """The nest keeps partial sums in the output: fine for an assign into memory it does not read (what
    .numpy() does), not for one reading the old values (c += a @ b), whichever lazy buffer they are read
    through (a view of the target's memory is the target)."""
    a, b, c0 = rand(300, 200), rand(200, 150), rand(300, 150)
    dest = T(np.zeros((300, 150), np.float32)).realize()
    assert contraction(dest.assign(T(a) @ T(b))) is not None
    c = T(c0).realize()
    update = c.assign(c + T(a) @ T(b))
    assert contraction(update) is None
    update.realize()
    close(c.numpy(), c0 + a.astype(np.float64) @ b)
    a, b, c1 = rand(512, 800), rand(800, 1024), rand(512, 1024)
    c = T(np.zeros((512, 1024), np.float32)).realize()
    flat = c.reshape(-1)
    c.assign(T(c1)).realize()
    update = c.assign(flat.reshape(512, 1024) + T(a) @ T(b))
    assert contraction(update) is None
    update.realize()
    close(c.numpy(), c1 + a.astype(np.float64) @ b)


# ---------------------------------------------------------------------------- against numpy

@pytest.mark.parametrize("m,k,n", [(257, 263, 131), (130, 1100, 97), (1000, 37, 150), (63, 1025, 260)])
@pytest.mark.parametrize("layout", ["A B", "A B^T", "A^T B", "A^T B^T"])
def test_matmul_matches_numpy(m, k, n, layout, nest):
    a_np = rand(k, m).T if layout.startswith("A^T") else rand(m, k)
    b_np = rand(n, k).T if layout.endswith("B^T") else rand(k, n)
    a = T(np.ascontiguousarray(a_np.T)).T if layout.startswith("A^T") else T(a_np)
    b = T(np.ascontiguousarray(b_np.T)).T if layout.endswith("B^T") else T(b_np)
    out = a @ b
    assert contraction(out) is not None
    close(out.numpy(), a_np.astype(np.float64) @ b_np)
    assert nest()


def test_batched_matmul_and_an_epilogue_match_numpy(nest):
    a, b, bias = rand(3, 129, 700), rand(3, 700, 170), rand(170)
    out = (T(a) @ T(b)) * 0.5 + T(bias)
    found = contraction(out)
    assert found is not None and found.epilogue
    close(out.numpy(), (a.astype(np.float64) @ b) * 0.5 + bias)
    assert nest()


def test_factors_that_are_expressions_are_evaluated_by_the_packing(nest):
    a, b = rand(300, 200), rand(200, 150)
    out = (T(a) * 2).exp() @ T(b).half().float()
    assert contraction(out) is not None
    close(out.numpy(), np.exp(a.astype(np.float64) * 2) @ b.astype(np.float16).astype(np.float64))
    assert nest()


def test_gradients_of_a_matmul_match_numpy(nest):
    """Backward makes the transposed layouts (A^T G and G B^T) as contractions of their own."""
    a, b, g = rand(300, 260), rand(260, 170), rand(300, 170)
    ta, tb = T(a, requires_grad=True), T(b, requires_grad=True)
    ((ta @ tb) * T(g)).sum().backward()
    close(ta.grad.numpy(), g.astype(np.float64) @ b.T)
    close(tb.grad.numpy(), a.T.astype(np.float64) @ g)
    assert nest()


# ---------------------------------------------------------------------------- the generated nest itself

def build(c: gemm.Contraction, p: heuristics.Params, prefix: str = "", threads: int = 0):
    renderer = CStyleRenderer(DIALECTS["c"], threads=threads) if threads else Device["CPU"].renderer
    src = prefix + nests.render(c, p, renderer, "g_test", LANES)
    scratch_library()       # what the nests take their packing buffers from
    lib = ctypes.CDLL(str(ClangCompiler().compile(src)))
    return lib.g_test


def run(fn, out: np.ndarray, *ins: np.ndarray) -> None:
    fn(*[ctypes.c_void_p(a.ctypes.data) for a in (out, *ins)])


@pytest.mark.parametrize("p", [heuristics.Params(6, 4 * LANES, 512, 256, 4096),
                               heuristics.Params(8, 2 * LANES, 64, 24, 2 * LANES),
                               heuristics.Params(3, LANES, 17, 5, LANES),
                               heuristics.Params(1, LANES, 1000, 1, 3 * LANES),
                               heuristics.Params(8, 3 * LANES, 100, 40, 100)])
@pytest.mark.parametrize("threads", [0, 8])
def test_every_block_shape_computes_the_same(p, threads):
    """Block sizes that divide nothing: partial K blocks (partial sums kept in the output), partial
    row and column blocks, more row blocks than threads and fewer, a column block that is not a whole
    number of panels (rounded down to one). At 8 threads the rows are too few for a share each (under
    four panels a thread), so the threads split each block's columns instead."""
    a, b = rand(141, 1100), rand(1100, 3 * LANES + 5)
    c = contraction(T(a) @ T(b))
    assert c is not None
    fn = build(c, heuristics.clamp(c, p, LANES), threads=threads)
    out = np.full((141, 3 * LANES + 5), np.nan, np.float32)
    run(fn, out, a, b)
    close(out, a.astype(np.float64) @ b)


def test_without_packing_buffers_the_plain_loops_compute_it():
    """The scratch pool failing (memory exhausted) takes the unblocked loops instead of crashing."""
    a, b, bias = rand(200, 300), rand(300, 90), rand(90)
    c = contraction(T(a) @ T(b) + T(bias))
    assert c is not None
    no_memory = "static void* no_memory(long n) { return 0; }\n#define tg_scratch_take no_memory\n"
    fn = build(c, heuristics.params(c, LANES), prefix=no_memory)
    out = np.zeros((200, 90), np.float32)
    run(fn, out, a, b, bias)
    close(out, a.astype(np.float64) @ b + bias)


def test_two_contractions_share_a_translation_unit():
    """Their helpers are named after the kernel and their macros undefined at the end, so the compiler
    can build two contraction kernels (and others) in one batch, and each computes its own."""
    a1, b1, a2, b2 = rand(300, 200), rand(200, 150), rand(3, 100, 210), rand(3, 210, 220)
    c1 = contraction(T(a1) @ T(b1))
    c2 = contraction(T(a2) @ T(b2))
    assert c1 is not None and c2 is not None
    dev = Device["CPU"]
    srcs = [nests.render(c1, heuristics.params(c1, LANES), dev.renderer, "g_one", LANES),
            nests.render(c2, heuristics.params(c2, LANES), dev.renderer, "g_two", LANES)]
    paths = ClangCompiler().compile_batch(srcs)
    out1, out2 = np.zeros((300, 150), np.float32), np.zeros((3, 100, 220), np.float32)
    run(ctypes.CDLL(str(paths[0])).g_one, out1, a1, b1)
    run(ctypes.CDLL(str(paths[1])).g_two, out2, a2, b2)
    close(out1, a1.astype(np.float64) @ b1)
    close(out2, a2.astype(np.float64) @ b2)


# ---------------------------------------------------------------------------- the search of block sizes

def one_pass(c: gemm.Contraction):
    dev = Device["CPU"]
    lin = linearize_for(c.kernel, dev.renderer.d, **dev.lower_options)
    return lambda name: dev.renderer.render(lin, name)


def test_the_search_times_candidates_once_and_remembers_the_winner(monkeypatch, tmp_path):
    from tg.core.codegen import search
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TG_BEAM", "30")
    monkeypatch.setenv("TG_BEAM_MIN_MACS", "1")
    monkeypatch.setattr(search, "_spent", [0.0])
    a, b = rand(300, 200), rand(200, 150)
    c = contraction(T(a) @ T(b))
    assert c is not None
    dev = Device["CPU"]
    built: list[str] = []
    compiler = ClangCompiler()
    original = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda src: (built.append(src), original(src))[1])
    first = search.choose(c, "g_search", LANES, dev.renderer, compiler, one_pass(c))
    assert len(built) == len(set(built)) >= len(search.candidates(LANES))    # each candidate built once
    records = list((tmp_path / "search").glob("*.json"))
    assert len(records) == 1 and not list((tmp_path / "search").glob("*.tmp"))
    built.clear()
    assert search.choose(c, "g_search", LANES, dev.renderer, compiler, one_pass(c)) == first
    assert built == []                                        # the second run builds and times nothing
    if first is not None:                                     # and a winning nest computes the product
        out = np.zeros((300, 150), np.float32)
        run(build(c, first), out, a, b)
        close(out, a.astype(np.float64) @ b)


def test_no_search_below_the_size_or_with_the_knob_off_and_a_damaged_record_is_searched_again(
        monkeypatch, tmp_path):
    from tg.core.codegen import search
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(search, "_spent", [0.0])
    big = contraction(T(rand(600, 300)) @ T(rand(300, 1100)))
    small = contraction(T(rand(300, 200)) @ T(rand(200, 150)))
    assert big is not None and small is not None
    dev = Device["CPU"]
    compiler = ClangCompiler()

    def choose(c: gemm.Contraction):
        return search.choose(c, "g_s", LANES, dev.renderer, compiler, one_pass(c))
    monkeypatch.setenv("TG_BEAM_MIN_MACS", str(1 << 40))       # the rule: the nest only for large matrices
    assert choose(big) == heuristics.params(big, LANES) and choose(small) is None
    monkeypatch.setenv("TG_BEAM_MIN_MACS", "1")
    monkeypatch.setenv("TG_BEAM", "0")
    assert choose(big) == heuristics.params(big, LANES)
    assert not (tmp_path / "search").exists()
    monkeypatch.setenv("TG_BEAM", "0.000001")     # the budget: the one-pass kernel (the reference the
    assert choose(big) in (None, heuristics.params(big, LANES))   # others are checked against) and the rule's
    record = next((tmp_path / "search").glob("*.json"))
    assert '"tried": 2,' in record.read_text()
    (tmp_path / "search" / "elsewhere").mkdir()
    record.rename(tmp_path / "search" / "elsewhere" / record.name)
    assert choose(big) == heuristics.params(big, LANES)             # spent: the rule, unrecorded
    assert not list((tmp_path / "search").glob("*.json"))
    (tmp_path / "search" / "elsewhere" / record.name).rename(record)
    monkeypatch.setattr(search, "_spent", [0.0])
    record.write_text('{"params": [6, 7, 0, 1, 1], "tried": 9, "of": 9}')   # sizes no nest can run
    monkeypatch.setenv("TG_BEAM", "30")
    shapes = search.candidates(LANES) + search.direct_candidates(LANES) + \
        search.broadcast_candidates(LANES)                        # y (a plain B) reads in place
    choices = [None, *[heuristics.clamp(big, heuristics.Params(*t), LANES) for t in shapes],
               heuristics.params(big, LANES)]
    assert choose(big) in choices
    record.write_text("{not json")
    monkeypatch.setenv("TG_BEAM", "30")
    assert choose(big) in choices
    assert '"tried": 2,' not in record.read_text()


# ---------------------------------------------------------------------------- the nest reading y in place

def conv_ref(x: np.ndarray, w: np.ndarray, padding=(0, 0), dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """torch's conv2d at stride 1, summed directly in float64."""
    (ph, pw), (dh, dw) = padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    o, cin_g, kh, kw = w.shape
    oh, ow = xp.shape[2] - dh * (kh - 1), xp.shape[3] - dw * (kw - 1)
    out = np.zeros((x.shape[0], o, oh, ow))
    for co in range(o):
        base = co // (o // groups) * cin_g
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, base:base + cin_g, i * dh:i * dh + oh, j * dw:j * dw + ow]
                out[:, co] += np.einsum("bchw,c->bhw", patch, w[co, :, i, j].astype(np.float64))
    return out


@pytest.fixture
def forced(monkeypatch):
    """forced(p): every contraction, however small, runs with block sizes p (clamped to it), built
    afresh; the list it returns collects the contractions that did."""
    from tg.core.codegen import search
    dev = Device["CPU"]
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")
    monkeypatch.setattr(dev, "_by_key", OrderedDict())
    monkeypatch.setattr(heuristics, "MIN_MACS", 1)          # small cases, quick tests
    seen: list = []

    def force(p: heuristics.Params):
        def choose(c, name, lanes, renderer, compiler, one_pass):
            seen.append(c)
            fitted = heuristics.clamp(c, p, lanes)
            return fitted if nests.runs(c, fitted, lanes) else None
        monkeypatch.setattr(search, "choose", choose)
        return seen
    return force


def test_a_convs_reduce_reads_the_input_rows_in_place():
    """At stride 1 a conv's reduce is a contraction whose y (the padded input's rows, through a window
    view) is read where it lies: unit stride along the output positions, one offset per (Cin, kh, kw)."""
    x = T(rand(2, 16, 40, 40))
    c = contraction(x.conv2d(T(rand(24, 16, 3, 3)), padding=1))
    assert c is not None and c.sizes == (2, 24, 40 * 42, 16 * 9) and len(c.k_dims) == 3
    assert c.direct_ok(LANES) and gemm._separable(c)
    rule = heuristics.direct_rule(c, LANES)
    assert rule is not None and rule.nest == "direct" and nests.runs(c, rule, LANES)
    square = contraction(T(rand(300, 200)) @ T(rand(200, 150)))
    assert square is not None and square.direct_ok(LANES)
    assert heuristics.direct_rule(square, LANES) is None


DIRECT = [heuristics.Params(mr, nr, 0, 0, 0, "direct")
          for mr, nr in ((8, 3 * LANES), (6, 4 * LANES), (5, LANES), (1, 2 * LANES))]


@pytest.mark.parametrize("p", DIRECT)
@pytest.mark.parametrize("case", [
    ((3, 16, 30, 29), (27, 16, 3, 3), {"padding": (1, 1)}),
    ((2, 8, 25, 21), (40, 4, 3, 2), {"padding": (2, 0), "dilation": (2, 3), "groups": 2}),
    ((2, 24, 19, 23), (40, 24, 1, 1), {"padding": (0, 0)}),
])
def test_the_direct_nest_computes_convs_as_a_float64_sum(p, case, forced):
    """Odd channel counts (edge panels of M), rows of positions that whole tiles do not divide (the last
    tile overlaps), groups (the weight depends on a batch dim: a table per batch index), dilation,
    asymmetric padding and 1x1 kernels."""
    x_shape, w_shape, kw = case
    x, w = rand(*x_shape), rand(*w_shape)
    seen = forced(p)
    out = T(x).conv2d(T(w), **kw)
    got = out.numpy()
    assert seen and all(c.direct_ok(LANES) for c in seen)
    want = conv_ref(x, w, kw["padding"], kw.get("dilation", (1, 1)), kw.get("groups", 1))
    close(got, want)


@pytest.mark.parametrize("hw", [94, 95])
def test_the_direct_nest_streams_a_large_output_where_it_is_aligned(hw, forced):
    """An output of 4 MiB or more bypasses the cache where a vector store into it is 64-byte aligned
    (with AVX-512): rows of 96 x 94 positions are, rows of 97 x 95 mostly are not (one in 16 is) and
    neither is the overlapping last tile, stored plainly; either way the values are the direct sum's."""
    x, w = rand(4, 16, hw, hw), rand(32, 16, 3, 3)
    seen = forced(DIRECT[0])
    got = T(x).conv2d(T(w), padding=1).numpy()
    assert seen and seen[-1].kernel.buf_sizes[0] * 4 >= 4 << 20
    if LANES == 16:
        c = seen[-1]
        src = nests.render(c, heuristics.clamp(c, DIRECT[0], LANES), Device["CPU"].renderer, "s", LANES)
        assert "_mm512_stream_ps" in src and "_mm_sfence" in src
    close(got, conv_ref(x, w, (1, 1)))


@pytest.mark.parametrize("p", DIRECT[:3])
def test_the_direct_nest_computes_batched_matmuls_with_an_epilogue(p, forced):
    """A batched A @ B (x depends on the batch: packed once per batch index) with an epilogue (through
    the tile), N = 2 vectors and 3 more (two tiles of 2 vectors, overlapping) and 3 vectors and 5 more."""
    for n in (2 * LANES + 3, 3 * LANES + 5):
        a, b, bias = rand(3, 37, 70), rand(3, 70, n), rand(n)
        seen = forced(p)
        out = ((T(a) @ T(b)) * 0.5 + T(bias)).relu()
        got = out.numpy()
        assert seen and seen[-1].epilogue
        close(got, np.maximum((a.astype(np.float64) @ b) * 0.5 + bias, 0))


@pytest.mark.parametrize("p", DIRECT[:2])
def test_the_direct_nest_reads_a_sliced_y_from_its_start(p, forced):
    """y a slice of a larger buffer (a view with a start: a fused qkv's v, a shifted window): its
    start is counted once, with one offset table for every batch index (B shared by the batch) and with
    a table per batch index (a batched B, whose slices start in each batch's block)."""
    a, big = rand(3, 40, 64), rand(64, 100)
    seen = forced(p)
    got = (T(a) @ T(big)[:, 16:16 + 2 * LANES + 7]).numpy()
    assert seen and gemm._separable(seen[-1])
    close(got, a.astype(np.float64) @ big[:, 16:16 + 2 * LANES + 7])
    a2, big2 = rand(3, 40, 64), rand(3, 70, 90)
    got = (T(a2) @ T(big2)[:, 6:, 3:3 + 2 * LANES + 5]).numpy()
    close(got, a2.astype(np.float64) @ big2[:, 6:, 3:3 + 2 * LANES + 5])


def wgrad_ref(x: np.ndarray, g: np.ndarray, w_shape: tuple, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
              groups: int = 1) -> np.ndarray:
    """conv2d's weight gradient summed directly in float64."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    o, cin_g, kh, kw = w_shape
    oh, ow = g.shape[2:]
    out = np.zeros(w_shape)
    for co in range(o):
        base = co // (o // groups) * cin_g
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, base:base + cin_g, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                           j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[co, :, i, j] = np.einsum("bhw,bchw->c", g[:, co].astype(np.float64), patch)
    return out


BROADCAST = [heuristics.Params(mr, nr, kc, 0, 0, "broadcast")
             for mr, nr, kc in ((4, 6, 1024), (2, 12, 64), (1, 5, 37))]


@pytest.mark.parametrize("p", BROADCAST)
@pytest.mark.parametrize("case", [
    ((2, 16, 21, 19), (24, 16, 3, 3), {"padding": (1, 1)}),
    ((2, 16, 23, 20), (40, 8, 3, 2), {"padding": (2, 0), "dilation": (2, 3), "groups": 2}),
    ((3, 6, 17, 18), (40, 6, 3, 3), {"stride": (2, 1), "padding": (1, 2)}),
])
def test_the_broadcast_nest_computes_weight_gradients_as_a_float64_sum(p, case, forced):
    """Rows that whole vectors do not fill (24, 20 a group and 40 output channels), columns that whole
    tiles do not divide (Cin x kh x kw), K blocks that divide nothing (37, 64), several of them per
    batch index, groups with dilation, strides."""
    x_shape, w_shape, kw = case
    x = rand(*x_shape)
    wt = T(rand(*w_shape), requires_grad=True)
    y = T(x).conv2d(wt, **kw)
    g = rand(*y.shape)
    seen = forced(p)
    (y * T(g)).sum().backward()
    got = wt.grad.numpy()
    assert any(c.broadcast_ok() and len(c.n_dims) >= 2 for c in seen)
    want = wgrad_ref(x, g, w_shape, kw.get("stride", (1, 1)), kw["padding"], kw.get("dilation", (1, 1)),
                     kw.get("groups", 1))
    close(got, want)


@pytest.mark.parametrize("p", BROADCAST)
def test_the_broadcast_nest_computes_batched_matmuls_of_expressions(p, forced):
    """x an expression of its load (evaluated by the packing), batched x and y, odd M and N, a y sliced
    from a larger buffer (its start counted once)."""
    a, big = rand(3, 37, 70), rand(3, 80, 60)
    seen = forced(p)
    got = ((T(a) * 0.5).exp() @ T(big)[:, 4:74, 3:56]).numpy()
    assert seen and seen[-1].broadcast_ok()
    close(got, np.exp(a.astype(np.float64) * 0.5) @ big[:, 4:74, 3:56])


def test_the_broadcast_rule_takes_long_reduces_over_column_runs():
    """The rule: a conv's weight gradient (columns Cin x kh x kw) over a reduce of at least 1024
    positions takes the broadcast nest; a short reduce, or a plain matmul, does not."""
    def wgrad_contraction(hw: int):
        wt = T(rand(32, 16, 3, 3), requires_grad=True)
        (T(rand(2, 16, hw, hw)).conv2d(wt) * T(rand(2, 32, hw - 2, hw - 2))).sum().backward()
        return contraction(wt.grad)
    long, short = wgrad_contraction(40), wgrad_contraction(20)
    assert long is not None and long.size(long.k_dims) >= 1024 and long.broadcast_ok()
    rule = heuristics.broadcast_rule(long, LANES)
    assert rule is not None and rule.nest == "broadcast" and nests.runs(long, rule, LANES)
    assert short is None or heuristics.broadcast_rule(short, LANES) is None
    square = contraction(T(rand(300, 2000)) @ T(rand(2000, 150)))
    assert square is not None and square.broadcast_ok()
    assert heuristics.broadcast_rule(square, LANES) is None


def test_a_weight_gradients_columns_are_a_run_of_dims(nest, monkeypatch):
    """dW[o, (c, i, j)] sums g[b, o, p] times the window copy over b and p: its columns (Cin, kh, kw)
    are one run in the store though not in the copy, and its reduce runs over two dims (images and
    positions); the packed nest computes it."""
    monkeypatch.setattr(heuristics, "MIN_MACS", 1)
    x, w, g = rand(4, 16, 20, 20), rand(24, 16, 3, 3), rand(4, 24, 9, 9)
    wt = T(w, requires_grad=True)
    y = T(x).conv2d(wt, stride=2, padding=0)
    (y * T(g)).sum().backward()
    c = contraction(wt.grad)
    assert c is not None and len(c.n_dims) >= 2 and c.size(c.n_dims) == 16 * 9 and len(c.k_dims) == 2
    want = np.zeros(w.shape)
    for i in range(3):
        for j in range(3):
            patch = x[:, :, i:i + 17:2, j:j + 17:2].astype(np.float64)
            want[:, :, i, j] = np.einsum("bohw,bchw->oc", g, patch)
    close(wt.grad.numpy(), want)
    assert nest()


def test_an_unfinished_search_goes_on_where_it_stopped(monkeypatch, tmp_path):
    """Each process's budget times what it can; the next one times only the candidates not yet timed
    (a search whose candidates outlast one budget finishes over a few processes instead of starting over
    in every one), and once all are timed a process times nothing."""
    from tg.core.codegen import search
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TG_BEAM_MIN_MACS", "1")
    big = contraction(T(rand(600, 300)) @ T(rand(300, 1100)))
    assert big is not None
    dev = Device["CPU"]
    compiler = ClangCompiler()
    built: list[str] = []
    original = compiler.compile
    monkeypatch.setattr(compiler, "compile", lambda src: (built.append(src), original(src))[1])

    def process(budget: str):
        monkeypatch.setattr(search, "_spent", [0.0])        # a new process
        monkeypatch.setenv("TG_BEAM", budget)
        built.clear()
        return search.choose(big, "g_r", LANES, dev.renderer, compiler, one_pass(big))
    import json
    process("0.000001")
    record = next((tmp_path / "search").glob("*.json"))
    first = json.loads(record.read_text())
    assert first["tried"] >= 1 and first["tried"] < first["of"] and len(first["timed"]) == first["tried"]
    process("0.000001")
    second = json.loads(record.read_text())
    assert second["tried"] > first["tried"]
    kept = {json.dumps(k): sec for k, sec in second["timed"]}
    assert all(kept[json.dumps(k)] == sec for k, sec in first["timed"])    # timed once, kept as timed
    won = process("60")
    last = json.loads(record.read_text())
    # (the one-pass kernel is built again as the reference, where an earlier process timed it)
    assert last["tried"] == last["of"] and len(built) <= last["of"] - second["tried"] + 1
    best = min(sec for _, sec in last["timed"] if sec is not None)
    assert last["seconds"] == best
    assert process("60") == won and built == []              # done: nothing is timed again
