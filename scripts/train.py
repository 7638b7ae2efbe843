"""Train a small GPT-style byte-level transformer with tg: the main job.

Runs the same under tglaunch (data-parallel over every rank) and as a plain `python` process:

    tglaunch --nproc 2 scripts/train.py --config configs/gpt_zero2.yaml   # 2 ranks, ZeRO-2 (the main job)
    python scripts/train.py                                              # one process
    python scripts/train.py --zero --checkpoint-activations --steps 200   # flags win over --config
    tglaunch --nproc 2 scripts/train.py --config configs/gpt_zero2.yaml --resume
    tglaunch --nproc 2 scripts/train.py --config configs/gpt_fsdp.yaml    # FSDP: the parameters sharded too

With no --data it trains on an embedded default corpus (the Python installation's own
standard-library sources, read from disk: nothing is downloaded). Every rank reads a different
slice of each epoch (DistributedSampler); gradients are averaged by DistributedDataParallel
(--strategy ddp), reduce-scattered by ZeroOptimizer (zero2, or --zero: each rank keeps 1/N of the
optimizer state), or the parameters themselves are sharded, each block an FSDP unit (fsdp);
--checkpoint-activations recomputes each block's activations in backward instead of keeping them.
Rank 0 shows progress (loss averaged over ranks, tokens/s over all ranks, MFU, peak tensor memory of
every rank), evaluates on a held-out split every --eval-every steps, writes a
sharded checkpoint every --ckpt-every steps and at the end (`<out>/ckpt`, loadable at another
number of ranks), a loss-curve plot (`<out>/loss.svg`, train and eval; --log-y) and ends by printing a
text sample the trained model writes. `--resume` continues from the newest
checkpoint; under `tglaunch --max-restarts N` a restarted job resumes by itself, so a killed rank
costs at most the steps since the last checkpoint. The same holds in an elastic job (`tglaunch --config
configs/elastic.yaml`, `--nnodes MIN:MAX`): on every start with TG_RESTART_COUNT > 0 the script loads the
newest complete checkpoint at whatever WORLD_SIZE the job now has (the model and optimizer load at any
world size), the loader deals out the rest of the epoch's shuffled order among the ranks there are (every
window once in the epoch: its state holds how much of the order all ranks took), and the step count and
learning-rate schedule go on from the checkpoint's step. The global batch is WORLD_SIZE x --batch, so it
follows the job's size.

Every step is logged to `<out>/logs` (tg.utils.tensorboard: TensorBoard event files when the tensorboard
package is installed, `pip install -e ".[metrics]"`, and metrics.jsonl always): loss, eval loss, learning
rate, gradient norm (before clipping at --grad-clip), tokens/s, the step's time split (data,
forward+backward, communication the main thread waited for, optimizer), TFLOPS and MFU (model FLOPs,
6 N + 12 L T d a token with N the parameters outside the looked-up embeddings, over the peak the machine
really has: tg.utils.flops, or --peak-tflops), HFU (the FLOPs tg's kernels counted, over the same peak),
peak tensor memory over the ranks and bytes communicated. Profile a run with
`tglaunch --profile DIR ...` (one merged Chrome/Perfetto trace of every rank in DIR/trace.json).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tg  # noqa: E402
import tg.distributed as dist  # noqa: E402
from tg import GlobalCounters, Tensor, TinyJit, config, nn, profiler  # noqa: E402
from tg.distributed.fsdp import fully_shard  # noqa: E402
from tg.nn import functional as F  # noqa: E402
from tg.nn.checkpoint import checkpoint  # noqa: E402
from tg.nn.state import get_parameters  # noqa: E402
from tg.utils.flops import mfu, peak_gflops  # noqa: E402
from tg.utils.plot import line_plot  # noqa: E402
from tg.utils.progress import progress  # noqa: E402
from tg.utils.tensorboard import SummaryWriter  # noqa: E402

# ---------------------------------------------------------------------------- data

VOCAB = 256     # the tokens are bytes


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


class TokenWindows:
    """Non-overlapping windows of block+1 tokens: item i is (x, y) = (w[:-1], w[1:]) of window i.
    Indexed by a whole array of window numbers at once (what tg's DataLoader hands over)."""

    def __init__(self, tokens: np.ndarray, block: int):
        self.tokens, self.block = tokens, block

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block

    def __getitem__(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = self.tokens[(idx * self.block)[:, None] + np.arange(self.block + 1)]    # (B, T+1)
        return rows[:, :-1], rows[:, 1:]


# ---------------------------------------------------------------------------- model

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)                                # 3 x (B, T, C)
        q, k, v = (t.reshape(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)            # (B, H, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.fc, self.fc_out = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc_out(self.fc(self.ln2(x)).gelu(approximate="tanh"))


class GPT(nn.Module):
    def __init__(
        self,
        vocab: int = 256,
        block: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        n_embd: int = 128,
        checkpoint_activations: bool = False,
    ):
        super().__init__()
        self.block, self.checkpoint_activations = block, checkpoint_activations
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        B, T = idx.shape
        x = self.tok(idx) + self.pos.weight[:T]                                 # (B, T, C)
        for blk in self.blocks:
            # recomputed in backward: only each block's input is kept
            x = checkpoint(blk, x) if self.checkpoint_activations else blk(x)
        return self.head(self.ln_f(x))                                          # (B, T, vocab)

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------------------- what it learned

def model_flops_per_token(n_params: int, args: argparse.Namespace) -> float:
    """Training FLOPs a token (forward and backward), as PaLM's appendix and nanoGPT count them: 6 per
    parameter a matmul uses (all but the embeddings', which are looked up: this GPT's head is not tied
    to its token embedding), plus attention's 12 L T d."""
    looked_up = (VOCAB + args.block) * args.n_embd
    return 6 * (n_params - looked_up) + 12 * args.n_layer * args.block * args.n_embd


def machine_peak(run: Run) -> tuple[float, str]:
    """(GFLOPS a rank, where it comes from) for MFU: --peak-tflops, else tg.utils.flops' (bfloat16 and
    float16 on a GPU's tensor cores; the CPU computes float16 through float32); NaN when unknown."""
    if run.args.peak_tflops > 0:
        return run.args.peak_tflops * 1e3, "--peak-tflops"
    low = run.precision == "bf16" or (run.precision == "fp16" and device_kind() == "cuda")
    try:
        return peak_gflops(dtype="bfloat16" if low else "float32")
    except ValueError as e:
        return float("nan"), f"unknown: {e}"


def sample(run: Run, n_tokens: int, temperature: float) -> bytes:
    """n_tokens bytes the model writes after a prompt from the held-out text, sampled at temperature
    (0: greedy) with a generator seeded by --seed. Every rank runs it (FSDP's forward gathers); the
    window is always --block long, the text at its start (causal attention never looks past it), so one
    set of kernels serves every token."""
    args = run.args
    val = run.tokens[int(len(run.tokens) * 0.9):]
    text = [int(t) for t in val[:max(1, min(32, args.block // 2))]]
    rng = np.random.default_rng(args.seed)
    window = np.zeros((1, args.block), np.int64)
    out: list[int] = []
    Tensor.training = False
    try:
        with tg.no_grad(), run.autocast():
            for _ in range(n_tokens):
                ctx = text[-args.block:]
                window[0, :len(ctx)] = ctx
                logits = run.model(Tensor(window))[0, len(ctx) - 1].float().numpy().astype(np.float64)
                if not np.isfinite(logits).all():      # a diverged model writes nothing more
                    break
                if temperature <= 0:
                    nxt = int(np.argmax(logits))
                else:
                    p = np.exp((logits - logits.max()) / temperature)
                    nxt = int(rng.choice(len(p), p=p / p.sum()))
                text.append(nxt)
                out.append(nxt)
    finally:
        Tensor.training = None
    return bytes(out)


# ---------------------------------------------------------------------------- options

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
STRATEGIES = ("ddp", "zero2", "fsdp")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--config", help="a YAML file of these options (underscores or dashes); flags win over it"
    )
    ap.add_argument("--data", help="a text file to train on (default: the stdlib sources)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--strategy", choices=STRATEGIES, default="ddp",
                    help="ddp: every rank keeps the whole model and optimizer state; zero2: the optimizer "
                         "state and gradients sharded over the ranks (ZeroOptimizer); fsdp: the parameters "
                         "too, each transformer block a unit gathered only while it computes (fully_shard)")
    ap.add_argument("--zero", action="store_true", help="the same as --strategy zero2")
    ap.add_argument("--checkpoint-activations", action="store_true", help="recompute each block in backward")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="gradient bucket size for the collectives")
    ap.add_argument("--no-jit", action="store_true", help="run every step eagerly (no TinyJit capture)")
    ap.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="fp32; bf16 or fp16 autocast (fp16 with a GradScaler); auto: bf16 where the device "
                         "computes it on its own units (AMX, AVX512_BF16, tensor cores), else fp32")
    ap.add_argument("--grad-clip", type=float, default=1.0,
                    help="clip the gradients' total norm to this (0: measure only); the norm is logged")
    ap.add_argument("--log-dir", default="", help="TensorBoard events and metrics.jsonl (default <out>/logs)")
    ap.add_argument("--log-y", action="store_true", help="the loss plot's y axis logarithmic")
    ap.add_argument("--sample-tokens", type=int, default=200,
                    help="bytes of text the trained model writes at the end (0: none)")
    ap.add_argument("--temperature", type=float, default=0.8, help="the sample's temperature (0: greedy)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="a rank's peak for MFU (default: measured on a CPU, a GPU's datasheet)")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument(
        "--log-every", type=int, default=10, help="progress line every N steps (not on a terminal)"
    )
    ap.add_argument(
        "--ckpt-every", type=int, default=0, help="also checkpoint every N steps (0: only at the end)"
    )
    ap.add_argument("--out", default="out/train", help="folder for checkpoints, history and plot")
    ap.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--crash-at-step", type=int, default=0,
                    help="fault drill: the last rank SIGKILLs itself at this step on the job's first attempt")
    pre, _ = ap.parse_known_args(argv)
    if pre.config:
        ap.set_defaults(**read_config(pre.config, ap))
    args = ap.parse_args(argv)
    if args.zero:
        if args.strategy not in ("ddp", "zero2"):
            ap.error(f"--zero is --strategy zero2, but --strategy {args.strategy} was asked too; keep one")
        args.strategy = "zero2"
    return args


def read_config(path: str, ap: argparse.ArgumentParser) -> dict:
    import yaml
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"[train] {path}: expected a mapping of option: value, got {type(raw).__name__}")
    known = {a.dest for a in ap._actions if a.dest not in ("help", "config")}
    out = {}
    for key, value in raw.items():
        dest = str(key).replace("-", "_")
        if dest not in known:
            close = difflib.get_close_matches(dest, known, n=1)
            hint = (
                f"; did you mean {close[0]!r}?" if close else f"; known options: {', '.join(sorted(known))}"
            )
            raise ValueError(f"[train] {path}: unknown option {key!r}{hint}")
        out[dest] = value
    return out


