"""Seeded random tensor programs, and a numpy float64 interpreter of them that also bounds the float32
rounding error of every value (the differential fuzzer's reference; tests/core/test_fuzz.py and
scripts/fuzz.py run the programs in tg and compare).

A program is a list of nodes in SSA form over float32 inputs (and int32 index inputs): elementwise
unary/binary ops (transcendental ones behind a squash that keeps them in their domain), comparisons and
where, reductions over dims with keepdim, movement (reshape, permute, expand, pad, strided and flipped
slices), integer-tensor indexing and gather reads, setitem writes into a copy, matmul and conv2d at odd
sizes, tg's fused Functions (linear, softmax, log_softmax, layer_norm, gelu), and in-place updates of a
value that earlier, still pending nodes read. The same structure seed with another shape seed gives the
same kind of program at other sizes; constants live in `Program.consts` and are drawn anew per run.

    >>> prog = generate(7, Config(nodes=6))
    >>> data = make_data(prog, np.random.default_rng(0))
    >>> ref = evaluate(prog, data)
    >>> len(ref.values) == len(prog.nodes)
    True

The reference runs every op in float64 and carries, per element, a first-order bound on how far a
float32 evaluation may be from it (each op adds a few units of float32 rounding of its result, plus its
inputs' bounds times its derivative; a sum adds n roundings of the sum of magnitudes). A comparison,
floor, argmax or kink whose margin is inside those bounds makes the data `unstable` (a near-tie): the
caller draws new data instead of comparing a coin flip.

Nothing here imports tg: the op table holds the tg call as a function of tg tensors (and `F` for the
functional API, passed in), so the generator and reference serve any frontend with tg's API.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

EPS = 2.0**-24  # float32 unit roundoff
DIMS = (1, 2, 3, 5, 7, 8, 13, 16, 17)
GEMM_DIMS = (31, 33, 64, 65, 97, 128, 129)


@dataclass(frozen=True)
class Config:
    """What a generated program may contain. `families` names the op groups (see FAMILIES); the
    defaults are what CI runs. A family a known, open bug makes fail is left out by a caller, never here."""

    nodes: int = 12
    families: tuple[str, ...] = (
        "unary",
        "binary",
        "compare",
        "reduce",
        "extreme",
        "argreduce",
        "movement",
        "index",
        "setitem",
        "matmul",
        "conv",
        "fused",
        "inplace",
    )
    gemm: bool = False  # matmul operands at sizes where the blocked GEMM nests run
    grad: bool = True  # programs have a scalar loss whose input gradients are checked
    inplace_in_grad: bool = False  # in-place updates (+=, -=, *=) also in programs with gradients
    inplace_reads_target: bool = True  # an in-place update's operand may itself read the target


@dataclass
class Node:
    op: str
    args: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] = ()
    kind: str = "f"  # "f" float32, "i" int (index results), "b" bool


@dataclass
class Program:
    """Node i defines value v_i; "input" nodes take the run's data in order (params: bound, for an int
    index input: values in [-bound, bound), or [0, -bound) when bound < 0)."""

    seed: int
    nodes: list[Node]
    consts: list[float]
    outputs: list[int]
    grad_inputs: list[int]

    @property
    def inputs(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op == "input"]

    def describe(self) -> str:
        """The program as readable lines: v3 = binary(v0, v2) {'f': 'mul'} -> (3, 5) f."""
        lines = [
            f"v{i} = {n.op}({', '.join(f'v{a}' for a in n.args)}) {n.params or ''} -> {n.shape} {n.kind}"
            for i, n in enumerate(self.nodes)
        ]
        lines.append(
            f"outputs {[f'v{o}' for o in self.outputs]}; gradients of "
            f"{[f'v{g}' for g in self.grad_inputs]}; consts {self.consts}"
        )
        return "\n".join(lines)


# ----------------------------------------------------------------------------- the op table
# Each op: how tg computes it (tg(args, params, consts, F)), how numpy computes it in float64 and
# bounds its float32 error (ref(vals, errs, params, consts, checker) -> (value, error bound)).


def _c(consts: list[float], p: dict) -> float:
    return consts[p["c"]]


def _unary(f: Callable, df: Callable, ulps: float = 2.0, absolute: Callable | None = None) -> Callable:
    def ref(vs, es, p, consts, chk):
        x, e = vs[0], es[0]
        out = f(x)
        bound = np.abs(df(x)) * e + ulps * EPS * np.abs(out)
        if absolute is not None:
            bound = bound + absolute(x)
        return out, bound

    return ref


def _kink(at: Callable[[np.ndarray], np.ndarray], f: Callable, df: Callable) -> Callable:
    """A continuous op with a kink (relu, abs): its gradient is only compared away from the kink."""

    def ref(vs, es, p, consts, chk):
        x, e = vs[0], es[0]
        chk.margin(np.abs(x - at(x)), 2 * e, grad_only=True)
        return f(x), np.abs(df(x)) * e + EPS * np.abs(f(x))

    return ref


def _step(f: Callable, boundary: Callable) -> Callable:
    """A piecewise-constant op (floor, round, sign): inputs near a step are unstable."""

    def ref(vs, es, p, consts, chk):
        x, e = vs[0], es[0]
        chk.margin(np.abs(x - boundary(x)), 2 * e + 1e-6 * np.abs(x) * (e > 0))
        return f(x), np.zeros_like(x)

    return ref


def _sig(x):
    # exp of minus |x| only: 0.5 * (1 + tanh(x / 2)) cancels to 0 below x = -38 in float64 (the fuzzer's
    # seeds 1033 and 1044 then wanted silu(-40) = -0.0, where tg gave the true -1.7e-16)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


UNARY: dict[str, tuple[Callable, Callable]] = {
    # name: (tg call, reference)
    "neg": (lambda x: -x, _unary(np.negative, lambda x: np.ones_like(x), 0)),
    "square": (lambda x: x * x, _unary(np.square, lambda x: 2 * x)),
    "tanh": (lambda x: x.tanh(), _unary(np.tanh, lambda x: 1 - np.tanh(x) ** 2, 4)),
    "sigmoid": (lambda x: x.sigmoid(), _unary(_sig, lambda x: _sig(x) * (1 - _sig(x)), 4)),
    "sin": (lambda x: x.sin(), _unary(np.sin, np.cos, 4, lambda x: 4 * EPS * (np.abs(x) + 1))),
    "cos": (lambda x: x.cos(), _unary(np.cos, lambda x: -np.sin(x), 4, lambda x: 4 * EPS * (np.abs(x) + 1))),
    "atan": (lambda x: x.atan(), _unary(np.arctan, lambda x: 1 / (1 + x * x), 4)),
    "erf": (
        lambda x: x.erf(),
        _unary(_erf, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x), 8, lambda x: 2 * EPS),
    ),
    "silu": (
        lambda x: x * x.sigmoid(),
        _unary(lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x))), 6),
    ),
    "relu": (
        lambda x: x.relu(),
        _kink(lambda x: np.zeros_like(x), lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(np.float64)),
    ),
    "abs": (lambda x: x.abs(), _kink(lambda x: np.zeros_like(x), np.abs, np.sign)),
    "floor": (lambda x: x.floor(), _step(np.floor, np.round)),
    "round": (lambda x: x.round(), _step(np.round, lambda x: np.floor(x) + 0.5)),
    "sign": (lambda x: x.sign(), _step(np.sign, np.zeros_like)),
}
# ops with a restricted domain, applied after a squash into it: name -> (tg, reference, squash)
DOMAIN: dict[str, tuple[Callable, Callable, str]] = {
    "exp": (lambda x: x.exp(), _unary(np.exp, np.exp, 4), "tanh3"),
    "log": (lambda x: x.log(), _unary(np.log, lambda x: 1 / x, 4, lambda x: 2 * EPS), "pos"),
    "sqrt": (lambda x: x.sqrt(), _unary(np.sqrt, lambda x: 0.5 / np.sqrt(x), 2), "pos"),
    "reciprocal": (lambda x: 1 / x, _unary(lambda x: 1 / x, lambda x: -1 / (x * x), 2), "pos"),
}
SQUASH: dict[str, tuple[Callable, Callable]] = {
    "tanh3": (
        lambda x: x.tanh() * 3,
        _unary(lambda x: 3 * np.tanh(x), lambda x: 3 * (1 - np.tanh(x) ** 2), 5),
    ),
    "pos": (lambda x: x.abs() + 0.5, _unary(lambda x: np.abs(x) + 0.5, np.sign, 2)),
}


def _bin(f: Callable, da: Callable, db: Callable, ulps: float = 1.0) -> Callable:
    def ref(vs, es, p, consts, chk):
        a, b = vs
        out = f(a, b)
        return out, np.abs(da(a, b)) * es[0] + np.abs(db(a, b)) * es[1] + ulps * EPS * np.abs(out)

    return ref


def _extreme(f: Callable, first: bool) -> Callable:
    def ref(vs, es, p, consts, chk):
        a, b = vs
        chk.margin(np.abs(a - b), 2 * (es[0] + es[1]), grad_only=True)
        return f(a, b), np.maximum(es[0], es[1])

    return ref


BINARY: dict[str, tuple[Callable, Callable]] = {
    "add": (lambda a, b: a + b, _bin(np.add, lambda a, b: 1.0, lambda a, b: 1.0)),
    "sub": (lambda a, b: a - b, _bin(np.subtract, lambda a, b: 1.0, lambda a, b: 1.0)),
    "mul": (lambda a, b: a * b, _bin(np.multiply, lambda a, b: b, lambda a, b: a)),
    "div": (
        lambda a, b: a / (b.abs() + 0.5),
        _bin(
            lambda a, b: a / (np.abs(b) + 0.5),
            lambda a, b: 1 / (np.abs(b) + 0.5),
            lambda a, b: a / (np.abs(b) + 0.5) ** 2,
            3,
        ),
    ),
    "maximum": (lambda a, b: a.maximum(b), _extreme(np.maximum, True)),
    "minimum": (lambda a, b: a.minimum(b), _extreme(np.minimum, True)),
}
COMPARE: dict[str, tuple[Callable, Callable]] = {
    "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater),
    "ge": (lambda a, b: a >= b, np.greater_equal),
}


class Checker:
    """Collects whether any discrete decision of the reference lies within the error bounds."""

    def __init__(self) -> None:
        self.unstable = False  # a value could come out differently in float32
        self.unstable_grad = False  # a gradient could (a kink within the bounds)
        self.node = 0  # the node being evaluated
        self.accept: dict[int, Callable[[np.ndarray], bool]] = {}  # tie-aware checks of int results

    def margin(self, gap: np.ndarray, bound: np.ndarray, grad_only: bool = False) -> None:
        """A decision is a near-tie where its gap is inside a nonzero error bound (exact values, bound 0,
        decide the same in float32: a pad's zeros, a relu's, an expanded copy)."""
        bound = np.asarray(bound)
        close = bool(np.any((np.asarray(gap) <= bound) & (bound > 0)))
        if grad_only:
            self.unstable_grad |= close
        else:
            self.unstable |= close


# ----------------------------------------------------------------------------- reference ops


def _ref_unary(vs, es, p, consts, chk):
    return UNARY[p["f"]][1](vs, es, p, consts, chk)


def _ref_domain(vs, es, p, consts, chk):
    v, e = SQUASH[DOMAIN[p["f"]][2]][1](vs, es, p, consts, chk)
    return DOMAIN[p["f"]][1]([v], [e], p, consts, chk)


def _ref_binary(vs, es, p, consts, chk):
    return BINARY[p["f"]][1](vs, es, p, consts, chk)


def _ref_const(vs, es, p, consts, chk):
    c = _c(consts, p)
    f = BINARY[p["f"]][1]
    return f([vs[0], np.full(vs[0].shape, c)], [es[0], np.full(vs[0].shape, EPS * abs(c))], p, consts, chk)


def _ref_where(vs, es, p, consts, chk):
    a, b, x, y = vs
    chk.margin(np.abs(a - b), 2 * (es[0] + es[1]) + 1e-6 * (np.abs(a) + np.abs(b)) * (es[0] + es[1] > 0))
    cond = COMPARE[p["f"]][1](a, b)
    return np.where(cond, x, y), np.where(cond, es[2], es[3])


def _ref_mask(vs, es, p, consts, chk):
    a, b, x = vs
    chk.margin(np.abs(a - b), 2 * (es[0] + es[1]) + 1e-6 * (np.abs(a) + np.abs(b)) * (es[0] + es[1] > 0))
    m = COMPARE[p["f"]][1](a, b)
    return x * m, es[2] * m


def _ref_sum(vs, es, p, consts, chk):
    x, e = vs[0], es[0]
    ax, keep = p["axis"], p["keepdim"]
    n = int(np.prod([x.shape[a] for a in ax])) if ax else 1
    out = x.sum(axis=ax, keepdims=keep)
    bound = e.sum(axis=ax, keepdims=keep) + (n + 1) * EPS * np.abs(x).sum(axis=ax, keepdims=keep)
    if p["mean"]:
        return out / n, bound / n + EPS * np.abs(out / n)
    return out, bound


def _ref_max(vs, es, p, consts, chk):
    x, e = vs[0], es[0]
    ax, keep = p["axis"], p["keepdim"]
    s = -x if p["min"] else x
    out = s.max(axis=ax, keepdims=True)
    emax = e.max(axis=ax, keepdims=True)
    # positions within the error bounds of the extreme: any may win in float32 (tie-aware argmax)
    near = s >= out - 4 * (e + emax) * (e + emax > 0)
    # the gradient goes to the extreme: it needs a clear winner
    chk.margin(np.array(np.any(near.sum(axis=ax) > 1)), np.array(1.0), grad_only=True)
    if p["arg"]:
        idx = s.argmax(axis=ax)

        def accept(got: np.ndarray) -> bool:
            picked = (np.expand_dims(got, ax) if not keep else got).astype(np.int64)
            if picked.min(initial=0) < 0 or picked.max(initial=0) >= x.shape[ax]:
                return False
            return bool(np.take_along_axis(near, picked, ax).all())

        chk.accept[chk.node] = accept
        idx = np.expand_dims(idx, ax) if keep else idx
        return idx.astype(np.float64), np.zeros(idx.shape)
    out = -out if p["min"] else out
    return (out if keep else out.squeeze(ax)), e.max(axis=ax, keepdims=keep)


def _ref_matmul(vs, es, p, consts, chk):
    a, b = vs
    out = a @ b
    k = a.shape[-1]
    bound = np.abs(a) @ es[1] + es[0] @ np.abs(b) + (k + 1) * EPS * (np.abs(a) @ np.abs(b))
    return out, bound


def _windows(x: np.ndarray, kh: int, kw: int, stride: int, pad: int) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * stride, s[3] * stride, s[2], s[3])
    )


def _ref_conv(vs, es, p, consts, chk):
    x, w = vs
    kh, kw = w.shape[2:]
    win, ewin = (_windows(v, kh, kw, p["stride"], p["pad"]) for v in (x, es[0]))
    out = np.einsum("ncijkl,ockl->noij", win, w)
    mag = np.einsum("ncijkl,ockl->noij", np.abs(win), np.abs(w))
    bound = (
        np.einsum("ncijkl,ockl->noij", ewin, np.abs(w))
        + np.einsum("ncijkl,ockl->noij", np.abs(win), es[1])
        + (w[0].size + 1) * EPS * mag
    )
    return out, bound


def _ref_move(vs, es, p, consts, chk):
    return _move(vs[0], p), _move(es[0], p)


def _move(x: np.ndarray, p: dict) -> np.ndarray:
    kind = p["kind"]
    if kind == "reshape":
        return x.reshape(p["shape"])
    if kind == "permute":
        return x.transpose(p["order"])
    if kind == "expand":
        return np.broadcast_to(np.expand_dims(x, p["dim"]), p["shape"])
    if kind == "pad":
        return np.pad(x, p["widths"])
    if kind == "slice":
        return x[tuple(slice(*s) for s in p["slices"])]
    return np.flip(x, p["dims"])


def _ref_index(vs, es, p, consts, chk):
    x, idx = vs[0], vs[1].astype(np.int64)
    if p["gather"]:
        return np.take_along_axis(x, idx, p["dim"]), np.take_along_axis(es[0], idx, p["dim"])
    sel = (slice(None),) * p["dim"] + (idx,)
    return x[sel], es[0][sel]


def _ref_setitem(vs, es, p, consts, chk):
    x, v = vs
    sel = tuple(slice(*s) for s in p["slices"])
    out, err = x.copy(), es[0].copy()
    out[sel], err[sel] = v, es[1]
    return out, err


def _ref_inplace(vs, es, p, consts, chk):
    return _ref_binary(vs, es, p, consts, chk)


def _ref_softmax(vs, es, p, consts, chk):
    x, e = vs[0], es[0]
    d, n = p["dim"], x.shape[p["dim"]]
    z = np.exp(x - x.max(axis=d, keepdims=True))
    out = z / z.sum(axis=d, keepdims=True)
    spread = 2 * e.max(axis=d, keepdims=True) + (n + 8) * EPS
    if p["log"]:
        lse = np.log(z.sum(axis=d, keepdims=True))
        val = x - x.max(axis=d, keepdims=True) - lse
        return val, e + spread + 4 * EPS * (np.abs(val) + np.abs(x))
    return out, out * spread


def _ref_layernorm(vs, es, p, consts, chk):
    x, e = vs[0], es[0]
    n = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    sd = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    out = (x - mu) / sd
    rel = (np.abs(x - mu).max(-1, keepdims=True) + np.abs(x).max(-1, keepdims=True)) / sd
    return out, 2 * (e + e.max(-1, keepdims=True)) / sd * (1 + np.abs(out)) + (n + 8) * EPS * rel * (
        1 + np.abs(out)
    )


def _ref_gelu(vs, es, p, consts, chk):
    x, e = vs[0], es[0]
    cdf = 0.5 * (1 + _erf(x / np.sqrt(2)))
    out = x * cdf
    d = cdf + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    return out, np.abs(d) * e + 8 * EPS * (np.abs(out) + np.abs(x))  # the cdf's absolute error, times x


def _ref_linear(vs, es, p, consts, chk):
    x, w = vs
    return _ref_matmul([x, w.T], [es[0], es[1].T], p, consts, chk)


REF: dict[str, Callable] = {
    "unary": _ref_unary,
    "domain": _ref_domain,
    "binary": _ref_binary,
    "const": _ref_const,
    "where": _ref_where,
    "mask": _ref_mask,
    "sum": _ref_sum,
    "max": _ref_max,
    "matmul": _ref_matmul,
    "conv": _ref_conv,
    "move": _ref_move,
    "index": _ref_index,
    "setitem": _ref_setitem,
    "inplace": _ref_inplace,
    "softmax": _ref_softmax,
    "layernorm": _ref_layernorm,
    "gelu": _ref_gelu,
    "linear": _ref_linear,
}


@dataclass
class Reference:
    values: list[np.ndarray]
    errors: list[np.ndarray]
    unstable: bool
    unstable_grad: bool
    accept: dict[int, Callable[[np.ndarray], bool]]


def evaluate(prog: Program, data: list[np.ndarray], consts: list[float] | None = None) -> Reference:
    """The program in float64 with error bounds; data are the inputs (float32 / int arrays)."""
    consts = prog.consts if consts is None else consts
    chk = Checker()
    vals: list[np.ndarray] = []
    errs: list[np.ndarray] = []
    feed = iter(data)
    with np.errstate(all="ignore"):
        for k, n in enumerate(prog.nodes):
            chk.node = k
            if n.op == "input":
                d = next(feed)
                vals.append(d.astype(np.float64))
                errs.append(np.zeros(d.shape))
                continue
            v, e = REF[n.op]([vals[a] for a in n.args], [errs[a] for a in n.args], n.params, consts, chk)
            vals.append(np.asarray(v, np.float64))
            errs.append(np.broadcast_to(np.asarray(e, np.float64), np.shape(v)))
    return Reference(vals, errs, chk.unstable, chk.unstable_grad, chk.accept)


def loss_value(
    prog: Program, data: list[np.ndarray], cotangents: list[np.ndarray], consts: list[float] | None = None
) -> float:
    """sum over outputs of (output * cotangent), in float64: the scalar whose gradient is compared."""
    ref = evaluate(prog, data, consts)
    return float(
        sum((ref.values[o] * c).sum() for o, c in zip(prog.outputs, cotangents) if prog.nodes[o].kind == "f")
    )


# ----------------------------------------------------------------------------- data


def make_data(prog: Program, rng: np.random.Generator) -> list[np.ndarray]:
    """Fresh inputs: standard normal float32, int32 indices in [-bound, bound) (gather: [0, bound))."""
    out = []
    for i in prog.inputs:
        n = prog.nodes[i]
        if n.kind == "f":
            out.append(rng.standard_normal(n.shape).astype(np.float32))
        else:
            bound = n.params["bound"]
            out.append(rng.integers(0 if bound < 0 else -bound, abs(bound), n.shape).astype(np.int32))
    return out


def make_consts(prog: Program, rng: np.random.Generator) -> list[float]:
    """New constants for the same program (rounded to float32, as tg holds them)."""
    return [float(np.float32(rng.uniform(-2, 2))) for _ in prog.consts]


# ----------------------------------------------------------------------------- generation


class _Gen:
    def __init__(self, seed: int, shape_seed: int, cfg: Config):
        self.rs = np.random.default_rng([seed, 0])  # structure
        self.rd = np.random.default_rng([seed, 1, shape_seed])  # sizes
        self.cfg = cfg
        self.prog = Program(seed, [], [], [], [])
        self.shapes: list[tuple[int, ...]] = []
        self.kinds: list[str] = []
        self.dead: set[int] = set()  # values written in place: later nodes read the new one

    def dim(self) -> int:
        return int(self.rd.choice(DIMS))

    def add_input(self, shape: tuple[int, ...], kind: str = "f", bound: int = 0) -> int:
        return (
            self.add("input", (), shape, kind, bound=bound) if kind == "i" else self.add("input", (), shape)
        )

    def add(
        self, op: str, args: tuple[int, ...], out_shape: tuple[int, ...], out_kind: str = "f", **params: Any
    ) -> int:
        self.prog.nodes.append(Node(op, args, params, tuple(out_shape), out_kind))
        self.shapes.append(tuple(out_shape))
        self.kinds.append(out_kind)
        return len(self.shapes) - 1

    def const(self) -> int:
        self.prog.consts.append(float(np.float32(self.rs.uniform(-2, 2))))
        return len(self.prog.consts) - 1

    def pick(self, kind: str = "f", min_ndim: int = 0) -> int | None:
        live = [
            i
            for i, (k, s) in enumerate(zip(self.kinds, self.shapes))
            if k == kind and i not in self.dead and len(s) >= min_ndim and 0 not in s
        ]
        if not live:
            return None
        recent = live[-4:]  # prefer recent values: deeper chains
        return int(self.rs.choice(recent if self.rs.random() < 0.7 else live))

    def random_shape(self, ndim: int | None = None) -> tuple[int, ...]:
        ndim = int(self.rs.integers(1, 4)) if ndim is None else ndim
        return tuple(self.dim() for _ in range(ndim))

    def partner(self, a: int) -> int:
        """A value broadcastable with v_a: same shape, or one with some dims 1 (a fresh input)."""
        shape = self.shapes[a]
        same = [
            i
            for i, s in enumerate(self.shapes)
            if s == shape and self.kinds[i] == "f" and i != a and i not in self.dead
        ]
        if same and self.rs.random() < 0.6:
            return int(self.rs.choice(same))
        drop = self.rs.random(len(shape)) < 0.4
        return self.add_input(tuple(1 if d else s for d, s in zip(drop, shape)))


def _g_unary(g: _Gen) -> None:
    a = g.pick()
    if a is None:
        return
    if g.rs.random() < 0.3:
        g.add("domain", (a,), g.shapes[a], f=str(g.rs.choice(list(DOMAIN))))
    else:
        g.add("unary", (a,), g.shapes[a], f=str(g.rs.choice(list(UNARY))))


def _g_binary(g: _Gen) -> None:
    a = g.pick()
    if a is None:
        return
    f = str(g.rs.choice(list(BINARY)))
    if g.rs.random() < 0.3:
        g.add("const", (a,), g.shapes[a], f=f, c=g.const())
        return
    b = g.partner(a)
    shape = np.broadcast_shapes(g.shapes[a], g.shapes[b])
    args = (a, b) if g.rs.random() < 0.5 else (b, a)
    g.add("binary", args, shape, f=f)


def _g_compare(g: _Gen) -> None:
    a = g.pick()
    if a is None:
        return
    b, x = g.partner(a), g.partner(a)
    f = str(g.rs.choice(list(COMPARE)))
    if g.rs.random() < 0.5:
        y = g.partner(a)
        shape = np.broadcast_shapes(*(g.shapes[i] for i in (a, b, x, y)))
        g.add("where", (a, b, x, y), shape, f=f)
    else:
        g.add("mask", (a, b, x), np.broadcast_shapes(*(g.shapes[i] for i in (a, b, x))), f=f)


def _axes(g: _Gen, ndim: int) -> tuple[int, ...]:
    k = int(g.rs.integers(1, ndim + 1))
    return tuple(sorted(int(d) for d in g.rs.choice(ndim, k, replace=False)))


def _reduced(shape: tuple[int, ...], axis: tuple[int, ...], keep: bool) -> tuple[int, ...]:
    return tuple(1 if i in axis else s for i, s in enumerate(shape) if keep or i not in axis)


def _g_reduce(g: _Gen) -> None:
    a = g.pick(min_ndim=1)
    if a is None:
        return
    shape = g.shapes[a]
    keep = bool(g.rs.random() < 0.5)
    axis = _axes(g, len(shape))
    g.add("sum", (a,), _reduced(shape, axis, keep), axis=axis, keepdim=keep, mean=bool(g.rs.random() < 0.4))


def _g_extreme(g: _Gen) -> None:
    _add_max(g, arg=False)


def _g_argreduce(g: _Gen) -> None:
    # an index result ("i"): an output checked tie-aware, read by no later node
    _add_max(g, arg=True)


def _add_max(g: _Gen, arg: bool) -> None:
    """max/min over one axis: its values, or (arg) its indices."""
    a = g.pick(min_ndim=1)
    if a is None:
        return
    shape, keep = g.shapes[a], bool(g.rs.random() < 0.5)
    ax = int(g.rs.integers(len(shape)))
    g.add("max", (a,), _reduced(shape, (ax,), keep), *(("i",) if arg else ()), axis=ax, keepdim=keep,
          min=bool(g.rs.random() < 0.5), arg=arg)


def _factor(g: _Gen, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Another shape with the same number of elements."""
    n = int(np.prod(shape))
    out = []
    while n > 1 and len(out) < 3:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = int(g.rs.choice(divisors))
        out.append(d)
        n //= d
    if n > 1:
        out[-1] *= n
    g.rs.shuffle(out)
    return tuple(out) if out else (1,)


