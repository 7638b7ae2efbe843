"""Devices, buffers and the counters every allocation goes through.

A device is one file `tg/core/runtime/ops_<name>.py` exporting a subclass of `Compiled`; it is
found by its file name, so adding a device edits no other file.

    >>> Device["NUMPY"].name
    'NUMPY'
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import pkgutil
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from tg import config
from tg.core import lower_cache, trace
from tg.core.dtype import DType
from tg.core.lazy import Readers


class GlobalCounters:
    """Process-wide counters: kernels launched, bytes of device buffers alive and at peak."""
    kernel_count: int = 0
    mem_used: int = 0
    mem_peak: int = 0
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    schedules_built: int = 0     # graphs cut into kernels by create_schedule
    schedules_reused: int = 0    # realizes that found their graph's schedule in the cache
    kernels_lowered: int = 0     # kernel ASTs linearized and rendered (a program-cache miss)
    kernels_recalled: int = 0    # program-cache misses whose lowering was on disk (lower_cache)

    @staticmethod
    def reset() -> None:
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
        GlobalCounters.schedules_built = GlobalCounters.schedules_reused = GlobalCounters.kernels_lowered = 0
        GlobalCounters.kernels_recalled = 0
        GlobalCounters.time_sum_s = 0.0
        GlobalCounters.mem_peak = GlobalCounters.mem_used


class Allocator:
    """alloc/free/copyin/copyout of raw bytes on one device, and host staging blocks for it.
    `view_align`: the byte alignment a view of memory (`offset`) must start at."""
    view_align: int = 256

    def __init__(self) -> None:
        self.staged: dict[int, list[np.ndarray]] = {}

    def staging(self, nbytes: int) -> np.ndarray:
        """A host block of nbytes (uint8) to stage this device's data through on its way to and from
        other processes, pinned where the driver can pin, so a collective on device memory costs two
        DMA copies and no allocation. The block goes back to a pool, to be handed out again, once
        neither it nor any array made from it is alive."""
        if nbytes == 0:
            return np.empty(0, dtype=np.uint8)
        free = self.staged.get(nbytes)
        raw = free.pop() if free else self._host_block(nbytes)
        # numpy's views point at the first owner of the memory, which stops at a non-array object: every
        # array made from the block keeps `holder` alive, and its death returns raw to the pool
        holder = (ctypes.c_uint8 * nbytes).from_buffer(raw)  # type: ignore[arg-type]
        weakref.finalize(holder, self.staged.setdefault(nbytes, []).append, raw)
        return np.frombuffer(holder, dtype=np.uint8)  # type: ignore[call-overload]

    def _host_block(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, opaque: Any, nbytes: int) -> None:
        pass

    def release(self) -> int:
        """Free the memory kept for reuse (none here; CachingAllocator keeps blocks); the bytes freed."""
        return 0

    def copyin(self, opaque: Any, src: memoryview, offset: int = 0) -> None:
        """Write src's bytes into the device memory, starting offset bytes in."""
        raise NotImplementedError

    def copyout(self, dest: memoryview, opaque: Any, offset: int = 0) -> None:
        """Fill dest with the device memory's bytes, starting offset bytes in."""
        raise NotImplementedError

    def offset(self, opaque: Any, offset: int, nbytes: int) -> Any:
        """nbytes of the memory `opaque`, from byte `offset` on (a multiple of view_align), as memory of
        its own that shares the bytes (what Buffer.view hands to kernels)."""
        raise NotImplementedError(f"{type(self).__name__} has no views of memory (Buffer.view)")

    def copy(self, dest: Any, src: Any, nbytes: int) -> None:
        """Device-to-device copy of nbytes (benchmarks measure the device's copy bandwidth with it)."""
        raise NotImplementedError(f"{type(self).__name__} has no device-to-device copy")

    def host_array(self, opaque: Any) -> np.ndarray | None:
        """The memory itself as a flat uint8 numpy array when the host can address it, else None."""
        return None


