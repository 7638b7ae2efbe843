"""The idioms every torch script has a few of (issue 38), against torch's documented behaviour: `.data` and
the in-place initialisers, `x.cpu()` / `x.cuda()` / `is_cuda`, `torch.cuda.*`, `torch.accelerator.*`,
`torch.backends.cudnn.benchmark = True`, the grad-mode switches, `torch.multiprocessing.spawn`. Where this
machine has no GPU the GPU answers are checked to be the no-GPU ones (what a script's `if
torch.cuda.is_available()` then takes)."""
import numpy as np
import pytest
import spawn_targets

import tg
import tg.multiprocessing as mp
from tg import Tensor
from tg.core.device import Device

# ------------------------------------------------------------ .data

@pytest.mark.parametrize("realized", [True, False])
@pytest.mark.parametrize("shape", [(3,), (4, 5), (2, 3, 7)])
def test_writes_through_data_reach_the_tensor_and_are_not_recorded(realized, shape):
    rng = np.random.default_rng(len(shape))
    a, g = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    p = Tensor(a, requires_grad=True)
    if realized:
        p.realize()
    p.data.add_(Tensor(g), alpha=-0.1)            # a manual SGD step, as scripts write it
    p.data.mul_(2.0)
    p.data[0].fill_(5.0)                          # a write through a view of .data
    want = (a - 0.1 * g) * 2
    want[0] = 5.0
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-6)
    assert p.requires_grad and p.grad is None and not p.data.requires_grad
    (p * p).sum().backward()                      # still a leaf: its gradient is 2p
    np.testing.assert_allclose(p.grad.numpy(), 2 * want, rtol=1e-6)


def test_manual_sgd_through_data_follows_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
    w0 = rng.standard_normal((3, 1)).astype(np.float32)
    w, want = Tensor(w0, requires_grad=True), w0.astype(np.float64)
    for _ in range(5):
        loss = ((Tensor(x) @ w - Tensor(y)) ** 2).mean()
        loss.backward()
        w.data.add_(w.grad, alpha=-0.1)
        w.grad = None
        want -= 0.1 * (2 / 16) * x.T.astype(np.float64) @ (x.astype(np.float64) @ want - y)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5, atol=1e-6)


def test_assigning_data_takes_the_values_and_keeps_requires_grad():
    p = Tensor([1.0, 2.0], requires_grad=True)
    p.data = Tensor([[3.0, 4.0, 5.0]])             # any shape, as torch
    assert p.shape == (1, 3) and p.tolist() == [[3.0, 4.0, 5.0]] and p.requires_grad
    with pytest.raises(TypeError, match=r"Tensor.data: expected a Tensor"):
        p.data = [1.0]


# ------------------------------------------------------------ in-place initialisers

@pytest.mark.parametrize("dtype", [tg.float32, tg.float16, tg.bfloat16])
def test_normal_and_uniform_fill_in_place(dtype):
    w = tg.zeros(20000, dtype=dtype)
    assert w.normal_(3.0, 0.5) is w and w.dtype == dtype
    v = w.float().numpy()
    assert abs(v.mean() - 3.0) < 0.03 and abs(v.std() - 0.5) < 0.03
    w.uniform_(-2.0, 1.0)
    v = w.float().numpy()
    assert v.min() >= -2.0 and v.max() <= 1.0 and abs(v.mean() + 0.5) < 0.03


def test_initialisers_take_a_generator_and_follow_torchs_rules():
    g = tg.Generator().manual_seed(4)
    a = tg.zeros(6).uniform_(generator=g).tolist()
    assert tg.zeros(6).uniform_(generator=g.manual_seed(4)).tolist() == a
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        tg.zeros(3, requires_grad=True).normal_()
    with tg.no_grad():
        assert tg.zeros(3, requires_grad=True).normal_().shape == (3,)
    with pytest.raises(TypeError, match="floating-point"):
        tg.zeros(3, dtype=tg.int32).uniform_()
    with pytest.raises(ValueError, match="non-negative std"):
        tg.zeros(3).normal_(0.0, -1.0)


# ------------------------------------------------------------ devices