def _slices(g: _Gen, shape: tuple[int, ...]) -> list[tuple[int | None, int | None, int]]:
    out: list[tuple[int | None, int | None, int]] = []
    for s in shape:
        step = int(g.rs.choice([1, 1, 2, 3, -1, -2]))
        lo, hi = sorted(int(v) for v in g.rd.integers(0, s + 1, 2))
        if hi == lo:
            lo, hi = 0, s
        out.append((lo, hi, step) if step > 0 else (hi - 1, (lo - 1 if lo > 0 else None), step))
    return out


def _move_params(g: _Gen, shape: tuple[int, ...]) -> dict[str, Any]:
    kind = str(g.rs.choice(["reshape", "permute", "expand", "pad", "slice", "flip"]))
    nd = len(shape)
    if kind == "reshape":
        return {"kind": kind, "shape": _factor(g, shape)}
    if kind == "permute":
        return {"kind": kind, "order": tuple(int(i) for i in g.rs.permutation(nd))}
    if kind == "expand":
        dim = int(g.rs.integers(nd + 1))
        return {"kind": kind, "dim": dim, "shape": shape[:dim] + (int(g.rd.choice([2, 3, 5])),) + shape[dim:]}
    if kind == "pad":
        return {
            "kind": kind,
            "widths": tuple((int(g.rd.integers(0, 3)), int(g.rd.integers(0, 3))) for _ in shape),
        }
    if kind == "slice":
        return {"kind": kind, "slices": _slices(g, shape)}
    return {
        "kind": kind,
        "dims": tuple(sorted(int(d) for d in g.rs.choice(nd, int(g.rs.integers(1, nd + 1)), replace=False))),
    }


