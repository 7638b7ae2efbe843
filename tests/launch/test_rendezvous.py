"""The rendezvous rounds of tglaunch's agents (tg/launch/rendezvous.py), driven in one process: each agent
a Rendezvous on a thread, on localhost, with short timeouts. The whole jobs (agents, workers, signals) are
in tests/launch/test_elastic.py; these pin the rules where races decide: who may close a round, a node
the job has no place for, a false alarm about the store, a node rank given twice, a slow member."""
from __future__ import annotations

import re
import threading
import time

import pytest
from ports import free_port

from tg.launch.job import Failure, JobSpec, LaunchError
from tg.launch.rendezvous import JobFinished, Rendezvous, Round


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setenv("TG_ELASTIC_TIMEOUT", "1")
    monkeypatch.setenv("TG_DIST_TIMEOUT", "10")


def spec(nodes: str, **kw) -> JobSpec:
    low, _, high = nodes.partition(":")
    made = JobSpec(nnodes=int(high or low), min_nodes=int(low), master_port=free_port(), run_id="t", **kw)
    made.fix_nodes()
    return made


def agents(job: JobSpec, count: int, wants: list[int | None] | None = None) -> list[Rendezvous]:
    made = []
    for i in range(count):
        made.append(Rendezvous(job, "secret", "127.0.0.1", None if wants is None else wants[i]))
        time.sleep(0.02)      # the first binds the master address
    return made


def join_all(rdzvs: list[Rendezvous], timeout: float = 15) -> list[Round | BaseException]:
    out: list[Round | BaseException] = [RuntimeError("did not return")] * len(rdzvs)

    def one(i: int) -> None:
        try:
            out[i] = rdzvs[i].join()
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            out[i] = e
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(rdzvs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return out


def leave(rdzvs: list[Rendezvous]) -> None:
    """Every agent leaves at once (the store's host waits for the others' word, 10s at most)."""
    threads = [threading.Thread(target=r.leave) for r in rdzvs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)


def test_a_spare_never_forms_a_round_of_its_own() -> None:
    """A node arriving at a full job waits as a spare (it must not start a second job beside it), and is
    taken in when a member leaves."""
    job = spec("1:2", join_timeout=0.2)
    a, b = agents(job, 2)
    first = join_all([a, b])
    assert [r.world for r in first] == [2, 2]
    c = agents(job, 1)[0]
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(join_all([c], timeout=20)[0]), daemon=True)
    waiter.start()
    time.sleep(3 * job.join_timeout + 1.5)          # long past the join and elastic timeouts
    assert got == [], f"the spare formed a round while the job ran: {got}"
    b.leave()                                        # a member goes: its agent's connection closes
    deadline = time.monotonic() + 5
    while a.check() is None:                         # the next member notices, the round ends
        assert time.monotonic() < deadline, "the member that left was not noticed"
        time.sleep(0.05)
    a.after_stop(None)
    nxt = join_all([a])[0]
    waiter.join(15)
    assert isinstance(nxt, Round) and nxt.world == 2
    assert re.fullmatch(r"lost node [01] \(127\.0\.0\.1\); joined", nxt.why), nxt.why
    assert got and isinstance(got[0], Round) and got[0].ids() == nxt.ids()
    assert (nxt.restarts, nxt.changes) == (0, 1)
    leave([a, c])


def test_one_agents_false_alarm_about_the_store_does_not_split_the_job() -> None:
    """One agent's connection to a healthy store breaks: it comes back to the same store, and the job
    stays one (nobody forms a round at another store)."""
    job = spec("1:3", join_timeout=0.2)
    rdzvs = agents(job, 3)
    join_all(rdzvs)
    store = rdzvs[0].store_address
    victim = next(r for r in rdzvs if not r.hosting)
    victim.store._sock.close()                     # as if one reply had taken too long
    victim.store._broken = "a test broke it"
    assert victim.check() is not None and victim.why == "store lost"
    victim.after_stop(None)
    assert victim.store_address == store
    victim.store.compare_set(f"{victim.key}/r0/ended", b"", b"restart")
    for r in rdzvs:
        if r is not victim:
            assert r.check() is not None
            r.after_stop(None)
    rounds = join_all(rdzvs)
    assert all(isinstance(r, Round) and r.number == 1 and r.world == 3 for r in rounds), rounds
    assert {r.store_address for r in rdzvs} == {store}
    until = time.monotonic() + 2.5                 # past TG_ELASTIC_TIMEOUT: nobody is taken for lost
    while time.monotonic() < until:
        assert [r.check() for r in rdzvs] == [None] * 3
        time.sleep(0.1)
    leave(rdzvs)


