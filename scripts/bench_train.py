"""Training benchmark: steps/s of three models, tg vs PyTorch on the CPU in the same run.

    python scripts/bench_train.py              # all rows
    python scripts/bench_train.py --quick      # fewer steps (a smoke run, not a measurement)

(a) MLP 784-512-512-10, batch 256, cross-entropy, Adam, jitted step; (b) CNN conv 1->32 3x3,
conv 32->64 3x3, max-pool 2, linear -> 10 on 28x28, batch 128, Adam; (c) the GPT of
scripts/train.py in tokens/s. Each tg model runs in a child process twice, first with an empty
kernel cache (cold) and then with the cache it filled (warm), to measure the first step's latency
(trace + compile) both ways. PyTorch rows appear when torch is importable.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

GPT_CFG = dict(batch=16, block=64, n_layer=2, n_head=4, n_embd=128)


# ---------------------------------------------------------------------------- tg models

def tg_model(name: str):
    """(step function taking no arguments, items per step) for one tg model."""
    import tg
    from tg import Tensor, TinyJit, nn
    from tg.nn import functional as F
    from tg.nn.state import get_parameters
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 512), Tensor.relu, nn.Linear(512, 512), Tensor.relu, nn.Linear(512, 10)
        )
        x = Tensor(rng.random((256, 784), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 256))
        items = 1
    elif name == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3), Tensor.relu, nn.Conv2d(32, 64, 3), Tensor.relu,
                              lambda t: t.max_pool2d(2), lambda t: t.flatten(1), nn.Linear(64 * 12 * 12, 10))
        x = Tensor(rng.random((128, 1, 28, 28), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 128))
        items = 1
    else:
        from train import GPT
        c = GPT_CFG
        gpt = GPT(256, c["block"], c["n_layer"], c["n_head"], c["n_embd"])
        x = Tensor(rng.integers(0, 256, (c["batch"], c["block"])).astype(np.int32))
        y = Tensor(rng.integers(0, 256, (c["batch"], c["block"])).astype(np.int32))
        items = c["batch"] * c["block"]
        model = gpt
    opt = nn.optim.Adam(get_parameters(model), lr=1e-3)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(x, y) if name == "gpt" else F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.realize()
    _ = tg
    return (lambda: step(x, y)), items


def child(name: str, steps: int) -> None:
    t0 = time.perf_counter()
    step, items = tg_model(name)
    t1 = time.perf_counter()
    first_loss = step().item()
    t2 = time.perf_counter()
    for _ in range(3):
        step()
    step().item()
    t3 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    last_loss = loss.item()
    t4 = time.perf_counter()
    print(json.dumps({"build_s": t1 - t0, "first_step_s": t2 - t1, "steps_per_s": steps / (t4 - t3),
                      "items": items, "first_loss": first_loss, "last_loss": last_loss, "warm_s": t3 - t2}))


def run_child(name: str, steps: int, cache: str) -> dict:
    env = {**os.environ, "TG_CACHE_DIR": cache}
    proc = subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(steps)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"[bench] the {name} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- torch models

# Complexity: the torch reference builds each of the three models and its step; one branch per model.
def torch_steps_per_s(name: str, steps: int) -> float | None:  # noqa: C901
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    nn = torch.nn
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        x, y = torch.rand(256, 784), torch.randint(0, 10, (256,))
    elif name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 12 * 12, 10),
        )
        x, y = torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,))
    else:
        c = GPT_CFG

        class Block(nn.Module):
            def __init__(self, d: int, h: int):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.fc, self.fc_out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
                self.h = h

            def forward(self, x):
                B, T, C = x.shape
                q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
                q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
                att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(att.transpose(1, 2).reshape(B, T, C))
                return x + self.fc_out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                d = c["n_embd"]
                self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(c["block"], d)
                self.blocks = nn.ModuleList([Block(d, c["n_head"]) for _ in range(c["n_layer"])])
                self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, 256, bias=False)

            def forward(self, idx):
                x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
                for b in self.blocks:
                    x = b(x)
                return self.head(self.ln_f(x)).reshape(-1, 256)
        model = GPT()
        x = torch.randint(0, 256, (c["batch"], c["block"]))
        y = torch.randint(0, 256, (c["batch"] * c["block"],))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    steps = {"mlp": 60, "cnn": 12, "gpt": 30}
    if args.quick:
        steps = {k: 3 for k in steps}
    rows = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as cache:
            cold = run_child(name, steps[name], cache)
            warm = run_child(name, steps[name], cache)
        ref = torch_steps_per_s(name, steps[name])
        unit = "tok/s" if name == "gpt" else "steps/s"
        ours = warm["steps_per_s"] * warm["items"]
        theirs = ref * warm["items"] if ref is not None else None
        target = {"mlp": ">= 1.0x", "cnn": ">= 0.7x", "gpt": ""}[name]
        rows.append(
            (
                name,
                f"{ours:,.1f} {unit}",
                f"{theirs:,.1f} {unit}" if theirs else "torch not installed",
                f"{ours / theirs:.2f}x" if theirs else "-",
                target,
                f"{cold['first_step_s']:.2f} s",
                f"{warm['first_step_s']:.2f} s",
                f"{warm['first_loss']:.3f} -> {warm['last_loss']:.3f}",
            )
        )
    header = ("model", "tg", "PyTorch CPU (same run)", "ratio", "target", "1st step cold", "1st step warm",
              "loss")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print(f"tg bench_train  cores={os.cpu_count()}  (first step targets: < 3 s cold, < 1 s warm)")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