def _g_movement(g: _Gen) -> None:
    a = g.pick(min_ndim=1)
    if a is None:
        return
    p = _move_params(g, g.shapes[a])
    g.add("move", (a,), _move(np.zeros(g.shapes[a]), p).shape, **p)


def _g_index(g: _Gen) -> None:
    a = g.pick(min_ndim=1)
    if a is None:
        return
    shape = g.shapes[a]
    dim = int(g.rs.integers(len(shape)))
    if g.rs.random() < 0.5:
        ishape = shape[:dim] + (int(g.rd.choice([1, 2, 5])),) + shape[dim + 1 :]
        idx = g.add_input(ishape, "i", -shape[dim])
        g.add("index", (a, idx), ishape, dim=dim, gather=True)
    else:
        ishape = (int(g.rd.choice([1, 3, 4])),)
        idx = g.add_input(ishape, "i", shape[dim])
        g.add("index", (a, idx), shape[:dim] + ishape + shape[dim + 1 :], dim=dim, gather=False)


def _g_setitem(g: _Gen) -> None:
    if g.cfg.grad:      # setitem into a tensor that requires grad raises (issue 34 item 4's other choice)
        return
    a = g.pick(min_ndim=1)
    if a is None:
        return
    shape = g.shapes[a]
    slices = [s if s[2] > 0 else (0, None, 1) for s in _slices(g, shape)]
    target = np.zeros(shape)[tuple(slice(*s) for s in slices)].shape
    v = g.add_input(target)
    g.add("setitem", (a, v), shape, slices=slices)


