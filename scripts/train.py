"""Train a small GPT-style byte-level transformer with tg: the main job.

With no arguments it trains on an embedded default corpus (the Python installation's own
standard-library sources, read from disk: nothing is downloaded); `--data FILE` trains on any
text file. It prints a progress line (step, loss, tokens/s, ETA), evaluates on a held-out split
every --eval-every steps, writes a checkpoint (safetensors, atomic) at the end and every
--ckpt-every steps, and a loss-curve plot (SVG) at the end. `--resume` continues from the
checkpoint in --out.

    python scripts/train.py                             # about 2 minutes on 2 CPU cores
    python scripts/train.py --data my.txt --steps 2000 --n-layer 4 --n-embd 256
    python scripts/train.py --resume --steps 600        # continue the run in --out
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tg  # noqa: E402
from tg import Tensor, TinyJit, nn  # noqa: E402
from tg.nn import functional as F  # noqa: E402
from tg.nn.state import (  # noqa: E402
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)

# ---------------------------------------------------------------------------- data

def default_corpus(max_bytes: int = 4 << 20) -> bytes:
    """Text of the standard library's own .py files, in a fixed order (the same on every run)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    if not chunks:
        raise FileNotFoundError(f"[train] no .py files under {root}; pass --data FILE")
    return b"".join(chunks)[:max_bytes]


def load_tokens(path: str | None) -> np.ndarray:
    data = default_corpus() if path is None else Path(path).read_bytes()
    if len(data) < 1024:
        raise ValueError(f"[train] the corpus has {len(data)} bytes; need at least 1024")
    return np.frombuffer(data, dtype=np.uint8).astype(np.int32)     # bytes are the tokens (vocab 256)


def get_batch(tokens: np.ndarray, batch: int, block: int, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    starts = rng.integers(0, len(tokens) - block - 1, size=batch)
    x = np.stack([tokens[s:s + block] for s in starts])             # (B, T)
    y = np.stack([tokens[s + 1:s + block + 1] for s in starts])     # (B, T)
    return Tensor(x), Tensor(y)


# ---------------------------------------------------------------------------- model

class CausalSelfAttention:
    def __init__(self, n_embd: int, n_head: int):
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def __call__(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)                                # 3 x (B, T, C)
        q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)            # (B, H, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block:
    def __init__(self, n_embd: int, n_head: int):
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.fc, self.fc_out = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

    def __call__(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc_out(self.fc(self.ln2(x)).gelu(approximate="tanh"))


class GPT:
    def __init__(self, vocab: int = 256, block: int = 64, n_layer: int = 2, n_head: int = 4, n_embd: int = 128):
        self.block = block
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block, n_embd)
        self.blocks = [Block(n_embd, n_head) for _ in range(n_layer)]
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def __call__(self, idx: Tensor) -> Tensor:
        B, T = idx.shape
        x = self.tok(idx) + self.pos.weight[:T]                                 # (B, T, C)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))                                          # (B, T, vocab)

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------------------- plotting

