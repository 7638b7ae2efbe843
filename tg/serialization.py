"""tg.save / tg.load: nested dicts and lists of tensors, numbers, strings and bools, without pickle.

A save is one safetensors file (written atomically, readable by the `safetensors` package): every
tensor is an entry named by its path in the object (`state.0.exp_avg`), and the structure around
them is JSON in the file's metadata, under the key "tg.structure"; "tg.save" holds the format
version and marks the file as a tg save.

    >>> import os, tempfile
    >>> import tg
    >>> checkpoint = {"model": {"w": tg.ones(2)}, "epoch": 3, "lr": 0.1, "tags": ("best", None)}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     save(checkpoint, os.path.join(tmp, "ckpt.safetensors"))
    ...     loaded = load(os.path.join(tmp, "ckpt.safetensors"))
    >>> loaded["model"]["w"].tolist(), loaded["epoch"], loaded["lr"], loaded["tags"]
    ([1.0, 1.0], 3, 0.1, ('best', None))

What a save holds, and what load gives back:

- dicts (keys str, int, float, bool or None; order kept; an OrderedDict comes back as a dict),
  lists, tuples (a namedtuple comes back as a plain tuple), None, bool, int, float (nan and inf
  too), str, and tg dtypes;
- tg Tensors, of any dtype and device: loaded as Tensors on the device map_location says
  (by default the one they were saved from), requires_grad kept; a tensor reached twice (a
  tied weight) is stored once and comes back as one Tensor;
- numpy arrays and numpy scalars: loaded as numpy again.

Anything else (a model object, a function, a set) raises TypeError naming where it is, before
anything is written. JSON in the file format:

- JSON null, true, numbers, strings and arrays are None, bools, ints, floats, strs and lists;
- every other value is an object with one key: {"tensor": name} (with "requires_grad": true and
  "device" beside it), {"ndarray": name}, {"numpy_scalar": name}, {"tuple": [...]},
  {"dict": [[key, value], ...]}, {"float": "nan" | "inf" | "-inf"}, {"dtype": "float32"}.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import IO, Any, Callable, Union

import numpy as np

from tg.core.device import Device, split_device
from tg.core.dtype import DType, dtypes
from tg.core.tensor import Tensor
from tg.nn.state import safe_load, safe_load_metadata, safe_save

__all__ = ["save", "load", "FORMAT_KEY", "STRUCTURE_KEY"]

FORMAT_KEY = "tg.save"              # metadata key marking a tg save; its value is the format version
STRUCTURE_KEY = "tg.structure"      # metadata key holding the JSON structure
_VERSION = "1"

MapLocation = Union[None, str, Mapping[str, str], Callable[[Tensor, str], Tensor]]


# ---------------------------------------------------------------- save

class _Flattener:
    """Turns an object into JSON-ready structure plus the tensors it refers to, by path name."""

    def __init__(self) -> None:
        self.tensors: dict[str, Tensor | np.ndarray] = {}
        self.named: dict[int, tuple[str, Any]] = {}     # id -> (entry name, object): each tensor once
        self.open: set[int] = set()                     # containers on the current path: cycles

    def entry(self, value: Any, path: str) -> str:
        if id(value) in self.named:
            return self.named[id(value)][0]
        name, n = path or "tensor", 1
        while name in self.tensors:          # "a.b" as a key and as a path: keep both
            name, n = f"{path}#{n}", n + 1
        self.tensors[name] = value
        self.named[id(value)] = (name, value)   # holding value keeps its id from being reused
        return name

    def encode(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Tensor):
            out: dict[str, Any] = {"tensor": self.entry(value, path), "device": value.device}
            if value.requires_grad:
                out["requires_grad"] = True
            return out
        if isinstance(value, (np.ndarray, np.generic)):
            if value.dtype.kind not in "biuf" or value.dtype.itemsize > 8:
                raise self.unsupported(value, path, f"a numpy array of dtype {value.dtype}")
            return {"numpy_scalar" if isinstance(value, np.generic) else "ndarray": self.entry(value, path)}
        if isinstance(value, DType):
            return {"dtype": value.name}
        if isinstance(value, (list, tuple, dict)):
            if id(value) in self.open:
                raise ValueError(f"[nn] save: the object contains itself at {path or 'the top'}; a save "
                                 f"holds trees (a container reached twice is saved twice), not cycles")
            self.open.add(id(value))
            try:
                return self.container(value, path)
            finally:
                self.open.discard(id(value))
        raise self.unsupported(value, path, f"a {type(value).__name__}")

    def container(self, value: list | tuple | dict, path: str) -> Any:
        base = f"{path}." if path else ""
        if isinstance(value, dict):
            items = []
            for key, item in value.items():
                if not (key is None or isinstance(key, (str, int, float))):
                    raise self.unsupported(key, path, f"a dict key of type {type(key).__name__}")
                items.append([self.encode(key, path), self.encode(item, f"{base}{key}")])
            return {"dict": items}
        items = [self.encode(item, f"{base}{i}") for i, item in enumerate(value)]
        return items if isinstance(value, list) else {"tuple": items}

    @staticmethod
    def unsupported(value: Any, path: str, what: str) -> TypeError:
        if callable(getattr(value, "state_dict", None)):      # a whole Module or optimizer: torch pickles it
            return TypeError(
                f"[nn] save: {path or 'the object'} is {what}, a whole object, which torch saves by pickle "
                f"and tg never does (loading a pickle runs code). Save its state: "
                f"tg.save(obj.state_dict(), path), and load it into a new one: "
                f"obj.load_state_dict(tg.load(path))")
        return TypeError(f"[nn] save: {path or 'the object'} is {what}; tg.save holds dicts, lists, tuples, "
                         f"None, bool, int, float, str, dtypes, tg Tensors and numpy arrays. Save the "
                         f"object's state instead (e.g. model.state_dict() or get_state_dict(model)), or "
                         f"convert the value (str(), a list)")


def save(obj: Any, f: str | os.PathLike | IO[bytes], *, metadata: Mapping[str, str] | None = None) -> None:
    """Save obj (nested dicts, lists and tuples of tensors, numbers, strings, bools, None) to the
    file f, atomically: a reader sees the old file or the new one, never a torn one, and an object
    that cannot be saved raises TypeError before anything is written. No pickle: the file is a
    safetensors file (see this module's docstring). `metadata` adds free str -> str entries. f may also
    be a binary file object open for writing (torch's `torch.save(obj, buffer)`): the file's bytes are
    written to it (its atomicity is then the caller's).

        >>> import os, tempfile
        >>> import tg
        >>> state = {"state": {0: {"step": 10, "exp_avg": tg.zeros(3)}}, "param_groups": [{"lr": 1e-3}]}
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save(state, os.path.join(tmp, "optim.safetensors"))
        ...     sorted(safe_load(os.path.join(tmp, "optim.safetensors")))
        ['state.0.exp_avg']
    """
    if not isinstance(f, (str, os.PathLike)):
        if not callable(getattr(f, "write", None)):
            raise TypeError(f"[nn] save: expected a file path (str or os.PathLike) or a binary file object, "
                            f"got {type(f).__name__}")
        with tempfile.TemporaryDirectory(prefix="tg-save-") as tmp:
            path = os.path.join(tmp, "saved.safetensors")
            save(obj, path, metadata=metadata)
            with open(path, "rb") as src:
                shutil.copyfileobj(src, f)      # type: ignore[misc]  # f: a writable binary file object
        return
    flat = _Flattener()
    structure = flat.encode(obj, "")
    extra = dict(metadata or {})
    clash = sorted({FORMAT_KEY, STRUCTURE_KEY} & set(extra))
    if clash:
        raise ValueError(f"[nn] save: metadata keys {clash} are tg.save's own; use other names")
    extra[FORMAT_KEY] = _VERSION
    extra[STRUCTURE_KEY] = json.dumps(structure, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    safe_save(flat.tensors, f, metadata=extra)


# ---------------------------------------------------------------- load

_PICKLE_HINT = ("tg never unpickles (unpickling runs arbitrary code). Convert the file where torch is "
                "installed: `safetensors.torch.save_file(torch.load(path), 'model.safetensors')` for a "
                "flat dict of tensors, then tg.load('model.safetensors')")


def _check_not_pickle(path: str) -> None:
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK\x03\x04"):
        raise ValueError(f"[nn] load: {path} is a zip file, the format torch.save writes (a pickle inside a "
                         f"zip); {_PICKLE_HINT}")
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise ValueError(f"[nn] load: {path} is a pickle file (torch.save's legacy format); {_PICKLE_HINT}")


def _device_map(map_location: MapLocation, path: str) -> Callable[[Tensor, str], Tensor]:
    """map_location as one function: (tensor as loaded, the device it was saved from) -> Tensor."""
    def saved_place(tensor: Tensor, saved: str) -> Tensor:
        why = _usable(saved)
        if why is not None:
            raise RuntimeError(f"[nn] load: {path}: a tensor was saved on {saved}, which is not usable here "
                               f"({why}). Fix: load with map_location='cpu' (or another device) to put the "
                               f"tensors elsewhere")
        return tensor.to(saved)

    if map_location is None:
        return saved_place
    if isinstance(map_location, str):
        target = Device.canonicalize(map_location)
        return lambda tensor, saved: tensor.to(target)
    if isinstance(map_location, Mapping):
        table = {_spelled(k): v for k, v in map_location.items()}
        return lambda tensor, saved: tensor.to(table[saved]) if saved in table else saved_place(tensor, saved)
    if callable(map_location):
        def call(tensor: Tensor, saved: str) -> Tensor:
            out = map_location(tensor, saved.lower())
            if not isinstance(out, Tensor):
                raise TypeError(f"[nn] load: map_location returned a {type(out).__name__}, expected a tg "
                                f"Tensor (it is called as map_location(tensor, saved_device))")
            return out
        return call
    raise TypeError(f"[nn] load: map_location should be None, a device ('cpu', 'cuda:1', 'CL'), a dict "
                    f"of saved device -> device, or a function (tensor, saved_device) -> Tensor; got "
                    f"{type(map_location).__name__}")


def _spelled(name: str) -> str:
    """A device name as tg writes it, without asking whether this machine has it ("cuda:0" -> "CUDA")."""
    kind, index = split_device(name)
    return f"{kind}:{index}" if index else kind


def _usable(name: str) -> str | None:
    """Why the device `name` cannot be used here (None if it can)."""
    try:
        Device.canonicalize(name)
    except (ValueError, RuntimeError) as e:
        return str(e)
    return None if Device.count(name) > 0 else f"this machine has no {split_device(name)[0]} device"


def load(f: str | os.PathLike | IO[bytes], map_location: MapLocation = None,
         weights_only: bool | None = None) -> Any:
    """Load what save() wrote: the same structure, with tensors as tg Tensors and numpy arrays as numpy;
    f a path or a binary file object open for reading (read from where it is to its end).

    map_location says where tensors go: None, each to the device it was saved from (an error if
    this machine lacks it); a device ('cpu', 'cuda:1', 'CL', a tg.device), all to it; a dict
    {saved device: device}, those named; a function (tensor, saved_device) -> Tensor, called with
    each tensor on the default device and its saved device in torch's spelling ('cuda:1').
    weights_only is accepted for torch's signature and changes nothing: load never runs code from
    the file, whatever it says.

    A safetensors file that tg.save did not write loads as a flat dict of name -> Tensor; a torch
    .pt / .bin (pickle) file raises ValueError saying how to convert it.

        >>> import os, tempfile
        >>> import tg
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save({"w": tg.arange(3), "step": 7}, os.path.join(tmp, "s.safetensors"))
        ...     state = load(os.path.join(tmp, "s.safetensors"), map_location="cpu")
        >>> state["w"].tolist(), state["w"].device, state["step"]
        ([0, 1, 2], 'CPU', 7)
    """
    del weights_only   # always safe: see the docstring
    if not isinstance(f, (str, os.PathLike)):
        if not callable(getattr(f, "read", None)):
            raise TypeError(f"[nn] load: expected a file path (str or os.PathLike) or a binary file object, "
                            f"got {type(f).__name__}")
        with tempfile.TemporaryDirectory(prefix="tg-load-") as tmp:
            path = os.path.join(tmp, "loaded.safetensors")
            with open(path, "wb") as dst:
                shutil.copyfileobj(f, dst)      # type: ignore[misc]  # f: a readable binary file object
            return load(path, map_location)
    path = os.fspath(f)
    _check_not_pickle(path)
    place = _device_map(map_location, path)
    metadata = safe_load_metadata(path)
    if FORMAT_KEY not in metadata:      # a plain safetensors file: what a user wants is its tensors
        staged = _staging_device(None, map_location)
        return {name: place(t, staged) for name, t in safe_load(path, staged).items()}
    if metadata[FORMAT_KEY] != _VERSION:
        raise ValueError(f"[nn] load: {path} is tg.save format version {metadata[FORMAT_KEY]!r}; this tg "
                         f"reads version {_VERSION}: load it with the tg that wrote it, or a newer one")
    try:
        structure = json.loads(metadata[STRUCTURE_KEY])
    except (KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"[nn] load: {path} is marked as a tg save but its {STRUCTURE_KEY!r} metadata is "
                         f"missing or not JSON ({e}); the file is corrupt") from None
    loaded = safe_load(path, _staging_device(structure, map_location))
    return _Rebuilder(loaded, place, path).decode(structure)


def _saved_devices(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*map(_saved_devices, node))
    if isinstance(node, dict) and "tensor" in node:
        return {node.get("device") or Device.DEFAULT}
    if isinstance(node, dict) and ("tuple" in node or "dict" in node):
        return _saved_devices(node.get("tuple", node.get("dict")))
    return set()


def _staging_device(structure: Any, map_location: MapLocation) -> str:
    """Where safe_load puts the tensors: their final device when all go to one, to skip a copy."""
    if isinstance(map_location, str):
        return Device.canonicalize(map_location)
    saved = _saved_devices(structure)
    if map_location is None and len(saved) == 1:
        only = saved.pop()
        return only if _usable(only) is None else Device.DEFAULT
    return Device.DEFAULT


class _Rebuilder:
    def __init__(self, tensors: dict[str, Tensor], place: Callable[[Tensor, str], Tensor], path: str):
        self.tensors, self.place, self.path = tensors, place, path
        self.made: dict[str, Any] = {}      # entry name -> object: a tensor saved once comes back as one

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise ValueError(f"[nn] load: {self.path}: the structure refers to tensor {name!r}, which the "
                             f"file does not hold; the file is corrupt")
        return self.tensors[name]

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(item) for item in node]
        if isinstance(node, dict) and "tensor" in node:
            return self.load_tensor(node)
        tag, value = next(iter(node.items())) if isinstance(node, dict) and len(node) == 1 else ("", None)
        if tag not in self.TAGS:
            raise ValueError(f"[nn] load: {self.path}: unknown structure node {node!r}; the file is corrupt "
                             f"or was written by a newer tg")
        return self.TAGS[tag](self, value)

    def numpy(self, name: str, scalar: bool) -> Any:
        if name not in self.made:
            array = self.tensor(name).numpy()
            self.made[name] = array[()] if scalar else array
        return self.made[name]

    TAGS: dict[str, Callable[[_Rebuilder, Any], Any]] = {
        "tuple": lambda self, items: tuple(self.decode(item) for item in items),
        "dict": lambda self, items: {self.decode(k): self.decode(v) for k, v in items},
        "float": lambda self, text: float(text),
        "dtype": lambda self, name: dtypes.from_any(name),
        "ndarray": lambda self, name: self.numpy(name, scalar=False),
        "numpy_scalar": lambda self, name: self.numpy(name, scalar=True),
    }

    def load_tensor(self, node: dict[str, Any]) -> Tensor:
        name = node["tensor"]
        if name not in self.made:
            out = self.place(self.tensor(name), node.get("device") or Device.DEFAULT)
            if node.get("requires_grad"):
                out.requires_grad = True
            self.made[name] = out
        return self.made[name]
