"""CUDA device: kernels rendered as CUDA C, compiled to PTX by NVRTC (cached on disk by source hash
and target), loaded and launched through the driver API (cuda-python's `cuda.bindings`), timed by
events. `pip install -e ".[cuda]"`.

NVRTC needs no GPU: `NVRTCCompiler(arch)` compiles for any target (`TG_CUDA_ARCH`, e.g. sm_90),
which CI uses to check the CUDA source of every kernel. `Device["CUDA"]` needs a driver and a GPU,
and says so when there is none.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from tg import config
from tg.core.compiler import CompileError, Compiler
from tg.core.device import Buffer, CachingAllocator, Compiled, Program
from tg.core.renderer import DIALECTS, CStyleRenderer, linearize_for

BLOCK = 128    # threads per block; the grid covers the work items, each kernel checks its bound


def _bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError:
        raise ImportError('[cuda] the CUDA device needs cuda-python and NVRTC: pip install -e ".[cuda]"') from None
    return driver, nvrtc


def _check(result: Any, what: str) -> Any:
    """cuda-python calls return (error, *values): raise on an error, else the value(s)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = err.name if hasattr(err, "name") else str(err)
        raise RuntimeError(f"[cuda] {what} failed: {name}")
    return values[0] if len(values) == 1 else tuple(values)


class NVRTCCompiler(Compiler):
    """CUDA C -> PTX for one target architecture (sm_XY), with no GPU needed."""
    suffix = ".ptx"

    def __init__(self, arch: str):
        _, nvrtc = _bindings()
        if not arch.startswith(("sm_", "compute_")):
            raise ValueError(f"[cuda] target architecture {arch!r}: expected sm_XY (e.g. sm_90). Fix TG_CUDA_ARCH")
        self.arch = arch
        major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
        self.ident = f"nvrtc {major}.{minor} {arch}"

    def compile_ptx(self, src: str) -> bytes:
        _, nvrtc = _bindings()
        prog = _check(nvrtc.nvrtcCreateProgram(src.encode(), b"kernel.cu", 0, [], []), "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture={self.arch}".encode(), b"-std=c++17"]
            err, *_ = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            if int(err) != 0:
                size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
                log = b" " * size
                nvrtc.nvrtcGetProgramLog(prog, log)
                raise CompileError(f"[cuda] NVRTC failed on a generated kernel for {self.arch}:\n"
                                   f"{log.decode(errors='replace').rstrip(chr(0)).strip()}\n--- source ---\n{src}")
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            ptx = b" " * size
            _check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx
        finally:
            nvrtc.nvrtcDestroyProgram(prog)

    def compile_to(self, src: str, out: Path) -> None:
        out.write_bytes(self.compile_ptx(src))


def render(kernel: Any) -> tuple[Any, str]:
    """The linearized kernel and its CUDA C source."""
    lin = linearize_for(kernel, DIALECTS["cuda"])
    return lin, CStyleRenderer(DIALECTS["cuda"]).render(lin)


