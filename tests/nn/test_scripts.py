"""The training scripts run end to end on tiny data they are given (nothing is downloaded)."""
import gzip
import importlib.util
import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str):
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_idx(path: Path, array: np.ndarray, gz: bool = False) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


def quadrant_digits(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """12x12 images whose class (0..3) is the bright quadrant: learnable in a few steps."""
    labels = rng.integers(0, 4, n)
    images = rng.integers(0, 40, (n, 12, 12))
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 2)
        images[i, r * 6:(r + 1) * 6, q * 6:(q + 1) * 6] += 200
    return images.clip(0, 255), labels


def test_idx_reader_rejects_garbage(tmp_path):
    mnist = load("train_mnist")
    bad = tmp_path / "x"
    bad.write_bytes(b"\x12\x34\x56\x78")
    with pytest.raises(ValueError, match="not an IDX file"):
        mnist.read_idx(bad)
    write_idx(bad, np.zeros((4, 3, 3)))
    bad.write_bytes(bad.read_bytes()[:-5])
    with pytest.raises(ValueError, match="truncated"):
        mnist.read_idx(bad)


def test_train_mnist_learns_from_idx_files(tmp_path):
    mnist = load("train_mnist")
    rng = np.random.default_rng(0)
    x, y = quadrant_digits(256, rng)
    write_idx(tmp_path / "train-images-idx3-ubyte", x)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", y, gz=True)
    xt, yt = quadrant_digits(64, rng)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", xt)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", yt)
    np.testing.assert_array_equal(mnist.read_idx(tmp_path / "train-labels-idx1-ubyte.gz"), y)
    out = mnist.main([str(tmp_path), "--epochs", "3", "--batch", "32", "--lr", "3e-3"])
    assert np.mean(out["losses"][-4:]) < 0.5 * np.mean(out["losses"][:2])
    assert out["test_accuracy"] > 0.8


def gpt_args(tmp_path: Path, steps: int = 30) -> list[str]:
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    return ["--data", str(text), "--steps", str(steps), "--batch", "8", "--block", "16", "--n-layer", "1",
            "--n-embd", "32", "--n-head", "2", "--eval-every", "15", "--warmup", "5", "--ckpt-every", "10",
            "--out", str(tmp_path / "run")]


@pytest.mark.parametrize("mode", [[], ["--zero"], ["--zero", "--checkpoint-activations", "--no-jit"]])
def test_train_gpt_learns_checkpoints_and_resumes(tmp_path, mode):
    train = load("train")
    args = gpt_args(tmp_path) + mode
    out = train.main(args)
    assert out["last_loss"] < out["first_loss"] - 1.0       # a repetitive text is learned quickly
    run = tmp_path / "run"
    assert (run / "ckpt" / "latest").read_text() == "step-00000030"
    assert "<svg" in (run / "loss.svg").read_text()
    # as if the job had died after step 20's checkpoint: resuming reproduces steps 21..30 exactly
    (run / "ckpt" / "latest").write_text("step-00000020")
    (run / "ckpt" / "step-00000030.partial").mkdir()          # a save cut short is ignored
    resumed = train.main(args + ["--resume"])
    history = json.loads((run / "history.json").read_text())
    assert [s for s, _ in history["train"]] == list(range(1, 31))
    assert resumed["last_loss"] == pytest.approx(out["last_loss"], abs=1e-5)


def test_a_run_shorter_than_the_warmup_runs(tmp_path):
    """README: `python3 scripts/train.py --steps 1` shows the kernels; the default warmup is 30 steps."""
    train = load("train")
    args = gpt_args(tmp_path, steps=1)
    args[args.index("--warmup") + 1] = "30"
    out = train.main(args)
    assert np.isfinite(out["last_loss"])


def test_a_new_run_moves_earlier_checkpoints_aside(tmp_path):
    train = load("train")
    args = gpt_args(tmp_path, steps=10)
    train.main(args)
    train.main(args[:args.index("--steps") + 1] + ["6"] + args[args.index("--steps") + 2:])
    run = tmp_path / "run"
    assert (run / "ckpt" / "latest").read_text() == "step-00000006"      # the new run's, not the old 10
    assert (run / "ckpt.previous" / "latest").read_text() == "step-00000010"


