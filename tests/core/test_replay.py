"""realize.replayed: a computation's schedule recorded once and rerun on new inputs without building
its graph. Generated over builders (elementwise, reductions, assigns into new memory, a recurrence,
outputs that are views or inputs), kinds of input (own memory, views into a larger buffer, one buffer
passed twice, unrealized, constants) and devices: every call, recorded or replayed, gives exactly
what realizing the same graph gives, a replay builds no graph and no schedule, and each call's
outputs are memory of their own."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import gpu_support

from tg.core import capture
from tg.core import realize as R
from tg.core.device import GlobalCounters
from tg.core.dtype import dtypes
from tg.core.lazy import LazyBuffer
from tg.core.ops import BinaryOps, CompositeOps, ReduceOps, UnaryOps

SHAPE = (3, 5)


def _ew(a: LazyBuffer, b: LazyBuffer) -> list[LazyBuffer]:
    s = a.e(CompositeOps.SIGMOID).e(BinaryOps.MUL, b)
    return [s, a.e(BinaryOps.ADD, b.e(UnaryOps.NEG)).r(ReduceOps.SUM, (1,))]


def _views(a: LazyBuffer, b: LazyBuffer) -> list[LazyBuffer]:
    both = a.e(BinaryOps.MAX, b)
    return [both.permute((1, 0)), both.shrink(((1, 3), (0, 5))), b.pad(((1, 0), (0, 2)))]


def _stored(a: LazyBuffer, b: LazyBuffer) -> list[LazyBuffer]:
    kept = LazyBuffer.empty(a.shape, a.dtype, a.device).assign(a.e(BinaryOps.MUL, b))
    return [kept.e(CompositeOps.TANH), kept.e(BinaryOps.ADD, a), kept]


def _inputs_back(a: LazyBuffer, b: LazyBuffer) -> list[LazyBuffer]:
    return [b, a.e(BinaryOps.MUL, a)]


def _recurrence(a: LazyBuffer, b: LazyBuffer) -> list[LazyBuffer]:
    """h_t = tanh(h_{t-1} * b_t + a_t) over the rows, each h stored, as an LSTM layer's steps."""
    rows, cols = a.shape
    h = LazyBuffer.const(0.5, a.dtype, a.device, (1, cols))
    hs = []
    for t in range(rows):
        rb, ra = (x.shrink(((t, t + 1), (0, cols))) for x in (b, a))
        h = h.e(BinaryOps.MUL, rb).e(BinaryOps.ADD, ra).e(CompositeOps.TANH)
        h = LazyBuffer.empty(h.shape, h.dtype, h.device).assign(h)
        hs.append(h)
    return [h, hs[0].e(BinaryOps.ADD, hs[-1]).r(ReduceOps.SUM, (1,))]


BUILDERS = {"ew": _ew, "views": _views, "stored": _stored, "inputs_back": _inputs_back,
            "recurrence": _recurrence}


def _inputs(kind: str, rng: np.random.Generator, device: str) -> list[LazyBuffer]:
    own = lambda: R.from_numpy(rng.normal(size=SHAPE).astype(np.float32), dtypes.float32, device)  # noqa: E731
    if kind == "own":
        return [own(), own()]
    if kind == "views":       # rows 2..4 and a transposed block of larger buffers
        big = R.from_numpy(rng.normal(size=(6, 5)).astype(np.float32), dtypes.float32, device)
        wide = R.from_numpy(rng.normal(size=(5, 4)).astype(np.float32), dtypes.float32, device)
        return [big.shrink(((2, 5), (0, 5))), wide.permute((1, 0)).shrink(((1, 4), (0, 5)))]
    if kind == "shared":      # one buffer passed twice
        a = own()
        return [a, a]
    if kind == "lazy":        # not realized yet
        return [own().e(BinaryOps.ADD, own()), own()]
    assert kind == "const"
    return [own(), LazyBuffer.const(1.5, dtypes.float32, device, SHAPE)]


def _values(outs: list[LazyBuffer]) -> list[np.ndarray]:
    return [R.to_numpy(o).copy() for o in outs]


