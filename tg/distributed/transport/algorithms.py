"""Collective algorithms, written once over the point-to-point transport interface
(`isend(peer, kind, seq, arg, payload)`, `recv_frame`, `recv_into`).

Large all_reduce is a ring reduce-scatter + all-gather, small all_reduce recursive doubling
(every rank ends bit-identical), broadcast a binomial tree; all are pipelined in chunks so
sending, receiving and reducing overlap.

Before any data moves, every collective runs `agree`: the ranks reduce the MIN and MAX of a hash
of their call's descriptor (op, dtype, shape, root, reduce op) in one recursive-doubling exchange.
Equal means every rank is in the same call; unequal, and every rank sends every other its whole
descriptor and raises the same error naming the odd rank(s), instead of hanging or moving data
that the ranks read differently.
"""
from __future__ import annotations

import struct
from enum import Enum
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from tg.distributed.errors import DistributedError
from tg.distributed.transport.wire import (
    DATA,
    bf16_narrow,
    bf16_widen,
    desc_hash,
    described,
    disagreement,
    is_bf16,
    list_call,
)

# reduce(dst, src, base=None): dst = (base, or dst itself) op src, into dst's memory
Reducer = Callable[..., None]


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


@lru_cache(maxsize=256)       # every call checks its op and dtype here: a training loop repeats a few
def reducer(op: ReduceOp, dtype: np.dtype) -> Reducer:
    """reduce(dst, src, base=None): dst = (base, or dst itself) op src, elementwise, into dst's memory.
    A dtype the op cannot use is a TypeError here, when the call is made (not cached: every such call
    raises)."""
    kind = np.dtype(dtype).kind
    if is_bf16(dtype):
        return _bf16_reducer(op)
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


def _bf16_reducer(op: ReduceOp) -> Reducer:
    """bfloat16 words combined in float32 and rounded back once per combine (wire.BF16)."""
    if op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.MAX):
        raise TypeError(f"[distributed] ReduceOp.{op.name} is not defined on bfloat16; use SUM, AVG, MIN or "
                        f"MAX (or reduce float32 values)")
    ufunc = _UFUNC[op]

    def reduce(dst: np.ndarray, src: np.ndarray, base: np.ndarray | None = None) -> None:
        bf16_narrow(ufunc(bf16_widen(dst if base is None else base), bf16_widen(src)), dst)
    return reduce


def divide_by(values: np.ndarray, n: int) -> None:
    """AVG's last step in place: values / n (bfloat16 words divided in float32 and rounded)."""
    if is_bf16(values.dtype):
        bf16_narrow(bf16_widen(values) / np.float32(n), values)
    else:
        np.divide(values, n, out=values, casting="unsafe")


Arrays = np.ndarray | list[np.ndarray]     # all_gather's out and mine: one array, or a list gathered as one


GatherCall = tuple[str, tuple[int, ...]]    # the (op, shape) an all_gather's descriptor carries


def gather_pairs(out: Arrays, mine: Arrays) -> tuple[list[np.ndarray], list[np.ndarray], GatherCall]:
    """all_gather's (outs, mines) as lists, and the (op, shape) its descriptor carries: all_gather and
    mine's shape for one array; for a list, wire.list_call of the sizes (another op, so a coalesced
    call never agrees with a single one, and of a fixed size however many arrays)."""
    if isinstance(mine, np.ndarray):
        assert isinstance(out, np.ndarray)
        return [out], [mine], ("all_gather", tuple(mine.shape))
    assert isinstance(out, list) and len(out) == len(mine) and mine, "one out per mine, at least one"
    assert all(m.dtype == mine[0].dtype for m in mine), "a coalesced all_gather carries one dtype"
    return out, mine, list_call([m.size for m in mine])


AGREE = struct.Struct("<QQ")          # the agreement's (min, max) of the descriptor hashes
FOLD = 512                # data bytes every agreement frame carries: a small all_reduce rides in them
CHUNK = 4 << 20            # bytes per pipelined message (fewer, larger messages: less overhead)
SMALL = 1 << 15            # all_reduce below this many bytes uses recursive doubling


class _Pending:
    """A receive posted by Call.irecv / irecv_reduce: `nbytes` expected from `peer`."""
    __slots__ = ("peer", "nbytes", "handle")

    def __init__(self, peer: int, nbytes: int, handle: Any):
        self.peer, self.nbytes, self.handle = peer, nbytes, handle


