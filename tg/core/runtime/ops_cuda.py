"""CUDA device: kernels rendered as CUDA C, compiled by NVRTC to a cubin for the GPU's own
architecture (cached on disk by source, NVRTC version and target), loaded and launched through the
driver API (cuda-python's `cuda.bindings`), timed by events. `pip install -e ".[cuda]"`; on a driver
older than NVRTC's CUDA release, the extra of the driver's release (`.[cuda12]`, `.[cuda13]`).

`CUDA:N` is GPU N (`CUDA` is GPU 0); each has its own primary context, made current on the calling
thread before every allocation, copy and launch. NVRTC needs no GPU: `NVRTCCompiler(arch)` builds
for any target (`TG_CUDA_ARCH`: sm_90 gives a cubin, compute_90 PTX), which CI uses to check the
CUDA source of every kernel. `Device["CUDA"]` needs a driver and a GPU, and says so when there is none.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from tg import config
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.compiler import CompileError, Compiler
from tg.core.device import Buffer, CachingAllocator, Compiled, Program

BLOCK = 128    # threads per block; the grid covers the work items, each kernel checks its bound


def _bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError:
        raise ImportError(
            '[cuda] the CUDA device needs cuda-python and NVRTC: pip install -e ".[cuda]"'
        ) from None
    return driver, nvrtc


def _check(result: Any, what: str) -> Any:
    """cuda-python calls return (error, *values): raise on an error, else the value(s)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = err.name if hasattr(err, "name") else str(err)
        raise RuntimeError(f"[cuda] {what} failed: {name}")
    return values[0] if len(values) == 1 else tuple(values)


