"""tg.distributed: torch.distributed's names and semantics over tg's own transports.

    import tg.distributed as dist
    dist.init_process_group()            # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun,
                                         # Slurm, or a one-rank group when nothing is set
    dist.all_reduce(t)                   # in place on a tg Tensor or a numpy array
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True); work.wait()

With no launcher and no environment, init_process_group() gives a one-rank group whose
collectives are identities, so the same script runs under `python` and under `tglaunch`.

    >>> import numpy as np
    >>> init_process_group()
    >>> x = np.arange(3.0); all_reduce(x); x.tolist()
    [0.0, 1.0, 2.0]
    >>> destroy_process_group()
"""
from __future__ import annotations

import atexit
import ipaddress
import json
import logging
import os
import socket
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any, Callable

import numpy as np

from tg import config
from tg.core.host import HOST_DEVICES, HostView
from tg.distributed.errors import DistributedError
from tg.distributed.group import ProcessGroup, ReduceOp, reducer
from tg.distributed.store import TCPStore
from tg.distributed.transport import wire
from tg.distributed.transport.backends import BACKENDS
from tg.distributed.transport.wire import carried

log = logging.getLogger("tg.distributed")

__all__ = [
    "init_process_group",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "destroy_process_group",
    "new_group",
    "ReduceOp",
    "Work",
    "DistributedError",
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
    "barrier",
    "broadcast_object",
    "all_gather_object",
    "GroupMember",
    "get_backend",
    "DistributedSampler",
    "DataLoader",
    "DistributedDataParallel",
    "ZeroOptimizer",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
]

# The training pieces import the tensor core, which tglaunch must not pay for: loaded on first use.
_LAZY = {"DistributedSampler": "sampler", "DataLoader": "sampler", "DistributedDataParallel": "ddp",
         "ZeroOptimizer": "zero", "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint",
         "latest_checkpoint": "checkpoint"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tg.distributed' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"tg.distributed.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


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


class Work:
    """Handle of a call made with `async_op=True` (or isend/irecv), as torch.distributed's Work:
    `wait(timeout)` blocks until the call is done (and raises its error), `is_completed()` and
    `exception()` ask without blocking. The tensor holds the result only after wait().

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> x = np.ones(3)
    >>> work = dist.all_reduce(x, async_op=True)     # returns at once; compute can overlap here
    >>> work.wait()
    True
    >>> work.is_completed(), x.tolist()
    (True, [1.0, 1.0, 1.0])
    >>> dist.destroy_process_group()
    """

    def __init__(self, future: Future, after: Callable[[], None] | None = None):
        self._future, self._after, self._done = future, after, False

    def wait(self, timeout: float | timedelta | None = None) -> bool:
        t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        try:
            self._future.result(timeout=t)
        except FutureTimeout:
            raise DistributedError(f"[distributed] Work.wait timed out after {t}s") from None
        if not self._done and self._after is not None:
            self._after()
        self._done = True
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def exception(self) -> BaseException | None:
        return self._future.exception() if self._future.done() else None


# ---------------------------------------------------------------------------- start-up

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
    if group is not None:
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
    # a reference nothing drops, not even the interpreter's teardown of this module (a UCX worker
    # destroyed here would take its epoll registrations out of the parent's, which are the same)
    kept = (_State.default, _State.store, _State.p2p, list(ProcessGroup.live))
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))


atexit.register(_leave_at_exit)
os.register_at_fork(after_in_child=_forked)


# ---------------------------------------------------------------------------- tensors <-> host arrays

def _as_host(t: Any, what: str) -> tuple[np.ndarray, Callable[[], None] | None]:
    """A host array to work on in place, and what to do afterwards to make the result visible in t.
    Anything a collective cannot carry raises here, at the call, before any byte moves."""
    if isinstance(t, np.ndarray):
        carried(t.dtype, what)
        if not t.flags.c_contiguous or not t.flags.writeable or not t.flags.aligned:
            raise ValueError(f"[distributed] {what}: numpy arrays must be C-contiguous, aligned and "
                             f"writeable; pass a copy (np.array(x)) instead")
        return t, None
    from tg.core.tensor import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(
            f"[distributed] {what}: expected a tg Tensor or a numpy array, got {type(t).__name__}"
        )
    if _shares_memory(t):
        # a view's result goes where torch's goes, into its root's memory (assign writes the root and
        # re-derives the root's other views); reading a copy leaves t a view of its root
        values = t.numpy()

        def write_back() -> None:
            from tg.core.tensor import NoGrad
            with NoGrad():
                t.assign(Tensor(values, device=t.device, dtype=t.dtype)).realize()
        return values, write_back
    # the collective overwrites this memory in place: HostView computes what still reads it first
    view = HostView(t)
    arr = view.read().reshape(t.shape)
    if view.zero_copy:
        return arr, None
    return arr, lambda: view.write(arr)