class CUDAAllocator(CachingAllocator):
    def __init__(self, dev: CUDADevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, nbytes: int) -> Any:
        driver, _ = _bindings()
        self.dev.activate()
        return _check(driver.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")

    def _free(self, opaque: Any) -> None:
        driver, _ = _bindings()
        driver.cuMemFree(opaque)

    def copyin(self, opaque: Any, src: memoryview) -> None:
        driver, _ = _bindings()
        if src.nbytes:
            host = np.frombuffer(src, dtype=np.uint8)
            _check(driver.cuMemcpyHtoD(opaque, host.ctypes.data, src.nbytes), "cuMemcpyHtoD")

    def copyout(self, dest: memoryview, opaque: Any) -> None:
        driver, _ = _bindings()
        if dest.nbytes:
            host = np.frombuffer(dest, dtype=np.uint8)
            _check(driver.cuMemcpyDtoH(host.ctypes.data, opaque, dest.nbytes), "cuMemcpyDtoH")


    def copy(self, dest: Any, src: Any, nbytes: int) -> None:
        driver, _ = _bindings()
        _check(driver.cuMemcpyDtoDAsync(dest, src, nbytes, 0), "cuMemcpyDtoDAsync")


class CUDAProgram(Program):
    def __init__(self, dev: CUDADevice, name: str, ptx: bytes, src: str, info: Any):
        driver, _ = _bindings()
        self.dev, self.name, self.src, self.info = dev, name, src, info
        dev.activate()
        self.module = _check(driver.cuModuleLoadData(ptx), "cuModuleLoadData")
        self.function = _check(driver.cuModuleGetFunction(self.module, name.encode()), "cuModuleGetFunction")
        self.block = info.local_size or BLOCK      # a grouped reduce needs its own block size
        self.grid = (max(int(info.global_size), 1) + self.block - 1) // self.block

    def _launch(self, pointers: tuple) -> None:
        driver, _ = _bindings()
        params = (pointers, (ctypes.c_void_p,) * len(pointers))
        _check(driver.cuLaunchKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0, 0, params, 0),
               "cuLaunchKernel")

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        driver, _ = _bindings()
        pointers = tuple(int(b._buf) for b in bufs)
        if not wait:
            self._launch(pointers)
            return None
        start, end = (_check(driver.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        _check(driver.cuEventRecord(start, 0), "cuEventRecord")
        self._launch(pointers)
        _check(driver.cuEventRecord(end, 0), "cuEventRecord")
        _check(driver.cuEventSynchronize(end), "cuEventSynchronize")
        ms = _check(driver.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        return float(ms) * 1e-3

    def replay_fn(self, bufs: list[Buffer]) -> Any:
        """A no-argument launch with the buffer addresses bound once (used by TinyJit replays)."""
        pointers = tuple(int(b._buf) for b in bufs)
        return lambda: self._launch(pointers)


def probe() -> str:
    """The name of the first CUDA GPU, or raise RuntimeError saying why none is usable."""
    driver, _ = _bindings()
    try:
        _check(driver.cuInit(0), "cuInit")
        count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as e:   # no libcuda at all raises the loader's own error
        raise RuntimeError(f"[cuda] no CUDA driver or GPU found ({str(e).splitlines()[0][:160]}). Fix: run on a "
                           f"machine with an NVIDIA GPU and driver, or use another device (TG_DEVICE=CPU or CL); "
                           f"NVRTC compilation alone works anywhere") from None
    if count == 0:
        raise RuntimeError("[cuda] the CUDA driver sees no GPU. Fix: check nvidia-smi, or use TG_DEVICE=CPU")
    name = _check(driver.cuDeviceGetName(256, 0), "cuDeviceGetName")
    return bytes(name).split(b"\0")[0].decode()


class CUDADevice(Compiled):
    def __init__(self) -> None:
        driver, _ = _bindings()
        self.gpu_name = probe()
        self.device = _check(driver.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.activate()
        attr = driver.CUdevice_attribute
        major = _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device),
                       "cuDeviceGetAttribute")
        minor = _check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device),
                       "cuDeviceGetAttribute")
        self.arch = config.TG_CUDA_ARCH or f"sm_{major}{minor}"
        self.allocator = CUDAAllocator(self)
        self.compiler = NVRTCCompiler(self.arch)
        self._programs: dict[str, CUDAProgram] = {}

    def activate(self) -> None:
        driver, _ = _bindings()
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def compile_kernel(self, kernel: Any) -> Program:
        lin, src = render(kernel)
        if src not in self._programs:
            self._programs[src] = CUDAProgram(self, lin.name, self.compiler.compile(src).read_bytes(), src, lin)
        return self._programs[src]

    def synchronize(self) -> None:
        driver, _ = _bindings()
        _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