def _g_matmul(g: _Gen) -> None:
    dims = GEMM_DIMS if g.cfg.gemm else DIMS
    a = g.pick(min_ndim=2) if g.rs.random() < 0.5 and not g.cfg.gemm else None
    if a is None:
        m, k = int(g.rd.choice(dims)), int(g.rd.choice(dims))
        batch = (int(g.rd.choice([2, 3])),) if g.rs.random() < 0.3 else ()
        a = g.add_input(batch + (m, k))
    shape = g.shapes[a]
    n = int(g.rd.choice(dims))
    if g.rs.random() < 0.3:
        g.add("linear", (a, g.add_input((n, shape[-1]))), shape[:-1] + (n,))
        return
    g.add("matmul", (a, g.add_input((shape[-1], n))), shape[:-1] + (n,))


def _g_conv(g: _Gen) -> None:
    n, c, o = int(g.rd.choice([1, 2])), int(g.rd.choice([1, 3, 4])), int(g.rd.choice([1, 2, 5]))
    k, stride, pad = int(g.rs.choice([1, 2, 3])), int(g.rs.choice([1, 2])), int(g.rs.choice([0, 1]))
    h, w = int(g.rd.choice([k + 2, 7, 9])), int(g.rd.choice([k + 1, 8, 11]))
    x = g.add_input((n, c, h, w))
    wt = g.add_input((o, c, k, k))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    g.add("conv", (x, wt), (n, o, oh, ow), stride=stride, pad=pad)


