"""A device keeps one program per `Kernel.key` and hands it to every kernel with that key, so the key must
cover everything lowering reads. It once was the AST alone, which leaves out whether the kernel writes in
place: a large float32 output computed fresh is stored with streaming stores, which fault on memory not
64-byte aligned, and an assign of the same values into a view of a flat buffer (ZeRO's and DDP's
parameters are such views, at any 4-byte offset) then ran that program and died with SIGSEGV; a ragged
kernel's overlapping vector tail, harmless for a fresh output, was also handed to assigns.

Generated: kernels of odd and large sizes (past heuristics.STREAM_MIN_BYTES), each as a fresh output
and as an assign into a view of flat memory at several offsets, in shuffled orders: the program the
device hands out for each is the one lowered for that kernel alone, and its values are numpy's. And a
streaming program run directly on unaligned memory stores plainly (its own check, once a launch)."""
import numpy as np
import pytest

from tg import Tensor
from tg.core.codegen import heuristics
from tg.core.device import Buffer, Device
from tg.core.dtype import dtypes
from tg.core.host import view_tensor
from tg.core.schedule import create_schedule

BIG = heuristics.STREAM_MIN_BYTES // 4 + 16       # float32 elements: streamed when fresh
SIZES = [37, 1003, BIG, BIG - 11]                  # the last ragged (a split: a vector tail)
OFFSETS = [0, 1, 3, 16]                           # elements into the flat memory (4, 12, 64 bytes)
EXPRS = {
    "affine": (lambda x, y: x * 2 + 1, lambda x, y: x * 2 + 1),
    "product": (lambda x, y: x * y - y, lambda x, y: x * y - y),
    "max": (lambda x, y: x.maximum(y) * 0.5, lambda x, y: np.maximum(x, y) * 0.5),
}


def cpu() -> Device:
    return Device["CPU"]


def inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([n, seed])
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def cases(seed: int) -> list[tuple[str, int, int | None]]:
    """(expression, size, offset into a view or None for a fresh output), shuffled."""
    out = [(e, n, off) for e in EXPRS for n in SIZES for off in [None, *OFFSETS]]
    np.random.default_rng(seed).shuffle(out)
    return out


def build(name: str, n: int, off: int | None, x: np.ndarray, y: np.ndarray):
    """(the tensor to realize, the flat buffer or None) for one case."""
    tx, ty = Tensor(x, device="CPU").realize(), Tensor(y, device="CPU").realize()
    value = EXPRS[name][0](tx, ty)
    if off is None:
        return value, None
    flat = Buffer("CPU", n + 32, dtypes.float32).copyin(np.full(n + 32, 7.0, np.float32))
    return view_tensor(flat, off, (n,)).assign(value), flat


@pytest.mark.parametrize("seed", [0, 1])
def test_every_kernel_gets_the_program_lowered_for_it(seed):
    dev = cpu()
    for name, n, off in cases(seed):
        x, y = inputs(n, seed)
        out, _ = build(name, n, off, x, y)
        kernels = [it.kernel for it in create_schedule([out.lazydata]) if it.kind == "kernel"]
        assert kernels and all(k.assign == (off is not None) for k in kernels)
        for k in kernels:
            _, src, _ = dev.lower(k)
            assert dev.get_program(k).src == src, (name, n, off)


@pytest.mark.parametrize("seed", [0, 1])
def test_fresh_outputs_and_assigns_into_views_compute_numpys_values(seed):
    for name, n, off in cases(seed):
        x, y = inputs(n, seed)
        out, flat = build(name, n, off, x, y)
        want = EXPRS[name][1](x, y)
        got = out.realize().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{name} {n} {off}")
        if flat is not None:        # the view's memory holds the values, its neighbours are untouched
            mem = flat.numpy()
            np.testing.assert_allclose(mem[off:off + n], want, rtol=1e-6, atol=1e-6)
            assert (mem[:off] == 7.0).all() and (mem[off + n:] == 7.0).all()


@pytest.mark.parametrize("off", [1, 3, 15, 16])
def test_a_streaming_program_on_unaligned_memory_stores_plainly(off):
    if cpu().lower_options.get("cpu_vector_bytes") != 64:
        pytest.skip("streaming stores are AVX-512's (16 lanes); this CPU's vectors are narrower")
    x, y = inputs(BIG, 5)
    tx = Tensor(x, device="CPU").realize()
    (item,) = [it for it in create_schedule([(tx * 2 + 1).lazydata]) if it.kind == "kernel"]
    prog = cpu().get_program(item.kernel)
    assert "_mm512_stream_ps" in prog.src          # a fresh output this large streams
    flat = Buffer("CPU", BIG + 32, dtypes.float32).copyin(np.zeros(BIG + 32, np.float32))
    out = flat.view(off * 4, BIG)                 # 4 * off bytes in: not 64-byte aligned unless off is 16
    prog([out, tx.lazydata.base.realized])
    np.testing.assert_allclose(out.numpy(), x * 2 + 1, rtol=1e-6)
    assert not flat.numpy()[:off].any() and not flat.numpy()[off + BIG:].any()
