"""Mixed precision (tg.amp, issue 36 items 1 and 2): autocast's dtypes against torch's op lists, its
values and gradients against numpy's bfloat16 / float16 arithmetic, its scoping (nesting, threads, an
explicit dtype, checkpoint's recompute, TinyJit), and GradScaler's scale sequence against the documented
algorithm.

The expected dtypes below are torch's: the CPU column as torch 2.x computes them under
torch.autocast("cpu", dtype=torch.bfloat16) (its CPU lists, plus what its composites do: einsum goes
through bmm), the GPU column as torch's CUDA lists document them (tg uses those for CL devices too)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tg
import tg.nn.functional as F
from tg import Tensor, TinyJit, nn
from tg.amp import GradScaler
from tg.core import autocast as state

DEVICE = Tensor([0.0]).device
KIND = state.KINDS.get(DEVICE.split(":")[0], "cpu")
LOW = {"cpu": tg.bfloat16}.get(KIND, tg.float16)

# op -> (inputs: "f32" | "low" | "mixed", the output dtype: "low" | "f32") for each kind
LOWER_BOTH = ["matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d", "conv3d",
              "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention",
              "einsum"]
LOSSES = ["cross_entropy", "mse_loss", "nll_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
          "binary_cross_entropy_with_logits", "binary_cross_entropy"]
KEEP_CPU = ["softmax", "log_softmax", "layer_norm", "group_norm", "exp", "sum", "mean", "cumsum", "norm",
            "normalize", "softplus", "rsqrt", "pow", "log", "cosine_similarity"]
FLOAT32_GPU = ["prod", "cdist", "softmax", "log_softmax", "layer_norm", "group_norm", "exp", "sum", "cumsum",
               "norm", "normalize", "softplus", "rsqrt", "pow", "log", "cosine_similarity"]
EXPECTED = {
    "cpu": {**{op: ("f32", "low") for op in LOWER_BOTH},
            **{op: ("low", "f32") for op in LOSSES + ["prod", "cdist", "trace"]},
            **{op: ("low", "low") for op in KEEP_CPU},
            **{op: ("f32", "f32") for op in ["mv", "dot", "addmv"]},
            **{op: ("mixed", "f32") for op in ["cat", "stack"]}},
    "gpu": {**{op: ("f32", "low") for op in LOWER_BOTH + ["mv", "addmv"]},
            # (binary_cross_entropy is refused under CUDA autocast by torch; tg runs it as it is)
            **{op: ("low", "f32") for op in LOSSES[:-1] + FLOAT32_GPU},
            **{op: ("low", "low") for op in ["mean", "trace"]},
            **{op: ("mixed", "f32") for op in ["cat", "stack", "dot"]}},
}


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, *shape]).standard_normal(shape).astype(np.float32)


def _call(op: str, kind_of_inputs: str) -> Tensor:
    """op on inputs of the given kind: float32, the low dtype, or one of each."""
    low = kind_of_inputs == "low"

    def t(*shape: int, seed: int = 0) -> Tensor:
        x = Tensor(_data(*shape, seed=seed))
        return x.cast(LOW) if low else x
    a, b, v = t(4, 4), t(4, 4, seed=1), t(4, seed=2)
    B = t(2, 4, 4)
    target = Tensor([0, 1, 2, 3])
    calls = {
        "matmul": lambda: a @ b, "mm": lambda: a.mm(b), "bmm": lambda: B.bmm(B),
        "addmm": lambda: a.addmm(a, b),
        "baddbmm": lambda: B.baddbmm(B, B), "linear": lambda: F.linear(a, b, v),
        "conv1d": lambda: F.conv1d(t(1, 2, 5), t(3, 2, 3)),
        "conv2d": lambda: F.conv2d(t(1, 2, 5, 5), t(3, 2, 3, 3)),
        "conv3d": lambda: F.conv3d(t(1, 2, 4, 4, 4), t(3, 2, 2, 2, 2)),
        "conv_transpose1d": lambda: F.conv_transpose1d(t(1, 2, 5), t(2, 3, 3)),
        "conv_transpose2d": lambda: F.conv_transpose2d(t(1, 2, 5, 5), t(2, 3, 3, 3)),
        "conv_transpose3d": lambda: F.conv_transpose3d(t(1, 2, 3, 3, 3), t(2, 3, 2, 2, 2)),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(B[None], B[None], B[None]),
        "einsum": lambda: tg.einsum("ij,jk->ik", a, b),
        "cross_entropy": lambda: F.cross_entropy(a, target), "mse_loss": lambda: F.mse_loss(a, b),
        "nll_loss": lambda: F.nll_loss(a, target), "l1_loss": lambda: F.l1_loss(a, b),
        "smooth_l1_loss": lambda: F.smooth_l1_loss(a, b), "huber_loss": lambda: F.huber_loss(a, b),
        "kl_div": lambda: F.kl_div(a, b, reduction="batchmean"),
        "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(a, b.sigmoid()),
        "binary_cross_entropy": lambda: F.binary_cross_entropy(a.sigmoid(), b.sigmoid()),
        "prod": lambda: a.prod(), "cdist": lambda: tg.cdist(a, b), "trace": lambda: a.trace(),
        "softmax": lambda: F.softmax(a, -1), "log_softmax": lambda: F.log_softmax(a, -1),
        "layer_norm": lambda: F.layer_norm(a, (4,)), "group_norm": lambda: F.group_norm(a[None], 2),
        "exp": lambda: a.exp(), "sum": lambda: a.sum(), "mean": lambda: a.mean(),
        "cumsum": lambda: a.cumsum(0),
        "norm": lambda: a.norm(), "normalize": lambda: F.normalize(a), "softplus": lambda: F.softplus(a),
        "rsqrt": lambda: a.abs().rsqrt(), "pow": lambda: a.pow(2), "log": lambda: a.abs().log(),
        "cosine_similarity": lambda: F.cosine_similarity(a, b),
        "mv": lambda: a.mv(v), "dot": lambda: v.dot(v.cast(LOW) if kind_of_inputs == "mixed" else v),
        "addmv": lambda: v.addmv(a, v),
        "cat": lambda: tg.cat([a, b.cast(LOW)]), "stack": lambda: tg.stack([a, b.cast(LOW)]),
    }
    return calls[op]()


COLUMN = EXPECTED["cpu" if KIND == "cpu" else "gpu"]


@pytest.mark.parametrize("op", sorted(COLUMN))
def test_each_op_gives_the_dtype_torch_gives_under_autocast(op):
    inputs, out = COLUMN[op]
    with tg.autocast(KIND):
        got = _call(op, inputs)
    assert got.dtype == (LOW if out == "low" else tg.float32), (op, inputs, got.dtype)
    outside = _call(op, inputs)          # and nothing changes outside a region
    assert outside.dtype == (LOW if inputs == "low" else tg.float32), (op, outside.dtype)


def test_every_op_in_the_tables_that_tg_has_is_marked():
    """An op named in a table but defined without @autocast_op would silently run in float32."""
    import tg.linalg
    import tg.namespace
    surfaces = [Tensor, F, tg.namespace, tg.linalg]
    for kind, table in state.TABLES.items():
        for name in table:
            defined = [getattr(s, name) for s in surfaces if callable(getattr(s, name, None))]
            for fn in defined:
                code = getattr(fn, "__code__", None)
                if code is not None and code.co_name == "method_as_function":    # tg.prod(x) is x.prod()
                    fn = getattr(Tensor, name)
                assert getattr(fn, "__wrapped__", None) is not None and name in state.MARKED, (kind, name, fn)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even, by bits) -> float64."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def _low(x: np.ndarray) -> np.ndarray:
    return _bf16(x) if LOW == tg.bfloat16 else x.astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("seed", range(3))
def test_linear_under_autocast_computes_in_the_low_dtype_and_its_gradients_in_float32(seed):
    rng = np.random.default_rng(seed)
    n, k, m = (int(s) for s in rng.integers(3, 70, 3))
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n, k), (m, k), (m,)))
    layer = nn.Linear(k, m)
    layer.weight.assign(Tensor(w))
    layer.bias.assign(Tensor(b))
    xt = Tensor(x, requires_grad=True)
    with tg.autocast(KIND):
        y = layer(xt)
        loss = (y.float() ** 2).sum()
    assert y.dtype == LOW and loss.dtype == tg.float32
    loss.backward()
    # forward: the operands rounded to the low dtype, float32 accumulation, the result rounded once
    want = _low(x) @ _low(w).T + _low(b)
    got = y.float().numpy()
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=2 ** -7 * np.abs(want).max())
    # backward: gradients of the float32 leaves, in float32, within the low dtype's precision
    g = 2 * got
    assert layer.weight.grad.dtype == tg.float32 and xt.grad.dtype == tg.float32
    scale = np.abs(g).max() * max(n, k)
    np.testing.assert_allclose(layer.weight.grad.numpy(), g.T @ x, atol=4 * 2 ** -8 * scale)
    np.testing.assert_allclose(xt.grad.numpy(), g @ w, atol=4 * 2 ** -8 * scale)


@pytest.mark.parametrize("k", [300, 4099, 60000 if LOW == tg.float16 else 65536])
def test_products_accumulate_in_float32(k):
    """A low-dtype running sum of ones stalls at 256 in bfloat16 (2048 in float16); summed in float32 and
    rounded once, the result is k in the low dtype."""
    with tg.autocast(KIND):
        got = Tensor.ones(2, k) @ Tensor.ones(k, 3)
    assert got.dtype == LOW
    np.testing.assert_array_equal(got.float().numpy(), np.full((2, 3), _low(np.array([k], np.float32))[0]))


def test_regions_nest_turn_off_and_belong_to_their_thread():
    a = Tensor(_data(3, 3))
    with tg.autocast(KIND):
        assert (a @ a).dtype == LOW
        with tg.autocast(KIND, enabled=False):
            assert (a @ a).dtype == tg.float32
            with tg.autocast(KIND, dtype=tg.float16):
                assert (a @ a).dtype == tg.float16 and tg.amp.get_autocast_dtype(KIND) == tg.float16
        assert (a @ a).dtype == LOW and tg.amp.is_autocast_enabled(KIND)
        seen = []
        thread = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        thread.start()
        thread.join()
        assert seen == [tg.float32]          # another thread: no region there
    assert (a @ a).dtype == tg.float32 and not tg.amp.is_autocast_enabled(KIND)
    other = "cuda" if KIND == "cpu" else "cpu"
    with tg.autocast(other):                 # a region for another device kind changes nothing here
        assert (a @ a).dtype == tg.float32


def test_an_explicit_dtype_and_float64_are_left_alone(monkeypatch):
    monkeypatch.setitem(state.TABLES[KIND], "sum", "lower")      # a lowered op that takes dtype=
    a = Tensor(_data(5, 3))
    with tg.autocast(KIND):
        assert a.sum().dtype == LOW
        assert a.sum(dtype=tg.float32).dtype == tg.float32
        d = a.cast(tg.float64)
        assert (d @ d.T).dtype == tg.float64


def test_bad_arguments_say_what_is_expected():
    with pytest.raises(ValueError, match="expected 'cpu', 'cuda' or 'cl'"):
        tg.autocast("tpu")
    with pytest.raises(ValueError, match="expected tg.bfloat16 or tg.float16"):
        tg.autocast("cpu", dtype=tg.float64)


def _loop(one_region: bool, accumulate: int) -> list:
    """SGD on a two-layer model, each step `accumulate` backward passes, the whole loop in one autocast
    region or each forward in its own; an eval under no_grad between steps. Losses and final weights."""
    rng = np.random.default_rng(3)
    tg.manual_seed(7)
    model = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 2))
    opt = nn.optim.SGD(model.parameters(), lr=0.05)
    xs = [Tensor(rng.standard_normal((4, 6)).astype(np.float32)) for _ in range(4 * accumulate)]
    seen = []
    outer = tg.autocast(KIND, enabled=one_region)
    with outer:
        for step in range(4):
            opt.zero_grad()
            for a in range(accumulate):
                with tg.autocast(KIND):
                    loss = model(xs[step * accumulate + a]).float().square().mean()
                loss.backward()
                seen.append(loss.item())
            opt.step()
            with tg.no_grad(), tg.autocast(KIND):
                seen.append(model(xs[0]).float().sum().item())
    return seen + [p.numpy().tolist() for p in model.parameters()]


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_whole_training_loop_in_one_region_computes_what_a_region_per_forward_does(accumulate):
    """Weights updated in place, gradients accumulated over several backward passes, an eval under
    no_grad in between: inside one long region every forward casts the current weights (a cached cast
    went stale, lost its graph after the first backward, or missed the gradient)."""
    assert _loop(True, accumulate) == _loop(False, accumulate)


def test_a_decorated_function():
    layer = nn.Linear(6, 6)

    @tg.autocast(KIND)
    def twice(x: Tensor) -> Tensor:
        return layer(layer(x))
    x = Tensor(_data(2, 6))
    assert twice(x).dtype == LOW and (x @ x.T).dtype == tg.float32


UNLISTED = {
    "sigmoid": lambda a: a.sigmoid(), "tanh": lambda a: a.tanh(), "relu": lambda a: F.relu(a),
    "silu": lambda a: F.silu(a), "gelu": lambda a: F.gelu(a), "elu": lambda a: F.elu(a),
    "celu": lambda a: F.celu(a), "selu": lambda a: F.selu(a), "mish": lambda a: F.mish(a),
    "logsigmoid": lambda a: F.logsigmoid(a), "softsign": lambda a: F.softsign(a),
    "tanhshrink": lambda a: F.tanhshrink(a), "glu": lambda a: F.glu(a), "hardswish": lambda a: F.hardswish(a),
    "batch_norm": lambda a: F.batch_norm(a, Tensor.zeros(4).cast(a.dtype), Tensor.ones(4).cast(a.dtype)),
    "pairwise_distance": lambda a: F.pairwise_distance(a, a), "abs": lambda a: a.abs(),
    "mean": lambda a: a.mean(), "var": lambda a: a.var(), "std": lambda a: a.std(),
    "square": lambda a: a * a, "div": lambda a: a / 3.0,
}


@pytest.mark.parametrize("op", sorted(UNLISTED))
def test_an_op_in_no_list_keeps_its_dtype_under_the_gpu_lists(op, monkeypatch):
    """torch runs an op in no list in its inputs' dtype. tg builds many of them from listed ops (sigmoid
    from exp, batch_norm from rsqrt and sum), which the GPU lists force to float32: those inner calls are
    an op's insides, not the user's, and are not cast (emulated here on this device with the CUDA lists)."""
    monkeypatch.setitem(state.KINDS, DEVICE.split(":")[0], "cuda")
    a = Tensor(_data(3, 4)).cast(tg.float16)
    with tg.autocast("cuda", dtype=tg.float16):
        assert UNLISTED[op](a).dtype == tg.float16, op
        assert a.exp().dtype == tg.float32 and (Tensor(_data(3, 4)) @ Tensor(_data(4, 2))).dtype == tg.float16


def test_promoting_float16_with_bfloat16_gives_float32():
    with tg.autocast(KIND):
        got = tg.cat([Tensor([70000.0]).cast(tg.bfloat16), Tensor([1.0]).cast(tg.float16)])
    assert got.dtype == tg.float32 and got.numpy()[0] == 70144.0     # bfloat16's 70000


def test_checkpoint_recomputes_under_the_forwards_autocast():
    from tg.utils.checkpoint import checkpoint
    rng = np.random.default_rng(5)
    w1, w2 = (Tensor(rng.standard_normal((7, 7)).astype(np.float32), requires_grad=True) for _ in range(2))
    x = Tensor(rng.standard_normal((3, 7)).astype(np.float32))

    def block(t: Tensor) -> Tensor:
        return (t @ w1).relu() @ w2
    grads = []
    for wrap in (False, True):
        w1.grad = w2.grad = None
        with tg.autocast(KIND):
            y = checkpoint(block, x, use_reentrant=False) if wrap else block(x)
        y.float().sum().backward()             # backward (and the recompute) outside the region
        grads.append((w1.grad.numpy(), w2.grad.numpy()))
    for plain, recomputed in zip(*grads):
        np.testing.assert_array_equal(plain, recomputed)


def test_a_jitted_function_keeps_the_dtypes_of_its_capture():
    step = tg.TinyJit(lambda a, b: (a @ b).float().sum(1).realize())
    data = [(Tensor(_data(4, 5, seed=i)), Tensor(_data(5, 3, seed=i + 10))) for i in range(4)]
    with tg.autocast(KIND):
        for a, b in data:
            got = step(a, b).numpy()
            want = (_low(a.numpy()) @ _low(b.numpy())).astype(np.float32)
            want = _low(want).sum(1)
            np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------------------- GradScaler

def _documented(pattern: list[bool], init: float, growth: float, backoff: float,
                interval: int) -> list[float]:
    """The scale after each step, by torch's description: back off and reset the count after an
    overflow; after `interval` clean steps in a row, grow and reset the count."""
    scale, clean, out = init, 0, []
    for overflow in pattern:
        if overflow:
            scale, clean = scale * backoff, 0
        else:
            clean += 1
            if clean == interval:
                scale, clean = scale * growth, 0
        out.append(scale)
    return out


class HostSGD(nn.optim.SGD):
    """An optimizer class of the user's: GradScaler decides on its steps on the host."""


