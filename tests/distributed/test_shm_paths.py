"""Shared-memory segment paths that are not what tg created raise DistributedError saying why (issue 15,
defect 10b): a symlink is never followed, and nothing already at a segment's name is ever opened."""
from __future__ import annotations

import os
import secrets
import stat

import pytest

import tg.distributed as dist
from tg.distributed.transport import shm
from tg.distributed.transport.shm import CONTROL, SHM_DIR, ShmRing

SLOTS, SLOT_BYTES = 2, 4096
SIZE = CONTROL + SLOTS * SLOT_BYTES


@pytest.fixture
def segment_path():
    """A fresh segment name of this user; whatever a test puts there is removed afterwards."""
    path = os.path.join(SHM_DIR, f"tg-{os.getuid()}-{secrets.token_hex(8)}")
    yield path
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _regular(path: str, size: int = SIZE, mode: int = 0o600) -> None:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
    os.ftruncate(fd, size)
    os.fchmod(fd, mode)
    os.close(fd)


def test_a_good_segment_maps(segment_path):
    _regular(segment_path)
    ring = ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)
    ring.close()


def test_symlink_is_never_followed(tmp_path, segment_path):
    target = tmp_path / "victim"
    target.write_bytes(b"\0" * SIZE)
    os.chmod(target, 0o600)
    os.symlink(target, segment_path)
    with pytest.raises(dist.DistributedError, match=r"is a symlink .*victim.*attacking the job.*Remove it"):
        ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)
    assert target.read_bytes() == b"\0" * SIZE


def test_dangling_symlink(segment_path):
    os.symlink("/nonexistent/tg-target", segment_path)
    with pytest.raises(dist.DistributedError, match="is a symlink"):
        ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)
    assert not os.path.exists("/nonexistent/tg-target")


@pytest.mark.parametrize("make,why", [
    (lambda p: os.mkdir(p), "is a directory"),
    (lambda p: os.mkfifo(p, 0o600), "not a regular file"),
    (lambda p: _regular(p, size=SIZE + 1), f"holds {SIZE + 1} bytes"),
    (lambda p: _regular(p, mode=0o666), "other users may open it"),
])
def test_wrong_kind_of_file_is_refused(segment_path, make, why):
    make(segment_path)
    with pytest.raises(dist.DistributedError, match=why):    # a FIFO must not block the open either
        ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)


def test_hard_link_is_refused(segment_path):
    _regular(segment_path)
    other = segment_path + "-link"
    os.link(segment_path, other)
    try:
        with pytest.raises(dist.DistributedError, match="2 hard links"):
            ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)
    finally:
        os.unlink(other)


def test_missing_segment_says_the_creator_died(segment_path):
    with pytest.raises(dist.DistributedError, match="removed before this rank mapped it.*RemoveIPC"):
        ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)


def test_other_users_file_is_refused(segment_path):
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    _regular(segment_path)
    os.chown(segment_path, 12345, 12345)
    with pytest.raises(dist.DistributedError, match="belongs to uid 12345"):
        ShmRing.attach(segment_path, SLOTS, SLOT_BYTES)


@pytest.mark.parametrize("plant", ["symlink", "file", "directory"])
def test_create_never_opens_what_is_there(monkeypatch, tmp_path, plant):
    name = secrets.token_hex(8)
    path = os.path.join(SHM_DIR, f"tg-{os.getuid()}-{name}")
    monkeypatch.setattr(shm.secrets, "token_hex", lambda n: name)
    target = tmp_path / "victim"
    target.write_bytes(b"keep")
    if plant == "symlink":
        os.symlink(target, path)
    elif plant == "file":
        _regular(path, size=4)
    else:
        os.mkdir(path)
    try:
        with pytest.raises(
            dist.DistributedError, match="refusing to create .*put there on purpose.*Remove it"
        ):
            ShmRing.create(SLOTS, SLOT_BYTES)
        assert target.read_bytes() == b"keep"
        assert os.path.lexists(path)          # not ours to remove
    finally:
        if plant == "directory":
            os.rmdir(path)
        else:
            os.unlink(path)


def test_created_segment_is_private():
    ring = ShmRing.create(SLOTS, SLOT_BYTES)
    try:
        st = os.lstat(ring.path)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == SIZE
        ShmRing.attach(ring.path, SLOTS, SLOT_BYTES).close()
    finally:
        ring.unlink()
        ring.close()


def _attach_fails_on_rank_1(rank: int, world: int) -> dict:
    import time

    import tg.distributed as dist
    from tg.distributed.transport.shm import Segment
    if rank == 1:
        def refuse(*_a, **_k):
            raise dist.DistributedError("[distributed] planted file (test)")
        Segment.attach = staticmethod(refuse)
    t0 = time.monotonic()
    try:
        dist.init_process_group(timeout=60)
        return {"outcome": "ok", "seconds": time.monotonic() - t0}
    except dist.DistributedError as e:
        return {"outcome": str(e), "seconds": time.monotonic() - t0}


@pytest.mark.parametrize("backend", ["shm", "rings"])
def test_a_peer_that_cannot_map_the_segment_fails_its_creator_at_once(backend):
    """The creator used to wait out the whole timeout for the peer's 'mapped' key."""
    from harness import run_ranks
    results = run_ranks(2, _attach_fails_on_rank_1, init=False, backend=backend, timeout=120)
    assert "planted file (test)" in results[1]["outcome"]
    assert "rank 1 could not map the shared memory" in results[0]["outcome"], results[0]
    assert "planted file (test)" in results[0]["outcome"]
    assert results[0]["seconds"] < 10, results[0]
