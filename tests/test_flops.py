"""tg.utils.flops: the CPU peak measured once per machine and kept (ranks starting together measure
once), re-measured when asked; the GPU table; MFU's arithmetic."""
from __future__ import annotations

import json
import math
import threading

import pytest

from tg.utils import flops


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_measured_once_then_read_back(cache, monkeypatch):
    calls = []
    real = flops._measure

    def counting(kind, threads):
        calls.append((kind, threads))
        return real(kind, threads)
    monkeypatch.setattr(flops, "_measure", counting)
    first = flops.cpu_peak_gflops("float32", threads=1)
    assert first[0] > 0 and "FMA" in first[1]
    assert flops.cpu_peak_gflops("float32", threads=1) == first and calls == [("float32", 1)]
    flops.cpu_peak_gflops("float32", threads=1, fresh=True)
    assert calls == [("float32", 1)] * 2
    kept = json.loads((cache / "peak.json").read_text())
    assert len(kept) == 1 and next(iter(kept)).endswith("|1|float32|" + ",".join(sorted(
        __import__("tg.core.runtime.ops_cpu", fromlist=["features"]).features())) + "|cpu-time")


def test_ranks_starting_together_measure_once(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(flops, "_measure", lambda kind, threads: calls.append(kind) or (123.0, "fake"))
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(flops.cpu_peak_gflops("bfloat16", threads=2)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["bfloat16"] and got == [(123.0, "fake")] * 4


def test_a_damaged_cache_is_measured_again(cache, monkeypatch):
    (cache / "peak.json").write_text("{not json")
    monkeypatch.setattr(flops, "_measure", lambda kind, threads: (7.0, "fake"))
    assert flops.cpu_peak_gflops("float32", threads=3) == (7.0, "fake")
    with pytest.raises(ValueError, match="kind float32 or bfloat16"):
        flops.cpu_peak_gflops("int8")


@pytest.mark.parametrize("name,kind,want", [
    ("NVIDIA H200", "bfloat16", 989.4e3), ("NVIDIA H100 PCIe", "float32", 51.2e3),
    ("NVIDIA H100 80GB HBM3", "float32", 66.9e3), ("NVIDIA A100-SXM4-80GB", "bfloat16", 312e3),
    ("NVIDIA L40S", "bfloat16", 362e3)])
def test_gpu_datasheet_peaks(name, kind, want):
    assert flops.gpu_peak_gflops(name, kind)[0] == pytest.approx(want)


def test_unknown_gpu_says_so():
    with pytest.raises(ValueError, match="no datasheet peak for 'Radeon'"):
        flops.gpu_peak_gflops("Radeon")


def test_peak_of_the_default_cpu_device_uses_its_threads(cache, monkeypatch):
    monkeypatch.setattr(flops, "_measure", lambda kind, threads: (10.0 * threads, kind))
    monkeypatch.setenv("TG_CPU_THREADS", "2")
    assert flops.peak_gflops("CPU", "float16") == (20.0, "bfloat16")
    assert flops.mfu(5e9, 0.5, 20.0) == pytest.approx(0.5)
    assert math.isnan(flops.mfu(1.0, 0.0, 20.0)) and math.isnan(flops.mfu(1.0, 1.0, float("nan")))

