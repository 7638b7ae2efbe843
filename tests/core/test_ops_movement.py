"""Movement ops, slicing, integer-tensor indexing and gather against numpy."""
import numpy as np
import pytest
from op_helpers import DEVICES, LAYOUTS, assert_close, check, make_input, raises_at_call

from tg import Tensor


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param



def ids(v):
    return str(v).replace(" ", "")


# ------------------------------------------------------------ reshape, permute, expand

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "shape,new",
    [
        ((), (1,)),
        ((1,), ()),
        ((3, 7), (21,)),
        ((3, 7), (7, 3)),
        ((3, 7), (-1,)),
        ((2, 1, 5), (5, 2)),
        ((2, 1, 5), (2, -1)),
        ((1023,), (3, 11, 31)),
        ((0, 3), (3, 0)),
        ((0, 3), (-1, 3)),
        ((2, 3, 4), (4, 1, 6)),
        ((7,), (7, 1, 1)),
    ],
    ids=ids,
)
def test_reshape_view(shape, new, layout, device):
    check(lambda x: x.reshape(new), lambda x: x.reshape(new), [shape], device, layout=layout)
    check(lambda x: x.reshape(new), lambda x: x.view(*new), [shape], device, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape,order", [((3, 7), (1, 0)), ((2, 1, 5), (2, 0, 1)), ((2, 3, 4), (1, 2, 0)),
                                         ((2, 3, 4), (-1, 0, 1)), ((2, 0, 3), (2, 1, 0)), ((), ()),
                                         ((2, 3, 4, 5), (3, 1, 0, 2))], ids=ids)
def test_permute(shape, order, layout, device):
    check(lambda x: np.transpose(x, order), lambda x: x.permute(order), [shape], device, layout=layout)
    check(lambda x: np.transpose(x, order), lambda x: x.permute(*order), [shape], device, layout=layout)


@pytest.mark.parametrize("shape,dims", [((3, 7), (0, 1)), ((3, 7), (-1, -2)), ((2, 1, 5), (0, 2)),
                                        ((2, 3, 4), (1, -1)), ((2, 3, 4), (1, 1))], ids=ids)
def test_transpose(shape, dims, device):
    check(lambda x: np.swapaxes(x, *dims), lambda x: x.transpose(*dims), [shape], device)
    check(lambda x: np.swapaxes(x, *dims), lambda x: x.transpose(*dims), [shape], device, layout="strided")


@pytest.mark.parametrize("shape", [(), (7,), (3, 7), (2, 1, 5), (0, 3)], ids=ids)
def test_T(shape, device):
    check(lambda x: x.T, lambda x: x.T, [shape], device)
    check(lambda x: x.T, lambda x: x.T, [shape], device, layout="flipped")
    check(lambda x: x.T, lambda x: x.transpose() if x.ndim == 2 else x.T, [shape], device)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape,new", [((), (3, 2)), ((1,), (7,)), ((3, 1), (3, 7)), ((3, 1), (-1, 7)),
                                       ((1, 5), (2, 4, 5)), ((2, 1, 5), (2, 3, 5)), ((1,), (0,)),
                                       ((2, 1), (4, 2, 0)), ((7,), (1, 7))], ids=ids)
def test_expand(shape, new, layout, device):
    np_new = tuple(o if n == -1 else n for o, n in zip(shape, new)) if len(shape) == len(new) else new
    check(lambda x: np.broadcast_to(x, np_new), lambda x: x.expand(new), [shape], device, layout=layout)
    check(lambda x: np.broadcast_to(x, np_new), lambda x: x.expand(*new), [shape], device, layout=layout)


def test_expand_as_and_compute_on_expanded(device):
    a = np.arange(3, dtype=np.float32).reshape(3, 1)
    b = np.zeros((2, 3, 4), np.float32)
    t = Tensor(a, device=device).expand_as(Tensor(b, device=device))
    assert_close(t, np.broadcast_to(a, (2, 3, 4)))
    assert_close((t * 2 + 1).sum(0), (np.broadcast_to(a, (2, 3, 4)) * 2 + 1).sum(0))


