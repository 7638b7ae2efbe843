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

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tg.distributed.errors import DistributedError
from tg.distributed.process_group import ProcessGroup, ReduceOp, reducer
from tg.distributed.staging import (
    Work,
    _as_host,
    _chain,
    _check_root,
    _device_view,
    _group_rank,
    _pipelined,
    _run,
)
from tg.distributed.startup import (
    GroupMember,
    _group,
    _State,
    bytes_moved,
    destroy_process_group,
    flight_recorder,
    get_backend,
    get_default_backend_for_device,
    get_local_rank,
    get_rank,
    get_world_size,
    group,
    init_process_group,
    is_available,
    is_gloo_available,
    is_initialized,
    is_mpi_available,
    is_nccl_available,
    new_group,
)
from tg.distributed.transport import wire

log = logging.getLogger("tg.distributed")

__all__ = [
    "init_process_group",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "bytes_moved",
    "flight_recorder",
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
    "all_gather_into_tensor_coalesced",
    "group",
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
    "get_default_backend_for_device",
    "is_available",
    "is_gloo_available",
    "is_nccl_available",
    "is_mpi_available",
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


def all_gather_into_tensor_coalesced(outputs: list, inputs: list, group: Any = None,
                                     async_op: bool = False) -> Any:
    """all_gather_into_tensor for several (output, input) pairs of one dtype as one call: one agreement
    among the ranks and one pass of the ring for all of them, not a round trip each (ZeRO-2 gathers its
    buckets so). An input may be the output's own block of this rank (then nothing is copied for it).

    >>> import numpy as np
    >>> import tg.distributed as dist
    >>> dist.init_process_group()                  # no launcher: a one-rank job
    >>> outs = [np.zeros(2), np.zeros(3)]
    >>> dist.all_gather_into_tensor_coalesced(outs, [np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])])
    >>> [o.tolist() for o in outs]
    [[1.0, 2.0], [3.0, 4.0, 5.0]]
    >>> dist.destroy_process_group()
    """
    what = "all_gather_into_tensor_coalesced"
    if not isinstance(outputs, (list, tuple)) or not isinstance(inputs, (list, tuple)) or \
            len(outputs) != len(inputs) or not outputs:
        raise ValueError(f"[distributed] {what}: expected two lists of the same non-zero length (outputs, "
                         f"inputs), got {type(outputs).__name__} and {type(inputs).__name__} of "
                         f"{len(outputs) if isinstance(outputs, (list, tuple)) else '?'} and "
                         f"{len(inputs) if isinstance(inputs, (list, tuple)) else '?'}")
    g = _group(group)
    outs = [_as_host(o, what) for o in outputs]
    ins = [_as_host(i, what)[0] for i in inputs]
    for (out, _), inp in zip(outs, ins):
        _check_whole(what, "output", out, "input", inp, g.size)
    if len({out.dtype for out, _ in outs}) > 1:
        names = sorted({wire.dtype_name(out.dtype) for out, _ in outs})
        raise ValueError(f"[distributed] {what}: the pairs must share one dtype, got {names}; make one call "
                         f"per dtype")
    after = _chain(*[a for _, a in outs])
    return _run(group, g.all_gather, ([out for out, _ in outs], ins), after, async_op)


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


