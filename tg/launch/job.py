"""A job's settings (JobSpec), from flags and a YAML file, with errors that name file, line and key; what
one agent runs (Launch), a rank's failure (Failure), and the launch's own errors (LaunchError)."""
from __future__ import annotations

import difflib
import ipaddress
import math
import os
import signal
import socket
import time
from dataclasses import dataclass, field, fields
from typing import Any, cast


@dataclass
class JobSpec:
    nnodes: int = 1                   # the most nodes (MAX of --nnodes MIN:MAX)
    min_nodes: int = 0                # the fewest an elastic job runs with (MIN); 0: nnodes (a fixed size)
    join_timeout: float = 30.0        # seconds an elastic job's first round waits for MAX once MIN joined
    nproc_per_node: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 0
    backend: str = "tcp"
    max_restarts: int = 0
    log_dir: str | None = None
    run_id: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    script: str | None = None
    module: str | None = None
    args: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    profile_dir: str | None = None    # each rank profiles its run (TG_PROFILE); the traces merged here
    flight_recorder: int | None = None    # collectives each rank's flight recorder keeps (0: off; None: env)

    @property
    def elastic(self) -> bool:
        return 0 < self.min_nodes < self.nnodes

    def fix_nodes(self) -> None:
        """min_nodes 0 means a fixed size; MIN above MAX is a mistake."""
        self.min_nodes = self.min_nodes or self.nnodes
        if self.min_nodes > self.nnodes:
            raise ValueError(f"[launch] nnodes {self.min_nodes}:{self.nnodes}: MIN is above MAX; "
                             f"write nnodes as MIN:MAX with MIN <= MAX")

    def resolve_node_rank(self, flag: int | None) -> int | None:
        """--node-rank, else SLURM_NODEID, else this host's index in `hosts`; 0 on a one-node job; in an
        elastic job None when none is given (the rendezvous assigns node ranks)."""
        from tg import config
        if self.elastic and flag is None and config.SLURM_NODEID < 0 and not self.hosts:
            if self.backend == "mpi":
                raise ValueError("[launch] --backend mpi runs on one node; an elastic job uses tcp or ucx")
            return None
        if flag is not None:
            rank = flag
        elif config.SLURM_NODEID >= 0:
            rank = config.SLURM_NODEID
        elif self.nnodes == 1:
            rank = 0
        elif self.hosts:
            matches = [i for i, h in enumerate(self.hosts) if is_this_host(h)]
            if len(matches) != 1:
                raise ValueError(
                    f"[launch] cannot tell this node's rank: {'none' if not matches else 'several'} of "
                    f"hosts {self.hosts} match this host ({socket.gethostname()}); pass --node-rank"
                )
            rank = matches[0]
        else:
            raise ValueError(
                f"[launch] a {self.nnodes}-node job needs --node-rank, SLURM_NODEID, or `hosts` in the "
                f"config to tell this node's rank"
            )
        if not 0 <= rank < self.nnodes:
            raise ValueError(f"[launch] node rank {rank} is out of range for {self.nnodes} nodes")
        if self.nnodes > 1 and self.backend == "mpi":
            raise ValueError(
                "[launch] --backend mpi runs on one node (mpiexec places the ranks); for several "
                "nodes use mpiexec's own host file, or backend tcp / ucx"
            )
        return rank


def is_this_host(host: str) -> bool:
    """True when host names this machine: its name, or an address one of its interfaces owns."""
    if host in (socket.gethostname(), socket.getfqdn()):
        return True
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        return False
    if ipaddress.ip_address(addr).is_loopback:
        return False       # every machine owns 127.0.0.1: it tells nodes apart only by name
    with socket.socket() as s:
        try:
            s.bind((addr, 0))      # only an address of one of this host's interfaces can be bound
            return True
        except OSError:
            return False


_TYPES = {f.name: f.type for f in fields(JobSpec)}

# Every numeric setting, given as a flag or as a YAML key, is checked here: (lowest, highest or None).
RANGES: dict[str, tuple[int, int | None]] = {
    "nnodes": (1, None), "nproc_per_node": (1, None), "node_rank": (0, None), "master_port": (0, 65535),
    "max_restarts": (0, None), "grace": (0, None), "flight_recorder": (0, None), "join_timeout": (0, None)}


def check_range(key: str, value: float) -> None:
    """ValueError when value is outside key's range in RANGES (or not a finite number); the caller
    prefixes where it came from (the flag, or the file, line and key)."""
    low, high = RANGES[key]
    if not (math.isfinite(value) and value >= low and (high is None or value <= high)):
        want = f"in {low}..{high}" if high is not None else f"at least {low}"
        raise ValueError(f"must be {want}, got {value}")


_CHECK: dict[str, Any] = {
    "nnodes": (int, str), "nproc_per_node": int, "join_timeout": (int, float), "master_addr": str,
    "master_port": int, "backend": str, "max_restarts": int, "log_dir": str, "run_id": str, "env": dict,
    "script": str, "module": str, "args": list, "hosts": list, "profile_dir": str, "flight_recorder": int}