@pytest.mark.parametrize("where", ["device", "host"])
@pytest.mark.parametrize("seed", range(4))
def test_the_scale_follows_the_documented_algorithm_and_overflowing_steps_are_skipped(seed, where):
    rng = np.random.default_rng(seed)
    pattern = [bool(v) for v in rng.random(25) < 0.25]
    interval = int(rng.integers(1, 5))
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    opt = (nn.optim.SGD if where == "device" else HostSGD)([w], lr=0.125)
    scaler = GradScaler(init_scale=2.0 ** 10, growth_interval=interval)
    scales, expected_w = [], np.ones(3, np.float64)
    for step, overflow in enumerate(pattern):
        opt.zero_grad()
        bad = Tensor([np.inf if overflow else 1.0, 1.0, 1.0])
        loss = (w * Tensor([1.0, 2.0, 3.0]) * bad).sum()
        scaler.scale(loss).backward()
        if step % 2:
            scaler.unscale_(opt)              # explicitly (for a clip in between) or by step()
            if not overflow:
                np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0, 3.0])
        scaler.step(opt)
        scaler.update()
        if not overflow:
            expected_w -= 0.125 * np.array([1.0, 2.0, 3.0])
        np.testing.assert_allclose(w.numpy(), expected_w, rtol=1e-6)
        scales.append(scaler.get_scale())
    assert scales == _documented(pattern, 2.0 ** 10, 2.0, 0.5, interval)
    state_dict = scaler.state_dict()
    again = GradScaler()
    again.load_state_dict(state_dict)
    assert again.state_dict() == state_dict and again.get_scale() == scales[-1]


