"""Shared-memory slot rings between ranks on one host (used by the tcp transport for large
payloads; frame headers still travel on the socket, so ordering and failure handling stay there).

Each rank creates one outgoing segment per local peer: a small control block (a counter the
receiver advances as it consumes slots) and N slots. The segment file is unlinked as soon as the
peer has mapped it, so nothing is left in /dev/shm even if a rank is killed with SIGKILL later.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import re
import secrets
import stat
import time
from typing import Callable

import numpy as np

from tg.distributed.errors import CollectiveTimeout, DistributedError

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
CONTROL = 64


def boot_id() -> str:
    """What identifies this host for shared memory: same boot id means same kernel, same /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() + "|" + os.uname().nodename
    except OSError:
        return os.uname().nodename


class Segment:
    """A shared-memory file of this user, mapped: made with `create` by the rank that writes it, mapped
    with `attach` by its peers (each check below), unlinked once every peer has mapped it."""

    def __init__(self, mm: mmap.mmap, path: str):
        self.mm, self.path = mm, path
        self._pointer: ctypes.c_char | None = None

    @staticmethod
    def create(size: int) -> Segment:
        """A new segment under a fresh random name. A full /dev/shm stays an OSError (the caller falls
        back to TCP); something already at the name is a DistributedError (see `_refuse`)."""
        path = os.path.join(SHM_DIR, f"tg-{os.getuid()}-{secrets.token_hex(8)}")
        try:
            # O_EXCL: never open what is there already (with O_CREAT it does not follow a symlink either)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_RDWR, 0o600)
        except FileExistsError:
            raise DistributedError(_refuse(path, "create")) from None
        try:
            os.fchmod(fd, 0o600)              # a default ACL on the folder must not widen it either
            # reserve the pages now: a full /dev/shm is an OSError here, not a SIGBUS on first write
            os.posix_fallocate(fd, 0, size)
            mm = mmap.mmap(fd, size)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return Segment(mm, path)

    @staticmethod
    def attach(path: str, size: int) -> Segment:
        """Map a peer's segment: only a regular file of ours, private, of the expected size, by its exact
        name and never through a symlink; anything else raises DistributedError saying what is there."""
        if not re.fullmatch(re.escape(SHM_DIR) + rf"/tg-{os.getuid()}-[0-9a-f]{{16}}", path):
            raise DistributedError(f"[distributed] refusing to map {path!r}: not a tg shared-memory segment")
        problem = _check(path, size)          # before opening: opening a FIFO or a device has effects
        if problem:
            raise DistributedError(_refuse(path, "map", problem))
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:                  # replaced or removed since _check looked
            raise DistributedError(_refuse(path, "map", _check(path, size) or e.strerror or str(e))) from None
        try:
            st = os.fstat(fd)
            problem = _describe(st, size)     # the file opened is the one checked, still as expected
            if problem:
                raise DistributedError(_refuse(path, "map", problem))
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return Segment(mm, path)

    def address(self) -> int:
        """The mapping's address, for C code (valid until close)."""
        if self._pointer is None:
            self._pointer = ctypes.c_char.from_buffer(self.mm)
        return ctypes.addressof(self._pointer)

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        self._pointer = None
        try:
            self.mm.close()
        except BufferError:     # a numpy view of it is still alive: the mapping goes with it
            pass


class ShmRing:
    """Slots for payloads to one peer: a control block (a counter the receiver advances as it consumes
    slots) and N slots, in one Segment."""

    def __init__(self, seg: Segment, slots: int, slot_bytes: int):
        self.seg, self.slots, self.slot_bytes, self.path = seg, slots, slot_bytes, seg.path
        self.ctrl = np.frombuffer(seg.mm, dtype=np.uint64, count=1)      # [0]: slots consumed so far
        self.data = np.frombuffer(seg.mm, dtype=np.uint8, offset=CONTROL)
        self.produced = 0                                                # sender side only

    @staticmethod
    def create(slots: int, slot_bytes: int) -> ShmRing:
        return ShmRing(Segment.create(CONTROL + slots * slot_bytes), slots, slot_bytes)

    @staticmethod
    def attach(path: str, slots: int, slot_bytes: int) -> ShmRing:
        return ShmRing(Segment.attach(path, CONTROL + slots * slot_bytes), slots, slot_bytes)

    def unlink(self) -> None:
        self.seg.unlink()

    def slot(self, k: int, n: int) -> np.ndarray:
        start = k * self.slot_bytes
        return self.data[start:start + n]

    def put(self, payload: memoryview, alive: Callable[[], bool], timeout: float) -> int:
        """Copy payload into the next free slot (waiting for the receiver to free one); its index."""
        start = time.monotonic()
        spins = 0
        while self.produced - int(self.ctrl[0]) >= self.slots:
            spins += 1
            if spins < 2000:
                time.sleep(0)                  # the receiver frees slots within microseconds: yield
                continue
            if not alive():
                raise DistributedError("peer died")
            if time.monotonic() - start > timeout:
                raise CollectiveTimeout(f"the peer did not consume shared-memory data within {timeout:.0f}s")
            time.sleep(2e-4)
        k = self.produced % self.slots
        self.slot(k, len(payload))[:] = np.frombuffer(payload, dtype=np.uint8)
        self.produced += 1
        return k

    def take(self, k: int, out: memoryview) -> None:
        """Copy slot k out (receiver side) and hand the slot back to the sender."""
        np.frombuffer(out, dtype=np.uint8)[:] = self.slot(k, len(out))
        self.ctrl[0] += 1

    def close(self) -> None:
        del self.ctrl, self.data
        self.seg.close()


def _describe(st: os.stat_result, size: int | None) -> str:
    """What is wrong with a file that should be a segment this user created (of `size` bytes), or ''."""
    if stat.S_ISDIR(st.st_mode):
        return "it is a directory"
    if not stat.S_ISREG(st.st_mode):
        return f"it is not a regular file (mode {stat.filemode(st.st_mode)})"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}, not to this job's user (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"other users may open it (mode {stat.filemode(st.st_mode)}; tg creates segments -rw-------)"
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} hard links (a segment has one)"
    if size is not None and st.st_size != size:
        return f"it holds {st.st_size} bytes (the segment has {size})"
    return ""


def _check(path: str, size: int | None) -> str:
    """What is wrong with what is at `path`, looked at without following a symlink, or ''."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it is gone"
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"it is a symlink (to {os.readlink(path)!r})"
        except OSError:
            return "it is a symlink"
    return _describe(st, size)


def _refuse(path: str, action: str, problem: str = "") -> str:
    """The error for a segment path that is not what tg created: what is there, why it matters, the fix."""
    fix = "Remove it (and find out who created it), then restart; TG_SHM=0 keeps the job off shared memory"
    if action == "create":
        problem = _check(path, None) or "a file of this user is there already"
        return (
            f"[distributed] refusing to create the shared-memory file {path}: {problem}. tg names segments "
            f"with 64 random bits, so it was put there on purpose: another user or process may be attacking "
            f"the job, or it is a stale file from a broken job. {fix}"
        )
    if problem == "it is gone":
        return (
            f"[distributed] cannot map the shared-memory file {path}: it was removed before this rank "
            f"mapped it; the rank that created it died, or something cleaned {SHM_DIR} (systemd's RemoveIPC "
            f"does at logout). Restart the job; TG_SHM=0 keeps the job off shared memory"
        )
    return (
        f"[distributed] refusing to map the shared-memory file {path}: {problem}, so it is not the segment "
        f"a rank of this job created: another user or process may be attacking the job, or it is a stale "
        f"file. {fix}"
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
