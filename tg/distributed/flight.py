"""The flight recorder: every rank's last collectives (TG_FLIGHT_RECORDER of them; NCCL's flight
recorder in torch), each with its group, number, kind, dtype, count, bytes, state (issued ->
transferring -> done | failed) and wall-clock times.

The ring is a file under TG_FLIGHT_DIR when the launcher gives one (tglaunch does, per attempt),
written in place through a memory map: a rank killed by SIGKILL or stopped by SIGSTOP leaves it readable,
so the launcher reads every rank's ring when a job fails and prints who is behind (`summary`). Without
the folder the ring is in memory (`entries()`, tg.distributed.flight_recorder()).

    >>> r = Recorder(rank=0, slots=4)
    >>> t = r.issue("default", 1, "all_reduce", "float32", 8, 32)
    >>> r.update(t, TRANSFERRING); r.update(t, DONE)
    >>> [(e["seq"], e["kind"], e["state"]) for e in r.entries()]
    [(1, 'all_reduce', 'done')]
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from tg import config

HEADER = np.dtype([("magic", "S8"), ("rank", "<i8"), ("pid", "<i8"), ("slots", "<i8"), ("next", "<i8")])
RECORD = np.dtype([("ticket", "<i8"), ("seq", "<i8"), ("group", "S24"), ("kind", "S16"), ("dtype", "S12"),
                   ("count", "<i8"), ("bytes", "<i8"), ("state", "u1"), ("issued", "<f8"), ("started", "<f8"),
                   ("ended", "<f8")])
STATES = ("empty", "issued", "transferring", "done", "failed")
ISSUED, TRANSFERRING, DONE, FAILED = 1, 2, 3, 4
MAGIC = b"TGFLIGHT"


class Recorder:
    """A ring of `slots` records; `path`: the file it lives in (made here), else memory."""

    def __init__(self, rank: int, slots: int, path: str | None = None):
        self.path, self.slots = path, slots
        if path is None:
            self.head = np.zeros(1, HEADER)
            self.ring = np.zeros(slots, RECORD)
        else:
            size = HEADER.itemsize + slots * RECORD.itemsize
            with open(path, "wb") as f:
                f.truncate(size)
            self.head = np.memmap(path, HEADER, "r+", 0, (1,))
            self.ring = np.memmap(path, RECORD, "r+", HEADER.itemsize, (slots,))
        self.head[0] = (MAGIC, rank, os.getpid(), slots, 0)
        self._lock = threading.Lock()
        self._next = 0

    def issue(self, group: str, seq: int, kind: str, dtype: str, count: int, nbytes: int) -> int:
        """Record a collective as issued; returns its ticket (for update)."""
        with self._lock:
            ticket = self._next
            self._next += 1
            self.ring[ticket % self.slots] = (ticket, seq, group.encode()[:24], kind.encode()[:16],
                                              dtype.encode()[:12], count, nbytes, ISSUED, time.time(),
                                              0.0, 0.0)
            self.head["next"][0] = self._next
        return ticket

    def update(self, ticket: int, state: int) -> None:
        """The collective's new state (TRANSFERRING stamps its start, DONE or FAILED its end); nothing
        when its slot was taken by a newer one meanwhile."""
        i = ticket % self.slots
        with self._lock:
            rec = self.ring[i:i + 1]
            if rec["ticket"][0] != ticket:
                return
            rec["state"] = state
            rec["started" if state == TRANSFERRING else "ended"] = time.time()

    def entries(self) -> list[dict]:
        return read_ring(self.head, self.ring)


def read_ring(head: np.ndarray, ring: np.ndarray) -> list[dict]:
    """The records of a ring, oldest first, as dicts (state by name; times 0.0 when not reached)."""
    n, slots = int(head["next"][0]), len(ring)
    out = []
    for ticket in range(max(0, n - slots), n):
        r = ring[ticket % slots]
        if int(r["ticket"]) != ticket or r["state"] == 0:
            continue
        out.append({"ticket": ticket, "seq": int(r["seq"]), "group": r["group"].decode(errors="replace"),
                    "kind": r["kind"].decode(errors="replace"), "dtype": r["dtype"].decode(errors="replace"),
                    "count": int(r["count"]), "bytes": int(r["bytes"]), "state": STATES[int(r["state"])],
                    "issued": float(r["issued"]), "started": float(r["started"]), "ended": float(r["ended"])})
    return out


def read_file(path: str) -> tuple[int, int, list[dict]]:
    """(rank, pid, entries) of a ring file a process wrote (alive, stopped or dead)."""
    raw = np.fromfile(path, np.uint8)
    if raw.size < HEADER.itemsize or bytes(raw[:8]) != MAGIC:
        raise ValueError(f"[distributed] {path} is not a flight recorder file (no {MAGIC!r} header)")
    head = raw[:HEADER.itemsize].view(HEADER)
    slots = int(head["slots"][0])
    ring = raw[HEADER.itemsize:HEADER.itemsize + slots * RECORD.itemsize].view(RECORD)
    if len(ring) != slots:
        raise ValueError(f"[distributed] {path}: header says {slots} slots, the file holds {len(ring)}")
    return int(head["rank"][0]), int(head["pid"][0]), read_ring(head, ring)


_recorder: Recorder | None = None
_made = False
_in_memory = False     # a forked child's: never a file
_made_lock = threading.Lock()


def recorder(rank: int) -> Recorder | None:
    """This process's recorder (made at its first collective), None when TG_FLIGHT_RECORDER is 0."""
    global _recorder, _made
    if _made:
        return _recorder
    with _made_lock:
        if not _made:
            slots, folder = config.TG_FLIGHT_RECORDER, "" if _in_memory else config.TG_FLIGHT_DIR
            if slots > 0:
                path = os.path.join(folder, f"rank{rank}.flight") if folder else None
                _recorder = Recorder(rank, slots, path)
            _made = True
    return _recorder