OPTIMIZERS = {
    "SGD": lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "Adam": lambda ps: nn.optim.Adam(ps, lr=0.01),
    "AdamW": lambda ps: nn.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    "RMSprop": lambda ps: nn.optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "Adagrad": lambda ps: nn.optim.Adagrad(ps, lr=0.1),
    "Adadelta": lambda ps: nn.optim.Adadelta(ps, lr=1.0),
}


def _snapshot(opt) -> dict[str, np.ndarray]:
    state = {k: np.array(v.numpy(), copy=True) for k, v in opt.flat_state_dict().items()
             if isinstance(v, Tensor)}
    return state | {f"p{i}": np.array(p.numpy(), copy=True) for i, p in enumerate(opt.params)}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_step_skipped_on_the_device_changes_nothing_and_a_clean_one_is_the_unscaled_step(name):
    """Every write of tg's optimizers (parameters, every state buffer, the step count) is conditioned on
    the device verdict: an overflowing step leaves each bit as it was; a clean step is the step an
    unscaled twin takes with the unscaled gradients (a power-of-two scale divides exactly; the kernels
    differ, so their multiply-adds may contract into FMAs otherwise: within float32 rounding of the
    terms)."""
    rng = np.random.default_rng(sorted(OPTIMIZERS).index(name))
    init = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    params = [Tensor(a, requires_grad=True) for a in init]
    twin = [Tensor(a, requires_grad=True) for a in init]
    opt, ref = OPTIMIZERS[name](params), OPTIMIZERS[name](twin)
    scaler = GradScaler(init_scale=2.0 ** 6, growth_interval=3)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    for step, overflow in enumerate([False, True, False, False, True, True, False, False]):
        before = _snapshot(opt)
        for o in (opt, ref):
            o.zero_grad()
        data = x * (np.inf if overflow else 1.0) if step % 3 else np.where(overflow, np.nan, x)
        loss = ((Tensor(data) @ params[0] + params[1]) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if overflow:
            after = _snapshot(opt)
            for k, v in before.items():
                np.testing.assert_array_equal(after[k], v, err_msg=f"{name} step {step}: {k} changed")
        else:
            ((Tensor(data) @ twin[0] + twin[1]) ** 2).mean().backward()
            ref.step()
            got = _snapshot(opt)
            for k, v in _snapshot(ref).items():
                np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-6, err_msg=f"{name} {step}: {k}")