def test_cpu_and_the_device_questions():
    x = Tensor([1.0, 2.0], device="CPU")
    assert x.cpu() is x and x.is_cpu and not x.is_cuda and not x.is_xpu
    assert Tensor([1.0], device="NUMPY").cpu().device == "CPU"
    if Device.count("CL"):
        c = x.to("CL")
        assert not c.is_cpu and not c.is_cuda and c.cpu().tolist() == [1.0, 2.0]


def test_cuda_where_there_is_none_says_so_and_the_script_idiom_picks_the_cpu():
    if tg.cuda.is_available():
        y = Tensor([1.0]).cuda()
        assert y.is_cuda and y.cpu().tolist() == [1.0] and tg.cuda.device_count() >= 1
        return
    assert tg.cuda.device_count() == 0 and not tg.cuda.is_bf16_supported()
    with pytest.raises(RuntimeError, match=r"\[cuda\]"):
        Tensor([1.0]).cuda()
    with pytest.raises(RuntimeError, match=r"\[cuda\]"):
        tg.cuda.current_device()
    tg.cuda.empty_cache()                          # nothing to give back: a no-op, as torch's
    device = tg.device("cuda" if tg.cuda.is_available() else "cpu")
    assert Tensor([1.0], device=device).device == "CPU"
    with pytest.raises(ValueError, match="expected a CUDA device"):
        Tensor([1.0]).cuda("cl:0")


def test_cuda_manual_seed_seeds_the_one_stream():
    tg.cuda.manual_seed_all(11)
    a = tg.rand(4).tolist()
    tg.manual_seed(11)
    assert tg.rand(4).tolist() == a


def test_accelerator_is_a_gpu_or_nothing():
    kind = tg.accelerator.current_accelerator()
    gpu = tg.cuda.is_available() or (Device.count("CL") > 0 and Device["CL"].is_gpu)
    assert tg.accelerator.is_available() is gpu and (kind is not None) is gpu
    if not gpu:                                    # OpenCL on a CPU (PoCL) is no accelerator
        assert tg.accelerator.device_count() == 0 and tg.accelerator.current_device_index() == 0
        tg.accelerator.synchronize()
        with pytest.raises(RuntimeError, match="no accelerator"):
            tg.accelerator.set_device_index(0)
    else:
        assert kind.type in ("cuda", "cl") and tg.accelerator.device_count() >= 1


def test_backend_switches_are_kept_and_change_nothing():
    x = tg.rand(8, 8)
    before = (x @ x).numpy()
    tg.backends.cudnn.benchmark, tg.backends.cudnn.deterministic = True, True
    tg.backends.cuda.matmul.allow_tf32 = True
    try:
        np.testing.assert_array_equal((x @ x).numpy(), before)
        assert not tg.backends.cudnn.is_available() and not tg.backends.mps.is_available()
    finally:
        tg.backends.cudnn.benchmark, tg.backends.cudnn.deterministic = False, False
        tg.backends.cuda.matmul.allow_tf32 = False


def test_the_caching_allocator_gives_its_blocks_back():
    alloc = Device["CPU"].allocator
    Tensor(np.ones(1 << 16, np.float32)).realize()       # freed at once: its block is kept for reuse
    assert alloc.cached_bytes > 0
    freed = alloc.release()
    assert freed > 0 and alloc.cached_bytes == 0 and not alloc.cache


# ------------------------------------------------------------ grad modes

def test_set_grad_enabled_as_call_context_and_decorator():
    x = Tensor([1.0], requires_grad=True)
    try:
        tg.set_grad_enabled(False)                 # a call: at once, until set again
        assert not tg.is_grad_enabled() and not (x * 2).requires_grad
        with tg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not tg.is_grad_enabled()            # the block put the call's mode back
    finally:
        tg.set_grad_enabled(True)

    @tg.set_grad_enabled(False)
    def frozen(t):
        return (t * 2).requires_grad
    assert tg.is_grad_enabled() and frozen(x) is False and tg.is_grad_enabled()

    with tg.no_grad():
        with tg.enable_grad():
            assert (x * 2).requires_grad
        assert not tg.is_grad_enabled()
    with tg.inference_mode():
        assert not (x * 2).requires_grad
    with tg.inference_mode(False):
        assert (x * 2).requires_grad

    @tg.inference_mode()
    def infer(t):
        return (t * 2).requires_grad
    assert infer(x) is False and tg.is_grad_enabled()


