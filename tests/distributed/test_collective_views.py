"""Collectives on views of a tensor write into the tensor's memory, as torch/gloo do: every collective
that writes a result (all_reduce, reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, scatter, gather, all_to_all_single, recv, irecv) is given outputs that are
slices, chunks, rows, reshapes, transposes, strided slices and detaches of a base tensor, and copies
torch makes where tg keeps a view until a write (a flip, Tensor(base)), which leave the base alone.
The same view taken of a numpy copy of the base is the reference: numpy views alias as torch's do. A
view that is only read (an input) stays a view: a later write through it still reaches its base."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
from harness import run_ranks

SHAPE = (4, 6)

# the same view of a tg Tensor and of a numpy array (numpy views alias like torch's)
VIEWS: dict[str, Callable[[Any], Any]] = {
    "rows": lambda b: b[1:3],
    "cols": lambda b: b[:, 2:5],
    "row": lambda b: b[2],
    "strided": lambda b: b[::2],
    "reshape": lambda b: b.reshape(3, 8),
    "flat-slice": lambda b: b.reshape(24)[3:15],
    "transpose": lambda b: b.T,
    "transpose-slice": lambda b: b.T[1:4],
    "detach": lambda b: b.detach() if hasattr(b, "detach") else b[...],
    # torch copies for these: a collective into them leaves the base as it was
    "flip": lambda b: b.flip(0) if hasattr(b, "flip") else b[::-1].copy(),
    "copy": lambda b: type(b)(b) if hasattr(b, "lazydata") else b.copy(),
}


def data(rank: int, case: int, shape: tuple[int, ...]) -> np.ndarray:
    """Rank `rank`'s values for case `case`: small integers, so every sum is exact in float32."""
    return np.random.default_rng(7919 * case + rank).integers(-20, 20, shape).astype(np.float32)


class Case:
    """One collective on one view: the base on this rank as a tg Tensor and as numpy, side by side."""

    def __init__(self, rank: int, world: int, number: int, view: str):
        from tg import Tensor
        self.rank, self.world, self.number, self.view = rank, world, number, view
        self.np_base = data(rank, number, SHAPE)
        self.base = Tensor(self.np_base.copy())
        self.peek = self.base.reshape(24)        # a view made before the collective sees its result

    def views(self) -> tuple[Any, np.ndarray]:
        return VIEWS[self.view](self.base), VIEWS[self.view](self.np_base)

    def others(self, shape: tuple[int, ...]) -> list[np.ndarray]:
        """Every rank's input of `shape` for this case (inputs differ from the bases)."""
        return [data(r + 100, self.number, shape) for r in range(self.world)]

    def check(self, what: str) -> str | None:
        got = self.base.numpy()
        if not np.array_equal(got, self.np_base):
            return f"{what} on view {self.view}: base is\n{got}\nexpected\n{self.np_base}"
        if not np.array_equal(self.peek.numpy(), self.np_base.reshape(24)):
            return f"{what} on view {self.view}: a view made before does not see the result"
        return None


def _all_reduce(c: Case, dist: Any) -> None:
    v, nv = c.views()
    dist.all_reduce(v)
    nv[...] = sum(data(r, c.number, SHAPE) for r in range(c.world))[_index(c, nv)]


def _index(c: Case, nv: np.ndarray) -> Any:
    """The part of a (4, 6) array that view c.view is, as an index on a fresh array of the base's values:
    VIEWS applied to an index grid."""
    grid = np.arange(24).reshape(SHAPE)
    return np.unravel_index(np.asarray(VIEWS[c.view](grid)), SHAPE)


def _reduce(c: Case, dist: Any) -> None:
    v, nv = c.views()
    dist.reduce(v, dst=0)
    if c.rank == 0:
        nv[...] = sum(data(r, c.number, SHAPE) for r in range(c.world))[_index(c, nv)]


def _broadcast(c: Case, dist: Any) -> None:
    v, nv = c.views()
    dist.broadcast(v, src=c.world - 1)
    nv[...] = data(c.world - 1, c.number, SHAPE)[_index(c, nv)]


