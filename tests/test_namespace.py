"""The torch namespace at tg's top level (tg/namespace.py): factories, dtype names, devices, Generators."""
import subprocess
import sys

import numpy as np
import pytest

import tg
import tg.namespace as ns
from tg import Tensor, dtypes


def same(a, b):
    assert isinstance(a, Tensor) and isinstance(b, Tensor)
    assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device)
    assert a.tolist() == b.tolist()


def test_lazy_table_lists_exactly_the_namespace():
    assert tg._NAMESPACE_NAMES == set(ns.__all__)
    for name in ns.__all__:
        assert getattr(tg, name) is getattr(ns, name)
    assert set(ns.FUNCTION_FORMS) <= set(ns.__all__)
    assert {"zeros", "long", "save", "Generator"} <= set(dir(tg))


def test_import_tg_stays_light():
    code = ("import sys, tg\nfrom tg import config\nassert not hasattr(tg, 'no_such_name')\n"
            "print(sorted(m for m in ('numpy', 'tg.core.tensor', 'tg.namespace') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'zeroes'"):
        tg.zeroes  # noqa: B018


@pytest.mark.parametrize("name, expected", [
    ("float32", "float32"), ("float", "float32"), ("float64", "float64"), ("double", "float64"),
    ("float16", "float16"), ("half", "float16"), ("bfloat16", "bfloat16"), ("int8", "int8"),
    ("uint8", "uint8"), ("int16", "int16"), ("short", "int16"), ("int32", "int32"), ("int", "int32"),
    ("int64", "int64"), ("long", "int64"), ("bool", "bool"), ("uint16", "uint16"), ("uint32", "uint32"),
    ("uint64", "uint64"),
])
def test_dtype_names_follow_torch(name, expected):
    assert getattr(tg, name) is getattr(dtypes, expected)
    assert isinstance(getattr(tg, name), tg.dtype)


def test_factories_match_the_tensor_statics():
    same(tg.zeros(2, 3), Tensor.zeros(2, 3))
    same(tg.zeros((2, 3), dtype=tg.long), Tensor.zeros(2, 3, dtype="int64"))
    same(tg.ones(4, dtype=tg.bool), Tensor.ones(4, dtype="bool"))
    same(tg.full((2, 2), 1.5), Tensor.full((2, 2), 1.5))
    assert tg.empty(3, 2).shape == Tensor.empty(3, 2).shape
    same(tg.arange(5), Tensor.arange(5))
    same(tg.arange(1, 3, 0.5), Tensor.arange(1, 3, 0.5))
    same(tg.linspace(0, 1, 5), Tensor.linspace(0, 1, 5))
    same(tg.eye(3, 2, dtype=tg.int32), Tensor.eye(3, 2, dtype="int32"))
    same(tg.tensor([[1, 2], [3, 4]], dtype=tg.float64), Tensor([[1, 2], [3, 4]], dtype="float64"))
    same(tg.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3)), Tensor(np.arange(6, dtype=np.int16)
                                                                             .reshape(2, 3)))
    x = tg.tensor([1.0, 2.0])
    same(tg.zeros_like(x), x.zeros_like())
    same(tg.ones_like(x), x.ones_like())
    same(tg.full_like(x, 3), x.full_like(3))
    assert tg.rand_like(x).shape == tg.randn_like(x).shape == (2,)


def test_tensor_requires_grad_and_from_numpy_checks():
    assert tg.tensor([1.0], requires_grad=True).requires_grad is True
    assert not tg.tensor([1.0]).requires_grad
    with pytest.raises(TypeError, match="expected a numpy ndarray, got list"):
        tg.from_numpy([1, 2])
    assert tg.is_tensor(tg.zeros(1)) and not tg.is_tensor(np.zeros(1))


def test_random_factories_match_the_tensor_statics():
    for fn, static in ((tg.rand, Tensor.rand), (tg.randn, Tensor.randn)):
        tg.manual_seed(5)
        a = fn(3, 2)
        Tensor.manual_seed(5)
        same(a, static(3, 2))
    tg.manual_seed(5)
    a = tg.randint(2, 9, (50,))
    Tensor.manual_seed(5)
    same(a, Tensor.randint(2, 9, size=(50,)))
    tg.manual_seed(5)
    a = tg.randint(9, (50,), dtype=tg.int32)
    Tensor.manual_seed(5)
    same(a, Tensor.randint(0, 9, size=(50,), dtype="int32"))
    with pytest.raises(TypeError, match=r"randint\(high, size\)"):
        tg.randint(3)


def test_seeds_and_rng_state():
    tg.manual_seed(123)
    assert tg.initial_seed() == 123
    state = tg.get_rng_state()
    a = tg.rand(4).tolist()
    tg.set_rng_state(state)
    assert tg.rand(4).tolist() == a
    s = tg.seed()
    assert tg.initial_seed() == s


