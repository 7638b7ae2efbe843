"""Tensor creation: constants, ranges, eye, random streams, *_like, and reading values back."""
import numpy as np
import pytest
from op_helpers import DEVICES, assert_close, raises_at_call

from tg import Tensor, dtypes


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param



def ids(v):
    return str(v).replace(" ", "")


# ------------------------------------------------------------ constants

@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 7), (2, 1, 5), (0, 3), (1023,)], ids=ids)
def test_zeros_ones_full(shape, device):
    assert_close(Tensor.zeros(*shape, device=device), np.zeros(shape, np.float32), dtype="float32")
    assert_close(Tensor.ones(shape, device=device), np.ones(shape, np.float32), dtype="float32")
    assert_close(Tensor.zeros(shape, dtype="int32", device=device), np.zeros(shape, np.int32), dtype="int32")
    assert_close(Tensor.ones(*shape, dtype=dtypes.bool, device=device), np.ones(shape, bool), dtype="bool")
    assert_close(Tensor.full(shape, 1.5, device=device), np.full(shape, 1.5, np.float32), dtype="float32")
    assert_close(Tensor.full(shape, 7, device=device), np.full(shape, 7, np.int64), dtype="int64")
    assert_close(Tensor.full(shape, True, device=device), np.full(shape, True), dtype="bool")
    assert_close(Tensor.full(shape, -2, dtype="float16", device=device), np.full(shape, -2, np.float16),
                 dtype="float16")
    assert_close(
        Tensor.full(shape, 1 / 3, dtype="bfloat16", device=device),
        np.full(shape, 0.333984375, np.float32),
        dtype="bfloat16",
        atol=0,
        rtol=0,
    )
    for t in (Tensor.zeros(*shape, device=device), Tensor.full(shape, 2.0, device=device)):
        assert t.device == device


def test_full_with_int_shape_and_special_values(device):
    assert_close(Tensor.full(4, float("-inf"), device=device), np.full(4, -np.inf, np.float32))
    assert np.isnan(Tensor.full((2,), float("nan"), device=device).numpy()).all()


@pytest.mark.parametrize("shape", [(), (3, 7), (0,), (2, 1, 5)], ids=ids)
def test_empty(shape, device):
    """empty() promises only the shape, dtype and device (the values are whatever memory held)."""
    t = Tensor.empty(*shape, device=device)
    assert t.shape == shape and t.dtype == dtypes.float32 and t.device == device
    assert t.numpy().shape == shape
    t = Tensor.empty(shape, dtype="int16", device=device)
    assert t.shape == shape and t.dtype == dtypes.int16
    assert t.numpy().dtype == np.int16


def test_tensor_from_data(device):
    assert_close(Tensor([[1, 2], [3, 4]], device=device), np.array([[1, 2], [3, 4]]), dtype="int64")
    assert_close(Tensor([1.5, 2], device=device), np.array([1.5, 2.0], np.float32), dtype="float32")
    assert_close(Tensor([True, False], device=device), np.array([True, False]), dtype="bool")
    assert_close(Tensor(3, device=device), np.int64(3), dtype="int64")
    assert_close(Tensor(2.5, device=device), np.float32(2.5), dtype="float32")
    assert_close(Tensor([], device=device), np.zeros((0,), np.float32), dtype="float32")
    assert_close(Tensor(np.arange(6, dtype=np.uint8).reshape(2, 3), device=device),
                 np.arange(6, dtype=np.uint8).reshape(2, 3), dtype="uint8")
    assert_close(
        Tensor([1, 2], dtype="float16", device=device), np.array([1, 2], np.float16), dtype="float16"
    )
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_close(Tensor(a.T, device=device), a.T)                  # a non-contiguous numpy array
    assert_close(Tensor(a[::2, ::-1], device=device), a[::2, ::-1])


def test_item_tolist_numpy(device):
    t = Tensor([[1.5, -2.0]], device=device)
    assert t.tolist() == [[1.5, -2.0]]
    assert Tensor(3.25, device=device).item() == 3.25
    assert Tensor([7], device=device).item() == 7 and isinstance(Tensor([7], device=device).item(), int)
    assert Tensor([True], device=device).item() is True
    assert isinstance(t.numpy(), np.ndarray)
    out = t.numpy()
    out[0, 0] = 100.0                                              # a copy: the tensor is unchanged
    assert t.tolist() == [[1.5, -2.0]]
    with pytest.raises(ValueError, match=r"one element.*\(1, 2\)"):
        t.item()


def test_tensor_creation_errors():
    with pytest.raises(TypeError, match="dict"):
        Tensor({"a": 1})
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"non-negative.*-1"):
        Tensor.zeros(3, -1)
    with pytest.raises(ValueError, match="unknown device 'TPU'"):
        Tensor([1.0], device="TPU")


# ------------------------------------------------------------ arange, linspace, eye