def test_the_store_hosts_own_false_alarm_keeps_it_hosting() -> None:
    job = spec("1:2", join_timeout=0.2)
    rdzvs = agents(job, 2)
    join_all(rdzvs)
    host = next(r for r in rdzvs if r.hosting)
    host.store._sock.close()                       # its own reply came late (a loaded machine)
    host.store._broken = "a test broke it"
    assert host.check() is not None
    host.after_stop(None)
    assert host.hosting and host.id not in host._gone
    host.store.set("still", "here")
    leave(rdzvs)


def test_an_agent_that_registered_twice_counts_once() -> None:
    """A store call failing right after an agent registered makes it register again: a fixed-size job
    must not read that as a node rank given twice."""
    job = spec("2", max_restarts=3)
    rdzvs = agents(job, 2, wants=[0, 1])
    join_all(rdzvs)
    failure = Failure(rank=0, code=1, host="h", when=time.time())
    for r in rdzvs:
        r.after_stop(failure)
        r._register(1)                             # the first registration of the next round, again
    rounds = join_all(rdzvs)
    assert all(isinstance(r, Round) and not r.give_up and r.world == 2 and r.restarts == 1 for r in rounds)
    leave(rdzvs)


def test_a_member_that_finished_and_then_died_is_lost() -> None:
    job = spec("1:3", join_timeout=0.2, max_restarts=3)
    rdzvs = agents(job, 3)
    join_all(rdzvs)
    host = next(r for r in rdzvs if r.hosting)
    done, failed = [r for r in rdzvs if r is not host]
    done.done()                                    # its workers finished; another node's failed
    for r in rdzvs:
        r.after_stop(Failure(rank=0, code=1, host="h", when=time.time()))
    done._quit.set()                               # then its agent died before the next round
    done.store.close(grace=0)
    done.server.close(grace=0)
    rounds = join_all([host, failed])
    assert all(isinstance(r, Round) and r.world == 2 and r.why.startswith("lost") for r in rounds), rounds
    leave([host, failed])


def test_a_lone_agent_stopped_for_long_carries_on() -> None:
    job = spec("1:3", join_timeout=0.2)
    alone = agents(job, 1)[0]
    join_all([alone])
    alone.paused = True                            # as the heartbeat thread says after a long SIGSTOP
    assert alone.check() is None and alone.hosting and alone.last is not None
    leave([alone])


def test_the_store_moves_to_the_live_member_of_lowest_rank() -> None:
    job = spec("1:3", join_timeout=0.2)
    rdzvs = agents(job, 3)
    rounds = join_all(rdzvs)
    host = next(r for r in rdzvs if r.hosting)
    order = sorted((rnd.node, r) for rnd, r in zip(rounds, rdzvs) if r is not host)
    host._quit.set()
    host.server.close(grace=0)                     # the store's host is gone
    rest = [r for _, r in order]
    for r in rest:
        assert r.check() is not None
    threads = [threading.Thread(target=r.after_stop, args=(None,)) for r in rest]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert rest[0].hosting                 # the live member of lowest node rank
    rest[0].store.set("here", "1")         # the other reached the same store (at its server's address, or at
    assert rest[1].store.peek("here") == b"1"    # the master address, which the new host took over)
    nxt = join_all(rest)
    assert all(isinstance(r, Round) and r.world == 2 and r.why.startswith("lost node") for r in nxt), nxt
    leave(rest)


