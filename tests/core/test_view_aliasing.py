"""Views alias their tensor's memory in program order, as torch's do (issue 34 item 8's siblings): a view of a
constant is written through (`zeros(4)[0:1].copy_(v)` left the zeros), a whole-tensor alias (detach,
unsqueeze then select) sees and makes writes, a view made before a write to its tensor reads the new values
(`v = x[0:2]; x += 1; v` gave the old ones, or the new ones, by which was read first), and a diagonal of a
non-square matrix or of a view is written through. Copies torch makes (flip, pad, torch.tensor(t), clone, a
reshape no strides express) keep the values they had. Every case is generated over view chains, in-place
ops and kinds of tensor, against numpy doing the same through its own views (which alias as torch's do);
a value computed before a write keeps its old value throughout."""
import numpy as np
import pytest

import tg
from tg import Tensor


def _diag(a: np.ndarray, offset: int = 0) -> np.ndarray:
    """numpy's writable view of a 2-d array's diagonal (np.diagonal's is read-only)."""
    n, m = a.shape
    start = (0, offset) if offset >= 0 else (-offset, 0)
    k = max(0, min(n - start[0], m - start[1]))
    sub = a[start[0]:, start[1]:] if k else a[:0, :0]
    return np.lib.stride_tricks.as_strided(sub, shape=(k,), strides=(sum(a.strides),))