def _shares_memory(t: Any) -> bool:
    """Whether tensor t is a view of another tensor's memory (a slice, chunk, reshape, transpose,
    detach) or the root of such tensors: written in place, its memory would not be where those tensors
    look, so a collective's result reaches it through Tensor.assign."""
    return getattr(t, "_alias", None) is not None or bool(getattr(t, "_views", None))


STAGE_PART = 4 << 20    # bytes of device memory a pipelined collective moves per step


def _device_view(t: Any) -> HostView | None:
    """A HostView of t when t is a tensor in device memory large enough to move in parts, else None."""
    if isinstance(t, np.ndarray):
        return None
    from tg.core.tensor import Tensor
    if not isinstance(t, Tensor) or t.device in HOST_DEVICES or t.nbytes <= STAGE_PART or _shares_memory(t):
        return None
    view = HostView(t)
    return view if view.pipelined else None


def _pipelined(group: Any, call: Callable[[np.ndarray], tuple], view: HostView, read: bool, write: bool,
               async_op: bool) -> Any:
    """An elementwise collective on device memory, in parts of STAGE_PART bytes through the view's
    (pinned) staging block: part k+1 is copied to the host while part k crosses the transport on the
    group's worker thread, and part k is copied back while later parts cross. Every rank passes a
    device tensor of the same size, so every rank cuts the same parts."""
    g = _group(group)
    flat = view.staged()
    step = max(STAGE_PART // flat.itemsize, 1)
    parts = [(lo, min(lo + step, flat.size)) for lo in range(0, flat.size, step)]
    futures = []
    for lo, hi in parts:
        if read:
            view.read_part(lo, hi)
        fn, args = call(flat[lo:hi])
        futures.append(g.submit(fn, *args))

    def finish() -> None:
        for (lo, hi), future in zip(parts, futures):
            future.result()
            if write:
                view.write_part(lo, hi)
    if async_op:
        return Work(futures[-1], finish)
    finish()
    return None


def _run(group: Any, fn: Callable, args: tuple, after: Callable[[], None] | None, async_op: bool) -> Any:
    g = _group(group)
    if not async_op:
        g.run_now(fn, *args)
        if after is not None:
            after()
        return None
    return Work(g.submit(fn, *args), after)


def _chain(*fns: Callable[[], None] | None) -> Callable[[], None] | None:
    live = [f for f in fns if f is not None]
    if not live:
        return None

    def run() -> None:
        for f in live:
            f()
    return run


def _check_root(g: ProcessGroup, root: int, what: str) -> int:
    if not 0 <= root < g.size:
        raise ValueError(f"[distributed] {what}: rank {root} is out of range for a group of {g.size}")
    return root


def _group_rank(group: Any, global_rank: int) -> int:
    g = _group(group)
    if group is None:
        return global_rank
    if global_rank not in g.ranks:
        raise ValueError(f"[distributed] rank {global_rank} is not in the group {g.ranks}")
    return g.ranks.index(global_rank)


# ---------------------------------------------------------------------------- collectives

def all_reduce(tensor: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
    """Reduce `tensor` across the group's ranks with `op` (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR,
    BXOR), in place on every rank (torch.distributed.all_reduce). With async_op=True, returns a Work.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> x = np.array([1.0, 2.0]) * (dist.get_rank() + 1)    # rank r holds (r + 1) * [1, 2]
    >>> dist.all_reduce(x)                                   # every rank: the sum over ranks
    >>> x.tolist()
    [1.0, 2.0]
    >>> dist.all_reduce(x, op=dist.ReduceOp.AVG)             # the mean: DDP's gradient average
    >>> x.tolist()
    [1.0, 2.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    view = _device_view(tensor)
    if view is not None:
        reducer(op, view.np_dtype)
        return _pipelined(group, lambda part: (g.all_reduce, (part, op)), view,
                          True, True, async_op)
    arr, after = _as_host(tensor, "all_reduce")
    reducer(op, arr.dtype)   # a dtype the op cannot use fails here, at the call
    return _run(group, g.all_reduce, (arr, op), after, async_op)


def reduce(
    tensor: Any, dst: int, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Any:
    """Reduce `tensor` across the group's ranks with `op` into rank `dst`'s tensor, in place
    (torch.distributed.reduce); the other ranks' tensors are left as they were.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> x = np.arange(3.0)
    >>> dist.reduce(x, dst=0)                                # rank 0: the sum over ranks
    >>> x.tolist()
    [0.0, 1.0, 2.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    root = _check_root(g, _group_rank(group, dst), "reduce")
    view = _device_view(tensor)
    if view is not None:
        reducer(op, view.np_dtype)
        return _pipelined(
            group, lambda part: (g.reduce, (part, root, op)), view, True, g.rank == root, async_op
        )
    arr, after = _as_host(tensor, "reduce")
    reducer(op, arr.dtype)
    return _run(group, g.reduce, (arr, root, op), after, async_op)


def broadcast(tensor: Any, src: int, group: Any = None, async_op: bool = False) -> Any:
    """Copy rank `src`'s tensor into every rank's `tensor`, in place (torch.distributed.broadcast).
    `src` is a rank of the job, also when `group` is given.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> x = np.arange(3.0) if dist.get_rank() == 0 else np.zeros(3)
    >>> dist.broadcast(x, src=0)                             # every rank: rank 0's values
    >>> x.tolist()
    [0.0, 1.0, 2.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    root = _check_root(g, _group_rank(group, src), "broadcast")
    view = _device_view(tensor)
    if view is not None:
        return _pipelined(
            group, lambda part: (g.broadcast, (part, root)), view, g.rank == root, g.rank != root, async_op
        )
    arr, after = _as_host(tensor, "broadcast")
    return _run(group, g.broadcast, (arr, root), after, async_op)


def _check_whole(
    op: str, whole_name: str, whole: np.ndarray, part_name: str, part: np.ndarray, n: int
) -> None:
    """The one-tensor collectives: `whole` holds n parts, each the size and dtype of `part`."""
    if whole.size != part.size * n or whole.dtype != part.dtype:
        raise ValueError(
            f"[distributed] {op}: {whole_name} {wire.dtype_name(whole.dtype)}{list(whole.shape)} must hold "
            f"{n} x {part_name} {wire.dtype_name(part.dtype)}{list(part.shape)}"
        )


def all_gather_into_tensor(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:  # noqa: A002
    """Every rank's `input` end to end, in rank order, into `output` on every rank
    (torch.distributed.all_gather_into_tensor); `output` holds world size times `input`'s elements.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> n = dist.get_world_size()
    >>> out = np.zeros(2 * n)
    >>> dist.all_gather_into_tensor(out, np.array([10.0, 11.0]) + dist.get_rank())
    >>> out.tolist()                                         # [10, 11, 11, 12, ...] with more ranks
    [10.0, 11.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    out, after = _as_host(output, "all_gather_into_tensor")
    inp, _ = _as_host(input, "all_gather_into_tensor")
    _check_whole("all_gather_into_tensor", "output", out, "input", inp, g.size)
    return _run(group, g.all_gather, (out, inp), after, async_op)


def all_gather(tensor_list: list, tensor: Any, group: Any = None, async_op: bool = False) -> Any:
    """Rank i's `tensor` into `tensor_list[i]` on every rank (torch.distributed.all_gather); the list
    holds one tensor per rank, each of `tensor`'s shape and dtype.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> parts = [np.zeros(2) for _ in range(dist.get_world_size())]
    >>> dist.all_gather(parts, np.full(2, float(dist.get_rank())))
    >>> [p.tolist() for p in parts]                          # [[0, 0], [1, 1], ...] with more ranks
    [[0.0, 0.0]]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    if len(tensor_list) != g.size:
        raise ValueError(f"[distributed] all_gather: tensor_list has {len(tensor_list)} entries, "
                         f"the group has {g.size}")
    inp, _ = _as_host(tensor, "all_gather")
    outs = [_as_host(t, "all_gather") for t in tensor_list]
    for o, _a in outs:
        if o.shape != inp.shape or o.dtype != inp.dtype:
            raise ValueError(
                f"[distributed] all_gather: every output must be {wire.dtype_name(inp.dtype)}"
                f"{list(inp.shape)}, got {wire.dtype_name(o.dtype)}{list(o.shape)}"
            )
    flat = np.empty(inp.size * g.size, inp.dtype)

    def unpack() -> None:
        for i, (o, a) in enumerate(outs):
            o.reshape(-1)[...] = flat[i * inp.size:(i + 1) * inp.size]
            if a is not None:
                a()
    return _run(group, g.all_gather, (flat, inp), unpack, async_op)


def reduce_scatter_tensor(output: Any, input: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None,  # noqa: A002
                          async_op: bool = False) -> Any:
    """`input` is world size equal parts end to end; rank i gets, in `output`, part i reduced across
    ranks with `op` (torch.distributed.reduce_scatter_tensor). ZeRO's gradient step.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> n = dist.get_world_size()
    >>> out = np.zeros(2)
    >>> dist.reduce_scatter_tensor(out, np.arange(2.0 * n))  # rank i: the sum of every rank's part i
    >>> out.tolist()
    [0.0, 1.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    out, after = _as_host(output, "reduce_scatter_tensor")
    inp, _ = _as_host(input, "reduce_scatter_tensor")
    _check_whole("reduce_scatter_tensor", "input", inp, "output", out, g.size)
    reducer(op, inp.dtype)
    return _run(group, g.reduce_scatter, (out, inp, op), after, async_op)


def reduce_scatter(output: Any, input_list: list, op: ReduceOp = ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> Any:
    """Rank i gets, in `output`, `input_list[i]` reduced across ranks with `op`
    (torch.distributed.reduce_scatter); the list holds one tensor per rank, each like `output`.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> out = np.zeros(2)
    >>> dist.reduce_scatter(out, [np.full(2, float(i)) for i in range(dist.get_world_size())])
    >>> out.tolist()                                         # rank i: world size * [i, i]
    [0.0, 0.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    if len(input_list) != g.size:
        raise ValueError(
            f"[distributed] reduce_scatter: input_list has {len(input_list)} entries, the group has {g.size}"
        )
    out, after = _as_host(output, "reduce_scatter")
    parts = [_as_host(t, "reduce_scatter")[0] for t in input_list]
    _check_chunks("reduce_scatter", "input_list", parts, out, "the output")
    reducer(op, out.dtype)
    flat = np.concatenate([part.reshape(-1) for part in parts])
    return _run(group, g.reduce_scatter, (out, flat, op), after, async_op)


def _check_chunks(what: str, name: str, chunks: list[np.ndarray], like: np.ndarray, like_name: str) -> None:
    for i, chunk in enumerate(chunks):
        if chunk.size != like.size or chunk.dtype != like.dtype:
            raise ValueError(
                f"[distributed] {what}: {name}[{i}] is {wire.dtype_name(chunk.dtype)}{list(chunk.shape)}, "
                f"every entry must match {like_name} {wire.dtype_name(like.dtype)}{list(like.shape)}"
            )


def gather(tensor: Any, gather_list: list | None = None, dst: int = 0, group: Any = None,
           async_op: bool = False) -> Any:
    """Rank i's `tensor` into `gather_list[i]` on rank `dst` (torch.distributed.gather); only `dst`
    passes a list, of one tensor per rank.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> mine = np.full(2, float(dist.get_rank()))
    >>> parts = [np.zeros(2) for _ in range(dist.get_world_size())] if dist.get_rank() == 0 else None
    >>> dist.gather(mine, parts, dst=0)
    >>> [p.tolist() for p in parts]                          # on rank 0: [[0, 0], [1, 1], ...]
    [[0.0, 0.0]]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    root = _check_root(g, _group_rank(group, dst), "gather")
    mine, _ = _as_host(tensor, "gather")
    outs = [_as_host(t, "gather") for t in gather_list] if g.rank == root and gather_list is not None else []
    if g.rank == root and len(outs) != g.size:
        raise ValueError(f"[distributed] gather: the destination needs a gather_list of {g.size} tensors")
    _check_chunks("gather", "gather_list", [o for o, _ in outs], mine, "the tensor")
    return _run(group, g.gather, (mine, [o for o, _ in outs], root), _chain(*[a for _, a in outs]), async_op)


def scatter(tensor: Any, scatter_list: list | None = None, src: int = 0, group: Any = None,
            async_op: bool = False) -> Any:
    """`scatter_list[i]` from rank `src` into rank i's `tensor` (torch.distributed.scatter); only
    `src` passes a list, of one tensor per rank.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> n = dist.get_world_size()
    >>> parts = [np.full(2, 10.0 * i) for i in range(n)] if dist.get_rank() == 0 else None
    >>> mine = np.zeros(2)
    >>> dist.scatter(mine, parts, src=0)                     # rank i: [10 * i, 10 * i]
    >>> mine.tolist()
    [0.0, 0.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    root = _check_root(g, _group_rank(group, src), "scatter")
    out, after = _as_host(tensor, "scatter")
    chunks = [_as_host(t, "scatter")[0] for t in scatter_list or []] if g.rank == root else []
    if g.rank == root and len(chunks) != g.size:
        raise ValueError(f"[distributed] scatter: the source needs a scatter_list of {g.size} tensors")
    _check_chunks("scatter", "scatter_list", chunks, out, "the tensor")
    return _run(group, g.scatter, (out, chunks, root), after, async_op)


def all_to_all_single(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:  # noqa: A002
    """Each rank cuts `input` into world size equal parts along the first dim and sends part j to
    rank j, which stores it as part i (i: the sender) of `output` (torch.distributed.all_to_all_single,
    equal splits only).

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> n = dist.get_world_size()
    >>> out = np.zeros(2 * n)
    >>> dist.all_to_all_single(out, np.arange(2.0 * n) + 100 * dist.get_rank())
    >>> out.tolist()                                         # rank j: part j of every rank's input
    [0.0, 1.0]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    out, after = _as_host(output, "all_to_all_single")
    inp, _ = _as_host(input, "all_to_all_single")
    uneven = inp.shape[0] % g.size if inp.shape else g.size > 1      # a 0-d tensor has no parts to send
    if out.shape != inp.shape or out.dtype != inp.dtype or uneven:
        raise ValueError(
            f"[distributed] all_to_all_single: input and output must have the same shape, with a first "
            f"dim divisible by {g.size}; got {list(inp.shape)} and {list(out.shape)}"
        )
    return _run(group, g.all_to_all, (out, inp), after, async_op)


def barrier(group: Any = None, async_op: bool = False) -> Any:
    """Return once every rank of the group has called barrier (torch.distributed.barrier).

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> dist.barrier()
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    return _run(group, g.barrier, (), None, async_op)


# ---------------------------------------------------------------------------- point to point

def _p2p_executor(g: ProcessGroup, peer: int, kind: str) -> ThreadPoolExecutor:
    key = (id(g) * 1000 + peer, kind)
    if key not in _State.p2p:
        _State.p2p[key] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tg-p2p-{kind}-{peer}")
    return _State.p2p[key]


def _p2p(tensor: Any, peer: int, group: Any, kind: str, async_op: bool) -> Any:
    g = _group(group)
    p = _group_rank(group, peer)
    if p == g.rank or not 0 <= p < g.size:
        raise ValueError(f"[distributed] {kind}: peer {peer} must be another rank of the group")
    arr, after = _as_host(tensor, kind)
    fn = g.send if kind == "send" else g.recv
    fut = _p2p_executor(g, p, kind).submit(fn, 0, arr, p)
    work = Work(fut, after)
    if async_op:
        return work
    work.wait(None)
    return None


def send(tensor: Any, dst: int, group: Any = None, tag: int = 0) -> None:
    """Send `tensor` to rank `dst`, which calls recv() with a tensor of the same shape and dtype
    (torch.distributed.send). Messages between two ranks arrive in the order sent; `tag` is accepted
    for torch's signature and not used. A two-rank job:

        x = np.arange(4.0) if dist.get_rank() == 0 else np.zeros(4)
        if dist.get_rank() == 0:
            dist.send(x, dst=1)
        else:
            dist.recv(x, src=0)          # rank 1's x is now [0, 1, 2, 3]

    A rank cannot send to itself:

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.send(np.ones(2), dst=0)
    Traceback (most recent call last):
    ValueError: [distributed] send: peer 0 must be another rank of the group
    >>> dist.destroy_process_group()
    """
    _p2p(tensor, dst, group, "send", False)


def recv(tensor: Any, src: int, group: Any = None, tag: int = 0) -> int:
    """Receive into `tensor`, in place, what rank `src` sends with send(); returns `src`
    (torch.distributed.recv, without receiving from any source). A sender's tensor of another shape
    or dtype raises DistributedError here, naming both. See send() for a two-rank example.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.recv(np.zeros(2), src=0)
    Traceback (most recent call last):
    ValueError: [distributed] recv: peer 0 must be another rank of the group
    >>> dist.destroy_process_group()
    """
    _p2p(tensor, src, group, "recv", False)
    return src


def isend(tensor: Any, dst: int, group: Any = None, tag: int = 0) -> Work:
    """send() that returns at once with a Work; `tensor` must not change before work.wait()
    (torch.distributed.isend). A two-rank exchange, each rank sending while it receives:

        peer = 1 - dist.get_rank()
        mine, theirs = np.full(4, float(dist.get_rank())), np.zeros(4)
        sent, got = dist.isend(mine, dst=peer), dist.irecv(theirs, src=peer)
        sent.wait()
        got.wait()                      # theirs is now the peer's values

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.isend(np.ones(2), dst=0)
    Traceback (most recent call last):
    ValueError: [distributed] send: peer 0 must be another rank of the group
    >>> dist.destroy_process_group()
    """
    return _p2p(tensor, dst, group, "send", True)


def irecv(tensor: Any, src: int, group: Any = None, tag: int = 0) -> Work:
    """recv() that returns at once with a Work; `tensor` holds the message after work.wait()
    (torch.distributed.irecv). See isend() for a two-rank example.

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> dist.irecv(np.zeros(2), src=0)
    Traceback (most recent call last):
    ValueError: [distributed] recv: peer 0 must be another rank of the group
    >>> dist.destroy_process_group()
    """
    return _p2p(tensor, src, group, "recv", True)


# ---------------------------------------------------------------------------- JSON objects (no pickle)

def broadcast_object(obj: Any, src: int = 0, group: Any = None) -> Any:
    """Rank `src`'s `obj`, returned on every rank (the others' `obj` is ignored); like
    torch.distributed.broadcast_object_list for one object, but `obj` must be JSON-serialisable
    (tg never pickles).

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> config = {"lr": 3e-4, "layers": 12} if dist.get_rank() == 0 else None
    >>> dist.broadcast_object(config, src=0)
    {'lr': 0.0003, 'layers': 12}
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    data = json.dumps(obj).encode() if g.rank == _group_rank(group, src) else b""
    n = np.array([len(data)], np.int64)
    broadcast(n, src, group)
    buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(int(n[0]), np.uint8)
    broadcast(buf, src, group)
    return json.loads(buf.tobytes().decode())


def all_gather_object(object_list: list, obj: Any, group: Any = None) -> None:
    """Rank i's `obj` into `object_list[i]` on every rank (torch.distributed.all_gather_object);
    `obj` must be JSON-serialisable (tg never pickles) and the list holds one entry per rank.

    >>> import tg.distributed as dist
    >>> dist.init_process_group()
    >>> seen = [None] * dist.get_world_size()
    >>> dist.all_gather_object(seen, {"rank": dist.get_rank(), "samples": 128})
    >>> seen
    [{'rank': 0, 'samples': 128}]
    >>> dist.destroy_process_group()
    """
    g = _group(group)
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = np.zeros(g.size, np.int64)
    all_gather_into_tensor(sizes, np.array([data.size], np.int64), group)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[:data.size] = data
    out = np.zeros(g.size * padded.size, np.uint8)
    all_gather_into_tensor(out, padded, group)
    for i in range(g.size):
        object_list[i] = json.loads(out[i * padded.size:i * padded.size + int(sizes[i])].tobytes().decode())


