"""Start-up: which environment says what rank this process is (torchrun, Open MPI, MPICH, Slurm)."""
import pytest

import tg.distributed as dist

ALL = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS",
       "SLURM_LOCALID"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ALL:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("env,expected", [
    ({}, (0, 1, 0)),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (3, 8, 1)),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, (2, 4, 0)),
    ({"PMI_RANK": "1", "PMI_SIZE": "3"}, (1, 3, 1)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, (5, 6, 1)),
    ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "5", "SLURM_NTASKS": "6"}, (0, 2, 0)),   # torchrun first
])
def test_detect(monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert dist._detect() == expected


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
        dist.init_process_group(backend="nccl")
    with pytest.raises(ValueError, match="init_method"):
        dist.init_process_group(init_method="file:///tmp/x", rank=0, world_size=2)
