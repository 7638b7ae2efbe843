"""tglaunch: start a tg job of N processes per node, torchrun-style, and stop it cleanly.

    tglaunch --nproc 4 train.py --lr 3e-4          # 4 ranks on this machine
    tglaunch --nproc 2 -m mypkg.train               # a module, like python -m
    tglaunch --config configs/two_nodes.yaml --node-rank 1      # one node of a multi-node job
    tglaunch --config configs/elastic.yaml                      # a node of an elastic job (1 to 3 nodes)
    tglaunch --backend mpi --nproc 4 train.py       # mpiexec starts the processes
    python -m tg.launch ...                         # the same as tglaunch

Flags (a flag given on the command line wins over the same key in --config):
  --nproc N, --nproc-per-node N   processes on this node (default 1)
  --nnodes N | MIN:MAX            nodes in the job (default 1); MIN:MAX makes it elastic (below)
  --join-timeout S                an elastic job's first round waits this long for MAX nodes once
                                  MIN joined (30)
  --node-rank K                   this node's rank; else SLURM_NODEID, else this host's place in
                                  the config's `hosts` (matched by name or by a local address); in an
                                  elastic job optional (node ranks are assigned at each round)
  --master-addr HOST              where the rendezvous store listens (default 127.0.0.1); node 0
                                  binds exactly this address, never all interfaces
  --master-port P                 its port; 0 (the default on one node) picks a free one
  --backend tcp|mpi|ucx           TG_BACKEND for the workers (default tcp); mpi hands start-up to
                                  mpiexec (one node)
  --config FILE.yaml              job settings, schema below
  --max-restarts N                restart the whole job (every node) up to N times after a failure (0)
  --log-dir DIR                   also write each rank's output to DIR/rank{R}.stdout / .stderr
  --run-id ID                     names the job in the store and in TG_RUN_ID (default random)
  --grace S                       seconds between SIGTERM and SIGKILL when stopping workers (5)
  --profile DIR                   every rank profiles its whole run (TG_PROFILE, see tg.profiler) and
                                  writes DIR/trace.rank{R}.json; the launcher merges them into
                                  DIR/trace.json (one process row per rank; open it in Perfetto;
                                  on several nodes each node's ranks into DIR/trace.node{K}.json);
                                  TG_PROFILE=DIR in the launcher's environment does the same
  --flight-recorder N             collectives each rank's flight recorder keeps (TG_FLIGHT_RECORDER,
                                  512; 0: off); when the job fails the launcher reads its node's rings
                                  and says who is behind, which calls diverged, which rank left none
  -m MODULE                       run a module instead of a script
  script, args...                 everything after the script (or module) goes to it unchanged

A number out of range, from a flag or the same key in --config (--nproc and --nnodes at least 1,
--node-rank, --max-restarts and --grace at least 0, --master-port 0..65535), is a usage error:
argparse's message on stderr, exit code 2, nothing started.

Every worker gets: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK (the
same), MASTER_ADDR, MASTER_PORT, TG_RESTART_COUNT (0 on the first attempt), TG_MAX_RESTARTS,
TG_RUN_ID, TG_BACKEND, TG_SECRET (random per job on one node; on several nodes TG_SECRET from the
agents' environment, which must then hold it: a usage error otherwise), TG_ERROR_FILE,
TG_LAUNCHER_PID (the agent's pid, for the worker's watchdog) and PYTHONUNBUFFERED=1, so
`dist.init_process_group()` needs no arguments and torchrun scripts run as they are. Unless it is
already set, TG_CPU_THREADS shares the node's cores among its ranks (cores // nproc_per_node, at
least 1). On several nodes the agents host the store: workers also get TG_STORE_EXTERNAL=1 and
TG_STORE_PREFIX (one per round), MASTER_ADDR/MASTER_PORT of wherever the store is now, and
TG_FAILURE_RESTARTS and TG_MEMBERSHIP_CHANGES, the job's agreed counts of the restarts a failure caused
and of the changes of nodes (TG_RESTART_COUNT is the round number: every restart, for either).

Devices: with LOCAL_RANK set, a worker's default device is device LOCAL_RANK mod count of its kind
(`CUDA:1` for local rank 1 on a GPU node, the kind from TG_DEVICE or, unset, CUDA when a GPU is
usable), so `tglaunch --nproc 8` on an 8-GPU node puts one rank on each GPU. TG_DEVICE with an
index (`TG_DEVICE=CUDA:3`) or a device named in the script wins; DEBUG=1 prints each rank's choice.

Output: every line a worker prints appears at once, prefixed `[rank3]: `, on the launcher's stdout
or stderr as the worker wrote it.

Failure modes:
- A worker exits non-zero or dies by a signal: the others are sent SIGTERM, then SIGKILL after
  --grace seconds; the launcher prints the failing rank, its exit code or signal, host, time and the
  last lines of its traceback (from the error file the worker bootstrap writes), and exits with
  that code (128 + signal for a signal). With --max-restarts it starts the whole job again first.
- Ctrl-C / SIGTERM to the launcher: every worker is stopped the same way; exit code 130 / 143.
- The launcher is SIGKILLed: each worker gets SIGKILL from the kernel (PR_SET_PDEATHSIG), and each
  worker's watchdog (forked by the bootstrap, a member of the worker's process group) SIGKILLs that
  whole group: the processes the worker started, and under --backend mpi the ranks, which are
  mpiexec's children. Open MPI's shared-memory files (/dev/shm/sm_segment.*) of a job killed so are
  removed, with a log line, when the next --backend mpi job starts, once no process uses them.
- Whenever a job fails, the launcher also reads every local rank's flight recorder (a file each rank
  maps, readable even from a rank killed or stopped) and prints which rank is behind, its last
  collective and what the others wait in; with --log-dir the records go to DIR/flight_recorder.json.
- A node fails (multi-node): every other node stops its workers, and every node prints the summary.
- A node never joins: after TG_DIST_TIMEOUT seconds the agents fail, naming the missing nodes.

Several nodes run in rounds (tg/launch/rendezvous.py has the whole protocol): each round every agent
registers, the round closes with its members in node-rank order, the workers run; a failure ends the
round and the next one restarts every worker. Elastic jobs (`--nnodes MIN:MAX`, or `nnodes: '1:4'`):
- The first round starts once MIN nodes joined and --join-timeout passed (at once at MAX).
- A node lost (its agent died: at once; its agent stopped, SIGSTOP or a hang: its heartbeat stands
  still for TG_ELASTIC_TIMEOUT, 10s) ends the round; the others re-form without it, at the new
  WORLD_SIZE, as long as MIN remain (else they wait for nodes to join, up to TG_DIST_TIMEOUT).
- A node that joins a running job ends the round (if the job has fewer than MAX nodes) and the
  next round takes it in: no restart is used. A node beyond MAX waits as a spare for a later round.
- Failure restarts and membership changes are counted apart, agreed by all agents: a round ended
  by a node lost or joining uses no restart; a worker failure with every node back uses one, and
  past --max-restarts every node stops with that failure.
- The store moves: every agent runs a store server (the first one to bind --master-addr:
  --master-port hosts the job's; the others a standby on the address they reach it from). When
  its host is lost, every agent continues with the server of the live previous member of lowest
  node rank, which also answers at --master-addr:--master-port when it can bind it (on one host,
  or a machine that owns that address), so that later nodes find the job there. A stopped host
  that wakes up closes its stale store and joins again as a new node.
- Workers resume: TG_RESTART_COUNT > 0 means load the latest checkpoint, at whatever WORLD_SIZE
  the job has now; DataLoader(..., sampler=DistributedSampler(...)).state_dict() resumes its epoch
  at any world size, every sample once (scripts/train.py does this).
A fixed-size job (`--nnodes N`) runs the same rounds; a node lost ends it.
- The master port is taken: a clear error naming host:port.

YAML schema (`--config`; an unknown key is an error with a did-you-mean, and errors name the file,
line and key; every error is a usage error, exit code 2): nnodes (N or 'MIN:MAX'), join_timeout,
nproc_per_node, master_addr,
master_port, backend, max_restarts, log_dir, run_id, env (a mapping of extra variables), script,
module, args (a list), hosts (one address or name per node, node 0 first), profile_dir,
flight_recorder. See configs/.
"""
from __future__ import annotations