# ------------------------------------------------------------ pad

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape,torch_pad", [((7,), (1, 2)), ((3, 7), (2, 0)), ((3, 7), (1, 2, 3, 0)),
                                             ((2, 1, 5), (0, 1, 2, 1, 1, 1)), ((0, 3), (1, 1, 2, 0)),
                                             ((3, 7), (-1, 2)), ((3, 7), (-2, -3, 1, -1)), ((1023,), (5, 0))],
                         ids=ids)
def test_pad_torch_order(shape, torch_pad, layout, device):
    """torch F.pad order: (left, right) of the last dim first, then the dim before it; negative crops."""
    pairs = [(0, 0)] * (len(shape) - len(torch_pad) // 2) + \
        [(torch_pad[i], torch_pad[i + 1]) for i in reversed(range(0, len(torch_pad), 2))]

    def np_pad(x, value=0.0):
        crop = tuple(slice(max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, x.shape))
        grow = [(max(0, b), max(0, a)) for b, a in pairs]
        return np.pad(x[crop], grow, constant_values=value)

    check(np_pad, lambda x: x.pad(torch_pad), [shape], device, layout=layout)
    check(lambda x: np_pad(x, 1.5), lambda x: x.pad(torch_pad, value=1.5), [shape], device, layout=layout)
    check(lambda x: np_pad(x, -np.inf), lambda x: x.pad(torch_pad, value=float("-inf")), [shape], device)


@pytest.mark.parametrize(
    "shape,pairs",
    [
        ((7,), ((2, 1),)),
        ((3, 7), ((1, 0), (0, 2))),
        ((3, 7), (None, (3, 3))),
        ((2, 1, 5), ((0, 0), (2, 2), (1, 0))),
    ],
    ids=ids,
)
def test_pad_per_dim_pairs(shape, pairs, device):
    np_pairs = [(0, 0) if p is None else p for p in pairs]
    check(lambda x: np.pad(x, np_pairs), lambda x: x.pad(pairs), [shape], device)
    check(
        lambda x: np.pad(x, np_pairs, constant_values=-2.0),
        lambda x: x.pad(pairs, value=-2.0),
        [shape],
        device,
        layout="transposed",
    )


def test_pad_int_tensor_with_value(device):
    check(
        lambda x: np.pad(x, ((1, 1), (0, 2)), constant_values=7),
        lambda x: x.pad(((1, 1), (0, 2)), value=7),
        [(3, 4)],
        device,
        dtype="int32",
        out_dtype="int32",
    )


# ------------------------------------------------------------ slicing

SLICES = [
    (0,), (-1,), (slice(1, 5),), (slice(None, None, 2),), (slice(None, None, -1),), (slice(-2, None),),
    (slice(5, 1, -2),), (slice(None, None, 3), 2), (slice(1, None, 2), slice(None, None, -3)),
    (Ellipsis, 1), (None, slice(1, 2)), (1, None, slice(None, None, -2)), (slice(10, 20),), (slice(3, 3),),
    (-3, -7), (slice(-100, 100, 4), slice(6, None, -1)), (Ellipsis,), (slice(2, 0, -1), None, Ellipsis, None),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("index", SLICES, ids=ids)
def test_slicing(index, layout, device):
    check(lambda x: x[index], lambda x: x[index], [(3, 7)], device, layout=layout)


@pytest.mark.parametrize(
    "shape,index",
    [
        ((1023,), slice(None, None, 7)),
        ((1023,), slice(-5, None, -100)),
        ((2, 1, 5), (slice(None), 0, slice(None, None, -2))),
        ((2, 1, 5), (Ellipsis, slice(1, 4), None)),
        ((), None),
        ((), Ellipsis),
        ((0, 3), (slice(None), 1)),
        ((2, 0, 3), (1, slice(None), -1)),
        ((7,), slice(None, None, -1)),
    ],
    ids=ids,
)
def test_slicing_shapes(shape, index, device):
    check(lambda x: x[index], lambda x: x[index], [shape], device)


def test_slice_then_compute_then_slice(device):
    check(lambda x: (x[1:, ::-2] * 2)[::-1, 1:], lambda x: (x[1:, ::-2] * 2)[::-1, 1:], [(5, 9)], device)
    check(
        lambda x: x[::2].T[1:-1] + x[1::2].T[1:-1],
        lambda x: x[::2].T[1:-1] + x[1::2].T[1:-1],
        [(6, 5)],
        device,
    )


def test_shrink(device):
    check(lambda x: x[1:3, 2:7], lambda x: x.shrink(((1, 3), (2, 7))), [(3, 7)], device)
    check(lambda x: x[:, 0:0], lambda x: x.shrink((None, (0, 0))), [(3, 7)], device)


# ------------------------------------------------------------ integer-tensor indexing

ADV = [
    (np.array([0, 2, 1, 2]),),
    (np.array([-1, 0, -3]),),
    (np.array([[0, 1], [2, 0]]),),
    (np.array([0, 2]), np.array([1, -1])),                       # multiple, adjacent
    (slice(None), np.array([4, 0, 1]), np.array([1, 2, 0])),     # adjacent, after a slice -> stays in place
    (np.array([0, 1]), slice(None), np.array([3, -2])),          # non-adjacent -> goes first
    (np.array([[1], [0]]), slice(1, 4), np.array([0, 2, 4])),     # non-adjacent with broadcasting
    (slice(1, None), np.array([-5, 4])),
    (slice(None, None, -1), np.array([0, 0, 3]), slice(None, None, 2)),
    (None, np.array([1, 0]), Ellipsis),
    (Ellipsis, np.array([2, 2, 2])),
    (np.array([1]), np.array([2]), np.array([3])),
    (np.array([], dtype=np.int64),),
]


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "expanded"])
@pytest.mark.parametrize("index", ADV, ids=lambda v: ids(tuple(i.tolist() if isinstance(i, np.ndarray) else i
                                                                  for i in v)))