# ---------------------------------------------------------------------------- training

def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    dist.init_process_group()
    try:
        return train(args)
    finally:
        dist.destroy_process_group()


class Run:
    """Everything one training run works with, made by `setup`; `resume` moves its start."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, out: Path, tokens: np.ndarray,
                 loader: dist.DataLoader, val_loader: dist.DataLoader, model: GPT, opt: nn.optim.Optimizer,
                 net: Any, sched: nn.optim.CosineWithWarmup):
        self.args, self.rank, self.world, self.tokens = args, rank, world, tokens
        self.out, self.ckpt_dir = out, out / "ckpt"
        self.loader, self.val_loader = loader, val_loader
        self.model, self.params, self.opt, self.sched = model, get_parameters(model), opt, sched
        self.net = net  # what the loss is computed through: DDP's wrapper, or the model under ZeRO
        self.start_step, self.epoch = 0, 0
        self.n_params = 0         # the whole model's (under FSDP the parameters here are shards)
        self.history: dict = {"train": [], "val": []}
        self.precision, self.units = resolve_precision(args.precision)
        if args.precision == "auto" and world > 1:     # every rank the same: bf16 only if all have the units
            everywhere = np.array([self.precision == "bf16"], np.int32)
            dist.all_reduce(everywhere, op=dist.ReduceOp.MIN)
            if not everywhere[0]:
                self.precision = "fp32"
        # float16's small gradients underflow unless the loss is scaled (bfloat16 has float32's range)
        self.scaler = tg.amp.GradScaler(device_kind()) if self.precision == "fp16" else None
        self.skipped: list[int] = []      # steps the scaler skipped (their gradients overflowed)
        self.writer: SummaryWriter | None = None   # rank 0's metrics (loop opens it, report closes it)

    def autocast(self) -> tg.autocast:
        """The forward's mixed-precision region (off for fp32); the parameters stay float32 (the
        master weights the optimizer updates and the checkpoints hold)."""
        low = {"bf16": tg.bfloat16, "fp16": tg.float16}.get(self.precision)
        return tg.autocast(device_kind(), dtype=low, enabled=low is not None)


def device_kind() -> str:
    """autocast's device_type for the default device."""
    name = str(Tensor([0]).device).upper()
    return "cuda" if name.startswith("CUDA") else "cl" if name.startswith("CL") else "cpu"


