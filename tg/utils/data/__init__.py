"""torch.utils.data's place in tg: datasets, samplers, ``default_collate`` and the one ``DataLoader``.

    >>> import numpy as np
    >>> from tg.utils.data import DataLoader, TensorDataset
    >>> ds = TensorDataset(np.arange(10, dtype=np.float32), np.arange(10) % 2)
    >>> len(ds), ds[3]
    (10, (np.float32(3.0), np.int64(1)))
    >>> [(x.tolist(), y.tolist()) for x, y in DataLoader(ds, batch_size=4)]
    [([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 1]), ([4.0, 5.0, 6.0, 7.0], [0, 1, 0, 1]), ([8.0, 9.0], [0, 1])]

How a batch is made, for index array ``idx`` (a slice of the sampler's order, or one list from a
``batch_sampler``):

- fast path, with the default collate: a ``TensorDataset``, a numpy array or a ``Subset`` of them is
  indexed once with the whole ``idx`` (``[a[idx] for a in columns]``), no per-item work;
- otherwise the items ``dataset.__getitems__(idx)`` (torch's batched hook) or
  ``[dataset[i] for i in idx]`` go through ``collate_fn`` (``default_collate`` by default).

``num_workers > 0`` starts that many worker processes (a ``fork`` context: the dataset is inherited,
never pickled). Batch ``i`` is loaded by worker ``i % num_workers``, at most ``prefetch_factor`` per
worker ahead, and batches come back in the sampler's order. A worker sends its batch (numpy arrays,
Python numbers, strings, and tuples/lists/dicts of them) over a pipe as a JSON header describing the
structure, then each array's raw bytes; the main process makes the Tensors. Nothing is pickled, so
items must be made of those types: others (tg Tensors included: use numpy in ``__getitem__``) raise a
TypeError, and ``num_workers=0`` handles arbitrary objects. A worker's exception is raised again in the
main process, of the same builtin type where it has one, naming the worker and the batch.
``pin_memory`` is accepted and does nothing (batches are host arrays until a kernel reads them).

An ``IterableDataset`` is iterated instead (no sampler: ``shuffle=True``, ``sampler`` and
``batch_sampler`` raise ValueError): ``batch_size`` items at a time are collated (``drop_last`` drops a
short last batch), or each item is given as it is with ``batch_size=None``. With workers, each forked
worker iterates its own copy of the dataset (``get_worker_info()`` tells it its id, the number of
workers, its seed and that copy, to split the work), and their batches come round-robin, a finished
worker dropping out, as in torch; the same pipes carry them. ``len(loader)`` needs the dataset's
``__len__`` (TypeError otherwise).
"""
from __future__ import annotations

import bisect
import builtins
import json
import math
import multiprocessing as mp
import numbers
import random
import sys
import traceback
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg.utils.data.distributed import DistributedSampler
from tg.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    _check_int,
    _EpochPosition,
    _is_int,
    _numpy_rng,
)

__all__ = [
    "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset", "random_split",
    "Sampler", "SequentialSampler", "RandomSampler", "BatchSampler", "DataLoader", "default_collate",
    "get_worker_info", "DistributedSampler",
]


# ---------------------------------------------------------------------------------------------- datasets

