"""Test helpers shared by every test folder."""
from __future__ import annotations

from tg import Tensor
from tg.core.schedule import create_schedule


def kernel_count(*outs: Tensor) -> int:
    """How many kernels realizing these tensors compiles to (buffer allocations not counted)."""
    items = create_schedule([t.lazydata for t in outs])
    return sum(1 for it in items if it.kind == "kernel")


def kernels_of(t: Tensor) -> list:
    """The kernels that realizing t would run, unrun."""
    return [it.kernel for it in create_schedule([t.lazydata]) if it.kind == "kernel"]


def cpu_source(kernel) -> str:
    """The C source the CPU device would compile for a kernel, as function `k`."""
    from tg.core.codegen.linearizer import linearize
    from tg.core.device import Device
    from tg.core.runtime.ops_cpu import _vector_bytes
    return Device["CPU"].renderer.render(linearize(kernel, _vector_bytes()), "k")


def assert_kernels(out: Tensor | tuple[Tensor, ...], n: int) -> None:
    outs = out if isinstance(out, tuple) else (out,)
    got = kernel_count(*outs)
    assert got == n, f"expected {n} kernels, the schedule has {got}"


def gradcheck(fn, *inputs, device: str | None = None, eps: float = 1e-6, atol: float = 1e-6,
              rtol: float = 1e-5, seed: int = 0) -> None:
    """Check tg's gradients of fn(*tensors) against central finite differences, in float64.

    fn takes tg Tensors and returns one Tensor; inputs are numpy arrays (cast to float64). The
    output is contracted with a fixed random cotangent so every output element matters."""
    import numpy as np

    rng = np.random.default_rng(seed)
    xs = [np.asarray(x, dtype=np.float64) for x in inputs]
    tensors = [Tensor(x, device=device, requires_grad=True) for x in xs]
    out = fn(*tensors)
    cot = rng.standard_normal(out.shape)
    (out * Tensor(cot, device=device)).sum().backward()

    def scalar(values: list) -> float:
        res = fn(*[Tensor(v, device=device) for v in values]).numpy().astype(np.float64)
        return float((res * cot).sum())

    for i, x in enumerate(xs):
        got = tensors[i].grad.numpy() if tensors[i].grad is not None else np.zeros_like(x)
        want = np.zeros_like(x)
        for j in range(x.size):
            plus, minus = x.copy(), x.copy()
            plus.flat[j] += eps
            minus.flat[j] -= eps
            vp = [plus if k == i else xs[k] for k in range(len(xs))]
            vm = [minus if k == i else xs[k] for k in range(len(xs))]
            want.flat[j] = (scalar(vp) - scalar(vm)) / (2 * eps)
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")


def gpu_support(what: str) -> str | None:
    """None when `what` ("CL": an OpenCL device; "NVRTC": the CUDA compiler) works here, else why not.
    CI installs both and must run them, so there a missing one is an error instead."""
    import os
    try:
        if what == "CL":
            from tg import Device
            Device["CL"]
        else:
            from tg.core.runtime.ops_cuda import NVRTCCompiler
            NVRTCCompiler("sm_90")
        return None
    except (ImportError, RuntimeError) as e:
        if os.environ.get("CI"):
            raise AssertionError(f"CI must run {what}: {e}") from None
        return str(e)