class CachingAllocator(Allocator):
    """Freed blocks are kept per size and handed out again (up to `cache_limit` bytes), so a training
    step reuses warm memory instead of asking the system (or the driver) for fresh blocks every time.
    Subclasses write `_alloc(nbytes)` and may write `_free(opaque)`."""

    def __init__(self, cache_limit: int = 1 << 30):
        super().__init__()
        self.cache: dict[int, list[Any]] = {}
        self.cached_bytes, self.cache_limit = 0, cache_limit

    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def _free(self, opaque: Any) -> None:
        pass

    def alloc(self, nbytes: int) -> Any:
        free = self.cache.get(nbytes)
        if free:
            self.cached_bytes -= nbytes
            return free.pop()
        return self._alloc(nbytes)

    def free(self, opaque: Any, nbytes: int) -> None:
        if nbytes and self.cached_bytes + nbytes <= self.cache_limit:
            self.cache.setdefault(nbytes, []).append(opaque)
            self.cached_bytes += nbytes
        else:
            self._free(opaque)

    def release(self) -> int:
        """Free every block kept for reuse (torch.cuda.empty_cache); the bytes given back."""
        freed, self.cached_bytes = self.cached_bytes, 0
        blocks, self.cache = self.cache, {}
        for free in blocks.values():
            for opaque in free:
                self._free(opaque)
        return freed