def resolve_precision(asked: str) -> tuple[str, str | None]:
    """(precision, the bfloat16 hardware or None): auto is bf16 where the default device has
    bfloat16 units, else fp32."""
    units = tg.amp.bf16_units()
    if asked == "auto":
        return ("bf16" if units else "fp32"), units
    return asked, units


def train(args: argparse.Namespace) -> dict:
    """Set up, resume where a checkpoint says, run the loop, report: the whole of a training run."""
    run = setup(args)
    resume(run)
    announce(run)
    try:
        last_loss = loop(run)
        return report(run, last_loss)
    finally:
        if run.writer is not None:
            run.writer.close()


def setup(args: argparse.Namespace) -> Run:
    """Data (a 90/10 split into windows, sharded by DistributedSampler), the model, the optimizer
    (ZeRO-2, or AdamW under DDP) and the learning-rate schedule."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = Path(args.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    Tensor.manual_seed(args.seed)
    tokens = load_tokens(args.data)
    split = int(len(tokens) * 0.9)
    train_set, val_set = TokenWindows(tokens[:split], args.block), TokenWindows(tokens[split:], args.block)
    if len(train_set) < args.batch * world:
        raise ValueError(
            f"[train] the training split has {len(train_set)} windows of {args.block + 1} tokens; "
            f"one step needs {args.batch * world} ({world} ranks x --batch {args.batch}). "
            f"Fix: a smaller --batch or --block, or more --data"
        )
    loader = dist.DataLoader(
        train_set, args.batch, sampler=dist.DistributedSampler(train_set, seed=args.seed, drop_last=True),
        drop_last=True
    )
    val_loader = dist.DataLoader(val_set, args.batch, drop_last=True,
                                 sampler=dist.DistributedSampler(val_set, shuffle=False, pad=False))
    model = GPT(VOCAB, args.block, args.n_layer, args.n_head, args.n_embd, args.checkpoint_activations)
    params = get_parameters(model)
    n_params = sum(p.numel() for p in params)
    net: Any
    if args.strategy == "zero2":
        opt: nn.optim.Optimizer = dist.ZeroOptimizer(params, nn.optim.AdamW, lr=args.lr, weight_decay=0.01,
                                                     bucket_mb=args.bucket_mb)
        net = model                       # ZeroOptimizer broadcasts and reduces the gradients itself
    elif args.strategy == "fsdp":
        for blk in model.blocks:          # each block a unit, the embeddings and head the root's
            fully_shard(blk)
        fully_shard(model)
        opt = nn.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)   # this rank's shards
        net = model
    else:
        opt = nn.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
        net = dist.DistributedDataParallel(model, bucket_mb=args.bucket_mb)
    # a run shorter than the warmup (--steps 1 to look at the kernels) warms up over all of it
    sched = nn.optim.CosineWithWarmup(opt, min(args.warmup, args.steps), args.steps, min_lr=args.lr * 0.1)
    run = Run(args, rank, world, out, tokens, loader, val_loader, model, opt, net, sched)
    run.n_params = n_params
    return run


def resume(run: Run) -> None:
    """Continue from the latest checkpoint when asked (--resume, or a job tglaunch restarted): model,
    optimizer, RNG, history, the schedule and the loader's place in its epoch. A new run moves an
    earlier run's checkpoints aside instead."""
    args, ckpt_dir = run.args, run.ckpt_dir
    wanted = args.resume or config.TG_RESTART_COUNT > 0
    if not wanted and run.rank == 0 and ckpt_dir.is_dir() and any(ckpt_dir.iterdir()):
        # a new run never continues, or prunes, an earlier run's checkpoints: they are kept aside
        aside = run.out / "ckpt.previous"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(ckpt_dir, aside)
        print(
            f"note: moved the earlier run's checkpoints to {aside} (--resume continues a run instead)",
            flush=True,
        )
    meta = dist.load_checkpoint(ckpt_dir, run.model, run.opt) if wanted else None
    if args.resume and meta is None:
        raise FileNotFoundError(
            f"[train] --resume: no checkpoint under {ckpt_dir}; run once without --resume"
        )
    if meta is None:
        return
    run.start_step, extra = meta["step"], meta["extra"]
    if run.scaler is not None and "scaler" in extra:
        run.scaler.load_state_dict(extra["scaler"])
    run.history, run.epoch = extra["history"], extra["loader"]["epoch"]
    # the loader's state holds how much of the epoch's shuffled order all ranks took together: at any
    # number of ranks the rest of the epoch is dealt out among them, every window once
    state = extra["loader"]
    if "samples" not in state and "sequences_in_epoch" in extra:     # a checkpoint from before "samples"
        state = {**state, "samples": extra["sequences_in_epoch"]}
    run.loader.load_state_dict(state)
    for _ in range(run.start_step):
        run.sched.step()
    if run.rank == 0:
        print(
            f"resumed from {ckpt_dir} at step {run.start_step} (saved by {meta['world_size']} ranks)",
            flush=True,
        )