def test_integer_tensor_indexing(index, layout, device):
    tg_index = tuple(Tensor(i, device=device) if isinstance(i, np.ndarray) else i for i in index)
    check(lambda x: x[index], lambda x: x[tg_index], [(3, 5, 6)], device, layout=layout)
    check(lambda x: x[index], lambda x: x[tg_index], [(3, 5, 6)], device, dtype="int32", out_dtype="int32")


def test_indexing_with_lists_and_numpy_arrays(device):
    check(lambda x: x[[2, 0, -1]], lambda x: x[[2, 0, -1]], [(3, 7)], device)
    check(lambda x: x[:, np.array([6, 0])], lambda x: x[:, np.array([6, 0])], [(3, 7)], device)
    check(
        lambda x: x[np.array([1, 2])],
        lambda x: x[Tensor(np.array([1, 2], np.int32), device=device)],
        [(7,)],
        device,
    )


def test_index_with_computed_tensor(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
    idx = Tensor([3, 1, 2], device=device) - 1          # not realized yet when indexing
    assert_close(Tensor(x, device=device)[:, idx], x[:, np.array([2, 0, 1])])


@pytest.mark.parametrize(
    "dim,index_shape",
    [(0, (2, 7)), (1, (3, 4)), (-1, (3, 10)), (0, (1, 3)), (1, (2, 1)), (0, (0, 7))],
    ids=ids,
)
def test_gather(dim, index_shape, device):
    rng = np.random.default_rng(1)
    n = 3 if dim == 0 else 7
    index = rng.integers(0, n, size=index_shape)
    idx_t = Tensor(index, device=device)
    crop = tuple(slice(0, s) if i != dim % 2 else slice(None) for i, s in enumerate(index_shape))

    def np_gather(x):
        return np.take_along_axis(x[crop], index, axis=dim)

    check(np_gather, lambda x: x.gather(dim, idx_t), [(3, 7)], device)
    check(np_gather, lambda x: x.gather(dim, idx_t), [(3, 7)], device, layout="transposed")
    check(np_gather, lambda x: x.gather(dim, idx_t), [(3, 7)], device, dtype="int64", out_dtype="int64")


def test_gather_3d(device):
    index = np.random.default_rng(2).integers(0, 4, size=(2, 3, 5))
    check(lambda x: np.take_along_axis(x, index, axis=1), lambda x: x.gather(1, Tensor(index, device=device)),
          [(2, 4, 5)], device)


# ------------------------------------------------------------ flip, cat, stack, split, chunk

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape,dims", [((7,), (0,)), ((3, 7), (1,)), ((3, 7), (0, 1)), ((3, 7), (-1, 0)),
                                        ((2, 1, 5), (0, 2)), ((0, 3), (0,)), ((1023,), (0,))], ids=ids)
