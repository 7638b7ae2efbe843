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
import hashlib
import ipaddress
import json
import logging
import socket
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any, Callable

import numpy as np

from tg import config
from tg.distributed.algorithms import carried
from tg.distributed.errors import DistributedError
from tg.distributed.flat import HOST_DEVICES, HostView
from tg.distributed.group import ProcessGroup, ReduceOp, reducer
from tg.distributed.store import TCPStore

log = logging.getLogger("tg.distributed")

__all__ = ["init_process_group", "is_initialized", "get_rank", "get_world_size", "get_local_rank",
           "destroy_process_group", "new_group", "ReduceOp", "Work", "DistributedError", "all_reduce", "reduce",
           "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
           "gather", "scatter", "all_to_all_single", "send", "recv", "isend", "irecv", "barrier",
           "broadcast_object", "all_gather_object", "GroupMember", "get_backend",
           "DistributedSampler", "DataLoader", "DistributedDataParallel", "ZeroOptimizer",
           "save_checkpoint", "load_checkpoint", "latest_checkpoint"]

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


class Work:
    """Handle of an async call: wait(timeout), is_completed(), exception()."""

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

def _detect() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's, mpirun's or Slurm's environment; (0, 1, 0) if none."""
    for r, w, lr in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                     ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"), ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")):
        rank, world = getattr(config, r), getattr(config, w)
        if rank >= 0 and world > 0:
            local = getattr(config, lr)
            return rank, world, local if local >= 0 else rank
    return 0, 1, 0


BACKENDS = ("tcp", "mpi", "ucx")


def _choose_backend(asked: str | None) -> str:
    """The argument, else TG_BACKEND, else mpi under mpiexec (unless a torchrun-style launcher set RANK),
    else tcp (with shared memory between ranks on one host)."""
    from tg.distributed.mpi import under_mpiexec
    backend = (asked or config.TG_BACKEND or "").lower()
    if not backend:
        backend = "mpi" if under_mpiexec() and config.RANK < 0 else "tcp"
    if backend not in BACKENDS:
        raise ValueError(f"[distributed] unknown backend {backend!r}; choose one of {', '.join(BACKENDS)} "
                         f"(argument or TG_BACKEND)")
    return backend


def get_backend(group: Any = None) -> str:
    """The backend the job runs on: 'tcp', 'mpi' or 'ucx'."""
    _group(group)
    return _State.backend


def _is_local(host: str) -> bool:
    try:
        return host in ("localhost", "") or ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def init_process_group(backend: str | None = None, init_method: str = "env://", rank: int | None = None,
                       world_size: int | None = None, timeout: float | timedelta | None = None) -> None:
    """Join the job's default process group (torch.distributed.init_process_group)."""
    if _State.default is not None:
        raise RuntimeError("[distributed] init_process_group was already called; call destroy_process_group first")
    backend = _choose_backend(backend)
    t = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    _State.timeout = float(t if t is not None else config.TG_DIST_TIMEOUT)
    _State.backend = backend
    if backend == "mpi":
        from tg.distributed.mpi import init_world
        _State.default, _State.local_rank = init_world(rank, world_size, _State.timeout)
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
    if init_method.startswith("tcp://"):
        host, port = init_method[6:].rsplit(":", 1)
        master, master_port = host, int(port)
    elif init_method == "env://":
        master, master_port = config.MASTER_ADDR, config.MASTER_PORT
        if not master or not master_port:
            raise ValueError("[distributed] env:// needs MASTER_ADDR and MASTER_PORT for a world of "
                             f"{world} ranks; start the job with tglaunch, or set them")
    else:
        raise ValueError(f"[distributed] init_method must be 'env://' or 'tcp://host:port', got {init_method!r}")
    secret = config.TG_SECRET.encode() or hashlib.sha256(f"tg:{master}:{master_port}:{world}".encode()).digest()
    if not config.TG_SECRET and not _is_local(master):
        log.warning("[distributed] no TG_SECRET: the job secret is derived from %s:%s, which anyone who can reach "
                    "the port can derive too; start multi-host jobs with tglaunch or set TG_SECRET", master,
                    master_port)
    _State.secret = secret
    _State.host = config.TG_DIST_HOST or ("127.0.0.1" if _is_local(master) else socket.gethostname())
    hosts_store = rank == 0 and not config.TG_STORE_EXTERNAL
    _State.store = TCPStore(master, master_port, is_server=hosts_store, secret=secret, timeout=_State.timeout)
    _State.default = _make_group(list(range(world)), rank, "default")