def _scaled_steps(init: list[np.ndarray], batches: list, overflows: set[int], clip: bool,
                  jit: bool) -> tuple:
    """(the scale after each step, the parameters, the optimizer's state) of float16 steps with a scaler."""
    ps = [Tensor(a, requires_grad=True) for a in init]
    opt = nn.optim.Adam(ps, lr=1e-2)
    scaler = GradScaler(init_scale=2.0 ** 8, growth_interval=2)

    def step(x, y):
        opt.zero_grad()
        with tg.autocast("cuda", dtype=tg.float16):        # (the CUDA lists: float16 matmuls)
            h = (x @ ps[0] + ps[1]).relu()
            loss = ((h @ ps[2]).float() - y).square().mean()
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(ps, 1.0)
        scaler.step(opt)
        scaler.update()
        return loss.realize()
    run = TinyJit(step) if jit else step
    scales = []
    for i, (x, y) in enumerate(batches):
        xi = x * np.float32(1e30) if i in overflows else x        # inf in float16: the step is skipped
        run(Tensor(xi), Tensor(y))
        scales.append(scaler.get_scale())
    return scales, [p.numpy().copy() for p in ps], _snapshot(opt)


@pytest.mark.parametrize("clip", [False, True])
def test_a_whole_float16_step_with_the_scaler_is_captured_by_tinyjit(clip):
    """scale, backward, step and update in one TinyJit, replayed with no host sync: the same parameters,
    optimizer state and scale sequence as the same steps run eagerly, overflowing steps included."""
    rng = np.random.default_rng(11)
    init = [rng.standard_normal((8, 16)).astype(np.float32) * 0.3, np.zeros(16, np.float32),
            rng.standard_normal((16, 4)).astype(np.float32) * 0.3]
    batches = [(rng.standard_normal((6, 8)).astype(np.float32),
                rng.standard_normal((6, 4)).astype(np.float32)) for _ in range(9)]
    overflows = {3, 6}
    results = [_scaled_steps(init, batches, overflows, clip, jit) for jit in (False, True)]
    (s0, p0, o0), (s1, p1, o1) = results
    assert s0 == s1 and s0[3] == s0[2] / 2 and s0[6] == s0[5] / 2
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
    for k in o0:
        np.testing.assert_array_equal(o0[k], o1[k], err_msg=k)