def _g_fused(g: _Gen) -> None:
    a = g.pick(min_ndim=1)
    if a is None:
        return
    shape = g.shapes[a]
    choice = str(g.rs.choice(["softmax", "log_softmax", "layernorm", "gelu"]))
    if choice == "gelu":
        g.add("gelu", (a,), shape)
    elif choice == "layernorm":
        g.add("layernorm", (a,), shape)
    else:
        g.add("softmax", (a,), shape, dim=int(g.rs.integers(len(shape))), log=choice == "log_softmax")


def _g_inplace(g: _Gen) -> None:
    """v_new = v_a (op)= v_b in place: nodes built earlier that read v_a (still pending) keep the old
    values; v_a itself is dead afterwards (tg's tensor now holds the new values)."""
    if g.cfg.grad and not g.cfg.inplace_in_grad:
        return
    a = g.pick()
    # a view (or an input) written in place would write its base too: torch's aliasing, not SSA
    viewed = {n.args[0] for n in g.prog.nodes if n.op == "move"}
    if a is None or g.prog.nodes[a].op in ("input", "move") or a in viewed:
        return
    b = g.partner(a)
    if np.broadcast_shapes(g.shapes[a], g.shapes[b]) != g.shapes[a]:
        return
    if not g.cfg.inplace_reads_target and a in _ancestors(g.prog, b):
        return
    g.add("inplace", (a, b), g.shapes[a], f=str(g.rs.choice(["add", "sub", "mul"])))
    g.dead.add(a)