class Call:
    """One collective in flight: `agree` first, then the algorithm's payloads, each size-checked.
    Receives are posted before the sends they answer (irecv, then isend, then complete), so a transport
    that can (ucx) lands data straight in its destination."""

    def __init__(self, transport: Any, seq: int, desc: bytes, name: str, ranks: list[int]):
        self.t, self.seq, self.desc, self.name, self.ranks = transport, seq, desc, name, ranks
        self.handles: list = []

    @property
    def what(self) -> str:
        return f"{self.name} #{self.seq}"

    def isend(self, peer: int, payload: Any) -> None:
        mv = memoryview(payload).cast("B") if not isinstance(payload, (bytes, bytearray)) else payload
        self.handles.append(self.t.isend(peer, DATA, self.seq, 0, mv))

    def irecv(self, peer: int, buf: np.ndarray) -> _Pending:
        """Post the receive of peer's next payload into buf (exactly its size)."""
        # numpy's stubs declare the buffer protocol only for Python >= 3.12; arrays support it at runtime
        view = memoryview(buf).cast("B") if buf.nbytes else memoryview(b"")  # type: ignore[arg-type]
        return _Pending(peer, len(view), self.t.irecv(peer, self.seq, view, self.what))

    def irecv_reduce(self, peer: int, dst: np.ndarray, reduce: Reducer, tmp: np.ndarray,
                     base: np.ndarray | None = None) -> _Pending:
        """Post the receive of peer's next payload, which complete() combines into dst: dst = (base, or
        dst itself) op payload, through tmp unless the transport reduces in place."""
        got = self.t.irecv_reduce(peer, self.seq, dst, reduce, tmp, base, self.what)
        return _Pending(peer, dst.nbytes, got)

    def complete(self, pending: _Pending) -> None:
        n = pending.handle.wait()
        if n != pending.nbytes:
            raise DistributedError(f"[distributed] {self.what}: rank {self.ranks[pending.peer]} sent {n} "
                                   f"bytes, rank {self.ranks[self.t.rank]} expected {pending.nbytes}")

    def recv_into(self, peer: int, buf: np.ndarray) -> None:
        self.complete(self.irecv(peer, buf))

    def _control(self, peer: int, payload: bytes, fixed: bool = False) -> None:
        self.handles.append(self.t.send_control(peer, self.seq, payload, fixed))

    def _control_from(self, peer: int, size: int | None) -> bytes:
        got = self.t.recv_control(peer, self.seq, size, self.what)
        if size is not None and len(got) != size:
            raise DistributedError(
                f"[distributed] {self.what}: rank {self.ranks[peer]} sent a {len(got)}-byte agreement "
                f"frame, rank {self.ranks[self.t.rank]} expected {size} bytes"
            )
        return got

    # Complexity: recursive doubling with the data riding along, its order rule and the fold-in of ranks
    # beyond the largest power of two, in one pass.
    def agree(self, data: np.ndarray | None = None, reduce: Reducer | None = None) -> None:  # noqa: C901
        """Every rank in the same call, or every rank raises the same error naming the odd ones. The
        MIN and MAX of the descriptor hashes go round in the pattern of recursive doubling (ranks
        beyond the largest power of two fold in first and hear the result last). Every frame has room
        for FOLD bytes: `data` (a flat all_reduce of at most that) rides in them and is reduced on the
        way, the lower rank's values first, so such an all_reduce is this one exchange, with the same
        bits on every rank. The frames are of one size whatever the call, so ranks in different calls
        always finish the exchange and learn of it together."""
        n, r = self.t.world, self.t.rank
        p2 = 1 << (n.bit_length() - 1)
        h = desc_hash(self.desc)
        lo, hi = h, h
        frame = bytearray(AGREE.size + FOLD)
        mine = np.frombuffer(frame, data.dtype, data.size, AGREE.size) if data is not None else None

        def send(peer: int) -> None:
            AGREE.pack_into(frame, 0, lo, hi)
            if mine is not None:
                mine[...] = data
            self._control(peer, bytes(frame), fixed=True)

        def merge(peer: int, first: bool | None) -> None:
            """Take peer's range, and its data: ours op theirs (first True), theirs op ours (False), or
            theirs as it is (None: the result of the exchange)."""
            nonlocal lo, hi
            got = self._control_from(peer, len(frame))
            theirs_lo, theirs_hi = AGREE.unpack_from(got)
            lo, hi = min(lo, theirs_lo), max(hi, theirs_hi)
            if data is None:
                return
            theirs = np.frombuffer(got, data.dtype, data.size, AGREE.size)
            if first is None:
                data[...] = theirs
            elif first:
                reduce(data, theirs)  # type: ignore[misc]
            else:
                combined = theirs.copy()
                reduce(combined, data)  # type: ignore[misc]
                data[...] = combined
        if r >= p2:
            send(r - p2)
            merge(r - p2, None)
        else:
            if r + p2 < n:
                merge(r + p2, True)
            mask = 1
            while mask < p2:
                send(r ^ mask)
                merge(r ^ mask, (r ^ mask) > r)
                mask <<= 1
            if r + p2 < n:
                send(r + p2)
        self.finish()
        if lo != hi:
            self.name_the_odd_ranks()

    def name_the_odd_ranks(self) -> None:
        """Every rank saw the disagreement (in `agree`, or in the ucx engine's own agreement): each sends
        every other its descriptor, so all raise alike."""
        n, r = self.t.world, self.t.rank
        for peer in range(n):
            if peer != r:
                self._control(peer, self.desc)
        descs = [self.desc if peer == r else self._control_from(peer, None) for peer in range(n)]
        self.finish()
        raise disagreement(f"collective #{self.seq}", descs, self.ranks)

    def finish(self) -> None:
        for h in self.handles:
            h.wait(self.t.timeout)
        self.handles.clear()