class HostAllocator(CachingAllocator):
    """Memory in host RAM held by numpy (CPU, NUMPY); 64-byte aligned for vector loads. A view may
    start at any 4 bytes: the C renderer's vector types are declared aligned(4)."""
    view_align = 4

    def __init__(self) -> None:
        super().__init__()
        # each block's address as a C argument, by id of the block (made once per block: numpy's
        # .ctypes costs microseconds, and a training step hands out the same cached blocks again). The
        # entry holds the block itself and a lookup checks it is the same object: an id is reused once
        # its object dies, and a block that died without _free (a cache dropped whole) would otherwise
        # hand its stale address to whatever object next has its id (a view of other memory: kernels
        # wrote through it into unmapped pages, a SIGSEGV in a later test of the same process)
        self.pointers: dict[int, tuple[np.ndarray, ctypes.c_void_p]] = {}

    def offset(self, opaque: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
        return opaque[offset:offset + nbytes]

    def _alloc(self, nbytes: int) -> np.ndarray:
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        address = raw.ctypes.data
        start = (-address) % 64
        block = raw[start:start + nbytes]
        self.register(block, ctypes.c_void_p(address + start))
        return block

    def register(self, block: np.ndarray, pointer: ctypes.c_void_p) -> None:
        """Remember block's address as a C argument (until _free lets go of the block)."""
        self.pointers[id(block)] = (block, pointer)

    def _free(self, opaque: np.ndarray) -> None:
        self.pointers.pop(id(opaque), None)

    def host_array(self, opaque: np.ndarray) -> np.ndarray:
        return opaque

    def c_pointer(self, opaque: np.ndarray) -> ctypes.c_void_p:
        """The memory's address as a C argument: the one made at allocation, or (a view) from numpy."""
        entry = self.pointers.get(id(opaque))
        return entry[1] if entry is not None and entry[0] is opaque else ctypes.c_void_p(opaque.ctypes.data)

    def copyin(self, opaque: np.ndarray, src: memoryview, offset: int = 0) -> None:
        opaque[offset:offset + src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, opaque: np.ndarray, offset: int = 0) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = opaque[offset:offset + dest.nbytes]


class Buffer:
    """Device memory for `size` elements of `dtype`. Counted in GlobalCounters while alive, except a
    view (`view()`), which shares its owner's memory."""

    def __init__(self, device: str, size: int, dtype: DType, view_of: tuple[Buffer, int] | None = None):
        self.device, self.size, self.dtype = device, size, dtype
        self.nbytes = size * dtype.itemsize
        self.allocator = Device[device].allocator
        # every lazy buffer whose value lives in this memory (an assign's result shares its target's)
        self.aliases = Readers()
        self._buf: Any
        self._c_pointer: Any = None   # the CPU device's C argument for this memory, made at first launch
        self.owner: Buffer | None = None if view_of is None else view_of[0]   # keeps viewed memory alive
        self.view_offset = 0 if view_of is None else view_of[1]             # bytes into owner
        if view_of is not None:
            self._buf = self.allocator.offset(view_of[0]._buf, view_of[1], self.nbytes)
            return
        self._buf = self.allocator.alloc(self.nbytes)
        GlobalCounters.mem_used += self.nbytes
        GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)
        if trace.ON:
            trace.counter("memory", "MiB", GlobalCounters.mem_used / 2**20)

    def view(self, offset: int, size: int, dtype: DType | None = None) -> Buffer:
        """`size` elements of `dtype` (this buffer's by default) of this memory, from byte `offset` on
        (a multiple of the allocator's view_align): a Buffer that shares the bytes, allocates nothing
        and is not counted. Lazy-graph hazards are tracked per Buffer, so whoever writes through one
        of two overlapping buffers computes first what reads the other (ZeRO's flat parameters do).

            >>> from tg.core.dtype import dtypes
            >>> flat = Buffer("NUMPY", 32, dtypes.float32).copyin(np.arange(32, dtype=np.float32))
            >>> flat.view(64, 4).numpy().tolist()
            [16.0, 17.0, 18.0, 19.0]
        """
        dtype = dtype or self.dtype
        if offset % self.allocator.view_align or not 0 <= offset <= self.nbytes - size * dtype.itemsize:
            raise ValueError(f"[core] Buffer.view: {size} x {dtype.name} at byte {offset} of a "
                             f"{self.nbytes}-byte buffer; expected a range inside it starting at a "
                             f"multiple of {self.allocator.view_align}. Fix: align the offset")
        # a view of a view is one of the owner (OpenCL has no sub-buffer of a sub-buffer)
        return Buffer(self.device, size, dtype, view_of=(self.owner or self, self.view_offset + offset))

    def __del__(self) -> None:
        if hasattr(self, "_buf") and self.owner is None:
            GlobalCounters.mem_used -= self.nbytes
            self.allocator.free(self._buf, self.nbytes)
            if trace.ON:
                trace.counter("memory", "MiB", GlobalCounters.mem_used / 2**20)

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"

    def host_array(self) -> np.ndarray | None:
        """This memory itself as a flat uint8 numpy array (no copy: writes reach the buffer), when it is
        host memory (CPU, NUMPY); None for device memory, which copyin / read_into move instead.

            >>> from tg.core.dtype import dtypes
            >>> buf = Buffer("NUMPY", 2, dtypes.float32).copyin(np.array([1.0, 2.0], np.float32))
            >>> buf.host_array().view(np.float32).tolist()
            [1.0, 2.0]
        """
        return self.allocator.host_array(self._buf)

    def copyin(self, data: np.ndarray, offset: int | None = None) -> Buffer:
        """Write data's bytes into this memory: all of it, or a part from byte offset on."""
        data = np.ascontiguousarray(data)
        assert (data.nbytes == self.nbytes if offset is None else 0 <= offset <= self.nbytes - data.nbytes), \
            f"copyin of {data.nbytes} bytes at {offset} into {self.nbytes}"
        # numpy's stubs declare ndarray.__buffer__ only for Python >= 3.12 (mypy checks as 3.11)
        self.allocator.copyin(self._buf, memoryview(data.reshape(-1).view(np.uint8)),  # type: ignore[arg-type]
                              offset or 0)
        return self

    def numpy(self) -> np.ndarray:
        """The raw bits as a flat numpy array of the dtype's host storage type."""
        return self.read_into(np.empty(self.size, dtype=self.dtype.np))

    def read_into(self, out: np.ndarray, offset: int | None = None) -> np.ndarray:
        """Copy the raw bits into out (contiguous, any dtype) and return it: all of this memory, or
        out.nbytes of it from byte offset on."""
        assert out.flags.c_contiguous and (out.nbytes == self.nbytes if offset is None else
                                           0 <= offset <= self.nbytes - out.nbytes), \
            f"read of {out.nbytes} bytes at {offset} from {self.nbytes}"
        if out.nbytes:
            # numpy's stubs: as in copyin
            self.allocator.copyout(memoryview(out.reshape(-1).view(np.uint8)), self._buf,  # type: ignore[arg-type]
                                   offset or 0)
        return out


class Program:
    """A compiled kernel. Called with buffers; returns seconds taken when wait=True. A device's
    program class is built as `program(device, name, binary, src, info)` (see Compiled). `synchronous`:
    a call returns once the kernel has run (so a call timed on the host is the kernel's time)."""
    name: str
    synchronous = False

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        raise NotImplementedError