def _ancestors(prog: Program, v: int) -> set[int]:
    seen, todo = set(), [v]
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(prog.nodes[i].args)
    return seen


FAMILIES: dict[str, Callable[[_Gen], None]] = {
    "unary": _g_unary,
    "binary": _g_binary,
    "compare": _g_compare,
    "reduce": _g_reduce,
    "extreme": _g_extreme,
    "argreduce": _g_argreduce,
    "movement": _g_movement,
    "index": _g_index,
    "setitem": _g_setitem,
    "matmul": _g_matmul,
    "conv": _g_conv,
    "fused": _g_fused,
    "inplace": _g_inplace,
}
WEIGHTS = {
    "unary": 3,
    "binary": 3,
    "compare": 1,
    "reduce": 1.5,
    "extreme": 1,
    "argreduce": 1,
    "movement": 3,
    "index": 1,
    "setitem": 1,
    "matmul": 1,
    "conv": 0.5,
    "fused": 1,
    "inplace": 1,
}


def generate(seed: int, cfg: Config = Config(), shape_seed: int = 0) -> Program:
    """A program of about cfg.nodes nodes from the structure seed (shape_seed varies its sizes)."""
    g = _Gen(seed, shape_seed, cfg)
    g.add_input(g.random_shape())
    fams = [f for f in cfg.families if f in FAMILIES]
    w = np.array([WEIGHTS[f] for f in fams], np.float64)
    for _ in range(cfg.nodes):
        FAMILIES[str(g.rs.choice(fams, p=w / w.sum()))](g)
    _finish(g)
    return g.prog


def _finish(g: _Gen) -> None:
    """Outputs: the float values no later node reads (the last 6), else the last one; gradients are
    taken w.r.t. every float input."""
    prog = g.prog
    read = {a for n in prog.nodes for a in n.args}
    floats = [
        i
        for i, k in enumerate(g.kinds)
        if i not in g.dead and 0 not in g.shapes[i] and (k == "f" or prog.nodes[i].op == "max")
    ]
    leaves = [i for i in floats if i not in read and prog.nodes[i].op != "input"]
    prog.outputs = (leaves or floats[-1:])[-6:]
    prog.grad_inputs = [i for i in prog.inputs if prog.nodes[i].kind == "f"] if g.cfg.grad else []


# ----------------------------------------------------------------------------- running in tg
# op -> tg call (argument tensors, params, consts, tg.nn.functional)


def _tg_max(xs, p, consts, F):
    x = -xs[0] if p["min"] else xs[0]
    if p["arg"]:
        return x.argmax(p["axis"], keepdim=p["keepdim"])
    out = x.max(p["axis"], keepdim=p["keepdim"]).values
    return -out if p["min"] else out


def _tg_move(xs, p, consts, F):
    x, kind = xs[0], p["kind"]
    if kind == "reshape":
        return x.reshape(p["shape"])
    if kind == "permute":
        return x.permute(p["order"])
    if kind == "expand":
        return x.unsqueeze(p["dim"]).expand(p["shape"])
    if kind == "pad":
        return x.pad(p["widths"])
    if kind == "slice":
        return x[tuple(slice(*s) for s in p["slices"])]
    return x.flip(p["dims"])


