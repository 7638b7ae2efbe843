"""tg.save / tg.load (tg/serialization.py): nested objects in one safetensors file, no pickle."""
import json
import math
import os
import zipfile
from collections import OrderedDict, namedtuple

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import tg
from tg import Tensor, dtypes
from tg.serialization import FORMAT_KEY, STRUCTURE_KEY


def checkpoint():
    """A model state dict, an optimizer-like state and training bookkeeping, in one object."""
    w = tg.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    return {
        "model": OrderedDict([("layers.0.weight", w), ("layers.0.bias", tg.zeros(2)),
                              ("head.weight", w)]),                      # tied weight
        "optimizer": {
            "state": {0: {"step": 12, "exp_avg": tg.full((2, 2), 0.5, dtype=tg.float16),
                          "exp_avg_sq": tg.tensor([1.0, 2.0], dtype=tg.bfloat16)},
                      1: {"step": 12, "momentum_buffer": None}},
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
                              "amsgrad": False, "params": [0, 1], "name": "decay"}],
        },
        "epoch": 3, "best": float("inf"), "loss": float("nan"), "tag": "run-7 ✓", "done": True,
        "mask": tg.tensor([True, False, True]), "ids": tg.arange(4),
        "u8": tg.tensor([1, 255], dtype=tg.uint8),
        "f64": tg.tensor([0.1], dtype=tg.float64), "empty": tg.zeros(0, 3), "scalar": tg.tensor(2.5),
        "np": np.arange(6, dtype=np.int32).reshape(2, 3), "np_scalar": np.float32(1.5),
        "dtype": tg.bfloat16, "keys": {None: 1, True: 2, 2.5: 3, "3": 4, 3: 5},
        "nested": [[[]], {}, ()],
    }


def assert_same_tensor(a, b):
    assert isinstance(a, Tensor) and isinstance(b, Tensor)
    assert (a.shape, a.dtype) == (b.shape, b.dtype)
    assert a.lazydata.dtype.np_storage == b.lazydata.dtype.np_storage
    assert np.array_equal(a.numpy(), b.numpy())


def test_round_trip_of_a_training_checkpoint(tmp_path):
    saved = checkpoint()
    path = tmp_path / "ckpt.safetensors"
    tg.save(saved, path)
    loaded = tg.load(path)

    assert type(loaded["model"]) is dict and list(loaded["model"]) == list(saved["model"])
    for name in ("layers.0.weight", "layers.0.bias"):
        assert_same_tensor(loaded["model"][name], saved["model"][name])
    assert loaded["model"]["head.weight"] is loaded["model"]["layers.0.weight"]   # still tied
    assert loaded["model"]["layers.0.weight"].requires_grad is True
    assert not loaded["model"]["layers.0.bias"].requires_grad

    state = loaded["optimizer"]["state"]
    assert list(state) == [0, 1] and state[0]["step"] == 12
    assert state[1] == {"step": 12, "momentum_buffer": None}
    assert_same_tensor(state[0]["exp_avg"], saved["optimizer"]["state"][0]["exp_avg"])
    assert_same_tensor(state[0]["exp_avg_sq"], saved["optimizer"]["state"][0]["exp_avg_sq"])
    assert loaded["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]
    assert isinstance(loaded["optimizer"]["param_groups"][0]["betas"], tuple)

    assert (loaded["epoch"], loaded["best"], loaded["tag"], loaded["done"]) == (3, math.inf, "run-7 ✓", True)
    assert type(loaded["epoch"]) is int and type(loaded["done"]) is bool and math.isnan(loaded["loss"])
    for name in ("mask", "ids", "u8", "f64", "empty", "scalar"):
        assert_same_tensor(loaded[name], saved[name])
    assert loaded["mask"].dtype == dtypes.bool and loaded["ids"].dtype == dtypes.int64
    assert isinstance(loaded["np"], np.ndarray) and np.array_equal(loaded["np"], saved["np"])
    assert loaded["np"].dtype == np.int32
    assert type(loaded["np_scalar"]) is np.float32 and loaded["np_scalar"] == 1.5
    assert loaded["dtype"] is dtypes.bfloat16
    assert loaded["keys"] == saved["keys"] and [type(k) for k in loaded["keys"]] == [
        type(None), bool, float, str, int]
    assert loaded["nested"] == [[[]], {}, ()]


def test_top_level_values(tmp_path):
    for obj in (tg.arange(3), [1, 2], 5, "text", None, (tg.ones(1), 2.0)):
        tg.save(obj, tmp_path / "x.safetensors")
        loaded = tg.load(tmp_path / "x.safetensors")
        if isinstance(obj, Tensor):
            assert_same_tensor(loaded, obj)
        elif isinstance(obj, tuple):
            assert_same_tensor(loaded[0], obj[0]) and loaded[1] == 2.0
        else:
            assert loaded == obj


def test_a_namedtuple_comes_back_as_a_tuple(tmp_path):
    Pair = namedtuple("Pair", "a b")
    tg.save({"p": Pair(1, "x")}, tmp_path / "p.safetensors")
    assert tg.load(tmp_path / "p.safetensors") == {"p": (1, "x")}


def test_the_file_is_a_safetensors_file_readable_by_the_safetensors_package(tmp_path):
    path = str(tmp_path / "plain.safetensors")
    tg.save({"state": {0: {"exp_avg": tg.ones(2)}}, "w": tg.tensor([[1, 2]], dtype=tg.int16), "step": 4},
            path, metadata={"note": "hello"})
    tensors = load_file(path)
    assert sorted(tensors) == ["state.0.exp_avg", "w"]
    assert tensors["w"].dtype == np.int16 and tensors["w"].tolist() == [[1, 2]]
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    assert meta[FORMAT_KEY] == "1" and meta["note"] == "hello"
    structure = json.loads(meta[STRUCTURE_KEY])
    assert structure["dict"][2] == ["step", 4]


def test_bfloat16_is_stored_as_safetensors_bf16(tmp_path):
    path = str(tmp_path / "bf16.safetensors")
    tg.save({"x": tg.tensor([1.0, -2.5], dtype=tg.bfloat16)}, path)
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert header["x"]["dtype"] == "BF16"


def test_unsupported_objects_raise_before_anything_is_written(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    tg.save({"epoch": 1}, path)
    before = path.read_bytes()
    for bad, where in (({"epoch": 2, "model": {"fn": print}}, "model.fn"), ({"s": {1, 2}}, "s"),
                       ({"opt": [tg.ones(1), object()]}, "opt.1"), ({(1, 2): 3}, "the object"),
                       ({"a": np.array(["x"])}, "a")):
        with pytest.raises(TypeError, match=rf"\[nn\] save: {where} is "):
            tg.save(bad, path)
    assert path.read_bytes() == before                     # the old file is untouched
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]    # and no temporary file is left


def test_cycles_and_reserved_metadata_are_refused(tmp_path):
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="contains itself"):
        tg.save({"a": loop}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="metadata keys"):
        tg.save({}, tmp_path / "x.safetensors", metadata={FORMAT_KEY: "2"})
    with pytest.raises(TypeError, match="expected a file path .* or a binary file object"):
        tg.save({}, 42)
    assert not (tmp_path / "x.safetensors").exists()