def announce(run: Run) -> None:
    if run.rank != 0:
        return
    args = run.args
    n_params = run.n_params
    source = "stdlib" if args.data is None else args.data
    mode = {"ddp": "DDP", "zero2": "ZeRO-2", "fsdp": "FSDP"}[args.strategy] + \
        (" + checkpointing" if args.checkpoint_activations else "")
    precision = {"fp32": "fp32", "bf16": f"bf16 autocast ({run.units or 'converted: no bf16 units'})",
                 "fp16": "fp16 autocast + GradScaler"}[run.precision]
    print(
        f"tg GPT: {n_params / 1e6:.2f}M params, {len(run.tokens):,} tokens ({source}), "
        f"{run.world} rank(s) on "
        f"{dist.get_backend()}, batch {run.world}x{args.batch}x{args.block}, {mode}, {precision}, "
        f"device {Tensor([0]).device}",
        flush=True,
    )


def step_functions(run: Run) -> tuple[Callable[[Tensor, Tensor], Tensor], Callable[[Tensor, Tensor], Tensor]]:
    """One training step (zero_grad, forward, backward, optimizer step) and one eval step, each
    captured by TinyJit unless --no-jit."""
    scaler = run.scaler

    # the model is a plain object (tinygrad's style): the global Tensor.training is its mode, set for
    # each step and unset after it (None: modules built later start in training mode, as torch's)
    def forward_backward(x: Tensor, y: Tensor) -> Tensor:
        Tensor.training = True
        run.opt.zero_grad()
        with run.autocast():
            loss = run.net.loss(x, y)
        (scaler.scale(loss) if scaler else loss).backward()
        return loss

    def train_step(x: Tensor, y: Tensor) -> Tensor:
        """(loss, the gradients' total norm before clipping), one tensor: one read a step."""
        loss = forward_backward(x, y)
        if scaler is not None:
            scaler.unscale_(run.opt)          # the norm and the clipping see the true gradients
        norm = nn.utils.clip_grad_norm_(run.model.parameters(), run.args.grad_clip or float("inf"))
        if scaler is not None:        # float16: skipped where the gradients overflowed
            scaler.step(run.opt)
            scaler.update()
        else:
            run.opt.step()
        Tensor.training = None
        return Tensor.stack([loss.detach().float(), norm.float()]).realize()

    def eval_step(x: Tensor, y: Tensor) -> Tensor:
        Tensor.training = False
        try:
            with run.autocast():
                return run.model.loss(x, y).realize()
        finally:
            Tensor.training = None
    if scaler is not None and not scaler.decides_on_device(run.opt):
        # a ZeroOptimizer's verdict is agreed on the host (one read per step), which a TinyJit replay
        # cannot redo: these steps run eagerly
        return train_step, (eval_step if run.args.no_jit else TinyJit(eval_step))
    if run.args.no_jit:
        return train_step, eval_step
    return TinyJit(train_step), TinyJit(eval_step)