@pytest.mark.parametrize(
    "args,kw",
    [
        ((7,), {}),
        ((2, 9), {}),
        ((0, 10, 3), {}),
        ((5, 0, -1), {}),
        ((3, 3), {}),
        ((0, 1, 0.25), {}),
        ((1.5,), {}),
        ((-3, 3), {"dtype": "int32"}),
        ((0, 5), {"dtype": "float32"}),
        ((10, 2, -3), {}),
        ((0, -1), {}),
        ((-1.0, 1.0, 0.3), {}),
        ((1023,), {}),
    ],
    ids=ids,
)
def test_arange(args, kw, device):
    want = np.arange(*args)
    want = want.astype(kw.get("dtype", "float32" if want.dtype.kind == "f" else "int64"))
    assert_close(Tensor.arange(*args, device=device, **kw), want, dtype=str(want.dtype), atol=1e-6)


@pytest.mark.parametrize(
    "start,stop,steps", [(0, 1, 5), (-1, 1, 1), (0, 1, 0), (2, -3, 7), (0, 1, 1023), (3, 3, 4)], ids=ids
)
def test_linspace(start, stop, steps, device):
    assert_close(
        Tensor.linspace(start, stop, steps, device=device),
        np.linspace(start, stop, steps, dtype=np.float32),
        dtype="float32",
    )


@pytest.mark.parametrize("n,m", [(3, None), (1, None), (2, 4), (4, 2), (0, None), (0, 3)], ids=ids)
def test_eye(n, m, device):
    assert_close(Tensor.eye(n, m, device=device), np.eye(n, m, dtype=np.float32), dtype="float32")
    assert_close(Tensor.eye(n, m, dtype="int32", device=device), np.eye(n, m, dtype=np.int32), dtype="int32")


def test_range_errors():
    raises_at_call(ValueError, r"step must be non-zero", lambda: Tensor.arange(0, 5, 0))
    raises_at_call(ValueError, r"steps must be >= 0, got -1", lambda: Tensor.linspace(0, 1, -1))
    raises_at_call(ValueError, r"low=5 high=5", lambda: Tensor.randint(5, 5, size=(3,)))


# ------------------------------------------------------------ random

def test_rand_range_shape_dtype(device):
    t = Tensor.rand(100, 100, device=device)
    assert t.shape == (100, 100) and t.dtype == dtypes.float32 and t.device == device
    v = t.numpy()
    assert v.min() >= 0.0 and v.max() < 1.0
    assert 0.48 < v.mean() < 0.52
    assert Tensor.rand((3, 7), device=device).shape == (3, 7)
    assert Tensor.rand(device=device).shape == ()
    assert Tensor.rand(0, 3, device=device).numpy().shape == (0, 3)
    assert Tensor.rand(4, dtype="float16", device=device).dtype == dtypes.float16


def test_randn_statistics(device):
    v = Tensor.randn(10_000, device=device).numpy()
    assert abs(v.mean()) < 0.05 and abs(v.std() - 1.0) < 0.05
    assert Tensor.randn(2, 3, dtype="bfloat16", device=device).dtype == dtypes.bfloat16


def test_randint(device):
    t = Tensor.randint(-3, 4, size=(1000,), device=device)
    assert t.dtype == dtypes.int64 and t.shape == (1000,)
    v = t.numpy()
    assert v.min() == -3 and v.max() == 3
    t = Tensor.randint(5, size=(7,), dtype="int32", device=device)
    assert t.dtype == dtypes.int32 and 0 <= t.numpy().min() and t.numpy().max() < 5
    assert Tensor.randint(2, size=3, device=device).shape == (3,)


def test_uniform_and_normal(device):
    u = Tensor.uniform(5000, low=-3.0, high=-1.0, device=device).numpy()
    assert u.min() >= -3.0 and u.max() < -1.0 and abs(u.mean() + 2.0) < 0.05
    n = Tensor.normal(10_000, mean=5.0, std=0.5, device=device).numpy()
    assert abs(n.mean() - 5.0) < 0.03 and abs(n.std() - 0.5) < 0.03
    assert Tensor.uniform(3, 4, device=device).shape == (3, 4)
    assert Tensor.normal(2, 2, device=device, requires_grad=True).requires_grad is True


@pytest.mark.parametrize("make", [
    lambda d: Tensor.rand(3, 7, device=d), lambda d: Tensor.randn(3, 7, device=d),
    lambda d: Tensor.randint(0, 100, size=(3, 7), device=d), lambda d: Tensor.uniform(3, 7, device=d),
    lambda d: Tensor.normal(3, 7, device=d), lambda d: Tensor.ones(3, 7, device=d).rand_like(),
    lambda d: Tensor.ones(3, 7, device=d).randn_like(),
], ids=["rand", "randn", "randint", "uniform", "normal", "rand_like", "randn_like"])
def test_manual_seed_reproducible_streams(make, device):
    Tensor.manual_seed(1234)
    first, second = make(device).numpy(), make(device).numpy()
    Tensor.manual_seed(1234)
    again_first, again_second = make(device).numpy(), make(device).numpy()
    Tensor.manual_seed(99)
    other = make(device).numpy()
    np.testing.assert_array_equal(first, again_first)
    np.testing.assert_array_equal(second, again_second)
    assert not np.array_equal(first, second), "consecutive draws must differ"
    assert not np.array_equal(first, other), "different seeds must give different streams"