class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and usually ``__len__``.

        >>> class Squares(Dataset):
        ...     def __len__(self):
        ...         return 4
        ...     def __getitem__(self, i):
        ...         return i * i
        >>> ds = Squares() + Squares()
        >>> len(ds), ds[5]
        (8, 1)
    """

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(f"[data] {type(self).__name__}: subclasses of Dataset define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """An iterable-style dataset: subclasses define ``__iter__``. A DataLoader iterates it (no sampler),
    batching what it yields; with ``num_workers > 0`` every worker iterates its own copy, so a dataset
    that should not repeat its items splits the work with ``get_worker_info()``:

        >>> class Range(IterableDataset):
        ...     def __init__(self, n):
        ...         self.n = n
        ...     def __iter__(self):
        ...         info = get_worker_info()    # None in the main process
        ...         start, step = (0, 1) if info is None else (info.id, info.num_workers)
        ...         return iter(range(start, self.n, step))
        >>> [b.tolist() for b in DataLoader(Range(5), batch_size=2)]
        [[0, 1], [2, 3], [4]]
        >>> list(Range(2) + Range(3))
        [0, 1, 0, 1, 2]
    """

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"[data] {type(self).__name__}: subclasses of IterableDataset define "
                                  "__iter__")

    def __getitem__(self, index: Any) -> Any:
        raise TypeError(f"[data] {type(self).__name__} is an IterableDataset: iterate it, it has no "
                        "__getitem__")

    def __add__(self, other: Dataset) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


class ChainDataset(IterableDataset):
    """Iterable datasets one after another (torch's ChainDataset); its length is the sum of theirs,
    when they all have one.

        >>> list(ChainDataset([range(2), "ab"])), len(ChainDataset([range(2), "ab"]))
        ([0, 1, 'a', 'b'], 4)
    """

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = list(datasets)

    def __iter__(self) -> Iterator[Any]:
        for dataset in self.datasets:
            yield from dataset

    def __len__(self) -> int:
        sizes = []
        for dataset in self.datasets:
            if not isinstance(dataset, Sized):
                raise TypeError(f"[data] ChainDataset: len() needs every dataset's __len__, "
                                f"{type(dataset).__name__} has none")
            sizes.append(len(dataset))
        return sum(sizes)


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a DataLoader worker: its ``id`` (0..num_workers-1), the
    number of workers, its ``seed`` (the loader's base seed + id; Python's ``random`` is seeded with it)
    and the worker's own copy of the ``dataset``."""
    id: int
    num_workers: int
    seed: int
    dataset: Any


_WORKER_INFO: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its ``WorkerInfo`` (id, num_workers, seed, dataset); None in the
    main process. An IterableDataset's ``__iter__`` uses it to give each worker its share.

        >>> get_worker_info() is None
        True
    """
    return _WORKER_INFO


class TensorDataset(Dataset):
    """Rows of tensors (tg Tensors or numpy arrays) sharing their first dimension; item ``i`` is the
    tuple ``(t[i] for t in tensors)``. A DataLoader fetches a whole batch of rows with one index array.

        >>> import numpy as np
        >>> ds = TensorDataset(np.arange(6).reshape(3, 2), np.array([7, 8, 9]))
        >>> len(ds), [a.tolist() for a in ds[1]]
        (3, [[2, 3], 8])
    """

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("[data] TensorDataset: expected at least one tensor, got none")
        arrays = [t if isinstance(t, np.ndarray) else _host(t, "TensorDataset") for t in tensors]
        if any(a.ndim == 0 for a in arrays) or len({a.shape[0] for a in arrays}) > 1:
            raise ValueError(f"[data] TensorDataset: tensors must share their first dimension, got shapes "
                             f"{[a.shape for a in arrays]}; pass one row per example in each")
        self.tensors = tensors
        self._arrays = arrays  # host copies: the loader's batch fetch and its workers read these

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return int(self._arrays[0].shape[0])

    def _fetch_batch(self, indices: np.ndarray) -> list[np.ndarray]:
        return [a[indices] for a in self._arrays]  # a list, as default_collate gives for tuples


def _host(tensor: Any, who: str) -> np.ndarray:
    if hasattr(tensor, "numpy") and hasattr(tensor, "lazydata"):
        return tensor.numpy()
    raise TypeError(f"[data] {who}: expected tg Tensors or numpy arrays, got {type(tensor).__name__}; "
                    "wrap data with np.asarray or tg.Tensor")


class ConcatDataset(Dataset):
    """Datasets one after another: index ``len(a)`` is ``b[0]``.

        >>> ds = ConcatDataset([[1, 2, 3], [4, 5]])
        >>> len(ds), ds[3], ds[-1]
        (5, 4, 5)
    """

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("[data] ConcatDataset: expected at least one dataset, got none")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise TypeError("[data] ConcatDataset: IterableDatasets have no index; chain them with "
                            "ChainDataset instead")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]).tolist())

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise IndexError(f"[data] ConcatDataset: index {index} out of range for length {len(self)}")
            index += len(self)
        part = bisect.bisect_right(self.cumulative_sizes, index)
        if part == len(self.datasets):
            raise IndexError(f"[data] ConcatDataset: index {index} out of range for length {len(self)}")
        return self.datasets[part][index - (self.cumulative_sizes[part - 1] if part else 0)]


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order.

        >>> ds = Subset([10, 11, 12, 13], [3, 0])
        >>> len(ds), ds[0], ds[1]
        (2, 13, 10)
    """

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Any, lengths: Sequence[int | float], generator: Any = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random Subsets of the given lengths, or of fractions that
    sum to 1 (torch's rule: each ``floor(n * fraction)``, the remainder one by one from the first).
    ``generator`` is as for ``RandomSampler`` (an int seed makes the split repeatable).

        >>> a, b = random_split(range(10), [0.7, 0.3], generator=0)
        >>> len(a), len(b), sorted(list(a) + list(b)) == list(range(10))
        (7, 3, True)
    """
    n = len(dataset)
    sizes = list(lengths)
    if sizes and math.isclose(sum(sizes), 1) and sum(sizes) <= 1:
        counts = [int(math.floor(n * f)) for f in sizes]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    elif all(_is_int(s) and s >= 0 for s in sizes):
        counts = [int(s) for s in sizes]
    else:
        raise ValueError(f"[data] random_split: lengths must be ints >= 0 or fractions summing to 1, "
                         f"got {sizes}")
    if sum(counts) != n:
        raise ValueError(f"[data] random_split: lengths sum to {sum(counts)}, the dataset has {n} items; "
                         "pass lengths that add up to len(dataset)")
    order = _numpy_rng(generator, "random_split").permutation(n).tolist()
    ends = np.cumsum(counts).tolist()
    return [Subset(dataset, order[end - count:end]) for count, end in zip(counts, ends)]


# ---------------------------------------------------------------------------------------------- samplers


# ---------------------------------------------------------------------------------------------- collate

# torch's default_collate: bools -> bool, ints -> int64, floats -> float64 (not the default dtype)
_NUMBER_DTYPES: tuple[tuple[type, type], ...] = (
    (bool, np.bool_), (numbers.Integral, np.int64), (float, np.float64),
)


def _collate_numpy(batch: Sequence[Any]) -> Any:
    """default_collate's rules with numpy arrays where torch makes tensors (workers run this)."""
    elem = batch[0]
    if hasattr(elem, "lazydata") and hasattr(elem, "numpy"):  # a tg Tensor
        return _stack([t.numpy() for t in batch])
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        if elem.dtype.kind in "OSUV":
            raise TypeError(f"[data] default_collate: numpy arrays of dtype {elem.dtype} cannot become "
                            "Tensors; pass a collate_fn")
        return _stack([np.asarray(a) for a in batch])
    for kind, dtype in _NUMBER_DTYPES:
        if isinstance(elem, kind):
            return np.array(batch, dtype=dtype)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, (Mapping, Sequence)):
        return _collate_fields(elem, batch)
    raise TypeError(f"[data] default_collate: a batch must hold Tensors, numpy arrays, numbers, strings, "
                    f"dicts or lists/tuples of them, got {type(elem).__name__}; pass a collate_fn")


def _collate_fields(elem: Any, batch: Sequence[Any]) -> Any:
    """Dicts per key, namedtuples per field, other sequences per position (a tuple gives a list)."""
    kind: Any = type(elem)
    if isinstance(elem, Mapping):
        merged = {key: _collate_numpy([d[key] for d in batch]) for key in elem}
        try:
            return kind(merged)
        except TypeError:
            return merged
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return kind(*(_collate_numpy(list(field)) for field in zip(*batch)))
    if len({len(item) for item in batch}) > 1:
        raise ValueError(f"[data] default_collate: items of the batch have lengths "
                         f"{[len(item) for item in batch]}; each element in the batch should be of "
                         "equal size (pad them, or pass a collate_fn)")
    fields = [_collate_numpy(list(field)) for field in zip(*batch)]
    if isinstance(elem, tuple):
        return fields  # torch gives a list for tuples too
    try:
        return kind(fields)
    except TypeError:
        return fields


def _convert_numpy(item: Any) -> Any:
    """An unbatched item (``batch_size=None``) as torch's default_convert leaves it: numpy scalars become
    0-d arrays (then Tensors), containers are walked, everything else stays as it is."""
    if isinstance(item, np.generic) and not isinstance(item, (np.str_, np.bytes_)):
        return np.asarray(item)
    if isinstance(item, Mapping):
        return {key: _convert_numpy(value) for key, value in item.items()}
    if isinstance(item, (list, tuple)) and not hasattr(item, "_fields"):
        return type(item)(_convert_numpy(value) for value in item)
    return item


def _stack(arrays: list[np.ndarray]) -> np.ndarray:
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"[data] default_collate: items have shapes {sorted({a.shape for a in arrays})}; "
                         "stacking needs one shape (pad or crop them, or pass a collate_fn)")
    return np.stack(arrays)