def _chunks(n_items: int, itemsize: int) -> list[slice]:
    per = max(CHUNK // max(itemsize, 1), 1)
    return [slice(i, min(i + per, n_items)) for i in range(0, n_items, per)] or [slice(0, 0)]


def _blocks(n: int, parts: int) -> list[slice]:
    edges = [n * i // parts for i in range(parts + 1)]
    return [slice(edges[i], edges[i + 1]) for i in range(parts)]


def _interleave(c: Call, sends: list[tuple[int, np.ndarray]], pending: list[_Pending]) -> None:
    """Send and complete receives in turn (send j, then complete receive j): the pipeline of a step."""
    for j in range(max(len(sends), len(pending))):
        if j < len(sends):
            c.isend(*sends[j])
        if j < len(pending):
            c.complete(pending[j])


def ring_reduce_scatter(c: Call, buf: np.ndarray, reduce: Reducer, blocks: list[slice],
                        out: np.ndarray | None = None) -> None:
    """Rank r ends with the reduction over all ranks of block r: in block r of buf itself (out None:
    buf's other blocks are overwritten with partial sums), or in out (buf is only read; the partial
    sums go round through two blocks of scratch, none at two ranks)."""
    n, r = c.t.world, c.t.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    longest = max((b.stop - b.start) for b in blocks)
    tmp = np.empty(longest, dtype=buf.dtype)
    scratch = [np.empty(longest, dtype=buf.dtype) for _ in range(2)] if out is not None and n > 2 else []
    sending = buf[blocks[(r - 1) % n]]            # step 0 sends this rank's own values of block r - 1
    for s in range(n - 1):
        recv_b = blocks[(r - s - 2) % n]          # block r - s - 2: the previous rank's partial sum of it
        mine = buf[recv_b]
        if out is None:
            into = mine
        else:
            into = out if s == n - 2 else scratch[s % 2][:len(mine)]
        pending = [c.irecv_reduce(prv, into[p], reduce, tmp[p], None if into is mine else mine[p])
                   for p in _chunks(len(mine), buf.itemsize)]
        _interleave(c, [(nxt, sending[p]) for p in _chunks(len(sending), buf.itemsize)], pending)
        c.finish()             # every send is out of `sending`: its memory may take the next partial sums
        sending = into


def ring_all_gather(c: Call, bufs: list[np.ndarray], blocks: list[list[slice]]) -> None:
    """Rank r contributes block r of each buf (blocks[i] are bufs[i]'s); afterwards every rank has
    every block of every buf. Each step of the ring moves that step's block of every buf."""
    n, r = c.t.world, c.t.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):
        sends: list[tuple[int, np.ndarray]] = []
        pending: list[_Pending] = []
        for buf, bl in zip(bufs, blocks):
            send_seg, recv_seg = buf[bl[(r - s) % n]], buf[bl[(r - s - 1) % n]]
            pending += [c.irecv(prv, recv_seg[p]) for p in _chunks(len(recv_seg), buf.itemsize)]
            sends += [(nxt, send_seg[p]) for p in _chunks(len(send_seg), buf.itemsize)]
        _interleave(c, sends, pending)
        c.finish()


def recursive_doubling(c: Call, buf: np.ndarray, reduce: Reducer) -> None:
    """Small all_reduce in log2(n) exchanges; ranks beyond the largest power of two fold in first."""
    n, r = c.t.world, c.t.rank
    p2 = 1 << (n.bit_length() - 1)
    extra = n - p2
    tmp = np.empty_like(buf)
    if r >= p2:
        got = c.irecv(r - p2, tmp)
        c.isend(r - p2, buf)
        c.complete(got)
        c.finish()
        buf[...] = tmp
        return
    if r < extra:
        c.recv_into(r + p2, tmp)
        reduce(buf, tmp)
    mask = 1
    while mask < p2:
        partner = r ^ mask
        got = c.irecv(partner, tmp)
        c.isend(partner, buf.copy())
        c.complete(got)
        c.finish()
        # the lower rank's value goes first, so every rank adds in the same order: bit-identical results
        if partner < r:
            first = tmp.copy()
            reduce(first, buf)
            buf[...] = first
        else:
            reduce(buf, tmp)
        mask <<= 1
    if r < extra:
        c.isend(r + p2, buf)
    c.finish()


def all_reduce(c: Call, buf: np.ndarray, reduce: Reducer) -> None:
    if c.t.world == 1 or buf.size == 0:
        return
    if buf.nbytes <= SMALL or buf.size < c.t.world:
        recursive_doubling(c, buf, reduce)
        return
    blocks = _blocks(buf.size, c.t.world)
    ring_reduce_scatter(c, buf, reduce, blocks)
    ring_all_gather(c, [buf], [blocks])


def broadcast(c: Call, buf: np.ndarray, root: int) -> None:
    """Binomial tree from root; large buffers are forwarded chunk by chunk as they arrive."""
    n, r = c.t.world, c.t.rank
    vr = (r - root) % n
    parent, mask = None, 1
    while mask < n:
        if vr & mask:
            parent = (vr - mask + root) % n
            break
        mask <<= 1
    children = []
    mask >>= 1
    while mask > 0:
        if vr + mask < n:
            children.append((vr + mask + root) % n)
        mask >>= 1
    chunks = _chunks(buf.size, buf.itemsize)
    pending = [c.irecv(parent, buf[chunk]) for chunk in chunks] if parent is not None else []
    for k, chunk in enumerate(chunks):
        if pending:
            c.complete(pending[k])
        for child in children:
            c.isend(child, buf[chunk])
    c.finish()


def gather(c: Call, chunks: list[np.ndarray], mine: np.ndarray, root: int) -> None:
    """Root's chunks[i] receives rank i's `mine`."""
    if c.t.rank == root:
        pending = [c.irecv(peer, chunks[peer]) for peer in range(c.t.world) if peer != root]
        chunks[root][...] = mine
        for p in pending:
            c.complete(p)
    else:
        c.isend(root, mine)
    c.finish()


def scatter(c: Call, chunks: list[np.ndarray], out: np.ndarray, root: int) -> None:
    if c.t.rank == root:
        for peer in range(c.t.world):
            if peer == root:
                out[...] = chunks[peer]
            else:
                c.isend(peer, chunks[peer])
    else:
        c.recv_into(root, out)
    c.finish()


def all_to_all(c: Call, send_blocks: list[np.ndarray], recv_blocks: list[np.ndarray]) -> None:
    n, r = c.t.world, c.t.rank
    recv_blocks[r][...] = send_blocks[r]
    pending = [c.irecv((r - k) % n, recv_blocks[(r - k) % n]) for k in range(1, n)]
    _interleave(c, [((r + k) % n, send_blocks[(r + k) % n]) for k in range(1, n)], pending)
    c.finish()


# ---------------------------------------------------------------------------- a group's collectives

class Alone:
    """The collectives of a one-rank group: identities (and the copies their outputs need)."""

    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp, what: str = "all_reduce",
                   root: int = -1) -> None:
        """Nothing to do: the one rank's values are the reduction (AVG divides by 1)."""

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        """Nothing to do: the one rank is the root."""

    def all_gather(self, seq: int, outs: list[np.ndarray], mines: list[np.ndarray], call: GatherCall) -> None:
        """Nothing to do: the group placed this rank's part, which is all of it."""

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        if chunks:
            chunks[0][...] = mine

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        out[...] = inp

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        if chunks:
            out[...] = chunks[0]

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        out[...] = inp

    def barrier(self, seq: int, op: str = "barrier") -> None:
        """Nothing to wait for: every rank (the one) has arrived."""