def _make_group(ranks: list[int], my_global: int, name: str) -> ProcessGroup:
    _State.groups += 1
    prefix = f"{config.TG_STORE_PREFIX}pg{_State.groups}"
    me = ranks.index(my_global)
    assert _State.store is not None
    store = _State.store
    transport: Any
    if _State.backend == "ucx":
        from tg.distributed.ucx import UcxTransport
        transport = UcxTransport(me, len(ranks), store, prefix, _State.secret, _State.timeout)
    else:
        from tg.distributed.tcp import TcpTransport
        transport = TcpTransport(me, len(ranks), store, prefix, _State.secret, _State.host, _State.timeout)
    # nobody leaves set-up (and so nobody can finish, fail or close the store) before everyone is done
    if store.add(f"{prefix}/ready", 1) == len(ranks):
        store.set(f"{prefix}/all-ready", "1")
    store.wait([f"{prefix}/all-ready"], timeout=_State.timeout)
    return ProcessGroup(me, len(ranks), ranks, transport, name)


def is_initialized() -> bool:
    return _State.default is not None


def _group(group: Any) -> ProcessGroup:
    if _State.default is None:
        raise RuntimeError("[distributed] call dist.init_process_group() before any collective")
    if group is None:
        return _State.default
    if group is GroupMember.NON_GROUP_MEMBER:
        raise ValueError("[distributed] this rank is not in the group it passed; only members may use it")
    return group


def get_rank(group: Any = None) -> int:
    g = _group(group)
    return g.rank if group is not None else g.ranks[g.rank]


def get_world_size(group: Any = None) -> int:
    return _group(group).size


def get_local_rank() -> int:
    _group(None)
    return _State.local_rank


def new_group(ranks: list[int] | None = None, timeout: Any = None) -> Any:
    """A subgroup; every rank of the default group must call it, in the same order (as in torch)."""
    default = _group(None)
    ranks = sorted(set(range(default.size) if ranks is None else ranks))
    if any(not 0 <= r < default.size for r in ranks):
        raise ValueError(f"[distributed] new_group: ranks {ranks} must be in 0..{default.size - 1}")
    me = default.ranks[default.rank]
    if default.size == 1:
        return ProcessGroup(0, 1, [0], None, "sub")
    if me not in ranks:
        _State.groups += 1   # keep the store prefixes in step with the members
        return GroupMember.NON_GROUP_MEMBER
    if _State.backend == "mpi":
        _State.groups += 1
        return default.subgroup(ranks, f"sub{_State.groups}")  # type: ignore[attr-defined]
    return _make_group(ranks, me, f"sub{_State.groups + 1}")


def destroy_process_group(group: Any = None) -> None:
    """Leave the job (the default group) or `group`; every member calls it. Leaving is an exit barrier:
    no rank, and not the store that rank 0 hosts, goes away while another still needs it, and a rank
    still in a collective raises naming this one. A script that ends without calling this leaves at
    exit."""
    if group is not None and group is not GroupMember.NON_GROUP_MEMBER:
        _leave(group)
        return
    g = _State.default
    if g is None:
        return
    try:
        _leave(g)   # the store host must outlive every other rank's use of it
    finally:
        if _State.store is not None:
            _State.store.close()
        _State.default, _State.store = None, None
        if _State.backend == "mpi":
            from tg.distributed.mpi import finish
            finish()
        for ex in _State.p2p.values():
            ex.shutdown(wait=False, cancel_futures=True)
        _State.p2p.clear()


def _leave(g: ProcessGroup) -> None:
    """Every member leaves together, then closes: a member still in a collective on g raises naming the
    ranks that left, instead of waiting for a peer that is gone."""
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
    if g is None:
        return
    if _State.backend == "mpi":
        g.failure = g.failure or DistributedError("[distributed] the process is exiting")
    try:
        destroy_process_group()
    except DistributedError as e:
        sys.stderr.write(f"{e}\n[distributed] rank {g.ranks[g.rank]} could not leave cleanly at exit (above)\n")


atexit.register(_leave_at_exit)


# ---------------------------------------------------------------------------- tensors <-> host arrays