def test_flip(shape, dims, layout, device):
    check(lambda x: np.flip(x, dims), lambda x: x.flip(dims), [shape], device, layout=layout)
    check(lambda x: np.flip(x, dims), lambda x: x.flip(*dims), [shape], device, layout=layout)


@pytest.mark.parametrize(
    "shapes,dim",
    [
        ([(3, 7), (2, 7)], 0),
        ([(3, 7), (3, 1), (3, 4)], 1),
        ([(3, 7), (3, 2)], -1),
        ([(2, 1, 5), (2, 3, 5)], 1),
        ([(0, 3), (2, 3)], 0),
        ([(4,), (0,), (1,)], 0),
        ([(7,)], 0),
        ([(1023,), (1,)], 0),
    ],
    ids=ids,
)
def test_cat(shapes, dim, device):
    check(lambda *xs: np.concatenate(xs, dim), lambda x, *xs: x.cat(*xs, dim=dim), shapes, device)
    check(lambda *xs: np.concatenate(xs, dim), lambda x, *xs: x.cat(*xs, dim=dim), shapes, device,
          layout="transposed")


def test_cat_promotes_dtypes(device):
    a, b = np.array([1, 2], np.int32), np.array([0.5], np.float32)
    assert_close(
        Tensor(a, device=device).cat(Tensor(b, device=device)), np.concatenate([a, b]), dtype="float32"
    )
    c = np.array([True, False])
    assert_close(
        Tensor(c, device=device).cat(Tensor(a, device=device)), np.concatenate([c, a]), dtype="int32"
    )


@pytest.mark.parametrize("shape,n,dim", [((3, 7), 2, 0), ((3, 7), 3, 1), ((3, 7), 1, 2), ((3, 7), 2, -1),
                                         ((), 4, 0), ((0, 2), 2, 1), ((7,), 1, 0)], ids=ids)
def test_stack(shape, n, dim, device):
    check(lambda *xs: np.stack(xs, dim), lambda *xs: Tensor.stack(xs, dim), [shape] * n, device)
    check(lambda *xs: np.stack(xs, dim), lambda *xs: Tensor.stack(list(xs), dim=dim), [shape] * n, device,
          layout="flipped")


@pytest.mark.parametrize("shape,size,dim", [((7,), 3, 0), ((7,), 7, 0), ((7,), 10, 0), ((3, 7), 2, 1),
                                            ((3, 7), [1, 4, 2], -1), ((3, 7), [3, 0], 0), ((2, 1, 5), 1, 1),
                                            ((1023,), 100, 0)], ids=ids)
def test_split(shape, size, dim, device):
    n = shape[dim]
    sections = list(range(size, n, size)) if isinstance(size, int) else list(np.cumsum(size)[:-1])
    a, t = make_input(shape, "float32", device, "transposed")
    want = np.split(a, sections, axis=dim)
    got = t.split(size, dim)
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w)


@pytest.mark.parametrize("shape,chunks,dim", [((7,), 3, 0), ((7,), 7, 0), ((7,), 10, 0), ((3, 7), 2, 1),
                                              ((6, 2), 3, 0), ((3, 7), 4, -1), ((2, 1, 5), 2, 1)], ids=ids)
def test_chunk(shape, chunks, dim, device):
    """torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks` of them."""
    n = shape[dim]
    size = -(-n // chunks)
    a, t = make_input(shape, "float32", device, "strided")
    want = np.split(a, list(range(size, n, size)), axis=dim)
    got = t.chunk(chunks, dim)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w)


# ------------------------------------------------------------ squeeze, unsqueeze, flatten, repeat, contiguous

@pytest.mark.parametrize(
    "shape,dim",
    [
        ((2, 1, 5), None),
        ((2, 1, 5), 1),
        ((2, 1, 5), -2),
        ((2, 1, 5), 0),
        ((1, 1), None),
        ((1,), 0),
        ((), None),
        ((), 0),
        ((0, 1), -1),
        ((7,), 0),
    ],
    ids=ids,
)
def test_squeeze(shape, dim, device):
    def np_squeeze(x):
        if dim is None or x.ndim == 0:
            return np.squeeze(x)
        return np.squeeze(x, dim) if x.shape[dim] == 1 else x

    check(np_squeeze, lambda x: x.squeeze(dim), [shape], device)
    check(np_squeeze, lambda x: x.squeeze(dim), [shape], device, layout="transposed")


