"""Tensor.get_rng_state / set_rng_state: host form (to save) and device form (no host read, JIT-safe)."""
import json

import numpy as np
import pytest

from tg import Device, Tensor, TinyJit


@pytest.mark.parametrize("on_device", [False, True])
def test_set_rng_state_replays_the_stream(on_device):
    Tensor.rand(5)
    state = Tensor.get_rng_state(on_device=on_device)
    a = Tensor.rand(7).numpy()
    b = Tensor.randn(3, device="NUMPY").numpy()
    Tensor.set_rng_state(state)
    np.testing.assert_array_equal(Tensor.rand(7).numpy(), a)
    np.testing.assert_array_equal(Tensor.randn(3, device="NUMPY").numpy(), b)   # no count saved: back to 0


def test_host_form_is_plain_json():
    Tensor.manual_seed(42)
    Tensor.rand(10)
    state = Tensor.get_rng_state()
    assert state == {"seed": 42, "counters": {Device.DEFAULT: 10}, "host": 0}
    after = Tensor.rand(4).numpy()
    Tensor.manual_seed(1)
    Tensor.set_rng_state(json.loads(json.dumps(state)))
    np.testing.assert_array_equal(Tensor.rand(4).numpy(), after)


def test_device_form_is_a_copy():
    state = Tensor.get_rng_state(on_device=True)
    Tensor.rand(3)
    state = Tensor.get_rng_state(on_device=True)
    Tensor.rand(3)                                     # advances the counter, not the saved copy
    assert state["counters"][Device.DEFAULT].tolist() == [3]


def test_device_form_restores_inside_a_jit():
    def step(x: Tensor) -> Tensor:
        saved = Tensor.get_rng_state(on_device=True)
        first = Tensor.rand(4)
        Tensor.set_rng_state(saved)
        return (first - Tensor.rand(4)).abs().sum() + x.sum() * 0
    jitted = TinyJit(step)
    x = Tensor([0.0])
    Tensor.rand(1)                                     # the counter exists before the capture
    draws = []
    for _ in range(5):
        assert jitted(x).item() == 0.0
        draws.append(Tensor.rand(2).numpy())
    assert len({d.tobytes() for d in draws}) == 5    # and the stream still moves on between calls


def test_set_rng_state_rejects_other_values():
    with pytest.raises(
        ValueError, match=r"\[core\] set_rng_state: expected the dict get_rng_state\(\) returns"
    ):
        Tensor.set_rng_state({"seed": 1})


def test_the_samplers_seed_sequence_is_part_of_the_state():
    """A sampler without a generator takes its seed from tg's global sequence (random.host_seed): a
    resumed run that restores the state gets the orders the uninterrupted run got; a state saved before
    that sequence existed (no "host") still loads, and starts it from the seed."""
    from tg.utils.data import RandomSampler
    Tensor.manual_seed(5)
    list(RandomSampler(range(20)))
    state = json.loads(json.dumps(Tensor.get_rng_state()))
    assert state["host"] == 1
    want = [list(RandomSampler(range(20))) for _ in range(3)]
    Tensor.manual_seed(9)
    Tensor.set_rng_state(state)
    assert [list(RandomSampler(range(20))) for _ in range(3)] == want
    Tensor.set_rng_state({"seed": 5, "counters": {}})
    Tensor.manual_seed(5)
    fresh = list(RandomSampler(range(20)))
    Tensor.set_rng_state({"seed": 5, "counters": {}})
    assert list(RandomSampler(range(20))) == fresh
