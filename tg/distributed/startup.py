"""Start-up and the process's groups: where the ranks come from (the launcher's environment, mpiexec,
Slurm), which backend, the rendezvous store, the default group and new_group, and leaving them
(destroy_process_group, at exit, in a forked child). `_State` is the process's distributed state."""
from __future__ import annotations

import atexit
import ipaddress
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, Callable

from tg import config
from tg.distributed import flight
from tg.distributed.errors import DistributedError
from tg.distributed.process_group import ProcessGroup
from tg.distributed.store import TCPStore
from tg.distributed.transport.backends import BACKENDS


class GroupMember:
    """`GroupMember.NON_GROUP_MEMBER` is what new_group() returns on a rank that is not in the new
    group (as in torch.distributed); passing it to a collective raises ValueError.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.new_group([0]) is dist.GroupMember.NON_GROUP_MEMBER      # rank 0 is in it
    False
    >>> dist.all_reduce(np.ones(2), group=dist.GroupMember.NON_GROUP_MEMBER)
    Traceback (most recent call last):
    ValueError: [distributed] this rank is not in the group it passed; only members may use it
    >>> dist.destroy_process_group()
    """
    NON_GROUP_MEMBER = object()


class _Groups:
    """torch.distributed.group: `group.WORLD` is the default group, None before init_process_group.

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.group.WORLD.size
    1
    >>> dist.destroy_process_group(); dist.group.WORLD is None
    True
    """

    @property
    def WORLD(self) -> ProcessGroup | None:  # noqa: N802  (torch's name)
        return _State.default


group = _Groups()


class _State:
    default: ProcessGroup | None = None
    store: TCPStore | None = None
    secret: bytes = b""
    timeout: float = 300.0
    local_rank: int = 0
    groups: int = 0
    host: str = "127.0.0.1"
    p2p: dict[tuple[int, str], ThreadPoolExecutor] = {}
    backend: str = "tcp"
    forked: bool = False       # this process is a child forked after init: the groups are its parent's
    hosts_store: bool = False