def evaluate(run: Run, eval_fn: Callable[[Tensor, Tensor], Tensor]) -> float:
    """Mean validation loss over --eval-batches batches of every rank."""
    total = np.zeros(2)                    # (sum of batch losses, batches) over every rank
    with tg.no_grad():
        for i, (x, y) in enumerate(run.val_loader):
            if i == run.args.eval_batches:
                break
            total += (eval_fn(Tensor(x), Tensor(y)).item(), 1)
    dist.all_reduce(total)
    return float(total[0] / max(total[1], 1))


def save(run: Run, step: int) -> None:
    state = run.loader.state_dict()
    extra = {"loader": state, "history": run.history, "config": vars(run.args)}
    if run.scaler is not None:
        extra["scaler"] = run.scaler.state_dict()
    if run.writer is not None:
        run.writer.flush()      # every step the checkpoint holds is in the log (a resume purges only later)
    dist.save_checkpoint(run.ckpt_dir, step, run.model, run.opt, extra=extra)


class Meter:
    """One step's numbers: time by phase (profiler.phase_seconds), FLOPs tg counted, bytes moved."""

    def __init__(self) -> None:
        self.t, self.phases = time.perf_counter(), profiler.phase_seconds()
        self.flops, self.moved = GlobalCounters.global_ops, dist.bytes_moved()

    def since(self, before: Meter) -> dict[str, float]:
        spent = {k: v - before.phases.get(k, 0.0) for k, v in self.phases.items()}
        return {"step_s": self.t - before.t, "data_s": spent.get("data", 0.0),
                "forward_backward_s": spent.get("forward+backward", 0.0),
                "communication_s": spent.get("communication", 0.0),
                "optimizer_s": spent.get("optimizer", 0.0), "counted_flops": float(self.flops - before.flops),
                "bytes_moved": float(self.moved - before.moved)}


