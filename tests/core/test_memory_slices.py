"""A run of realized memory read at a new offset every step (word_language_model's `data[i:i + bptt]`)
makes no new schedule and no new kernel (schedule.memory_slice: the run becomes a leaf of its own over
a Buffer.view). Generated over dtypes, slice shapes (leading-axis runs, which are sliced; column
slices and unaligned starts, which are not), reshapes after the slice and devices; values against
numpy, also where an assign not yet run writes the same memory."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import gpu_support

from tg import Tensor, dtypes
from tg.core import realize as R
from tg.core.device import GlobalCounters
from tg.core.schedule import memory_slice

DTYPES = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
          "float64": np.float64}


def _data(dtype: str, shape: tuple[int, ...], device: str, seed: int) -> tuple[np.ndarray, Tensor]:
    a = (np.random.default_rng(seed).normal(size=shape) * 10).astype(DTYPES[dtype])
    return a, Tensor(a, device=device).realize()


def _check_device(device: str) -> None:
    if device == "CL" and (reason := gpu_support("CL")) is not None:
        pytest.skip(f"CL is not available here: {reason}")


@pytest.mark.parametrize("device", ["CPU", "NUMPY", "CL"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape,length", [((40, 6), 7), ((50, 3, 4), 5), ((97,), 13)])
def test_a_run_at_a_new_offset_reuses_the_schedule(device, dtype, shape, length):
    _check_device(device)
    a, data = _data(dtype, shape, device, seed=length)
    starts = [1, 4, 9, 2, shape[0] - length]
    built = []
    for i in starts:
        x = data[i:i + length]
        got = ((x + 1) * 2).reshape(-1).numpy()
        np.testing.assert_array_equal(got, ((a[i:i + length] + 1) * 2).astype(a.dtype).reshape(-1))
        built.append(GlobalCounters.schedules_built)
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    row = int(np.prod(shape[1:])) * itemsize
    align = data.lazydata.base.realized.allocator.view_align
    if all(i * row % align == 0 for i in starts[1:]):
        assert built[-1] == built[0], "a new offset made a new schedule"


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_what_is_not_one_run_is_read_through_its_view(device):
    a, data = _data("float32", (20, 8), device, seed=3)
    for view, want in ((data[2:9, 1:5], a[2:9, 1:5]),          # columns: not one run
                       (data[3:10].permute(1, 0), a[3:10].T),   # a permuted run
                       (data[::2], a[::2]),                      # strided
                       (data[:5], a[:5])):                       # at the start: the base itself
        np.testing.assert_array_equal((view * 3).numpy(), want * 3)
    u8 = Tensor(np.arange(64, dtype=np.uint8), device=device).realize()
    odd = u8[5:21]                    # starts at byte 5: the host views memory from multiples of 4 only
    assert memory_slice(odd.lazydata) is None
    np.testing.assert_array_equal((odd + 1).numpy(), np.arange(5, 21, dtype=np.uint8) + 1)


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
@pytest.mark.parametrize("order", ["read_first", "write_first"])
def test_a_pending_write_of_the_same_memory_keeps_program_order(device, order):
    a, data = _data("float32", (12, 4), device, seed=5)
    if order == "read_first":
        y = data[3:7] * 2                  # reads the old values
        data.assign(data + 100)            # pending
        y.realize(data)                    # one schedule: the write after the read
        np.testing.assert_array_equal(y.numpy(), a[3:7] * 2)
        np.testing.assert_array_equal(data.numpy(), a + 100)
    else:
        memory = data.lazydata
        data.assign(data + 100)            # pending
        assert memory_slice(memory.shrink(((3, 7), (0, 4)))) is None   # (a read waits for the write)
        np.testing.assert_array_equal((data[3:7] * 2).numpy(), (a[3:7] + 100) * 2)


def test_a_write_through_a_run_reaches_its_tensor():
    a, data = _data("float32", (10, 3), "CPU", seed=6)
    view = data[4:7]
    view += 1
    a[4:7] += 1
    np.testing.assert_array_equal(data.numpy(), a)
    np.testing.assert_array_equal((data[4:7] * 1).numpy(), a[4:7])


def test_replayed_graphs_keep_their_inputs_whole():
    """Inside realize.replayed no source becomes a slice: a replay binds its inputs' own memory."""
    a, data = _data("float32", (6, 5), "CPU", seed=7)
    from tg.core.ops import BinaryOps
    calls = []

    def build(x):
        calls.append(1)
        return [x.shrink(((2, 4), (0, 5))).e(BinaryOps.ADD, x.shrink(((1, 3), (0, 5))))]
    for _ in range(3):
        (got,) = R.replayed(("test_memory_slices",), [data.lazydata], build)
        np.testing.assert_array_equal(R.to_numpy(got), a[2:4] + a[1:3])
    assert dtypes.float32 == data.dtype


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
def test_a_tinyjit_replay_reads_each_calls_input(device):
    """While a TinyJit captures, no source becomes a slice: its replays bind the memory of each call's
    inputs, and a view of the first call's input would be read again by every replay."""
    from tg import TinyJit
    jitted = TinyJit(lambda x: (x[2:5] * 2 + x[6:8].sum(0)).realize())
    rng = np.random.default_rng(8)
    for _ in range(4):
        a = rng.normal(size=(9, 3)).astype(np.float32)
        got = jitted(Tensor(a, device=device).realize()).numpy()
        np.testing.assert_allclose(got, a[2:5] * 2 + a[6:8].sum(0), rtol=1e-6, atol=1e-6)
