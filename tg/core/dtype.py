"""Data types and PyTorch's type-promotion rules.

    >>> from tg.core.dtype import dtypes, promote_types
    >>> promote_types(dtypes.int8, dtypes.uint8)
    dtypes.int16
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy import dtype as NumpyDType  # the property DType.np hides the module name in the class


@dataclass(frozen=True, eq=True)
class DType:
    name: str
    itemsize: int
    kind: str          # "b" bool, "u" unsigned, "i" signed, "f" float
    np_storage: str    # numpy dtype holding the bits on the host

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_floating_point(self) -> bool:
        """torch.dtype's name for is_float."""
        return self.kind == "f"

    @property
    def is_signed(self) -> bool:
        """True for the types that hold negative values: signed ints and floats (torch.dtype.is_signed)."""
        return self.kind in "if"

    @property
    def is_complex(self) -> bool:
        """Always False: tg has no complex types (torch.dtype.is_complex)."""
        return False

    @property
    def np(self) -> NumpyDType:
        """The numpy dtype of the host bits (bfloat16 is held as uint16)."""
        return np.dtype(self.np_storage)

    @property
    def np_value(self) -> NumpyDType:
        """The numpy dtype values are shown in: bfloat16 is shown as float32."""
        return np.dtype(np.float32) if self.name == "bfloat16" else self.np


class dtypes:
    bool = DType("bool", 1, "b", "bool")
    int8 = DType("int8", 1, "i", "int8")
    uint8 = DType("uint8", 1, "u", "uint8")
    int16 = DType("int16", 2, "i", "int16")
    uint16 = DType("uint16", 2, "u", "uint16")
    int32 = DType("int32", 4, "i", "int32")
    uint32 = DType("uint32", 4, "u", "uint32")
    int64 = DType("int64", 8, "i", "int64")
    uint64 = DType("uint64", 8, "u", "uint64")
    float16 = DType("float16", 2, "f", "float16")
    bfloat16 = DType("bfloat16", 2, "f", "uint16")
    float32 = DType("float32", 4, "f", "float32")
    float64 = DType("float64", 8, "f", "float64")
    default_float = float32
    default_int = int64
    half = float16
    float = float32
    double = float64
    int = int32
    long = int64

    @staticmethod
    def all() -> list[DType]:
        return [v for k, v in vars(dtypes).items() if isinstance(v, DType) and k == v.name]

    @staticmethod
    def from_any(x: object) -> DType:
        """A DType from a DType, its name, or a numpy dtype."""
        if isinstance(x, DType):
            return x
        if isinstance(x, str) and isinstance(getattr(dtypes, x, None), DType):
            return getattr(dtypes, x)
        try:
            npd = np.dtype(x)  # type: ignore[call-overload]
        except TypeError:
            npd = None
        if npd is not None:
            for d in dtypes.all():
                if d.name != "bfloat16" and d.np == npd:
                    return d
        raise TypeError(f"[core] unknown dtype {x!r}; expected one of "
                        f"{', '.join(d.name for d in dtypes.all())}")


# PyTorch's promotion lattice: bool < integers < floats; inside a kind the wider type wins;
# a signed/unsigned mix widens to the next signed type; float16 with bfloat16 gives float32.
_ORDER = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def promote_types(a: DType, b: DType) -> DType:
    """The dtype of a binary op between tensors of dtype a and b (torch.promote_types)."""
    if a == b:
        return a
    if {a.name, b.name} == {"float16", "bfloat16"}:
        return dtypes.float32
    if a.is_unsigned and b.kind == "i" or b.is_unsigned and a.kind == "i":
        u, s = (a, b) if a.is_unsigned else (b, a)
        if s.itemsize > u.itemsize:
            return s
        return {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}.get(u.itemsize, dtypes.int64)
    rank = {n: i for i, n in enumerate(_ORDER)}
    for d in (a, b):
        if d.name not in rank:  # uint16/32/64: only promote with themselves or wider kinds
            other = b if d is a else a
            if other.is_float:
                return other
            if other.kind == "b":
                return d
            return d if d.itemsize >= other.itemsize else other
    return a if rank[a.name] > rank[b.name] else b


def scalar_result_type(t: DType, value: object) -> DType:
    """dtype of tensor-with-Python-scalar ops: a scalar only lifts the kind (bool -> int -> float)."""
    if isinstance(value, bool):
        return t
    if isinstance(value, int):
        return dtypes.default_int if t.kind == "b" else t
    if isinstance(value, float):
        return t if t.is_float else dtypes.default_float
    raise TypeError(f"[core] expected a Python bool, int or float scalar, got {type(value).__name__}")


def dtype_of_scalar(value: object) -> DType:
    if isinstance(value, bool):
        return dtypes.bool
    if isinstance(value, int):
        return dtypes.default_int
    if isinstance(value, float):
        return dtypes.default_float
    raise TypeError(f"[core] expected a Python bool, int or float, got {type(value).__name__}")


def min_value(d: DType) -> float | int | bool:
    if d.is_float:
        return float("-inf")
    if d.kind == "b":
        return False
    return int(np.iinfo(d.np).min)


def max_value(d: DType) -> float | int | bool:
    if d.is_float:
        return float("inf")
    if d.kind == "b":
        return True
    return int(np.iinfo(d.np).max)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as the kernels do; a NaN keeps its payload (made quiet if needed)."""
    x = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(x).reshape(-1).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    top = (u >> 16).astype(np.uint16)
    nan_bits = np.where(top & 0x7F, top, top | 0x40).astype(np.uint16)
    return np.where(np.isnan(x.reshape(-1)), nan_bits, rounded).reshape(x.shape)


def value_key(value: Any) -> Any:
    """A constant as a dictionary key: a float by its bits, since -0.0 == 0.0 would make two constants
    one and nan != nan would never find itself; other values as they are (their dtype tells bool, int
    and float apart wherever such keys are used)."""
    return value.hex() if type(value) is float else value