def split_device(name: str) -> tuple[str, int | None]:
    """("CL", 1) for "cl:1"; ("CUDA", None) for "CUDA" (no index given)."""
    kind, sep, index = str(name).partition(":")
    if not sep:
        return kind.upper(), None
    if not index.isdigit():
        raise ValueError(f"[core] device {name!r}: expected KIND or KIND:N with N a device index "
                         f"(e.g. CL:1), got index {index!r}")
    return kind.upper(), int(index)


class Compiled:
    """One compute device. A backend is one file, runtime/ops_<kind>.py, whose subclass wires the
    parts and nothing else:

    - `allocator`: an Allocator for this device's memory;
    - `renderer`: a CStyleRenderer for the device's dialect (None when the device runs kernel ASTs
      itself, as the NUMPY reference does; it then overrides `lower`);
    - `compiler`: a Compiler from source to a binary file, cached on disk (None: nothing to build);
    - `program`: the Program class, built as `program(device, name, binary_path, src, info)`;
    - `lower_options`: what linearize_for needs to know of the device (vector width, group size);
    - class methods `count()` (devices of this kind here, or raise saying why none) and the class
      attribute `default_preference` (kinds picked when nothing names a device: lowest usable first).

    The registry builds one instance per device name (`CL`, `CL:1`, ...) as `cls(name)`.
    """
    default_preference: int | None = None     # None: never the default unless asked for
    name: str = ""                            # the canonical device name: "CPU", "CL", "CL:1", ...
    allocator: Allocator
    renderer: Any = None
    compiler: Any = None
    program: Any = None
    lower_options: dict[str, Any] = {}

    def __init__(self, name: str):
        self.name = name
        self.index = split_device(name)[1] or 0
        # by source (two kernels that render alike share a build) and by Kernel.key, least recently used
        # first; at most TG_PROGRAM_CACHE each: a schedule or TinyJit that holds a program keeps it alive
        self._programs: OrderedDict[str, Program] = OrderedDict()
        self._by_key: OrderedDict[tuple, Program] = OrderedDict()

    @classmethod
    def count(cls) -> int:
        """How many devices of this kind this machine has; raises RuntimeError or ImportError saying
        why the kind cannot be used at all."""
        return 1

    @property
    def hardware(self) -> str:
        """What runs the kernels, in words (a GPU's name; for host devices, the device's own name)."""
        return self.name

    def lower(self, kernel: Any) -> tuple[str, Any, Any]:
        """(name, source, info) of a scheduled kernel: linearized for this device, then rendered."""
        from tg.core.codegen.linearizer import linearize_for
        lin = linearize_for(kernel, self.renderer.d, **self.lower_options)
        return lin.name, self.renderer.render(lin), lin

    def compile_many(self, kernels: list[Any]) -> list[Program]:
        """Programs for kernels. A kernel seen before (the same Kernel.key) is not lowered again, so a
        training step's realize costs lookups, not codegen; each new source is built once, on a pool
        of threads when the compiler allows it, so building overlaps rendering."""
        todo: dict[tuple, Any] = {}
        for k in kernels:
            if k.key not in self._by_key:
                todo.setdefault(k.key, k)
        if todo:
            t0, lowered = trace.now(), GlobalCounters.kernels_lowered
            recalled = GlobalCounters.kernels_recalled
            self._build(todo)
            if trace.ON:
                trace.span("compile", "lower", t0, None, {
                    "device": self.name, "kernels": len(kernels), "cached": len(kernels) - len(todo),
                    "lowered": GlobalCounters.kernels_lowered - lowered,
                    "lower cache hits": GlobalCounters.kernels_recalled - recalled})
        progs = []
        for k in kernels:
            progs.append(self._by_key[k.key])
            self._by_key.move_to_end(k.key)
        for cache in (self._by_key, self._programs):
            while len(cache) > max(config.TG_PROGRAM_CACHE, len(kernels)):
                cache.popitem(last=False)
        return progs

    def _build(self, todo: dict[tuple, Any]) -> None:
        from concurrent.futures import ThreadPoolExecutor
        parallel = self.compiler is not None and getattr(self.compiler, "parallel", False) and len(todo) > 1
        pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1) if parallel else None
        try:
            jobs: list[tuple] = []
            new: dict[str, str] = {}         # source -> kernel name, each source once
            memo = lower_cache.Memo(self) if lower_cache.enabled(self) else None
            for key, k in todo.items():
                got = memo.recall(k) if memo is not None else None
                if got is not None:
                    name, src, info = got
                    GlobalCounters.kernels_recalled += 1
                else:
                    name, src, info = self.lower(k)
                    if isinstance(getattr(info, "uops", None), list):
                        info.uops = []   # rendered: a program lives as long as its cache entry, and the
                        # garbage collector walks every object alive (its UOps were a tenth of an LSTM's)
                    GlobalCounters.kernels_lowered += 1
                    if memo is not None:
                        memo.keep(k, name, src, info)
                if src not in self._programs:
                    new.setdefault(src, name)
                jobs.append((key, name, src, info))
            binaries = self._compile_sources(new, pool)
            for key, name, src, info in jobs:
                if src not in self._programs:
                    self._programs[src] = self.program(self, name, binaries[src], src, info)
                self._programs.move_to_end(src)
                self._by_key[key] = self._programs[src]
        finally:
            if pool is not None:
                pool.shutdown()

    def _compile_sources(self, names: dict[str, str], pool: Any) -> dict[str, Any]:
        """The binary of each source (source -> kernel name). A compiler that builds several sources
        in one run gets them in batches, one per worker, no two kernels of the same name in one."""
        compiler, srcs = self.compiler, list(names)
        if compiler is None:
            return dict.fromkeys(srcs)
        with trace.region("build", "lower", {"device": self.name, "sources": len(srcs)}):
            return self._build_sources(compiler, names, srcs, pool)

    def _build_sources(self, compiler: Any, names: dict[str, str], srcs: list[str],
                       pool: Any) -> dict[str, Any]:
        if not getattr(compiler, "batches", False) or len(srcs) < 2:
            built = [pool.submit(compiler.compile, s) for s in srcs] if pool is not None else \
                [compiler.compile(s) for s in srcs]
            return {s: b.result() if pool is not None else b for s, b in zip(srcs, built)}
        workers = (os.cpu_count() or 1) if pool is not None else 1
        batches: list[list[str]] = [[] for _ in range(min(workers, len(srcs)))]
        for i, src in enumerate(srcs):
            order = batches[i % len(batches):] + batches[:i % len(batches)]
            home = next((b for b in order if all(names[x] != names[src] for x in b)), None)
            if home is None:
                batches.append(home := [])
            home.append(src)
        if pool is not None:
            futures = [pool.submit(compiler.compile_batch, b) for b in batches]
            paths = [f.result() for f in futures]
        else:
            paths = [compiler.compile_batch(b) for b in batches]
        return {s: p for b, ps in zip(batches, paths) for s, p in zip(b, ps)}

    def get_program(self, kernel: Any) -> Program:
        """The program that runs one scheduled kernel on this device."""
        return self.compile_many([kernel])[0]

    def synchronize(self) -> None:
        pass

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU (tg.accelerator's question)."""
        return False


class _Registry:
    """Device["CL:1"] imports tg.core.runtime.ops_cl once and builds its device 1, once. A device is
    named KIND or KIND:N; KIND means KIND:0, and index 0 is always written without it."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._canonical: dict[str, str] = {}

    # Each cache holds self, which leaks nothing: Device is the only _Registry and lives as long as the
    # process.
    @functools.cache  # noqa: B019
    def kinds(self) -> list[str]:
        import tg.core.runtime as rt

        return sorted(
            m.name[4:].upper() for m in pkgutil.iter_modules(rt.__path__) if m.name.startswith("ops_")
        )

    @functools.cache  # noqa: B019  (see kinds)
    def device_class(self, kind: str) -> type[Compiled]:
        if kind not in self.kinds():
            raise ValueError(
                f"[core] unknown device kind {kind!r}; expected one of {', '.join(self.kinds())}"
            )
        module = importlib.import_module(f"tg.core.runtime.ops_{kind.lower()}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Compiled) and value is not Compiled \
                    and value.__module__ == module.__name__:
                return value
        raise ImportError(f"[core] tg/core/runtime/ops_{kind.lower()}.py defines no Compiled subclass")

    @functools.cache  # noqa: B019  (see kinds)
    def _count(self, kind: str) -> int | str:
        try:
            return self.device_class(kind).count()
        except (ImportError, RuntimeError) as e:
            return str(e)

    def count(self, kind: str) -> int:
        """How many devices of a kind this machine has (0 when the kind is unusable here).

            >>> Device.count("CPU")
            1
        """
        found = self._count(split_device(kind)[0])
        return found if isinstance(found, int) else 0

    def canonicalize(self, name: str | None) -> str:
        """The canonical name of a device ("cl:0" -> "CL", "cuda:1" -> "CUDA:1"); None is the default
        device. A kind tg does not know, or an index past the last device, raises."""
        if name is None:
            return self.DEFAULT
        known = self._canonical.get(name)   # every Tensor made asks: a lookup after the first time
        if known is not None:
            return known
        self._canonical[name] = canonical = self._canonicalize(name)
        return canonical

    def _canonicalize(self, name: str) -> str:
        kind, index = split_device(name)
        if kind not in self.kinds():
            raise ValueError(f"[core] unknown device {name!r}; expected one of {', '.join(self.kinds())}, "
                             f"optionally with an index (CL:1)")
        if not index:
            return kind
        found = self._count(kind)
        if isinstance(found, str):
            raise RuntimeError(f"[core] device {name!r}: no {kind} device is usable here: {found}")
        if index >= found:
            have = f"{kind}:0..{kind}:{found - 1}" if found > 1 else kind
            raise ValueError(f"[core] device {name!r} does not exist: this machine has {found} {kind} "
                             f"device{'s' if found != 1 else ''} ({have}). Fix: use an index below {found}")
        return f"{kind}:{index}"

    def __getitem__(self, name: str) -> Compiled:
        found = self._opened.get(name)        # every spelling seen maps to the one device
        if found is None:
            canonical = self.canonicalize(name)
            found = self._opened.get(canonical)
            if found is None:
                found = self._opened[canonical] = self.device_class(split_device(canonical)[0])(canonical)
            self._opened[name] = found
        return found

    def synchronize_all(self) -> None:
        """Wait for every device opened so far to finish what it was given."""
        for dev in {id(d): d for d in self._opened.values()}.values():
            dev.synchronize()

    @property
    def DEFAULT(self) -> str:
        """TG_DEVICE if set, else the most preferred usable kind (CUDA when a GPU is usable, else
        CPU). Without an index, a process started by a launcher (LOCAL_RANK, or mpiexec's or Slurm's
        local rank) takes device local_rank mod count of its kind: one device per rank."""
        return _default_device(config.TG_DEVICE, config.local_rank())


@functools.cache
def _default_device(chosen: str, local_rank: int) -> str:
    if chosen:
        kind, index = split_device(chosen)
        if kind not in Device.kinds():
            raise ValueError(f"[core] TG_DEVICE={chosen!r} is not a device; expected one of "
                             f"{', '.join(Device.kinds())}, optionally with an index (CL:1)")
        if index is not None:
            name = Device.canonicalize(chosen)
            _say(f"[device] default device {name} (TG_DEVICE={chosen})")
            return name
        why = f"TG_DEVICE={chosen}"
    else:
        kind, why = _preferred_kind()
    count = Device.count(kind)
    if local_rank < 0 or count <= 1:
        _say(f"[device] default device {kind} ({why}{'' if local_rank < 0 else f'; 1 {kind} device'})")
        return kind
    name = Device.canonicalize(f"{kind}:{local_rank % count}")
    _say(f"[device] default device {name} (local rank {local_rank} of {count} {kind} devices; {why}; "
         f"TG_DEVICE={kind}:N picks one)")
    return name


def _preferred_kind() -> tuple[str, str]:
    """The usable kind of lowest default_preference, and why the ones before it were passed over."""
    passed: list[str] = []
    ranked = []
    for kind in Device.kinds():
        try:
            pref = Device.device_class(kind).default_preference
        except ImportError:
            continue
        if pref is not None:
            ranked.append((pref, kind))
    for _, kind in sorted(ranked):
        found = Device._count(kind)
        if isinstance(found, int) and found > 0:
            why = "; ".join(passed) or "usable"
            return kind, why + ("; TG_DEVICE picks another" if passed else "")
        passed.append(f"not {kind}: {str(found).splitlines()[0] if isinstance(found, str) else 'no device'}")
    raise RuntimeError("[core] no device is usable; expected at least the CPU")


def _say(line: str) -> None:
    if config.DEBUG >= 1:
        print(line)


Device = _Registry()
