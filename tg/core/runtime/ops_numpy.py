"""NUMPY device: the reference. It runs the same scheduled kernels as every other device, but
interprets their ASTs with numpy, so REFERENCE below is the definition of what each op means.

Conventions every device follows: float16 and bfloat16 values are computed in float32 and
rounded when stored or cast (to them, or from them to another type); a sum of them accumulates in
float32 (split reduces keep float32 partials); integer arithmetic wraps; MOD and IDIV follow C (truncation),
and an integer division by zero gives 0; CMPLT/CMPNE give bools."""
from __future__ import annotations

import math
import time

import numpy as np

from tg.core.device import Buffer, Compiled, HostAllocator, Program
from tg.core.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from tg.core.kernel import AstOps, Kernel, KOp
from tg.core.ops import BinaryOps, BufferOps, CompositeOps, MovementOps, ReduceOps, TernaryOps, UnaryOps


def compute_dtype(d: DType) -> np.dtype:
    return np.dtype(np.float32) if d in (dtypes.float16, dtypes.bfloat16) else d.np


def _cast(x: np.ndarray, dtype: DType, src: DType | None = None) -> np.ndarray:
    if src in (dtypes.float16, dtypes.bfloat16) and dtype != src:
        x = _cast(x, src)            # a narrow value leaves its type rounded to it
    if dtype == dtypes.bool:
        return x != 0
    with np.errstate(all="ignore"):   # overflow to inf / wrap-around is the defined result
        if dtype == dtypes.float16:
            return x.astype(np.float16).astype(np.float32)
        if dtype == dtypes.bfloat16:
            return bf16_to_f32(f32_to_bf16(np.asarray(x, dtype=np.float32)))
        return x.astype(dtype.np)


def _bitcast(x: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    bits = to_storage(np.asarray(x), src)
    # ascontiguousarray makes a 0-d array 1-d: the shape is put back
    return from_storage(np.ascontiguousarray(bits).view(dst.np).reshape(np.shape(x)), dst)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        q = (a - np.fmod(a, safe)) // safe
    return np.where(b == 0, 0, q).astype(np.result_type(a, b))


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return np.fmod(a, b)
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.fmod(a, safe)).astype(np.result_type(a, b))


def _is_bool(x: np.ndarray) -> bool:
    return x.dtype == np.bool_


REFERENCE: dict = {
    UnaryOps.EXP2: np.exp2, UnaryOps.LOG2: np.log2, UnaryOps.SIN: np.sin, UnaryOps.COS: np.cos,
    UnaryOps.SQRT: np.sqrt, UnaryOps.RECIP: lambda x: np.reciprocal(x),
    UnaryOps.NEG: lambda x: np.logical_not(x) if _is_bool(x) else np.negative(x),
    UnaryOps.CAST: _cast, UnaryOps.BITCAST: _bitcast,
    BinaryOps.ADD: lambda a, b: np.logical_or(a, b) if _is_bool(a) else np.add(a, b),
    BinaryOps.MUL: lambda a, b: np.logical_and(a, b) if _is_bool(a) else np.multiply(a, b),
    BinaryOps.MAX: lambda a, b: np.logical_or(a, b) if _is_bool(a) else np.maximum(a, b),
    BinaryOps.MOD: _mod, BinaryOps.IDIV: _int_div,
    BinaryOps.CMPLT: np.less, BinaryOps.CMPNE: np.not_equal,
    BinaryOps.AND: np.bitwise_and, BinaryOps.OR: np.bitwise_or, BinaryOps.XOR: np.bitwise_xor,
    BinaryOps.SHL: np.left_shift, BinaryOps.SHR: np.right_shift,
    TernaryOps.WHERE: np.where, TernaryOps.MULACC: lambda a, b, c: a * b + c,
    # composites reach no kernel (tg/core/composite.py expands them): their meaning, for the tests
    CompositeOps.EXP: np.exp, CompositeOps.TANH: np.tanh,
    CompositeOps.ERF: lambda x: np.vectorize(math.erf, otypes=[x.dtype])(x),
    CompositeOps.ERFC: lambda x: np.vectorize(math.erfc, otypes=[x.dtype])(x),
    CompositeOps.SIGMOID: lambda x: np.where(x < 0, np.exp(np.minimum(x, 0)) / (1 + np.exp(np.minimum(x, 0))),
                                             1 / (1 + np.exp(-np.maximum(x, 0)))),
    ReduceOps.SUM: lambda x, axes: np.sum(x, axis=axes, keepdims=True, dtype=x.dtype),
    ReduceOps.MAX: lambda x, axes: np.max(x, axis=axes, keepdims=True),
    MovementOps.RESHAPE: lambda x, shape: np.reshape(x, shape),
    MovementOps.PERMUTE: lambda x, order: np.transpose(x, order),
    MovementOps.EXPAND: lambda x, shape: np.broadcast_to(x, shape),
    MovementOps.PAD: lambda x, arg: np.pad(x, arg),
    MovementOps.SHRINK: lambda x, arg: x[tuple(slice(lo, hi) for lo, hi in arg)],
    MovementOps.FLIP: lambda x, axes: np.flip(x, tuple(i for i, f in enumerate(axes) if f)),
    BufferOps.EMPTY: lambda shape, dtype: np.empty(shape, dtype),
    BufferOps.CONST: lambda value, shape, dtype: np.full(shape, value, dtype),
    BufferOps.COPY: lambda x: np.array(x, copy=True),
    BufferOps.ASSIGN: lambda dest, value: np.copyto(dest, value),
}


