"""Shared-memory slot rings between ranks on one host (used by the tcp transport for large
payloads; frame headers still travel on the socket, so ordering and failure handling stay there).

Each rank creates one outgoing segment per local peer: a small control block (a counter the
receiver advances as it consumes slots) and N slots. The segment file is unlinked as soon as the
peer has mapped it, so nothing is left in /dev/shm even if a rank is killed with SIGKILL later.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
import time
from typing import Callable

import numpy as np

from tg.distributed.errors import DistributedError

SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
CONTROL = 64


def boot_id() -> str:
    """What identifies this host for shared memory: same boot id means same kernel, same /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() + "|" + os.uname().nodename
    except OSError:
        return os.uname().nodename


class ShmRing:
    def __init__(self, mm: mmap.mmap, slots: int, slot_bytes: int, path: str):
        self.mm, self.slots, self.slot_bytes, self.path = mm, slots, slot_bytes, path
        self.ctrl = np.frombuffer(mm, dtype=np.uint64, count=1)          # [0]: slots consumed so far
        self.data = np.frombuffer(mm, dtype=np.uint8, offset=CONTROL)
        self.produced = 0                                                # sender side only

    @staticmethod
    def create(slots: int, slot_bytes: int) -> ShmRing:
        path = os.path.join(SHM_DIR, f"tg-{os.getuid()}-{secrets.token_hex(8)}")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # reserve the pages now: a full /dev/shm is an OSError here, not a SIGBUS on first write
            os.posix_fallocate(fd, 0, CONTROL + slots * slot_bytes)
            mm = mmap.mmap(fd, CONTROL + slots * slot_bytes)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        return ShmRing(mm, slots, slot_bytes, path)

    @staticmethod
    def attach(path: str, slots: int, slot_bytes: int) -> ShmRing:
        """Map a peer's segment; only a regular file of ours, of the expected size, by its exact name."""
        if not re.fullmatch(re.escape(SHM_DIR) + rf"/tg-{os.getuid()}-[0-9a-f]{{16}}", path):
            raise DistributedError(f"[distributed] refusing to map {path!r}: not a tg shared-memory segment")
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size != CONTROL + slots * slot_bytes:
                raise DistributedError(f"[distributed] refusing to map {path!r}: wrong owner, type or size")
            mm = mmap.mmap(fd, CONTROL + slots * slot_bytes)
        finally:
            os.close(fd)
        return ShmRing(mm, slots, slot_bytes, path)

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

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
                raise DistributedError(f"the peer did not consume shared-memory data within {timeout:.0f}s")
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
        try:
            self.mm.close()
        except BufferError:
            pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
