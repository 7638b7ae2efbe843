"""CL device: kernels rendered as OpenCL C, built by the OpenCL driver (binaries cached on disk by
source hash and device), launched with pyopencl over global (and local) work sizes, timed by events.

Any OpenCL platform works; `pip install -e ".[cl]"` brings pyopencl and PoCL, a real OpenCL device
on any CPU, so the GPU code path runs in CI. `CL:N` is the N-th GPU when there are GPUs, else the
N-th device that compiles (see `devices()`).
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tg import config
from tg.core.codegen.renderer import DIALECTS, CStyleRenderer
from tg.core.compiler import CompileError, Compiler
from tg.core.device import Buffer, CachingAllocator, Compiled, Program


def _register_pip_drivers() -> None:
    """OpenCL drivers installed by pip under sys.prefix (Intel's CPU runtime, intel-opencl-rt) ship
    an ICD file naming a path from their build machine. Unless the user set OCL_ICD_VENDORS, point
    the ICD loader at a folder of ICD files naming them where they really are (PyOpenCL's own PoCL
    is found either way)."""
    libs = [Path(sys.prefix) / "lib" / name for name in ("libintelocl.so",)]
    found = [lib for lib in libs if lib.exists()]
    if not found:
        return
    folder = Path(config.TG_CACHE_DIR) / "opencl-vendors"
    folder.mkdir(parents=True, exist_ok=True)
    for lib in found:
        icd = folder / f"{lib.stem}.icd"
        if not icd.exists() or icd.read_text().strip() != str(lib):
            tmp = icd.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(f"{lib}\n")
            os.replace(tmp, icd)    # another process may read it at the same time: never a torn file
    config.export_default("OCL_ICD_VENDORS", str(folder))


@functools.cache
def _cl() -> Any:
    """pyopencl, imported once (every allocation and copy asks for it)."""
    _register_pip_drivers()
    try:
        import pyopencl
    except ImportError:
        raise ImportError('[cl] the CL device needs pyopencl and an OpenCL driver: pip install -e ".[cl]" '
                          '(pyopencl and pocl-binary-distribution, a CPU OpenCL driver)') from None
    return pyopencl


LOCAL = 128    # work items per work-group
GROUP = 256    # the largest work-group one reduce may be shared by


def _build(program: Any) -> Any:
    """program.build(), quietly: drivers print build logs ("Compilation started ...") that PyOpenCL
    turns into warnings; a failed build raises with its log anyway."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _cl().CompilerWarning)
        return program.build()


def _loop_pragma(device: Any) -> str:
    """Intel's CPU OpenCL runtime (the `cl` extra's intel-opencl-rt) miscompiles, in its loop
    vectorizer, a reduce whose summand negates a sum of two weighted log2 or sqrt terms (binary
    cross-entropy's mean came out 0.26 instead of 1.01, where PoCL, the C compiler and numpy agree):
    its loops are compiled unvectorized (tg's own lanes still make SIMD code). Other drivers get no
    pragma."""
    if "Intel" in device.platform.name and device.type & _cl().device_type.CPU:
        return "#pragma clang loop vectorize(disable)"
    return ""


class CLAllocator(CachingAllocator):
    def __init__(self, dev: CLDevice):
        super().__init__()
        self.dev = dev
        self.mapped: list[Any] = []

    def _alloc(self, nbytes: int) -> Any:
        cl = _cl()
        return cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE, max(nbytes, 1))

    def _free(self, opaque: Any) -> None:
        opaque.release()

    @property
    def view_align(self) -> int:  # type: ignore[override]
        return max(self.dev.cl_device.mem_base_addr_align // 8, 1)   # sub-buffers start there (bits)

    def offset(self, opaque: Any, offset: int, nbytes: int) -> Any:
        return opaque.get_sub_region(offset, max(nbytes, 1))

    def copyin(self, opaque: Any, src: memoryview, offset: int = 0) -> None:
        if src.nbytes:
            _cl().enqueue_copy(self.dev.queue, opaque, np.frombuffer(src, dtype=np.uint8), is_blocking=True,
                               dst_offset=offset)

    def copyout(self, dest: memoryview, opaque: Any, offset: int = 0) -> None:
        if dest.nbytes:
            _cl().enqueue_copy(self.dev.queue, np.frombuffer(dest, dtype=np.uint8), opaque, is_blocking=True,
                               src_offset=offset)

    def _host_block(self, nbytes: int) -> np.ndarray:
        """Host memory the driver allocated and mapped (CL_MEM_ALLOC_HOST_PTR): pinned on GPU drivers,
        so copies to and from the device run by DMA."""
        cl = _cl()
        memory = cl.Buffer(
            self.dev.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, max(nbytes, 1)
        )
        block, _ = cl.enqueue_map_buffer(self.dev.queue, memory, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                         (nbytes,), np.uint8, is_blocking=True)
        self.mapped.append(memory)      # staging blocks live as long as the device
        return block

    def copy(self, dest: Any, src: Any, nbytes: int) -> None:
        _cl().enqueue_copy(self.dev.queue, dest, src, byte_count=nbytes)


class CLCompiler(Compiler):
    suffix = ".clbin"

    def __init__(self, dev: CLDevice):
        self.dev = dev
        d = dev.cl_device
        self.ident = f"opencl {d.platform.name} {d.platform.version} {d.name} {d.driver_version}"

    def compile_to(self, src: str, out: Path) -> None:
        cl = _cl()
        try:
            prg = _build(cl.Program(self.dev.ctx, src))
        except cl.RuntimeError as e:
            where = out.with_suffix(".cl")
            where.write_text(src)
            raise CompileError(f"[cl] the OpenCL compiler failed on a generated kernel (source written to "
                               f"{where}):\n{e}") from None
        out.write_bytes(prg.binaries[0])


class CLProgram(Program):
    def __init__(self, dev: CLDevice, name: str, binary: Path, src: str, info: Any):
        cl = _cl()
        self.dev, self.name, self.src, self.info = dev, name, src, info
        self.program = _build(cl.Program(dev.ctx, [dev.cl_device], [binary.read_bytes()]))
        self.kernel = getattr(self.program, name)
        # work-groups of LOCAL items (or the size a grouped reduce needs); the global size is rounded
        # up (each kernel checks its bound)
        items = max(int(info.global_size), 1)
        self.local_size = (info.local_size or min(dev.local_size, items),)
        self.global_size = ((items + self.local_size[0] - 1) // self.local_size[0] * self.local_size[0],)

    def __call__(self, bufs: list[Buffer], wait: bool = False) -> float | None:
        event = self.kernel(self.dev.queue, self.global_size, self.local_size, *[b._buf for b in bufs])
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9

    def replay_fn(self, bufs: list[Buffer]) -> Any:
        """A no-argument launch with the buffers bound once (used by TinyJit replays). Arguments
        are state of a kernel object, so each call site gets a kernel object of its own."""
        cl = _cl()
        kernel = cl.Kernel(self.program, self.name)
        kernel.set_args(*[b._buf for b in bufs])
        return functools.partial(cl.enqueue_nd_range_kernel, self.dev.queue, kernel, self.global_size,
                                 self.local_size)


def _compiles(cl: Any, dev: Any) -> str | None:
    """None when dev builds a kernel, else the driver's last word on why not."""
    try:
        _build(cl.Program(cl.Context([dev]), "__kernel void probe(__global float* a) { a[0] = 1.0f; }"))
        return None
    except cl.Error as e:
        return str(e).strip().splitlines()[-1][:200]


def _split(cl: Any, dev: Any, parts: int) -> list[Any]:
    """dev as `parts` sub-devices with equal shares of its compute units (OpenCL device fission)."""
    units = dev.max_compute_units
    if units < parts or cl.device_partition_property.EQUALLY not in (dev.partition_properties or []):
        raise RuntimeError(
            f"[cl] TG_CL_SPLIT={parts}: {dev.name} ({dev.platform.name}) cannot be split into "
            f"{parts} sub-devices (it has {units} compute units"
            f"{'' if units < parts else ' and no equal partitioning'}; a process bound to some cores, "
            f"as mpiexec binds each rank, sees only those). Fix: a smaller TG_CL_SPLIT, or unset it"
        )
    return dev.create_sub_devices([cl.device_partition_property.EQUALLY, units // parts])[:parts]


@functools.cache
def devices() -> tuple[Any, ...]:
    """The OpenCL devices CL:0, CL:1, ... stand for: every GPU when there is one; otherwise the CPU
    devices of the first runtime whose compiler works (PoCL's LLVM can fail to know a new CPU), each
    split into TG_CL_SPLIT sub-devices when that is set, so ranks sharing one CPU each get a CL device."""
    cl = _cl()
    found = [d for p in cl.get_platforms() for d in p.get_devices()]
    if not found:
        raise RuntimeError(
            '[cl] no OpenCL device found. Fix: pip install -e ".[cl]" (a CPU OpenCL driver), or '
            "install your GPU vendor's OpenCL driver"
        )
    gpus = [d for d in found if d.type & cl.device_type.GPU]
    failures, usable = [], []
    for dev in gpus or found:
        why = _compiles(cl, dev)
        if why is None:
            usable.append(dev)
        else:
            failures.append(f"{dev.platform.name} / {dev.name}: {why}")
    if not usable:
        raise RuntimeError("[cl] no OpenCL device can compile a kernel:\n  " + "\n  ".join(failures) +
                           '\nFix: pip install -e ".[cl]" (it adds Intel\'s CPU OpenCL runtime), or install '
                           "your GPU vendor's OpenCL driver")
    if not gpus:
        # every CPU runtime (Intel's, PoCL) drives the same cores: the devices of one of them, or two
        # devices would fight over the cores and a split would count each core twice
        usable = [d for d in usable if d.platform == usable[0].platform]
        parts = config.TG_CL_SPLIT
        if parts >= 2:
            usable = [sub for dev in usable for sub in _split(cl, dev, parts)]
    return tuple(usable)


class CLDevice(Compiled):
    @classmethod
    def count(cls) -> int:
        return len(devices())

    def __init__(self, name: str) -> None:
        super().__init__(name)
        cl = _cl()
        self.cl_device = devices()[self.index]
        self.ctx = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.allocator = CLAllocator(self)
        self.compiler = CLCompiler(self)
        self.renderer = CStyleRenderer(DIALECTS["opencl"], loop_pragma=_loop_pragma(self.cl_device))
        self.program = CLProgram
        # work-group sizes within what the device allows (some GPUs stop at 64 or 128 items)
        self.local_size = min(LOCAL, self.cl_device.max_work_group_size)
        self.lower_options = {"group_size": min(GROUP, self.cl_device.max_work_group_size)}

    @property
    def hardware(self) -> str:
        return f"{self.cl_device.name} ({self.cl_device.platform.name})"

    @property
    def is_gpu(self) -> bool:
        """Whether this OpenCL device is a GPU (not a CPU through PoCL or Intel's CPU runtime)."""
        return bool(self.cl_device.type & _cl().device_type.GPU)

    def synchronize(self) -> None:
        self.queue.finish()