def _all_gather_into_tensor(c: Case, dist: Any) -> None:
    from tg import Tensor
    v, nv = c.views()
    ins = c.others((nv.size // c.world,))
    dist.all_gather_into_tensor(v, Tensor(ins[c.rank]))
    nv[...] = np.concatenate(ins).reshape(nv.shape)


def _reduce_scatter_tensor(c: Case, dist: Any) -> None:
    from tg import Tensor
    v, nv = c.views()
    ins = c.others((nv.size * c.world,))
    dist.reduce_scatter_tensor(v, Tensor(ins[c.rank]))
    nv[...] = sum(ins).reshape(c.world, -1)[c.rank].reshape(nv.shape)


def _parts(c: Case, shape: tuple[int, ...], salt: int) -> list[list[np.ndarray]]:
    """parts[r][i]: rank r's i-th list entry."""
    return [[data(1000 * salt + 10 * r + i, c.number, shape) for i in range(c.world)] for r in range(c.world)]


def _reduce_scatter(c: Case, dist: Any) -> None:
    from tg import Tensor
    v, nv = c.views()
    parts = _parts(c, nv.shape, 1)
    dist.reduce_scatter(v, [Tensor(p) for p in parts[c.rank]])
    nv[...] = sum(parts[r][c.rank] for r in range(c.world))


def _scatter(c: Case, dist: Any) -> None:
    from tg import Tensor
    v, nv = c.views()
    parts = _parts(c, nv.shape, 2)[0]
    dist.scatter(v, [Tensor(p) for p in parts] if c.rank == 0 else None, src=0)
    nv[...] = parts[c.rank]


def _recv(c: Case, dist: Any, asynchronous: bool) -> None:
    from tg import Tensor
    v, nv = c.views()
    sent = data(500, c.number, nv.shape)
    if c.rank == 0:
        (dist.isend(Tensor(sent), dst=1).wait() if asynchronous else dist.send(Tensor(sent), dst=1))
    elif c.rank == 1:
        (dist.irecv(v, src=0).wait() if asynchronous else dist.recv(v, src=0))
        nv[...] = sent


# collectives whose output is a list of views of one base: the base's chunks along a dim, whole or not
def _chunks(c: Case, dim: int) -> tuple[list[Any], list[np.ndarray]]:
    return list(c.base.chunk(c.world, dim)), np.array_split(c.np_base, c.world, axis=dim)


def _all_gather(c: Case, dist: Any, dim: int) -> None:
    from tg import Tensor
    outs, np_outs = _chunks(c, dim)
    ins = c.others(np_outs[0].shape)
    dist.all_gather(outs, Tensor(ins[c.rank]))
    for o, i in zip(np_outs, ins):
        o[...] = i


def _gather(c: Case, dist: Any, dim: int) -> None:
    from tg import Tensor
    outs, np_outs = _chunks(c, dim)
    ins = c.others(np_outs[0].shape)
    dist.gather(Tensor(ins[c.rank]), outs if c.rank == 0 else None, dst=0)
    if c.rank == 0:
        for o, i in zip(np_outs, ins):
            o[...] = i


def _all_to_all_single(c: Case, dist: Any, dim: int) -> None:
    from tg import Tensor
    v = c.base if dim == 0 else c.base.T
    nv = c.np_base if dim == 0 else c.np_base.T
    ins = c.others(nv.shape)
    dist.all_to_all_single(v, Tensor(ins[c.rank]))
    nv[...] = np.concatenate([np.array_split(i, c.world)[c.rank] for i in ins])


def _input_stays_a_view(c: Case, dist: Any) -> None:
    """A view that is only read (the input of all_gather_into_tensor) keeps aliasing its base."""
    import tg
    from tg import Tensor
    v, nv = c.views()
    out = Tensor.zeros(c.world * nv.size)
    dist.all_gather_into_tensor(out, v)
    want = np.concatenate([data(r, c.number, SHAPE)[_index(c, nv)].reshape(-1) for r in range(c.world)])
    if not np.array_equal(out.numpy(), want):
        raise AssertionError(f"gathered {out.numpy()}, expected {want}")
    with tg.no_grad():
        v.assign(Tensor.full(nv.shape, 99.0))
    nv[...] = 99.0


ONE_VIEW = {"all_reduce": _all_reduce, "reduce": _reduce, "broadcast": _broadcast,
            "all_gather_into_tensor": _all_gather_into_tensor,
            "reduce_scatter_tensor": _reduce_scatter_tensor,
            "reduce_scatter": _reduce_scatter, "scatter": _scatter, "input": _input_stays_a_view,
            "recv": lambda c, d: _recv(c, d, False), "irecv": lambda c, d: _recv(c, d, True)}
CHUNKED = {"all_gather": _all_gather, "gather": _gather, "all_to_all_single": _all_to_all_single}


def _attempt(c: Case, name: str, call: Callable[[], None]) -> str | None:
    try:
        call()
        return c.check(name)
    except Exception as e:  # noqa: BLE001 - collect every case's failure
        return f"{name} on view {c.view}: {type(e).__name__}: {e}"


def view_suite(rank: int, world: int) -> list[str]:
    """Every collective x every view it can take; returns the failures."""
    import tg.distributed as dist
    problems: list[str | None] = []
    number = 0
    for name, fn in ONE_VIEW.items():
        for view in VIEWS:
            number += 1
            size = np.asarray(VIEWS[view](np.zeros(SHAPE))).size
            if name == "all_gather_into_tensor" and size % world:
                continue
            c = Case(rank, world, number, view)
            problems.append(_attempt(c, name, lambda: fn(c, dist)))  # noqa: B023 - called at once
    for name, chunked in CHUNKED.items():
        for dim in (0, 1):
            number += 1
            if SHAPE[dim] % world:
                continue
            c = Case(rank, world, number, f"chunks along dim {dim}")
            problems.append(_attempt(c, name, lambda: chunked(c, dist, dim)))  # noqa: B023 - called at once
    return [p for p in problems if p]


@pytest.mark.parametrize("world", [2, 3])
def test_collectives_write_through_views(world: int):
    for rank, bad in enumerate(run_ranks(world, view_suite, timeout=240, dist_timeout=30)):
        assert not bad, f"rank {rank}:\n" + "\n".join(bad)
