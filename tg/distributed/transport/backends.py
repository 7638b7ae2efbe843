"""The backends, in one registry (`BACKENDS`): what init_process_group, new_group and
destroy_process_group run for each.

    tcp  ranks meet at the rendezvous store; each group gets a TcpTransport (sockets, and the
         shared-memory engine when the group is on one host)
    ucx  the same meeting; each group gets a UcxTransport (ucxx)
    mpi  processes, ranks and collectives come from MPI (mpiexec starts the job); no store

A backend that brings its own processes (mpi) makes its world and subgroups itself; the others hand
the store-based start-up in tg/distributed/__init__.py a transport for each new group.

    >>> sorted(BACKENDS), BACKENDS["tcp"].summary
    (['mpi', 'tcp', 'ucx'], 'sockets, with shared memory between ranks on one host')
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tg.distributed.process_group import ProcessGroup
    from tg.distributed.store import TCPStore
    from tg.distributed.transport.base import Transport


class Backend:
    name = ""
    summary = ""
    leaves_at_exit = True      # destroy_process_group's exit barrier runs at exit (MPI finalizes itself)
    meets_at_store = True      # ranks meet at the rendezvous store (so its groups can mix with others')

    def world(self, rank: int | None, world_size: int | None,
              timeout: float) -> tuple[ProcessGroup, int] | None:
        """(the default group, the local rank) when the backend starts its world itself; None: the ranks
        meet at the rendezvous store and each group gets `transport`."""
        return None

    def transport(self, me: int, size: int, store: TCPStore, prefix: str, secret: bytes, host: str,
                  timeout: float) -> Transport:
        raise NotImplementedError(f"[distributed] backend {self.name} makes its groups itself")

    def subgroup(self, default: ProcessGroup, ranks: list[int], name: str) -> ProcessGroup | None:
        """A new group of `ranks` (group ranks of default) when the backend makes it itself; None: a
        transport through the store."""
        return None

    def finish(self) -> None:
        """After the default group is gone."""


class Tcp(Backend):
    name, summary = "tcp", "sockets, with shared memory between ranks on one host"

    def transport(self, me: int, size: int, store: TCPStore, prefix: str, secret: bytes, host: str,
                  timeout: float) -> Transport:
        from tg.distributed.transport.tcp import TcpTransport
        return TcpTransport(me, size, store, prefix, secret, host, timeout)


class Ucx(Backend):
    name, summary = "ucx", "UCX through ucxx (shared memory, TCP or RDMA as UCX picks)"

    def transport(self, me: int, size: int, store: TCPStore, prefix: str, secret: bytes, host: str,
                  timeout: float) -> Transport:
        from tg.distributed.transport.ucx import UcxTransport
        return UcxTransport(me, size, store, prefix, secret, timeout, host)


class Mpi(Backend):
    name, summary = "mpi", "MPI's own collectives through mpi4py, in a job mpiexec started"
    leaves_at_exit = meets_at_store = False

    def world(self, rank: int | None, world_size: int | None,
              timeout: float) -> tuple[ProcessGroup, int] | None:
        from tg.distributed.transport.mpi import init_world
        return init_world(rank, world_size, timeout)

    def subgroup(self, default: ProcessGroup, ranks: list[int], name: str) -> ProcessGroup | None:
        from tg.distributed.transport.mpi import subgroup
        return subgroup(default, ranks, name)

    def finish(self) -> None:
        from tg.distributed.transport.mpi import finish
        finish()


BACKENDS: dict[str, Any] = {b.name: b for b in (Tcp(), Mpi(), Ucx())}
