"""tg.utils.tensorboard.SummaryWriter: what it writes is read back by the tensorboard package's own reader
(EventMultiplexer over the log_dir and add_scalars' sub-runs) and by read_jsonl, value for value, step for
step, walltime for walltime; without the package it warns once and writes the JSONL alone; bad input
raises at the call, before anything is written."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tg import Tensor
from tg.utils.tensorboard import SummaryWriter, read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reader(log_dir):
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    runs = EventMultiplexer(size_guidance=event_accumulator.STORE_EVERYTHING_SIZE_GUIDANCE)
    runs.AddRunsFromDirectory(str(log_dir))
    runs.Reload()
    return runs


def _scalar_input(rng, value):
    """The number in one of the forms add_scalar accepts, and the float that form holds (float32 rounds)."""
    given = [value, np.float64(value), np.array(value), Tensor([value]), np.float32(value)][rng.integers(5)]
    return given, float((given.numpy() if isinstance(given, Tensor) else np.asarray(given)).reshape(()))


def _write_random_run(log_dir, rng):
    """Random calls of every add_*; returns (the JSONL records expected, the events expected per
    (run, tag) as (step, wall_time, payload))."""
    records, events = [], {}
    writer = SummaryWriter(str(log_dir), max_queue=int(rng.integers(1, 6)))
    specials = [float("nan"), float("inf"), -float("inf")]
    # every kind at least once (the three non-finite scalars, a histogram past TensorFlow's +-1e20 edges)
    kinds = ["scalar"] * 3 + ["scalars", "text", "huge histogram"]
    kinds += list(rng.choice(["scalar", "scalars", "histogram", "text"], size=int(rng.integers(15, 26))))
    for call, kind in enumerate(rng.permutation(kinds)):
        step_int = int(rng.integers(0, 2**62 if call % 2 == 0 else 10**6))     # int steps past 2**53 exact
        step = [step_int, float(step_int), np.int64(step_int), None][call % 4]
        walltime = float(rng.uniform(1e9, 2e9)) if rng.random() < 0.5 else None
        before = time.time()
        if kind == "scalar":
            value = specials.pop() if specials else [int(rng.integers(-5, 5)), float(
                rng.normal() * 10.0 ** rng.integers(-8, 8))][int(rng.integers(2))]
            given, value = _scalar_input(rng, value)
            writer.add_scalar("loss/" + str(call % 3), given, step, walltime)
            payloads = [(".", "loss/" + str(call % 3), "loss/" + str(call % 3), value)]
        elif kind == "scalars":
            parts = {f"p{i}": _scalar_input(rng, float(rng.normal())) for i in range(int(rng.integers(1, 4)))}
            writer.add_scalars("cmp/x", {k: given for k, (given, _) in parts.items()}, step, walltime)
            payloads = [(f"cmp_x_{k}", "cmp/x", f"cmp/x/{k}", v) for k, (_, v) in parts.items()]
        elif kind.endswith("histogram"):
            scale = 1e21 if kind == "huge histogram" else 10.0 ** rng.integers(-3, 4)
            values = rng.normal(size=int(rng.choice([1, 7, 33, 1001]))) * scale
            bins = "tensorflow" if kind == "huge histogram" else ["tensorflow", 7, "auto", 1][rng.integers(4)]
            kind = "histogram"
            max_bins = [None, 3][int(rng.integers(2))]
            given = [values, values.tolist(), Tensor(values.astype(np.float32))][int(rng.integers(3))]
            values = given.numpy().astype(np.float64) if isinstance(given, Tensor) else values
            writer.add_histogram("w", given, step, bins=bins, walltime=walltime, max_bins=max_bins)
            payloads = [(".", "w", "w", (values, max_bins))]
        else:
            text = "".join(rng.choice(list("ab *#\n\u00e9\u4e2d"), size=int(rng.integers(0, 40))))
            writer.add_text("notes", text, step, walltime)
            payloads = [(".", "notes", "notes", text)]
        for run, tag, jsonl_tag, payload in payloads:
            expected_step = None if step is None else step_int
            records.append((expected_step, walltime, (before, time.time()), jsonl_tag, kind, payload))
            events.setdefault((run, tag), []).append((expected_step or 0, payload, len(records) - 1))
    writer.close()
    return records, events


def _check_jsonl_record(got, want):
    step, walltime, (earliest, latest), tag, kind, payload = want
    assert (got["step"], got["tag"]) == (step, tag)
    assert got["wall_time"] == walltime if walltime is not None else earliest <= got["wall_time"] <= latest
    if kind in ("scalar", "scalars"):
        if math.isfinite(payload):
            assert got["value"] == payload and "nonfinite" not in got
        else:
            assert got["value"] is None and got["nonfinite"] == str(payload)   # Python's nan, inf, -inf
    elif kind == "histogram":
        values = payload[0]
        assert got["value"] == pytest.approx({"min": values.min(), "max": values.max(), "mean": values.mean(),
                                              "std": values.std(), "count": values.size})
    else:
        assert got["value"] == payload


def _check_histogram(histo, values, max_bins):
    assert (histo.min, histo.max, histo.num) == (values.min(), values.max(), values.size)
    assert histo.sum == pytest.approx(values.sum())
    assert histo.sum_squares == pytest.approx((values ** 2).sum())
    assert sum(histo.bucket) == values.size and len(histo.bucket) == len(histo.bucket_limit)
    assert histo.bucket[0] > 0 and histo.bucket[-1] > 0          # empty ends dropped
    assert max_bins is None or len(histo.bucket) <= max_bins
    limits = np.array(histo.bucket_limit)
    assert (np.diff(limits) > 0).all() and limits[-1] >= values.max()
    # each bucket holds the values between the limit before it and its own
    lefts = np.concatenate([[-np.inf], limits[:-1]])
    counted = [((values >= lo) & (values < hi)).sum() for lo, hi in zip(lefts, limits)]
    counted[-1] += (values == limits[-1]).sum()
    assert counted == list(histo.bucket)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_record_reads_back_with_tensorboards_reader(tmp_path, seed):
    tensor_util = pytest.importorskip("tensorboard.util.tensor_util")
    records, events = _write_random_run(tmp_path, np.random.default_rng(seed))
    jsonl = read_jsonl(tmp_path / "metrics.jsonl")
    assert len(jsonl) == len(records)
    for got, want in zip(jsonl, records):
        _check_jsonl_record(got, want)
    runs = _reader(tmp_path)
    assert set(runs.Runs()) == {"."} | {run for run, _ in events}
    for (run, tag), expected in events.items():
        kind = records[expected[0][2]][4]
        read = {"scalar": runs.Scalars, "scalars": runs.Scalars, "histogram": runs.Histograms,
                "text": runs.Tensors}[kind](run, tag)
        assert [e.step for e in read] == [step for step, _, _ in expected]
        assert [e.wall_time for e in read] == [jsonl[i]["wall_time"] for _, _, i in expected]
        for event, (_, payload, _) in zip(read, expected):
            if kind in ("scalar", "scalars"):
                np.testing.assert_equal(event.value, np.float32(payload))
            elif kind == "histogram":
                _check_histogram(event.histogram_value, *payload)
            else:
                assert tensor_util.make_ndarray(event.tensor_proto).item().decode() == payload
    if any(records[i][4] == "text" for i in range(len(records))):
        assert runs.PluginRunToTagToContent("text") == {".": {"notes": b""}}


def test_purge_step_hides_later_records_in_both_logs(tmp_path):
    pytest.importorskip("tensorboard")
    with SummaryWriter(str(tmp_path)) as writer:
        for step in range(9):
            writer.add_scalar("loss", step / 10, step)
    start = int(time.time())
    while int(time.time()) == start:       # event files are ordered by their name, which has the second
        time.sleep(0.05)
    with SummaryWriter(str(tmp_path), purge_step=5) as writer:
        writer.add_scalar("loss", -1.0, 5)
        writer.add_text("note", "resumed")
    steps = [0, 1, 2, 3, 4, 5]
    assert [e.step for e in _reader(tmp_path).Scalars(".", "loss")] == steps
    assert [(r["step"], r["tag"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [
        (s, "loss") for s in steps] + [(None, "note")]


def test_a_line_cut_by_a_crash_is_skipped_then_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with SummaryWriter(str(tmp_path), tensorboard=False) as writer:
        writer.add_scalar("a", 1.0, 0, walltime=5.0)
    with open(path, "ab") as f:
        f.write('{"step": 1, "wall_time": 6.0, "tag": "\u4e2d'.encode()[:-1])    # cut inside a character
    assert read_jsonl(path) == [{"step": 0, "wall_time": 5.0, "tag": "a", "value": 1.0}]
    with SummaryWriter(str(tmp_path), tensorboard=False) as writer:
        writer.add_scalar("a", 2.0, 1, walltime=7.0)
    assert [r["value"] for r in read_jsonl(path)] == [1.0, 2.0]
    with open(path, "a") as f:
        f.write("not json\n")
    with pytest.raises(ValueError, match="line 3 .* not JSON"):
        read_jsonl(path)


def test_jsonl_is_written_every_max_queue_records_and_on_flush(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = SummaryWriter(str(tmp_path), max_queue=3, tensorboard=False)
    lines = lambda: read_jsonl(path) if path.exists() else []   # noqa: E731
    writer.add_scalar("a", 1, 0)
    writer.add_scalar("a", 2, 1)
    assert lines() == []
    writer.add_scalar("a", 3, 2)
    assert len(lines()) == 3
    writer.add_text("t", "x")
    writer.flush()
    assert len(lines()) == 4
    writer.close()
    writer.close()
    assert os.listdir(tmp_path) == ["metrics.jsonl"]         # tensorboard=False: no event file
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalar("a", 4, 3)


def test_default_log_dir_is_torchs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_lr0.1", tensorboard=False) as writer:
        assert writer.get_logdir().startswith("runs" + os.sep) and writer.log_dir.endswith("_lr0.1")
    assert os.path.isdir(writer.log_dir)


@pytest.mark.parametrize("call, error, match", [
    (lambda w: w.add_scalar("x", "1.0"), TypeError, "expected a real number.*got str"),
    (lambda w: w.add_scalar("x", Tensor([1.0, 2.0])), ValueError, r"expected one value.*shape \(2,\)"),
    (lambda w: w.add_scalar("x", np.zeros((2, 3))), ValueError, "use add_histogram"),
    (lambda w: w.add_scalar("x", 1 + 2j), TypeError, "expected a real number"),
    (lambda w: w.add_scalar(3, 1.0), TypeError, "tag: expected a str, got int"),
    (lambda w: w.add_scalar("x", 1.0, global_step=1.5), ValueError, "whole number, got 1.5"),
    (lambda w: w.add_scalar("x", 1.0, global_step="3"), TypeError, "global_step"),
    (lambda w: w.add_scalars("x", [1.0]), TypeError, "expected a dict"),
    (lambda w: w.add_scalars("x", {"a": 1.0, "b": "2"}), TypeError, "'b'"),
    (lambda w: w.add_histogram("h", []), ValueError, "at least one value"),
    (lambda w: w.add_histogram("h", [1.0, float("nan")]), ValueError, "1 not finite"),
    (lambda w: w.add_histogram("h", ["a"]), TypeError, "expected a real number"),
    (lambda w: w.add_histogram("h", [1.0, 2.0], max_bins=0), ValueError, "max_bins >= 1"),
    (lambda w: w.add_text("t", 5), TypeError, "expected a str, got int"),
])
def test_bad_input_raises_at_the_call(tmp_path, call, error, match):
    writer = SummaryWriter(str(tmp_path), tensorboard=False)
    with pytest.raises(error, match=match):
        call(writer)
    writer.close()
    assert read_jsonl(tmp_path / "metrics.jsonl") == []


def test_without_the_package_it_warns_once_and_writes_the_jsonl(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, warnings
        import tg, tg.utils.tensorboard as tb
        assert not [m for m in sys.modules if m.split(".")[0] == "tensorboard"], "imported at import tg"
        sys.modules["tensorboard"] = None                 # as if it were not installed
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for run in ("a", "b"):
                with tb.SummaryWriter(os.path.join({str(tmp_path)!r}, run)) as w:
                    w.add_scalar("loss", 0.25, 1)
        assert len(seen) == 1 and '.[metrics]' in str(seen[0].message), [str(s.message) for s in seen]
        assert os.listdir(os.path.join({str(tmp_path)!r}, "a")) == ["metrics.jsonl"]
        assert tb.read_jsonl(os.path.join({str(tmp_path)!r}, "b", "metrics.jsonl"))[0]["value"] == 0.25
        try:
            tb.SummaryWriter(os.path.join({str(tmp_path)!r}, "c"), tensorboard=True)
        except ImportError as e:
            assert '.[metrics]' in str(e), e
        else:
            raise AssertionError("tensorboard=True without the package did not raise")
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
