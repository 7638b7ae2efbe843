"""A write into a view of a tensor writes the tensor, as in torch (issue 34 item 8: `x[0:1].copy_(v)` left x
unchanged). Random chains of views (slice, view/reshape, permute, transpose, .T, narrow, select, chunk and
split pieces, unsqueeze, squeeze, flatten) of realized and of computed tensors are written by every
in-place method and compared with numpy doing the same through its views (which share memory as torch's
do); values read before the write keep the old contents. An expanded view refuses writes, as torch's."""
import numpy as np
import pytest

import tg
from tg import Tensor

# (name, applies to shape, tg view, numpy view)
VIEWS = [
    ("slice", lambda s: s[0] > 1, lambda t: t[1:], lambda a: a[1:]),
    ("step_slice", lambda s: s[-1] > 2, lambda t: t[..., ::2], lambda a: a[..., ::2]),
    ("select", lambda s: len(s) > 1, lambda t: t[-1], lambda a: a[-1]),
    ("select_dim", lambda s: len(s) > 1, lambda t: t.select(1, 0), lambda a: a[:, 0]),
    ("narrow", lambda s: s[-1] > 1, lambda t: t.narrow(-1, 1, t.shape[-1] - 1), lambda a: a[..., 1:]),
    ("view_flat", lambda s: True, lambda t: t.view(-1), lambda a: a.reshape(-1)),
    ("reshape_split", lambda s: s[0] % 2 == 0, lambda t: t.reshape(2, -1), lambda a: a.reshape(2, -1)),
    ("permute", lambda s: len(s) == 3, lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("transpose", lambda s: len(s) > 1, lambda t: t.transpose(0, -1), lambda a: np.swapaxes(a, 0, -1)),
    ("T", lambda s: len(s) == 2, lambda t: t.T, lambda a: a.T),
    ("chunk", lambda s: s[0] > 1, lambda t: t.chunk(2)[-1], lambda a: np.array_split(a, 2)[-1]
     if a.shape[0] % 2 == 0 else a[(a.shape[0] + 1) // 2:]),
    ("split", lambda s: s[0] > 1, lambda t: t.split(1)[0], lambda a: a[:1]),
    ("unsqueeze", lambda s: len(s) > 0, lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ("squeeze", lambda s: 1 in s, lambda t: t.squeeze(), lambda a: a.squeeze()),
    ("flatten", lambda s: len(s) > 1, lambda t: t.flatten(), lambda a: a.reshape(-1)),
]
# (name, tg write, numpy write), each through the view
WRITES = [
    ("iadd", lambda v: v.__iadd__(1.5), lambda a: a.__iadd__(1.5)),
    ("isub", lambda v: v.__isub__(v * 0 + 2), lambda a: a.__isub__(2)),
    ("imul", lambda v: v.__imul__(-3.0), lambda a: a.__imul__(-3.0)),
    ("idiv", lambda v: v.__itruediv__(4.0), lambda a: a.__itruediv__(4.0)),
    ("add_", lambda v: v.add_(v * 0 + 1, alpha=2), lambda a: a.__iadd__(2)),
    ("sub_", lambda v: v.sub_(0.5), lambda a: a.__isub__(0.5)),
    ("mul_", lambda v: v.mul_(2.0), lambda a: a.__imul__(2.0)),
    ("div_", lambda v: v.div_(-2.0), lambda a: a.__itruediv__(-2.0)),
    ("clamp_", lambda v: v.clamp_(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5, out=a)),
    ("copy_", lambda v: v.copy_(Tensor(np.full(v.shape[-1:], 9.0, np.float32))),
     lambda a: a.__setitem__(..., 9.0)),
    ("fill_", lambda v: v.fill_(-7.0), lambda a: a.fill(-7.0)),
    ("zero_", lambda v: v.zero_(), lambda a: a.fill(0.0)),
    ("setitem", lambda v: v.__setitem__(..., 3.0), lambda a: a.__setitem__(..., 3.0)),
    ("relu_inplace", lambda v: tg.nn.functional.relu(v, inplace=True), lambda a: np.maximum(a, 0, out=a)),
]


def _shape(rng) -> tuple:
    return tuple(int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 4))))


@pytest.mark.parametrize("seed", range(80))
def test_writes_through_random_view_chains_reach_the_base(seed):
    rng = np.random.default_rng(seed)
    shape = _shape(rng)
    while len(shape) < 2:
        shape = _shape(rng)
    a = rng.standard_normal(shape)
    x = Tensor(a.astype(np.float32))
    if rng.integers(2):
        x = x * 1.0                       # a computed tensor: its memory is made, then written
    ref = a.copy()
    before = x * 2                         # read before the write: the old values
    v, va, chain = x, ref, []
    for _ in range(int(rng.integers(1, 4))):
        usable = [k for k in VIEWS if k[1](va.shape) and va.size > 0]
        if not usable:
            break
        name, _, tv, nv = usable[rng.integers(len(usable))]
        v, va = tv(v), nv(va)
        chain.append(name)
    if v.lazydata is x.lazydata.base or v.lazydata is x.lazydata:
        return     # the chain came back to the whole tensor: an alias of it, not a view (see the report)
    other = x[0]                           # another view of the same memory, made before the write
    other_ref = ref[0]
    name, tw, nw = WRITES[rng.integers(len(WRITES))]
    tw(v)
    nw(va)
    msg = f"seed {seed}: {chain} then {name}"
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-6, atol=1e-6, err_msg=msg)
    np.testing.assert_allclose(v.numpy(), va, rtol=1e-6, atol=1e-6, err_msg=msg)
    np.testing.assert_allclose(other.numpy(), other_ref, rtol=1e-6, atol=1e-6, err_msg=msg)
    np.testing.assert_allclose(before.numpy(), a * 2, rtol=1e-6, atol=1e-6, err_msg=msg)


def test_the_issues_examples():
    x = Tensor([0.0, 1.0, 2.0, 3.0])
    x[0:1].copy_(Tensor([7.0]))
    assert x.tolist() == [7.0, 1.0, 2.0, 3.0]
    x.view(-1)[2:4].copy_(Tensor([8.0, 9.0]))
    assert x.tolist() == [7.0, 1.0, 8.0, 9.0]


def test_expanded_views_refuse_writes():
    x = Tensor([1.0, 2.0])
    for write in (lambda v: v.zero_(), lambda v: v.__iadd__(1.0), lambda v: v.copy_(Tensor([3.0, 4.0]))):
        with pytest.raises(ValueError, match="expanded view"):
            write(x.reshape(1, 2).expand(3, 2))
    assert x.tolist() == [1.0, 2.0]


def test_a_view_of_a_tensor_with_a_graph_is_not_written_behind_its_back():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="through a view of another tensor"):
        y[1:] *= 3
