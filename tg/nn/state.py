"""State dicts and safetensors files: name a model's tensors, save them, load them back.

A model is any Python object; its tensors are found through attributes, lists, tuples and dicts
and named torch-style (`layers.0.weight`). An nn.Module met on the way names its own: its
state_dict(), torch's keys (`0.weight` in a Sequential). Files are in the safetensors format, written
atomically, and read without pickle.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from tg import Tensor
    >>> from tg.nn.state import get_state_dict, load_state_dict, safe_load, safe_save
    >>> class Net:
    ...     def __init__(self, fill: float):
    ...         self.proj = Tensor(np.full((2, 2), fill, np.float32))
    ...         self.layers = [{"bias": Tensor(np.full(3, fill, np.float32))}]
    >>> list(get_state_dict(Net(1.0)))
    ['proj', 'layers.0.bias']
    >>> net = Net(0.0)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = os.path.join(tmp, "net.safetensors")
    ...     safe_save(get_state_dict(Net(1.0)), path, metadata={"step": "100"})
    ...     load_state_dict(net, safe_load(path))
    ...     safe_load_metadata(path)
    LoadResult(missing_keys=[], unexpected_keys=[])
    {'step': '100'}
    >>> net.layers[0]["bias"].tolist()
    [1.0, 1.0, 1.0]

The safetensors layout (https://github.com/huggingface/safetensors): an 8-byte little-endian
header length N, then N bytes of JSON (padded with spaces to a multiple of 8) mapping each name
to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional "__metadata__" of str -> str,
then the data section: the tensors' little-endian bytes, back to back, offsets relative to it.
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import types
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, Callable, NamedTuple

import numpy as np

from tg.core.device import Device
from tg.core.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from tg.core.realize import from_numpy
from tg.core.shape import prod
from tg.core.tensor import Tensor
from tg.nn.loading import LoadResult, StateDictError, _shown, load_into
from tg.nn.module import Module

__all__ = [
    "get_parameters",
    "write_atomic",
    "get_state_dict",
    "load_state_dict",
    "LoadResult",
    "StateDictError",
    "safe_save",
    "safe_load",
    "safe_load_metadata",
    "SafetensorsError",
]

# ---------------------------------------------------------------- finding tensors

# values that never hold a model's tensors: walking a module or a class would find the world
_LEAVES = (str, bytes, bytearray, int, float, complex, type(None), np.ndarray, np.generic, type,
           types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) pairs one level down, in a deterministic order."""
    if isinstance(obj, Mapping):
        yield from ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):    # a namedtuple: by field name
        yield from zip(obj._fields, obj)
    elif isinstance(obj, (list, tuple)):
        yield from ((str(i), v) for i, v in enumerate(obj))
    elif not isinstance(obj, _LEAVES):
        yield from getattr(obj, "__dict__", {}).items()
        for cls in type(obj).__mro__:                            # slotted classes (dataclass(slots=True))
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    yield slot, getattr(obj, slot)


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from obj by a dotted torch-style name, in a deterministic order.

    Attributes give `name`, list and tuple items `name.0`, dict items `name.key`. Each object is
    visited once, under the first name that reaches it (as torch's named_parameters does), so a
    tied weight appears once and reference cycles are harmless. `prefix` is put before every name.
    An nn.Module gives its state_dict(): obj itself a Module, get_state_dict(obj) == obj.state_dict().

        >>> import numpy as np
        >>> from tg import Tensor
        >>> class Block:
        ...     def __init__(self): self.weight = Tensor(np.zeros((2, 2), np.float32))
        >>> class Model:
        ...     def __init__(self): self.blocks, self.head = [Block(), Block()], Block()
        >>> list(get_state_dict(Model(), prefix="model"))
        ['model.blocks.0.weight', 'model.blocks.1.weight', 'model.head.weight']
    """
    return _walk(obj, prefix, parameters_only=False)


def _walk(obj: Any, prefix: str, parameters_only: bool) -> dict[str, Tensor]:
    """get_state_dict's walk; parameters_only takes a Module's parameters() instead of its state."""
    if isinstance(obj, Module) and not parameters_only:
        return obj.state_dict(prefix=prefix if not prefix or prefix.endswith(".") else prefix + ".")
    if prefix and not prefix.endswith("."):
        prefix += "."
    out: dict[str, Tensor] = {}
    seen: dict[int, Any] = {}   # holding each object keeps its id from being reused mid-walk
    stack: list[tuple[str, Any]] = [(prefix.rstrip("."), obj)]
    while stack:   # depth-first, children in order: an explicit stack so deep nesting cannot overflow
        name, value = stack.pop()
        if id(value) in seen or isinstance(value, _LEAVES):
            continue
        seen[id(value)] = value
        base = f"{name}." if name else ""
        if isinstance(value, Tensor):
            out[name] = value
            continue
        if isinstance(value, Module):
            found = dict(value.named_parameters(prefix=name)) if parameters_only else value.state_dict(base)
            # the module's own names; a tensor already reached outside it is not repeated
            out.update({key: tensor for key, tensor in found.items() if id(tensor) not in seen})
            for tensor in found.values():
                seen[id(tensor)] = tensor
            continue
        stack.extend(reversed([(base + key, child) for key, child in _children(value)]))
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    """Every Tensor reachable from obj, each once, in get_state_dict's order; of an nn.Module met on
    the way only its parameters() (so get_parameters(module) == list(module.parameters())).

        >>> import numpy as np
        >>> from tg import Tensor
        >>> w = Tensor(np.ones(3, np.float32))
        >>> len(get_parameters({"encoder": [w], "decoder": {"tied": w}}))
        1
    """
    return list(_walk(obj, "", parameters_only=True).values())


# ---------------------------------------------------------------- loading a state dict

def load_state_dict(model: Any, state_dict: Mapping[str, Tensor | np.ndarray],
                    strict: bool = True) -> LoadResult:
    """Copy state_dict's values into the model's tensors in place (cast to each tensor's dtype).

    Everything is checked before anything is written: with strict=True any missing key,
    unexpected key or shape mismatch raises one StateDictError listing them all; with
    strict=False the matching keys are loaded and (missing, unexpected) comes back. A shape
    mismatch is an error either way, as in torch. Values are tg Tensors or numpy arrays.

        >>> import numpy as np
        >>> from tg import Tensor
        >>> model = {"w": Tensor(np.zeros(2, np.float32)), "b": Tensor(np.zeros(1, np.float32))}
        >>> loaded = {"w": np.array([1, 2]), "x": np.ones(1)}
        >>> missing, unexpected = load_state_dict(model, loaded, strict=False)
        >>> missing, unexpected, model["w"].tolist()
        (['b'], ['x'], [1.0, 2.0])
    """
    return load_into(get_state_dict(model), state_dict, strict)


# ---------------------------------------------------------------- safetensors files

_CODES: dict[str, DType] = {
    "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "U16": dtypes.uint16,
    "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
    "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
_CODE_OF: dict[DType, str] = {dt: code for code, dt in _CODES.items()}
_MAX_HEADER_BYTES = 100_000_000   # the limit the safetensors library itself applies


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file (a ValueError; the message names the file and the tensor).

        >>> import pathlib, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = pathlib.Path(tmp, "model.pt")
        ...     _ = path.write_bytes(b"PK\x03\x04 a zip, not safetensors")
        ...     try:
        ...         safe_load(path)
        ...     except SafetensorsError as e:
        ...         print(str(e).replace(str(path), "model.pt"))
        [nn] safe_load: model.pt: the header length field says ... bytes but the file has 19 after it ...
    """


class Deferred(NamedTuple):
    """A tensor safe_save writes without holding it: its shape and dtype go into the header, and
    `produce()` is called for its values (a numpy array or Tensor of that shape) only when the file
    reaches it, after the tensors before it are written (FSDP's full export gathers one unit at a
    time so)."""
    shape: tuple[int, ...]
    dtype: DType
    produce: Callable[[], Any]


def _host_bits(value: Tensor | np.ndarray | Deferred, dt: DType) -> np.ndarray:
    """The value's bits as a contiguous little-endian array (realizes a lazy tensor)."""
    if isinstance(value, Deferred):
        value = value.produce()
    arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if dt == dtypes.bfloat16:
        arr = f32_to_bf16(arr)   # exact: numpy() widened the bf16 bits to float32 losslessly
    return np.ascontiguousarray(arr, dtype=dt.np.newbyteorder("<"))


def _atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Write a file under a temporary name in the same directory, fsync it, then rename it over
    path: a crash at any point leaves either the old file or the new one, never a torn one."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"[nn] cannot write {path}: the directory {directory} does not exist; "
                                f"create it first with os.makedirs")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    # os.open with 0o666 lets the umask decide the mode, as for any new file (mkstemp would force 0o600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):   # make the rename itself durable (not possible on Windows)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write bytes to path atomically (temporary file, fsync, rename): readers see the old file or
    the new one, never a torn one.

        >>> import os, pathlib, tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = pathlib.Path(tmp, "latest")
        ...     write_atomic(path, b"step-3")
        ...     path.read_bytes(), os.listdir(tmp)                       # no temporary file left behind
        (b'step-3', ['latest'])
    """
    def write(f: BinaryIO) -> None:
        f.write(data)
    _atomic_write(os.fspath(path), write)


# Complexity: one check per way a name, tensor or metadata value can be unwritable, each with its own
# message, then the write.
def safe_save(tensors: Mapping[str, Tensor | np.ndarray | Deferred], path: str | os.PathLike,  # noqa: C901
              metadata: Mapping[str, str] | None = None) -> None:
    """Write tensors to a safetensors file, atomically, in the dict's order.

    Values are tg Tensors (any dtype, views included; each is realized as it is written), numpy
    arrays, or `Deferred` (made when written). metadata is free text, str -> str, read back with
    safe_load_metadata.

        >>> import os, tempfile
        >>> import numpy as np
        >>> from tg import Tensor
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "x.safetensors")
        ...     safe_save({"x": Tensor([[1, 2], [3, 4]]).T, "y": np.ones(2, np.float16)}, path)
        ...     {name: t.tolist() for name, t in safe_load(path).items()}
        {'x': [[1, 3], [2, 4]], 'y': [1.0, 1.0]}
    """
    path = os.fspath(path)
    if not isinstance(tensors, Mapping):
        raise TypeError(f"[nn] safe_save: expected a dict of name -> Tensor, got {type(tensors).__name__}; "
                        f"for a model pass get_state_dict(model)")
    header: dict[str, Any] = {}
    if metadata:
        bad = [f"{k!r}: {type(v).__name__}" for k, v in metadata.items()
               if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise TypeError(f"[nn] safe_save: metadata must map str to str, got {_shown(bad)}; "
                            f"convert the values with str() or json.dumps()")
        header["__metadata__"] = dict(metadata)
    entries: list[tuple[Tensor | np.ndarray | Deferred, DType]] = []
    offset = 0
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"[nn] safe_save: tensor names must be strings other than '__metadata__', "
                             f"got {name!r}; rename it")
        if isinstance(value, (Tensor, Deferred)):
            dt = value.dtype
        elif isinstance(value, (np.ndarray, np.generic)):
            try:
                dt = dtypes.from_any(value.dtype)
            except TypeError:
                raise TypeError(f"[nn] safe_save: tensor {name!r} has numpy dtype {value.dtype}, which "
                                f"safetensors files in tg cannot hold; cast it first") from None
        else:
            raise TypeError(f"[nn] safe_save: tensor {name!r} is a {type(value).__name__}, expected a tg "
                            f"Tensor or numpy array")
        nbytes = prod(value.shape) * dt.itemsize
        header[name] = {"dtype": _CODE_OF[dt], "shape": list(value.shape),
                        "data_offsets": [offset, offset + nbytes]}
        entries.append((value, dt))
        offset += nbytes
    # compact separators and raw UTF-8, as the safetensors library writes its headers
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)

    def write(f: BinaryIO) -> None:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for value, dt in entries:   # one tensor on the host at a time
            f.write(_host_bits(value, dt).reshape(-1).view(np.uint8).data)

    _atomic_write(path, write)


class _Entry(NamedTuple):
    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int
    end: int


# Complexity: a validating parser: one check per field of the untrusted header, each naming what is wrong,
# before anything is allocated.
def _read_header(f: BinaryIO, path: str) -> tuple[list[_Entry], dict[str, str], int]:  # noqa: C901
    """Parse and check a safetensors header: (entries in header order, metadata, data start)."""
    def bad(msg: str, name: str | None = None) -> SafetensorsError:
        where = f"{path}: tensor {name!r}" if name is not None else path
        return SafetensorsError(f"[nn] safe_load: {where}: {msg}")

    size = os.fstat(f.fileno()).st_size
    raw = f.read(8)
    if len(raw) < 8:
        raise bad(f"the file has {size} bytes, too few for a safetensors file (an 8-byte header length "
                  f"comes first); was the write interrupted?")
    header_len = struct.unpack("<Q", raw)[0]
    if header_len > min(size - 8, _MAX_HEADER_BYTES):
        raise bad(f"the header length field says {header_len} bytes but the file has {size - 8} after it "
                  f"(limit {_MAX_HEADER_BYTES}); not a safetensors file (a torch .pt/.bin is a zip or "
                  f"pickle: convert it to safetensors first) or a truncated one")
    text = f.read(header_len)
    if not text.startswith(b"{"):
        raise bad(f"the header should be a JSON object starting with '{{', got {text[:16]!r}; "
                  f"not a safetensors file")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise bad(f"the header names {_shown(dupes)} more than once")
        return dict(pairs)

    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=unique)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"the header is not valid UTF-8 JSON ({e}); the file is corrupt") from None
    if not isinstance(header, dict):
        raise bad(f"the header should be a JSON object, got {type(header).__name__}")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise bad(f"__metadata__ should map str to str, got {metadata!r}")

    data_start, data_len = 8 + header_len, size - 8 - header_len
    entries: list[_Entry] = []
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise bad(f"expected {{'dtype', 'shape', 'data_offsets'}}, got {info!r}", name)
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if code not in _CODES:
            raise bad(f"unknown or unsupported dtype {code!r}; tg reads {', '.join(_CODES)}", name)
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise bad(f"shape should be a list of non-negative ints, got {shape!r}", name)
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data_len):
            raise bad(f"data_offsets {offsets!r} are out of range: expected [begin, end] with "
                      f"0 <= begin <= end <= {data_len} (the data section's size); truncated file?", name)
        dt = _CODES[code]
        if offsets[1] - offsets[0] != prod(shape) * dt.itemsize:
            raise bad(f"shape {tuple(shape)} of {code} needs {prod(shape) * dt.itemsize} bytes but "
                      f"data_offsets {offsets} span {offsets[1] - offsets[0]}", name)
        entries.append(_Entry(name, dt, tuple(shape), offsets[0], offsets[1]))
    previous: _Entry | None = None
    for entry in sorted((x for x in entries if x.end > x.begin), key=lambda x: x.begin):
        if previous is not None and entry.begin < previous.end:
            raise bad(f"data_offsets [{entry.begin}, {entry.end}] overlap those of {previous.name!r} "
                      f"[{previous.begin}, {previous.end}]; the file is corrupt", entry.name)
        previous = entry
    return entries, dict(metadata), data_start


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into realized Tensors on device (default device if None).

    The header is checked first; a malformed file raises SafetensorsError naming the file and
    the tensor. Nothing is unpickled.

        >>> import os, tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "w.safetensors")
        ...     safe_save({"w": np.arange(3, dtype=np.int16)}, path)
        ...     w = safe_load(path)["w"]
        >>> w.dtype, w.tolist()
        (dtypes.int16, [0, 1, 2])
    """
    path = os.fspath(path)
    device = Device.canonicalize(device)
    out: dict[str, Tensor] = {}
    with open(path, "rb") as f:
        entries, _, data_start = _read_header(f, path)
        for e in entries:
            f.seek(data_start + e.begin)
            buf = bytearray(e.end - e.begin)
            if f.readinto(buf) != len(buf):
                raise SafetensorsError(f"[nn] safe_load: {path}: tensor {e.name!r}: the file ended while "
                                       f"reading it; was it changed while being read?")
            bits = np.frombuffer(buf, dtype=e.dtype.np.newbyteorder("<")).reshape(e.shape)
            if e.dtype == dtypes.bool:
                bits = bits.view(np.uint8) != 0    # any nonzero byte is True, as in safetensors
            bits = bits.astype(e.dtype.np, copy=False)   # native byte order
            # from raw bits: bfloat16 arrives as its uint16 storage, with no float round trip
            out[e.name] = Tensor(from_numpy(bits, e.dtype, device), device=device)
    return out