def test_manual_seed_same_stream_on_both_devices():
    # the random bits are identical; randn's log/cos may differ by an ulp between libm and numpy
    Tensor.manual_seed(7)
    a, an = Tensor.rand(5, device="CPU").numpy(), Tensor.randn(5, device="CPU").numpy()
    Tensor.manual_seed(7)
    b, bn = Tensor.rand(5, device="NUMPY").numpy(), Tensor.randn(5, device="NUMPY").numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(an, bn, rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------ *_like

@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "bool"])
def test_like_constructors(dtype, device):
    base = Tensor.ones(3, 7, dtype=dtype, device=device).T            # a view: only shape matters
    shape = (7, 3)
    for t, want in ((base.zeros_like(), np.zeros(shape)), (base.ones_like(), np.ones(shape)),
                    (base.full_like(1), np.ones(shape))):
        assert_close(t, want.astype(dtype), dtype=dtype)
        assert t.device == device
    for t in (base.empty_like(), base.full_like(0)):
        assert t.shape == shape and t.dtype.name == dtype and t.device == device
    assert base.zeros_like(dtype="int8").dtype == dtypes.int8
    assert base.ones_like(dtype=dtypes.float64).dtype == dtypes.float64


def test_random_like(device):
    base = Tensor.zeros(2, 0, 3, device=device)
    assert base.rand_like().shape == (2, 0, 3)
    base = Tensor.zeros(3, 4, dtype="float16", device=device)
    r = base.rand_like()
    assert r.shape == (3, 4) and r.dtype == dtypes.float16 and r.device == device
    v = r.numpy()
    assert v.min() >= 0 and v.max() <= 1
    assert base.randn_like(dtype="float32").dtype == dtypes.float32


# ------------------------------------------------------------ properties, device transfer, in-place

def test_properties(device):
    t = Tensor.zeros(2, 1, 5, dtype="int16", device=device)
    assert t.shape == (2, 1, 5) and t.ndim == 3 and t.numel() == 10 and len(t) == 2
    assert t.size() == (2, 1, 5) and t.size(-1) == 5 and t.size(0) == 2
    assert t.element_size() == 2 and t.nbytes == 20
    assert Tensor(1.0, device=device).numel() == 1 and Tensor(1.0, device=device).ndim == 0
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0, device=device))
    assert bool(Tensor([2.0], device=device)) is True and bool(Tensor(0, device=device)) is False
    with pytest.raises(ValueError, match=r"ambiguous.*\(2,\)|\(2,\).*ambiguous"):
        bool(Tensor([1.0, 2.0], device=device))


@pytest.mark.parametrize("target", ["CPU", "NUMPY"])
def test_to_other_device(target, device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    moved = (Tensor(a, device=device).T[1:] * 2).to(target)
    assert moved.device == target
    assert_close(moved + 1, a.T[1:] * 2 + 1)
    assert Tensor(a, device=device).to(device.lower()).device == device


def test_assign_and_inplace_ops(device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(a, device=device)
    t += 1
    assert_close(t, a + 1)
    t *= Tensor([1.0, 2.0, 3.0], device=device)
    assert_close(t, (a + 1) * np.array([1.0, 2.0, 3.0], np.float32))
    t -= 0.5
    t /= 2
    assert_close(t, ((a + 1) * np.array([1.0, 2.0, 3.0], np.float32) - 0.5) / 2)
    before = t * 1                       # a pending reader of the old value
    t.assign(Tensor.zeros(2, 3, device=device))
    assert_close(t, np.zeros((2, 3), np.float32))
    assert_close(before, ((a + 1) * np.array([1.0, 2.0, 3.0], np.float32) - 0.5) / 2)
    raises_at_call(ValueError, r"\(3,\).*\(2, 3\)", lambda: t.assign(Tensor.zeros(3, device=device)))


def test_bad_arguments(device):
    x = Tensor.ones(3, device=device)
    raises_at_call(ValueError, r"'none' or 'tanh', got 'fast'", lambda: x.gelu(approximate="fast"))
    raises_at_call(ValueError, r"clamp", lambda: x.clamp())
    raises_at_call(ValueError, r"chunks must be positive, got 0", lambda: x.chunk(0))
    raises_at_call(ValueError, r"split_size must be positive, got 0", lambda: x.split(0))
    raises_at_call(ValueError, r"at least one tensor", lambda: Tensor.stack([]))
