"""Random chains of movement ops (permute, flip, pad, shrink, reshape) agree with numpy, on the
generated C kernels and the reference device. Catches index-algebra and view-merging bugs."""
import random

import numpy as np
import pytest

from tg import Tensor


def random_step(t: Tensor, n: np.ndarray, rng: random.Random) -> tuple[Tensor, np.ndarray]:
    r = rng.random()
    if r < 0.2 and n.ndim >= 2:
        p = list(range(n.ndim))
        rng.shuffle(p)
        return t.permute(*p), n.transpose(p)
    if r < 0.35:
        d = rng.randrange(n.ndim)
        return t.flip(d), np.flip(n, d)
    if r < 0.5:
        pads = [(rng.randint(0, 2), rng.randint(0, 2)) for _ in n.shape]
        return t.pad(tuple(pads)), np.pad(n, pads)
    if r < 0.65:
        arg = [(lo, rng.randint(lo + 1, s)) for s in n.shape for lo in [rng.randint(0, s - 1)]]
        return t.shrink(tuple(arg)), n[tuple(slice(a, b) for a, b in arg)]
    dims, rem = [], n.size
    for f in (2, 3, 5, 7):
        while rem % f == 0 and rng.random() < 0.5:
            dims.append(f)
            rem //= f
    dims.append(rem)
    rng.shuffle(dims)
    return t.reshape(*dims), n.reshape(dims)


@pytest.mark.parametrize("device", ["CPU", "NUMPY"])
@pytest.mark.parametrize("seed", range(4))
def test_random_movement_chains(device, seed):
    rng = random.Random(seed)
    for _ in range(60):
        shape = tuple(rng.randint(1, 6) for _ in range(rng.randint(1, 3)))
        n = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
        t = Tensor(n, device=device)
        steps = []
        for _ in range(rng.randint(1, 6)):
            t, n = random_step(t, n, rng)
            steps.append(n.shape)
        np.testing.assert_array_equal(t.numpy(), n, err_msg=f"chain {steps}")
        np.testing.assert_allclose((t * 2 + 1).sum().item(), (n * 2 + 1).sum(), rtol=1e-5)