# (name, applies to shape, tg view, numpy view)
VIEWS = [
    ("slice", lambda s: s[0] > 1, lambda t: t[1:], lambda a: a[1:]),
    ("step_slice", lambda s: s[-1] > 2, lambda t: t[..., ::2], lambda a: a[..., ::2]),
    ("select", lambda s: len(s) > 1, lambda t: t[-1], lambda a: a[-1]),
    ("select_dim", lambda s: len(s) > 1, lambda t: t.select(1, 0), lambda a: a[:, 0]),
    ("narrow", lambda s: s[-1] > 1, lambda t: t.narrow(-1, 1, t.shape[-1] - 1), lambda a: a[..., 1:]),
    ("view_flat", lambda s: True, lambda t: t.view(-1), lambda a: a.reshape(-1)),
    ("permute", lambda s: len(s) == 3, lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("transpose", lambda s: len(s) > 1, lambda t: t.transpose(0, -1), lambda a: np.swapaxes(a, 0, -1)),
    ("T", lambda s: len(s) == 2, lambda t: t.T, lambda a: a.T),
    ("chunk", lambda s: s[0] > 1, lambda t: t.chunk(2)[0], lambda a: a[:(a.shape[0] + 1) // 2]),
    ("unsqueeze", lambda s: True, lambda t: t.unsqueeze(1), lambda a: np.expand_dims(a, 1)),
    ("squeeze", lambda s: 1 in s, lambda t: t.squeeze(), lambda a: a.squeeze()),
    ("unsqueeze_select", lambda s: True, lambda t: t.unsqueeze(0).select(0, 0), lambda a: a[None][0]),
    ("detach", lambda s: True, lambda t: t.detach(), lambda a: a[...]),
    ("diagonal", lambda s: len(s) == 2, lambda t: t.diagonal(), lambda a: _diag(a)),
    ("diagonal_up", lambda s: len(s) == 2 and s[1] > 1, lambda t: t.diagonal(1), lambda a: _diag(a, 1)),
    ("diagonal_down", lambda s: len(s) == 2 and s[0] > 1, lambda t: t.diagonal(-1), lambda a: _diag(a, -1)),
]
# (name, tg write, numpy write), in place
WRITES = [
    ("iadd", lambda v: v.__iadd__(1.5), lambda a: a.__iadd__(1.5)),
    ("isub", lambda v: v.__isub__(2.0), lambda a: a.__isub__(2.0)),
    ("imul", lambda v: v.__imul__(-3.0), lambda a: a.__imul__(-3.0)),
    ("sub_", lambda v: v.sub_(0.5), lambda a: a.__isub__(0.5)),
    ("div_", lambda v: v.div_(-2.0), lambda a: a.__itruediv__(-2.0)),
    ("clamp_", lambda v: v.clamp_(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5, out=a)),
    ("copy_", lambda v: v.copy_(Tensor(np.full(v.shape[-1:], 9.0, np.float32))),
     lambda a: a.__setitem__(..., 9)),
    ("fill_", lambda v: v.fill_(-7.0), lambda a: a.fill(-7.0)),
    ("zero_", lambda v: v.zero_(), lambda a: a.fill(0.0)),
    ("setitem", lambda v: v.__setitem__(..., 3.0), lambda a: a.__setitem__(..., 3.0)),
]
# kinds of tensor: (name, tg tensor of values a)
KINDS = [
    ("realized", lambda a: Tensor(a.astype(np.float32))),
    ("computed", lambda a: Tensor(a.astype(np.float32)) * 1.0),
    ("constant", None),          # tg.full: a constant with no memory of its own
]


def _case(seed: int):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    kind, make = KINDS[seed % len(KINDS)]
    if make is None:
        fill = float(rng.integers(-3, 4))
        a, x = np.full(shape, fill), tg.full(shape, fill)
    else:
        a = rng.standard_normal(shape)
        x = make(a)
    return rng, kind, a, x


def _chain(rng, x: Tensor, ref: np.ndarray):
    v, va, names = x, ref, []
    for _ in range(int(rng.integers(1, 4))):
        usable = [k for k in VIEWS if va.size > 0 and va.ndim > 0 and k[1](va.shape)]
        if not usable:
            break
        name, _, tv, nv = usable[rng.integers(len(usable))]
        v, va = tv(v), nv(va)
        names.append(name)
    return v, va, names


def _close(got: Tensor, want: np.ndarray, msg: str) -> None:
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=msg)


@pytest.mark.parametrize("seed", range(120))
def test_a_write_through_a_view_is_seen_by_its_tensor_and_every_view(seed):
    rng, kind, a, x = _case(seed)
    ref = a.copy()
    before = x * 2                                  # computed before the write: keeps the old values
    other, other_ref = x.reshape(-1), ref.reshape(-1)   # another view, made before the write
    v, va, names = _chain(rng, x, ref)
    wname, tw, nw = WRITES[rng.integers(len(WRITES))]
    tw(v)
    nw(va)
    msg = f"seed {seed}: {kind} {a.shape}, {names} then {wname}"
    _close(x, ref, msg)
    _close(v, va, msg)
    _close(other, other_ref, msg)
    _close(before, a * 2, msg)


@pytest.mark.parametrize("seed", range(120))
def test_a_view_made_before_a_write_to_its_tensor_sees_it(seed):
    rng, kind, a, x = _case(seed)
    ref = a.copy()
    v, va, names = _chain(rng, x, ref)
    e, ea = x.reshape(1, -1).expand(2, -1), np.broadcast_to(ref.reshape(1, -1), (2, ref.size))  # read-only
    before, before_ref = v * 2, va * 2
    wname, tw, nw = WRITES[rng.integers(len(WRITES))]
    if rng.integers(2):
        tw(x)
        nw(ref)
    else:                                           # through another view of the same memory
        w, wa, _ = _chain(rng, x, ref)
        tw(w)
        nw(wa)
    msg = f"seed {seed}: {kind} {a.shape}, {names}, then {wname}"
    # read in either order: the values follow the program, not which is read first
    if rng.integers(2):
        _close(v, va, msg)
        _close(x, ref, msg)
    else:
        _close(x, ref, msg)
        _close(v, va, msg)
    _close(e, ea, msg)
    _close(before, before_ref, msg)


@pytest.mark.parametrize("seed", range(60))
def test_copies_keep_their_values_and_are_written_alone(seed):
    rng, kind, a, x = _case(seed)
    ref = a.copy()
    copies = [("flip", x.flip(0), np.flip(a, 0).copy()), ("pad", x.pad(((1, 0),) + ((0, 0),) * (a.ndim - 1)),
              np.pad(a, ((1, 0),) + ((0, 0),) * (a.ndim - 1))), ("tensor", tg.tensor(x), a.copy()),
              ("clone", x.clone(), a.copy())]
    if a.ndim == 2 and a.shape[0] > 1 and a.shape[1] > 1:
        copies.append(("reshape_copy", x.T.reshape(-1), a.T.reshape(-1).copy()))
    wname, tw, nw = WRITES[rng.integers(len(WRITES))]
    tw(x)
    nw(ref)
    for name, c, want in copies:
        _close(c, want, f"seed {seed}: {kind} {a.shape}, copy {name} after {wname} of its tensor")
    for name, c, want in copies:
        tw(c)
        nw(want)
        _close(c, want, f"seed {seed}: {kind} {a.shape}, {wname} of copy {name}")
        _close(x, ref, f"seed {seed}: {kind} {a.shape}, {wname} of copy {name} left its tensor")


def test_the_repros():
    x = tg.zeros(4)
    x[0:1].copy_(tg.tensor([7.0]))
    assert x.tolist() == [7.0, 0.0, 0.0, 0.0]
    x = tg.tensor([1.0, 2.0, 3.0])
    d = x.detach()
    d += 1
    assert x.tolist() == [2.0, 3.0, 4.0]
    x.unsqueeze(1).select(1, 0).sub_(1)
    assert x.tolist() == [1.0, 2.0, 3.0]
    v = x[0:2]
    x += 1
    assert v.tolist() == [2.0, 3.0]
    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    x.diagonal().zero_()
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 0.0, 5.0]]
    y = x * 2
    x *= 3
    assert y.tolist() == [[0.0, 2.0, 4.0], [6.0, 0.0, 10.0]]