def safe_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a safetensors file, by name (reads only the header).

        >>> import os, tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "s.safetensors")
        ...     safe_save({"w": np.zeros((2, 3), np.float32)}, path)
        ...     safe_shapes(path)
        {'w': (2, 3)}
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        return {e.name: tuple(e.shape) for e in _read_header(f, path)[0]}


def safe_read_rows(path: str | os.PathLike, name: str, first: int, count: int) -> np.ndarray:
    """Rows first..first + count of tensor `name` (along its first dim) from a safetensors file, read
    alone (the file's other bytes are not touched): a host array of the rows, bfloat16 as float32.

        >>> import os, tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "w.safetensors")
        ...     safe_save({"w": np.arange(12, dtype=np.float32).reshape(4, 3)}, path)
        ...     safe_read_rows(path, "w", 1, 2).tolist()
        [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        entries, _, data_start = _read_header(f, path)
        e = next((e for e in entries if e.name == name), None)
        if e is None:
            raise KeyError(f"[nn] safe_read_rows: {path} has no tensor {name!r}")
        rows = e.shape[0] if e.shape else 1
        if not 0 <= first <= first + count <= rows:
            raise ValueError(f"[nn] safe_read_rows: {path}: tensor {name!r} has {rows} rows, asked for "
                             f"rows {first}..{first + count}")
        row_bytes = (e.end - e.begin) // max(rows, 1)
        f.seek(data_start + e.begin + first * row_bytes)
        buf = bytearray(count * row_bytes)
        if f.readinto(buf) != len(buf):
            raise SafetensorsError(f"[nn] safe_read_rows: {path}: tensor {name!r}: the file ended while "
                                   f"reading it")
    bits = np.frombuffer(buf, dtype=e.dtype.np.newbyteorder("<")).reshape((count, *e.shape[1:]))
    bits = bits.astype(e.dtype.np, copy=False)
    return bf16_to_f32(bits) if e.dtype == dtypes.bfloat16 else bits


def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The "__metadata__" of a safetensors file ({} if it has none); reads only the header.

        >>> import os, tempfile
        >>> import numpy as np
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "m.safetensors")
        ...     safe_save({"x": np.zeros(1)}, path, metadata={"epoch": "3"})
        ...     safe_load_metadata(path)
        {'epoch': '3'}
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        return _read_header(f, path)[1]
