"""Start-up: which environment says what rank this process is (torchrun, Open MPI, MPICH, Slurm), and
a clear ValueError naming the variable when that environment is garbage."""
import socket
import time

import pytest

import tg.distributed as dist
from tg.distributed import startup

ALL = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ALL:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, (0, 1, 0)),
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (3, 8, 1)),
        (
            {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
            (2, 4, 0),
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "3"}, (1, 3, 1)),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, (5, 6, 1)),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "5", "SLURM_NTASKS": "6"},
            (0, 2, 0),
        ),  # torchrun first
    ],
)
def test_detect(monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert startup._detect() == expected


def test_multi_rank_without_master_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT"):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_unknown_backend_and_init_method():
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group(backend="nccl2")   # torch's "nccl" means tcp; a typo still raises
    with pytest.raises(ValueError, match="init_method"):
        dist.init_process_group(init_method="file:///tmp/x", rank=0, world_size=2)


# ---------------------------------------------------------------------------- garbage in the environment
@pytest.mark.parametrize("env,named", [
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is out of range for WORLD_SIZE=2"),
    ({"RANK": "1"}, "RANK=1 is set but WORLD_SIZE is not"),
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
    ({"RANK": "0", "WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK=-1"),
    ({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"}, "OMPI_COMM_WORLD_RANK=4"),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "OMPI_COMM_WORLD_SIZE=4 is set but OMPI_COMM_WORLD_RANK is not"),
    ({"PMI_RANK": "0", "PMI_SIZE": "0"}, "PMI_SIZE=0"),
    ({"PMI_RANK": "x1", "PMI_SIZE": "2"}, "PMI_RANK='x1'"),
    ({"SLURM_PROCID": "0"}, "SLURM_PROCID=0 is set but SLURM_NTASKS is not"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "3"}, "SLURM_LOCALID=3"),
])
def test_bad_launcher_variables_raise_naming_them(monkeypatch, env, named):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as info:
        dist.init_process_group(backend="tcp")
    assert named in str(info.value) and str(info.value).startswith(("[distributed]", "[config]")), info.value
    assert not dist.is_initialized()


def test_slurm_allocation_shell_is_one_rank(monkeypatch):
    """salloc and sbatch set SLURM_NTASKS in a shell that is no task: a plain `python` there is one rank."""
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert startup._detect() == (0, 1, 0)


@pytest.mark.parametrize("port", ["70000", "0", "-1", "http"])
def test_bad_master_port(monkeypatch, port):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", port)
    with pytest.raises(ValueError, match=f"MASTER_PORT={port}|MASTER_PORT='{port}'"):
        dist.init_process_group(backend="tcp")
    with pytest.raises(ValueError, match="init_method"):
        dist.init_process_group(backend="tcp", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2)
    assert not dist.is_initialized()


def test_taken_master_port_names_it(monkeypatch):
    """Rank 0 hosts the store: a port another process holds is a DistributedError naming host:port and
    the fix, at once, not a raw OSError (nor a wait for the timeout)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                     "TG_DIST_TIMEOUT": "20", "TG_SECRET": "s" * 32}.items():
            monkeypatch.setenv(k, v)
        start = time.monotonic()
        with pytest.raises(dist.DistributedError) as info:
            dist.init_process_group(backend="tcp")
    assert time.monotonic() - start < 10
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "another port" in msg, msg
    assert not dist.is_initialized()