def _tg_index(xs, p, consts, F):
    x, idx = xs
    if p["gather"]:
        return x.gather(p["dim"], idx)
    return x[(slice(None),) * p["dim"] + (idx,)]


def _tg_setitem(xs, p, consts, F):
    out = xs[0] * 1.0  # a fresh tensor to write into (setitem into a computed value)
    out[tuple(slice(*s) for s in p["slices"])] = xs[1]
    return out


def _tg_inplace(xs, p, consts, F):
    a, b = xs
    if p["f"] == "add":
        a += b
    elif p["f"] == "sub":
        a -= b
    else:
        a *= b
    return a


def _tg_softmax(xs, p, consts, F):
    return F.log_softmax(xs[0], p["dim"]) if p["log"] else F.softmax(xs[0], p["dim"])


def _tg_const(xs, p, consts, F):
    c = consts[p["c"]]
    return BINARY[p["f"]][0](xs[0], c) if p["f"] != "div" else xs[0] / (abs(c) + 0.5)


TG: dict[str, Callable] = {
    "unary": lambda xs, p, c, F: UNARY[p["f"]][0](xs[0]),
    "domain": lambda xs, p, c, F: DOMAIN[p["f"]][0](SQUASH[DOMAIN[p["f"]][2]][0](xs[0])),
    "binary": lambda xs, p, c, F: BINARY[p["f"]][0](xs[0], xs[1]),
    "const": _tg_const,
    "where": lambda xs, p, c, F: COMPARE[p["f"]][0](xs[0], xs[1]).where(xs[2], xs[3]),
    "mask": lambda xs, p, c, F: xs[2] * COMPARE[p["f"]][0](xs[0], xs[1]),
    "sum": lambda xs, p, c, F: (xs[0].mean if p["mean"] else xs[0].sum)(p["axis"], keepdim=p["keepdim"]),
    "max": _tg_max,
    "matmul": lambda xs, p, c, F: xs[0] @ xs[1],
    "linear": lambda xs, p, c, F: F.linear(xs[0], xs[1]),
    "conv": lambda xs, p, c, F: F.conv2d(xs[0], xs[1], stride=p["stride"], padding=p["pad"]),
    "move": _tg_move,
    "index": _tg_index,
    "setitem": _tg_setitem,
    "inplace": _tg_inplace,
    "softmax": _tg_softmax,
    "layernorm": lambda xs, p, c, F: F.layer_norm(xs[0], xs[0].shape[-1:]),
    "gelu": lambda xs, p, c, F: F.gelu(xs[0]),
}


def run_tg(prog: Program, inputs: list[Any], consts: list[float] | None = None) -> list[Any]:
    """The program on tg tensors (inputs in order); returns the output tensors (unrealized)."""
    import tg.nn.functional as F

    consts = prog.consts if consts is None else consts
    vals: list[Any] = []
    feed = iter(inputs)
    for n in prog.nodes:
        if n.op == "input":
            vals.append(next(feed))
        else:
            vals.append(TG[n.op]([vals[a] for a in n.args], n.params, consts, F))
    return [vals[o] for o in prog.outputs]


# ----------------------------------------------------------------------------- comparing


@dataclass
class Draw:
    """Inputs, constants and the reference for one run of a program."""

    data: list[np.ndarray]
    consts: list[float]
    ref: Reference
    check_grad: bool


def draw(prog: Program, rng: np.random.Generator, new_consts: bool = False, tries: int = 12) -> Draw | None:
    """Data (and constants) on which no decision of the program is a near-tie; None if every try had one.
    Gradients are compared only where no kink is near either."""
    for _ in range(tries):
        data = make_data(prog, rng)
        consts = make_consts(prog, rng) if new_consts else prog.consts
        ref = evaluate(prog, data, consts)
        finite = all(np.isfinite(ref.values[o]).all() for o in prog.outputs)
        if not ref.unstable and finite:
            return Draw(data, consts, ref, not ref.unstable_grad)
    return None


def value_errors(prog: Program, d: Draw, got: list[np.ndarray], where: str) -> list[str]:
    """Each output within 8x its float32 error bound of the float64 reference (and the same shape)."""
    out = []
    for o, g in zip(prog.outputs, got):
        want, bound = d.ref.values[o], d.ref.errors[o]
        if g.shape != want.shape:
            out.append(f"{where}: v{o} shape {g.shape}, expected {want.shape}")
            continue
        if o in d.ref.accept:
            if not d.ref.accept[o](g):
                out.append(
                    f"{where}: v{o} = {g.tolist()} picks no extreme (expected {want.tolist()}, or a tie)"
                )
            continue
        tol = 8 * bound + 1e-6 * np.abs(want) + 1e-30
        bad = ~(np.abs(g.astype(np.float64) - want) <= tol)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            out.append(
                f"{where}: v{o} flat[{j}] = {g.reshape(-1)[j]!r}, expected {want.reshape(-1)[j]!r} "
                f"(bound {tol.reshape(-1)[j]:.3g}); {int(bad.sum())} of {bad.size} elements off"
            )
    return out


def cotangents(prog: Program, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(prog.nodes[o].shape) for o in prog.outputs]


def directional(prog: Program, d: Draw, cots: list[np.ndarray], dirs: list[np.ndarray]) -> float | None:
    """<grad of sum(out * cot), dirs> by central differences in float64; None when two step sizes
    disagree (a kink or step inside the difference)."""
    pos = {i: k for k, i in enumerate(prog.inputs)}
    est = []
    for h in (1e-5, 1e-6):
        plus = list(d.data)
        minus = list(d.data)
        for gi, v in zip(prog.grad_inputs, dirs):
            plus[pos[gi]] = d.data[pos[gi]] + h * v
            minus[pos[gi]] = d.data[pos[gi]] - h * v
        est.append(
            (loss_value(prog, plus, cots, d.consts) - loss_value(prog, minus, cots, d.consts)) / (2 * h)
        )
    scale = abs(est[0]) + 1e-6
    return est[0] if abs(est[0] - est[1]) <= 1e-4 * scale else None