LAUNCHER_VARIABLES = (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                      ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                      ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
                      ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def _detect() -> tuple[int, int, int]:
    """(rank, world size, local rank) from the first launcher's variables that are set: torchrun's,
    mpirun's, MPICH's, then Slurm's; (0, 1, 0) if none. Variables set in part (a rank without its world
    size) or out of range raise naming them: N misconfigured ranks must not train N one-rank models.
    Slurm's world size alone is an allocation's shell (salloc, sbatch), not a task: it is ignored."""
    for r, w, lr in LAUNCHER_VARIABLES:
        has_rank, has_world = config.is_set(r), config.is_set(w)
        if not has_rank and (not has_world or r == "SLURM_PROCID"):
            continue
        if has_rank != has_world:
            given, missing = (r, w) if has_rank else (w, r)
            raise ValueError(f"[distributed] {given}={getattr(config, given)} is set but {missing} is not; a "
                             f"launcher sets both. Set {missing} too, or unset {given} for a one-rank job")
        rank, world = getattr(config, r), getattr(config, w)   # a non-integer raises naming the variable
        if world < 1:
            raise ValueError(f"[distributed] {w}={world}: the world size must be at least 1; fix the "
                             f"launcher's environment (tglaunch sets {w})")
        local = getattr(config, lr) if config.is_set(lr) else rank
        for name, value in ((r, rank), (lr, local)):
            if not 0 <= value < world:
                raise ValueError(f"[distributed] {name}={value} is out of range for {w}={world}: expected "
                                 f"0..{world - 1}; fix the launcher's environment")
        return rank, world, local
    return 0, 1, 0


def _port(value: int, what: str) -> int:
    """value, when it can be a TCP port of the rendezvous store (0 cannot: the other ranks must know it)."""
    if not 1 <= value <= 65535:
        raise ValueError(f"[distributed] {what}: the store's port must be in 1..65535, got {value}; pick a "
                         f"free port (tglaunch picks one itself)")
    return value


# torch's backend names -> (tg's backend, why); a "cpu:gloo,cuda:nccl" string maps each of its parts
TORCH_BACKENDS = {
    "gloo": ("tcp", "sockets, shared memory between ranks on one host"),
    "nccl": ("tcp", "GPU tensors staged through (pinned) host memory; TG_BACKEND=ucx when ucxx is installed"),
}


_MAPPED: set[str] = set()


def _choose_backend(asked: str | None) -> str:
    """The argument, else TG_BACKEND, else mpi under mpiexec (unless a torchrun-style launcher set RANK),
    else tcp (with shared memory between ranks on one host). torch's names are accepted, in any case:
    'gloo' and 'nccl' mean tcp, 'mpi' mpi, and 'cpu:gloo,cuda:nccl' each part's."""
    from tg.distributed.transport.mpi import under_mpiexec
    name = (asked or config.TG_BACKEND or "").strip().lower()
    if not name:
        return "mpi" if under_mpiexec() and config.RANK < 0 else "tcp"
    parts = [part.rpartition(":")[2].strip() for part in name.split(",")]
    unknown = [part for part in parts if part not in BACKENDS and part not in TORCH_BACKENDS]
    chosen = {TORCH_BACKENDS[part][0] if part in TORCH_BACKENDS else part for part in parts}
    if unknown or len(chosen) != 1:
        raise ValueError(f"[distributed] unknown backend {asked or config.TG_BACKEND!r}; choose one of "
                         f"{', '.join(BACKENDS)} or torch's {', '.join(TORCH_BACKENDS)} (also 'cpu:gloo,"
                         f"cuda:nccl'), as the argument or TG_BACKEND")
    backend = chosen.pop()
    if name != backend and name not in _MAPPED and config.DEBUG >= 1:
        _MAPPED.add(name)
        why = "; ".join(TORCH_BACKENDS[part][1] for part in dict.fromkeys(parts) if part in TORCH_BACKENDS)
        print(f"[distributed] backend {name!r} -> tg's {backend}" + (f" ({why})" if why else ""))
    return backend


def get_default_backend_for_device(device: Any) -> str:
    """torch's name of the backend for a device type, for `init_process_group(backend=...)`: 'nccl' for a
    GPU ('cuda', 'cl', or a tg.device / Tensor.device of one), 'gloo' for the CPU; tg maps both to its
    own transports (see init_process_group).

    >>> get_default_backend_for_device("cuda:1"), get_default_backend_for_device("cpu")
    ('nccl', 'gloo')
    """
    from tg.core.device import split_device
    kind = split_device(str(getattr(device, "type", device)))[0]
    if kind in ("CUDA", "CL"):
        return "nccl"
    if kind in ("CPU", "NUMPY"):
        return "gloo"
    raise ValueError(f"[distributed] get_default_backend_for_device: expected a device such as 'cpu', "
                     f"'cuda' or 'cl', got {device!r}")


def is_available() -> bool:
    """torch.distributed.is_available: True (the tcp transport needs nothing beyond Python)."""
    return True


def is_gloo_available() -> bool:
    """True: 'gloo' runs on tg's tcp transport."""
    return True


def is_nccl_available() -> bool:
    """True: 'nccl' runs on tg's tcp transport (GPU tensors staged through host memory)."""
    return True


def is_mpi_available() -> bool:
    """Whether the mpi backend can run here (mpi4py importable)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def get_backend(group: Any = None) -> str:
    """The backend the job runs on: 'tcp', 'mpi' or 'ucx' (torch.distributed.get_backend). It is
    tg's name even when init_process_group was given torch's ('nccl' gives 'tcp').

    >>> import tg.distributed as dist
    >>> dist.init_process_group(backend="tcp")
    >>> dist.get_backend()
    'tcp'
    >>> dist.destroy_process_group()
    """
    _group(group)
    return _State.backend


def _is_local(host: str) -> bool:
    try:
        return host in ("localhost", "") or ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _store_address(init_method: str, world: int) -> tuple[str, int]:
    """(host, port) of the rendezvous store from init_method: 'tcp://host:port' or 'env://'."""
    if init_method.startswith("tcp://"):
        host, _, port = init_method[6:].rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"[distributed] init_method must be 'tcp://host:port', got {init_method!r}")
        return host, _port(int(port), f"init_method {init_method!r}")
    if init_method == "env://":
        if not config.MASTER_ADDR or not config.is_set("MASTER_PORT"):
            raise ValueError("[distributed] env:// needs MASTER_ADDR and MASTER_PORT for a world of "
                             f"{world} ranks; start the job with tglaunch, or set them")
        return config.MASTER_ADDR, _port(config.MASTER_PORT, f"MASTER_PORT={config.MASTER_PORT}")
    raise ValueError(f"[distributed] init_method must be 'env://' or 'tcp://host:port', got {init_method!r}")


def init_process_group(backend: str | None = None, init_method: str = "env://", rank: int | None = None,
                       world_size: int | None = None, timeout: float | timedelta | None = None) -> None:
    """Join the job's default process group (torch.distributed.init_process_group); every rank calls
    it once, before any collective.

    Rank and world size come from the launcher's environment (tglaunch or torchrun, Open MPI, MPICH,
    Slurm) unless `rank` and `world_size` are given; with none, this is a one-rank job whose
    collectives are identities. `backend`: 'tcp' (default), 'mpi' (picked under mpiexec) or 'ucx',
    else TG_BACKEND; torch's 'gloo' and 'nccl' mean 'tcp' (DEBUG=1 prints the mapping once).
    `init_method`: 'env://' (MASTER_ADDR, MASTER_PORT) or 'tcp://host:port', where
    rank 0 hosts the rendezvous store. `timeout` (seconds or a timedelta; default TG_DIST_TIMEOUT)
    bounds set-up and every later call.

    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.get_rank(), dist.get_world_size()
    (0, 1)
    >>> dist.destroy_process_group()
    """
    if _State.default is not None:
        raise RuntimeError(
            "[distributed] init_process_group was already called; call destroy_process_group first"
        )
    backend = _choose_backend(backend)
    t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    try:
        _State.timeout = config.duration(t) if t is not None else config.TG_DIST_TIMEOUT
    except ValueError as e:
        raise ValueError(f"[distributed] init_process_group(timeout={timeout!r}): {e}") from None
    _State.backend = backend
    started = BACKENDS[backend].world(rank, world_size, _State.timeout)
    if started is not None:
        _State.default, _State.local_rank = started
        return
    env_rank, env_world, local = _detect()
    rank = env_rank if rank is None else rank
    world = env_world if world_size is None else world_size
    if not 0 <= rank < world:
        raise ValueError(f"[distributed] rank {rank} is out of range for world size {world}")
    _State.local_rank = local
    if world == 1:
        _State.default = ProcessGroup(0, 1, [0], None, "default")
        return
    master, master_port = _store_address(init_method, world)
    if not config.TG_SECRET and not _is_local(master):
        raise ValueError(f"[distributed] the store is on another host ({master}:{master_port}) and "
                         f"TG_SECRET is not set: a multi-host job without tglaunch needs the same TG_SECRET "
                         f"on every rank. Make one with export TG_SECRET=$(python3 -c 'import secrets; "
                         f"print(secrets.token_hex(16))') and pass it to every host, or start the job with "
                         f"tglaunch")
    _State.host = config.TG_DIST_HOST or ("127.0.0.1" if _is_local(master) else socket.gethostname())
    hosts_store = _State.hosts_store = rank == 0 and not config.TG_STORE_EXTERNAL
    joined: Callable[[], None] | None = None
    if config.TG_SECRET:
        _State.secret = config.TG_SECRET.encode()
        _State.store = TCPStore(master, master_port, is_server=hosts_store, secret=_State.secret,
                                timeout=_State.timeout)
    elif config.TG_STORE_EXTERNAL:
        raise ValueError("[distributed] TG_STORE_EXTERNAL=1 needs TG_SECRET, the secret of the store's host")
    else:   # one host, no launcher: a random secret, shared through a file only this user can read
        from tg.distributed.secret import join_store
        _State.store, _State.secret, joined = join_store(master, master_port, hosts_store, _State.timeout)
    try:
        _State.default = _make_group(list(range(world)), rank, "default")
    finally:
        if joined is not None:
            joined()    # every rank is connected to the store now (or init failed): the secret file goes


def _make_group(ranks: list[int], my_global: int, name: str, backend: str | None = None) -> ProcessGroup:
    _State.groups += 1
    prefix = f"{config.TG_STORE_PREFIX}pg{_State.groups}"
    me = ranks.index(my_global)
    assert _State.store is not None
    store = _State.store
    transport = BACKENDS[backend or _State.backend].transport(me, len(ranks), store, prefix, _State.secret,
                                                              _State.host, _State.timeout)
    # nobody leaves set-up (and so nobody can finish, fail or close the store) before everyone is done
    if store.add(f"{prefix}/ready", 1) == len(ranks):
        store.set(f"{prefix}/all-ready", "1")
    store.wait([f"{prefix}/all-ready"], timeout=_State.timeout)
    group = ProcessGroup(me, len(ranks), ranks, transport, name)
    group.store, group.prefix = store, prefix
    return group


def is_initialized() -> bool:
    """Whether this process is in a job: init_process_group() ran and destroy_process_group() has not
    (torch.distributed.is_initialized).

    >>> import tg.distributed as dist
    >>> dist.is_initialized()
    False
    >>> dist.init_process_group()
    >>> dist.is_initialized()
    True
    >>> dist.destroy_process_group()
    """
    return _State.default is not None


def _group(group: Any) -> ProcessGroup:
    if _State.default is None:
        raise RuntimeError("[distributed] call dist.init_process_group() before any collective")
    if group is None:
        return _State.default
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("[distributed] this rank is not in the group it passed; only members may use it")
    if isinstance(group, ProcessGroup) and group.destroyed:
        raise ValueError(f"[distributed] this group ({group.name}, ranks {group.ranks}) was destroyed by "
                         f"destroy_process_group(group); make a new one with new_group(ranks)")
    return group


def get_rank(group: Any = None) -> int:
    """This process's rank in the job, 0 to world size - 1, or within `group` when given
    (torch.distributed.get_rank).

    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.get_rank()
    0
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    return g.rank if group is not None else g.ranks[g.rank]