def test_contiguous_of_a_tensor_is_the_tensor():
    # torch's contiguous() of a contiguous tensor returns it: writes through either are one write
    for x in (Tensor([1.0, 2.0]), Tensor([1.0, 2.0]) * 1):
        c = x.contiguous()
        c += 1
        x *= 2
        assert x.tolist() == c.tolist()


def test_a_view_of_a_tensor_written_in_place_takes_its_new_graph():
    # torch rebases a view on an in-place write of its base: d v/dx = 2 * 3
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    v = y[1:]
    y *= 3
    v.sum().backward()
    assert v.tolist() == [12.0] and x.grad.tolist() == [0.0, 6.0]
    # a copy (flip) keeps the old value and its gradient: d f/dx = 2
    x = Tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    f = y.flip(0)
    y *= 3
    f.sum().backward()
    assert f.tolist() == [4.0, 2.0] and x.grad.tolist() == [2.0, 2.0]


def test_a_write_with_a_graph_through_a_view_raises():
    x = Tensor([1.0, 2.0, 3.0])
    w = Tensor([1.0, 1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="through a view of another tensor"):
        x[0:2] += w
    assert x.tolist() == [1.0, 2.0, 3.0]


def test_a_leaf_that_is_a_view_stays_a_leaf_when_written():
    # randn's result is a detached view of its own computation: a write under no_grad keeps requires_grad
    for w in (Tensor.randn(3, 2, requires_grad=True), Tensor([1.0, 2.0]).detach().requires_grad_()):
        with tg.no_grad():
            w.assign(w.detach() * 0 + 1)
        assert w.requires_grad and w.tolist() == np.ones(w.shape).tolist()
        (w * 3).sum().backward()
        assert w.grad.tolist() == np.full(w.shape, 3.0).tolist()


def test_a_view_given_memory_by_hand_writes_that_memory():
    # tg.distributed's flat buckets set a parameter's lazydata to a view of the bucket's buffer: a parameter
    # made as a view (randn's result) then writes the bucket, not the memory it was a view of
    from tg.core.device import Buffer
    from tg.distributed.flat import view_tensor
    p = Tensor.randn(2, 3, requires_grad=True)
    buf = Buffer(p.device, 6, p.dtype).copyin(np.zeros(24, np.uint8))
    p.lazydata = view_tensor(buf, 0, (2, 3)).lazydata
    with tg.no_grad():
        p.assign(Tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3)))
    p.realize()
    assert buf.numpy().tolist() == list(range(6)) and p.requires_grad


