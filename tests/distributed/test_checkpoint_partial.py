"""What a kill mid-save leaves behind is removed at the next start, saying so (issue 15, defect 10d), and
never a folder that a save of the running job is writing."""
from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest
from harness import run_ranks

import tg.distributed as dist
from tg import nn
from tg.distributed import checkpoint
from tg.nn.state import get_parameters


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _listen() -> _Records:
    records = _Records()
    logging.getLogger("tg.distributed.checkpoint").addHandler(records)
    return records


def _model():
    from tg import Tensor
    Tensor.manual_seed(3)
    model = nn.Linear(4, 3)
    return model, nn.optim.Adam(get_parameters(model))


def save_and_die_mid_save(rank: int, world: int, directory: str) -> str:
    """Save step 2 completely, then start step 4 and SIGKILL rank 0 once the partial folder has a file."""
    model, opt = _model()
    dist.save_checkpoint(directory, 2, model, opt)
    real_save = checkpoint.safe_save

    def save_then_die(tensors, path, metadata=None):
        real_save(tensors, path, metadata)
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0:
        checkpoint.safe_save = save_then_die
    dist.save_checkpoint(directory, 4, model, opt)
    return "saved step 4"


def resume(rank: int, world: int, directory: str) -> dict:
    """Rank 1 loads first and looks; then rank 0 loads; both look again."""
    records = _listen()
    partial = Path(directory) / "step-00000004.partial"
    model, opt = _model()
    seen = {}
    if rank == 1:
        dist.load_checkpoint(directory, model, opt)
        seen["after rank 1 loaded"] = partial.exists()
    dist.barrier()
    if rank == 0:
        seen["before rank 0 loaded"] = partial.exists()
        meta = dist.load_checkpoint(directory, model, opt)
        seen["step"] = meta["step"]
    dist.barrier()
    seen["after both loaded"] = partial.exists()
    return {"seen": seen, "log": records.lines}


def test_partial_left_by_a_kill_is_removed_at_the_next_start(tmp_path):
    directory = tmp_path / "ckpt"
    died = run_ranks(
        2, save_and_die_mid_save, str(directory), allow_errors=True, dist_timeout=30, timeout=120
    )
    assert died[0] == "ERROR: exited with code -9" and "rank 0 died" in died[1], died
    partial = directory / "step-00000004.partial"
    assert (partial / "model.safetensors").is_file() and not (partial / "meta.json").exists()
    assert dist.latest_checkpoint(directory) == directory / "step-00000002"

    rank0, rank1 = run_ranks(2, resume, str(directory), timeout=120)
    # only rank 0 removes, and only when it loads: rank 1's load left the folder alone
    assert rank1["seen"] == {"after rank 1 loaded": True, "after both loaded": False}
    assert rank0["seen"] == {"before rank 0 loaded": True, "step": 2, "after both loaded": False}
    assert rank1["log"] == []
    assert len(rank0["log"]) == 1, rank0["log"]
    line = rank0["log"][0]
    assert "removed" in line and str(partial) in line and "save of step 4 that never finished" in line
    assert "`latest` names step-00000002" in line
    assert sorted(p.name for p in directory.iterdir()) == ["latest", "step-00000002"]


@pytest.fixture
def fresh_process(monkeypatch):
    """Pretend each use is a new process: nothing tidied yet."""
    monkeypatch.setattr(checkpoint, "_tidied", set())


def test_first_save_of_a_run_removes_leftovers_before_it_writes(tmp_path, fresh_process, monkeypatch):
    model, opt = _model()
    dist.save_checkpoint(tmp_path, 1, model, opt)
    stale = tmp_path / "step-00000007.partial"
    stale.mkdir()
    (stale / "optim-00000-of-00002.safetensors").write_bytes(b"\0" * 8)
    monkeypatch.setattr(checkpoint, "_tidied", set())           # the job restarts

    seen = []
    real_save = checkpoint.safe_save

    def watch(tensors, path, metadata=None):
        seen.append(stale.exists())
        real_save(tensors, path, metadata)
    monkeypatch.setattr(checkpoint, "safe_save", watch)
    records = _listen()
    try:
        dist.save_checkpoint(tmp_path, 2, model, opt)
    finally:
        logging.getLogger("tg.distributed.checkpoint").removeHandler(records)
    assert seen and not any(seen), "the leftover must be gone before the first file of this run is written"
    assert any("step-00000007.partial" in line and "never finished" in line for line in records.lines)


def test_a_save_of_this_run_is_never_removed(tmp_path, fresh_process):
    model, opt = _model()
    dist.save_checkpoint(tmp_path, 1, model, opt)               # the run has started: tidied once
    in_progress = tmp_path / "step-00000002.partial"            # stands for a save being written now
    in_progress.mkdir()
    dist.load_checkpoint(tmp_path, model, opt)
    assert in_progress.is_dir()
    assert checkpoint.remove_leftovers(tmp_path) == [in_progress]   # a new start would remove it


def test_replaced_copy_is_removed_only_when_its_replacement_is_complete(tmp_path, fresh_process):
    model, opt = _model()
    dist.save_checkpoint(tmp_path, 1, model, opt)
    dist.save_checkpoint(tmp_path, 2, model, opt)
    # a kill after `latest` moved but before the old copy was deleted
    os.rename(tmp_path / "step-00000001", tmp_path / "step-00000002.replaced")
    (tmp_path / "step-00000003.replaced").mkdir()       # its step-3 is missing: it may be the only copy
    assert checkpoint.remove_leftovers(tmp_path) == [tmp_path / "step-00000002.replaced"]
    assert (tmp_path / "step-00000003.replaced").is_dir()
    # a kill between blanking `latest` and moving it: the .replaced copy is needed to recover
    os.rename(tmp_path / "step-00000003.replaced", tmp_path / "step-00000002.replaced")
    (tmp_path / "latest").write_text("")
    assert checkpoint.remove_leftovers(tmp_path) == []
    assert (tmp_path / "step-00000002.replaced").is_dir()


def test_symlinked_partial_is_unlinked_not_followed(tmp_path, fresh_process):
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "keep").write_text("data")
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "step-00000005.partial").symlink_to(victim)
    assert checkpoint.remove_leftovers(directory) == [directory / "step-00000005.partial"]
    assert (victim / "keep").read_text() == "data"
    assert not os.path.lexists(directory / "step-00000005.partial")
