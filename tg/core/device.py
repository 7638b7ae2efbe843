"""Devices, buffers and the counters every allocation goes through.

A device is one file `tg/core/runtime/ops_<name>.py` exporting a subclass of `Compiled`; it is
found by its file name, so adding a device edits no other file.

    >>> Device["NUMPY"].name
    'NUMPY'
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
import weakref
from typing import Any

import numpy as np

from tg import config
from tg.core.dtype import DType


class GlobalCounters:
    """Process-wide counters: kernels launched, bytes of device buffers alive and at peak."""
    kernel_count: int = 0
    mem_used: int = 0
    mem_peak: int = 0
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0

    @staticmethod
    def reset() -> None:
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.global_mem = 0
        GlobalCounters.time_sum_s = 0.0
        GlobalCounters.mem_peak = GlobalCounters.mem_used


class Allocator:
    """alloc/free/copyin/copyout of raw bytes on one device."""

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, opaque: Any, nbytes: int) -> None:
        pass

    def copyin(self, opaque: Any, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dest: memoryview, opaque: Any) -> None:
        raise NotImplementedError

    def copy(self, dest: Any, src: Any, nbytes: int) -> None:
        """Device-to-device copy of nbytes (benchmarks measure the device's copy bandwidth with it)."""
        raise NotImplementedError(f"{type(self).__name__} has no device-to-device copy")


class CachingAllocator(Allocator):
    """Freed blocks are kept per size and handed out again (up to `cache_limit` bytes), so a training
    step reuses warm memory instead of asking the system (or the driver) for fresh blocks every time.
    Subclasses write `_alloc(nbytes)` and may write `_free(opaque)`."""

    def __init__(self, cache_limit: int = 1 << 30):
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


class HostAllocator(CachingAllocator):
    """Memory in host RAM held by numpy (CPU, NUMPY); 64-byte aligned for vector loads."""

    def _alloc(self, nbytes: int) -> np.ndarray:
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        return raw[start:start + nbytes]

    def copyin(self, opaque: np.ndarray, src: memoryview) -> None:
        opaque[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, opaque: np.ndarray) -> None:
        np.frombuffer(dest, dtype=np.uint8)[:] = opaque


class Buffer:
    """Device memory for `size` elements of `dtype`. Counted in GlobalCounters while alive."""

    def __init__(self, device: str, size: int, dtype: DType):
        self.device, self.size, self.dtype = device, size, dtype
        self.nbytes = size * dtype.itemsize
        self.allocator = Device[device].allocator
        self._buf = self.allocator.alloc(self.nbytes)
        # every lazy buffer whose value lives in this memory (an assign's result shares its target's)
        self.aliases: weakref.WeakSet = weakref.WeakSet()
        GlobalCounters.mem_used += self.nbytes
        GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)

    def __del__(self) -> None:
        if hasattr(self, "_buf"):
            GlobalCounters.mem_used -= self.nbytes
            self.allocator.free(self._buf, self.nbytes)

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"

    def copyin(self, data: np.ndarray) -> Buffer:
        data = np.ascontiguousarray(data)
        assert data.nbytes == self.nbytes, f"copyin of {data.nbytes} bytes into {self.nbytes}"
        # numpy's stubs declare ndarray.__buffer__ only for Python >= 3.12 (mypy checks as 3.11)
        self.allocator.copyin(self._buf, memoryview(data.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
        return self

    def numpy(self) -> np.ndarray:
        """The raw bits as a flat numpy array of the dtype's host storage type."""
        out = np.empty(self.size, dtype=self.dtype.np)
        if self.nbytes:
            # numpy's stubs: as in copyin
            self.allocator.copyout(memoryview(out.view(np.uint8)), self._buf)  # type: ignore[arg-type]
        return out


class Program:
    """A compiled kernel. Called with buffers; returns seconds taken when wait=True."""
    name: str

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        raise NotImplementedError


class Compiled:
    """One compute device. Subclasses live in runtime/ops_<name>.py."""
    name: str = ""
    allocator: Allocator

    def compile_kernel(self, kernel: Any) -> Program:
        """Turn a scheduled kernel (tg.core.schedule.Kernel) into something runnable."""
        raise NotImplementedError

    def compile_many(self, kernels: list[Any]) -> list[Program]:
        """Programs for kernels; a kernel seen before (the same AST) is not lowered or rendered again,
        so a training step's realize costs lookups, not codegen."""
        known: dict[tuple, Program] = self.__dict__.setdefault("_by_ast", {})
        for k in kernels:
            if k.ast.key not in known:
                known[k.ast.key] = self.compile_kernel(k)
        return [known[k.ast.key] for k in kernels]

    def synchronize(self) -> None:
        pass


class _Registry:
    """Device["CPU"] imports tg.core.runtime.ops_cpu and returns its device, once."""

    def canonicalize(self, name: str | None) -> str:
        if name is None:
            return self.DEFAULT
        base = str(name).split(":")[0].upper()
        if base not in self.names():
            raise ValueError(f"[core] unknown device {name!r}; expected one of {', '.join(self.names())}")
        return base

    # The cache holds self, which leaks nothing: Device is the only _Registry and lives as long as the process.
    @functools.cache  # noqa: B019
    def names(self) -> list[str]:
        import tg.core.runtime as rt
        return sorted(m.name[4:].upper() for m in pkgutil.iter_modules(rt.__path__) if m.name.startswith("ops_"))

    @functools.cache  # noqa: B019  (see names)
    def __getitem__(self, name: str) -> Compiled:
        name = self.canonicalize(name)
        module = importlib.import_module(f"tg.core.runtime.ops_{name.lower()}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Compiled) and value is not Compiled \
                    and value.__module__ == module.__name__:
                dev = value()
                dev.name = name
                return dev
        raise ImportError(f"[core] tg/core/runtime/ops_{name.lower()}.py defines no Device subclass")

    @property
    def DEFAULT(self) -> str:
        chosen = config.TG_DEVICE
        if chosen:
            if chosen not in self.names():
                raise ValueError(f"[core] TG_DEVICE={chosen!r} is not a device; expected one of "
                                 f"{', '.join(self.names())}")
            return chosen
        return _best_device()


@functools.cache
def _best_device() -> str:
    """CUDA when cuda-python is installed and a GPU is usable, else CPU (DEBUG=1 says which, and why)."""
    import importlib.util
    reason = "cuda-python is not installed"
    if importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None:
        try:
            from tg.core.runtime.ops_cuda import probe
            name = probe()
            if config.DEBUG >= 1:
                print(f"[device] default device CUDA ({name})")
            return "CUDA"
        except (ImportError, RuntimeError) as e:
            reason = str(e).splitlines()[0]
    if config.DEBUG >= 1:
        print(f"[device] default device CPU ({reason}; TG_DEVICE picks another)")
    return "CPU"


Device = _Registry()