class OverTransport:
    """The collectives as the algorithms above, over a transport's point-to-point frames (any host, any
    transport): each call agrees first (`Call.agree`), then moves its data in pipelined chunks."""

    def __init__(self, transport: Any, ranks: list[int]):
        self.t, self.ranks = transport, ranks
        self.rank, self.size = transport.rank, transport.world

    def call(self, seq: int, op: str, arr: np.ndarray, root: int = -1, red: ReduceOp | None = None,
             shape: tuple[int, ...] | None = None, agree: bool = True) -> Call:
        """The collective `op` as call number seq, once every rank has agreed to it (unless `agree` is
        False: the caller agrees itself, with data riding along)."""
        desc = described(op, arr.dtype, tuple(arr.shape if shape is None else shape), root,
                         red.value if red is not None else 0)[0]
        c = Call(self.t, seq, desc, op, self.ranks)
        if agree:
            c.agree()
        return c

    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp, what: str = "all_reduce",
                   root: int = -1) -> None:
        work = arr if arr.dtype.kind != "f" or arr.itemsize >= 4 else arr.astype(np.float32)
        flat = work.reshape(-1)
        self.reduce_flat(seq, what, arr, root, op, flat)
        if op is ReduceOp.AVG:
            divide_by(flat, self.size)
        if work is not arr:
            arr[...] = work

    def reduce_flat(self, seq: int, what: str, arr: np.ndarray, root: int, op: ReduceOp,
                    flat: np.ndarray) -> None:
        """all_reduce's agreement and data movement, over flat (arr's values, float16 widened; AVG is
        summed here and divided by the caller)."""
        folded = flat.nbytes <= FOLD     # small: the data rides in the agreement's frames
        c = self.call(seq, what, arr, root=root, red=op, agree=not folded)
        if folded:
            riding = flat.copy()         # written back once the ranks agree: a disagreement moves nothing
            c.agree(riding, reducer(op, flat.dtype))
            flat[...] = riding
        else:
            all_reduce(c, flat, reducer(op, flat.dtype))

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None:
        broadcast(self.call(seq, "broadcast", arr, root=root), arr.reshape(-1), root)

    def all_gather(self, seq: int, outs: list[np.ndarray], mines: list[np.ndarray], call: GatherCall) -> None:
        blocks = [_blocks(f.size, self.size) for f in outs]
        ring_all_gather(self.call(seq, call[0], mines[0], shape=call[1]), outs, blocks)

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        gather(self.call(seq, "gather", mine, root=root), chunks, mine, root)

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        """No copy of inp: the ring combines what arrives with inp's blocks into scratch and its last
        step straight into out (float16 is widened to float32 for the sums: that one is a copy)."""
        c = self.call(seq, "reduce_scatter", inp, red=op)
        wide = inp.dtype.kind == "f" and inp.itemsize < 4
        work = inp.astype(np.float32) if wide else inp
        result = np.empty(out.size, np.float32) if wide else out
        ring_reduce_scatter(c, work, reducer(op, work.dtype), _blocks(work.size, self.size), result)
        if op is ReduceOp.AVG:
            divide_by(result, self.size)
        if result is not out:
            out[...] = result

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray], root: int) -> None:
        scatter(self.call(seq, "scatter", out, root=root), chunks, out, root)

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None:
        ins, outs = np.array_split(inp, self.size), np.array_split(out, self.size)
        all_to_all(self.call(seq, "all_to_all", inp), ins, outs)

    def barrier(self, seq: int, op: str = "barrier") -> None:
        self.call(seq, op, np.zeros(0, np.uint8))