import argparse
import secrets
import sys
from typing import Callable

from tg.launch.job import Failure, JobSpec, Launch, LaunchError, check_range, load_config, parse_nnodes

__all__ = ["main", "JobSpec", "Failure", "Launch", "LaunchError"]


# Complexity: flag declarations and the YAML merge: many short independent branches, one per option.
def parse_args(argv: list[str] | None) -> Launch:  # noqa: C901
    ap = argparse.ArgumentParser(
        prog="tglaunch",
        description="Start a tg job (see `python -m tg.launch` docs).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    ap.add_argument("--nproc", "--nproc-per-node", dest="nproc_per_node", type=_ranged("nproc_per_node", int))
    ap.add_argument("--nnodes", type=_nnodes)
    ap.add_argument("--join-timeout", type=_ranged("join_timeout", float))
    ap.add_argument("--node-rank", type=_ranged("node_rank", int))
    ap.add_argument("--master-addr")
    ap.add_argument("--master-port", type=_ranged("master_port", int))
    ap.add_argument("--backend", choices=["tcp", "mpi", "ucx"])
    ap.add_argument("--config")
    ap.add_argument("--max-restarts", type=_ranged("max_restarts", int))
    ap.add_argument("--log-dir")
    ap.add_argument("--run-id")
    ap.add_argument("--grace", type=_ranged("grace", float), default=5.0)
    ap.add_argument("--profile", dest="profile_dir")
    ap.add_argument("--flight-recorder", type=_ranged("flight_recorder", int))
    ap.add_argument("-m", dest="module")
    ap.add_argument("script_and_args", nargs=argparse.REMAINDER)
    argv = sys.argv[1:] if argv is None else argv
    ours, target = _split_target(argv)
    args = ap.parse_args(ours)
    if target and target[0] == "-m":
        args.module, target = target[1], target[2:]
    args.script_and_args = target if target else args.script_and_args
    try:
        spec = load_config(args.config) if args.config else JobSpec()
    except ValueError as e:
        ap.error(str(e))
    for key in (
        "nproc_per_node",
        "nnodes",
        "join_timeout",
        "master_addr",
        "master_port",
        "backend",
        "max_restarts",
        "log_dir",
        "run_id",
        "module",
        "profile_dir",
        "flight_recorder",
    ):
        value = getattr(args, key)
        if key == "nnodes" and value is not None:
            spec.min_nodes, value = value
        if value is not None:
            setattr(spec, key, value)
    rest = list(args.script_and_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.module is not None:
        spec.script, spec.args = None, rest
    elif rest:
        spec.script, spec.args, spec.module = rest[0], rest[1:], None
    if spec.script is None and spec.module is None:
        ap.error("give a script to run (tglaunch --nproc 2 train.py), -m module, or `script` in --config")
    try:
        spec.fix_nodes()
    except ValueError as e:
        ap.error(str(e))
    from tg import config
    spec.profile_dir = spec.profile_dir or config.TG_PROFILE or None     # TG_PROFILE=DIR is --profile DIR
    # every node's agent must name the same run: random on one node, else from the master's address
    spec.run_id = spec.run_id or config.TG_RUN_ID or (secrets.token_hex(4) if spec.nnodes == 1 else
                                                      f"{spec.master_addr}:{spec.master_port}")
    try:
        node_rank = spec.resolve_node_rank(args.node_rank)
    except ValueError as e:
        ap.error(str(e))
    secret = config.TG_SECRET
    if not secret:
        if spec.nnodes > 1:     # a secret derived from the run id and master could be derived by anyone
            ap.error(f"a {spec.nnodes}-node job needs the same TG_SECRET in every node's environment; "
                     f"make one with export TG_SECRET=$(python3 -c 'import secrets; "
                     f"print(secrets.token_hex(16))') and export it on every node before starting tglaunch")
        secret = secrets.token_hex(16)
    return Launch(spec, node_rank, args.grace, secret)


def _nnodes(text: str) -> tuple[int, int]:
    """--nnodes N or MIN:MAX, as (MIN or 0, MAX); a bad value is a usage error."""
    try:
        return parse_nnodes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _ranged(key: str, kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type for a numeric flag: kind(text), checked by the same check_range as the YAML key,
    so a bad value is a usage error (exit code 2) from either."""
    def parse(text: str) -> float:
        value = kind(text)              # argparse reports "invalid int value: 'two'"
        try:
            check_range(key, value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    parse.__name__ = getattr(kind, "__name__", key)
    return parse


_VALUED = {
    "--nproc",
    "--nproc-per-node",
    "--nnodes",
    "--join-timeout",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--backend",
    "--config",
    "--max-restarts",
    "--log-dir",
    "--run-id",
    "--grace",
    "--profile",
    "--flight-recorder",
}


def _split_target(argv: list[str]) -> tuple[list[str], list[str]]:
    """tglaunch's own flags, and the target: `-m module args...` or `script args...`, whose arguments
    (flags included) belong to the target, never to tglaunch."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], argv[i + 1:]
        if token == "-m" and i + 1 < len(argv):
            return argv[:i], argv[i:]
        if token in _VALUED:
            i += 2
            continue
        if not token.startswith("-"):
            return argv[:i], argv[i:]
        i += 1
    return argv, []


def main(argv: list[str] | None = None) -> int:
    from tg import config
    if config.TG_PROFILE:       # for the workers (import tg profiled this process)
        from tg.profiler import cancel_process_profile
        cancel_process_profile()
    launch = parse_args(argv)
    from tg.launch.agent import Agent
    try:
        code = Agent(launch).run()
    except KeyboardInterrupt:
        code = 130
    except LaunchError as e:
        print(f"[tglaunch] {e}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def run_main() -> None:
    sys.exit(main())