@pytest.mark.parametrize("device", ["CPU", "NUMPY", "CL"])
@pytest.mark.parametrize("kind", ["own", "views", "shared", "lazy", "const"])
@pytest.mark.parametrize("name", list(BUILDERS))
def test_replay_gives_what_realize_gives(name, kind, device):
    if device == "CL" and (reason := gpu_support("CL")) is not None:
        pytest.skip(f"CL is not available here: {reason}")
    rng = np.random.default_rng(abs(hash((name, kind, device))) % 2**32)
    build = BUILDERS[name]
    calls = []

    def counted(*xs):
        calls.append(1)
        return build(*xs)
    tag = ("test_replay", name, kind, device)
    R._REPLAYS.pop(next((k for k in R._REPLAYS if k[0] == tag), None), None)
    kept = []
    for round_ in range(3):
        ins = _inputs(kind, rng, device)
        built = GlobalCounters.schedules_built
        got = R.replayed(tag, ins, counted)
        assert all(o.is_base and o.realized is not None for o in got)
        if round_ and not capture.watching():     # (the CUDA suite's watcher sees every graph)
            assert len(calls) == 1 and GlobalCounters.schedules_built == built, "a replay built a graph"
        want = _values(build(*ins))
        values = _values(got)
        assert [v.shape for v in values] == [w.shape for w in want]
        for v, w in zip(values, want):
            np.testing.assert_array_equal(v, w)
        kept.append((got, values))
    for got, values in kept:    # every call's outputs are memory of their own
        for v, o in zip(values, _values(got)):
            np.testing.assert_array_equal(v, o)
    memory = [id(o.realized) for got, _ in kept for o in got]
    assert len(set(memory)) == len(memory)


def test_a_new_kind_of_input_records_again():
    rng = np.random.default_rng(5)
    calls = []

    def counted(*xs):
        calls.append(1)
        return _ew(*xs)
    tag = ("test_replay", "kinds")
    for kind in ("own", "shared", "own", "views", "shared", "views"):
        ins = _inputs(kind, rng, "CPU")
        got = R.replayed(tag, ins, counted)
        for v, w in zip(_values(got), _values(_ew(*ins))):
            np.testing.assert_array_equal(v, w)
    # own, shared and views each recorded once (the CUDA suite's watcher sees every graph built)
    assert len(calls) == (6 if capture.watching() else 3)


def test_watched_or_uncached_builds_the_graph_every_time(monkeypatch):
    rng = np.random.default_rng(6)
    calls = []

    def counted(*xs):
        calls.append(1)
        return _ew(*xs)
    seen = []
    with capture.watch_schedules(seen.append):
        for _ in range(2):
            R.replayed(("test_replay", "watched"), _inputs("own", rng, "CPU"), counted)
    monkeypatch.setenv("TG_SCHEDULE_CACHE", "0")     # (config reads the environment at each use)
    for _ in range(2):
        R.replayed(("test_replay", "uncached"), _inputs("own", rng, "CPU"), counted)
    assert len(calls) == 4 and len(seen) >= 2


@pytest.mark.parametrize("how", ["closure", "closure_and_constant", "nested"])
def test_a_graph_reading_other_memory_is_not_replayed(how):
    """Memory that is not an input's (a tensor build's closure holds; a value build realized from its
    inputs, as a nested replayed) may differ from call to call: such graphs are built every time."""
    rng = np.random.default_rng(7)
    for _ in range(3):
        a, held = (R.from_numpy(rng.normal(size=SHAPE).astype(np.float32), dtypes.float32, "CPU")
                   for _ in range(2))
        two = LazyBuffer.const(2.0, dtypes.float32, "CPU", SHAPE)
        ins = [a, two] if how == "closure_and_constant" else [a]
        if how.startswith("closure"):
            def build(x, *c, held=held):     # (an input that is a constant binds no leaf)
                return [x.e(BinaryOps.ADD, held).e(BinaryOps.MUL, c[0]) if c else x.e(BinaryOps.ADD, held)]
            want = (R.to_numpy(a) + R.to_numpy(held)) * (2.0 if ins[1:] else 1.0)
        else:
            def build(x):
                (inner,) = R.replayed(("test_replay", "inner"), [x], lambda y: [y.e(BinaryOps.MUL, y)])
                return [inner.e(BinaryOps.ADD, x)]
            want = R.to_numpy(a) * R.to_numpy(a) + R.to_numpy(a)
        (got,) = R.replayed(("test_replay", how), ins, build)
        np.testing.assert_array_equal(R.to_numpy(got), want.astype(np.float32))