def grad_errors(
    prog: Program,
    d: Draw,
    grads: list[np.ndarray | None],
    cots: list[np.ndarray],
    dirs: list[np.ndarray],
    where: str,
) -> list[str]:
    """tg's input gradients against the central difference along a random direction."""
    want = directional(prog, d, cots, dirs)
    if want is None:
        return []
    g = [np.zeros(v.shape) if x is None else x.astype(np.float64) for x, v in zip(grads, dirs)]
    got = float(sum((x * v).sum() for x, v in zip(g, dirs)))
    scale = float(sum(np.abs(x * v).sum() for x, v in zip(g, dirs))) + abs(want)
    if not abs(got - want) <= 2e-3 * scale + 1e-6:
        return [f"{where}: gradient along a random direction {got!r}, central difference {want!r}"]
    return []


# ----------------------------------------------------------------------------- checking a program in tg


def _tg_inputs(prog: Program, d: Draw, grad: bool) -> list[Any]:
    from tg import Tensor

    return [Tensor(x, requires_grad=grad and prog.nodes[i].kind == "f") for i, x in zip(prog.inputs, d.data)]


def _loss(outs: list[Any], cots: list[np.ndarray]) -> Any:
    from tg import Tensor

    return sum((o * Tensor(c.astype(np.float32))).sum() for o, c in zip(outs, cots) if o.dtype.is_float)


def _grads(prog: Program, ts: list[Any], outs: list[Any], cots: list[np.ndarray]) -> list[Any]:
    """The loss's gradients w.r.t. the float inputs, as tensors (zeros where none flows)."""
    loss = _loss(outs, cots)
    wanted = [t for t, i in zip(ts, prog.inputs) if i in prog.grad_inputs]
    if getattr(loss, "requires_grad", False):
        loss.backward()
    return [t.grad if t.grad is not None else t.detach() * 0 for t in wanted]


def _eager(prog: Program, d: Draw, rng: np.random.Generator, where: str) -> list[str]:
    grad = bool(prog.grad_inputs) and d.check_grad
    ts = _tg_inputs(prog, d, grad)
    outs = run_tg(prog, ts, d.consts)
    errors = value_errors(prog, d, [o.numpy() for o in outs], where)
    if grad and not errors:
        cots = cotangents(prog, rng)
        dirs = [rng.standard_normal(prog.nodes[i].shape) for i in prog.grad_inputs]
        grads = [g.numpy() for g in _grads(prog, ts, outs, cots)]
        errors += grad_errors(prog, d, grads, cots, dirs, where + " backward")
    return errors


def _jitted(prog: Program, rng: np.random.Generator, calls: int = 4) -> list[str]:
    """The program (and its gradients) under TinyJit: eager call, capture, replays, each with new data."""
    from tg import TinyJit

    cots = cotangents(prog, rng)

    def step(*ts: Any) -> list[Any]:
        outs = run_tg(prog, list(ts))
        grads = _grads(prog, list(ts), outs, cots) if prog.grad_inputs else []
        # fresh tensors, never an input (an output may be a view of one)
        return [o * 1.0 if o.dtype.is_float else o + 0 for o in outs] + [g * 1.0 for g in grads]

    jf = TinyJit(step)
    errors: list[str] = []
    for call in range(calls):
        d = draw(prog, rng)
        if d is None:
            continue
        res = jf(*_tg_inputs(prog, d, bool(prog.grad_inputs)))
        where = f"TinyJit call {call}"
        k = len(prog.outputs)
        errors += value_errors(prog, d, [r.numpy() for r in res[:k]], where)
        if prog.grad_inputs and d.check_grad and not errors:
            dirs = [rng.standard_normal(prog.nodes[i].shape) for i in prog.grad_inputs]
            errors += grad_errors(prog, d, [r.numpy() for r in res[k:]], cots, dirs, where + " backward")
    return errors


def _guarded(where: str, fn: Callable[[], list[str]]) -> list[str]:
    try:
        return fn()
    except Exception as e:  # a crash is a finding like a wrong value
        return [f"{where}: raised {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"]


MODES = ("eager", "new constants", "new shapes", "jit")


def check(seed: int, cfg: Config = Config(), modes: tuple[str, ...] = MODES) -> list[str]:
    """Every disagreement of tg with the reference on program `seed`: eager, again with new data and
    constants (the schedule kept for the structure), at other sizes, and under TinyJit."""
    return check_program(generate(seed, cfg), modes, generate(seed, cfg, shape_seed=1))


def check_program(prog: Program, modes: tuple[str, ...] = MODES, resized: Program | None = None) -> list[str]:
    """check() of a given program (resized: the same structure at other sizes, for "new shapes")."""
    rng = np.random.default_rng([prog.seed, 7])
    errors: list[str] = []
    for mode in modes:
        if mode == "jit":
            errors += _guarded(mode, lambda: _jitted(prog, rng))
            continue
        p = resized if mode == "new shapes" else prog
        d = draw(p, rng, new_consts=mode != "eager") if p is not None else None
        if p is not None and d is not None:
            errors += _guarded(mode, lambda: _eager(p, d, rng, mode))  # noqa: B023 - called at once
    return errors


def minimize(prog: Program, modes: tuple[str, ...] = MODES) -> Program | None:
    """The smallest slice of prog (one output and what it depends on) that still fails, or None."""
    for last in range(len(prog.nodes)):
        if prog.nodes[last].op == "input":
            continue
        small = sliced(prog, last)
        if check_program(small, modes):
            return small
    return None


def sliced(prog: Program, last: int) -> Program:
    """The part of prog that v_last depends on, with v_last the only output (for minimizing a failure)."""
    keep = {last}
    for i in range(last, -1, -1):
        if i in keep:
            keep.update(prog.nodes[i].args)
    order = sorted(keep)
    new_id = {old: k for k, old in enumerate(order)}
    nodes = [
        Node(n.op, tuple(new_id[a] for a in n.args), n.params, n.shape, n.kind)
        for n in (prog.nodes[i] for i in order)
    ]
    grads = [new_id[g] for g in prog.grad_inputs if g in keep]
    return Program(prog.seed, nodes, prog.consts, [new_id[last]], grads)