def _to_tensors(tree: Any) -> Any:
    from tg.core.tensor import Tensor  # lazy: importing tg.utils.data (or tg.distributed) loads no core

    def convert(node: Any) -> Any:
        if isinstance(node, np.ndarray):
            return Tensor(node)
        if isinstance(node, Mapping):
            mapping: Any = type(node)
            return mapping({k: convert(v) for k, v in node.items()})
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*(convert(v) for v in node))
        if isinstance(node, (list, tuple)):
            return type(node)(convert(v) for v in node)
        return node

    return convert(tree)


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of items into a batch, following torch's documented ``default_collate``: Tensors
    and numpy arrays are stacked into a Tensor (a new first dimension), Python ints become an int64
    Tensor, floats a float64 Tensor (torch's choice, not the default dtype), bools a bool Tensor;
    strings stay a list; dicts are collated per key, namedtuples per field, and tuples/lists are
    transposed and collated per position (a tuple gives a list, as in torch).

        >>> b = default_collate([(1, 0.5, "a"), (2, 1.5, "b")])
        >>> [b[0].dtype.name, b[1].dtype.name], b[0].tolist(), b[1].tolist(), b[2]
        (['int64', 'float64'], [1, 2], [0.5, 1.5], ['a', 'b'])
        >>> d = default_collate([{"x": [1.0, 2.0]}, {"x": [3.0, 4.0]}])
        >>> [t.tolist() for t in d["x"]]
        [[1.0, 3.0], [2.0, 4.0]]
    """
    return _to_tensors(_collate_numpy(batch))


# ---------------------------------------------------------------------------------------------- worker wire

_NOT_SENDABLE = ("cannot send {kind} from a DataLoader worker without pickle; items must be numpy "
                 "arrays, numbers, strings or tuples/lists/dicts of them (convert tg Tensors with .numpy() "
                 "in __getitem__), or use num_workers=0, which handles arbitrary objects")


def _encode(node: Any, arrays: list[np.ndarray]) -> Any:
    """A JSON-able description of ``node`` whose arrays are appended to ``arrays`` (sent as raw bytes)."""
    if isinstance(node, (np.ndarray, np.generic)):
        array = np.ascontiguousarray(node).reshape(np.shape(node))  # ascontiguousarray makes 0-d 1-d
        if array.dtype.kind in "OV":
            raise TypeError("[data] " + _NOT_SENDABLE.format(kind=f"a numpy array of dtype {array.dtype}"))
        arrays.append(array)
        return {"a": len(arrays) - 1, "scalar": isinstance(node, np.generic)}
    if node is None or isinstance(node, (bool, int, float, str)):
        return {"v": node}
    if isinstance(node, tuple):
        return {"t": [_encode(v, arrays) for v in node]}
    if isinstance(node, list):
        return {"l": [_encode(v, arrays) for v in node]}
    if isinstance(node, dict):
        if not all(k is None or isinstance(k, (bool, int, float, str)) for k in node):
            keys = "a dict with keys other than str/int/float"
            raise TypeError("[data] " + _NOT_SENDABLE.format(kind=keys))
        return {"k": list(node), "d": [_encode(v, arrays) for v in node.values()]}
    raise TypeError("[data] " + _NOT_SENDABLE.format(kind=f"a value of type {type(node).__name__}"))


def _decode(spec: dict[str, Any], arrays: list[np.ndarray]) -> Any:
    if "a" in spec:
        array = arrays[spec["a"]]
        return array[()] if spec["scalar"] else array
    if "v" in spec:
        return spec["v"]
    if "t" in spec:
        return tuple(_decode(s, arrays) for s in spec["t"])
    if "l" in spec:
        return [_decode(s, arrays) for s in spec["l"]]
    return {k: _decode(s, arrays) for k, s in zip(spec["k"], spec["d"])}


def _send(conn: Any, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
    header["arrays"] = [[a.dtype.str, list(a.shape)] for a in arrays]
    conn.send_bytes(json.dumps(header).encode())
    for array in arrays:
        conn.send_bytes(array.reshape(-1).view(np.uint8))


# a task for an iterable dataset's worker: [batch number, one of these]
_NEXT, _RESTART = -1, -2
_END = object()  # what receive() gives when a worker's iterable dataset is exhausted


def _worker_fetch(loader: DataLoader, payload: np.ndarray, stream: list[Iterator[Any]]) -> Any:
    """One task's batch: the indices' items, or the next batch of ``stream`` (restarted when asked)."""
    if not loader._iterable:
        return loader._load(payload)
    if not stream or payload[0] == _RESTART:
        stream[:] = [iter(loader.dataset)]
    return loader._load_next(stream[0])


def _worker_start(loader: DataLoader, worker_id: int, base_seed: int) -> tuple[Exception, str] | None:
    """Set what get_worker_info() returns and seed Python's random (as torch does), then run
    worker_init_fn; its exception, if any, is reported with the first batch, as the batch's error."""
    global _WORKER_INFO
    _WORKER_INFO = WorkerInfo(worker_id, loader.num_workers, base_seed + worker_id, loader.dataset)
    random.seed(base_seed + worker_id)
    try:
        if loader.worker_init_fn is not None:
            loader.worker_init_fn(worker_id)
    except Exception as e:
        return e, traceback.format_exc()
    return None


def _worker_loop(loader: DataLoader, worker_id: int, conn: Any, inherited: list[Any], base_seed: int) -> None:
    """A worker process: receive ``batch number + int64 indices`` (map-style) or ``batch number + _NEXT or
    _RESTART`` (iterable: the next batch of this worker's own pass over its copy of the dataset), send the
    loaded batch back."""
    for other in inherited:  # the parent's pipe ends, closed here so that only the parent holds them
        other.close()
    init_error = _worker_start(loader, worker_id, base_seed)
    stream: list[Iterator[Any]] = []  # this worker's pass over an iterable dataset
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not task:
            return
        batch_no = int(np.frombuffer(task, np.int64, count=1)[0])
        payload = np.frombuffer(task, np.int64, offset=8)
        arrays: list[np.ndarray] = []
        try:
            if init_error is not None:
                raise init_error[0]
            header: dict[str, Any] = {"batch": batch_no,
                                      "tree": _encode(_worker_fetch(loader, payload, stream), arrays)}
        except StopIteration:
            header = {"batch": batch_no, "end": True}
        except Exception as e:
            trace = init_error[1] if init_error is not None else traceback.format_exc()
            header, arrays = {"batch": batch_no, "error": type(e).__name__, "message": str(e),
                              "traceback": trace}, []
        try:
            _send(conn, header, arrays)
        except (BrokenPipeError, OSError):
            return


class _Message(str):
    """KeyError shows its argument's repr; this one reads as the plain text (newlines kept)."""

    def __repr__(self) -> str:
        return str(self)


class _WorkerPool:
    """``num_workers`` forked processes, each with a duplex pipe; tasks go to worker ``batch % n``."""

    def __init__(self, loader: DataLoader) -> None:
        context = mp.get_context("fork")  # fork: the dataset is inherited, so nothing is pickled
        self.timeout = loader.timeout
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        base_seed = int(_numpy_rng(loader.generator, "DataLoader").integers(0, 2 ** 62))
        for worker_id in range(loader.num_workers):
            mine, theirs = context.Pipe(duplex=True)
            proc = context.Process(target=_worker_loop,
                                   args=(loader, worker_id, theirs, [*self.conns, mine], base_seed),
                                   daemon=True, name=f"tg-data-worker-{worker_id}")
            proc.start()
            theirs.close()  # only the worker holds its end, so its death is an EOF here
            self.conns.append(mine)
            self.procs.append(proc)

    def submit(self, batch_no: int, indices: np.ndarray, worker: int | None = None) -> None:
        """Send a task to ``worker`` (default ``batch_no % num_workers``)."""
        task = np.concatenate([np.array([batch_no], np.int64), np.asarray(indices, np.int64)])
        self.conns[batch_no % len(self.conns) if worker is None else worker].send_bytes(task.view(np.uint8))

    def receive(self, batch_no: int, worker: int | None = None) -> Any:
        """The loaded batch from ``worker`` (default ``batch_no % num_workers``), or ``_END``."""
        worker = batch_no % len(self.conns) if worker is None else worker
        conn, proc = self.conns[worker], self.procs[worker]
        if self.timeout > 0 and not conn.poll(self.timeout):
            raise RuntimeError(f"[data] DataLoader: worker {worker} (pid {proc.pid}) gave no batch "
                               f"{batch_no} within timeout={self.timeout}s; raise timeout= or make "
                               "loading faster")
        try:
            header = json.loads(conn.recv_bytes())
            arrays = []
            for dtype, shape in header["arrays"]:
                array = np.empty(shape, np.dtype(dtype))
                conn.recv_bytes_into(array.reshape(-1).view(np.uint8))
                arrays.append(array)
        except (EOFError, ConnectionError):
            proc.join(1.0)
            raise RuntimeError(f"[data] DataLoader: worker {worker} (pid {proc.pid}) exited unexpectedly "
                               f"(exit code {proc.exitcode}) while loading batch {batch_no}; was it killed "
                               "(out of memory)? Try num_workers=0 to see the error directly") from None
        if "error" in header:
            message = (f"[data] DataLoader worker {worker} raised {header['error']} while loading batch "
                       f"{batch_no}: {header['message']}\n\nWorker traceback:\n{header['traceback']}")
            kind = getattr(builtins, header["error"], None)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            try:
                error = kind(_Message(message) if kind is KeyError else message)
            except Exception:
                error = RuntimeError(message)
            raise error
        return _END if header.get("end") else _decode(header["tree"], arrays)

    def discard(self, batch_nos: Iterable[int], worker: int | None = None) -> None:
        """Receive and drop answers nobody will read (a persistent pool's, at the end of a pass)."""
        for batch_no in batch_nos:
            try:
                self.receive(batch_no, worker)
            except Exception:
                pass

    def close(self) -> None:
        """Stop every worker: a stop message for an idle one, a closed pipe for one blocked sending."""
        for conn in self.conns:
            try:
                conn.send_bytes(b"")
            except OSError:
                pass
            conn.close()
        for proc in self.procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
        self.conns, self.procs = [], []

    def __del__(self) -> None:
        if self.conns:
            self.close()


# ---------------------------------------------------------------------------------------------- loader

class DataLoader(_EpochPosition):
    """Batches of a dataset in the order of a sampler, with torch's ``DataLoader`` arguments.

    ``dataset`` is map-style: ``__getitem__`` and ``__len__`` (a list, a numpy array, a Dataset), or an
    ``IterableDataset`` (see the module docstring).
    The order is ``sampler`` (any sized iterable of indices), else a ``RandomSampler(dataset,
    generator=generator)`` with ``shuffle`` (a new order each epoch, repeatable with a seeded
    ``generator``), else ``0..len-1``; cut into ``batch_size`` pieces (dropping a short last one with
    ``drop_last``), or given as lists by ``batch_sampler``. Each batch is
    ``collate_fn([dataset[i] for i in batch])``, with ``default_collate`` making Tensors when
    ``collate_fn`` is None; see the module docstring for the whole-batch fast path and for
    ``num_workers`` (real worker processes, ``prefetch_factor`` batches ahead each, kept between
    epochs with ``persistent_workers``; ``worker_init_fn(worker_id)`` runs first in each; ``timeout``
    seconds to wait for a batch, 0 for ever). ``pin_memory`` is accepted and does nothing.

        >>> import numpy as np
        >>> loader = DataLoader(list(range(10)), batch_size=4, drop_last=True)
        >>> [b.tolist() for b in loader], len(loader), len(loader.dataset)
        ([[0, 1, 2, 3], [4, 5, 6, 7]], 2, 10)
        >>> batches = DataLoader(np.arange(10), batch_size=5, shuffle=True, generator=0)
        >>> sorted(sum((b.tolist() for b in batches), []))
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]

    ``state_dict()`` counts the batches yielded in this epoch; after ``load_state_dict`` the next
    iteration skips them without reading them (resuming the same order needs a sampler whose order
    depends only on the epoch, like DistributedSampler: call ``set_epoch`` before each epoch).
    """

    _COUNT_KEY = "batches"

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0, collate_fn: Callable | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None, generator: Any = None,
                 persistent_workers: bool = False, prefetch_factor: int | None = None) -> None:
        super().__init__()
        who = f"{self._PREFIX} DataLoader"
        self._iterable = isinstance(dataset, IterableDataset)
        if not self._iterable and not hasattr(dataset, "__getitem__"):
            raise TypeError(f"{who}: expected a map-style dataset with __len__ and __getitem__, got "
                            f"{type(dataset).__name__}; for a stream of items subclass IterableDataset")
        self.dataset = dataset
        if self._iterable:
            self._check_iterable_args(shuffle, sampler, batch_sampler)
        self.batch_size = None if batch_size is None and self._iterable else \
            _check_int(who, "batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(f"{who}: batch_sampler is mutually exclusive with batch_size, shuffle, "
                                 "sampler and drop_last; leave those at their defaults")
            if not isinstance(batch_sampler, Sized):
                raise TypeError(f"{who}: the batch_sampler must have __len__, got "
                                f"{type(batch_sampler).__name__}")
        if not self._iterable:  # an iterable dataset has no sampler: its own order
            sampler = self._map_sampler(dataset, shuffle, sampler, generator)
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self._set_worker_args(num_workers, prefetch_factor, persistent_workers, timeout)
        self.worker_init_fn, self.pin_memory = worker_init_fn, bool(pin_memory)
        self._custom_collate = collate_fn is not None
        self.collate_fn: Callable = default_collate if collate_fn is None else collate_fn
        self._batch_fetch = None if self._custom_collate else self._batch_fetcher(dataset)
        self._pool: _WorkerPool | None = None

    def _map_sampler(self, dataset: Any, shuffle: bool, sampler: Any, generator: Any) -> Any:
        who = f"{self._PREFIX} DataLoader"
        if sampler is None:
            if not isinstance(dataset, Sized):
                raise TypeError(f"{who}: expected a dataset with __len__ and __getitem__, got "
                                f"{type(dataset).__name__}; give it __len__ or pass a sampler")
            return RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if shuffle:
            raise ValueError(f"{who}: got both a sampler and shuffle=True; shuffle in the sampler "
                             "(DistributedSampler(..., shuffle=True)) and leave shuffle=False here")
        if not isinstance(sampler, Sized):
            raise TypeError(f"{who}: the sampler must have __len__, got {type(sampler).__name__}")
        return sampler

    def _check_iterable_args(self, shuffle: Any, sampler: Any, batch_sampler: Any) -> None:
        """torch's rules for an IterableDataset: its own order, so no shuffle and no sampler."""
        who = f"{self._PREFIX} DataLoader"
        if shuffle:
            raise ValueError(f"{who}: an IterableDataset gives its own order, got shuffle={shuffle!r}; "
                             "shuffle inside the dataset's __iter__ and leave shuffle unset")
        if sampler is not None or batch_sampler is not None:
            raise ValueError(f"{who}: an IterableDataset takes no sampler or batch_sampler (it has no "
                             "indices); split the work in __iter__ with get_worker_info() instead")

    def _set_worker_args(self, num_workers: int, prefetch_factor: int | None, persistent_workers: bool,
                         timeout: float) -> None:
        who = f"{self._PREFIX} DataLoader"
        self.num_workers = _check_int(who, "num_workers", num_workers, 0)
        if self.num_workers == 0 and (prefetch_factor is not None or persistent_workers):
            raise ValueError(f"{who}: prefetch_factor and persistent_workers need num_workers > 0, got "
                             f"num_workers=0; drop them or start workers")
        self.prefetch_factor = _check_int(who, "prefetch_factor", 2 if prefetch_factor is None
                                          else prefetch_factor, 1)
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"{who}: timeout must be a number of seconds >= 0, got {timeout!r}")
        self.timeout, self.persistent_workers = float(timeout), bool(persistent_workers)

    def _batch_fetcher(self, dataset: Any) -> Callable[[np.ndarray], Any] | None:
        """The whole-batch fetch for ``dataset`` (its items already collated, as numpy), or None."""
        if self._iterable:
            return None
        if isinstance(dataset, TensorDataset):
            return dataset._fetch_batch
        if isinstance(dataset, np.ndarray) and dataset.ndim >= 1 and dataset.dtype.kind not in "OSUV":
            return dataset.__getitem__
        if isinstance(dataset, Subset):
            inner = self._batch_fetcher(dataset.dataset)
            if inner is not None:
                positions = np.asarray(dataset.indices, np.int64)
                return lambda idx: inner(positions[idx])
        return None

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self._iterable and not isinstance(self.dataset, Sized):
            raise TypeError(f"{self._PREFIX} DataLoader: len() over an IterableDataset needs the dataset's "
                            f"__len__, and {type(self.dataset).__name__} has none")
        count = len(self.dataset if self._iterable else self.sampler)
        if self.batch_size is None:
            return count
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def _count_limit(self) -> int:
        if self._iterable and not isinstance(self.dataset, Sized):
            return sys.maxsize  # an unknown length: resuming reads and drops the batches to skip
        return len(self)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch for this loader and its sampler (a DistributedSampler reshuffles with
        ``seed + epoch``)."""
        super().set_epoch(epoch)
        for sampler in (self.sampler, getattr(self.batch_sampler, "sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)

    def _dealt(self) -> Any:
        """The sampler when it deals a shared order out among ranks from any point (DistributedSampler),
        else None."""
        sampler = self.sampler if self.batch_sampler is None and self.batch_size is not None else None
        return sampler if callable(getattr(sampler, "consumed", None)) else None

    def state_dict(self) -> dict[str, int]:
        """The epoch and the batches yielded in it; over a DistributedSampler also ``samples``, how much
        of the epoch's order every rank's loader took together, which resumes at any world size."""
        state = super().state_dict()
        sampler = self._dealt()
        if sampler is not None:     # the sampler's epoch: torch's idiom calls sampler.set_epoch, not ours
            state.update(epoch=sampler.epoch, samples=sampler.consumed(self._done * self.batch_size))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` says: skip the batches yielded, or over a DistributedSampler, deal out
        the rest of the epoch from ``samples`` among this loader's ranks (as many as saved, or not)."""
        sampler = self._dealt()
        if sampler is None or not isinstance(state, dict) or "samples" not in state:
            super().load_state_dict(state)
            return
        super().load_state_dict({k: (0 if k == self._COUNT_KEY else v) for k, v in state.items()
                                 if k != "samples"})
        sampler.load_state_dict({"epoch": self.epoch, "consumed": state["samples"]})

    def _index_batches(self, start: int) -> Iterator[np.ndarray]:
        """The epoch's batches of indices from batch ``start`` on (skipped ones are never read)."""
        if self.batch_sampler is not None:
            lists = iter(self.batch_sampler)
            for _ in range(start):
                next(lists, None)
            return (np.asarray(b, np.int64) for b in lists)
        if callable(getattr(self.sampler, "indices", None)):
            order = self.sampler.indices()  # not iter(): the loader, not the sampler, tracks the position
        else:
            order = np.fromiter(self.sampler, dtype=np.int64)
        size = self.batch_size
        return (order[b * size:(b + 1) * size] for b in range(start, len(self)))

    def _load(self, indices: np.ndarray) -> Any:
        """What a worker (or the main process) reads for one batch: the numpy-collated batch, or the
        raw items when a custom collate_fn will merge them in the main process."""
        if self._batch_fetch is not None:
            return self._batch_fetch(indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        items = getitems(indices.tolist()) if getitems else [self.dataset[i] for i in indices.tolist()]
        return items if self._custom_collate else _collate_numpy(items)

    def _load_next(self, items: Iterator[Any]) -> Any:
        """The next batch of an iterable dataset from its iterator ``items`` (a worker's or the main
        process's): ``batch_size`` items (fewer at the end, none with ``drop_last``) collated, or one
        item as it is with ``batch_size=None``. Raises StopIteration at the end."""
        if self.batch_size is None:
            item = next(items)
            return item if self._custom_collate else _convert_numpy(item)
        batch = []
        for item in items:
            batch.append(item)
            if len(batch) == self.batch_size:
                break
        if not batch or (self.drop_last and len(batch) < self.batch_size):
            raise StopIteration
        return batch if self._custom_collate else _collate_numpy(batch)

    def _finish(self, loaded: Any) -> Any:
        """The main process's part: a custom collate_fn, or making the caller's Tensors."""
        return self.collate_fn(loaded) if self._custom_collate else self._output(loaded)

    def _output(self, batch: Any) -> Any:
        """The numpy batch as the caller gets it: Tensors."""
        return _to_tensors(batch)

    def __iter__(self) -> Iterator[Any]:
        if self._iterable:
            return self._stream(self._begin())
        if (sampler := self._dealt()) is not None:
            sampler.begin_pass()
        batches = self._index_batches(self._begin())
        return self._serial(batches) if self.num_workers == 0 else self._parallel(batches)

    def _stream(self, skip: int) -> Iterator[Any]:
        """An iterable dataset's batches, the first ``skip`` read and dropped (a resumed epoch)."""
        loaded = self._stream_serial() if self.num_workers == 0 else self._stream_parallel()
        try:
            for count, batch in enumerate(loaded):
                if count < skip:
                    continue
                batch = self._finish(batch)
                self._done += 1
                yield batch
        finally:
            loaded.close()

    def _stream_serial(self) -> Generator[Any, None, None]:
        items = iter(self.dataset)
        while True:
            try:
                loaded = self._load_next(items)
            except StopIteration:
                return
            yield loaded

    def _stream_parallel(self) -> Generator[Any, None, None]:
        """Every worker iterates its own copy of the dataset; their batches come round-robin (worker 0's
        first, worker 1's first, ...), an exhausted worker dropping out, as in torch."""
        pool = self._pool if self._pool is not None else _WorkerPool(self)
        if self.persistent_workers:
            self._pool = pool
        asked = [0] * self.num_workers  # batches asked of each worker, per-worker numbers
        got = [0] * self.num_workers

        def ask(worker: int, restart: bool = False) -> None:
            pool.submit(asked[worker], np.array([_RESTART if restart else _NEXT]), worker)
            asked[worker] += 1

        try:
            for worker in range(self.num_workers):
                for k in range(self.prefetch_factor):
                    ask(worker, restart=k == 0)  # a persistent worker starts a new pass each epoch
            active, turn = list(range(self.num_workers)), 0
            while active:
                worker = active[turn % len(active)]
                loaded = pool.receive(got[worker], worker)
                got[worker] += 1
                if loaded is _END:
                    active.remove(worker)  # the next worker moved into this turn
                    continue
                ask(worker)
                turn += 1
                yield loaded
        finally:
            if pool is not self._pool:
                pool.close()
            else:  # a persistent pool must not keep stale answers
                for worker in range(self.num_workers):
                    pool.discard(range(got[worker], asked[worker]), worker)

    def _serial(self, batches: Iterator[np.ndarray]) -> Iterator[Any]:
        for indices in batches:
            batch = self._finish(self._load(indices))
            self._done += 1
            yield batch

    def _parallel(self, batches: Iterator[np.ndarray]) -> Iterator[Any]:
        pool = self._pool if self._pool is not None else _WorkerPool(self)
        if self.persistent_workers:
            self._pool = pool
        sent = received = 0

        def submit_next() -> bool:
            nonlocal sent
            indices = next(batches, None)
            if indices is None:
                return False
            pool.submit(sent, indices)
            sent += 1
            return True

        try:
            while sent < self.prefetch_factor * self.num_workers and submit_next():
                pass
            while received < sent:
                loaded = pool.receive(received)
                received += 1
                submit_next()
                batch = self._finish(loaded)
                self._done += 1
                yield batch
        finally:
            if pool is not self._pool:
                pool.close()  # the iterator ended, failed or was dropped: its workers go with it
            else:
                pool.discard(range(received, sent))  # a persistent pool must not keep stale batches

    def __del__(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.close()  # type: ignore[union-attr]
