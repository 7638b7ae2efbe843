"""Functions tests/test_torch_idioms.py runs in processes started by tg.multiprocessing.spawn (a spawned
process imports the function by its module's name, so they live in a module of their own)."""
from __future__ import annotations

import os
from pathlib import Path


def write_rank(i: int, folder: str, scale: int) -> None:
    """Leave a file named after i holding i * scale, computed by tg in this process."""
    import tg
    value = int((tg.tensor([float(i)]) * scale).item())
    (Path(folder) / f"{i}.txt").write_text(str(value))


def raise_on(i: int, bad: int) -> None:
    if i == bad:
        raise ValueError(f"process {i} refuses")


def exit_on(i: int, bad: int, code: int) -> None:
    if i == bad:
        os._exit(code)


def exit_with(i: int, code: int) -> None:
    import sys
    sys.exit(code)