@pytest.mark.parametrize("jit", [False, True])
def test_settings_changed_after_a_capture_hold_in_its_replays(jit):
    """The growth factor, backoff factor and interval live on the device beside the scale: a loaded state
    or a setter changes what a captured step's replays do, as it changes an eager step. A count past a
    lowered interval never grows (torch's rule, on both paths)."""
    w = Tensor(np.ones(3, np.float32), requires_grad=True)
    opt, scaler = nn.optim.SGD([w], lr=0.01), GradScaler(init_scale=16.0, growth_interval=100)

    def step(x):
        opt.zero_grad()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        return w.realize()
    run = TinyJit(step) if jit else step
    scales = []
    for i in range(10):
        if i == 4:
            state = scaler.state_dict() | {"growth_interval": 1, "growth_factor": 4.0, "_growth_tracker": 0}
            scaler.load_state_dict(state)
        if i == 7:
            scaler.set_growth_factor(2.0)
        x = np.full(3, np.inf if i == 8 else 1.0, np.float32)
        run(Tensor(x))
        scales.append(scaler.get_scale())
    assert scales == [16.0] * 4 + [64.0, 256.0, 1024.0, 2048.0, 1024.0, 2048.0]
    scaler.set_growth_interval(5)
    assert scaler.state_dict()["growth_interval"] == 5 and scaler.get_growth_interval() == 5
    for _ in range(3):          # the count was 0 (step 9 grew): 1, 2, 3, below 5, no growth
        run(Tensor(np.ones(3, np.float32)))
    assert scaler.get_scale() == 2048.0 and scaler.state_dict()["_growth_tracker"] == 3