def test_a_node_rank_given_twice_is_named() -> None:
    job = spec("3")
    rdzvs = agents(job, 4, wants=[0, 1, 1, 2])
    rounds = join_all(rdzvs)
    # all four stop, naming the rank; or, when the second one came after the job formed, that one does
    gave_up = [r for r in rounds if isinstance(r, Round) and r.give_up]
    refused = [r for r in rounds if isinstance(r, LaunchError)]
    assert len(gave_up) == 4 or len(refused) == 1, rounds
    for r in gave_up:
        assert "node rank 1 was given to 2 agents" in r.why
    for e in refused:
        assert "node rank 1 was given to another agent too" in str(e)
    leave(rdzvs)


def test_a_member_slow_to_stop_its_workers_is_not_lost() -> None:
    """Its heartbeat goes on while it waits for its workers (--grace): a fixed-size job restarts."""
    job = spec("2", max_restarts=3)
    rdzvs = agents(job, 2, wants=[0, 1])
    join_all(rdzvs)
    failure = Failure(rank=1, code=1, host="h", when=time.time())
    rdzvs[0].after_stop(failure)
    got: list = []
    fast = threading.Thread(target=lambda: got.append(join_all([rdzvs[0]])[0]), daemon=True)
    fast.start()
    time.sleep(2.5)                                  # past TG_ELASTIC_TIMEOUT=1: node 1 still stopping
    rdzvs[1].after_stop(failure)
    slow = join_all([rdzvs[1]])[0]
    fast.join(15)
    for r in (got[0], slow):
        assert isinstance(r, Round) and not r.give_up and r.why == "failure" and r.restarts == 1, r
    leave(rdzvs)


def test_a_newcomer_finds_the_job_finished() -> None:
    job = spec("2:3", join_timeout=0.2)
    a, b = agents(job, 2)
    join_all([a, b])
    for r in (a, b):
        r.done()
        r.finish()
    c = agents(job, 1)[0]
    with pytest.raises(JobFinished):
        c.join()
    leave([a, b, c])


def test_too_few_nodes_is_named(monkeypatch) -> None:
    monkeypatch.setenv("TG_DIST_TIMEOUT", "2")
    job = spec("2", join_timeout=0.2)
    a = agents(job, 1, wants=[0])[0]
    with pytest.raises(LaunchError, match=r"nodes \[1\] did not join"):
        a.join()
    leave([a])


def test_a_replacement_at_the_lost_hosts_address_takes_the_job_in(monkeypatch) -> None:
    """The store's host dies and a replacement node binds the freed master address first (a fresh store):
    the survivors continue there, take the old host for gone at once (not after TG_ELASTIC_TIMEOUT), and
    the replacement asks in: the job is one again, of three."""
    monkeypatch.setenv("TG_ELASTIC_TIMEOUT", "6")
    job = spec("1:3", join_timeout=0.2)
    rdzvs = agents(job, 3)
    join_all(rdzvs)
    host = next(r for r in rdzvs if r.hosting)
    host._quit.set()
    host.server.close(grace=0)
    rest = [r for r in rdzvs if r is not host]
    replacement = agents(job, 1)[0]               # binds the master address: a store of its own
    assert replacement.hosting
    for r in rest:
        while r.check() is None:
            time.sleep(0.02)
    start = time.monotonic()
    for r in rest:
        r.after_stop(None)
    rounds = join_all(rest)
    assert time.monotonic() - start < 4, "the lost host was waited for"
    assert all(isinstance(r, Round) and r.world == 2 and r.why.startswith("lost node") for r in rounds)
    got: list = []
    newcomer = threading.Thread(target=lambda: got.append(join_all([replacement])[0]), daemon=True)
    newcomer.start()
    for r in rest:                                 # the replacement asks in: the round ends for it
        while r.check() is None:
            time.sleep(0.02)
        r.after_stop(None)
    rounds = join_all(rest)
    newcomer.join(15)
    assert all(isinstance(r, Round) and r.world == 3 and r.why == "joined" for r in [*rounds, *got]), got
    leave([*rest, replacement])
