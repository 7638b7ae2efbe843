"""Training benchmark: steps/s of six models, tg eager and TinyJit against PyTorch eager and
torch.compile on the CPU, in the same run, at 1 and 2 threads.

    python scripts/bench_train.py                            # all rows
    python scripts/bench_train.py --models mlp --threads 1   # one model, one thread count
    python scripts/bench_train.py --quick                    # few steps (a smoke run, not a measurement)
    python scripts/bench_train.py --precision fp32,bf16      # a row each: bf16 autocast on both sides
    python scripts/bench_train.py --profiler-cost            # tg.profiler's cost on a GPT step (below)

Models: (a) mlp: MLP 784-512-512-10, batch 256, cross-entropy, Adam; (b) cnn: conv 1->32 3x3,
conv 32->64 3x3, max-pool 2, linear -> 10 on 28x28, batch 128, Adam; (c) gpt: the GPT of
scripts/train.py (2 layers, 4 heads, 128 wide, batch 16 x 64 tokens), Adam, against a torch copy of
it; (d) nanogpt: tests/ported/gpt_model.py (2 layers, 2 heads, 64 wide, batch 8 x 64 tokens, AdamW
from configure_optimizers), run on torch by the same source with its imports switched to torch;
(e) lstm: pytorch/examples' word_language_model (embedding 128, a 2-layer LSTM of 128, vocabulary 1000,
35 steps x batch 20, SGD); (f) dcgan: pytorch/examples' dcgan at 32x32 (nz 64, ngf = ndf = 32, batch 64,
a discriminator update and a generator update per step, Adam); e and f from one source (shared_setup).

A step is what a user's loop does: zero_grad, forward, loss, backward, optimizer step, then
loss.item(). Each row runs four worker processes: tg eager, tg TinyJit (the same step in TinyJit),
torch eager and torch.compile(model). A tg worker gets TG_CPU_THREADS=<threads> and an empty
TG_CACHE_DIR, so its first step is cold (trace + compile every kernel); a second, short tg worker on
the filled cache gives the warm first step. A torch worker calls torch.set_num_threads(<threads>).
torch.compile gets --compile-budget seconds (default 120) for import, compile and warmup, else "-".
After warmup the workers take turns running one timed window each (tg eager, torch eager, tg JIT,
torch.compile, then again), so the machine's noise hits all of them alike; a column is the median
of the windows. Targets: tg eager within 1.2x of torch eager's step time for mlp and cnn
(>= 0.83x its steps/s) and dcgan, within 1.5x for the GPTs and the LSTM (>= 0.67x); the JIT columns must
not regress.

--profiler-cost measures what tg.profiler costs a step of model (c), in one process at --threads' first
count: windows of steps with no profile, then under `profile()` (every kernel waited for and recorded,
every module call, allocation and phase), alternating, eager and under TinyJit; the medians' ratio
against the target (< 5% of a step), and what the off state costs: the recording sites' counter
(`tg.core.trace.recorded`) over the unprofiled windows, which must stay 0.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

MODELS = ("mlp", "cnn", "gpt", "nanogpt", "lstm", "dcgan")
GPT_CFG = dict(batch=16, block=64, n_layer=2, n_head=4, n_embd=128)
NANOGPT_CFG = dict(block_size=64, vocab_size=256, n_layer=2, n_head=2, n_embd=64, dropout=0.0, bias=True)
NANOGPT_BATCH = 8
NANOGPT_SOURCE = os.path.join(ROOT, "tests", "ported", "gpt_model.py")
# the import lines of gpt_model.py and their torch originals
NANOGPT_TORCH_IMPORTS = {
    "import tg as torch": "import torch",
    "import tg.nn as nn": "import torch.nn as nn",
    "from tg.nn import functional as F": "from torch.nn import functional as F",
}
# steps per timed window (about a second of work each on one core)
WINDOW_STEPS = {"mlp": 50, "cnn": 8, "gpt": 15, "nanogpt": 30, "lstm": 5, "dcgan": 3}
EAGER_TARGET = {"mlp": 0.83, "cnn": 0.83, "gpt": 0.67, "nanogpt": 0.67, "lstm": 0.67, "dcgan": 0.83}
# pytorch/examples' word_language_model (LSTM, smaller vocabulary) and dcgan (32x32 images)
LSTM_CFG = dict(vocab=1000, emsize=128, nhid=128, nlayers=2, bptt=35, batch=20)
DCGAN_CFG = dict(nz=64, ngf=32, ndf=32, batch=64)
WARMUP_STEPS = 3
WORKER_KINDS = ("tg-eager", "tg-jit", "torch-eager", "torch-compile")


def load_module(path: str, name: str, replace: dict[str, str]) -> types.ModuleType:
    """Exec the source at path into a fresh module, with each line in replace swapped first."""
    with open(path) as f:
        lines = [replace.get(line.split("#")[0].strip(), line) for line in f.read().splitlines()]
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile("\n".join(lines) + "\n", path, "exec"), module.__dict__)
    return module


def nanogpt_batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (NANOGPT_BATCH, NANOGPT_CFG["block_size"])
    return rng.integers(0, 256, shape), rng.integers(0, 256, shape)


# ---------------------------------------------------------------------------- the models

def shared_setup(name: str, lib: Any, tensor: Callable[[np.ndarray], Any],
                 wrap: Callable[[Any], Any] = lambda m: m) -> Setup:
    """The lstm and dcgan steps, one source for both libraries (lib: tg or torch; tensor: a numpy array
    as lib's tensor; wrap: each model as called, torch.compile for that column). dcgan's step is the
    example's: the discriminator's update on real and (detached) fake images inside loss_fn, then the
    generator's loss for the caller's backward and step."""
    nn, F = lib.nn, lib.nn.functional
    rng = np.random.default_rng(0)
    if name == "lstm":
        c = LSTM_CFG

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = nn.Embedding(c["vocab"], c["emsize"])
                self.rnn = nn.LSTM(c["emsize"], c["nhid"], c["nlayers"])
                self.decoder = nn.Linear(c["nhid"], c["vocab"])

            def forward(self, x):
                out, _ = self.rnn(self.encoder(x))
                return self.decoder(out).reshape(-1, c["vocab"])
        model = LM()
        forward = wrap(model)
        x = tensor(rng.integers(0, c["vocab"], (c["bptt"], c["batch"])))
        y = tensor(rng.integers(0, c["vocab"], c["bptt"] * c["batch"]))
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        return Setup(lambda x, y: F.cross_entropy(forward(x), y), opt, x, y)
    c = DCGAN_CFG
    nz, ngf, ndf = c["nz"], c["ngf"], c["ndf"]
    def up(i: int, o: int, s: int, p: int) -> list:
        return [nn.ConvTranspose2d(i, o, 4, s, p, bias=False), nn.BatchNorm2d(o), nn.ReLU()]

    def down(i: int, o: int) -> list:
        return [nn.Conv2d(i, o, 4, 2, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2)]
    gen = nn.Sequential(*up(nz, ngf * 4, 1, 0), *up(ngf * 4, ngf * 2, 2, 1), *up(ngf * 2, ngf, 2, 1),
                        nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())
    disc = nn.Sequential(nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2), *down(ndf, ndf * 2),
                         *down(ndf * 2, ndf * 4), nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())
    g_call, d_call = wrap(gen), wrap(disc)
    opt_g = lib.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = lib.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = tensor(rng.uniform(-1, 1, (c["batch"], 3, 32, 32)).astype(np.float32))
    noise = tensor(rng.standard_normal((c["batch"], nz, 1, 1)).astype(np.float32))
    ones = tensor(np.ones(c["batch"], np.float32))
    zeros = tensor(np.zeros(c["batch"], np.float32))

    def loss_fn(real, noise):
        opt_d.zero_grad()
        fake = g_call(noise)
        err_d = F.binary_cross_entropy(d_call(real).reshape(-1), ones) + \
            F.binary_cross_entropy(d_call(fake.detach()).reshape(-1), zeros)
        err_d.backward()
        opt_d.step()
        return F.binary_cross_entropy(d_call(fake).reshape(-1), ones)
    return Setup(loss_fn, opt_g, real, noise)


@dataclass
class Setup:
    """A model ready to train: loss_fn(x, y) -> scalar loss; opt has zero_grad() and step()."""

    loss_fn: Callable
    opt: object
    x: object
    y: object


def tg_setup(name: str) -> Setup:
    from tg import Tensor, nn
    from tg.nn import functional as F
    from tg.nn.state import get_parameters
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    if name in ("lstm", "dcgan"):
        import tg
        return shared_setup(name, tg, lambda a: Tensor(a.astype(np.int32) if a.dtype.kind == "i" else a))
    if name == "nanogpt":
        gpt_model = load_module(NANOGPT_SOURCE, "bench_nanogpt_tg", {})
        model = gpt_model.GPT(gpt_model.GPTConfig(**NANOGPT_CFG))
        x, y = (Tensor(a.astype(np.int32)) for a in nanogpt_batch())
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        return Setup(lambda x, y: model(x, y)[1], opt, x, y)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 512), Tensor.relu, nn.Linear(512, 512), Tensor.relu, nn.Linear(512, 10)
        )
        x = Tensor(rng.random((256, 784), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 256))
    elif name == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3), Tensor.relu, nn.Conv2d(32, 64, 3), Tensor.relu,
                              lambda t: t.max_pool2d(2), lambda t: t.flatten(1), nn.Linear(64 * 12 * 12, 10))
        x = Tensor(rng.random((128, 1, 28, 28), dtype=np.float32))
        y = Tensor(rng.integers(0, 10, 128))
    else:
        from train import GPT
        c = GPT_CFG
        gpt = GPT(256, c["block"], c["n_layer"], c["n_head"], c["n_embd"])
        x = Tensor(rng.integers(0, 256, (c["batch"], c["block"])).astype(np.int32))
        y = Tensor(rng.integers(0, 256, (c["batch"], c["block"])).astype(np.int32))
        return Setup(gpt.loss, nn.optim.Adam(get_parameters(gpt), lr=1e-3), x, y)
    opt = nn.optim.Adam(get_parameters(model), lr=1e-3)
    return Setup(lambda x, y: F.cross_entropy(model(x), y), opt, x, y)


def torch_gpt(torch):
    """The GPT of scripts/train.py, written in torch."""
    nn, c = torch.nn, GPT_CFG

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
    return GPT()


def torch_setup(name: str, compiled: bool) -> Setup:
    import torch
    torch.manual_seed(0)
    nn = torch.nn
    if name in ("lstm", "dcgan"):
        return shared_setup(name, torch, torch.from_numpy, torch.compile if compiled else (lambda m: m))
    if name == "nanogpt":
        gpt_model = load_module(NANOGPT_SOURCE, "bench_nanogpt_torch", NANOGPT_TORCH_IMPORTS)
        model = gpt_model.GPT(gpt_model.GPTConfig(**NANOGPT_CFG))
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        forward = torch.compile(model) if compiled else model
        x, y = (torch.from_numpy(a) for a in nanogpt_batch())
        return Setup(lambda x, y: forward(x, y)[1], opt, x, y)
    if name == "mlp":
        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        x, y = torch.rand(256, 784), torch.randint(0, 10, (256,))
    elif name == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 12 * 12, 10))
        x, y = torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,))
    else:
        c = GPT_CFG
        model = torch_gpt(torch)
        x = torch.randint(0, 256, (c["batch"], c["block"]))
        y = torch.randint(0, 256, (c["batch"] * c["block"],))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if compiled else model
    return Setup(lambda x, y: torch.nn.functional.cross_entropy(forward(x), y), opt, x, y)


def make_step(kind: str, name: str, threads: int, precision: str = "fp32") -> Callable[[], float]:
    """One training step of the worker kind, returning loss.item(); with precision bf16 the forward runs
    under bfloat16 autocast (torch.autocast("cpu") / tg.autocast("cpu"): the same op lists)."""
    import contextlib
    region: Callable[[], Any] = contextlib.nullcontext
    if kind.startswith("torch"):
        import torch
        torch.set_num_threads(threads)
        s = torch_setup(name, compiled=kind == "torch-compile")
        if precision == "bf16":
            region = lambda: torch.autocast("cpu", dtype=torch.bfloat16)     # noqa: E731
    else:
        import tg
        s = tg_setup(name)
        if precision == "bf16":
            region = lambda: tg.autocast("cpu", dtype=tg.bfloat16)           # noqa: E731

    def step(x, y):
        s.opt.zero_grad()
        with region():
            loss = s.loss_fn(x, y)
        loss.backward()
        s.opt.step()
        return loss
    if kind == "tg-jit":
        from tg import TinyJit
        jitted = TinyJit(lambda x, y: step(x, y).realize())
        return lambda: jitted(s.x, s.y).item()
    return lambda: step(s.x, s.y).item()


# ---------------------------------------------------------------------------- the worker process

def worker(kind: str, name: str, threads: int, warmup: int, precision: str = "fp32") -> None:
    """Set up, report the first step, warm up, then run timed windows on request until 'quit'.

    Protocol, one JSON line each way: the worker sends {"first_step_s", "first_loss", "setup_s"}
    (or {"error"}) when ready; the parent sends {"steps": n} and gets {"seconds", "loss"} back.
    Anything the model prints goes to stderr, so stdout carries the protocol alone."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()
    t0 = time.perf_counter()
    try:
        step = make_step(kind, name, threads, precision)
        t1 = time.perf_counter()
        first_loss = step()
        t2 = time.perf_counter()
        for _ in range(warmup):
            loss = step()
    except Exception as e:
        send({"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
        raise
    send({"setup_s": t1 - t0, "first_step_s": t2 - t1, "first_loss": first_loss})
    for line in sys.stdin:
        request = json.loads(line)
        if "steps" not in request:
            break
        t = time.perf_counter()
        for _ in range(request["steps"]):
            loss = step()
        seconds = time.perf_counter() - t
        mem = None
        if kind.startswith("tg"):
            from tg import GlobalCounters
            mem = GlobalCounters.mem_peak / 2 ** 20      # the peak of tensor memory so far, MiB
        send({"seconds": seconds, "loss": loss, "mem_mib": mem})


class Worker:
    """A worker process the parent talks to line by line, with a timeout on every answer."""

    def __init__(self, kind: str, name: str, threads: int, warmup: int, cache: str, precision: str = "fp32"):
        env = {**os.environ, "TG_CPU_THREADS": str(threads), "TG_CACHE_DIR": cache}
        self.kind = kind
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", kind, "--models", name, "--threads", str(threads),
             "--warmup", str(warmup), "--precision", precision],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )

    def receive(self, timeout: float) -> dict:
        """The next answer; raises TimeoutError or RuntimeError (the worker died or sent an error)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            raise TimeoutError(f"no answer in {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"exited with status {self.proc.returncode}")
        answer = json.loads(line)
        if "error" in answer:
            self.proc.wait()
            raise RuntimeError(answer["error"])
        return answer

    def window(self, steps: int, timeout: float) -> dict:
        self.proc.stdin.write(json.dumps({"steps": steps}) + "\n")
        self.proc.stdin.flush()
        return self.receive(timeout)

    def stderr_tail(self, lines: int = 15) -> str:
        self.stderr.seek(0)
        return "\n".join(self.stderr.read().splitlines()[-lines:])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """Ask the worker to quit; kill it when it does not within 10 s."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("{}\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()


# ---------------------------------------------------------------------------- the parent

@dataclass
class Result:
    """What one worker kind measured in one row: window step rates, first step, or why not."""

    rates: list[float] = field(default_factory=list)
    first_step_s: float | None = None
    warm_first_step_s: float | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    mem_mib: float | None = None
    failure: str | None = None
    trace: str = ""

    @property
    def steps_per_s(self) -> float | None:
        return statistics.median(self.rates) if self.rates and not self.failure else None


def torch_installed() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return probe.returncode == 0


def start(kind: str, name: str, threads: int, warmup: int, cache: str, budget: float,
          results: dict[str, Result], precision: str = "fp32") -> Worker | None:
    """Start a worker and wait until it is warm, recording its first step (or its failure)."""
    result = results[kind]
    w = Worker(kind, name, threads, warmup, cache, precision)
    try:
        ready = w.receive(budget)
    except TimeoutError:
        result.failure = f"compile > {budget:.0f} s" if kind == "torch-compile" else f"setup > {budget:.0f} s"
        return None
    except RuntimeError as e:
        result.failure, result.trace = str(e), w.stderr_tail()
        return None
    result.first_step_s, result.first_loss = ready["first_step_s"], ready["first_loss"]
    return w


def warm_first_step(kind: str, name: str, threads: int, cache: str, budget: float,
                    precision: str = "fp32") -> float | None:
    """The first step of a fresh tg worker on the kernel cache an earlier worker filled."""
    scratch = {kind: Result()}
    w = start(kind, name, threads, 0, cache, budget, scratch, precision)
    if w is not None:
        w.close()
    return scratch[kind].first_step_s


# Complexity: one row is a small protocol: start four workers (each may fail in its own way), take
# turns over the timed windows, then the warm-cache first steps.
def measure_row(name: str, threads: int, args: argparse.Namespace, torch_ok: bool,  # noqa: C901
                precision: str = "fp32") -> dict[str, Result]:
    results = {kind: Result() for kind in WORKER_KINDS}
    kinds = list(WORKER_KINDS) if torch_ok else ["tg-eager", "tg-jit"]
    for kind in WORKER_KINDS:
        if kind not in kinds:
            results[kind].failure = "torch not installed"
    with tempfile.TemporaryDirectory() as eager_cache, tempfile.TemporaryDirectory() as jit_cache:
        caches = {"tg-eager": eager_cache, "tg-jit": jit_cache}
        workers: dict[str, Worker] = {}
        for kind in kinds:
            budget = args.compile_budget if kind == "torch-compile" else args.timeout
            w = start(kind, name, threads, args.warmup, caches.get(kind, eager_cache), budget, results,
                      precision)
            if w is not None:
                workers[kind] = w
        # interleaved windows: tg eager, torch eager, tg JIT, torch.compile, and around again
        order = [k for k in ("tg-eager", "torch-eager", "tg-jit", "torch-compile") if k in workers]
        for _ in range(args.windows):
            for kind in order:
                if kind not in workers:
                    continue
                time.sleep(0.2)  # let the last worker's idle threads go to sleep
                try:
                    answer = workers[kind].window(args.window_steps[name], args.timeout)
                except (TimeoutError, RuntimeError) as e:
                    results[kind].failure, results[kind].trace = f"window: {e}", workers[kind].stderr_tail()
                    workers.pop(kind).close()
                    continue
                results[kind].rates.append(args.window_steps[name] / answer["seconds"])
                results[kind].last_loss = answer["loss"]
                results[kind].mem_mib = answer.get("mem_mib")
        for w in workers.values():
            w.close()
        for kind in ("tg-eager", "tg-jit"):
            if results[kind].first_step_s is not None:
                warm = warm_first_step(kind, name, threads, caches[kind], args.timeout, precision)
                results[kind].warm_first_step_s = warm
    return results


def fmt_rate(r: Result) -> str:
    return f"{r.steps_per_s:,.2f}" if r.steps_per_s is not None else f"- ({r.failure})"


def fmt_ratio(ours: Result, theirs: Result) -> str:
    if ours.steps_per_s is None or theirs.steps_per_s is None:
        return "-"
    return f"{ours.steps_per_s / theirs.steps_per_s:.2f}x"


def fmt_first(r: Result) -> str:
    def s(v: float | None) -> str:
        return f"{v:.2f}" if v is not None else "-"
    return f"{s(r.first_step_s)} / {s(r.warm_first_step_s)} s"


def table_row(name: str, threads: int, res: dict[str, Result], precision: str = "fp32") -> tuple[str, ...]:
    eager, jit, torch_eager = res["tg-eager"], res["tg-jit"], res["torch-eager"]
    target = f">= {EAGER_TARGET[name]:.2f}x"
    if eager.steps_per_s is not None and torch_eager.steps_per_s is not None:
        met = eager.steps_per_s / torch_eager.steps_per_s >= EAGER_TARGET[name]
        target += " ok" if met else " MISS"
    loss = f"{eager.first_loss:.3f} -> {eager.last_loss:.3f}" if eager.last_loss is not None else "-"
    mem = f"{eager.mem_mib:.0f}" if eager.mem_mib is not None else "-"
    return (name, precision, str(threads), fmt_rate(eager), fmt_rate(jit), fmt_rate(torch_eager),
            fmt_rate(res["torch-compile"]), fmt_ratio(eager, torch_eager), fmt_ratio(jit, torch_eager),
            target, fmt_first(eager), fmt_first(jit), loss, mem)


HEADER = ("model", "prec", "thr", "tg eager", "tg JIT", "torch eager", "torch.compile", "eager/torch",
          "JIT/torch", "eager target", "1st step eager cold/warm", "1st step JIT cold/warm", "tg eager loss",
          "tg peak MiB")


def print_table(rows: list[tuple[str, ...]], args: argparse.Namespace) -> None:
    widths = [max(len(r[i]) for r in rows + [HEADER]) for i in range(len(HEADER))]
    print(f"tg bench_train  cores={os.cpu_count()}  steps/s, median of {args.windows} windows"
          f"{'  (--quick: a smoke run, not a measurement)' if args.quick else ''}")
    print("targets: tg eager >= 0.83x torch eager steps/s (mlp, cnn, dcgan), >= 0.67x (gpt, nanogpt, lstm); "
          "tg JIT must not regress; first step < 3 s cold, < 1 s warm")
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def print_precision_ratios(rates: dict[tuple[str, int, str], dict[str, Result]]) -> None:
    """bf16 rows against the same model's fp32 row: tg's speed-up and its peak tensor memory."""
    lines = []
    for (name, threads, precision), res in rates.items():
        base = rates.get((name, threads, "fp32"))
        if precision != "bf16" or base is None:
            continue
        parts = []
        for kind in ("tg-eager", "tg-jit"):
            ours, f32 = res[kind], base[kind]
            if ours.steps_per_s is not None and f32.steps_per_s is not None:
                parts.append(f"{kind} {ours.steps_per_s / f32.steps_per_s:.2f}x fp32")
        if res["tg-eager"].mem_mib and base["tg-eager"].mem_mib:
            parts.append(f"peak tensor memory {res['tg-eager'].mem_mib / base['tg-eager'].mem_mib:.2f}x fp32")
        lines.append(f"  {name} thr {threads} bf16: " + ", ".join(parts) +
                     "  (targets: >= 1.5x fp32, memory <= 0.7x)")
    if lines:
        print("bf16 autocast against fp32 (same run):")
        print("\n".join(lines))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 short windows, 1 warmup step: a smoke run")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {','.join(MODELS)}")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts, one row each")
    ap.add_argument("--windows", type=int, default=5, help="timed windows per worker (the median counts)")
    ap.add_argument("--warmup", type=int, default=WARMUP_STEPS, help="untimed steps after the first")
    ap.add_argument("--compile-budget", type=float, default=120.0,
                    help="seconds torch.compile may take for import, compile and warmup")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds any other worker answer may take")
    ap.add_argument("--precision", default="fp32",
                    help="comma-separated of fp32, bf16 (bfloat16 autocast on both sides), one row each")
    ap.add_argument("--profiler-cost", action="store_true", help="the profiler's cost on a GPT step")
    ap.add_argument("--worker", choices=WORKER_KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.window_steps = dict(WINDOW_STEPS)
    if args.quick:
        args.windows, args.warmup, args.window_steps = 2, 1, {name: 2 for name in MODELS}
    if not all(t.isdigit() and int(t) > 0 for t in args.threads.split(",")):
        ap.error(f"--threads takes positive integers like 1,2; got {args.threads!r}")
    if not set(args.precision.split(",")) <= {"fp32", "bf16"}:
        ap.error(f"--precision takes fp32, bf16 or both (comma-separated); got {args.precision!r}")
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        ap.error(f"unknown model(s) {','.join(sorted(unknown))}; expected some of {','.join(MODELS)}")
    return args


def profiler_cost(threads: int, windows: int, steps: int) -> None:
    """The table of --profiler-cost (see the module docstring)."""
    os.environ["TG_CPU_THREADS"] = str(threads)
    from bench_core import cpu_model, print_table

    from tg import profiler
    from tg.core import trace
    rows = []
    for kind in ("tg", "tg-jit"):
        step = make_step(kind, "gpt", threads)
        for _ in range(WARMUP_STEPS + 2):
            step()
        times: dict[str, list[float]] = {"off": [], "on": []}
        events, off_recorded = 0, 0
        for _ in range(windows):
            for mode in ("off", "on"):
                before = trace.recorded
                prof = profiler.profile() if mode == "on" else None
                if prof is not None:
                    prof.start()
                t0 = time.perf_counter()
                for _ in range(steps):
                    step()
                times[mode].append((time.perf_counter() - t0) / steps)
                if prof is not None:
                    prof.stop()
                    events = (trace.recorded - before) // steps
                else:
                    off_recorded += trace.recorded - before
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        rows.append((kind, f"{off * 1e3:.2f}", f"{on * 1e3:.2f}", f"{100 * (on / off - 1):+.1f}%",
                     "yes" if on / off - 1 < 0.05 else "NO", str(events), str(off_recorded)))
    print(f"tg.profiler's cost on the GPT step of model (c), {threads} thread(s), {cpu_model()}; "
          f"{windows} windows of {steps} steps each way, medians")
    print_table(("mode", "off ms/step", "on ms/step", "on cost", "< 5%", "events/step", "recorded while off"),
                rows)


def main() -> None:
    args = parse_args()
    if args.profiler_cost:
        profiler_cost(int(args.threads.split(",")[0]), args.windows, args.window_steps["gpt"])
        return
    if args.worker:
        worker(args.worker, args.models, int(args.threads), args.warmup, args.precision)
        return
    torch_ok = torch_installed()
    rows, traces = [], []
    rates: dict[tuple[str, int, str], dict[str, Result]] = {}
    for name in args.models.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            for precision in args.precision.split(","):
                results = measure_row(name, threads, args, torch_ok, precision)
                rates[(name, threads, precision)] = results
                rows.append(table_row(name, threads, results, precision))
                traces += [f"--- {name} threads={threads} {precision} {kind}: {r.failure}\n{r.trace}"
                           for kind, r in results.items() if r.trace]
    print_table(rows, args)
    print_precision_ratios(rates)
    if traces:
        print("\nfailures (the last lines of each worker's stderr):")
        print("\n".join(traces))


if __name__ == "__main__":
    main()
