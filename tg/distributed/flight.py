"""The flight recorder: every rank's last collectives (TG_FLIGHT_RECORDER of them; NCCL's flight
recorder in torch), each with its group, number, kind, dtype, count, bytes, state (issued ->
transferring -> done | failed) and wall-clock times, plus the newest record of each group (so a busy
group cannot push another's last call out of the ring).

The ring is a file under TG_FLIGHT_DIR when the launcher gives one (tglaunch does, per attempt), its
blocks allocated when it is made (a full disk later cannot fault a write) and written in place through a
memory map: a rank killed by SIGKILL or stopped by SIGSTOP leaves it readable, so the launcher reads every
rank's ring when a job fails and prints who is behind (`summary`). Without the folder, or when the file
cannot be made, the ring is in memory (`entries()`, tg.distributed.flight_recorder()).

    >>> r = Recorder(rank=0, slots=4)
    >>> t = r.issue("default", 1, "all_reduce", "float32", 8, 32)
    >>> r.update(t, TRANSFERRING); r.update(t, DONE)
    >>> [(e["seq"], e["kind"], e["state"]) for e in r.entries()]
    [(1, 'all_reduce', 'done')]
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
import time
import warnings
from typing import Any, Iterable

import numpy as np

from tg import config

HEADER = np.dtype([("magic", "S8"), ("rank", "<i8"), ("pid", "<i8"), ("slots", "<i8"), ("next", "<i8"),
                   ("groups", "<i8")])
RECORD = np.dtype([("ticket", "<i8"), ("seq", "<i8"), ("group", "S24"), ("kind", "S16"), ("dtype", "S12"),
                   ("count", "<i8"), ("bytes", "<i8"), ("state", "u1"), ("issued", "<f8"), ("started", "<f8"),
                   ("ended", "<f8")])
STATES = ("empty", "issued", "transferring", "done", "failed")
ISSUED, TRANSFERRING, DONE, FAILED = 1, 2, 3, 4
MAGIC = b"TGFLIGHT"
GROUPS = 16          # groups whose newest record is also kept apart from the ring
# RECORD as struct layouts, which write a record (or a field of one) in a fraction of numpy's time
_RECORD = struct.Struct("<qq24s16s12sqqBddd")
_TICKET, _STATE, _TIME = struct.Struct("<q"), struct.Struct("<B"), struct.Struct("<d")
_AT = {name: RECORD.fields[name][1] for name in ("state", "started", "ended")} if RECORD.fields else {}
assert _RECORD.size == RECORD.itemsize


class Recorder:
    """A ring of `slots` records and the newest of each group's; `path`: the file they live in (made
    here, its blocks allocated), else memory."""

    def __init__(self, rank: int, slots: int, path: str | None = None):
        self.path, self.slots = path, slots
        size = HEADER.itemsize + (GROUPS + slots) * RECORD.itemsize
        buf: Any
        if path is None:
            buf = bytearray(size)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
                buf = self._map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        self._buf = memoryview(buf)
        self.head = np.frombuffer(buf, HEADER, 1, 0)
        self.last = np.frombuffer(buf, RECORD, GROUPS, HEADER.itemsize)
        self.ring = np.frombuffer(buf, RECORD, slots, HEADER.itemsize + GROUPS * RECORD.itemsize)
        self.head[0] = (MAGIC, rank, os.getpid(), slots, 0, GROUPS)
        self._next_at = HEADER.itemsize - 16          # the header's "next" field (then "groups")
        self._last_at, self._ring_at = HEADER.itemsize, HEADER.itemsize + GROUPS * RECORD.itemsize
        self._lock = threading.Lock()
        self._next = 0
        self._group_at: dict[str, int] = {}
        self._live: dict[int, int] = {}       # ticket -> its group's record's offset in `last`, until it ends
        self._bytes: dict[str, bytes] = {}    # names, encoded once

    def _name(self, text: str, size: int) -> bytes:
        got = self._bytes.get(text)
        if got is None:
            got = self._bytes[text] = text.encode()[:size]
        return got

    def issue(self, group: str, seq: int, kind: str, dtype: str, count: int, nbytes: int,
              started: bool = False) -> int:
        """Record a collective as issued (`started`: and transferring from now); returns its ticket."""
        t = time.time()
        state, began = (TRANSFERRING, t) if started else (ISSUED, 0.0)
        with self._lock:
            ticket = self._next
            self._next += 1
            fields = (ticket, seq, self._name(group, 24), self._name(kind, 16), self._name(dtype, 12), count,
                      nbytes, state, t, began, 0.0)
            _RECORD.pack_into(self._buf, self._ring_at + ticket % self.slots * _RECORD.size, *fields)
            g = self._group_at.get(group)
            if g is None and len(self._group_at) < GROUPS:
                g = self._group_at[group] = len(self._group_at)
            if g is not None:
                at = self._last_at + g * _RECORD.size
                _RECORD.pack_into(self._buf, at, *fields)
                self._live[ticket] = at
            _TICKET.pack_into(self._buf, self._next_at, self._next)
        return ticket

    def update(self, ticket: int, state: int) -> None:
        """The collective's new state (TRANSFERRING stamps its start, DONE or FAILED its end), in the ring
        unless a newer record took its slot, and in its group's newest record if it still is that."""
        field = _AT["started" if state == TRANSFERRING else "ended"]
        t = time.time()
        buf = self._buf
        with self._lock:
            at = self._live.get(ticket) if state == TRANSFERRING else self._live.pop(ticket, None)
            for offset in (self._ring_at + ticket % self.slots * _RECORD.size, at):
                if offset is not None and _TICKET.unpack_from(buf, offset)[0] == ticket:
                    _STATE.pack_into(buf, offset + _AT["state"], state)
                    _TIME.pack_into(buf, offset + field, t)

    def entries(self) -> list[dict]:
        return read_records(self.head, self.ring, self.last)