def test_join_and_pick_functions():
    a, b = tg.tensor([[1, 2]]), tg.tensor([[3, 4]])
    same(tg.cat([a, b]), a.cat(b))
    same(tg.cat((a, b), dim=1), a.cat(b, dim=1))
    same(tg.concat([a, b]), a.cat(b))
    same(tg.stack([a, b], dim=1), Tensor.stack([a, b], dim=1))
    same(tg.flatten(tg.zeros(2, 3, 4), 0, 1), tg.zeros(2, 3, 4).flatten(0, 1))
    cond, x, y = tg.tensor([True, False]), tg.tensor([1, 2]), tg.tensor([3, 4])
    same(tg.where(cond, x, y), cond.where(x, y))
    with pytest.raises(TypeError, match=r"write tg.cat\(\[a, b\]\)"):
        tg.cat(a, b)  # type: ignore[arg-type]


def test_function_forms_are_the_methods():
    x = tg.tensor([[0.5, 2.0], [1.0, 4.0]])
    same(tg.exp(x), x.exp())
    same(tg.sum(x, 1), x.sum(1))
    same(tg.matmul(x, x), x.matmul(x))
    same(tg.softmax(x, dim=0), x.softmax(dim=0))
    same(tg.sqrt([4.0, 9.0]), Tensor([4.0, 9.0]).sqrt())     # data, not only tensors
    assert tg.exp.__name__ == "exp" and "x.exp(...)" in tg.exp.__doc__


def test_no_grad_is_there():
    x = tg.tensor([1.0], requires_grad=True)
    with tg.no_grad():
        y = x * 2
    assert y._ctx is None


# ---------------------------------------------------------------- devices

@pytest.mark.parametrize("spelling, name, kind, index", [
    ("cpu", "CPU", "cpu", None), ("CPU", "CPU", "cpu", None), ("cuda", "CUDA", "cuda", None),
    ("cuda:1", "CUDA:1", "cuda", 1), ("cuda:0", "CUDA:0", "cuda", 0), ("cl:2", "CL:2", "cl", 2),
])
def test_device_strings_map_onto_tg_names(spelling, name, kind, index):
    d = tg.device(spelling)
    assert (str(d), d.type, d.index) == (name, kind, index)
    assert d == name and isinstance(d, str) and repr(d) == repr(name)


def test_device_type_and_index_arguments():
    assert tg.device("cuda", 1) == "CUDA:1"
    assert tg.device(tg.device("cpu")) == "CPU"
    with pytest.raises(ValueError, match="already names index 1"):
        tg.device("cuda:1", 2)
    with pytest.raises(ValueError, match="unknown device type 'tpu'; expected one of cl, cpu, cuda"):
        tg.device("tpu")
    with pytest.raises(ValueError, match="the index must be an int >= 0"):
        tg.device("cuda", -1)
    with pytest.raises(TypeError, match="expected a device name"):
        tg.device(3)  # type: ignore[arg-type]


def test_torch_device_names_work_wherever_tg_names_do():
    assert tg.zeros(2, device="cpu").device == "CPU"
    assert tg.tensor([1, 2], device=tg.device("cpu")).device == "CPU"
    assert tg.ones(2).to("numpy").device == "NUMPY"
    assert tg.ones(2).to(tg.device("cpu")).device == "CPU"


@pytest.mark.skipif(tg.Device.count("CUDA") > 1, reason="this machine has a second GPU")
def test_a_missing_gpu_gives_tgs_error():
    with pytest.raises((RuntimeError, ValueError), match=r"device 'CUDA:1'"):
        tg.zeros(2, device=tg.device("cuda:1")).tolist()


# ---------------------------------------------------------------- generators

def test_a_generator_seeded_twice_repeats_itself():
    g = tg.Generator().manual_seed(42)
    first = [tg.rand(5, generator=g).tolist(), tg.randn(3, generator=g).tolist(),
             tg.randint(0, 100, (6,), generator=g).tolist()]
    g.manual_seed(42)
    again = [tg.rand(5, generator=g).tolist(), tg.randn(3, generator=g).tolist(),
             tg.randint(0, 100, (6,), generator=g).tolist()]
    assert first == again
    assert first[0] != tg.rand(5, generator=g).tolist()          # the generator moves on
    other = tg.Generator().manual_seed(42)
    assert tg.rand(5, generator=other).tolist() == first[0]


def test_a_generator_leaves_the_global_stream_alone():
    tg.manual_seed(7)
    expected = tg.rand(8).tolist()
    tg.manual_seed(7)
    g = tg.Generator().manual_seed(1)
    tg.rand(4, generator=g)
    tg.randn(3, generator=g)
    assert tg.rand(8).tolist() == expected
    assert tg.initial_seed() == 7


def test_a_generator_matches_the_global_stream_with_the_same_seed():
    g = tg.Generator().manual_seed(9)
    tg.manual_seed(9)
    assert tg.rand(6, generator=g).tolist() == tg.rand(6).tolist()


def test_generator_state_round_trip_and_checks():
    g = tg.Generator().manual_seed(3)
    tg.rand(2, generator=g)
    state = g.get_state()
    assert state == {"seed": 3, "counters": {tg.Device.DEFAULT: 2}}
    a = tg.rand(3, generator=g).tolist()
    assert tg.rand(3, generator=g.set_state(state)).tolist() == a
    with pytest.raises(ValueError, match="expected the dict get_state"):
        g.set_state({"seed": 1})
    with pytest.raises(TypeError, match="expected an int seed"):
        g.manual_seed(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="generator= expects a tg.Generator"):
        tg.rand(2, generator=np.random.default_rng(0))
