"""How tglaunch's agents form a job of several nodes, and form it again when a node is lost or joins.

The job runs in rounds. In round n every agent registers (`r{n}/join`, `r{n}/m/{i}`); one of them,
whichever first sees the round complete, closes it with compare_set on `r{n}/closed`: the members in
node-rank order (the previous round's members first, in their order, then newcomers by --node-rank
when given, else by arrival), at most MAX of them, and the job's agreed counts (failure restarts used,
membership changes). A node's rank and its first global rank come from its place in that list.

A round is complete when MAX nodes joined; or, after the first round, when every member of the
previous round either joined or is lost and at least MIN joined; or, in the first round, once MIN
nodes joined and --join-timeout seconds passed without reaching MAX. A member is lost when its
agent's ephemeral `alive/{id}` key is gone (its process died: the store drops the keys of a closed
connection at once), or its heartbeat counter `hb/{id}` stood still for TG_ELASTIC_TIMEOUT seconds
(a stopped node), or it never came to a store that replaced a lost one within that time.

While a round runs, each agent bumps its heartbeat and watches the next member's (a ring: each
counter has one watcher), and ends the round (compare_set on `r{n}/ended`) when that member is lost
or a newcomer waits and the round has room; a worker failure ends it through the failure records
(`r{n}/failure/{node}`). An agent that finds it was stopped for longer than TG_ELASTIC_TIMEOUT
(a gap in its own loop) takes itself for lost: it stops its workers and joins again as a newcomer.

The store moves with the job. Every agent of an elastic job runs a store server from the start: the
one that bound --master-addr:--master-port hosts the job's store, the others a standby on the address
they reach it from. When the store's host is lost (its connection drops, or it stops answering within
TG_ELASTIC_TIMEOUT), every agent tries the previous round's members' servers in node-rank order,
skipping the lost host, and continues with the first that answers: the live member of lowest node
rank, the same for everyone. That server starts empty; the round numbers and counts the agents carry
seed it. A stopped store host that wakes up closes its own server, so nobody keeps a stale store.

Failure restarts and membership changes are counted apart and agreed by all agents (they are in the
closed record): a round that ended because a member was lost, or to admit a newcomer, uses no restart;
one that ended in a worker failure with every member back uses one, and past --max-restarts every
agent stops with that failure. A fixed-size job (MIN = MAX) runs the same rounds, but a lost node
ends it.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tg import config
from tg.launch.job import Failure, JobSpec, LaunchError, check_port

if TYPE_CHECKING:
    from tg.distributed.store import TCPStore

PROBE = 2.0       # seconds to reach a candidate store server while looking for the job's store


@dataclass
class Member:
    id: str
    host: str
    nproc: int
    want: int = -1        # the node rank asked for (--node-rank), -1: any
    server: str = ""      # "addr:port" of this agent's store server ("" on a fixed-size job's other nodes)


@dataclass
class Round:
    number: int
    members: list[Member]
    node: int             # this agent's node rank: its place in members
    restarts: int = 0     # failure restarts the job used before this round
    changes: int = 0      # membership changes before this round
    why: str = ""         # why the previous round ended (what the workers of this one are told)
    give_up: dict[str, Any] = field(default_factory=dict)   # the failure that used up the budget

    @property
    def base_rank(self) -> int:
        return sum(m.nproc for m in self.members[:self.node])

    @property
    def world(self) -> int:
        return sum(m.nproc for m in self.members)

    def ids(self) -> list[str]:
        return [m.id for m in self.members]


class Rendezvous:
    """One agent's side of the rounds (see the module docstring)."""

    def __init__(self, spec: JobSpec, secret: str, host: str, node_rank: int | None,
                 stop_asked: Callable[[], bool] = lambda: False):
        self.stop_asked = stop_asked
        self.spec, self.secret, self.host = spec, secret.encode(), host
        self.key = f"tglaunch/{spec.run_id}"
        self.min, self.max = spec.min_nodes, spec.nnodes
        self.elastic = self.min < self.max
        self.want = -1 if node_rank is None else node_rank
        self.id = f"{host}-{os.getpid()}-{secrets.token_hex(3)}"
        self.timeout = config.TG_ELASTIC_TIMEOUT
        self.server: TCPStore | None = None      # this agent's own store server
        self.store: Any = None                   # the client of the job's store
        self.address = (spec.master_addr, spec.master_port)
        self.last: Round | None = None           # the round this agent is (or was last) a member of
        self.known: list[Member] = []            # the last membership it saw: the stores to fail over to
        self.why = ""                            # why the running round ended, as this agent saw it
        self.failure: Failure | None = None      # the failure that ended it, if one did
        self._beat_at = self._tick_at = time.monotonic()
        self._beats: dict[str, tuple[int, float]] = {}    # id -> (its heartbeat counter, when it moved)
        self._gone: set[str] = set()  # members whose server was the store that was lost: their agent is gone
        self._on_master = False      # this agent's server answers at --master-addr:--master-port
        self._master_tried = 0.0
        self._connect_first()

    # ------------------------------------------------------------------ reaching the store
    def _client(self, addr: str, port: int, timeout: float) -> Any:
        from tg.distributed.store import TCPStore
        return TCPStore(addr, port, secret=self.secret, timeout=timeout, reply_timeout=self.timeout)

    def _connect_first(self) -> None:
        from tg.distributed.store import StoreError, TCPStore
        addr, port = self.address
        if not port:
            raise LaunchError(f"a job of {self.min}:{self.max} nodes needs a fixed --master-port (0 picks a "
                              f"port only on one node)")
        hosting = self.want == 0 if not self.elastic else True
        if hosting:
            if not self.elastic:
                check_port(addr, port)
            try:
                self.server = TCPStore(addr, port, is_server=True, secret=self.secret,
                                       timeout=config.TG_DIST_TIMEOUT, reply_timeout=self.timeout)
                self.store, self._on_master = self.server, True
            except StoreError:
                if not self.elastic:
                    raise
        if self.store is None:      # another agent hosts it (or this host does not own master_addr)
            try:
                self.store = self._client(addr, port, config.TG_DIST_TIMEOUT)
            except (StoreError, OSError) as e:
                raise LaunchError(f"could not reach the rendezvous store at {addr}:{port}: {e}") from None
            if self.elastic:        # a standby, on the address this host reaches the store from
                self.server = TCPStore(self.store.local_address, 0, is_server=True, secret=self.secret,
                                       timeout=config.TG_DIST_TIMEOUT, reply_timeout=self.timeout)
        self._announce()

    def _announce(self) -> None:
        self.store.set(f"{self.key}/alive/{self.id}", "1", ephemeral=True)
        self.store.set(f"{self.key}/seen/{self.id}", "1")

    def me(self) -> Member:
        server = f"{self.server.host}:{self.server.port}" if self.server is not None else ""
        return Member(self.id, self.host, self.spec.nproc_per_node, self.want, server)

    def _fail_over(self, lost: str) -> None:
        """The store's host is gone: continue with the first previous member whose server answers."""
        from tg.distributed.store import StoreError
        candidates = [m for m in self.known if m.server and m.server != lost]
        self._gone |= {m.id for m in self.known if m.server == lost}
        print(f"[tglaunch] lost the rendezvous store at {lost}; looking for the next one among "
              f"{[m.server for m in candidates]}", file=sys.stderr)
        for m in candidates:
            if m.id == self.id:
                assert self.server is not None
                self.store = self.server
                self._take_master()
                break
            addr, _, port = m.server.rpartition(":")
            try:
                self.store = self._client(addr, int(port), PROBE)
                break
            except (StoreError, OSError):
                continue
        else:
            raise LaunchError(f"the rendezvous store at {lost} is gone and no other member's server "
                              f"answers; the job cannot go on")
        self.address = (self.store.host, self.store.port)
        print(f"[tglaunch] the job's store is now at {self.store.host}:{self.store.port}", file=sys.stderr)
        self._announce()

    def _rejoin_as_new(self) -> None:
        """This agent was stopped long enough to be counted lost: it comes back as a newcomer under a new
        id. A store it hosted is stale (the others moved to another), so it stops serving it and looks
        for the job's store among the others."""
        from tg.distributed.store import StoreError
        old, self.last = self.id, None
        self.id = f"{self.host}-{os.getpid()}-{secrets.token_hex(3)}"
        if self.server is not None and self.store is self.server:
            lost = f"{self.address[0]}:{self.address[1]}"
            self.server.close(grace=0)
            self.server = None
            self._fail_over(lost)
            return
        try:
            self.store.delete(f"{self.key}/alive/{old}")
            self._announce()
        except StoreError:
            self._fail_over(f"{self.address[0]}:{self.address[1]}")

    def _take_master(self) -> None:
        """The store moved here: answer at --master-addr:--master-port too when this host can bind it (its
        old host is gone from this machine), so a node that joins later, knowing only that address,
        finds this job rather than starting a new one there. Tried again while it is taken (by a stopped
        old host, until it wakes and lets go)."""
        if self._on_master or self.server is None or time.monotonic() - self._master_tried < 1.0:
            return
        self._master_tried = time.monotonic()
        self._on_master = self.server.listen_also(self.spec.master_addr, self.spec.master_port)

    @property
    def store_address(self) -> tuple[str, int]:
        return self.address

    @property
    def hosting(self) -> bool:
        """This agent's server is the job's store."""
        return self.server is not None and self.store is self.server

    # ------------------------------------------------------------------ the rounds
    def join(self) -> Round:
        """Register for the next round and wait until it closes with this agent in it."""
        from tg.distributed.store import StoreError
        while True:
            try:
                got = self._join()
            except StoreError:
                self._fail_over(f"{self.address[0]}:{self.address[1]}")
                continue
            self.last, self.known, self.why, self.failure = got, got.members, "", None
            self._beat_at = self._tick_at = time.monotonic()
            self._beats.clear()
            return got

    def _target(self) -> int:
        """The round to register for: after this agent's last one; a newcomer (or a spare) the open
        round, or the one after a running one, which it asks to end when there is room."""
        store, k = self.store, self.key
        floor = self.last.number + 1 if self.last else 0
        held = store.compare_set(f"{k}/round", b"", str(floor).encode())
        current = int(held)
        if self.last is not None:
            target = max(floor, current)
        elif (closed := self._get(f"{k}/r{current}/closed")) is not None:
            target = current + 1
            running = json.loads(closed)
            if len(running["members"]) < self.max and not running.get("give_up"):
                store.compare_set(f"{k}/r{current}/ended", b"", b"joined")
        else:
            target = current
        while current < target:    # raise the open round number to ours, for newcomers to find
            current = int(store.compare_set(f"{k}/round", str(current).encode(), str(target).encode()))
        return target

    # Complexity: the rendezvous loop: registering, waiting, deciding the close, spares; one place.
    def _join(self) -> Round:  # noqa: C901
        store, k = self.store, self.key
        n = self._target()
        record = {**asdict(self.me()), "why": self.why, "prev": self.last.number if self.last else -1,
                  "restarts": self.last.restarts if self.last else 0,
                  "changes": self.last.changes if self.last else 0,
                  "failure": self.failure.__dict__ if self.failure else None}
        index = store.add(f"{k}/r{n}/join", 1) - 1
        store.set(f"{k}/r{n}/m/{index}", json.dumps(record))
        start = time.monotonic()
        full_at: float | None = None       # when this agent saw MIN nodes in the first round
        seen: dict[int, dict] = {}
        deadline = start + config.TG_DIST_TIMEOUT
        while True:
            closed = self._get(f"{k}/r{n}/closed")
            if closed is not None:
                result = json.loads(closed)
                ids = [m["id"] for m in result["members"]]
                if self.id in ids:
                    members = [Member(**m) for m in result["members"]]
                    return Round(n, members, ids.index(self.id), result["restarts"], result["changes"],
                                 result["why"], result.get("give_up") or {})
                if self._has(f"{k}/finished"):
                    raise LaunchError("the job finished before this node could join it")
                n += 1             # a spare: the round filled up without us; wait for the next
                index = store.add(f"{k}/r{n}/join", 1) - 1
                store.set(f"{k}/r{n}/m/{index}", json.dumps(record))
                start, full_at, seen = time.monotonic(), None, {}
                continue
            count = store.add(f"{k}/r{n}/join", 0)
            for i in range(len(seen), count):
                got = self._get(f"{k}/r{n}/m/{i}")
                if got is None:
                    break          # registered, record on its way
                seen[i] = json.loads(got)
            joined = [seen[i] for i in sorted(seen)]
            decision = self._decide(n, joined, start, full_at)
            if decision == "wait-full":
                full_at = full_at or time.monotonic()
            elif decision is not None:
                store.compare_set(f"{k}/r{n}/closed", b"", decision.encode())
                continue
            if time.monotonic() > deadline:
                raise LaunchError(self._short_of(joined))
            if self.stop_asked():
                raise KeyboardInterrupt
            time.sleep(0.02)

    def _short_of(self, joined: list[dict]) -> str:
        want = [m.want for m in self.last.members] if self.last else []
        names = [m["want"] for m in joined]
        missing = [w for w in range(self.max) if w not in names] if not self.elastic else []
        if missing and not want:
            return (f"nodes {missing} did not join the job within {config.TG_DIST_TIMEOUT:.0f}s "
                    f"(store {self.address[0]}:{self.address[1]})")
        return (f"only {len(joined)} node(s) joined round {self.last.number + 1 if self.last else 0} within "
                f"{config.TG_DIST_TIMEOUT:.0f}s, fewer than the {self.min} the job needs (store "
                f"{self.address[0]}:{self.address[1]})")

    def _lost(self, member_id: str, waited: float) -> bool:
        """A previous member that did not join this round is lost: it hosted the store that was lost, or
        its agent's connection closed (it died or left), or its heartbeat stood still, or it never reached
        this store and TG_ELASTIC_TIMEOUT passed."""
        k = self.key
        if member_id in self._gone:
            return True
        if self._has(f"{k}/alive/{member_id}"):
            return False if not self._stale(member_id) else True
        return self._has(f"{k}/seen/{member_id}") or waited > self.timeout

    def _stale(self, member_id: str) -> bool:
        """Its heartbeat counter stood still for TG_ELASTIC_TIMEOUT, as this agent saw it."""
        value = self.store.add(f"{self.key}/hb/{member_id}", 0)
        now = time.monotonic()
        last_value, moved = self._beats.get(member_id, (-1, now))
        if value != last_value:
            self._beats[member_id] = (value, now)
            return False
        return now - moved > self.timeout

    # Complexity: the close rule of the module docstring, a branch per case.
    def _decide(self, n: int, joined: list[dict], start: float, full_at: float | None) -> str | None:  # noqa: C901
        """The closed record for round n when it is complete (see the module docstring), "wait-full"
        when the first round has MIN nodes and waits for more, else None."""
        previous = self.last
        if previous is None and any(j["prev"] >= 0 for j in joined):
            return None            # a newcomer never closes a later round: the members that know it do
        ids = {j["id"] for j in joined}
        lost: list[str] = []
        if previous is not None:
            waited = time.monotonic() - start
            for m in previous.members:
                if m.id not in ids:
                    if not self._lost(m.id, waited):
                        return None          # still on its way
                    lost.append(m.id)
        if len(joined) < self.min:
            if previous is not None and lost and not self.elastic:
                return self._give_up(n, joined, lost)
            return None
        if previous is None and len(joined) < self.max:
            if full_at is None:
                return "wait-full"
            if time.monotonic() - full_at < self.spec.join_timeout:
                return None
        old = {m.id: i for i, m in enumerate(previous.members)} if previous else {}
        order = sorted(range(len(joined)), key=lambda i: (
            (0, old[joined[i]["id"]], 0) if joined[i]["id"] in old else
            (1, joined[i]["want"] if joined[i]["want"] >= 0 else self.max, i)))
        chosen = [joined[i] for i in order][:self.max]
        if not self.elastic and sorted(j["want"] for j in chosen) != list(range(self.max)):
            return None    # a fixed-size job: every node rank once (a duplicate waits for the timeout)
        restarts = max(j["restarts"] for j in joined)
        changes = max(j["changes"] for j in joined)
        whys = [j["why"] for j in joined if j["why"]]
        new = [j for j in chosen if j["id"] not in old]
        if previous is None:
            why = ""
        elif lost:
            why, changes = f"lost {', '.join(self._name(i) for i in lost)}", changes + 1
            if not self.elastic:
                return self._give_up(n, joined, lost)
        elif "failure" in whys:
            why, restarts = "failure", restarts + 1
        elif new:
            why, changes = "joined", changes + 1
        else:
            why = whys[0] if whys else "restart"
        record: dict[str, Any] = {"members": [{f: j[f] for f in ("id", "host", "nproc", "want", "server")}
                                              for j in chosen],
                                  "restarts": restarts, "changes": changes, "why": why}
        if why == "failure" and restarts > self.spec.max_restarts:
            record["give_up"] = self._blamed(joined)
        return json.dumps(record)

    def _give_up(self, n: int, joined: list[dict], lost: list[str]) -> str:
        """A fixed-size job lost a node: it ends, every agent reporting the failure."""
        blamed = self._blamed(joined) or {"rank": -1, "code": 1, "host": "?", "when": time.time(),
                                           "error": f"node {self._name(lost[0])} was lost"}
        members = [{f: j[f] for f in ("id", "host", "nproc", "want", "server")} for j in joined]
        return json.dumps({"members": members, "restarts": 0, "changes": 0,
                           "why": f"lost {', '.join(self._name(i) for i in lost)}", "give_up": blamed})

    def _blamed(self, joined: list[dict]) -> dict:
        from tg.launch.agent import blame
        failures = [Failure(**j["failure"]) for j in joined if j.get("failure")]
        return blame(failures).__dict__ if failures else {}

    def _name(self, member_id: str) -> str:
        if self.last is not None:
            for i, m in enumerate(self.last.members):
                if m.id == member_id:
                    return f"node {i} ({m.host})"
        return member_id

    # ------------------------------------------------------------------ while a round runs
    def check(self) -> str | None:
        """Called often while the workers run: beat, watch the next member, and say why the round
        ended if it did (a member lost, a newcomer waiting, this agent stopped too long, the store
        lost), else None."""
        from tg.distributed.store import StoreError
        assert self.last is not None
        now = time.monotonic()
        gap, self._tick_at = now - self._tick_at, now
        if gap > self.timeout:
            self.why = "stopped"
            return f"this agent was stopped for {gap:.0f}s (more than TG_ELASTIC_TIMEOUT)"
        k, n = self.key, self.last.number
        if self.hosting:
            self._take_master()
        try:
            if now - self._beat_at >= self.timeout / 5:
                self._beat_at = now
                self.store.add(f"{k}/hb/{self.id}", 1)
                if self.elastic and len(self.last.members) > 1:
                    watched = self.last.members[(self.last.node + 1) % len(self.last.members)]
                    if self._lost(watched.id, 0.0):
                        why = f"lost {self._name(watched.id)}"
                        self.store.compare_set(f"{k}/r{n}/ended", b"", why.encode())
            ended = self._get(f"{k}/r{n}/ended")
        except StoreError:
            self.why = "store lost"
            return f"lost the rendezvous store at {self.address[0]}:{self.address[1]}"
        if ended is None:
            return None
        self.why = ended.decode()
        return self.why

    def end(self, why: str) -> None:
        from tg.distributed.store import StoreError
        assert self.last is not None
        try:
            self.store.compare_set(f"{self.key}/r{self.last.number}/ended", b"", why.encode())
        except StoreError:
            pass

    def after_stop(self, failure: Failure | None) -> None:
        """The round's workers are stopped: get ready for the next join (a failure is carried there)."""
        from tg.distributed.store import StoreError
        if failure is not None:
            self.why, self.failure = "failure", failure
        if self.why == "stopped":
            self._rejoin_as_new()
        elif self.why == "store lost":
            self._fail_over(f"{self.address[0]}:{self.address[1]}")
        else:
            try:
                self._announce()
            except StoreError:
                self._fail_over(f"{self.address[0]}:{self.address[1]}")

    # ------------------------------------------------------------------ failures and the end
    def publish(self, failure: Failure) -> None:
        n = self.last.number if self.last else 0
        self.store.set(f"{self.key}/r{n}/failure/{self.last.node if self.last else 0}",
                       json.dumps(failure.__dict__))
        self.store.add(f"{self.key}/r{n}/failed", 1)

    def failures(self) -> list[Failure]:
        """The failures the nodes recorded in the store for the running round (one a node at most)."""
        assert self.last is not None
        n = self.last.number
        if self.store.add(f"{self.key}/r{n}/failed", 0) == 0:
            return []
        keys = (f"{self.key}/r{n}/failure/{node}" for node in range(len(self.last.members)))
        return [Failure(**json.loads(v)) for v in (self._get(key) for key in keys) if v is not None]

    def done(self) -> int:
        """Count this node's workers done; returns how many nodes are."""
        assert self.last is not None
        return self.store.add(f"{self.key}/r{self.last.number}/done", 1)

    def done_count(self) -> int:
        assert self.last is not None
        return self.store.add(f"{self.key}/r{self.last.number}/done", 0)

    def finish(self) -> None:
        from tg.distributed.store import StoreError
        try:
            self.store.set(f"{self.key}/finished", "1")
        except StoreError:
            pass

    def leave(self) -> None:
        """The store's host keeps it up until every member has read the outcome (10s at most)."""
        left = f"{self.key}/left"
        members = len(self.last.members) if self.last else 1
        try:
            self.store.add(left, 1)
            if self.server is not None and self.store is self.server:
                deadline = time.monotonic() + 10
                while self.store.add(left, 0) < members and time.monotonic() < deadline:
                    time.sleep(0.02)
        except Exception:  # noqa: BLE001 - the store host may be gone already
            pass
        if self.store is not None and self.store is not self.server:
            self.store.close(grace=0)
        if self.server is not None:
            self.server.close(grace=0)

    # ------------------------------------------------------------------ small helpers
    def _get(self, key: str) -> bytes | None:
        return self.store.peek(key)

    def _has(self, key: str) -> bool:
        return self._get(key) is not None