def _as_host(t: Any, what: str) -> tuple[np.ndarray, Callable[[], None] | None]:
    """A host array to work on in place, and what to do afterwards to make the result visible in t.
    Anything a collective cannot carry raises here, at the call, before any byte moves."""
    if isinstance(t, np.ndarray):
        carried(t.dtype, what)
        if not t.flags.c_contiguous or not t.flags.writeable:
            raise ValueError(f"[distributed] {what}: numpy arrays must be C-contiguous and writeable; use "
                             f"np.ascontiguousarray")
        return t, None
    from tg import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"[distributed] {what}: expected a tg Tensor or a numpy array, got {type(t).__name__}")
    # the collective overwrites this memory in place: HostView computes what still reads it first
    view = HostView(t)
    arr = view.read().reshape(t.shape)
    if view.zero_copy:
        return arr, None
    return arr, lambda: view.write(arr)


STAGE_PART = 4 << 20    # bytes of device memory a pipelined collective moves per step


def _device_view(t: Any) -> HostView | None:
    """A HostView of t when t is a tensor in device memory large enough to move in parts, else None."""
    from tg import Tensor
    if not isinstance(t, Tensor) or t.device in HOST_DEVICES or t.nbytes <= STAGE_PART:
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
    """Reduce tensor across ranks, in place on every rank."""
    g = _group(group)
    view = _device_view(tensor)
    if view is not None:
        reducer(op, view.np_dtype)
        return _pipelined(group, lambda part: (g.all_reduce, (part, op)), view,
                          True, True, async_op)
    arr, after = _as_host(tensor, "all_reduce")
    reducer(op, arr.dtype)   # a dtype the op cannot use fails here, at the call
    return _run(group, g.all_reduce, (arr, op), after, async_op)