def get_world_size(group: Any = None) -> int:
    """How many ranks the job has, or `group` has when given (torch.distributed.get_world_size).

    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.get_world_size()
    1
    >>> dist.destroy_process_group()
    """
    return _group(group).size


def bytes_moved(group: Any = None) -> int:
    """Bytes this rank has moved in the job's bulk collectives (or `group`'s) since init, counted as
    bandwidth-optimal algorithms move them whatever the transport did: an all_reduce or reduce of B
    bytes 2 (n - 1) / n B, an all-gather of B bytes of output or a reduce-scatter of B bytes of input
    (n - 1) / n B (NCCL's bus bytes for these), a broadcast (n - 1) / n B (a pipelined tree's share).
    Point-to-point sends, gather, scatter and all_to_all are not counted. Two readings around a step
    give what it moves: DDP's gradients 2 (n - 1) / n P, FSDP's gathers and reduce-scatter 3 (n - 1) / n P.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: one rank moves nothing
    >>> dist.all_reduce(np.ones(4)); dist.bytes_moved()
    0
    >>> dist.destroy_process_group()
    """
    return _group(group).moved


def flight_recorder() -> list[dict]:
    """This rank's flight recorder, oldest first: its last TG_FLIGHT_RECORDER collectives of every group,
    each a dict of ticket, seq (the call's number in its group), group, kind, dtype, count, bytes, state
    (issued, transferring, done or failed) and the wall-clock times it was issued, started and ended.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.all_reduce(np.ones(4, np.float32)); last = dist.flight_recorder()[-1]
    >>> last["kind"], last["dtype"], last["count"], last["state"]
    ('all_reduce', 'float32', 4, 'done')
    >>> dist.destroy_process_group()
    """
    rec = flight.recorder(get_rank())
    return [] if rec is None else rec.entries()