class NVRTCCompiler(Compiler):
    """CUDA C -> a cubin for a real architecture (sm_XY), or PTX for a virtual one (compute_XY),
    with no GPU needed. A cubin runs on any driver of NVRTC's major version or newer (CUDA's
    minor-version compatibility); PTX is compiled by the driver and must be no newer than it."""
    parallel = True

    def __init__(self, arch: str):
        _, nvrtc = _bindings()
        kind, _, number = arch.partition("_")
        if kind not in ("sm", "compute") or not number.rstrip("af").isdigit():
            raise ValueError(f"[cuda] target architecture {arch!r}: expected sm_XY (a cubin, e.g. sm_90) or "
                             f"compute_XY (PTX). Fix TG_CUDA_ARCH")
        supported = [int(a) for a in _check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")]
        self.version: tuple[int, int] = tuple(_check(nvrtc.nvrtcVersion(), "nvrtcVersion"))  # type: ignore[assignment]
        if int(number.rstrip("af")) not in supported:
            raise ValueError(
                f"[cuda] NVRTC {self.version[0]}.{self.version[1]} cannot build for {arch}; it "
                f"supports {', '.join(f'sm_{a}' for a in supported)}. Fix: TG_CUDA_ARCH, or the NVRTC "
                f"of another CUDA release (extras cuda12 / cuda13)"
            )
        self.arch, self.cubin = arch, kind == "sm"
        self.suffix = ".cubin" if self.cubin else ".ptx"
        self.ident = f"nvrtc {self.version[0]}.{self.version[1]} {arch} {self.suffix[1:]}"

    def compile_binary(self, src: str) -> bytes:
        """The cubin (sm_XY) or PTX (compute_XY) of one CUDA C source."""
        _, nvrtc = _bindings()
        prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture={self.arch}".encode(), b"-std=c++17"]
            err, *_ = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            if int(err) != 0:
                size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
                log = b" " * size
                nvrtc.nvrtcGetProgramLog(prog, log)
                raise CompileError(
                    f"[cuda] NVRTC failed on a generated kernel for {self.arch}:\n"
                    f"{log.decode(errors='replace').rstrip(chr(0)).strip()}\n--- source ---\n{src}"
                )
            get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if self.cubin else
                             (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
            size = _check(get_size(prog), "nvrtcGetCUBINSize" if self.cubin else "nvrtcGetPTXSize")
            binary = b" " * size
            _check(get(prog, binary), "nvrtcGetCUBIN" if self.cubin else "nvrtcGetPTX")
            return binary
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    def compile_to(self, src: str, out: Path) -> None:
        out.write_bytes(self.compile_binary(src))


def check_versions(driver: tuple[int, int], nvrtc: tuple[int, int], arch: str) -> None:
    """Raise when binaries from this NVRTC cannot load on this driver: a driver of an older major
    release never loads them; PTX (compute_XY) needs a driver at least as new as NVRTC."""
    fix = (f'Fix: pip install -e ".[cuda{driver[0]}]" (NVRTC and cuda-python of CUDA {driver[0]}), or update '
           f"the NVIDIA driver")
    if driver[0] < nvrtc[0]:
        raise RuntimeError(
            f"[cuda] the NVIDIA driver supports CUDA {driver[0]}.{driver[1]}, older than NVRTC "
            f"{nvrtc[0]}.{nvrtc[1]}, whose binaries need a CUDA {nvrtc[0]} driver. {fix}"
        )
    if arch.startswith("compute_") and driver < nvrtc:
        raise RuntimeError(f"[cuda] PTX from NVRTC {nvrtc[0]}.{nvrtc[1]} ({arch}) is newer than the driver's "
                           f"CUDA {driver[0]}.{driver[1]} accepts. Fix: TG_CUDA_ARCH=sm_XY (a cubin, which "
                           f"runs on any CUDA {nvrtc[0]} driver), or {fix[5:]}")


def arch_capability(arch: str) -> tuple[int, int]:
    """The compute capability a target names: sm_90 and compute_90 -> (9, 0), sm_90a -> (9, 0),
    sm_100 -> (10, 0), compute_75 -> (7, 5)."""
    digits = arch.partition("_")[2].rstrip("af")
    return int(digits[:-1]), int(digits[-1])


def check_arch(arch: str, capability: tuple[int, int], gpu: str) -> None:
    """Raise when a cubin built for arch cannot run on a GPU of this compute capability (a cubin runs
    only on its own major architecture, at its minor or above)."""
    if not arch.startswith("sm_"):
        return
    major, minor = arch_capability(arch)
    if major != capability[0] or minor > capability[1]:
        raise ValueError(
            f"[cuda] TG_CUDA_ARCH={arch} cannot run on {gpu} (compute capability "
            f"{capability[0]}.{capability[1]}). Fix: TG_CUDA_ARCH=sm_{capability[0]}{capability[1]}, "
            f"or unset it"
        )


class CUDAAllocator(CachingAllocator):
    def __init__(self, dev: CUDADevice):
        super().__init__()
        self.dev = dev
        self.finalizing = sys.is_finalizing    # kept here: at exit the module's globals may be gone

    def _alloc(self, nbytes: int) -> Any:
        driver, _ = _bindings()
        self.dev.activate()
        return _check(driver.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")

    def _free(self, opaque: Any) -> None:
        if self.finalizing():     # the driver frees a process's memory when it exits
            return
        driver, _ = _bindings()
        self.dev.activate()
        driver.cuMemFree(opaque)

    def offset(self, opaque: Any, offset: int, nbytes: int) -> Any:
        return int(opaque) + offset      # kernels and copies take the address as an int

    def copyin(self, opaque: Any, src: memoryview, offset: int = 0) -> None:
        driver, _ = _bindings()
        if src.nbytes:
            self.dev.activate()
            host = np.frombuffer(src, dtype=np.uint8)
            _check(driver.cuMemcpyHtoD(int(opaque) + offset, host.ctypes.data, src.nbytes), "cuMemcpyHtoD")

    def copyout(self, dest: memoryview, opaque: Any, offset: int = 0) -> None:
        driver, _ = _bindings()
        if dest.nbytes:
            self.dev.activate()
            host = np.frombuffer(dest, dtype=np.uint8)
            _check(driver.cuMemcpyDtoH(host.ctypes.data, int(opaque) + offset, dest.nbytes), "cuMemcpyDtoH")

    def _host_block(self, nbytes: int) -> np.ndarray:
        """Page-locked host memory: copies to and from the GPU run by DMA at the link's speed."""
        driver, _ = _bindings()
        self.dev.activate()
        pointer = int(_check(driver.cuMemHostAlloc(max(nbytes, 1), 0), "cuMemHostAlloc"))
        block = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pointer))
        weakref.finalize(block, driver.cuMemFreeHost, pointer).atexit = False   # the driver is gone by then
        return block

    def copy(self, dest: Any, src: Any, nbytes: int) -> None:
        driver, _ = _bindings()
        self.dev.activate()
        _check(driver.cuMemcpyDtoDAsync(dest, src, nbytes, 0), "cuMemcpyDtoDAsync")


class CUDAProgram(Program):
    def __init__(self, dev: CUDADevice, name: str, binary: Path, src: str, info: Any):
        driver, _ = _bindings()
        self.dev, self.name, self.src, self.info = dev, name, src, info
        dev.activate()
        image = binary.read_bytes()
        if not dev.compiler.cubin:
            image += b"\0"          # the driver reads PTX as a C string
        self.module = _check(driver.cuModuleLoadData(image), "cuModuleLoadData")
        self.function = _check(driver.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
        self.block = info.local_size or BLOCK      # a grouped reduce needs its own block size
        self.grid = (max(int(info.global_size), 1) + self.block - 1) // self.block

    def _launch(self, pointers: tuple) -> None:
        driver, _ = _bindings()
        self.dev.activate()
        params = (pointers, (ctypes.c_void_p,) * len(pointers))
        _check(driver.cuLaunchKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0, 0, params, 0),
               "cuLaunchKernel")

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        driver, _ = _bindings()
        pointers = tuple(int(b._buf) for b in bufs)
        if not wait:
            self._launch(pointers)
            return None
        self.dev.activate()
        start, end = (_check(driver.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        _check(driver.cuEventRecord(start, 0), "cuEventRecord")
        self._launch(pointers)
        _check(driver.cuEventRecord(end, 0), "cuEventRecord")
        _check(driver.cuEventSynchronize(end), "cuEventSynchronize")
        ms = _check(driver.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        for event in (start, end):
            driver.cuEventDestroy(event)
        return float(ms) * 1e-3

    def replay_fn(self, bufs: list[Buffer]) -> Any:
        """A no-argument launch with the buffer addresses bound once (used by TinyJit replays)."""
        pointers = tuple(int(b._buf) for b in bufs)
        return lambda: self._launch(pointers)


def gpu_count() -> int:
    """How many CUDA GPUs the driver sees; raises RuntimeError saying why none is usable."""
    driver, _ = _bindings()
    try:
        _check(driver.cuInit(0), "cuInit")
        count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as e:  # no libcuda at all raises the loader's own error
        raise RuntimeError(
            f"[cuda] no CUDA driver or GPU found ({str(e).splitlines()[0][:160]}). Fix: run on a "
            f"machine with an NVIDIA GPU and driver, or use another device (TG_DEVICE=CPU or CL); "
            f"NVRTC compilation alone works anywhere"
        ) from None
    if count == 0:
        raise RuntimeError("[cuda] the CUDA driver sees no GPU. Fix: check nvidia-smi, or use TG_DEVICE=CPU")
    return int(count)


_current = threading.local()     # the context current on this thread (CUDA's is per thread too)


class CUDADevice(Compiled):
    default_preference = 0      # the default device whenever a GPU is usable

    @property
    def is_gpu(self) -> bool:
        return True

    @classmethod
    def count(cls) -> int:
        return gpu_count()

    def __init__(self, name: str) -> None:
        super().__init__(name)
        driver, _ = _bindings()
        gpu_count()
        self.device = _check(driver.cuDeviceGet(self.index), "cuDeviceGet")
        name = _check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.gpu_name = bytes(name).split(b"\0")[0].decode()  # type: ignore[arg-type]
        self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.activate()
        attr = driver.CUdevice_attribute
        major, minor = (int(_check(driver.cuDeviceGetAttribute(a, self.device), "cuDeviceGetAttribute"))
                        for a in (attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                  attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.capability = (major, minor)
        arch = config.TG_CUDA_ARCH or f"sm_{self.capability[0]}{self.capability[1]}"
        # what the kernels may use: the GPU's features, and no more than the target's (PTX for compute_75
        # on an sm_90 GPU must not hold sm_80's bf16 mma, which the driver's JIT then rejects)
        self.target = min(self.capability, arch_capability(arch))
        self.compiler = NVRTCCompiler(arch)
        version = int(_check(driver.cuDriverGetVersion(), "cuDriverGetVersion"))
        self.driver_version = (version // 1000, version % 1000 // 10)
        check_versions(self.driver_version, self.compiler.version, arch)
        check_arch(arch, self.capability, self.gpu_name)
        self.allocator = CUDAAllocator(self)
        self.renderer = CStyleRenderer(DIALECTS["cuda"])
        self.program = CUDAProgram

    def lower(self, kernel: Any) -> tuple[str, Any, Any]:
        """A contraction of bfloat16 or float16 factors runs on the tensor cores (codegen/mma.py) where
        the GPU and the compile target (TG_CUDA_ARCH) are sm_80 or later; every other kernel as the
        linearizer lowers it."""
        from tg.core.codegen import mma
        found = None if config.TG_NOOPT else mma.lower(kernel, self.renderer, self.target)
        return found if found is not None else super().lower(kernel)

    @property
    def hardware(self) -> str:
        return f"{self.gpu_name} (sm_{self.capability[0]}{self.capability[1]}, driver CUDA " \
               f"{self.driver_version[0]}.{self.driver_version[1]})"

    def activate(self) -> None:
        """Make this GPU's context current on the calling thread (a no-op when it already is)."""
        if getattr(_current, "context", None) is not self.context:
            driver, _ = _bindings()
            _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            _current.context = self.context

    def synchronize(self) -> None:
        driver, _ = _bindings()
        self.activate()
        _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