def reduce(tensor: Any, dst: int, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
    g = _group(group)
    root = _check_root(g, _group_rank(group, dst), "reduce")
    view = _device_view(tensor)
    if view is not None:
        reducer(op, view.np_dtype)
        return _pipelined(group, lambda part: (g.reduce, (part, root, op)), view, True, g.rank == root, async_op)
    arr, after = _as_host(tensor, "reduce")
    reducer(op, arr.dtype)
    return _run(group, g.reduce, (arr, root, op), after, async_op)


def broadcast(tensor: Any, src: int, group: Any = None, async_op: bool = False) -> Any:
    g = _group(group)
    root = _check_root(g, _group_rank(group, src), "broadcast")
    view = _device_view(tensor)
    if view is not None:
        return _pipelined(group, lambda part: (g.broadcast, (part, root)), view, g.rank == root, g.rank != root,
                          async_op)
    arr, after = _as_host(tensor, "broadcast")
    return _run(group, g.broadcast, (arr, root), after, async_op)


def _check_whole(op: str, whole_name: str, whole: np.ndarray, part_name: str, part: np.ndarray, n: int) -> None:
    """The one-tensor collectives: `whole` holds n parts, each the size and dtype of `part`."""
    if whole.size != part.size * n or whole.dtype != part.dtype:
        raise ValueError(f"[distributed] {op}: {whole_name} {whole.dtype.name}{list(whole.shape)} must hold {n} x "
                         f"{part_name} {part.dtype.name}{list(part.shape)}")


def all_gather_into_tensor(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:  # noqa: A002
    g = _group(group)
    out, after = _as_host(output, "all_gather_into_tensor")
    inp, _ = _as_host(input, "all_gather_into_tensor")
    _check_whole("all_gather_into_tensor", "output", out, "input", inp, g.size)
    return _run(group, g.all_gather, (out, inp), after, async_op)


def all_gather(tensor_list: list, tensor: Any, group: Any = None, async_op: bool = False) -> Any:
    g = _group(group)
    if len(tensor_list) != g.size:
        raise ValueError(f"[distributed] all_gather: tensor_list has {len(tensor_list)} entries, "
                         f"the group has {g.size}")
    inp, _ = _as_host(tensor, "all_gather")
    outs = [_as_host(t, "all_gather") for t in tensor_list]
    for o, _a in outs:
        if o.shape != inp.shape or o.dtype != inp.dtype:
            raise ValueError(f"[distributed] all_gather: every output must be {inp.dtype.name}{list(inp.shape)}, "
                             f"got {o.dtype.name}{list(o.shape)}")
    flat = np.empty(inp.size * g.size, inp.dtype)

    def unpack() -> None:
        for i, (o, a) in enumerate(outs):
            o.reshape(-1)[...] = flat[i * inp.size:(i + 1) * inp.size]
            if a is not None:
                a()
    return _run(group, g.all_gather, (flat, inp), unpack, async_op)


def reduce_scatter_tensor(output: Any, input: Any, op: ReduceOp = ReduceOp.SUM, group: Any = None,  # noqa: A002
                          async_op: bool = False) -> Any:
    g = _group(group)
    out, after = _as_host(output, "reduce_scatter_tensor")
    inp, _ = _as_host(input, "reduce_scatter_tensor")
    _check_whole("reduce_scatter_tensor", "input", inp, "output", out, g.size)
    reducer(op, inp.dtype)
    return _run(group, g.reduce_scatter, (out, inp, op), after, async_op)


def reduce_scatter(output: Any, input_list: list, op: ReduceOp = ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> Any:
    g = _group(group)
    if len(input_list) != g.size:
        raise ValueError(f"[distributed] reduce_scatter: input_list has {len(input_list)} entries, the group has "
                         f"{g.size}")
    out, after = _as_host(output, "reduce_scatter")
    parts = [_as_host(t, "reduce_scatter")[0] for t in input_list]
    _check_chunks("reduce_scatter", "input_list", parts, out, "the output")
    reducer(op, out.dtype)
    flat = np.concatenate([part.reshape(-1) for part in parts])
    return _run(group, g.reduce_scatter, (out, flat, op), after, async_op)


def _check_chunks(what: str, name: str, chunks: list[np.ndarray], like: np.ndarray, like_name: str) -> None:
    for i, chunk in enumerate(chunks):
        if chunk.size != like.size or chunk.dtype != like.dtype:
            raise ValueError(f"[distributed] {what}: {name}[{i}] is {chunk.dtype.name}{list(chunk.shape)}, every "
                             f"entry must match {like_name} {like.dtype.name}{list(like.shape)}")


def gather(tensor: Any, gather_list: list | None = None, dst: int = 0, group: Any = None,
           async_op: bool = False) -> Any:
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
    g = _group(group)
    root = _check_root(g, _group_rank(group, src), "scatter")
    out, after = _as_host(tensor, "scatter")
    chunks = [_as_host(t, "scatter")[0] for t in scatter_list or []] if g.rank == root else []
    if g.rank == root and len(chunks) != g.size:
        raise ValueError(f"[distributed] scatter: the source needs a scatter_list of {g.size} tensors")
    _check_chunks("scatter", "scatter_list", chunks, out, "the tensor")
    return _run(group, g.scatter, (out, chunks, root), after, async_op)


def all_to_all_single(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:  # noqa: A002
    g = _group(group)
    out, after = _as_host(output, "all_to_all_single")
    inp, _ = _as_host(input, "all_to_all_single")
    if out.shape != inp.shape or out.dtype != inp.dtype or (inp.shape and inp.shape[0] % g.size):
        raise ValueError(f"[distributed] all_to_all_single: input and output must have the same shape, with a first "
                         f"dim divisible by {g.size}; got {list(inp.shape)} and {list(out.shape)}")
    return _run(group, g.all_to_all, (out, inp), after, async_op)


def barrier(group: Any = None, async_op: bool = False) -> Any:
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
    _p2p(tensor, dst, group, "send", False)


def recv(tensor: Any, src: int, group: Any = None, tag: int = 0) -> int:
    _p2p(tensor, src, group, "recv", False)
    return src


def isend(tensor: Any, dst: int, group: Any = None, tag: int = 0) -> Work:
    return _p2p(tensor, dst, group, "send", True)


def irecv(tensor: Any, src: int, group: Any = None, tag: int = 0) -> Work:
    return _p2p(tensor, src, group, "recv", True)


# ---------------------------------------------------------------------------- JSON objects (no pickle)

def broadcast_object(obj: Any, src: int = 0, group: Any = None) -> Any:
    """obj from rank src on every rank; obj must be JSON-serialisable (tg never pickles)."""
    g = _group(group)
    data = json.dumps(obj).encode() if g.rank == _group_rank(group, src) else b""
    n = np.array([len(data)], np.int64)
    broadcast(n, src, group)
    buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(int(n[0]), np.uint8)
    broadcast(buf, src, group)
    return json.loads(buf.tobytes().decode())


def all_gather_object(object_list: list, obj: Any, group: Any = None) -> None:
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


