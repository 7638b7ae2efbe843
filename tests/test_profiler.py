"""tg.profiler: nothing recorded (nor any recording function called) while off; kernel events named and
counted as DEBUG=2 prints them; torch's schedule semantics against an independent model of them; self
times; the Chrome trace and the merge of several ranks' traces; step phases; TinyJit replays counted."""
from __future__ import annotations

import contextlib
import io
import json
import random

import numpy as np
import pytest

import tg
from tg import GlobalCounters, Tensor, TinyJit, nn, profiler
from tg.core import trace


def small_training(seed: int, steps: int, jit: bool):
    """A random MLP trained a few steps (eager or under TinyJit); returns the losses."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(3, 40))
    model = nn.Sequential(nn.Linear(width, width + 3), nn.ReLU(), nn.Linear(width + 3, 2))
    opt = tg.optim.Adam(model.parameters(), lr=1e-2)
    x = Tensor(rng.standard_normal((int(rng.integers(1, 9)), width)).astype(np.float32))

    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.realize()
    fn = TinyJit(step) if jit else step
    return [fn(x).item() for _ in range(steps)]


@pytest.mark.parametrize("seed", range(3))
def test_nothing_is_recorded_or_called_while_off(monkeypatch, seed):
    def refuse(*a, **k):
        raise AssertionError("a recording function was called while no profile records")
    for name in ("span", "counter", "instant", "launch"):
        monkeypatch.setattr(trace, name, refuse)
    before = trace.recorded
    small_training(seed, 4, jit=bool(seed % 2))
    tg.core.capture.host_step(lambda: None)
    assert trace.recorded == before and not trace.ON


def kernel_names_debug2(seed: int, capsys) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEBUG", "2")
        capsys.readouterr()
        random_program(seed)
        out = capsys.readouterr().out
    return [ln.split()[1] for ln in out.splitlines() if ln.startswith("[kernel]")]


def random_program(seed: int) -> float:
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 17, size=int(rng.integers(1, 4))))
    a = Tensor(rng.standard_normal(shape).astype(np.float32))
    b = Tensor(rng.standard_normal(shape).astype(np.float32))
    ops = [lambda t: t.exp(), lambda t: t * b, lambda t: t.relu(), lambda t: t.sum(axis=0, keepdim=True),
           lambda t: t + 1.5, lambda t: (t @ t.transpose(-1, -2)) if t.ndim >= 2 else t.sqrt().abs()]
    t = a
    for _ in range(int(rng.integers(2, 6))):
        t = ops[int(rng.integers(len(ops)))](t)
        t = t.contiguous() if rng.random() < 0.5 else t
        if t.shape != a.shape:
            t = t.sum() + a
    return float(t.sum().item())


@pytest.mark.parametrize("seed", range(6))
def test_kernel_events_are_the_launches_debug2_prints(seed, capsys):
    want = kernel_names_debug2(seed, capsys)
    GlobalCounters.reset()
    with profiler.profile() as prof:
        random_program(seed)
    kernels = [e for e in prof.events() if e.cat == "kernel"]
    assert sorted(e.name for e in kernels) == sorted(want)
    assert sum(e.args["flops"] for e in kernels) == GlobalCounters.global_ops
    assert sum(e.args["bytes"] for e in kernels) == GlobalCounters.global_mem
    assert all(e.dur_us >= 0 and e.args["device"] for e in kernels)


def schedule_model(wait: int, warmup: int, active: int, repeat: int, skip_first: int, steps: int):
    """Independent of the profiler: the steps each saved trace holds, cycle by cycle; as torch's, a
    profile stopped inside an active span saves what that span recorded so far (maybe nothing)."""
    saved, cycle, n = [], wait + warmup + active, 0
    while not (repeat and n >= repeat):
        first = skip_first + n * cycle + wait + warmup
        if first > steps:
            break
        saved.append(list(range(first, min(first + active, steps))))
        if first + active > steps:
            break
        n += 1
    return saved


@pytest.mark.parametrize("seed", range(12))
def test_schedule_saves_the_active_steps_of_each_cycle(seed):
    r = random.Random(seed)
    wait, warmup, active = r.randint(0, 2), r.randint(0, 2), r.randint(1, 3)
    repeat, skip_first, steps = r.randint(0, 3), r.randint(0, 2), r.randint(4, 16)
    got: list[list[int]] = []

    def ready(p: profiler.profile) -> None:
        got.append(sorted(int(e.name[4:]) for e in p.events() if e.name.startswith("step")))
    with profiler.profile(schedule=profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                                     skip_first=skip_first), on_trace_ready=ready) as prof:
        for i in range(steps):
            with profiler.record_function(f"step{i}"):
                pass
            prof.step()
    assert got == schedule_model(wait, warmup, active, repeat, skip_first, steps), (wait, warmup, active,
                                                                                    repeat, skip_first)


def test_bad_schedule_and_sort_key_are_refused():
    with pytest.raises(ValueError, match="active >= 1"):
        profiler.schedule(wait=0, warmup=0, active=0)
    with profiler.profile() as prof:
        pass
    with pytest.raises(ValueError, match="sort_by one of"):
        prof.key_averages().table(sort_by="bogus")
    with profiler.profile() as prof:
        with pytest.raises(RuntimeError, match="already recording"):
            prof.start()


@pytest.mark.parametrize("seed", range(4))
def test_profiles_nest_each_with_its_own_window(seed):
    """A script's profile inside a whole-run one (TG_PROFILE's): each sees what ran while it recorded;
    the outer one keeps recording after the inner stops."""
    r = random.Random(seed)
    names = [f"r{i}" for i in range(r.randint(3, 8))]
    a, b = sorted(r.sample(range(len(names) + 1), 2))
    outer = profiler.profile()
    outer.start()
    inner = profiler.profile()
    for i, name in enumerate(names):
        if i == a:
            inner.start()
        if i == b:
            inner.stop()
        with profiler.record_function(name):
            pass
    inner.stop()
    outer.stop()
    assert [e.name for e in outer.events()] == names
    assert [e.name for e in inner.events()] == names[a:b]
    assert not trace.ON


@pytest.mark.parametrize("seed", range(5))
def test_self_time_is_total_less_direct_children(seed):
    r = random.Random(seed)
    made: list[tuple[str, int, int, list]] = []

    def grow(name: str, start: int, end: int, depth: int) -> tuple:
        kids: list = []
        t = start
        while depth < 3 and r.random() < 0.7 and t < end - 10:
            a = r.randint(t, end - 10)
            b = r.randint(a + 1, end)
            kids.append(grow(f"{name}.{len(kids)}", a, b, depth + 1))
            t = b
        node = (name, start, end, kids)
        made.append(node)
        return node
    grow("root", 1000, 1000 + r.randint(100, 10000), 0)
    with profiler.profile() as prof:
        for name, a, b, _ in made:
            trace.span(name, "user", a * 1000, b * 1000)
    got = {e.name: e.self_us for e in prof.events()}
    for name, a, b, kids in made:
        assert got[name] == pytest.approx((b - a) - sum(k[2] - k[1] for k in kids))
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=3)
    assert table.splitlines()[2].startswith("root ")


def test_chrome_trace_has_threads_kernels_memory_and_modules(tmp_path):
    model = nn.Sequential(nn.Linear(7, 5), nn.Tanh())
    with profiler.profile() as prof:
        with profiler.record_function("forward"):
            model(Tensor.ones(3, 7)).sum().item()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert {"kernel", "module", "user", "memory"} <= cats
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in events)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["tid"], int) and e["pid"] == 0
    memory = [e for e in events if e.get("cat") == "memory"]
    assert all(e["ph"] == "C" and e["args"]["MiB"] >= 0 for e in memory)
    names = {e["name"] for e in events if e.get("cat") == "module"}
    assert {"Sequential", "Linear", "Tanh"} <= names
    assert "wall_minus_monotonic_us" in data["otherData"]


@pytest.mark.parametrize("seed", range(4))
def test_merge_puts_ranks_on_the_wall_clock(tmp_path, seed):
    r = random.Random(seed)
    paths, offsets, starts = [], [], []
    for rank in range(r.randint(1, 4)):
        offset, t0 = 1.7e15 + r.uniform(0, 5e6), r.uniform(0, 1e9)     # host clocks seconds apart
        events = [{"ph": "X", "name": f"k{i}", "cat": "kernel", "pid": rank, "tid": 0, "ts": t0 + 10 * i,
                   "dur": 5} for i in range(r.randint(1, 5))]
        p = tmp_path / f"trace.rank{rank}.json"
        p.write_text(json.dumps({"traceEvents": events, "otherData": {"rank": rank,
                                                                      "wall_minus_monotonic_us": offset}}))
        paths.append(str(p))
        offsets.append(offset)
        starts.append(t0)
    merged = profiler.merge_traces(paths, str(tmp_path / "trace.json"))
    base = min(o + s for o, s in zip(offsets, starts))
    for rank, (o, s) in enumerate(zip(offsets, starts)):
        first = min(e["ts"] for e in merged["traceEvents"] if e["pid"] == rank)
        assert first == pytest.approx(o + s - base, abs=1.0)      # a microsecond
    assert json.loads((tmp_path / "trace.json").read_text())["otherData"]["ranks"] == list(range(len(paths)))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="not a tg trace"):
        profiler.merge_traces([str(bad)], str(tmp_path / "x.json"))


@pytest.mark.parametrize("seed", range(3))
def test_replays_count_the_same_flops_as_eager_steps(seed):
    rng = np.random.default_rng(seed)
    w = Tensor(rng.standard_normal((int(rng.integers(2, 20)), 5)).astype(np.float32))

    def f(x: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=0).realize()
    jf = TinyJit(f)
    x = Tensor(rng.standard_normal((3, w.shape[0])).astype(np.float32))
    counts = []
    for _ in range(4):
        GlobalCounters.reset()
        jf(x)
        counts.append((GlobalCounters.global_ops, GlobalCounters.global_mem))
    assert counts[0][0] > 0 and len(set(counts)) == 1


def test_phases_split_a_step():
    before = profiler.phase_seconds()
    profiler.phase("data")
    sum(range(20000))
    profiler.phase("forward+backward")
    small_training(0, 3, jit=True)
    profiler.phase("other")
    spent = {k: v - before.get(k, 0.0) for k, v in profiler.phase_seconds().items()}
    assert spent["data"] > 0 and spent["forward+backward"] > 0
    assert spent["optimizer"] > 0           # Optimizer.step's host step, in the replays too


def test_table_lists_kernels_with_gflops():
    with profiler.profile() as prof:
        (Tensor.ones(64, 64) @ Tensor.ones(64, 64)).sum().item()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print(prof.key_averages())
    row = next(ln for ln in out.getvalue().splitlines() if " kernel " in ln and ln.startswith("r_"))
    assert float(row.split()[-1]) > 0


@pytest.mark.parametrize("seed", range(3))
def test_replays_record_every_launch_with_its_counts(seed):
    """Under TinyJit, each replay's kernels are recorded in launch order, named and counted as the
    capture's programs, their FLOPs what GlobalCounters adds; the profile changes no value."""
    def losses(profiled: bool) -> tuple[list[float], list, int]:
        Tensor.manual_seed(seed)
        prof = profiler.profile()
        if profiled:
            prof.start()
        GlobalCounters.reset()
        out = small_training(seed, 5, jit=True)
        counted = GlobalCounters.global_ops
        prof.stop()
        return out, prof.events(), counted
    plain, _, _ = losses(False)
    traced, events, counted = losses(True)
    assert traced == plain
    kernels = [e for e in events if e.cat == "kernel"]
    replays = [e for e in events if e.cat == "jit"]
    assert len(replays) == 3 and sum(e.args["flops"] for e in kernels) == counted
    inside = [[k.name for k in kernels if r.ts_us <= k.ts_us <= r.ts_us + r.dur_us] for r in replays]
    assert inside[0] == inside[1] == inside[2] and inside[0]
