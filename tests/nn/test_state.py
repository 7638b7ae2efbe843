"""tg.nn.state: state dict names, load_state_dict, and safetensors files checked against the
safetensors library itself (the independent reference for the format)."""
from __future__ import annotations

import doctest
import json
import os
import struct
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import tg.nn.state as state
from tg import Tensor
from tg.core.dtype import DType, dtypes, f32_to_bf16
from tg.nn.state import (
    SafetensorsError,
    StateDictError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)

ALL_DTYPES = [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.int16, dtypes.uint16, dtypes.int32,
              dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
              dtypes.float64]


# ---------------------------------------------------------------- helpers

def random_bits(dt: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random host bits of dt (NaN payloads, infinities and -0.0 included for floats)."""
    rng = np.random.default_rng(seed)
    if dt == dtypes.bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt.np).reshape(shape)


def tensor_from_bits(bits: np.ndarray, dt: DType) -> Tensor:
    if dt == dtypes.bfloat16:   # bf16 host bits are uint16: reinterpret them
        return Tensor(bits, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
    return Tensor(bits, dtype=dt)


def bits_of(t: Tensor) -> np.ndarray:
    """A tensor's exact bits (floats viewed as unsigned ints, so NaN payloads and -0.0 compare)."""
    values = f32_to_bf16(t.numpy()) if t.dtype == dtypes.bfloat16 else t.numpy()
    return values.view(f"u{t.dtype.itemsize}") if t.dtype.is_float else values


def craft(header: dict | bytes, data: bytes = b"", header_len: int | None = None) -> bytes:
    """A safetensors file made by hand, so malformed ones can be made too."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text) if header_len is None else header_len) + text + data


def temp_files(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith(".tmp")]


# ---------------------------------------------------------------- safetensors round trips

@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
def test_roundtrip_is_bit_exact_for_every_dtype(tmp_path, dt):
    tensors = {"matrix": tensor_from_bits(random_bits(dt, (3, 5)), dt),
               "scalar": tensor_from_bits(random_bits(dt, (), seed=1), dt),
               "empty": tensor_from_bits(random_bits(dt, (0, 4)), dt)}
    path = tmp_path / f"{dt.name}.safetensors"
    safe_save(tensors, path)
    loaded = safe_load(path)
    assert list(loaded) == list(tensors)
    for name, t in tensors.items():
        assert loaded[name].dtype == dt and loaded[name].shape == t.shape, name
        np.testing.assert_array_equal(bits_of(loaded[name]), bits_of(t), err_msg=name)


def test_non_contiguous_views_are_saved_by_value(tmp_path):
    base = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    views = {"transposed": base.T, "sliced": base[1:, ::2], "flipped": base.flip(0),
             "expanded": Tensor(np.array([1, 2, 3], np.int32)).reshape(3, 1).expand(3, 2),
             "lazy": base * 2 + 1}
    safe_save(views, tmp_path / "v.safetensors")
    loaded = safe_load(tmp_path / "v.safetensors")
    for name, t in views.items():
        np.testing.assert_array_equal(loaded[name].numpy(), t.numpy(), err_msg=name)
    assert base.numpy()[0, 0] == 0   # the source is untouched


def test_numpy_values_and_device(tmp_path):
    safe_save({"a": np.arange(6, dtype=np.int16).reshape(2, 3), "b": np.float64(2.5)}, tmp_path / "n.st")
    loaded = safe_load(tmp_path / "n.st", device="NUMPY")
    assert loaded["a"].device == "NUMPY" and loaded["a"].dtype == dtypes.int16
    assert loaded["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and loaded["b"].item() == 2.5


def test_layout_header_and_metadata(tmp_path):
    tensors = {"b": Tensor(np.ones(3, np.uint8)), "a": Tensor(np.zeros((2, 2), np.float64))}
    safe_save(tensors, tmp_path / "x.st", metadata={"step": "7", "note": "héllo"})
    raw = (tmp_path / "x.st").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert list(header) == ["__metadata__", "b", "a"]          # metadata first, then the dict's order
    assert header["b"] == {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}
    assert header["a"] == {"dtype": "F64", "shape": [2, 2], "data_offsets": [3, 35]}
    assert len(raw) == 8 + n + 35                              # back to back, nothing after
    assert safe_load_metadata(tmp_path / "x.st") == {"step": "7", "note": "héllo"}
    safe_save(tensors, tmp_path / "y.st")
    assert safe_load_metadata(tmp_path / "y.st") == {}


# ---------------------------------------------------------------- against the safetensors library

def test_tg_files_read_by_safetensors_and_back(tmp_path):
    import safetensors.numpy as st_numpy
    arrays = {f"t_{dt.name}": random_bits(dt, (2, 3), seed=i) for i, dt in enumerate(ALL_DTYPES)
              if dt != dtypes.bfloat16}
    arrays["scalar"], arrays["empty"] = np.array(1.5, np.float32), np.zeros((0, 3), np.int64)
    safe_save({k: Tensor(v) for k, v in arrays.items()}, tmp_path / "tg.st", metadata={"by": "tg"})
    theirs = st_numpy.load_file(str(tmp_path / "tg.st"))
    for k, v in arrays.items():
        assert theirs[k].dtype == v.dtype and theirs[k].shape == np.shape(v), k
        assert theirs[k].tobytes() == np.asarray(v).tobytes(), k

    st_numpy.save_file(arrays, str(tmp_path / "st.st"), metadata={"by": "safetensors"})
    ours = safe_load(tmp_path / "st.st")
    assert set(ours) == set(arrays) and safe_load_metadata(tmp_path / "st.st") == {"by": "safetensors"}
    for k, v in arrays.items():
        assert ours[k].numpy().tobytes() == np.asarray(v).tobytes(), k


def test_same_order_gives_a_byte_identical_file(tmp_path):
    import safetensors.numpy as st_numpy
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(3, dtype=np.int64),
              "m": np.array([True, False]), "h": np.ones((1, 2), np.float16)}
    st_numpy.save_file(arrays, str(tmp_path / "st.st"), metadata={"format": "np"})
    reference = (tmp_path / "st.st").read_bytes()
    n = struct.unpack("<Q", reference[:8])[0]
    order = [k for k in json.loads(reference[8:8 + n]) if k != "__metadata__"]   # the library sorts
    safe_save({k: Tensor(arrays[k]) for k in order}, tmp_path / "tg.st", metadata={"format": "np"})
    assert (tmp_path / "tg.st").read_bytes() == reference


def test_bfloat16_interop_with_safetensors(tmp_path):
    import safetensors  # the dev extra pins a version with the torch-free TensorSpec API
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0xFF80, 0x7FC1, 0x8000, 0x0001], np.uint16)
    spec = safetensors.TensorSpec(dtype="bfloat16", shape=[7], data_ptr=bits.ctypes.data,
                                  data_len=bits.nbytes)
    safetensors.serialize_file({"x": spec}, str(tmp_path / "st.st"))
    x = safe_load(tmp_path / "st.st")["x"]
    assert x.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(bits_of(x), bits)

    safe_save({"x": x}, tmp_path / "tg.st")
    [(name, info)] = safetensors.deserialize((tmp_path / "tg.st").read_bytes())
    assert name == "x" and info["dtype"] == "BF16" and info["shape"] == [7]
    assert bytes(info["data"]) == bits.tobytes()


def test_bfloat16_hand_made(tmp_path):
    bits = np.array([[0x3F80, 0x4049], [0xFF80, 0x7FC1]], np.uint16)   # 1.0, 3.140625, -inf, NaN
    (tmp_path / "bf.st").write_bytes(
        craft({"x": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}, bits.tobytes()))
    x = safe_load(tmp_path / "bf.st")["x"]
    assert x.dtype == dtypes.bfloat16 and x.numpy()[0].tolist() == [1.0, 3.140625]
    np.testing.assert_array_equal(bits_of(x), bits)


# ---------------------------------------------------------------- atomic writes

def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    safe_save({"w": Tensor(np.ones(4, np.float32))}, path)
    before = path.read_bytes()
    new = {"w": Tensor(np.zeros(4, np.float32)), "v": Tensor(np.zeros(8, np.float32))}

    class Crash(Exception):
        pass

    def crash(*args):
        raise Crash("disk on fire")

    monkeypatch.setattr(state.os, "fsync", crash)                 # everything written, not yet durable
    with pytest.raises(Crash):
        safe_save(new, path)
    assert path.read_bytes() == before and temp_files(tmp_path) == []
    monkeypatch.undo()

    calls = []
    real_numpy = Tensor.numpy

    def numpy_then_crash(self):                                  # dies between two tensors' bytes
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_numpy(self)

    monkeypatch.setattr(Tensor, "numpy", numpy_then_crash)
    with pytest.raises(KeyboardInterrupt):
        safe_save(new, path)
    monkeypatch.undo()
    assert len(calls) == 2
    assert path.read_bytes() == before and temp_files(tmp_path) == []
    assert safe_load(path)["w"].tolist() == [1.0] * 4

    safe_save(new, path)                                          # and a good save replaces it
    assert safe_load(path)["v"].tolist() == [0.0] * 8 and temp_files(tmp_path) == []


def test_save_into_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\[nn\].*does not exist.*makedirs"):
        safe_save({"w": np.ones(1)}, tmp_path / "nope" / "x.st")


def test_safe_save_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match=r"\[nn\] safe_save: metadata must map str to str.*'step': int"):
        safe_save({"w": np.ones(1)}, tmp_path / "x.st", metadata={"step": 3})
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": np.ones(1)}, tmp_path / "x.st")
    with pytest.raises(TypeError, match="'w' is a list"):
        safe_save({"w": [1.0]}, tmp_path / "x.st")
    with pytest.raises(TypeError, match="complex128"):
        safe_save({"w": np.ones(1, np.complex128)}, tmp_path / "x.st")
    assert not (tmp_path / "x.st").exists() and temp_files(tmp_path) == []


# ---------------------------------------------------------------- malformed files

def _entry(dtype="F32", shape=(2,), offsets=(0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


MALFORMED = {
    "too_short": (b"\x01\x02\x03", None, "too few"),
    "huge_header_length": (craft({"x": _entry()}, bytes(8), header_len=1 << 40), None, "header length"),
    "zip_not_safetensors": (b"PK\x03\x04" + bytes(60), None, "header length"),
    "not_an_object": (craft(b"[1, 2]"), None, "starting with '{'"),
    "not_json": (craft(b"{not json"), None, "not valid UTF-8 JSON"),
    "duplicate_name": (craft(b'{"x":' + json.dumps(_entry()).encode() + b',"x":'
                             + json.dumps(_entry()).encode() + b"}", bytes(8)), None, "more than once"),
    "bad_metadata": (craft({"__metadata__": {"a": 1}}), None, "__metadata__"),
    "missing_field": (craft({"x": {"dtype": "F32", "shape": [2]}}, bytes(8)), "x", "data_offsets"),
    "unknown_dtype": (craft({"x": _entry(dtype="F8_E4M3", offsets=(0, 2))}, bytes(2)), "x", "F8_E4M3"),
    "negative_shape": (craft({"x": _entry(shape=(-2,))}, bytes(8)), "x", "non-negative"),
    "offsets_past_end": (craft({"x": _entry(offsets=(0, 8))}, bytes(4)), "x", "out of range"),
    "offsets_reversed": (craft({"x": _entry(offsets=(8, 0))}, bytes(8)), "x", "out of range"),
    "byte_count": (craft({"x": _entry(shape=(3,), offsets=(0, 8))}, bytes(8)), "x", "needs 12 bytes"),
    "overlap": (craft({"x": _entry(offsets=(0, 8)), "y": _entry(offsets=(4, 12))}, bytes(12)), "y",
                "overlap those of 'x'"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=str)
def test_malformed_files_are_rejected_clearly(tmp_path, case):
    blob, tensor, fragment = MALFORMED[case]
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(blob)
    for reader in (safe_load, safe_load_metadata):
        with pytest.raises(SafetensorsError) as info:
            reader(path)
        message = str(info.value)
        assert message.startswith("[nn] safe_load: ") and str(path) in message and fragment in message
        if tensor is not None:
            assert f"tensor {tensor!r}" in message
    assert issubclass(SafetensorsError, ValueError)


def test_well_formed_edge_cases_load(tmp_path):
    # tensors out of order in the data section, an empty tensor at the end, trailing header spaces
    header = {"b": _entry(offsets=(8, 16)), "a": _entry(offsets=(0, 8)),
              "e": _entry(shape=(0,), offsets=(16, 16))}
    data = np.array([1, 2, 3, 4], np.float32).tobytes()
    (tmp_path / "ok.st").write_bytes(craft(header, data))
    loaded = safe_load(tmp_path / "ok.st")
    assert list(loaded) == ["b", "a", "e"]
    assert loaded["a"].tolist() == [1.0, 2.0] and loaded["b"].tolist() == [3.0, 4.0]
    assert loaded["e"].shape == (0,)
    bools = craft({"m": _entry("BOOL", (3,), (0, 3))}, bytes([0, 1, 7]) + bytes(5))
    (tmp_path / "bool.st").write_bytes(bools)
    assert safe_load(tmp_path / "bool.st")["m"].tolist() == [False, True, True]


# ---------------------------------------------------------------- state dict names

def arr(*shape: int, fill: float = 0.0, dtype=np.float32) -> Tensor:
    return Tensor(np.full(shape, fill, dtype))


class Linear:
    def __init__(self, n_in: int, n_out: int, bias: bool = True):
        self.weight = arr(n_out, n_in)
        self.bias = arr(n_out) if bias else None
        self.n_in = n_in


Pair = namedtuple("Pair", ["left", "right"])


@dataclass(slots=True)
class Norm:
    scale: Tensor
    eps: float = 1e-5


class Net:
    def __init__(self):
        self.embed = arr(10, 4)
        self.blocks = [Linear(4, 4), Linear(4, 4, bias=False)]
        self.heads = {"cls": Linear(4, 2), "aux": (arr(3), Pair(arr(1), arr(2)))}
        self.norm = Norm(arr(4))
        self.tied = self.embed                   # weight tying: listed once, under 'embed'
        self.config = {"lr": 0.1, "name": "net", "table": np.zeros(3)}   # no tensors in here
        self.activation = np.tanh                # a function and a module are never walked
        self.lib = np
        self.blocks[0].parent = self             # a reference cycle


NET_NAMES = ["embed", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "heads.cls.weight",
             "heads.cls.bias", "heads.aux.0", "heads.aux.1.left", "heads.aux.1.right", "norm.scale"]


def test_state_dict_names_are_torch_style_and_deterministic():
    net = Net()
    sd = get_state_dict(net)
    assert list(sd) == NET_NAMES
    assert sd["blocks.1.weight"] is net.blocks[1].weight and sd["norm.scale"] is net.norm.scale
    assert list(get_state_dict(Net())) == NET_NAMES
    assert list(get_state_dict(net, prefix="model")) == [f"model.{n}" for n in NET_NAMES]
    assert list(get_state_dict(net.heads, prefix="heads.")) == NET_NAMES[4:9]
    # walked from a part, the back reference is the way to the rest
    assert list(get_state_dict(net.blocks))[:3] == ["0.weight", "0.bias", "0.parent.embed"]
    assert get_state_dict(net.embed, prefix="e") == {"e": net.embed}


def test_get_parameters_each_tensor_once_in_order():
    net = Net()
    params = get_parameters(net)
    assert [id(p) for p in params] == [id(t) for t in get_state_dict(net).values()]
    assert len(params) == len(NET_NAMES) and len({id(p) for p in params}) == len(params)
    shared = arr(2)
    assert get_parameters([shared, {"again": shared}, (shared,)]) == [shared]
    assert get_parameters([1, "x", None, np.ones(2)]) == []


# ---------------------------------------------------------------- load_state_dict

def filled_state(fill: float) -> dict[str, np.ndarray]:
    return {k: np.full(t.shape, fill, np.float32) for k, t in get_state_dict(Net()).items()}


def test_load_state_dict_copies_in_place_and_round_trips_through_a_file(tmp_path):
    src, dst = Net(), Net()
    for i, t in enumerate(get_parameters(src)):
        t.assign(np.full(t.shape, i + 1.0, np.float32)).realize()
    safe_save(get_state_dict(src), tmp_path / "net.safetensors")
    before = get_state_dict(dst)
    assert load_state_dict(dst, safe_load(tmp_path / "net.safetensors")) == ([], [])
    after = get_state_dict(dst)
    for name in NET_NAMES:
        assert after[name] is before[name]                      # the same tensor objects, new values
        np.testing.assert_array_equal(after[name].numpy(), get_state_dict(src)[name].numpy(), err_msg=name)
    assert dst.tied is dst.embed and dst.tied.numpy()[0, 0] == 1.0


def test_load_state_dict_casts_dtypes_and_takes_tensors_or_numpy():
    model = {"f32": arr(2), "bf16": arr(2).cast(dtypes.bfloat16).contiguous().realize(),
             "i32": arr(2, dtype=np.int32), "flag": arr(dtype=np.bool_), "empty": arr(0, 3)}
    values = {"f32": np.array([1.5, -2.0]), "bf16": Tensor(np.array([3.0, 0.5], np.float64)),
              "i32": np.array([7.9, -3.2]), "flag": np.bool_(True), "empty": np.zeros((0, 3))}
    load_state_dict(model, values)
    assert model["f32"].dtype == dtypes.float32 and model["f32"].tolist() == [1.5, -2.0]
    assert model["bf16"].dtype == dtypes.bfloat16 and model["bf16"].tolist() == [3.0, 0.5]
    assert model["i32"].dtype == dtypes.int32 and model["i32"].tolist() == [7, -3]
    assert model["flag"].item() is True and model["empty"].shape == (0, 3)


def test_strict_error_lists_every_problem_at_once():
    net = Net()
    sd = filled_state(1.0)
    del sd["blocks.0.bias"], sd["norm.scale"]
    sd["heads.extra"] = np.ones(2, np.float32)
    sd["heads.cls.weight"] = np.ones((4, 2), np.float32)
    with pytest.raises(StateDictError) as info:
        load_state_dict(net, sd)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.missing_keys == ["blocks.0.bias", "norm.scale"] and err.unexpected_keys == ["heads.extra"]
    assert err.mismatched_shapes == [("heads.cls.weight", (2, 4), (4, 2))]
    message = str(err)
    assert message.startswith("[nn] load_state_dict:")
    assert "2 missing keys, 1 unexpected key, 1 shape mismatch" in message
    for fragment in ("blocks.0.bias", "norm.scale", "heads.extra", "hint:", "strict=False",
                     "heads.cls.weight: the model has (2, 4), the state dict has (4, 2)"):
        assert fragment in message, fragment
    assert all(float(t.numpy().max()) == 0.0 for t in get_parameters(net))   # nothing was written


def test_non_strict_loads_what_matches():
    net = Net()
    sd = filled_state(2.0)
    del sd["norm.scale"]
    sd["unused"] = np.ones(1, np.float32)
    missing, unexpected = load_state_dict(net, sd, strict=False)
    assert (missing, unexpected) == (["norm.scale"], ["unused"])
    assert net.embed.numpy().min() == 2.0 and net.norm.scale.numpy().max() == 0.0

    sd["embed"] = np.ones((4, 10), np.float32)                  # a shape mismatch is never skipped
    with pytest.raises(StateDictError, match=r"1 shape mismatch\)\n.*embed: the model has \(10, 4\)") as info:
        load_state_dict(net, sd, strict=False)
    assert info.value.missing_keys == [] and net.embed.numpy().min() == 2.0


def test_prefix_hint():
    model = {"enc": Linear(3, 2), "dec": Linear(2, 3)}
    plain = {k: np.zeros(t.shape, np.float32) for k, t in get_state_dict(model).items()}
    # saved from a wrapper
    with pytest.raises(StateDictError, match=r"extra prefix 'module\.'.*removeprefix"):
        load_state_dict(model, {f"module.{k}": v for k, v in plain.items()})
    # saved from a part
    with pytest.raises(StateDictError, match=r"under the prefix 'enc\.'"):
        load_state_dict({"enc": model["enc"]}, {"weight": plain["enc.weight"], "bias": plain["enc.bias"]})


def test_load_state_dict_rejects_bad_values():
    with pytest.raises(TypeError, match=r"\[nn\] load_state_dict: values must be.*'w' \(list\)"):
        load_state_dict({"w": arr(2)}, {"w": [1.0, 2.0]})
    with pytest.raises(TypeError, match="expected a dict"):
        load_state_dict({"w": arr(2)}, [("w", np.ones(2))])


def test_module_docstring_examples_run():
    assert doctest.testmod(state, optionflags=doctest.ELLIPSIS).failed == 0