OPS = {
    "exp": lambda t: t.exp(), "sigmoid": lambda t: t.sigmoid(), "relu": lambda t: t.relu(),
    "add": lambda t: t + 1, "mul": lambda t: t * t, "div": lambda t: 1 / (t + 3), "pow": lambda t: t ** 2,
    "sum": lambda t: t.sum(), "mean": lambda t: t.mean(0), "max": lambda t: t.max(1).values,
    "softmax": lambda t: t.softmax(-1), "matmul": lambda t: t @ t.T, "reshape": lambda t: t.reshape(-1),
    "permute": lambda t: t.permute(1, 0), "slice": lambda t: t[1:, ::2], "flip": lambda t: t.flip(0),
    "cat": lambda t: tg.cat([t, t]), "where": lambda t: tg.where(t > 0, t, -t), "clone": lambda t: t.clone(),
    "contiguous": lambda t: t.T.contiguous(), "cast": lambda t: t.half(),
    "expand": lambda t: t[:1].expand(4, 5),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_results_made_under_no_grad_do_not_require_grad(op):
    """torch: inside no_grad() / set_grad_enabled(False) a result does not require grad (it has no
    graph to send one back through); outside, a result of a tensor that requires grad does."""
    x = Tensor(np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32), requires_grad=True)
    assert OPS[op](x).requires_grad
    with tg.no_grad():
        assert OPS[op](x).requires_grad is False
    with tg.set_grad_enabled(False):
        assert OPS[op](x).requires_grad is False
        assert Tensor([1.0], requires_grad=True).requires_grad     # a new leaf asks for it itself


# ------------------------------------------------------------ multiprocessing

def test_spawn_runs_fn_of_i_in_each_process(tmp_path):
    mp.spawn(spawn_targets.write_rank, args=(str(tmp_path), 7), nprocs=3)
    assert sorted(int(f.read_text()) for f in tmp_path.glob("*.txt")) == [0, 7, 14]


def test_spawn_raises_with_the_failed_process_traceback():
    with pytest.raises(mp.ProcessRaisedException, match="process 1 refuses") as info:
        mp.spawn(spawn_targets.raise_on, args=(1,), nprocs=3)
    assert info.value.error_index == 1 and "Traceback" in str(info.value)
    with pytest.raises(mp.ProcessExitedException, match="exit code 3") as exited:
        mp.spawn(spawn_targets.exit_on, args=(0, 3), nprocs=2)
    assert exited.value.exit_code == 3 and exited.value.error_index == 0


def test_spawn_without_join_gives_the_context():
    ctx = mp.spawn(spawn_targets.raise_on, args=(-1,), nprocs=2, join=False)
    assert len(ctx.pids()) == 2
    while not ctx.join(30):
        pass
    with pytest.raises(ValueError, match="nprocs"):
        mp.spawn(spawn_targets.raise_on, args=(-1,), nprocs=0)


# ------------------------------------------------------------ pixel shuffle

