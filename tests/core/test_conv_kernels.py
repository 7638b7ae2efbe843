"""How a small-channel conv's kernels are built on the CPU (issue 21: bench_train's first CNN layer):
its windows are copied with plain loads, a stack of shifted windows (as pools take them) has its
masks folded away, the weight gradient's reduce is tiled over both of its reused inputs, and the
results are numpy's."""
import numpy as np
import pytest
from helpers import cpu_source, kernels_of

from tg import Tensor


def conv_ref(x: np.ndarray, w: np.ndarray, dilation: int = 1, stride: int = 1) -> np.ndarray:
    """Direct 2-d convolution (cross-correlation, as torch), in float64."""
    b, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - dilation * (kh - 1) - 1) // stride + 1, (wd - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((b, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i * dilation:i * dilation + (oh - 1) * stride + 1:stride,
                      j * dilation:j * dilation + (ow - 1) * stride + 1:stride]
            out += np.einsum("bchw,oc->bohw", patch.astype(np.float64), w[:, :, i, j].astype(np.float64))
    return out


def dims_of(kernel):
    from tg.core.codegen.linearizer import Dims
    from tg.core.runtime.ops_cpu import _vector_bytes
    return Dims(kernel, _vector_bytes(), True, False)


def test_window_stack_masks_fold_to_plain_copies():
    """A stack of shifted windows (as overlapping pools take them) is a sum of masked loads, one valid
    per window position; the position dim (9) is unrolled whole, so each copy knows its position and
    no select is left."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 11, 13)).astype(np.float32)
    t = Tensor(x, device="CPU")
    y = Tensor.stack([t[:, :, i:i + 9, j:j + 11] for i in range(3) for j in range(3)], dim=2)
    stacks = kernels_of(y)
    assert len(stacks) == 1
    assert any(d.size == 9 and d.upcast == 9 for d in dims_of(stacks[0]).dims)
    body = cpu_source(stacks[0]).split("void k(", 1)[1]
    assert "?" not in body, body                     # no masked load survives the unroll
    want = np.stack([x[:, :, i:i + 9, j:j + 11] for i in range(3) for j in range(3)], axis=2)
    np.testing.assert_array_equal(y.numpy(), want)


def test_conv_copies_its_windows_with_plain_loads():
    """conv2d copies the windows out once, each read straight from the input (an affine index: no
    mask, no select), then one reduce multiplies them with the weight."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 11, 13)).astype(np.float32)
    w = rng.standard_normal((5, 1, 3, 3)).astype(np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"))
    kernels = kernels_of(y)
    copies = [k for k in kernels if len(k.buf_sizes) == 2]       # the windows: one input
    assert len(kernels) == 2 and len(copies) == 1, [k.buf_sizes for k in kernels]
    body = cpu_source(copies[0]).split("void k(", 1)[1]
    assert "?" not in body, body
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w), rtol=1e-5, atol=1e-5)


def test_weight_grad_tiles_window_positions_by_three():
    """dW[o, k] sums g[b, o, p] * unfolded x[b, k, p]: g is reused across the 9 window positions and x
    across the output channels, so both are register-tiled (positions by 3, as 9 has no 4 or 2)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 1, 14, 14)).astype(np.float32)
    w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    g = rng.standard_normal((3, 8, 12, 12)).astype(np.float32)
    wt = Tensor(w, device="CPU", requires_grad=True)
    (Tensor(x, device="CPU").conv2d(wt) * Tensor(g, device="CPU")).sum().backward()
    kernels = kernels_of(wt.grad)
    tiled = [k for k in kernels if any(d.size == 9 and d.upcast == 3 for d in dims_of(k).dims)]
    assert tiled, [[(d.size, d.upcast, d.lanes) for d in dims_of(k).dims] for k in kernels]
    want = np.zeros_like(w, dtype=np.float64)
    for i in range(3):
        for j in range(3):
            want[:, 0, i, j] = np.einsum("bohw,bhw->o", g.astype(np.float64), x[:, 0, i:i + 12, j:j + 12])
    np.testing.assert_allclose(wt.grad.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,dilation", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_overlapping_windows_match_numpy(stride, dilation):
    """Windows taken by shrinking (stride 1) or by strided indexing (stride 2), with dilation."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), stride=stride, dilation=dilation)
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, dilation, stride), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [
    ((2, 4, 5, 6), (3, 4, 3, 3), {"padding": 1}),
    ((1, 4, 7, 6), (2, 2, 2, 3), {"padding": (1, 2), "dilation": (2, 1), "groups": 2}),
    ((2, 6, 6, 5), (6, 1, 3, 3), {"padding": 1, "groups": 6}),                     # depthwise
])
def test_input_gradient_as_a_conv_of_the_gradient(case):
    """At stride 1, where the gradient's window copy is no larger than the window gradients, dx is a
    conv of the output gradient with the weight flipped and its channel dims swapped per group; it
    must equal dx summed the direct way, in float64."""
    x_shape, w_shape, kw = case
    rng = np.random.default_rng(4)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    xt = Tensor(x, device="CPU", requires_grad=True)
    y = xt.conv2d(Tensor(w, device="CPU"), **kw)
    assert y._ctx._as_conv()
    g = rng.standard_normal(y.shape).astype(np.float32)
    (y * Tensor(g, device="CPU")).sum().backward()
    want = np.zeros(x.shape)
    ph, pw = kw["padding"] if isinstance(kw["padding"], tuple) else (kw["padding"],) * 2
    dh, dw = kw.get("dilation", (1, 1))
    groups = kw.get("groups", 1)
    cin_g, cout_g = x.shape[1] // groups, w.shape[0] // groups
    padded = np.zeros((x.shape[0], x.shape[1], x.shape[2] + 2 * ph, x.shape[3] + 2 * pw))
    for o in range(w.shape[0]):
        gi = o // cout_g
        for c in range(cin_g):
            for i in range(w.shape[2]):
                for j in range(w.shape[3]):
                    padded[:, gi * cin_g + c, i * dh:i * dh + g.shape[2], j * dw:j * dw + g.shape[3]] += \
                        g[:, o] * float(w[o, c, i, j])
    want = padded[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]]
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=1e-4, atol=1e-4)
