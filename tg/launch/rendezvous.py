"""How tglaunch's agents form a job of several nodes, and form it again when a node is lost or joins.

The job runs in rounds. In round n every agent registers (`r{n}/join`, `r{n}/m/{i}`); one of them,
whichever first sees the round complete, closes it with compare_set on `r{n}/closed`: the members in
node-rank order (the previous round's members first, in their order, then newcomers by --node-rank
when given, else by arrival), at most MAX of them, and the job's agreed counts (failure restarts used,
membership changes). A node's rank and its first global rank come from its place in that list.

A round is complete when MAX nodes joined; or, after the first round, when every member of the
previous round either joined or is lost and at least MIN joined; or, in the first round, once MIN
nodes joined and --join-timeout seconds passed without reaching MAX. Only a member of the previous
round closes a later round (the first close sets `started`, which every member carries into a new
store): a node that found the job running, or full, never forms a round of its own. A member is lost
when its agent's ephemeral `alive/{id}` key is gone (its process died: the store drops the keys of a
closed connection at once), or its heartbeat counter `hb/{id}` stood still for TG_ELASTIC_TIMEOUT
seconds (a stopped node), or it hosted the store that was lost, or it never came to a store that
replaced a lost one within that time. A member whose workers finished (`r{n}/done/{id}`) is never lost.

Every agent bumps its heartbeat from a thread for its whole life (also while it stops its workers or
waits to join). While a round runs, each agent watches the next member's heartbeat (a ring: each
counter has one watcher) and ends the round (compare_set on `r{n}/ended`) when that member is lost;
a newcomer ends it when the job has room (a node beyond MAX waits as a spare); a worker failure ends
it through the failure records (`r{n}/failure/{node}`), unless the round had ended already: failures
while a change of nodes stops the workers are its echoes. An agent whose heartbeat thread finds it
was stopped for longer than TG_ELASTIC_TIMEOUT takes itself for lost: it stops its workers and joins
again as a newcomer under a new id.

The store moves with the job. Every agent of an elastic job runs a store server from the start: the
one that bound --master-addr:--master-port hosts the job's store (`active` holds its id), the others a
standby on the address they reach it from. When an agent's store stops answering (its connection
drops, or a reply takes longer than TG_ELASTIC_TIMEOUT) it tries the same store again first (a fault
of its own connection), then the previous round's members' servers in node-rank order, skipping
the lost host, and continues with the first that answers and is `active`, waiting for a live member's
agent to take its server over; when every member before it is gone, its own server becomes the store.
So every agent ends at the live member of lowest node rank. That server starts empty: the round
numbers and counts the agents carry seed it, and it also answers at --master-addr:--master-port when
its host can bind that (on one machine, or the machine that owns the address), where later nodes look
for the job. A stopped store host that wakes up closes its stale store and joins again. The store's
handshake is mutual, so a process that took over a dead server's port gets no agent. Limits: on
several machines, a node started while the master address answers nobody (its machine lost, the store
moved elsewhere) starts a new job there; start replacement nodes with --master-addr/--master-port of
the store's new place, which every agent prints.

Failure restarts and membership changes are counted apart and agreed by all agents (they are in the
closed record): a round that ended because a member was lost, or to admit a newcomer, uses no restart;
one that ended in a worker failure with every member back uses one, and past --max-restarts every
agent stops with that failure. A fixed-size job (MIN = MAX) runs the same rounds without standby
servers; it allows a stall of up to TG_DIST_TIMEOUT (as a collective does) rather than
TG_ELASTIC_TIMEOUT, and a node lost, or a node rank given twice, ends it.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tg import config
from tg.launch.job import Failure, JobSpec, LaunchError, blame, check_port

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


class JobFinished(Exception):
    """The job ended (finished, or gave up) while this agent waited to join it."""


class _Moved(Exception):
    """A newcomer waits in a round the members passed by (they opened a later one): it registers again."""


class _Paused(Exception):
    """This agent was stopped longer than TG_ELASTIC_TIMEOUT: the others count it lost."""


class Rendezvous:
    """One agent's side of the rounds (see the module docstring)."""

    def __init__(self, spec: JobSpec, secret: str, host: str, node_rank: int | None,
                 stop_asked: Callable[[], bool] = lambda: False):
        self.stop_asked = stop_asked
        self.spec, self.secret, self.host = spec, secret.encode(), host
        self.key = f"tglaunch/{spec.run_id}"
        self.min, self.max = spec.min_nodes or spec.nnodes, spec.nnodes
        self.elastic = self.min < self.max
        self.want = -1 if node_rank is None else node_rank
        self.id = self._new_id()
        # an elastic job notices a stopped node (or store) in seconds; a fixed-size one, which cannot go
        # on without the node anyway, allows any stall up to TG_DIST_TIMEOUT, as a collective does
        self.timeout = config.TG_ELASTIC_TIMEOUT if self.elastic else config.TG_DIST_TIMEOUT
        self.server: TCPStore | None = None      # this agent's own store server
        self.store: Any = None                   # the client of the job's store
        self.address = (spec.master_addr, spec.master_port)
        self.last: Round | None = None           # the round this agent is (or was last) a member of
        self.known: list[Member] = []            # the last membership it saw: the stores to fail over to
        self.why = ""                            # why the running round ended, as this agent saw it
        self.failure: Failure | None = None      # the failure that ended it, if one did
        self._beats: dict[str, tuple[int, float]] = {}    # id -> (its heartbeat counter, when it moved)
        self._gone: set[str] = set()  # members whose server was the store that was lost: their agent is gone
        self._on_master = False      # this agent's server answers at --master-addr:--master-port
        self._master_tried = 0.0
        self.paused = False          # set by the heartbeat thread: this process was stopped too long
        self.floor = 0               # the lowest round this agent may register for (a member that came back)
        self._quit = threading.Event()
        self._connect_first()
        threading.Thread(target=self._heartbeat, daemon=True, name="tglaunch-heartbeat").start()

    def _new_id(self) -> str:
        return f"{self.host}-{os.getpid()}-{secrets.token_hex(3)}"

    # ------------------------------------------------------------------ reaching the store
    def _client(self, addr: str, port: int, timeout: float) -> Any:
        from tg.distributed.store import TCPStore
        return TCPStore(addr, port, secret=self.secret, timeout=timeout,
                        reply_timeout=self.timeout if self.elastic else None)

    def _connect_first(self) -> None:
        from tg.distributed.store import StoreError, TCPStore
        addr, port = self.address
        if not port:
            raise LaunchError(f"a job of {self.min}:{self.max} nodes needs a fixed --master-port (0 picks a "
                              f"port only on one node)")
        if self.elastic or self.want == 0:     # an elastic job's store: whoever binds the address first
            if not self.elastic:
                check_port(addr, port)
            try:
                self.server = TCPStore(addr, port, is_server=True, secret=self.secret,
                                       timeout=config.TG_DIST_TIMEOUT,
                                       reply_timeout=self.timeout if self.elastic else None)
                self.store, self._on_master = self.server, True
                self.store.set(f"{self.key}/active", self.id)
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
        """Say this agent is here (its ephemeral alive key goes with its connection); a member also
        carries into a new store that the job started."""
        self.store.set(f"{self.key}/alive/{self.id}", "1", ephemeral=True)
        self.store.set(f"{self.key}/seen/{self.id}", "1")
        if self.last is not None:       # into a new store: the job started, and its next round's number
            self.store.compare_set(f"{self.key}/started", b"", b"1")
            self.store.compare_set(f"{self.key}/round", b"", str(self.last.number + 1).encode())

    def _heartbeat(self) -> None:
        """Bump this agent's counter every TG_ELASTIC_TIMEOUT / 5 for its whole life (also while it stops
        workers or waits to join), and notice when the process itself was stopped for longer than
        TG_ELASTIC_TIMEOUT (a SIGSTOP, a frozen VM): the others count it lost by then."""
        from tg.distributed.store import StoreError
        every = min(self.timeout / 5, 2.0)
        while True:
            slept = time.monotonic()
            if self._quit.wait(every):
                return
            beat = time.monotonic()
            # a wait far longer than asked, or a call far longer than the store may take to answer
            # (TG_ELASTIC_TIMEOUT): the process was stopped meanwhile (said before the next call)
            if self.elastic and beat - slept - every > self.timeout:
                self.paused = True
            try:
                self.store.add(f"{self.key}/hb/{self.id}", 1)
            except (StoreError, OSError, AttributeError):
                pass            # the main thread handles a lost store
            if self.elastic and time.monotonic() - beat > 2 * self.timeout + PROBE:
                self.paused = True

    def me(self) -> Member:
        server = f"{self.server.host}:{self.server.port}" if self.server is not None else ""
        return Member(self.id, self.host, self.spec.nproc_per_node, self.want, server)

    def _fail_over(self, lost: str) -> None:
        """The job's store stopped answering: continue with the store again if the fault was this agent's
        connection alone, else with the live previous member of lowest node rank, once its agent has
        taken the store over (its server says `active`); this agent's own server when every member
        before it is gone. A newcomer also tries --master-addr:--master-port, where a store that moved
        answers when its new host can bind it. Only a member (whose round number and counts seed it) ever
        takes the store over; a newcomer looks for one that is `active`."""
        from tg.distributed.store import StoreError
        own = f"{self.server.host}:{self.server.port}" if self.server is not None else ""
        if lost in (own, f"{self.spec.master_addr}:{self.spec.master_port}") and self.hosting:
            self._activate()        # this agent's own connection to its own server failed: it is still here
            return
        host_ids = {m.id for m in self.known if m.server == lost}
        servers = [m.server for m in self.known if m.server and m.server != lost and m.id not in self._gone]
        master = f"{self.spec.master_addr}:{self.spec.master_port}"
        print(f"[tglaunch] lost the rendezvous store at {lost}; looking for the job's store among "
              f"{servers or [master]}", file=sys.stderr)
        deadline = time.monotonic() + config.TG_DIST_TIMEOUT
        while time.monotonic() < deadline:
            if self.stop_asked():
                raise KeyboardInterrupt
            for server in [lost, *servers, master]:
                if server == own and server != lost and self.last is not None:
                    self._activate()
                    return
                client = self._probe(server) if server != own else None
                if client is None:
                    if server == lost:
                        self._gone |= host_ids      # its host is gone (or stopped): so is that member
                    continue        # the next one
                if self._wait_active(client, server in (lost, master)):
                    try:
                        self._use(client, host_ids)
                        return
                    except StoreError:
                        continue    # it went away as this agent arrived
                client.close(grace=0)
                break               # alive but not the store (yet): look again from the start
            time.sleep(0.2)
        raise LaunchError(f"the rendezvous store at {lost} is gone and no member's server took over within "
                          f"{config.TG_DIST_TIMEOUT:.0f}s; the job cannot go on")

    def _probe(self, server: str) -> Any:
        from tg.distributed.store import StoreError
        addr, _, port = server.rpartition(":")
        try:
            return self._client(addr, int(port), PROBE)
        except (StoreError, OSError, ValueError):
            return None

    def _wait_active(self, client: Any, at_once: bool) -> bool:
        """Whether the server behind client is the job's store, waiting for its agent to take it over
        (it notices the lost store within TG_ELASTIC_TIMEOUT) unless at_once."""
        from tg.distributed.store import StoreError
        until = time.monotonic() + (0 if at_once else 2 * self.timeout)
        try:
            while client.peek(f"{self.key}/active") is None:
                if time.monotonic() >= until:
                    return False
                time.sleep(0.05)
        except StoreError:
            return False
        return True

    def _use(self, client: Any, lost_hosts: set[str]) -> None:
        """Continue with the store behind client; the lost store's host is gone unless that store is its."""
        if client.peek(f"{self.key}/active") not in {i.encode() for i in lost_hosts}:
            self._gone |= lost_hosts     # (another agent's store may answer at the lost address now)
        if self.store is not None and self.store is not self.server:
            self.store.close(grace=0)
        self.store, self.address = client, (client.host, client.port)
        print(f"[tglaunch] the job's store is at {client.host}:{client.port}", file=sys.stderr)
        self._announce()

    def _activate(self) -> None:
        """This agent's own server becomes (or stays) the job's store."""
        assert self.server is not None
        if self.store is not None and self.store is not self.server:
            self.store.close(grace=0)
        self.server.reconnect()      # its own client connection, new if the old one broke
        self.store, self.address = self.server, (self.server.host, self.server.port)
        self._announce()
        self.store.set(f"{self.key}/active", self.id)
        print(f"[tglaunch] the job's store is now here, at {self.server.host}:{self.server.port}",
              file=sys.stderr)
        self._take_master()

    def _still_counted(self) -> bool:
        """This agent was stopped longer than TG_ELASTIC_TIMEOUT: does the job still count it? Alone, yes;
        hosting the store, if another member's heartbeat still moves there; else if its round did not end
        naming it. (A store that stopped answering meanwhile is handled as a lost store.)"""
        from tg.distributed.store import StoreError
        self.paused = False
        if self.last is None or len(self.last.members) == 1:
            return True
        others = [m.id for m in self.last.members if m.id != self.id]
        try:
            if self.hosting:
                before = {i: self.store.add(f"{self.key}/hb/{i}", 0) for i in others}
                until = time.monotonic() + 2 * min(self.timeout / 5, 2.0) + 0.5
                while time.monotonic() < until:
                    time.sleep(0.1)
                    if any(self.store.add(f"{self.key}/hb/{i}", 0) != before[i] for i in others):
                        return True
                return False
            ended = self._get(f"{self.key}/r{self.last.number}/ended")
            me = f"node {self.last.node} ({self.host})"
            return self._has(f"{self.key}/alive/{self.id}") and (ended is None or me not in ended.decode())
        except StoreError:
            return True

    def _rejoin_as_new(self) -> None:
        """This agent was stopped long enough to be counted lost: it comes back as a newcomer under a new
        id, keeping the round number (its workers resume). A store it hosted is stale (the others moved to
        another), so it stops serving it, opens a new standby, and looks for the job's store among the
        others."""
        from tg.distributed.store import StoreError, TCPStore
        if self.last is not None:
            self.floor = self.last.number + 1
        self.paused, self.last, self.why, self.failure = False, None, "", None
        old, self.id = self.id, self._new_id()
        print("[tglaunch] this agent was stopped for longer than TG_ELASTIC_TIMEOUT; it joins again as a "
              "new node", file=sys.stderr)
        if self.hosting:
            assert self.server is not None
            lost, where = f"{self.address[0]}:{self.address[1]}", self.server.host
            self.server.close(grace=0)
            self.server, self.store, self._on_master = None, None, False
            self.server = TCPStore(where, 0, is_server=True, secret=self.secret,
                                   timeout=config.TG_DIST_TIMEOUT, reply_timeout=self.timeout)
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
        if self._on_master or not self.hosting or time.monotonic() - self._master_tried < 1.0:
            return
        assert self.server is not None
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
        """Register for the next round and wait until it closes with this agent in it (a Round with
        give_up set when the job ends instead; JobFinished when it finished without this agent)."""
        from tg.distributed.store import StoreError
        while True:
            try:
                if self.paused and not self._still_counted():
                    raise _Paused
                got = self._join()
            except StoreError:
                self._fail_over(f"{self.address[0]}:{self.address[1]}")
                continue
            except _Paused:
                self._rejoin_as_new()
                continue
            except _Moved:
                continue
            self.last, self.known, self.why, self.failure = got, got.members, "", None
            self._beats.clear()
            return got

    def _target(self) -> int:
        """The round to register for: after this agent's last one; a newcomer the open round, or the one
        after a running one, which it asks to end when the job has room."""
        store, k = self.store, self.key
        floor = self.last.number + 1 if self.last else self.floor
        current = int(store.compare_set(f"{k}/round", b"", str(floor).encode()))
        target = max(floor, current) if self.last is not None else current
        if self.last is None and (closed := self._get(f"{k}/r{current}/closed")) is not None:
            target = current + 1
            self._ask_in(current, json.loads(closed))
        target = max(target, floor)
        while current < target:    # raise the open round number to ours, for newcomers to find
            current = int(store.compare_set(f"{k}/round", str(current).encode(), str(target).encode()))
        return target

    def _ask_in(self, n: int, running: dict) -> None:
        """A newcomer (or a spare) found round n running: it learns the members (whose servers it would
        fail over to) and, when the job has room, asks the round to end so that the next takes it in."""
        self.known = [Member(**m) for m in running["members"]]
        if running.get("give_up"):
            return
        if self._has(f"{self.key}/finished"):
            raise JobFinished("the job finished before this node could join it")
        if not self.elastic:      # a fixed-size job formed without this node: its node rank is taken
            taken = [m["host"] for m in running["members"] if m["want"] == self.want]
            raise LaunchError(f"node rank {self.want} was given to another agent too (host "
                              f"{', '.join(taken) or '?'}), which joined first; give each node its own "
                              f"--node-rank")
        if len(running["members"]) < self.max:
            self.store.compare_set(f"{self.key}/r{n}/ended", b"", b"joined")

    def _register(self, n: int) -> None:
        record = {**asdict(self.me()), "why": self.why, "prev": self.last.number if self.last else -1,
                  "restarts": self.last.restarts if self.last else 0,
                  "changes": self.last.changes if self.last else 0,
                  "failure": self.failure.__dict__ if self.failure else None}
        index = self.store.add(f"{self.key}/r{n}/join", 1) - 1
        self.store.set(f"{self.key}/r{n}/m/{index}", json.dumps(record))

    # Complexity: the rendezvous loop: registering, waiting, deciding the close, spares; one place.
    def _join(self) -> Round:  # noqa: C901
        k = self.key
        n = self._target()
        ended = self._get(f"{k}/r{n - 1}/closed") if self.last is None and n > 0 else None
        if ended is not None and (result := json.loads(ended)).get("give_up"):
            return self._round(n - 1, result)       # the job ended before this node could join it
        self._register(n)
        start = time.monotonic()
        full_at: float | None = None       # when this agent saw MIN nodes in the first round
        seen: dict[int, dict] = {}
        deadline: float | None = start + config.TG_DIST_TIMEOUT
        while True:
            if self.paused and not self._still_counted():
                raise _Paused
            if self.stop_asked():
                raise KeyboardInterrupt
            closed = self._get(f"{k}/r{n}/closed")
            if closed is not None:
                result = json.loads(closed)
                ids = [m["id"] for m in result["members"]]
                if self.id in ids or result.get("give_up"):
                    return self._round(n, result)
                self._ask_in(n, result)     # (a fixed-size job refuses this node here)
                if deadline is not None:    # once: a spare waits for a place as long as the job runs
                    print(f"[tglaunch] round {n} has no place for this node (the job has {len(ids)} of at "
                          f"most {self.max}); it waits as a spare", file=sys.stderr)
                deadline = None
                n += 1
                self._register(n)
                start, full_at, seen = time.monotonic(), None, {}
                continue
            if self._has(f"{k}/finished"):
                raise JobFinished("the job finished while this node waited to join it")
            if self.last is None and int(self._get(f"{k}/round") or b"0") > n:
                raise _Moved        # the members opened a later round than this newcomer waits in
            count = self.store.add(f"{k}/r{n}/join", 0)
            for i in range(len(seen), count):
                got = self._get(f"{k}/r{n}/m/{i}")
                if got is None:
                    break          # registered, record on its way
                seen[i] = json.loads(got)
            latest = {seen[i]["id"]: seen[i] for i in sorted(seen)}   # an agent that registered twice: once
            joined = list(latest.values())
            decision = self._decide(n, joined, start, full_at)
            if decision == "wait-full":
                full_at = full_at or time.monotonic()
            elif decision is not None:
                if self.store.compare_set(f"{k}/r{n}/closed", b"", decision.encode()) == decision.encode():
                    self.store.compare_set(f"{k}/started", b"", b"1")
                continue
            if deadline is not None and time.monotonic() > deadline:
                raise LaunchError(self._short_of(joined))
            time.sleep(0.02)

    def _round(self, n: int, result: dict) -> Round:
        """Round n as its closed record has it (node -1: this agent is not a member, the job gave up)."""
        members = [Member(**m) for m in result["members"]]
        ids = [m.id for m in members]
        node = ids.index(self.id) if self.id in ids else -1
        return Round(n, members, node, result["restarts"], result["changes"], result["why"],
                     result.get("give_up") or {})

    def _short_of(self, joined: list[dict]) -> str:
        names = [m["want"] for m in joined]
        missing = [w for w in range(self.max) if w not in names] if not self.elastic else []
        if missing and self.last is None:
            return (f"nodes {missing} did not join the job within {config.TG_DIST_TIMEOUT:.0f}s "
                    f"(store {self.address[0]}:{self.address[1]})")
        return (f"only {len(joined)} node(s) joined round {self.last.number + 1 if self.last else 0} within "
                f"{config.TG_DIST_TIMEOUT:.0f}s, fewer than the {self.min} the job needs (store "
                f"{self.address[0]}:{self.address[1]})")

    def _lost(self, member_id: str, waited: float, running: bool = False) -> bool:
        """A previous member that did not join this round is lost: it hosted the store that was lost, or
        its agent's connection closed (it died or left), or its heartbeat stood still, or it never reached
        this store and TG_ELASTIC_TIMEOUT passed. A member whose workers finished is never lost: it left
        because the job is done."""
        k = self.key
        if member_id in self._gone:
            return True
        if self._has(f"{k}/finished"):
            return False
        if running and self.last is not None and self._has(f"{k}/r{self.last.number}/done/{member_id}"):
            return False
        if self._has(f"{k}/alive/{member_id}"):
            return self._stale(member_id)
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
        if previous is None and (self._has(f"{self.key}/started") or any(j["prev"] >= 0 for j in joined)):
            return None            # a newcomer never closes a later round: the members that know it do
        if previous is not None and previous.number != n - 1:
            return None            # a former member, left out since: it does not know round n - 1
        old_ids = {m.id for m in previous.members} if previous else set()
        # a newcomer's record whose agent is gone (died, or came back under a new id) counts for nothing
        joined = [j for j in joined if j["id"] in old_ids or j["id"] == self.id or
                  self._has(f"{self.key}/alive/{j['id']}")]
        ids = {j["id"] for j in joined}
        lost: list[str] = []
        if previous is not None:
            waited = time.monotonic() - start
            for m in previous.members:
                if m.id not in ids:
                    if not self._lost(m.id, waited):
                        return None          # still on its way
                    lost.append(m.id)
        if not self.elastic:
            wants = [j["want"] for j in joined]
            twice = sorted({w for w in wants if wants.count(w) > 1})
            if twice:
                hosts = [j["host"] for j in joined if j["want"] == twice[0]]
                return self._give_up(joined, f"node rank {twice[0]} was given to {len(hosts)} agents (hosts "
                                             f"{', '.join(hosts)}); give each node its own --node-rank")
            if lost:
                return self._give_up(joined, f"lost {', '.join(self._name(i) for i in lost)}")
        if len(joined) < self.min:
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
            return None    # a fixed-size job: every node rank once
        restarts = max(j["restarts"] for j in joined)
        changes = max(j["changes"] for j in joined)
        whys = [j["why"] for j in joined if j["why"]]
        new = [j for j in chosen if j["id"] not in old]
        if previous is None:
            why = ""
        elif lost or new:     # a membership change; failures in that round were its echoes
            named = [f"lost {', '.join(self._name(i) for i in lost)}"] if lost else []
            why, changes = "; ".join(named + (["joined"] if new else [])), changes + 1
        elif "failure" in whys:
            why, restarts = "failure", restarts + 1
        else:
            why = whys[0] if whys else "restart"
        record: dict[str, Any] = {"members": [self._public(j) for j in chosen],
                                  "restarts": restarts, "changes": changes, "why": why}
        if why == "failure" and restarts > self.spec.max_restarts:
            record["give_up"] = self._blamed(joined)
        return json.dumps(record)

    @staticmethod
    def _public(record: dict) -> dict:
        return {f: record[f] for f in ("id", "host", "nproc", "want", "server")}

    def _give_up(self, joined: list[dict], why: str) -> str:
        """A fixed-size job cannot go on (a node lost, a node rank given twice): every agent reports it."""
        blamed = self._blamed(joined) or {"rank": -1, "code": 1, "host": self.host, "when": time.time(),
                                          "error": f"LaunchError: {why}"}
        return json.dumps({"members": [self._public(j) for j in joined], "restarts": 0, "changes": 0,
                           "why": why, "give_up": blamed})

    def _blamed(self, joined: list[dict]) -> dict:
        failures = [Failure(**j["failure"]) for j in joined if j.get("failure")]
        return blame(failures).__dict__ if failures else {}

    def _name(self, member_id: str) -> str:
        for i, m in enumerate(self.last.members if self.last else self.known):
            if m.id == member_id:
                return f"node {i} ({m.host})"
        return member_id

    # ------------------------------------------------------------------ while a round runs
    def check(self) -> str | None:
        """Called often while the workers run: watch the next member, and say why the round ended if it
        did (a member lost, a newcomer waiting, this agent stopped too long, the store lost), else None."""
        from tg.distributed.store import StoreError
        assert self.last is not None
        if self.paused and not self._still_counted():
            self.why = "stopped"
            return "this agent was stopped for longer than TG_ELASTIC_TIMEOUT"
        k, n = self.key, self.last.number
        self._take_master()
        try:
            if len(self.last.members) > 1:
                watched = self.last.members[(self.last.node + 1) % len(self.last.members)]
                if self._lost(watched.id, 0.0, running=True):
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

    def after_stop(self, failure: Failure | None) -> None:
        """The round's workers are stopped: get ready for the next join (a failure is carried there,
        unless the round had ended for a change of nodes already: then the failures were its echoes)."""
        from tg.distributed.store import StoreError
        if failure is not None and not self.why:
            self.why, self.failure = "failure", failure
        if self.why == "stopped" or (self.paused and not self._still_counted()):
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
        assert self.last is not None
        n = self.last.number
        self.store.set(f"{self.key}/r{n}/failure/{self.last.node}", json.dumps(failure.__dict__))
        self.store.add(f"{self.key}/r{n}/failed", 1)

    def failures(self) -> list[Failure]:
        """The failures the nodes recorded in the store for the running round (one a node at most)."""
        assert self.last is not None
        n = self.last.number
        if self.store.add(f"{self.key}/r{n}/failed", 0) == 0:
            return []
        keys = (f"{self.key}/r{n}/failure/{node}" for node in range(len(self.last.members)))
        return [Failure(**json.loads(v)) for v in (self._get(key) for key in keys) if v is not None]

    def done(self) -> None:
        """This node's workers all finished."""
        assert self.last is not None
        self.store.set(f"{self.key}/r{self.last.number}/done/{self.id}", "1")

    def all_done(self) -> bool:
        assert self.last is not None
        n = self.last.number
        return all(self._has(f"{self.key}/r{n}/done/{m.id}") for m in self.last.members)

    def finish(self) -> None:
        from tg.distributed.store import StoreError
        try:
            self.store.set(f"{self.key}/finished", "1")
        except StoreError:
            pass

    def leave(self) -> None:
        """The store's host keeps it up until every member of the last round has read the outcome (10s at
        most); then the heartbeat, the connection and this agent's server end."""
        self._quit.set()
        try:
            self.store.set(f"{self.key}/left/{self.id}", "1")
            if self.hosting:      # the members, and whoever waits to join the next round (spares)
                ids = [m.id for m in self.last.members] if self.last else []
                if self.last is not None:
                    nxt = f"{self.key}/r{self.last.number + 1}"
                    records = (self._get(f"{nxt}/m/{i}") for i in range(self.store.add(f"{nxt}/join", 0)))
                    ids += [json.loads(r)["id"] for r in records if r is not None]
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not all(self._has(f"{self.key}/left/{i}") for i in ids):
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