def _np_pixel_shuffle(a: np.ndarray, r: int) -> np.ndarray:
    """torch's documented definition, as loops:
    out[..., c, h*r + i, w*r + j] = a[..., c*r*r + i*r + j, h, w]."""
    *lead, c, h, w = a.shape
    out = np.empty((*lead, c // (r * r), h * r, w * r), a.dtype)
    for ch in range(c // (r * r)):
        for i in range(r):
            for j in range(r):
                out[..., ch, i::r, j::r] = a[..., ch * r * r + i * r + j, :, :]
    return out


@pytest.mark.parametrize("shape,r", [((1, 4, 3, 5), 2), ((2, 18, 2, 3), 3), ((9, 1, 1), 3),
                                     ((2, 3, 8, 2, 2), 2), ((1, 5, 4, 4), 1)])
def test_pixel_shuffle_and_unshuffle_follow_torchs_definition(shape, r):
    a = np.random.default_rng(r).standard_normal(shape).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    y = tg.nn.PixelShuffle(r)(x)
    np.testing.assert_array_equal(y.numpy(), _np_pixel_shuffle(a, r))
    back = tg.nn.PixelUnshuffle(r)(y)
    np.testing.assert_array_equal(back.numpy(), a)
    w = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    (y * Tensor(w)).sum().backward()                          # a permutation: the gradient moves back
    np.testing.assert_array_equal(x.grad.numpy(), tg.nn.functional.pixel_unshuffle(Tensor(w), r).numpy())


def test_pixel_shuffle_refuses_bad_shapes():
    with pytest.raises(ValueError, match="divisible by upscale_factor"):
        tg.nn.PixelShuffle(2)(tg.zeros(1, 3, 2, 2))
    with pytest.raises(ValueError, match="divisible by downscale_factor"):
        tg.nn.PixelUnshuffle(2)(tg.zeros(1, 1, 3, 2))
    with pytest.raises(ValueError, match="int >= 1"):
        tg.nn.functional.pixel_shuffle(tg.zeros(1, 4, 2, 2), 0)


# ------------------------------------------------------------ copies and files

def test_deepcopy_of_tensors_and_modules_copies_the_values():
    import copy
    model = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.BatchNorm1d(4))
    model[0].weight.grad = tg.ones(4, 3)
    best = copy.deepcopy(model)                               # a best-model snapshot
    with tg.no_grad():
        model[0].weight.fill_(0.0)
        model[1].running_mean.fill_(5.0)
    assert best[0].weight.numpy().any() and not best[1].running_mean.numpy().any()
    assert best[0].weight.requires_grad and best[0].weight.grad.tolist() == [[1.0] * 3] * 4
    assert best[0].weight is not model[0].weight and isinstance(best, tg.nn.Sequential)
    shared = tg.tensor([1.0])
    pair = copy.deepcopy([shared, shared])                    # the same tensor twice: one copy, twice
    assert pair[0] is pair[1] and pair[0] is not shared
    with pytest.raises(RuntimeError, match="no graph behind it"):
        copy.deepcopy(tg.tensor([1.0], requires_grad=True) * 2)


def test_save_and_load_through_file_objects():
    import io
    state = {"w": tg.arange(6).reshape(2, 3).float(), "step": 3, "names": ["a", "b"]}
    buf = io.BytesIO()
    tg.save(state, buf)
    buf.seek(0)
    got = tg.load(buf, map_location="cpu")
    assert got["w"].tolist() == state["w"].tolist() and got["step"] == 3 and got["names"] == ["a", "b"]
    with pytest.raises(TypeError, match="file path .* or a binary file object"):
        tg.save(state, 42)
    with pytest.raises(TypeError, match=r"obj.load_state_dict\(tg.load\(path\)\)"):
        tg.save(tg.nn.Linear(2, 2), io.BytesIO())            # a whole Module: the one-line fix named


def test_the_backend_for_a_device_is_torchs_name_and_starts_a_group():
    import tg.distributed as dist
    devices = ("cpu", "cuda", "cuda:1", tg.device("cl", 0))
    assert [dist.get_default_backend_for_device(d) for d in devices] == ["gloo", "nccl", "nccl", "nccl"]
    assert dist.get_default_backend_for_device(Tensor([1.0]).device) == "gloo"
    assert dist.is_available() and dist.is_gloo_available() and dist.is_nccl_available()
    with pytest.raises(ValueError, match="expected a device"):
        dist.get_default_backend_for_device("tpu")
    dist.init_process_group(backend=dist.get_default_backend_for_device("cpu"))
    try:
        x = np.arange(4.0)
        dist.all_reduce(x)
        assert dist.get_backend() == "tcp" and x.tolist() == [0.0, 1.0, 2.0, 3.0]
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------ review fixes: the edges of the idioms

def test_assigning_data_leaves_views_of_the_old_memory_alone():
    p = Tensor([1.0, 2.0, 3.0, 4.0])
    v = p[1:3]
    p.data = Tensor([9.0, 8.0, 7.0, 6.0])
    p.add_(1.0)
    assert p.tolist() == [10.0, 9.0, 8.0, 7.0] and v.tolist() == [2.0, 3.0]     # v: the old storage


def test_deepcopy_keeps_a_parameter_a_parameter():
    import copy
    w = tg.nn.Parameter(tg.ones(2))
    c = copy.deepcopy(w)
    assert type(c) is tg.nn.Parameter and c.requires_grad and c.tolist() == [1.0, 1.0]
    frozen = copy.deepcopy(tg.nn.Parameter(tg.ones(2), requires_grad=False))
    assert type(frozen) is tg.nn.Parameter and not frozen.requires_grad


def test_a_sampler_without_a_generator_draws_its_seed_when_a_pass_starts():
    """torch: the default generator seeds each pass as it starts, so manual_seed after building the
    loader fixes the next order, and restoring the RNG state replays the next epoch's order."""
    from tg.utils.data import RandomSampler
    s = RandomSampler(range(30))
    tg.manual_seed(4)
    first = list(s)
    tg.manual_seed(4)
    assert list(s) == first
    state = tg.get_rng_state()
    nxt = list(s)
    tg.set_rng_state(state)
    assert list(s) == nxt and nxt != first


def test_spawn_passes_sys_exit_through():
    mp.spawn(spawn_targets.exit_with, args=(0,), nprocs=2)          # sys.exit(0): a clean end
    with pytest.raises(mp.ProcessExitedException, match="exit code 3") as info:
        mp.spawn(spawn_targets.exit_with, args=(3,), nprocs=1)
    assert info.value.exit_code == 3


def test_zero_groups_edges_as_torch():
    import tg.distributed as dist
    w = Tensor([1.0, -1.0], requires_grad=True)
    opt = dist.ZeroOptimizer([{"params": []}, {"params": [w], "lr": 0.5}], tg.nn.optim.SGD, lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == [0.0, 0.0] and [len(g["params"]) for g in opt.param_groups] == [0, 1]
    with pytest.raises(ValueError, match="more than one parameter group"):
        dist.ZeroOptimizer([{"params": [w]}, {"params": [w]}], tg.nn.optim.SGD, lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [w]})


def test_attention_masks_and_cell_states_are_checked():
    mha = tg.nn.MultiheadAttention(4, 2)
    x = tg.ones(3, 2, 4)
    with pytest.raises(TypeError, match="bool or floating-point mask"):
        mha(x, x, x, attn_mask=tg.zeros(3, 3, dtype=tg.int32))
    with pytest.raises(ValueError, match=r"expected hx of shape \(5, 4\)"):
        tg.nn.GRUCell(3, 4)(tg.ones(5, 3), tg.zeros(1, 4))
    with pytest.raises(ValueError, match=r"expected cx of shape \(5, 4\)"):
        tg.nn.LSTMCell(3, 4)(tg.ones(5, 3), (tg.zeros(5, 4), tg.zeros(1, 4)))


def test_join_reads_each_exit_code_once():
    """A process reaped between two reads of its exit code (None, then 3) was passed over as running by
    the failure check and then counted as ended well: spawn returned as if nothing failed (seen with two
    spawning processes at once). One read per join: that join says "running", the next one raises."""
    import os
    read_end, write_end = os.pipe()
    os.close(write_end)                            # a sentinel that is ready: the process has ended

    class Reaped:
        pid, sentinel = 1, read_end

        def __init__(self):
            self.reads = iter([None, None, 3])     # (alive, codes) of the first join, then reaped

        @property
        def exitcode(self):
            return next(self.reads, 3)

        def terminate(self):
            pass

        def join(self, timeout=None):
            pass
    try:
        ctx = mp.ProcessContext([Reaped()], ["/nonexistent/tg-error-file"])
        assert ctx.join() is False
        with pytest.raises(mp.ProcessExitedException, match="exit code 3"):
            ctx.join()
    finally:
        os.close(read_end)