def from_storage(bits: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return bf16_to_f32(bits)
    if dtype == dtypes.float16:
        return bits.astype(np.float32)
    return bits


def to_storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return f32_to_bf16(np.asarray(x, dtype=np.float32))
    with np.errstate(over="ignore"):    # beyond a half's range: inf, as a store in C
        return np.asarray(x).astype(dtype.np)


class Interpreter:
    def __init__(self, kernel: Kernel):
        self.ast = kernel.ast
        self.name = kernel.name

    def view(self, st, flat: np.ndarray | None, fill=0) -> tuple[np.ndarray, np.ndarray]:
        env = {v.name: g for v, g in zip(st.variables(), np.ogrid[tuple(slice(0, s) for s in st.shape)])}
        idx, valid = st.expr_idxs(st.variables())
        idx_a = np.broadcast_to(np.asarray(idx.eval(env), dtype=np.int64), st.shape)
        valid_a = np.broadcast_to(np.asarray(valid.eval(env), dtype=bool), st.shape)
        return idx_a, valid_a

    def eval(self, root: KOp, bufs: list[np.ndarray]) -> np.ndarray:
        """root's value: each node of its AST once, sources first."""
        values: dict[int, np.ndarray] = {}
        for n in root.walk():
            values[id(n)] = self._node(n, bufs, values)
        return values[id(root)]

    def _node(self, n: KOp, bufs: list[np.ndarray], values: dict[int, np.ndarray]) -> np.ndarray:
        if n.op is AstOps.LOAD:
            i, st = n.arg
            idx, valid = self.view(st, bufs[i])
            vals = from_storage(bufs[i][np.where(valid, idx, 0)] if bufs[i].size else
                                np.zeros(st.shape, bufs[i].dtype), n.dtype)
            out = np.where(valid, vals, np.zeros((), vals.dtype))
        elif n.op is BufferOps.CONST:
            value, st = n.arg
            _, valid = self.view(st, None)
            with np.errstate(over="ignore"):    # a constant beyond float32's range is inf there, as in C
                value = np.array(value, dtype=compute_dtype(n.dtype))
            out = np.where(valid, value, np.zeros((), value.dtype))
        elif isinstance(n.op, ReduceOps):
            src = values[id(n.src[0])]
            out = REFERENCE[n.op](src, tuple(n.arg)) if src.size else \
                np.full(tuple(1 if i in n.arg else s for i, s in enumerate(src.shape)),
                        0 if n.op is ReduceOps.SUM else -np.inf, dtype=src.dtype)
        elif n.op in (UnaryOps.CAST,):
            out = REFERENCE[n.op](values[id(n.src[0])], n.arg, n.src[0].dtype)
        elif n.op is UnaryOps.BITCAST:
            out = REFERENCE[n.op](values[id(n.src[0])], n.src[0].dtype, n.arg)
        else:
            srcs = [values[id(s)] for s in n.src]
            with np.errstate(all="ignore"):
                out = REFERENCE[n.op](*srcs)
            if (
                n.dtype != dtypes.bool
                and n.dtype.np != out.dtype
                and n.dtype not in (dtypes.float16, dtypes.bfloat16)
            ):
                out = out.astype(n.dtype.np)
        return out

    def run(self, bufs: list[np.ndarray]) -> None:
        root = self.ast
        value = self.eval(root.src[0], bufs)
        _, st = root.arg
        idx, valid = self.view(st, bufs[0])
        value = np.broadcast_to(value, st.shape)
        bufs[0][idx[valid]] = to_storage(value[valid], root.dtype)


class NumpyProgram(Program):
    def __init__(self, dev: NumpyDevice, name: str, binary: None, interp: Interpreter, info: None):
        self.interp, self.name, self.info = interp, name, info

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        start = time.perf_counter()
        self.interp.run([b._buf.view(b.dtype.np) for b in bufs])
        return time.perf_counter() - start if wait else None


class NumpyDevice(Compiled):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.allocator = HostAllocator()
        self.program = NumpyProgram

    def lower(self, kernel: Kernel) -> tuple[str, Interpreter, None]:
        """Nothing to render or build: the "source" is an interpreter of the kernel's AST."""
        return kernel.name, Interpreter(kernel), None