# ops whose result torch puts in new memory, which tg may build as movements of the input's memory alone
# (a reduce over dims of size 1 is a reshape): (name, tg op, numpy op) on a (1, n, 1) tensor
COPIES = [
    ("sum_dim0", lambda t: t.sum(0), lambda a: a.sum(0)),
    ("sum_keepdim", lambda t: t.sum(2, keepdim=True), lambda a: a.sum(2, keepdims=True)),
    ("mean", lambda t: t.mean(0), lambda a: a.mean(0)),
    ("amax", lambda t: t.amax(2), lambda a: a.max(2)),
    ("max_dim", lambda t: t.max(dim=0).values, lambda a: a.max(0)),
    ("prod", lambda t: t.prod(2), lambda a: a.prod(2)),
    ("cumsum", lambda t: t.cumsum(0), lambda a: a.cumsum(0)),
    ("sort", lambda t: t.sort(2).values, lambda a: np.sort(a, 2)),
    ("repeat", lambda t: t.repeat(1, 1, 1), lambda a: a.copy()),
    ("cat", lambda t: Tensor.cat(t), lambda a: a.copy()),
    ("flip", lambda t: t.flip(0), lambda a: a[::-1].copy()),
    ("pad", lambda t: t.pad(((0, 0), (1, 0), (0, 0))), lambda a: np.pad(a, ((0, 0), (1, 0), (0, 0)))),
    ("tensor", lambda t: tg.tensor(t), lambda a: a.copy()),
    ("clone", lambda t: t.clone(), lambda a: a.copy()),
    ("reshape_back", lambda t: t.reshape(-1).reshape(t.shape).sum(0), lambda a: a.sum(0)),
    ("index", lambda t: t[:, [0]], lambda a: a[:, [0]]),
]


@pytest.mark.parametrize("seed", range(96))
def test_a_result_torch_copies_is_memory_of_its_own(seed):
    # found by the fuzzer: `y = x.sum(0)` for x of shape (1, n) was written through into x by `y *= 2`,
    # and a flip or tg.tensor(x) read x's new values once x's write had run
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((1, int(rng.integers(1, 5)), 1))
    x = Tensor(a.astype(np.float32)).realize() if seed % 2 else Tensor(a.astype(np.float32)) * 1.0
    name, top, nop = COPIES[seed % len(COPIES)]
    y, ya = top(x), nop(a)
    wname, tw, nw = WRITES[rng.integers(len(WRITES))]
    msg = f"seed {seed}: {name} then {wname}"
    if rng.integers(2):             # the result written: its tensor keeps its values
        tw(y)
        nw(ya)
        _close(y, ya, msg)
        _close(x, a, msg + " changed its tensor")
    else:                           # its tensor written and computed first: the result keeps its values
        tw(x)
        x.realize()
        _close(y, ya, msg + " of its tensor")


@pytest.mark.parametrize("seed", range(60))
def test_a_copy_written_before_its_tensor_leaves_it_alone(seed):
    """A copy written first, while it is still tg's view of its tensor's memory (tg.tensor(x) of a realized
    x shares x's buffer), gets memory of its own for the write: x keeps its values."""
    rng, kind, a, x = _case(seed)
    x.realize()
    copies = [("flip", lambda: x.flip(0), lambda: np.flip(a, 0).copy()),
              ("tensor", lambda: tg.tensor(x), a.copy), ("Tensor", lambda: Tensor(x), a.copy),
              ("clone", x.clone, a.copy)]
    for name, make, make_ref in copies:
        wname, tw, nw = WRITES[rng.integers(len(WRITES))]
        c, want = make(), make_ref()
        tw(c)
        nw(want)
        _close(c, want, f"seed {seed}: {kind} {a.shape}, {wname} of copy {name}")
        _close(x, a, f"seed {seed}: {kind} {a.shape}, {wname} of copy {name} changed its tensor")
    with tg.no_grad():
        c = Tensor(x)
        c.assign(Tensor(np.full(a.shape, 5.0, np.float32))).realize()
    _close(c, np.full(a.shape, 5.0), f"seed {seed}: assign to Tensor(x)")
    _close(x, a, f"seed {seed}: assign to Tensor(x) changed x")