def get_local_rank() -> int:
    """This process's rank among the job's ranks on its host (what torch scripts read from LOCAL_RANK;
    here also from Open MPI, MPICH or Slurm): the index of the GPU a rank should use.

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.get_local_rank()
    0
    >>> dist.destroy_process_group()
    """
    _group(None)
    return _State.local_rank


def new_group(ranks: list[int] | None = None, timeout: Any = None, backend: str | None = None) -> Any:
    """A group of some of the job's ranks (torch.distributed.new_group), for the `group=` argument of
    every call; all ranks when `ranks` is None. Every rank of the job calls it, members or not, with
    the same ranks and in the same order; a non-member gets GroupMember.NON_GROUP_MEMBER. `timeout`
    is accepted for torch's signature; the job's timeout applies. `backend` (torch's names too) gives
    the group another transport than the job's: tcp and ucx groups meet at the job's store, so either
    can be asked for in a tcp or ucx job; an mpi job's groups are MPI's.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> evens = dist.new_group([r for r in range(dist.get_world_size()) if r % 2 == 0])
    >>> x = np.ones(2)
    >>> dist.all_reduce(x, group=evens)      # sums over ranks 0, 2, 4, ... only
    >>> dist.get_world_size(evens), x.tolist()
    (1, [1.0, 1.0])
    >>> dist.destroy_process_group(evens)
    >>> dist.destroy_process_group()
    """
    default = _group(None)
    kind = _State.backend if backend is None else _choose_backend(backend)
    at_store = BACKENDS[_State.backend].meets_at_store and BACKENDS[kind].meets_at_store
    if kind != _State.backend and not at_store:
        raise ValueError(f"[distributed] new_group(backend={backend!r}): this job runs on {_State.backend}; "
                         f"a group of another backend needs the rendezvous store (tcp and ucx jobs have "
                         f"one, mpi jobs do not). Fix: leave backend out, or start the job on tcp or ucx")
    ranks = sorted(set(range(default.size) if ranks is None else ranks))
    if any(not 0 <= r < default.size for r in ranks):
        raise ValueError(f"[distributed] new_group: ranks {ranks} must be in 0..{default.size - 1}")
    me = default.ranks[default.rank]
    if default.size == 1:
        return ProcessGroup(0, 1, [0], None, "sub")
    if me not in ranks:
        _State.groups += 1   # keep the store prefixes in step with the members
        return GroupMember.NON_GROUP_MEMBER
    made = BACKENDS[_State.backend].subgroup(default, ranks, f"sub{_State.groups + 1}")
    if made is not None:
        _State.groups += 1
        return made
    return _make_group(ranks, me, f"sub{_State.groups + 1}", kind)