def test_steps_decided_on_two_devices_share_one_count():
    """Optimizers on two devices, stepped in turn: the count of clean steps moves with the values (a
    device that decided before and decides again starts from the current count, not its own old one)."""
    pattern = ["CPU", "NUMPY", "NUMPY", "CPU", "CPU", "CPU"]
    results = []
    for opt_class in (nn.optim.SGD, HostSGD):
        scaler = GradScaler(init_scale=4.0, growth_interval=3)
        ws = {d: Tensor(np.ones(2, np.float32), device=d, requires_grad=True) for d in ("CPU", "NUMPY")}
        opts = {d: opt_class([w], lr=0.1) for d, w in ws.items()}
        seq = []
        for d in pattern:
            opts[d].zero_grad()
            scaler.scale(ws[d].sum()).backward()
            scaler.step(opts[d])
            scaler.update()
            seq.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"]))
        results.append(seq)
    assert results[0] == results[1] == [(4.0, 1), (4.0, 2), (8.0, 0), (8.0, 1), (8.0, 2), (16.0, 0)]


def test_an_optimizer_deciding_on_the_host_inside_tinyjit_says_so():
    """TinyJit's watch of host reads names the scaler's (a replay could not skip on a new verdict)."""
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt, scaler = HostSGD([w], lr=0.1), GradScaler()

    def step():
        opt.zero_grad()
        scaler.scale((w * w).sum()).backward()
        scaler.step(opt)
        scaler.update()
        return w.realize()
    jitted = TinyJit(step)
    with pytest.raises(ValueError, match=r"reads tensor values on the host \(GradScaler.step"):
        for _ in range(3):
            jitted()