# Complexity: one check per YAML key, each naming the file, line and key.
def load_config(path: str) -> JobSpec:  # noqa: C901
    """Read a YAML job file; every problem names the file, the line and the key."""
    import yaml
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"[launch] cannot read config {path}: {e.strerror}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ValueError(f"[launch] {path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    spec = JobSpec()
    if root is None:
        return spec
    if not isinstance(root, yaml.MappingNode):
        raise ValueError(f"[launch] {path}:{root.start_mark.line + 1}: the config must be a mapping of keys "
                         f"({', '.join(_CHECK)})")
    constructor = yaml.constructor.SafeConstructor()
    items: Any = root.value
    for key_node, value_node in items:
        key, line = key_node.value, key_node.start_mark.line + 1
        if key not in _CHECK:
            spelled = str(key).replace("-", "_")
            near = ["nproc_per_node"] if spelled == "nproc" else difflib.get_close_matches(spelled, [*_CHECK])
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(_CHECK)}"
            if spelled in RANGES and spelled not in _CHECK:
                hint = f"; {spelled} is a command-line flag only: --{spelled.replace('_', '-')}"
            raise ValueError(f"[launch] {path}:{line}: unknown key {key!r}{hint}")
        value: Any = constructor.construct_object(value_node, deep=True)
        want = _CHECK[key]
        if value is None and key in ("log_dir", "run_id", "script", "module", "profile_dir"):
            continue
        if not isinstance(value, want) or isinstance(value, bool):
            kind = " or ".join(w.__name__ for w in want) if isinstance(want, tuple) else want.__name__
            if key == "nnodes":
                kind = "an int or 'MIN:MAX'"
            raise ValueError(f"[launch] {path}:{line}: {key} must be {kind}, got {value!r}")
        if key == "nnodes":
            try:
                spec.min_nodes, value = parse_nnodes(str(value))
            except ValueError as e:
                raise ValueError(f"[launch] {path}:{line}: nnodes {e}") from None
        if key == "env":
            value = {str(k): str(v) for k, v in cast(dict, value).items()}
        elif key in ("args", "hosts"):
            value = [str(v) for v in cast(list, value)]
        if key == "backend" and value not in ("tcp", "mpi", "ucx"):
            raise ValueError(f"[launch] {path}:{line}: backend must be tcp, mpi or ucx, got {value!r}")
        if key in RANGES and key != "nnodes":
            try:
                check_range(key, value)
            except ValueError as e:
                raise ValueError(f"[launch] {path}:{line}: {key} {e}") from None
        setattr(spec, key, value)
    if spec.hosts and len(spec.hosts) != spec.nnodes and not spec.elastic:
        raise ValueError(f"[launch] {path}: hosts lists {len(spec.hosts)} nodes but nnodes is {spec.nnodes}")
    if spec.script and not os.path.isabs(spec.script):
        spec.script = os.path.join(os.path.dirname(os.path.abspath(path)), spec.script) \
            if not os.path.exists(spec.script) else spec.script
    return spec


def parse_nnodes(text: str) -> tuple[int, int]:
    """`N` (a fixed size: (0, N)) or `MIN:MAX` (an elastic job), each at least 1 and MIN <= MAX."""
    parts = text.split(":")
    try:
        if len(parts) > 2:
            raise ValueError
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"must be a number of nodes or MIN:MAX (like 1:4), got {text!r}") from None
    for n in numbers:
        check_range("nnodes", n)
    if len(numbers) == 1:
        return 0, numbers[0]
    if numbers[0] > numbers[1]:
        raise ValueError(f"must be MIN:MAX with MIN <= MAX, got {text!r}")
    return numbers[0], numbers[1]


@dataclass
class Failure:
    rank: int
    code: int                 # exit code, or -signal
    host: str
    when: float
    error: str = ""
    traceback: str = ""
    node: int = 0
    flight: list[str] = field(default_factory=list)    # the flight recorder's summary lines

    def describe(self) -> str:
        how = (
            f"signal {-self.code} ({_signal_name(-self.code)})" if self.code < 0 else f"exit code {self.code}"
        )
        stamp = time.strftime("%H:%M:%S", time.localtime(self.when))
        lines = [
            f"[tglaunch] rank {self.rank} (node {self.node}, host {self.host}) failed at {stamp} with {how}"
        ]
        if self.error:
            lines.append(f"[tglaunch]   {self.error}")
        if self.traceback:
            tail = self.traceback.rstrip().splitlines()[-8:]
            lines += [f"[tglaunch]   | {line}" for line in tail]
        return "\n".join(lines)

    @property
    def exit_code(self) -> int:
        return 128 - self.code if self.code < 0 else self.code


def is_echo(failure: Failure) -> bool:
    """A rank that raised because a peer died or left: the cause is another rank."""
    return failure.error.startswith("DistributedError")


def blame(failures: list[Failure]) -> Failure:
    """The failure to report when several ranks failed before the launcher looked: the cause, not
    its echoes. Ranks that raised because a peer died (a DistributedError) come last, then the
    earliest failure, then the lowest rank."""
    return min(failures, key=lambda f: (is_echo(f), f.when, f.rank))


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return "?"


@dataclass
class Launch:
    """What one agent runs, resolved from the flags and the config."""
    spec: JobSpec
    node_rank: int | None        # None: an elastic job assigns it at each rendezvous
    grace: float
    secret: str
    extra_env: dict[str, str] = field(default_factory=dict)


class LaunchError(Exception):
    """A launch that cannot go on (port taken, node missing, bad config): printed without a traceback."""


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(host: str, port: int) -> None:
    """A clear error now rather than a confusing one inside rank 0 later."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise LaunchError(
                f"cannot use {host}:{port} for the rendezvous store ({e.strerror}); pick another "
                f"--master-port, or 0 for a free one"
            ) from None
