"""Every op that takes a tensor returns torch's dtype (issue 34 item 10): clone of bool was int64, gather of
bool/int32 int64, F.pad of an int tensor with a float value float32.

One table over the ops and ten dtypes. Each op names the torch rule its result dtype follows (documented in
torch's type promotion notes; the table was checked against torch 2.x once when written, and needs no torch
to run), the dtypes torch refuses (left out), a tg call and a numpy reference for the values. Inputs are
small integers (|v| <= 5, >= 0 for uint8) so every dtype holds them and sums and products stay exact.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from op_helpers import bf16_round

import tg
import tg.nn.functional as F
from tg import Tensor

INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
DTYPES = ("bool",) + INTS + FLOATS


def _keep(dt: str) -> str:
    return dt


def _exact_accumulate(dt: str) -> str:
    """sum, prod, cumsum, cumprod, trace: bool and every int accumulate in int64; floats keep their dtype."""
    return dt if dt in FLOATS else "int64"


def _bool_with_int_scalar(dt: str) -> str:
    """A bool tensor with an int Python scalar (x + 1, clamp(0, 3), x ** 2) promotes to int64."""
    return "int64" if dt == "bool" else dt


def _with_float_scalar(dt: str) -> str:
    """A float Python scalar promotes bool and ints to the default float dtype, float32."""
    return dt if dt in FLOATS else "float32"


def _logical(dt: str) -> str:
    """any/all give bool, except uint8 in gives uint8 out (torch's documented exception)."""
    return "uint8" if dt == "uint8" else "bool"


def _index(dt: str) -> str:
    return "int64"


IDX = np.array([[0, 2, 1], [3, 3, 0], [1, 0, 2]])
SCATTER_IDX = np.array([[0, 2], [3, 1], [1, 0]])
ROWS = np.array([2, 0])
MASK = np.array([True, False, True, False])
NO_BOOL = ("bool",)


def _np_scatter(a: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = a.copy()
    for i, j in np.ndindex(SCATTER_IDX.shape):
        out[i, SCATTER_IDX[i, j]] = src[i, j]
    return out


def _np_scatter_add(a: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = a.astype(np.float64)
    for i, j in np.ndindex(SCATTER_IDX.shape):
        out[i, SCATTER_IDX[i, j]] += src[i, j]
    return out != 0 if a.dtype == bool else out      # bool adds are ors


def _np_pad(a: np.ndarray, mode: str, value: float = 0) -> np.ndarray:
    widths = ((0, 0), (1, 2))
    if mode == "constant":
        return np.pad(a, widths, constant_values=np.array(value).astype(a.dtype))
    return np.pad(a, widths, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


def _clip(a: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray:
    return np.clip(a.astype(np.float64), lo, hi)


def _T(v: np.ndarray) -> Tensor:
    return Tensor(v)


Op = tuple[Callable[[str], str], tuple[str, ...], Callable[[Tensor], Tensor],
           Callable[[np.ndarray], np.ndarray]]
# name: (dtype rule, dtypes torch refuses, tg call, numpy reference); inputs are (3, 4)
OPS: dict[str, Op] = {
    "clone": (_keep, (), lambda x: x.clone(), lambda a: a),
    "clone_invert": (_keep, FLOATS, lambda x: ~x.clone(), lambda a: ~a),
    "contiguous": (_keep, (), lambda x: x.T.contiguous(), lambda a: a.T),
    "detach": (_keep, (), lambda x: x.detach(), lambda a: a),
    "gather": (_keep, (), lambda x: x.gather(1, _T(IDX)), lambda a: np.take_along_axis(a[:, :4], IDX, 1)),
    "take_along_dim": (_keep, (), lambda x: tg.take_along_dim(x, _T(SCATTER_IDX), 1),
                       lambda a: np.take_along_axis(a, SCATTER_IDX, 1)),
    "scatter": (_keep, (), lambda x: x.scatter(1, _T(SCATTER_IDX), x[:, :2]),
                lambda a: _np_scatter(a, a[:, :2])),
    "scatter_value": (_keep, (), lambda x: x.scatter(1, _T(SCATTER_IDX), value=1),
                      lambda a: _np_scatter(a, np.ones((3, 2), a.dtype))),
    "scatter_add": (_keep, (), lambda x: x.scatter_add(1, _T(SCATTER_IDX), x[:, :2]),
                    lambda a: _np_scatter_add(a, a[:, :2])),
    "index_select": (_keep, (), lambda x: x.index_select(1, _T(ROWS)), lambda a: a[:, ROWS]),
    "take": (_keep, (), lambda x: x.take(_T(np.array([5, 0, 11]))), lambda a: a.reshape(-1)[[5, 0, 11]]),
    "getitem_index": (_keep, (), lambda x: x[_T(ROWS)], lambda a: a[ROWS]),
    "getitem_mask": (_keep, (), lambda x: x[_T(np.array([True, False, True]))], lambda a: a[[0, 2]]),
    "masked_select": (_keep, (), lambda x: x.masked_select(_T(MASK)), lambda a: a[:, MASK].reshape(-1)),
    "masked_fill": (_keep, (), lambda x: x.masked_fill(_T(MASK), 1), lambda a: np.where(MASK, 1, a)),
    "masked_fill_float": (_keep, (), lambda x: x.masked_fill(_T(MASK), 1.5),
                          lambda a: np.where(MASK, np.array(1.5).astype(a.dtype), a)),
    "index_fill": (_keep, (), lambda x: x.index_fill(1, _T(ROWS), 1),
                   lambda a: np.where(np.isin(range(4), ROWS), 1, a)),
    "index_copy": (_keep, (), lambda x: x.index_copy(0, _T(ROWS), x[:2]), lambda a: a[[1, 1, 0]]),
    "index_put": (_keep, (), lambda x: x.index_put((_T(np.array([0, 2])),), x[1]), lambda a: a[[1, 1, 1]]),
    "where": (_keep, (), lambda x: tg.where(_T(MASK), x, x.flip(0)), lambda a: np.where(MASK, a, a[::-1])),
    "pad_constant": (_keep, (), lambda x: F.pad(x, (1, 2), value=1), lambda a: _np_pad(a, "constant", 1)),
    "pad_constant_float": (_keep, (), lambda x: F.pad(x, (1, 2), value=1.5),
                           lambda a: _np_pad(a, "constant", 1.5)),
    "pad_reflect": (_keep, NO_BOOL, lambda x: F.pad(x, (1, 2), mode="reflect"),
                    lambda a: _np_pad(a, "reflect")),
    "pad_replicate": (_keep, NO_BOOL, lambda x: F.pad(x, (1, 2), mode="replicate"),
                      lambda a: _np_pad(a, "replicate")),
    "pad_circular": (_keep, (), lambda x: F.pad(x, (1, 2), mode="circular"),
                     lambda a: _np_pad(a, "circular")),
    "roll": (_keep, (), lambda x: x.roll((1, -1), (0, 1)), lambda a: np.roll(a, (1, -1), (0, 1))),
    "flip": (_keep, (), lambda x: x.flip(0), lambda a: a[::-1]),
    "repeat": (_keep, (), lambda x: x.repeat(2, 1), lambda a: np.tile(a, (2, 1))),
    "tile": (_keep, (), lambda x: x.tile((1, 2)), lambda a: np.tile(a, (1, 2))),
    "repeat_interleave": (_keep, (), lambda x: x.repeat_interleave(2, 0), lambda a: np.repeat(a, 2, 0)),
    "cat": (_keep, (), lambda x: tg.cat([x, x.flip(1)], 1), lambda a: np.concatenate([a, a[:, ::-1]], 1)),
    "stack": (_keep, (), lambda x: tg.stack([x, x], 0), lambda a: np.stack([a, a])),
    "narrow": (_keep, (), lambda x: x.narrow(1, 1, 2), lambda a: a[:, 1:3]),
    "tril": (_keep, (), lambda x: x.tril(), lambda a: np.tril(a)),
    "triu": (_keep, (), lambda x: x.triu(1), lambda a: np.triu(a, 1)),
    "diagonal": (_keep, (), lambda x: x.diagonal(), lambda a: np.diagonal(a)),
    "diag_embed": (_keep, (), lambda x: x[0].diag_embed(), lambda a: np.diag(a[0])),
    "rot90": (_keep, (), lambda x: x.rot90(), lambda a: np.rot90(a)),
    "unbind": (_keep, (), lambda x: x.unbind(0)[1], lambda a: a[1]),
    "sort_values": (_keep, (), lambda x: x.sort(1)[0], lambda a: np.sort(a, 1)),
    "topk_values": (_keep, NO_BOOL, lambda x: x.topk(2, 1)[0],
                    lambda a: -np.sort(-a.astype(np.float64), 1)[:, :2]),
    "kthvalue": (_keep, NO_BOOL, lambda x: x.kthvalue(2, 1)[0], lambda a: np.sort(a, 1)[:, 1]),
    "mode": (_keep, (), lambda x: x[:, :1].repeat(1, 3).mode(1)[0], lambda a: a[:, 0]),
    "unique": (_keep, (), lambda x: x.unique(), lambda a: np.unique(a)),
    "nan_to_num": (_keep, (), lambda x: x.nan_to_num(), lambda a: a),
    "abs": (_keep, NO_BOOL, lambda x: x.abs(), lambda a: np.abs(a)),
    "neg": (_keep, NO_BOOL, lambda x: -x, lambda a: -a),
    "sign": (_keep, (), lambda x: x.sign(), lambda a: a if a.dtype == bool else np.sign(a)),
    "floor": (_keep, NO_BOOL, lambda x: x.floor(), lambda a: np.floor(a)),
    "round": (_keep, NO_BOOL, lambda x: x.round(), lambda a: np.round(a)),
    "bitwise_not": (_keep, FLOATS, lambda x: ~x, lambda a: ~a),
    "bitwise_and": (_keep, FLOATS, lambda x: x & x.flip(0), lambda a: a & a[::-1]),
    "add": (_keep, (), lambda x: x + x.flip(1), lambda a: a + a[:, ::-1]),
    "mul": (_keep, (), lambda x: x * x.flip(1), lambda a: a * a[:, ::-1]),
    "clamp_tensor": (_keep, (), lambda x: x.clamp(min=Tensor(1).cast(x.dtype)), lambda a: np.maximum(a, 1)),
    "sum": (_exact_accumulate, (), lambda x: x.sum(1), lambda a: a.astype(np.float64).sum(1)),
    "sum_all": (_exact_accumulate, (), lambda x: x.sum(), lambda a: a.astype(np.float64).sum()),
    "sum_keepdim": (_exact_accumulate, (), lambda x: x.sum(0, keepdim=True),
                    lambda a: a.astype(np.float64).sum(0, keepdims=True)),
    "nansum": (_exact_accumulate, (), lambda x: x.nansum(1), lambda a: a.astype(np.float64).sum(1)),
    "cumsum": (_exact_accumulate, (), lambda x: x.cumsum(1), lambda a: a.astype(np.float64).cumsum(1)),
    "prod": (_exact_accumulate, (), lambda x: x.prod(1), lambda a: a.astype(np.float64).prod(1)),
    "prod_all": (_exact_accumulate, (), lambda x: x[:, :2].prod(),
                 lambda a: a[:, :2].astype(np.float64).prod()),
    "cumprod": (_exact_accumulate, (), lambda x: x.cumprod(1), lambda a: a.astype(np.float64).cumprod(1)),
    "trace": (_exact_accumulate, NO_BOOL, lambda x: x.trace(), lambda a: np.trace(a.astype(np.float64))),
    "add_int": (_bool_with_int_scalar, (), lambda x: x + 1, lambda a: a.astype(np.float64) + 1),
    "mul_int": (_bool_with_int_scalar, (), lambda x: x * 2, lambda a: a.astype(np.float64) * 2),
    "square": (_bool_with_int_scalar, (), lambda x: x.square(), lambda a: a.astype(np.float64) ** 2),
    "pow_int": (_bool_with_int_scalar, (), lambda x: x ** 2, lambda a: a.astype(np.float64) ** 2),
    "clamp": (_bool_with_int_scalar, (), lambda x: x.clamp(1, 3), lambda a: _clip(a, 1, 3)),
    "clamp_min": (_bool_with_int_scalar, (), lambda x: x.clamp_min(1), lambda a: _clip(a, 1, None)),
    "clamp_max": (_bool_with_int_scalar, (), lambda x: x.clamp(max=2), lambda a: _clip(a, None, 2)),
    "where_int_scalar": (_bool_with_int_scalar, (), lambda x: tg.where(x > 0, x, 0),
                         lambda a: np.where(a > 0, a.astype(np.float64), 0)),
    "clamp_float": (_with_float_scalar, (), lambda x: x.clamp(-2.5, 3.5), lambda a: _clip(a, -2.5, 3.5)),
    "where_float_scalar": (_with_float_scalar, (), lambda x: tg.where(x > 0, x, 1.5),
                           lambda a: np.where(a > 0, a.astype(np.float64), 1.5)),
    "any": (_logical, (), lambda x: x.any(1), lambda a: a.any(1)),
    "all": (_logical, (), lambda x: x.all(0), lambda a: a.all(0)),
    "count_nonzero": (_index, (), lambda x: tg.count_nonzero(x), lambda a: np.count_nonzero(a)),
    "argsort": (_index, (), lambda x: (x * 0).argsort(1), lambda a: np.tile(np.arange(4), (3, 1))),
}


def _inputs(dt: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.integers(0 if dt in ("uint8", "bool") else -5, 2 if dt == "bool" else 6, size=(3, 4))
    if dt == "bool":
        return v.astype(bool)
    return v.astype(np.float32 if dt == "bfloat16" else dt)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_result_dtype_and_values(name: str, dt: str) -> None:
    rule, refused, tg_fn, np_fn = OPS[name]
    if dt in refused:       # torch raises for this dtype: no rule to hold tg to
        return
    a = _inputs(dt, seed=len(name) * 31 + DTYPES.index(dt))
    got = tg_fn(Tensor(a, dtype=dt))
    assert str(got.dtype) == f"dtypes.{rule(dt)}", f"{name}({dt}) gave {got.dtype}, torch gives {rule(dt)}"
    want = np.asarray(np_fn(a), dtype=np.float64)
    if rule(dt) == "bfloat16":
        want = bf16_round(want.astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(np.asarray(got.numpy(), dtype=np.float64), want)


def test_every_rule_names_a_torch_dtype_for_every_dtype() -> None:
    for name, (rule, refused, _, _) in OPS.items():
        for dt in DTYPES:
            assert dt in refused or rule(dt) in DTYPES, name