def test_grad_scaler_misuse_and_defaults():
    scaler = GradScaler()
    assert (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_backoff_factor(),
            scaler.get_growth_interval()) == (65536.0, 2.0, 0.5, 2000)
    w = Tensor([1.0], requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.1)
    with pytest.raises(RuntimeError, match="no optimizer was unscaled or stepped"):
        scaler.update()
    scaler.scale(w.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(ValueError, match="backoff_factor"):
        GradScaler(backoff_factor=2.0)
    off = GradScaler(enabled=False)
    loss = w.sum()
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}


def test_a_scaled_float16_loss_keeps_gradients_that_float16_alone_flushes():
    """The reason for scaling: a float16 gradient of 1e-8 is 0 unscaled; scaled, it survives, and
    unscale_ gives it back in float32."""
    w = Tensor(np.ones(4, np.float32), requires_grad=True)
    opt = nn.optim.SGD([w], lr=1.0)
    for scaled in (False, True):
        w.grad = None
        scaler = GradScaler(init_scale=2.0 ** 12, enabled=scaled)      # 2^16 is past float16's range
        loss = (w.cast(tg.float16) * 1e-8).sum()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        got = w.grad.numpy()
        assert (got == 0).all() if not scaled else np.allclose(got, 1e-8, rtol=1e-2)


# ---------------------------------------------------------------------------- Module.to(dtype)

@pytest.mark.parametrize("how", ["to", "method", "tensor", "both"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64", "float32"])
def test_module_to_dtype_casts_floating_parameters_buffers_and_gradients_in_place(dtype, how):
    """torch's Module.to(dtype) / half() / bfloat16() / float() / double(): floating parameters,
    buffers and gradients take the dtype, values rounded as the dtype rounds; integer buffers (a
    BatchNorm's count) keep theirs; the Tensor objects stay (an optimizer holds them)."""
    want = getattr(tg, dtype)
    model = nn.Sequential(nn.Linear(5, 3), nn.BatchNorm1d(3))
    model(Tensor(_data(4, 5))).sum().backward()
    params = list(model.parameters())
    before = {id(p): p.numpy().astype(np.float64) for p in params}
    grads = {id(p): p.grad.numpy().astype(np.float64) for p in params}
    if how == "to":
        model.to(want)
    elif how == "method":
        getattr(model, {"bfloat16": "bfloat16", "float16": "half", "float64": "double",
                        "float32": "float"}[dtype])()
    elif how == "tensor":
        model.to(Tensor([0.0]).cast(want))
    else:
        model.to(DEVICE, dtype=want)
    assert list(model.parameters()) == params
    for p in params:
        assert p.dtype == want and p.grad.dtype == want
        cast = {"bfloat16": _bf16, "float16": lambda v: v.astype(np.float16).astype(np.float64)}.get(
            dtype, lambda v: v.astype(np.float32).astype(np.float64))
        np.testing.assert_array_equal(p.numpy().astype(np.float64), cast(before[id(p)].astype(np.float32)))
        np.testing.assert_array_equal(p.grad.numpy().astype(np.float64),
                                      cast(grads[id(p)].astype(np.float32)))
    bn = model[1]
    assert bn.running_mean.dtype == want and bn.num_batches_tracked.dtype == tg.int64
    with pytest.raises(TypeError, match="only casts to a floating dtype"):
        model.to(tg.int32)
