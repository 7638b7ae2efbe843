"""tglaunch never derives a job secret: a multi-node job without TG_SECRET is a usage error."""
from __future__ import annotations

import pytest

from tg.launch import parse_args


def test_multi_node_without_tg_secret_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TG_SECRET", raising=False)
    with pytest.raises(SystemExit) as caught:
        parse_args(["--nnodes", "2", "--node-rank", "0", "--master-port", "29500", "train.py"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "2-node job needs the same TG_SECRET" in err and "token_hex" in err


def test_one_node_without_tg_secret_gets_a_random_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TG_SECRET", raising=False)
    first, second = (parse_args(["--nproc", "2", "train.py"]).secret for _ in range(2))
    assert len(first) == 32 and first != second


def test_multi_node_takes_tg_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_SECRET", "shared-by-every-node")
    launch = parse_args(["--nnodes", "2", "--node-rank", "1", "--master-port", "29500", "train.py"])
    assert launch.secret == "shared-by-every-node"