@pytest.mark.parametrize("shape,dim", [((), 0), ((), -1), ((7,), 0), ((7,), 1), ((7,), -1), ((3, 7), 1),
                                       ((3, 7), -2), ((0, 3), 2)], ids=ids)
def test_unsqueeze(shape, dim, device):
    check(lambda x: np.expand_dims(x, dim), lambda x: x.unsqueeze(dim), [shape], device)
    check(lambda x: np.expand_dims(x, dim), lambda x: x.unsqueeze(dim), [shape], device, layout="strided")


@pytest.mark.parametrize("shape,start,end", [((2, 3, 4), 0, -1), ((2, 3, 4), 1, -1), ((2, 3, 4), 0, 1),
                                             ((2, 1, 5), 1, 2), ((7,), 0, -1), ((), 0, -1), ((2, 0, 3), 0, 1),
                                             ((2, 3, 4, 5), 1, 2)], ids=ids)
def test_flatten(shape, start, end, device):
    def np_flatten(x):
        if x.ndim == 0:
            return x.reshape(1)
        e = end % x.ndim
        return x.reshape(x.shape[:start] + (-1 if 0 not in x.shape else 0,) + x.shape[e + 1:])

    check(np_flatten, lambda x: x.flatten(start, end), [shape], device)
    check(np_flatten, lambda x: x.flatten(start, end), [shape], device, layout="transposed")


def test_unflatten(device):
    check(lambda x: x.reshape(3, 2, 2, 5), lambda x: x.unflatten(1, (2, 2)), [(3, 4, 5)], device)
    check(lambda x: x.reshape(3, 4, 5, 1), lambda x: x.unflatten(-1, (5, 1)), [(3, 4, 5)], device,
          layout="transposed")


@pytest.mark.parametrize(
    "shape,reps",
    [
        ((3,), (2,)),
        ((3,), (2, 2)),
        ((2, 3), (1, 1)),
        ((2, 3), (3, 2)),
        ((2, 1, 5), (2, 1, 3)),
        ((2, 3), (2, 1, 2)),
        ((), (3,)),
        ((2, 3), (0, 1)),
        ((0, 2), (2, 2)),
    ],
    ids=ids,
)
def test_repeat(shape, reps, device):
    check(lambda x: np.tile(x, reps), lambda x: x.repeat(reps), [shape], device)
    check(lambda x: np.tile(x, reps), lambda x: x.repeat(*reps), [shape], device, layout="flipped")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_contiguous(layout, device):
    check(lambda x: x, lambda x: x.contiguous(), [(3, 7)], device, layout=layout)
    check(lambda x: x + 1, lambda x: x.contiguous() + 1, [(2, 1, 5)], device, layout=layout)
    check(lambda x: x, lambda x: x.clone(), [(3, 7)], device, layout=layout)


def test_iteration_and_len(device):
    a, t = make_input((3, 4), "float32", device, "transposed")
    assert len(t) == 3
    for row_t, row_a in zip(t, a):
        assert_close(row_t, row_a)


# ------------------------------------------------------------ errors at the call