def test_a_container_reached_twice_is_saved_twice(tmp_path):
    shared = {"lr": 0.1}
    tg.save({"a": shared, "b": shared}, tmp_path / "x.safetensors")
    assert tg.load(tmp_path / "x.safetensors") == {"a": {"lr": 0.1}, "b": {"lr": 0.1}}


def test_clashing_paths_keep_both_tensors(tmp_path):
    tg.save({"a.b": tg.ones(1), "a": {"b": tg.zeros(1)}}, tmp_path / "x.safetensors")
    loaded = tg.load(tmp_path / "x.safetensors")
    assert loaded["a.b"].tolist() == [1.0] and loaded["a"]["b"].tolist() == [0.0]


def test_map_location(tmp_path):
    path = tmp_path / "x.safetensors"
    tg.save({"w": tg.tensor([1.0, 2.0], device="NUMPY"), "b": tg.tensor([3], device="CPU")}, path)
    kept = tg.load(path)
    assert (kept["w"].device, kept["b"].device) == ("NUMPY", "CPU")      # where they were saved
    for where in ("cpu", tg.device("cpu"), "CPU"):
        moved = tg.load(path, map_location=where)
        assert (moved["w"].device, moved["b"].device) == ("CPU", "CPU")
    assert moved["w"].tolist() == [1.0, 2.0] and moved["b"].tolist() == [3]
    mapped = tg.load(path, map_location={"numpy": "cpu"})
    assert (mapped["w"].device, mapped["b"].device) == ("CPU", "CPU")
    seen = []
    called = tg.load(path, map_location=lambda t, saved: seen.append(saved) or t.to("numpy"))
    assert sorted(seen) == ["cpu", "numpy"] and called["b"].device == "NUMPY"
    assert tg.load(path, weights_only=False)["b"].tolist() == [3]     # accepted; nothing changes
    with pytest.raises(TypeError, match="map_location should be None, a device"):
        tg.load(path, map_location=3)
    with pytest.raises(TypeError, match="map_location returned a NoneType"):
        tg.load(path, map_location=lambda t, saved: None)


def test_a_tensor_saved_on_a_missing_device_says_to_use_map_location(tmp_path):
    path = str(tmp_path / "gpu.safetensors")
    tg.save({"w": tg.ones(2)}, path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    # rewrite the file as if saved on a GPU this machine lacks
    meta[STRUCTURE_KEY] = meta[STRUCTURE_KEY].replace(f'"device":"{tg.Device.DEFAULT}"', '"device":"CUDA:7"')
    save_file(load_file(path), path, metadata=meta)
    with pytest.raises(RuntimeError, match="saved on CUDA:7, which is not usable here.*map_location='cpu'"):
        tg.load(path)
    assert tg.load(path, map_location="cpu")["w"].tolist() == [1.0, 1.0]
    assert tg.load(path, map_location={"cuda:7": "cpu"})["w"].device == "CPU"


def test_a_plain_safetensors_file_loads_as_a_flat_dict(tmp_path):
    path = str(tmp_path / "hf.safetensors")
    save_file({"embed.weight": np.ones((2, 3), np.float32), "ids": np.arange(3)}, path,
              metadata={"format": "pt"})
    loaded = tg.load(path)
    assert sorted(loaded) == ["embed.weight", "ids"]
    assert isinstance(loaded["ids"], Tensor) and loaded["ids"].tolist() == [0, 1, 2]
    assert tg.load(path, map_location="numpy")["ids"].device == "NUMPY"


def test_pickle_and_torch_zip_files_give_a_clear_error(tmp_path):
    pickled = tmp_path / "model.pt"
    pickled.write_bytes(b"\x80\x02}q\x00.")      # an empty dict, pickle protocol 2 (torch's legacy format)
    with pytest.raises(ValueError, match=r"pickle file .*never unpickles.*safetensors.torch.save_file"):
        tg.load(pickled)
    zipped = tmp_path / "model.bin"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(ValueError, match=r"zip file, the format torch.save writes"):
        tg.load(zipped)


def test_other_files_give_the_safetensors_error(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello")
    with pytest.raises(ValueError, match="too few for a safetensors file"):
        tg.load(junk)
