"""Every environment knob is declared once in tg/config.py; nothing else reads the environment."""
import pathlib
import re

import pytest

from tg import config

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tg"


def test_no_getenv_outside_config():
    offenders = []
    for path in ROOT.rglob("*.py"):
        if path.name == "config.py" and path.parent == ROOT:
            continue
        text = path.read_text()
        if re.search(r"os\.getenv|os\.environ|environ\.get|getenv\(", text):
            offenders.append(str(path.relative_to(ROOT.parent)))
    assert offenders == []


def test_knobs_documented_and_typed():
    for knob in config.KNOBS.values():
        assert knob.doc and knob.type in (int, str) or callable(knob.type)


def test_knob_reads_environment(monkeypatch):
    monkeypatch.setenv("DEBUG", "3")
    assert config.DEBUG == 3
    monkeypatch.setenv("DEBUG", "lots")
    with pytest.raises(ValueError, match="DEBUG='lots'"):
        _ = config.DEBUG


def test_unknown_knob():
    with pytest.raises(AttributeError, match="no knob"):
        _ = config.NOT_A_KNOB


def test_readme_lists_every_knob():
    readme = (ROOT.parent / "README.md").read_text()
    missing = [name for name in config.KNOBS if f"`{name}`" not in readme]
    assert missing == []
