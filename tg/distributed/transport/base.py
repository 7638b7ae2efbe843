"""The two contracts under a ProcessGroup.

`Transport`: point-to-point frames between the ranks of one group (wire.py's format), which tg's own
collective algorithms (algorithms.OverTransport) are written over, plus point-to-point messages on a
channel of their own, abort and close. tcp.TcpTransport and ucx.UcxTransport keep it.

`Collectives`: what a ProcessGroup asks of whatever moves its data, one method per collective on host
numpy arrays, in place; `seq` is the group's call number (for messages). A transport hands the group
its collectives (`Transport.collectives`): OverTransport by default, the shared-memory engine when the
tcp transport has one; a one-rank group uses algorithms.Alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from tg.distributed.transport.wire import DESC

if TYPE_CHECKING:
    from tg.distributed.transport.algorithms import ReduceOp


class Sent(Protocol):
    def wait(self, timeout: float | None = None) -> None:
        """Returns once the payload has left (its memory may be reused); raises if it cannot."""


class Receiving(Protocol):
    def wait(self) -> int:
        """The payload's size once it is in place; another size than the posted buffer's (and nothing
        written) when the peer sent another size."""


class _ThenReduce:
    """A posted receive into tmp whose completion also reduces tmp into dst."""

    def __init__(self, got: Receiving, dst: np.ndarray, reduce: Callable[..., None], tmp: np.ndarray,
                 base: np.ndarray | None):
        self.got, self.dst, self.reduce, self.tmp, self.base = got, dst, reduce, tmp, base

    def wait(self) -> int:
        n = self.got.wait()
        if n == self.dst.nbytes:
            self.reduce(self.dst, self.tmp, self.base)
        return n


class Collectives(Protocol):
    def all_reduce(self, seq: int, arr: np.ndarray, op: ReduceOp, what: str = "all_reduce",
                   root: int = -1) -> None:
        """In place; `what` and `root` name the call in its descriptor (a reduce to root is an
        all_reduce that only root keeps: ProcessGroup.reduce)."""

    def broadcast(self, seq: int, arr: np.ndarray, root: int) -> None: ...

    def all_gather(self, seq: int, outs: list[np.ndarray], mines: list[np.ndarray],
                   call: tuple[str, tuple[int, ...]]) -> None:
        """Flat outs[i] gets every rank's flat mines[i] end to end, rank order (own part placed already);
        `call` is the descriptor's (op, shape): algorithms.gather_pairs'."""

    def gather(self, seq: int, mine: np.ndarray, chunks: list[np.ndarray], root: int) -> None: ...

    def reduce_scatter(self, seq: int, out: np.ndarray, inp: np.ndarray, op: ReduceOp) -> None:
        """Flat out (contiguous, apart from inp) gets block `rank` of flat inp reduced over the ranks."""

    def scatter(self, seq: int, out: np.ndarray, chunks: list[np.ndarray], root: int) -> None: ...

    def all_to_all(self, seq: int, out: np.ndarray, inp: np.ndarray) -> None: ...

    def barrier(self, seq: int, op: str = "barrier") -> None: ...


class Transport(Protocol):
    rank: int            # this rank's number in the group
    world: int           # the group's size
    timeout: float       # seconds any wait may last

    @property
    def kind(self) -> str:
        """What carries the data, for reprs and tests ('tcp', 'tcp+shm', 'tcp+rings', 'ucx')."""

    def isend(self, peer: int, kind: int, seq: int, arg: int, payload: memoryview | bytes = b"") -> Sent:
        """Send one frame (header and payload) to peer; the payload's memory stays untouched until the
        returned handle's wait() returns."""

    def send_control(self, peer: int, seq: int, payload: bytes, fixed: bool) -> Sent:
        """A control message of call seq (the agreement's); `fixed`: every rank's message of this step has
        this size (the receiver names it), else its size travels with it. A DESC frame here."""
        return self.isend(peer, DESC, seq, 0, payload)

    def recv_control(self, peer: int, seq: int, size: int | None, what: str) -> bytes:
        """peer's next control message of call seq: `size` bytes (a fixed one), or any size up to
        wire.MAX_CONTROL (None). Raises, naming the peer, on a message of another call or kind. A DESC
        frame here (recv_frame refuses one over MAX_CONTROL)."""
        _, _, n = self.recv_frame(peer, DESC, seq, what)
        return self.recv_bytes(peer, n)

    def recv_frame(self, peer: int, expect_kind: int, seq: int, what: str) -> tuple[int, int, int]:
        """Read peer's next frame header: (kind, arg, payload bytes). Raises, naming the peer, on an
        ABORT frame, a frame of another kind or call (wire.check_in_step), a dead peer or the timeout."""

    def recv_into(self, peer: int, buf: memoryview) -> None:
        """The payload of the frame just read, into buf (exactly its size)."""

    def recv_bytes(self, peer: int, n: int) -> bytes:
        """The payload of the frame just read (n bytes, a control frame's), as bytes."""

    def irecv(self, peer: int, seq: int, view: memoryview, what: str) -> Receiving:
        """Post the receive of peer's next DATA payload of call seq into view."""

    def irecv_reduce(self, peer: int, seq: int, dst: np.ndarray, reduce: Callable[..., None], tmp: np.ndarray,
                     base: np.ndarray | None, what: str) -> Receiving:
        """Post the receive of peer's next DATA payload of call seq (dst.nbytes of them); when it is
        complete, dst = (base, or dst itself) op payload. Received into tmp, then reduced, unless the
        transport can read it in place."""
        view = memoryview(tmp).cast("B") if tmp.nbytes else memoryview(b"")  # type: ignore[arg-type]
        return _ThenReduce(self.irecv(peer, seq, view, what), dst, reduce, tmp, base)

    def p2p_send(self, peer: int, desc: bytes, payload: memoryview) -> None:
        """One point-to-point message (descriptor and data) on the channel that never carries collectives."""

    def p2p_recv(self, peer: int, desc: bytes, buf: memoryview, describe: Callable[[bytes], str]) -> None:
        """The next point-to-point message from peer into buf; its descriptor must be `desc`."""

    def collectives(self, ranks: list[int]) -> Any:
        """The group's Collectives (ranks[r]: group rank r's global rank, for messages): tg's algorithms
        over these frames, unless the transport has something better."""
        from tg.distributed.transport.algorithms import OverTransport
        return OverTransport(self, ranks)

    def abort(self, reason: str) -> None:
        """Tell every peer why this rank stops (best effort, bounded), then close."""

    def close(self) -> None: ...
