"""HostView (tg/distributed/flat.py) reads and writes a tensor's memory outside the lazy graph: what
collectives and ZeRO's reduced gradients go through. Lazy work queued on that memory must not cross it."""
import numpy as np
import pytest

from tg import Tensor


# ---------------------------------------------------------------- host writes after pending lazy writes
def _pending_write(t: Tensor, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Queue a lazy in-place write of one kind into t (not realized); the values t will hold."""
    n = t.shape[0]
    new = rng.standard_normal(n).astype(np.float32)
    if kind == "assign":
        t.assign(Tensor(new, device=t.device))
        return new
    if kind == "scaled":                    # what clip_grad_norm_ and GradScaler.unscale_ queue
        old = t.numpy()
        t.assign(t.detach() * 0.5)
        return old * 0.5
    lo, hi = sorted(int(v) for v in rng.integers(0, n + 1, 2))
    old = t.numpy()
    t[lo:hi] = Tensor(new[lo:hi], device=t.device)     # a write through a view of the memory
    old[lo:hi] = new[lo:hi]
    return old


@pytest.mark.parametrize("device", ["CPU", None])          # zero-copy host memory; the default device
@pytest.mark.parametrize("seed", range(6))
def test_a_host_write_is_not_overwritten_by_a_lazy_write_queued_before_it(seed, device):
    """HostView writes a tensor's memory outside the lazy graph (a collective's result, ZeRO's reduced
    gradients). A lazy write queued into the same memory before it, still pending, ran later and put back
    its own values: a GradScaler or clip that wrote ZeRO's gradients of a step that was then skipped made
    the next step's gradients the old ones. The queued write now completes first: the host write wins,
    and a host read sees the queued write."""
    from tg.core.host import HostView
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    t = Tensor(rng.standard_normal(n).astype(np.float32), device=device).realize()
    view = HostView(t)
    kind = ["assign", "scaled", "slice"][seed % 3]
    expect = _pending_write(t, kind, rng)
    np.testing.assert_array_equal(view.read(), expect)            # a read sees the queued write
    _pending_write(t, kind, rng)
    host = rng.standard_normal(n).astype(np.float32)
    view.write(host)                                                 # then the host's values, kept
    np.testing.assert_array_equal(t.numpy(), host)
