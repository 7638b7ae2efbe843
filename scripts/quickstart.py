"""The quickstart job: train a small MLP classifier on an embedded toy dataset (three interleaved
spirals, generated here: nothing is downloaded), single process, with tg's autograd and
generated kernels. Prints loss and accuracy as it goes.

    python scripts/quickstart.py --steps 300
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tg  # noqa: E402
from tg import Tensor  # noqa: E402


def spirals(n_per_class: int, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        theta = np.linspace(c * 2 * math.pi / classes, c * 2 * math.pi / classes + 3.5, n_per_class)
        theta = theta + rng.normal(0, 0.15, n_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], 1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def init_linear(fan_in: int, fan_out: int) -> tuple[Tensor, Tensor]:
    bound = 1 / math.sqrt(fan_in)   # torch's nn.Linear default range
    w = Tensor.uniform(fan_out, fan_in, low=-bound, high=bound, requires_grad=True)
    b = Tensor.uniform(fan_out, low=-bound, high=bound, requires_grad=True)
    return w, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    Tensor.manual_seed(args.seed)
    x_np, y_np = spirals(200)
    x, y = Tensor(x_np), Tensor(y_np)
    onehot = (y.reshape(-1, 1) == Tensor.arange(3).reshape(1, 3)).float()     # (N, 3)
    params = [*init_linear(2, args.hidden), *init_linear(args.hidden, args.hidden), *init_linear(args.hidden, 3)]
    w1, b1, w2, b2, w3, b3 = params
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        h = x.linear(w1, b1).relu()
        h = h.linear(w2, b2).relu()
        logits = h.linear(w3, b3)                                            # (N, 3)
        loss = -(logits.log_softmax(-1) * onehot).sum(-1).mean()
        for p in params:
            p.grad = None
        loss.backward()
        with tg.no_grad():
            for p in params:
                assert p.grad is not None
                p.assign(p.detach() - args.lr * p.grad)
            if step % 50 == 0 or step == 1:
                acc = (logits.argmax(-1) == y).float().mean().item()
                print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {acc:.3f}  "
                      f"{(time.perf_counter() - start) / step * 1e3:.1f} ms/step", flush=True)
    final = (logits.argmax(-1) == y).float().mean().item()
    print(f"done: {args.steps} steps, final accuracy {final:.3f}")


if __name__ == "__main__":
    main()