def test_train_gpt_config_file(tmp_path):
    train = load("train")
    config = tmp_path / "job.yaml"
    config.write_text("steps: 4\nn_layer: 1\nn-embd: 16\nzero: true\n")
    args = train.parse_args(["--config", str(config), "--steps", "6"])
    assert (args.steps, args.n_layer, args.n_embd, args.zero) == (6, 1, 16, True)    # the flag wins
    config.write_text("n_layers: 2\n")
    with pytest.raises(ValueError, match="did you mean 'n_layer'"):
        train.parse_args(["--config", str(config)])
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train.main(gpt_args(tmp_path) + ["--resume"])


def test_shipped_training_config_parses():
    train = load("train")
    args = train.parse_args(["--config", str(SCRIPTS.parent / "configs" / "gpt_zero2.yaml")])
    assert args.zero and args.steps > 0 and args.ckpt_every > 0


@pytest.mark.parametrize("precision,mode", [("bf16", []), ("fp16", []), ("fp16", ["--zero"]),
                                            ("bf16", ["--zero", "--no-jit"])])
def test_mixed_precision_training_follows_float32(tmp_path, precision, mode):
    """bf16 and fp16 autocast (fp16 with a GradScaler, agreed over ZeRO's ranks) learn as float32 does:
    the last loss within 3% of float32's, every step's within 10%; the scaler's state is checkpointed,
    so a resumed fp16 run repeats its steps exactly."""
    train = load("train")
    base = gpt_args(tmp_path) + mode
    ref = train.main(base + ["--precision", "fp32", "--out", str(tmp_path / "fp32")])
    out = train.main(base + ["--precision", precision])
    assert abs(out["last_loss"] - ref["last_loss"]) <= 0.03 * ref["last_loss"]
    for (_, got), (_, want) in zip(out["history"]["train"], ref["history"]["train"]):
        assert abs(got - want) <= 0.1 * want
    if precision == "fp16":
        assert out["skipped"] == [] and (tmp_path / "run" / "ckpt" / "latest").exists()
        (tmp_path / "run" / "ckpt" / "latest").write_text("step-00000020")
        resumed = train.main(base + ["--precision", precision, "--resume"])
        assert resumed["last_loss"] == pytest.approx(out["last_loss"], abs=1e-5)


def test_auto_precision_is_bf16_where_the_device_has_bf16_units():
    import tg
    train = load("train")
    precision, units = train.resolve_precision("auto")
    assert units == tg.amp.bf16_units()
    assert precision == ("bf16" if units else "fp32")
    assert train.resolve_precision("fp16")[0] == "fp16"
    shipped = train.parse_args(["--config", str(SCRIPTS.parent / "configs" / "gpt_zero2.yaml")])
    assert shipped.precision == "auto"