def destroy_process_group(group: Any = None) -> None:
    """Leave the job (the default group) or `group`; every member calls it (a rank new_group() gave
    GroupMember.NON_GROUP_MEMBER may call it too: it returns). Leaving is an exit barrier:
    no rank, and not the store that rank 0 hosts, goes away while another still needs it, and a rank
    still in a collective raises naming this one. A script that ends without calling this leaves at
    exit. torch.distributed.destroy_process_group.

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.destroy_process_group()
    >>> dist.is_initialized()
    False
    """
    if group is GroupMember.NON_GROUP_MEMBER:
        return      # torch's pattern calls it on every rank; a non-member has nothing to leave
    if group is not None and group is not _State.default:     # group.WORLD is the job, as None is
        _leave(group)
        return
    g = _State.default
    if g is None:
        return
    in_step = False
    try:
        _leave(g)   # the store host must outlive every other rank's use of it
        in_step = True
    finally:
        if _State.store is not None:
            _close_store(_State.store, in_step)
        _State.default, _State.store = None, None
        BACKENDS[_State.backend].finish()
        for ex in _State.p2p.values():
            ex.shutdown(wait=False, cancel_futures=True)
        _State.p2p.clear()


def _close_store(store: TCPStore, in_step: bool) -> None:
    """After every rank left together (in_step), the store's host stops taking connections before any
    rank hangs up, and the others wait for that: a rank that calls init_process_group again at once then
    reaches the next store, not this one still closing (which would cut it off)."""
    closing = f"{config.TG_STORE_PREFIX}store-closing"
    try:
        if in_step and _State.hosts_store:
            store.stop_accepting()
            store.set(closing, "1")
        elif in_step and not config.TG_STORE_EXTERNAL:
            store.wait([closing], timeout=_State.timeout)
    except DistributedError:
        pass      # the store's host is gone already: nothing is left to wait for
    finally:
        store.close()


def _leave(g: ProcessGroup) -> None:
    """Every member leaves together, then closes: a member still in a collective on g raises naming the
    ranks that left, instead of waiting for a peer that is gone. A group destroyed already is left."""
    if g.destroyed:
        return
    try:
        if g.size > 1 and g.failure is None:
            g.run_now(g.leave)
    finally:
        g.close()


def _leave_at_exit() -> None:
    """A script that ends without destroy_process_group() still leaves through the exit barrier, so the
    rank that finishes first (rank 0 hosts the store) never fails one still starting or finishing.
    Under mpi, MPI_Finalize is that barrier and may already have run: only close."""
    g = _State.default
    if g is None or _State.forked:
        return
    if not BACKENDS[_State.backend].leaves_at_exit:
        g.failure = g.failure or DistributedError("[distributed] the process is exiting")
    try:
        destroy_process_group()
    except DistributedError as e:
        sys.stderr.write(
            f"{e}\n[distributed] rank {g.ranks[g.rank]} could not leave cleanly at exit (above)\n"
        )


def _forked() -> None:
    """In a child forked after init: the job's groups, store and transports are the parent's (the same
    sockets, shared memory and UCX workers), so the child must not leave, close or free them; it keeps
    them referenced until its end, as the destructors of UCX's objects would tear down the parent's."""
    import ctypes
    _State.forked = True
    flight.detach()
    # a reference nothing drops, not even the interpreter's teardown of this module (a UCX worker
    # destroyed here would take its epoll registrations out of the parent's, which are the same)
    kept = (_State.default, _State.store, _State.p2p, list(ProcessGroup.live))
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))


atexit.register(_leave_at_exit)


os.register_at_fork(after_in_child=_forked)
