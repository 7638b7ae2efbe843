"""ProcessGroup: a set of ranks and one transport among them. Every collective runs on the group's
worker thread in call order (so async calls keep their order), on host numpy arrays, in place.

A one-rank group needs no transport: its collectives are identities.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from typing import Any, Callable

import numpy as np

from tg.distributed import algorithms as alg
from tg.distributed.errors import DistributedError


class ReduceOp(Enum):
    SUM = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    AVG = 5
    BAND = 6
    BOR = 7
    BXOR = 8


_UFUNC = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply, ReduceOp.MIN: np.minimum,
          ReduceOp.MAX: np.maximum, ReduceOp.BAND: np.bitwise_and, ReduceOp.BOR: np.bitwise_or,
          ReduceOp.BXOR: np.bitwise_xor}


def reducer(op: ReduceOp, dtype: np.dtype) -> alg.Reducer:
    """reduce(dst, src, base=None): dst = (base, or dst itself) op src, elementwise, into dst's memory.
    A dtype the op cannot use is a TypeError here, when the call is made."""
    kind = np.dtype(dtype).kind
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and kind not in "biu":
        raise TypeError(
            f"[distributed] ReduceOp.{op.name} needs integer or bool tensors, got {np.dtype(dtype).name}"
        )
    if op in (ReduceOp.MIN, ReduceOp.MAX) and kind == "c":
        raise TypeError(f"[distributed] ReduceOp.{op.name} has no order on complex tensors "
                        f"({np.dtype(dtype).name}); reduce the real and imaginary parts or the magnitudes")
    if op is ReduceOp.AVG and kind not in "fc":
        raise TypeError(
            f"[distributed] ReduceOp.AVG needs floating-point tensors, got {np.dtype(dtype).name}; "
            f"use SUM and divide"
        )
    ufunc = _UFUNC[op]
    if kind == "b" and op in (ReduceOp.SUM, ReduceOp.MAX):
        ufunc = np.logical_or
    elif kind == "b" and op in (ReduceOp.PRODUCT, ReduceOp.MIN):
        ufunc = np.logical_and

    def reduce(dst: np.ndarray, src: np.ndarray, base: np.ndarray | None = None) -> None:
        ufunc(dst if base is None else base, src, out=dst)
    return reduce


Arrays = np.ndarray | list[np.ndarray]     # all_gather's out and mine: one array, or a list gathered as one


def gather_pairs(out: Arrays, mine: Arrays) -> tuple[list[np.ndarray], list[np.ndarray], tuple[int, ...]]:
    """all_gather's (outs, mines) as lists, and the shape its descriptor carries: mine's for one array,
    every mine's size for a list (so a coalesced call never agrees with a single one)."""
    if isinstance(mine, np.ndarray):
        assert isinstance(out, np.ndarray)
        return [out], [mine], tuple(mine.shape)
    assert isinstance(out, list) and len(out) == len(mine) and mine, "one out per mine, at least one"
    assert all(m.dtype == mine[0].dtype for m in mine), "a coalesced all_gather carries one dtype"
    return out, mine, tuple(m.size for m in mine)