def test_movement_errors(device):
    x = Tensor(np.ones((3, 4), np.float32), device=device)
    raises_at_call(ValueError, r"\(3, 4\).*\(5,\)", lambda: x.reshape(5))
    raises_at_call(ValueError, r"\(3, 4\).*\(5, -1\)", lambda: x.reshape(5, -1))
    raises_at_call(ValueError, r"only one dimension can be -1", lambda: x.reshape(-1, -1))
    raises_at_call(ValueError, r"\(3, 4\).*\(3, 5\)", lambda: x.expand(3, 5))
    raises_at_call(ValueError, r"fewer dims", lambda: x.expand(4))
    raises_at_call(ValueError, r"\(0, 0\) .*2 dims", lambda: x.permute(0, 0))
    raises_at_call(IndexError, r"axis 2 .*2 dims", lambda: x.permute(0, 2))
    raises_at_call(IndexError, r"axis 2", lambda: x.transpose(0, 2))
    raises_at_call(IndexError, r"axis 3", lambda: x.flip(3))
    raises_at_call(IndexError, r"axis 4 .*3 dims", lambda: x.unsqueeze(4))
    raises_at_call(IndexError, r"axis -4", lambda: x.squeeze(-4))
    raises_at_call(ValueError, r"axis 2", lambda: x.cat(x, dim=2))
    raises_at_call(ValueError, r"\(3, 4\).*\(3, 5\)", lambda: x.cat(Tensor.ones(3, 5, device=device)))
    raises_at_call(ValueError, r"pad", lambda: x.pad((1, 2, 3)))
    raises_at_call(ValueError, r"removes more than.*\(3, 4\)", lambda: x.pad((-5, 0)))
    raises_at_call(ValueError, r"sum to 3.*4", lambda: x.split([1, 2], 1))
    raises_at_call(ValueError, r"shrink.*\(2, 9\)", lambda: x.shrink(((0, 3), (2, 9))))


def test_index_errors(device):
    x = Tensor(np.ones((3, 4), np.float32), device=device)
    for exc in (IndexError, ValueError):
        raises_at_call(exc, r"index 3 .*size 3", lambda: x[3])
        raises_at_call(exc, r"index -5 .*size 4", lambda: x[:, -5])
        raises_at_call(exc, r"too many indices", lambda: x[0, 0, 0])
        raises_at_call(exc, r"index 3 .*size 3", lambda: x[Tensor([0, 3], device=device)])
        raises_at_call(exc, r"index -5 .*size 4", lambda: x[:, Tensor([-5], device=device)])
        raises_at_call(exc, r"index 4 .*size 4", lambda: x[[0, 1], [4, 0]])
        raises_at_call(exc, r"index 3 .*size 3", lambda: x.gather(0, Tensor([[3, 0, 0, 0]], device=device)))
    raises_at_call(ValueError, r"step cannot be zero", lambda: x[::0])
    raises_at_call(TypeError, r"integer", lambda: x[Tensor([0.0], device=device)])
    raises_at_call(ValueError, r"\(2,\).*\(3,\)", lambda: x[Tensor([0, 1], device=device), Tensor([0, 1, 2],
                                                                                                   device=device)])


def _np_windows(x, kernel, stride, dilation):
    """numpy's reference: every window of the last len(kernel) dims, strided and dilated."""
    nsp = len(kernel)
    spans = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    win = np.lib.stride_tricks.sliding_window_view(x, spans, axis=tuple(range(x.ndim - nsp, x.ndim)))
    lead = (slice(None),) * (x.ndim - nsp)
    win = win[lead + tuple(slice(None, None, s) for s in stride)]
    return win[(Ellipsis,) + tuple(slice(None, None, d) for d in dilation)]


@pytest.mark.parametrize("case", range(24))
def test_sliding_windows_against_numpy(case):
    """Tensor.sliding_windows (what pooling and convolution read) against numpy's sliding_window_view:
    random ranks, kernels, strides (overlapping windows and not) and dilations, and its gradient (each
    input element's count of windows)."""
    rng = np.random.default_rng(case)
    nsp = int(rng.integers(1, 4))
    kernel = tuple(int(k) for k in rng.integers(1, 4, nsp))
    stride = tuple(int(s) for s in rng.integers(1, 4, nsp))
    dilation = tuple(int(d) for d in rng.integers(1, 3, nsp))
    spatial = tuple(int(d * (k - 1) + 1 + rng.integers(0, 5)) for k, d in zip(kernel, dilation))
    x = rng.standard_normal(tuple(int(n) for n in rng.integers(1, 3, int(rng.integers(0, 2)))) + spatial)
    x = x.astype(np.float32)
    want = _np_windows(x, kernel, stride, dilation)
    t = Tensor(x, requires_grad=True)
    got = t.sliding_windows(kernel, stride, dilation)
    np.testing.assert_array_equal(got.numpy(), want)
    got.sum().backward()
    counts = np.zeros_like(x)
    idx = _np_windows(np.arange(x.size).reshape(x.shape), kernel, stride, dilation).reshape(-1)
    np.add.at(counts.reshape(-1), idx, 1)
    np.testing.assert_array_equal(t.grad.numpy(), counts)