def detach() -> None:
    """In a child forked after the ring file was made: record in memory from now on (the file is the
    parent's ring, which the child must neither write nor remake)."""
    global _recorder, _in_memory
    _in_memory = True
    if _recorder is not None and _recorder.path is not None:
        _recorder = Recorder(int(_recorder.head["rank"][0]), _recorder.slots)


def summary(rings: dict[int, list[dict]], now: float | None = None) -> list[str]:
    """Lines saying, per group, who is behind: the ranks whose last collective is older than the
    newest any rank issued, what that was, and what the others wait in."""
    now = time.time() if now is None else now
    lines: list[str] = []
    groups = sorted({e["group"] for ring in rings.values() for e in ring})
    for group in groups:
        last = {r: max((e for e in ring if e["group"] == group), key=lambda e: e["seq"], default=None)
                for r, ring in sorted(rings.items())}
        if group != "default":    # a subgroup's members are the ranks that used it
            last = {r: e for r, e in last.items() if e is not None}
        seen = {r: e for r, e in last.items() if e is not None}
        newest = max(e["seq"] for e in seen.values())
        ahead = sorted(r for r, e in seen.items() if e["seq"] == newest)
        behind = sorted(r for r in last if r not in ahead)
        top = seen[ahead[0]]
        waiting = [r for r in ahead if seen[r]["state"] in ("issued", "transferring")]
        if behind:
            for r in behind:
                e = last[r]
                what = "no collective in it" if e is None else \
                    f"its last was {_name(e)} ({e['state']}{_ago(e, now)})"
                lines.append(f"rank {r} is behind in group {group}: {what}")
        else:
            lines.append(f"every rank of group {group} reached {_name(top)}")
        if waiting:
            lines.append(f"{_ranks(waiting)} wait in {_name(top)} (issued "
                         f"{now - min(seen[r]['issued'] for r in waiting):.1f}s ago)")
        failed = [r for r in ahead if seen[r]["state"] == "failed"]
        if failed:
            lines.append(f"{_ranks(failed)} failed in {_name(top)}")
        done = [r for r in ahead if seen[r]["state"] == "done"]
        if done and behind:
            lines.append(f"{_ranks(done)} finished {_name(top)}")
    return lines


def _name(e: dict) -> str:
    return f"{e['kind']} #{e['seq']} ({e['dtype']}[{e['count']}])"


def _ago(e: dict, now: float) -> str:
    t = e["ended"] or e["started"] or e["issued"]
    return f", {now - t:.1f}s ago" if t else ""


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))