class ProcessGroup:
    """rank/size within the group, and `ranks`, the global rank of each group rank."""

    def __init__(self, rank: int, size: int, ranks: list[int], transport: Any = None, name: str = "default"):
        self.rank, self.size, self.ranks, self.transport, self.name = rank, size, ranks, transport, name
        self.seq = 0
        self.pending = 0          # async calls submitted and not yet finished
        self.failure: DistributedError | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tg-pg-{name}")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        via = getattr(self.transport, "name", "local")
        return f"<ProcessGroup {self.name} rank {self.rank}/{self.size} via {via}>"

    # ------------------------------------------------------------------ running
    def submit(self, fn: Callable[..., None], *args: Any) -> Future:
        with self._lock:
            self.seq += 1
            seq = self.seq
            self.pending += 1
        fut = self._executor.submit(self._run, seq, fn, args)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _fut: Future) -> None:
        with self._lock:
            self.pending -= 1

    def run_now(self, fn: Callable[..., None], *args: Any) -> None:
        """A synchronous call: inline when no async call is queued (saves a thread hand-off)."""
        with self._lock:
            inline = self.pending == 0
            if inline:
                self.seq += 1
                seq = self.seq
        if not inline:
            self.submit(fn, *args).result()
            return
        self._run(seq, fn, args)

    def _run(self, seq: int, fn: Callable[..., None], args: tuple) -> None:
        if self.failure is not None:
            raise self.failure
        try:
            fn(seq, *args)
        except DistributedError as e:
            self._fail(e)
            raise
        except BaseException as e:
            err = DistributedError(f"[distributed] rank {self.ranks[self.rank]} failed inside a collective: "
                                   f"{type(e).__name__}: {e}")
            self._fail(err)
            raise err from e

    def _fail(self, err: DistributedError) -> None:
        self.failure = err
        if self.transport is not None:
            self.transport.abort(str(err))

    def call(self, seq: int, op: str, arr: np.ndarray, root: int = -1, red: ReduceOp | None = None,
             shape: tuple[int, ...] | None = None) -> alg.Call:
        """The collective `op` as call number seq, once every rank has agreed to it."""
        desc = alg.encode_desc(op, arr.dtype, tuple(arr.shape if shape is None else shape), root,
                               red.value if red is not None else 0)
        c = alg.Call(self.transport, seq, desc, op, self.ranks)
        c.agree()
        return c

    # ------------------------------------------------------------------ collectives on numpy (host) arrays
    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp) -> None:
        if self.size > 1:
            self._all_reduce(self.call(seq, "all_reduce", arr, red=op), arr, op)

    def _all_reduce(self, c: alg.Call, arr: np.ndarray, op: ReduceOp) -> None:
        work = arr if arr.dtype.kind != "f" or arr.itemsize >= 4 else arr.astype(np.float32)
        flat = work.reshape(-1)
        alg.all_reduce(c, flat, reducer(op, work.dtype))
        if op is ReduceOp.AVG:
            np.divide(flat, self.size, out=flat, casting="unsafe")
        if work is not arr:
            arr[...] = work

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        if self.size == 1:
            return
        alg.broadcast(self.call(seq, "broadcast", arr, root=root), arr.reshape(-1), root)

    def all_gather(self, seq: int, out: Arrays, mine: Arrays) -> None:
        """out is (size * mine.size,) flat; rank i's part lands at block i. Lists of outs and mines (one
        dtype) are gathered as one call: one agreement, one pass of the ring for all of them (ZeRO-2
        gathers its buckets so: fewer round trips than a call each)."""
        outs, mines, shape = gather_pairs(out, mine)
        flats = [o.reshape(-1) for o in outs]
        blocks = [alg._blocks(f.size, self.size) for f in flats]
        for flat, block, part in zip(flats, blocks, mines):
            flat[block[self.rank]] = part.reshape(-1)     # no copy when part is that block already
        if self.size > 1:
            alg.ring_all_gather(self.call(seq, "all_gather", mines[0], shape=shape), flats, blocks)

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        """inp is (size * out.size,) flat; rank i gets the reduction of block i. inp is only read: the
        ring combines what arrives with inp's blocks into scratch and its last step straight into out,
        so no copy of inp is made (float16 is widened to float32 for the sums: that one is a copy)."""
        wide = inp.dtype.kind == "f" and inp.itemsize < 4
        work = inp.reshape(-1).astype(np.float32) if wide else inp.reshape(-1)
        blocks = alg._blocks(work.size, self.size)
        mine = out.reshape(-1)
        direct = mine.dtype == work.dtype and out.flags.c_contiguous and not np.may_share_memory(out, inp)
        result = mine if direct else np.empty(mine.size, work.dtype)
        if self.size > 1:
            c = self.call(seq, "reduce_scatter", inp, red=op)
            alg.ring_reduce_scatter(c, work, reducer(op, work.dtype), blocks, result)
        else:
            result[...] = work[blocks[self.rank]]
        if op is ReduceOp.AVG:
            np.divide(result, self.size, out=result, casting="unsafe")
        if result is not mine:
            mine[...] = result

    def reduce(self, seq: int, arr: np.ndarray, root: int, op: ReduceOp) -> None:
        if self.size == 1:
            return
        c = self.call(seq, "reduce", arr, root=root, red=op)
        result = arr.copy()
        self._all_reduce(c, result, op)
        if self.rank == root:
            arr[...] = result

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray] | None, root: int) -> None:
        if self.size == 1:
            if chunks:
                chunks[0][...] = mine
            return
        alg.gather(self.call(seq, "gather", mine, root=root), chunks or [], mine, root)

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray] | None, root: int) -> None:
        if self.size == 1:
            if chunks:
                out[...] = chunks[0]
            return
        alg.scatter(self.call(seq, "scatter", out, root=root), chunks or [], out, root)

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        if self.size == 1:
            out[...] = inp
            return
        ins, outs = np.array_split(inp.reshape(-1), self.size), np.array_split(out.reshape(-1), self.size)
        alg.all_to_all(self.call(seq, "all_to_all", inp), ins, outs)

    def barrier(self, seq: int, op: str = "barrier") -> None:
        """No rank leaves before every rank arrived: the agreement alone is that."""
        if self.size > 1:
            self.call(seq, op, np.zeros(0, np.uint8))

    def leave(self, seq: int) -> None:
        """destroy_process_group's exit barrier: a rank still in another call is named, not left hanging."""
        self.barrier(seq, "leave")

    def send(self, seq: int, arr: np.ndarray, dst: int) -> None:
        """Point-to-point runs on its own connection, so it never interleaves with collectives."""
        flat = np.ascontiguousarray(arr).reshape(-1)
        payload = memoryview(flat).cast("B") if flat.nbytes else memoryview(b"")  # type: ignore[arg-type]
        self.transport.p2p_send(dst, alg.encode_desc("send", arr.dtype, arr.shape), payload)

    def recv(self, seq: int, arr: np.ndarray, src: int) -> None:
        flat = arr.reshape(-1)
        view = memoryview(flat).cast("B") if flat.nbytes else memoryview(bytearray(0))  # type: ignore[arg-type]
        self.transport.p2p_recv(src, alg.encode_desc("send", arr.dtype, arr.shape), view, alg.describe)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.transport is not None:
            self.transport.close()