def _as_dict(r: Any, ticket: int) -> dict:
    return {"ticket": ticket, "seq": int(r["seq"]), "group": r["group"].decode(errors="replace"),
            "kind": r["kind"].decode(errors="replace"), "dtype": r["dtype"].decode(errors="replace"),
            "count": int(r["count"]), "bytes": int(r["bytes"]), "state": STATES[min(int(r["state"]), 4)],
            "issued": float(r["issued"]), "started": float(r["started"]), "ended": float(r["ended"])}


def read_records(head: np.ndarray, ring: np.ndarray, last: np.ndarray) -> list[dict]:
    """The ring's records, oldest first, and each group's newest that the ring no longer holds (first), as
    dicts (state by name; times 0.0 when not reached)."""
    n, slots = int(head["next"][0]), len(ring)
    out = []
    for ticket in range(max(0, n - slots), n):
        r = ring[ticket % slots]
        if int(r["ticket"]) == ticket and r["state"] != 0:
            out.append(_as_dict(r, ticket))
    held = {e["ticket"] for e in out}
    older = [_as_dict(r, int(r["ticket"])) for r in last if r["state"] != 0 and int(r["ticket"]) not in held]
    return sorted(older, key=lambda e: e["ticket"]) + out


def read_file(path: str) -> tuple[int, int, list[dict]]:
    """(rank, pid, records) of a ring file a process wrote (alive, stopped or dead)."""
    raw = np.fromfile(path, np.uint8)
    if raw.size < HEADER.itemsize or bytes(raw[:8]) != MAGIC:
        raise ValueError(f"[distributed] {path} is not a flight recorder file (no {MAGIC!r} header)")
    head = raw[:HEADER.itemsize].view(HEADER)
    slots, groups = int(head["slots"][0]), int(head["groups"][0])
    body = raw[HEADER.itemsize:]
    if body.size != (groups + slots) * RECORD.itemsize:
        raise ValueError(f"[distributed] {path}: the header says {groups} + {slots} records, the file holds "
                         f"{body.size} bytes of them")
    records = body.view(RECORD)
    return int(head["rank"][0]), int(head["pid"][0]), read_records(head, records[groups:], records[:groups])


_recorder: Recorder | None = None
_made = False
_in_memory = False     # a forked child's: never a file
_made_lock = threading.Lock()


def recorder(rank: int) -> Recorder | None:
    """This process's recorder (made at its first collective), None when TG_FLIGHT_RECORDER is 0. A ring
    file that cannot be made (no folder, no space) leaves the ring in memory, with a warning."""
    global _recorder, _made
    if _made:
        return _recorder
    with _made_lock:
        if not _made:
            slots, folder = config.TG_FLIGHT_RECORDER, "" if _in_memory else config.TG_FLIGHT_DIR
            if slots > 0:
                path = os.path.join(folder, f"rank{rank}.flight") if folder else None
                try:
                    _recorder = Recorder(rank, slots, path)
                except OSError as e:
                    warnings.warn(f"[distributed] the flight recorder's file {path} could not be made ({e}); "
                                  f"it keeps rank {rank}'s collectives in memory, where tglaunch cannot read "
                                  f"them. Fix: a writable TG_FLIGHT_DIR with space", stacklevel=2)
                    _recorder = Recorder(rank, slots)
            _made = True
    return _recorder


def detach() -> None:
    """In a child forked after init: its own ring, in memory, made at its first collective (the file and
    the records are the parent's)."""
    global _recorder, _made, _in_memory
    _recorder, _made, _in_memory = None, False, True


def summary(rings: dict[int, list[dict]], now: float | None = None,
            expected: Iterable[int] | None = None) -> list[str]:
    """Lines saying, per group, who is behind: the ranks whose last collective is older than the
    newest any rank issued, what that was, and what the others wait in; calls that differ at the newest
    number (the ranks diverged); and `expected` ranks that left no ring at all."""
    now = time.time() if now is None else now
    lines = [f"rank {r} left no flight record (it never reached a collective, or its recorder was off)"
             for r in sorted(set(expected or ()) - set(rings))]
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
        calls = {r: _name(seen[r]) for r in ahead}
        top = seen[ahead[0]]
        for r in behind:
            e = last[r]
            what = "no collective in it" if e is None else \
                f"its last was {_name(e)} ({e['state']}{_ago(e, now)})"
            lines.append(f"rank {r} is behind in group {group}: {what}")
        if len(set(calls.values())) > 1:
            lines.append(f"the calls diverged at #{newest} in group {group}: "
                         + ", ".join(f"rank {r} {c}" for r, c in calls.items()))
        elif not behind:
            lines.append(f"every rank of group {group} reached {_name(top)}")
        for states, verb in ((("issued", "transferring"), "wait in"), (("failed",), "failed in"),
                             (("done",), "finished")):
            rs = [r for r in ahead if seen[r]["state"] in states]
            if rs and (verb != "finished" or behind):
                first = min(seen[r]["issued"] for r in rs)
                since = f" (issued {now - first:.1f}s ago)" if verb == "wait in" else ""
                lines.append(f"{_ranks(rs)} {verb} {_name(seen[rs[0]])}{since}")
    return lines


def _name(e: dict) -> str:
    return f"{e['kind']} #{e['seq']} ({e['dtype']}[{e['count']}])"


def _ago(e: dict, now: float) -> str:
    t = e["ended"] or e["started"] or e["issued"]
    return f", {now - t:.1f}s ago" if t else ""


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))