def write_svg_plot(path: Path, train: list[tuple[int, float]], val: list[tuple[int, float]]) -> None:
    """A loss curve as a small standalone SVG (no plotting library needed)."""
    w, h, pad = 640, 360, 48
    pts = train + val
    if not pts:
        return
    x_max = max(s for s, _ in pts) or 1
    y_lo, y_hi = min(v for _, v in pts), max(v for _, v in pts)
    y_hi = y_hi if y_hi > y_lo else y_lo + 1

    def xy(s: int, v: float) -> str:
        return f"{pad + (w - 2 * pad) * s / x_max:.1f},{h - pad - (h - 2 * pad) * (v - y_lo) / (y_hi - y_lo):.1f}"
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">step (0..{x_max})</text>',
             f'<text x="{pad - 6}" y="{pad}" text-anchor="end">{y_hi:.2f}</text>',
             f'<text x="{pad - 6}" y="{h - pad}" text-anchor="end">{y_lo:.2f}</text>',
             f'<text x="{w / 2}" y="20" text-anchor="middle">tg GPT loss (blue: train, red: eval)</text>']
    for series, color in ((train, "#1f77b4"), (val, "#d62728")):
        if len(series) > 1:
            lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                         f'points="{" ".join(xy(s, v) for s, v in series)}"/>')
        for s, v in series if len(series) == 1 else []:
            lines.append(f'<circle cx="{xy(s, v).split(",")[0]}" cy="{xy(s, v).split(",")[1]}" r="3" fill="{color}"/>')
    lines.append("</svg>")
    tmp = path.with_suffix(".svg.tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- training

def progress(step: int, total: int, loss: float, tok_s: float, elapsed: float, start_step: int) -> str:
    done = (step - start_step) / max(total - start_step, 1)
    eta = elapsed / max(done, 1e-9) * (1 - done)
    bar = "#" * int(24 * step / total) + "." * (24 - int(24 * step / total))
    return f"\r[{bar}] step {step}/{total}  loss {loss:.4f}  {tok_s:,.0f} tok/s  ETA {eta:5.0f}s"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a text file to train on (default: the stdlib sources)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=0, help="also checkpoint every N steps (0: only at the end)")
    ap.add_argument("--out", default="out/train", help="folder for the checkpoint, log and plot")
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "ckpt.safetensors"
    Tensor.manual_seed(args.seed)
    tokens = load_tokens(args.data)
    split = int(len(tokens) * 0.9)
    train_tok, val_tok = tokens[:split], tokens[split:]

    model = GPT(256, args.block, args.n_layer, args.n_head, args.n_embd)
    params = get_parameters(model)
    opt = nn.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    sched = nn.optim.CosineWithWarmup(opt, args.warmup, args.steps, min_lr=args.lr * 0.1)
    start_step, history = 0, {"train": [], "val": []}
    if args.resume:
        if not ckpt.exists():
            raise FileNotFoundError(f"[train] --resume: no checkpoint at {ckpt}; run once without --resume")
        load_state_dict(model, safe_load(ckpt))
        meta = safe_load_metadata(ckpt)
        start_step = int(meta.get("step", "0"))
        # the two files are each written atomically; a crash between them leaves different steps
        opt_state = out / "optim.safetensors"
        opt_step = safe_load_metadata(opt_state).get("step") if opt_state.exists() else None
        if opt_step != str(start_step):
            raise RuntimeError(f"[train] --resume: {ckpt} is at step {start_step} but {opt_state} is at step "
                               f"{opt_step}; a run was interrupted while saving. Delete {out} to start over.")
        opt.load_state_dict(safe_load(opt_state))
        history = json.loads(meta.get("history", '{"train": [], "val": []}'))
        for _ in range(start_step):
            sched.step()
        print(f"resumed from {ckpt} at step {start_step}")
    n_params = sum(p.numel() for p in params)
    source = "stdlib" if args.data is None else args.data
    print(f"tg GPT: {n_params / 1e6:.2f}M params, {len(tokens):,} tokens ({source}), "
          f"batch {args.batch}x{args.block}, device {Tensor([0]).device}")

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        Tensor.training = True
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        Tensor.training = False
        return loss.realize()

    @TinyJit
    def eval_step(x: Tensor, y: Tensor) -> Tensor:
        return model.loss(x, y).realize()

    def evaluate(n_batches: int = 8) -> float:
        erng = np.random.default_rng(0)
        with tg.no_grad():
            return float(np.mean([eval_step(*get_batch(val_tok, args.batch, args.block, erng)).item()
                                  for _ in range(n_batches)]))

    def save(step: int) -> None:
        meta = {"step": str(step), "history": json.dumps(history), "config": json.dumps(vars(args))}
        safe_save(get_state_dict(model), ckpt, metadata=meta)
        safe_save(opt.state_dict(), out / "optim.safetensors", metadata={"step": str(step)})

    start = time.perf_counter()
    tokens_per_step = args.batch * args.block
    loss_v = float("nan")
    for step in range(start_step + 1, args.steps + 1):
        # batches depend only on (seed, step): a resumed run sees the same data as an unbroken one
        x, y = get_batch(train_tok, args.batch, args.block, np.random.default_rng([args.seed, step]))
        loss_v = train_step(x, y).item()
        sched.step()
        history["train"].append((step, loss_v))
        elapsed = time.perf_counter() - start
        tok_s = tokens_per_step * (step - start_step) / elapsed
        print(progress(step, args.steps, loss_v, tok_s, elapsed, start_step), end="", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            val = evaluate()
            history["val"].append((step, val))
            print(f"\n  eval loss {val:.4f} at step {step}", flush=True)
        if args.ckpt_every and step % args.ckpt_every == 0 and step != args.steps:
            save(step)
    save(args.steps)
    write_svg_plot(out / "loss.svg", history["train"], history["val"])
    (out / "history.json").write_text(json.dumps(history))
    first = history["train"][0][1] if history["train"] else float("nan")
    print(f"\ndone: loss {first:.3f} -> {loss_v:.3f}; checkpoint {ckpt}, plot {out / 'loss.svg'}")
    return {"first_loss": first, "last_loss": loss_v, "history": history}


if __name__ == "__main__":
    main()