def test_train_gpt_logs_what_tensorboard_reads_and_ends_with_a_sample(tmp_path, capsys):
    """Every step's scalars in TensorBoard's event files (read by the tensorboard package's own reader)
    and in metrics.jsonl; MFU is the model FLOPs (6 N + 12 L T d a token, N without the embeddings, which
    are looked up) over the step time and the measured peak, and those FLOPs agree with what tg's kernels
    counted within 10% (the count is higher: elementwise work, and tg's embedding is a one-hot
    contraction; HFU is the count's share of the peak); the run ends by printing a sample."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tg.utils.flops import peak_gflops
    from tg.utils.tensorboard import read_jsonl
    train = load("train")
    args = gpt_args(tmp_path, steps=4)
    for flag, value in (("--block", "128"), ("--n-embd", "256"), ("--n-layer", "2"), ("--batch", "2"),
                        ("--eval-every", "2")):
        args[args.index(flag) + 1] = value
    train.main(args + ["--precision", "fp32", "--sample-tokens", "24", "--temperature", "0"])
    out = capsys.readouterr().out
    assert "sample (24 bytes, temperature 0, seed 1337):" in out
    logs = tmp_path / "run" / "logs"
    acc = EventAccumulator(str(logs), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    per_step = ["train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s", "perf/tflops", "perf/mfu",
                "perf/hfu",
                "perf/model_flops", "perf/counted_flops", "memory/peak_mib", "comm/bytes_per_step",
                "time/step_ms", "time/data_ms", "time/forward_backward_ms", "time/communication_ms",
                "time/optimizer_ms"]
    got = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in per_step + ["eval/loss"]}
    for tag in per_step:
        assert sorted(got[tag]) == [1, 2, 3, 4], tag
    assert sorted(got["eval/loss"]) == [2, 4]
    assert "sample" in acc.Tags()["tensors"]
    peak, _ = peak_gflops(dtype="float32")
    for step in range(1, 5):
        model, counted = got["perf/model_flops"][step], got["perf/counted_flops"][step]
        assert 1.0 <= counted / model <= 1.1, (step, counted, model)
        step_s = got["time/step_ms"][step] / 1e3
        assert got["perf/mfu"][step] == pytest.approx(model / step_s / (peak * 1e9), rel=1e-4)
        assert got["perf/hfu"][step] == pytest.approx(counted / step_s / (peak * 1e9), rel=1e-4)
        parts = sum(got[f"time/{k}_ms"][step]
                    for k in ("data", "forward_backward", "communication", "optimizer"))
        assert 0 < parts <= got["time/step_ms"][step] * 1.001
        assert got["time/optimizer_ms"][step] > 0 and got["memory/peak_mib"][step] > 0
    jsonl = {(r["tag"], r["step"]): r["value"] for r in read_jsonl(logs / "metrics.jsonl")}
    for tag in per_step:
        for step, value in got[tag].items():
            assert jsonl[(tag, step)] == pytest.approx(value, rel=1e-6)
    lr = [got["train/lr"][s] for s in range(1, 5)]
    assert lr == sorted(lr) and lr[0] < lr[-1]           # warming up


def test_train_gpt_survives_what_would_stop_its_report(tmp_path, monkeypatch, capsys):
    """A device whose peak is unknown logs MFU as NaN (not a crash before step 1); a model that diverged
    still gets its history, plot and metrics (the sample stops at the first non-finite logits); a resumed
    run continues its metrics without repeating the steps it runs again."""
    from tg.utils.tensorboard import read_jsonl
    train = load("train")

    def unknown(*a, **k):
        raise ValueError("no datasheet peak for 'Some GPU'")
    monkeypatch.setattr(train, "peak_gflops", unknown)
    args = gpt_args(tmp_path, steps=4) + ["--lr", "1e30", "--grad-clip", "0", "--sample-tokens", "5",
                                          "--ckpt-every", "2"]
    train.main(args)
    assert "MFU against nan TFLOPS a rank (unknown: no datasheet peak" in capsys.readouterr().out
    run = tmp_path / "run"
    assert (run / "history.json").exists() and (run / "loss.svg").exists()
    rows = read_jsonl(run / "logs" / "metrics.jsonl")
    assert [r["nonfinite"] for r in rows if r["tag"] == "perf/mfu"] == ["nan"] * 4
    monkeypatch.undo()
    (run / "ckpt" / "latest").write_text("step-00000002")      # as if the job died after step 2's checkpoint
    train.main(gpt_args(tmp_path, steps=6) + ["--resume", "--sample-tokens", "0"])
    steps = [r["step"] for r in read_jsonl(run / "logs" / "metrics.jsonl") if r["tag"] == "train/loss"]
    assert steps == [1, 2, 3, 4, 5, 6]                          # steps 3 and 4 ran twice, logged once
    train.main(gpt_args(tmp_path, steps=2) + ["--sample-tokens", "0"])     # a new run: the old log aside
    assert (run / "logs.previous").is_dir()
    logged = read_jsonl(run / "logs" / "metrics.jsonl")
    assert [r["step"] for r in logged if r["tag"] == "train/loss"] == [1, 2]
