"""Every environment knob tg reads, declared once with its type, default and meaning.

Library code reads knobs only through this module (``from tg import config; config.DEBUG``);
a test asserts that no other file calls ``os.getenv`` or reads ``os.environ``.

    >>> from tg import config
    >>> config.DEBUG >= 0
    True
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Knob:
    name: str
    type: Callable[[str], Any]
    default: Any
    doc: str

    def read(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        try:
            return self.type(raw)
        except ValueError as e:
            raise ValueError(f"[config] {self.name}={raw!r} is not a valid {self.type.__name__}: {e}. "
                             f"Unset it or give a {self.type.__name__}.") from None


def _device_name(raw: str) -> str:
    return raw.upper()


def _cache_default() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tg")


KNOBS: dict[str, Knob] = {k.name: k for k in [
    Knob("DEBUG", int, 0, "0 quiet; 1 kernel count and time per realize; 2 each kernel's name, shape, "
                          "time, GFLOPS, GB/s; 3 the schedule; 4 the generated source"),
    Knob("TG_DEVICE", _device_name, "", "default device: CPU | NUMPY | NULL (and CL | CUDA once "
                                        "their backends exist); empty picks CPU"),
    Knob("TG_CACHE_DIR", str, _cache_default(), "folder for compiled kernels, keyed by source hash"),
    Knob("TG_DISABLE_CACHE", int, 0, "1 compiles every kernel afresh and never touches the disk cache"),
    Knob("TG_CC", str, "cc", "C compiler the CPU device calls"),
    Knob("TG_CPU_THREADS", int, 0, "threads a CPU kernel may use (OpenMP); 0 means one per core"),
    Knob("TG_NOOPT", int, 0, "1 turns off the loop optimisations (upcast, vector lanes, unroll)"),
    Knob("TG_NULL_DIALECT", str, "opencl", "dialect the NULL device renders: c | opencl | cuda"),
]}


def __getattr__(name: str) -> Any:
    # Read lazily so tests and subprocesses that set the environment see the new value.
    if name in KNOBS:
        return KNOBS[name].read()
    raise AttributeError(f"[config] no knob named {name!r}; known: {', '.join(sorted(KNOBS))}")