def loop(run: Run) -> float:
    """The steps from start_step to --steps: train, log, evaluate, checkpoint. Returns the last loss."""
    args, rank, world = run.args, run.rank, run.world
    step_fn, eval_fn = step_functions(run)
    batches = iter_epochs(run.loader, run.epoch)
    log = StepLog(run)
    loss_v = float("nan")
    scale = run.scaler.get_scale() if run.scaler is not None else 0.0
    before = Meter()
    for step in range(run.start_step + 1, args.steps + 1):
        profiler.phase("data")
        x, y = next(batches)
        xt, yt = Tensor(x), Tensor(y)
        if args.crash_at_step == step and config.TG_RESTART_COUNT == 0 and rank == world - 1:
            print(f"fault drill: rank {rank} kills itself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        GlobalCounters.mem_peak = GlobalCounters.mem_used       # this step's peak from here
        profiler.phase("forward+backward")
        loss_local, norm = (float(v) for v in step_fn(xt, yt).numpy())
        profiler.phase("other")
        if run.scaler is not None:        # backed off: this step's gradients overflowed, it was skipped
            scale, was = run.scaler.get_scale(), scale
            if scale < was:
                run.skipped.append(step)
        m = Meter().since(before)
        mine = np.array([loss_local, GlobalCounters.mem_peak / 2**20, m["communication_s"]], np.float64)
        every = np.zeros(3 * world, np.float64)
        dist.all_gather_into_tensor(every, mine)
        every = every.reshape(world, 3)
        loss_v = float(every[:, 0].mean())
        lr = run.sched.get_last_lr()[0]
        run.sched.step()
        run.history["train"].append((step, loss_v))
        log.step(step, m, every, lr, norm)
        last = step == args.steps
        if step % args.eval_every == 0 or last:
            val = evaluate(run, eval_fn)
            run.history["val"].append((step, val))
            log.eval(step, val)
        if args.ckpt_every and step % args.ckpt_every == 0 and not last:
            save(run, step)
        before = Meter()         # evaluation and checkpoints are not the next step's
    log.close()
    return loss_v


class StepLog:
    """Rank 0's account of the steps: on a terminal a progress bar redrawn in place, in a log a line every
    --log-every steps; every step's scalars to the metrics writer (TensorBoard and metrics.jsonl)."""

    def __init__(self, run: Run):
        self.run, args = run, run.args
        self.tokens = run.world * args.batch * args.block
        self.flops = model_flops_per_token(run.n_params, args) * args.batch * args.block   # a rank's
        self.peak, unit = machine_peak(run)
        profiler.synchronize_phases(True)     # the split is the devices' time on CUDA and OpenCL too
        self.tty = run.rank == 0 and sys.stdout.isatty()
        self.bar = progress(total=args.steps - run.start_step, desc="train", unit="step",
                            disable=not self.tty, file=sys.stdout)
        if run.rank == 0:
            run.writer = open_writer(run)
            run.writer.add_text("config", json.dumps(vars(args)), run.start_step)
            print(f"MFU against {self.peak / 1e3:.2f} TFLOPS a rank ({unit}); "
                  f"metrics in {run.writer.log_dir}", flush=True)

    def step(self, step: int, m: dict[str, float], every: np.ndarray, lr: float, norm: float) -> None:
        self.bar.update()
        w, run = self.run.writer, self.run
        if w is None:
            return
        loss, used = float(every[:, 0].mean()), mfu(self.flops, m["step_s"], self.peak)
        values = {"train/loss": loss, "train/lr": lr, "train/grad_norm": norm,
                  "perf/tokens_per_s": self.tokens / m["step_s"],
                  "perf/tflops": self.flops / m["step_s"] / 1e12,
                  "perf/mfu": used, "perf/hfu": mfu(m["counted_flops"], m["step_s"], self.peak),
                  "perf/model_flops": self.flops, "perf/counted_flops": m["counted_flops"],
                  "memory/peak_mib": float(every[:, 1].max()), "comm/bytes_per_step": m["bytes_moved"],
                  "time/communication_max_ms": float(every[:, 2].max()) * 1e3, "job/world_size": run.world,
                  "job/restart_count": config.TG_RESTART_COUNT}
        values.update({f"time/{k}_ms": m[f"{k}_s"] * 1e3
                       for k in ("step", "data", "forward_backward", "communication", "optimizer")})
        for tag, v in values.items():
            w.add_scalar(tag, v, step)
        said = (f"loss {loss:.4f}, {self.tokens / m['step_s']:,.0f} tok/s, MFU {100 * used:.1f}%, "
                f"mem/rank {every[:, 1].max():.0f} MiB")
        self.bar.set_postfix_str(said)
        if not self.tty and (step % run.args.log_every == 0 or step == run.args.steps):
            print(f"step {step}/{run.args.steps}  {said}", flush=True)

    def eval(self, step: int, val: float) -> None:
        if self.run.writer is None:
            return
        self.run.writer.add_scalar("eval/loss", val, step)
        line = f"  eval loss {val:.4f} at step {step}"
        self.bar.write(line) if self.tty else print(line, flush=True)

    def close(self) -> None:
        self.bar.close()


def open_writer(run: Run) -> SummaryWriter:
    """Rank 0's metrics: a resumed run continues its log (steps after the checkpoint purged: they run
    again); a new run moves an earlier run's log aside, as its checkpoints."""
    folder = Path(run.args.log_dir or run.out / "logs")
    if run.start_step == 0 and folder.is_dir() and any(folder.iterdir()):
        aside = folder.with_name(folder.name + ".previous")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(folder, aside)
    return SummaryWriter(str(folder), purge_step=run.start_step + 1 if run.start_step else None)


def report(run: Run, last_loss: float) -> dict:
    """The final checkpoint, the loss plot and history.json; returns the first and last loss."""
    save(run, run.args.steps)
    history = run.history
    first = history["train"][0][1] if history["train"] else float("nan")
    if run.rank == 0:
        line_plot(run.out / "loss.svg", {"train": history["train"], "eval": history["val"]},
                  title=f"tg GPT ({run.n_params / 1e6:.2f}M params, {run.world} rank(s))", xlabel="step",
                  ylabel="loss (cross-entropy, nats)", log_y=run.args.log_y)
        (run.out / "history.json").write_text(json.dumps(history))
        print(
            f"done: loss {first:.3f} -> {last_loss:.3f}; checkpoint {run.ckpt_dir}, "
            f"plot {run.out / 'loss.svg'}",
            flush=True,
        )
    text = sample(run, run.args.sample_tokens, run.args.temperature) if run.args.sample_tokens > 0 else b""
    if run.rank == 0:
        shown = text.decode("utf-8", errors="replace")
        if text:
            print(f"sample ({len(text)} bytes, temperature {run.args.temperature:g}, seed {run.args.seed}):\n"
                  + "\n".join("  | " + ln for ln in shown.splitlines()), flush=True)
        if run.writer is not None:
            run.writer.add_text("sample", shown, run.args.steps)
        if run.scaler is not None:
            late = sum(s > 50 for s in run.skipped)
            print(f"fp16: {len(run.skipped)} steps skipped on overflow ({late} after step 50), "
                  f"loss scale {run.scaler.get_scale():g}", flush=True)
    return {"first_loss": first, "last_loss": last_loss, "history": history, "skipped": run.skipped}


def iter_epochs(loader: dist.DataLoader, epoch: int):
    """Batches forever, epoch after epoch (each epoch shuffled differently, the same on every rank)."""
    while True:
        loader.set_epoch(epoch)
        for x, y in loader:
            yield x, y
        epoch += 1


if __name__ == "__main__":
    main()
