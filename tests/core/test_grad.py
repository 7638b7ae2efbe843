"""Every primitive's gradient (and the composite ops built on them) against central finite
differences in float64."""
import numpy as np
import pytest
from helpers import gradcheck

from tg import Tensor
from tg.core import function as F
from tg.core.ops import BufferOps, MovementOps, ReduceOps
from tg.core.tensor import apply

rng = np.random.default_rng(0)


def r(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def pos(*shape):
    return rng.uniform(0.5, 2.0, shape)


PRIMITIVES = {
    "exp2": (lambda a: a.exp2(), [r(3, 4)]),
    "exp": (lambda a: a.exp(), [r(3, 4, lo=-3.0, hi=3.0)]),
    "sigmoid": (lambda a: a.sigmoid(), [r(5, 3, lo=-6.0, hi=6.0)]),
    "tanh": (lambda a: a.tanh(), [r(7, lo=-3.0, hi=3.0)]),
    "erf": (lambda a: a.erf(), [r(6, lo=-3.0, hi=3.0)]),
    "erfc": (lambda a: a.erfc(), [r(2, 3, lo=-3.0, hi=3.0)]),
    "log2": (lambda a: a.log2(), [pos(3, 4)]),
    "sin": (lambda a: a.sin(), [r(3, 4)]), "cos": (lambda a: a.cos(), [r(3, 4)]),
    "sqrt": (lambda a: a.sqrt(), [pos(5)]),
    "recip": (lambda a: a.reciprocal(), [pos(2, 3)]),
    "neg": (lambda a: -a, [r(4)]),
    "cast": (lambda a: a.cast("float64") * 1.0, [r(3)]),
    "add": (lambda a, b: a + b, [r(3, 4), r(3, 4)]),
    "mul": (lambda a, b: a * b, [r(3, 4), r(3, 4)]),
    "max": (lambda a, b: a.maximum(b), [r(7), r(7)]),
    "where": (lambda a, b: (a > 0).where(a, b), [r(6), r(6)]),
    "mulacc": (lambda a, b, c: apply(F.MulAcc, a, b, c), [r(5), r(5), r(5)]),
    "sum": (lambda a: a.sum(1), [r(3, 5)]),
    "reduce_max": (lambda a: a.amax(0), [r(4, 3)]),
    "reshape": (lambda a: a.reshape(6, 2) * Tensor(np.arange(12.0).reshape(6, 2)), [r(3, 4)]),
    "permute": (lambda a: a.permute(2, 0, 1), [r(2, 3, 4)]),
    "expand": (lambda a: a.expand(4, 3), [r(1, 3)]),
    "pad": (lambda a: a.pad(((1, 2), (0, 1))), [r(2, 3)]),
    "shrink": (lambda a: a[1:3, ::2], [r(4, 5)]),
    "flip": (lambda a: a.flip(0), [r(4, 2)]),
    "contiguous": (lambda a: a.T.contiguous(), [r(3, 2)]),
    "copy": (lambda a: (a.to("NUMPY") * 2).to(a.device), [r(3)]),
}


def test_every_primitive_has_a_gradient_check():
    from tg.core.function import FUNCTIONS, NoGrad
    differentiable = {op for op, fn in FUNCTIONS.items() if not issubclass(fn, NoGrad)}
    differentiable -= {BufferOps.EMPTY, BufferOps.CONST, BufferOps.ASSIGN}   # no inputs to differentiate
    covered = {F.Exp2, F.Exp, F.Sigmoid, F.Tanh, F.Erf, F.Erfc, F.Log2, F.Sin, F.Cos, F.Sqrt, F.Reciprocal,
               F.Neg, F.Cast, F.Add, F.Mul, F.Maximum, F.Where, F.MulAcc, F.Sum, F.Max, F.Reshape, F.Permute,
               F.Expand, F.Pad, F.Shrink, F.Flip, F.Contiguous, F.Copy}
    assert {FUNCTIONS[op] for op in differentiable} <= covered
    assert all(op in FUNCTIONS for op in [*ReduceOps, *MovementOps])


@pytest.mark.parametrize("name", PRIMITIVES)
def test_primitive_gradient(name):
    fn, inputs = PRIMITIVES[name]
    gradcheck(fn, *inputs)


COMPOSITES = {
    "exp": (lambda a: a.exp(), [r(5)]), "log": (lambda a: a.log(), [pos(5)]),
    "sigmoid": (lambda a: a.sigmoid(), [r(5)]), "tanh": (lambda a: a.tanh(), [r(5)]),
    "gelu": (lambda a: a.gelu(), [r(6)]), "gelu_tanh": (lambda a: a.gelu("tanh"), [r(6)]),
    "silu": (lambda a: a.silu(), [r(6)]), "softplus": (lambda a: a.softplus(), [r(6)]),
    "relu": (lambda a: a.relu(), [r(6) + 0.05]), "leaky_relu": (lambda a: a.leaky_relu(0.1), [r(6) + 0.05]),
    "abs": (lambda a: a.abs(), [r(6) + 0.05]), "clamp": (lambda a: a.clamp(-0.5, 0.5), [r(8) * 0.9 + 0.03]),
    "div": (lambda a, b: a / b, [r(4), pos(4)]), "pow": (lambda a, b: a ** b, [pos(4), r(4)]),
    "pow_int": (lambda a: a ** 3, [r(4)]), "rsqrt": (lambda a: a.rsqrt(), [pos(3)]),
    "cos": (lambda a: a.cos(), [r(4)]), "minimum": (lambda a, b: a.minimum(b), [r(5), r(5)]),
    "mean": (lambda a: a.mean((0, 2)), [r(2, 3, 4)]), "var": (lambda a: a.var(1), [r(3, 5)]),
    "std": (lambda a: a.std(), [r(7)]), "logsumexp": (lambda a: a.logsumexp(-1), [r(3, 4)]),
    "softmax": (lambda a: a.softmax(0), [r(4, 3)]), "log_softmax": (lambda a: a.log_softmax(-1), [r(2, 5)]),
    "cumsum": (lambda a: a.cumsum(1), [r(2, 5)]), "prod": (lambda a: a.prod(1), [pos(3, 4)]),
    "matmul": (lambda a, b: a @ b, [r(3, 4), r(4, 5)]), "bmm": (lambda a, b: a @ b, [r(2, 3, 4), r(4, 2)]),
    "linear": (lambda x, w, b: x.linear(w, b), [r(2, 3), r(4, 3), r(4)]),
    "conv2d": (lambda x, w, b: x.conv2d(w, b, stride=2, padding=1), [r(1, 2, 5, 5), r(3, 2, 3, 3), r(3)]),
    "conv2d_groups": (lambda x, w: x.conv2d(w, groups=2, dilation=2), [r(1, 4, 6, 6), r(2, 2, 2, 2)]),
    # windows whose strided span passes the padded edge (3 * 3 > 8 - 2 * 2 + 1), and 1x1 at stride 2
    "conv2d_strided": (lambda x, w, b: x.conv2d(w, b, stride=(3, 2), padding=(2, 1), dilation=(2, 1)),
                       [r(2, 2, 8, 7), r(3, 2, 3, 2), r(3)]),
    "conv2d_1x1": (lambda x, w: x.conv2d(w, stride=2), [r(1, 3, 5, 4), r(2, 3, 1, 1)]),
    # stride 1 and fewer outputs than inputs: dx is taken as a conv of the gradient (Conv2d._as_conv)
    "conv2d_dx_conv": (lambda x, w, b: x.conv2d(w, b, padding=(1, 2), dilation=(2, 1), groups=2),
                       [r(1, 4, 7, 6), r(2, 2, 2, 3), r(2)]),
    "max_pool2d": (lambda x: x.max_pool2d(2), [r(1, 2, 4, 4)]),
    "avg_pool2d": (lambda x: x.avg_pool2d(3, stride=2, padding=1), [r(1, 1, 5, 5)]),
    "getitem": (lambda a: a[[2, 0, 2], 1:], [r(4, 3)]),
    "gather": (lambda a: a.gather(1, Tensor([[0, 2], [1, 1]])), [r(2, 3)]),
    "cat_stack": (lambda a, b: Tensor.stack([a.cat(b), b.cat(a)]), [r(2, 3), r(1, 3)]),
    "split": (lambda a: a.split(2, 1)[1] * 3, [r(2, 5)]), "repeat": (lambda a: a.repeat(2, 3), [r(2, 2)]),
    "erf": (lambda a: a.erf(), [r(5)]),
}


@pytest.mark.parametrize("name", COMPOSITES)
def test_composite_gradient(name):
    fn, inputs = COMPOSITES[name]
    gradcheck(fn, *inputs)


def test_grad_accumulates_and_detach_blocks():
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 + 4])
    y = Tensor([1.0, 2.0], requires_grad=True)
    (y.detach() * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0])


def test_backward_with_explicit_gradient_and_errors():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (x * 2).backward(Tensor([[1.0, 0.0], [0.5, 1.0]]))
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 0.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match="scalar"):
        (x * 2).backward()
    with pytest.raises(ValueError, match="gradient shape"):
        (x * 2).backward(Tensor([1.0]))
