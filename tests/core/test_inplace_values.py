"""A value read before an in-place write keeps the value it had, however it is computed: pending, realized,
inlined into the very kernel that writes (issue 34 item 3: `n = (g*g).sum().sqrt(); g.assign(g * (n + 1))`
read n from the new memory). Random programs of reads and in-place writes are run in tg and, eagerly, in
numpy float64; every value tg hands out must match what numpy had when it was made."""
import numpy as np
import pytest

import tg
from tg import Tensor

# a value made from a tensor (a reader): elementwise, reduced, a stored copy
READERS = {
    "mul2": (lambda t: t * 2, lambda a: a * 2),
    "sq_plus": (lambda t: t * t + 1, lambda a: a * a + 1),
    "norm": (lambda t: (t * t).sum().sqrt(), lambda a: np.sqrt((a * a).sum())),
    "row_sum": (lambda t: t.sum(-1, keepdim=True), lambda a: a.sum(-1, keepdims=True)),
    "col_max": (lambda t: t.max(0, keepdim=True).values, lambda a: a.max(0, keepdims=True)),
    "clone": (lambda t: t.clone(), lambda a: a.copy()),
    "exp_mean": (lambda t: (t * 0.1).exp().mean(), lambda a: np.exp(a * 0.1).mean()),
}
# an in-place write of x from a value v (broadcastable to x)
WRITES = {
    "iadd": (lambda x, v: x.__iadd__(v), lambda a, v: a + v),
    "isub": (lambda x, v: x.__isub__(v), lambda a, v: a - v),
    "imul": (lambda x, v: x.__imul__(v), lambda a, v: a * v),
    "idiv": (lambda x, v: x.__itruediv__(v.abs() + 1), lambda a, v: a / (np.abs(v) + 1)),
    "assign_scaled": (lambda x, v: x.assign(x * (v + 1)), lambda a, v: a * (v + 1)),
    "copy": (lambda x, v: x.copy_(v), lambda a, v: np.broadcast_to(v, a.shape).copy()),
    "setitem_row": (lambda x, v: x.__setitem__(0, v.reshape(-1)[:1] * 3),
                    lambda a, v: np.concatenate([np.full_like(a[:1], v.reshape(-1)[0] * 3), a[1:]])),
}


def _broadcasts(shape: tuple, to: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, to) == to
    except ValueError:
        return False


def _run_program(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 6)))
    start = rng.standard_normal(shape)
    # the tensors written in place, and every value read, each with numpy's value of it
    targets = [(Tensor(start.astype(np.float32)), start.copy())]
    values: list[tuple[Tensor, np.ndarray]] = []
    for _ in range(int(rng.integers(3, 12))):
        kind = rng.choice(["read", "read", "write", "realize", "check", "new_target"])
        pool = targets + values
        if kind == "read":
            name = sorted(READERS)[rng.integers(len(READERS))]
            t, a = pool[rng.integers(len(pool))]
            values.append((READERS[name][0](t), READERS[name][1](a)))
        elif kind == "write":
            i = int(rng.integers(len(targets)))
            x, a = targets[i]
            v, va = pool[rng.integers(len(pool))]
            if not _broadcasts(va.shape, a.shape):
                v, va = v.sum(), va.sum()
            name = sorted(WRITES)[rng.integers(len(WRITES))]
            WRITES[name][0](x, v)
            targets[i] = (x, WRITES[name][1](a, va))
        elif kind == "realize":
            t, _ = pool[rng.integers(len(pool))]
            t.realize()
        elif kind == "check":
            t, a = pool[rng.integers(len(pool))]
            np.testing.assert_allclose(t.numpy(), a, rtol=1e-4, atol=1e-4)
        else:
            t, a = values[rng.integers(len(values))] if values else targets[0]
            # a computed tensor, written in place later (at least 1-d: the writes index rows)
            targets.append((t.reshape(-1).clone() + 0, a.reshape(-1).copy()))
    order = rng.permutation(len(targets) + len(values))
    everything = targets + values
    for i in order:                        # read back in any order: none may change another
        t, a = everything[i]
        np.testing.assert_allclose(t.numpy(), a, rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}, value {i}")


@pytest.mark.parametrize("seed", range(60))
def test_random_reads_and_in_place_writes_match_numpy(seed):
    _run_program(seed)


def test_a_norm_inlined_into_the_write_it_feeds_keeps_its_value():
    g = tg.tensor([3.0, 4.0])
    n = (g * g).sum().sqrt()
    g.assign(g * (n + 1))
    g.realize()
    assert n.item() == 5.0
    assert g.tolist() == [18.0, 24.0]


@pytest.mark.parametrize("repeat", range(3))   # the second and third run reuse the kept schedule
def test_a_value_read_through_a_chain_of_inlined_readers(repeat):
    x = tg.tensor([1.0, 2.0])
    y = x * 2
    z = y + 1                        # reads y, which the write below inlines: z must still see y's value
    x.assign(y * 3)
    x.realize()
    assert z.tolist() == [3.0, 5.0] and y.tolist() == [2.0, 4.0] and x.tolist() == [6.0, 12.0]


def test_x_times_y_where_y_was_made_from_x():
    for read_first in (False, True):
        x = tg.tensor([1.0, -2.0, 3.0])
        y = x * 2
        if read_first:
            assert y.tolist() == [2.0, -4.0, 6.0]
        x *= y
        assert y.tolist() == [2.0, -4.0, 6.0]
        assert x.tolist() == [2.0, 8.0, 18.0]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW"])
def test_clip_grad_norm_returns_the_norm_before_clipping_after_the_step(opt_name):
    from tg import nn
    rng = np.random.default_rng(3)
    w = Tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    opt = getattr(nn.optim, opt_name)([w, b], lr=0.1)
    x = Tensor(rng.standard_normal((5, 4)).astype(np.float32))
    for _ in range(3):
        opt.zero_grad()
        ((x @ w + b) ** 2).sum().backward()
        grads = np.concatenate([w.grad.numpy().ravel(), b.grad.numpy().ravel()])
        norm = nn.utils.clip_grad_norm_([w, b], max_norm=0.5)
        opt.step()
        np.testing.assert_allclose(norm.item(), np.linalg.norm(grads.astype(np.float64)), rtol=1e-5)
