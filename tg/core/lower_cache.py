"""Lowered kernels kept on disk: a kernel's name, source and launch facts, filed under everything that made
them, so that a new process skips linearizing and rendering the kernels an earlier one lowered. A new
step graph with warm compiled kernels was lowering-bound: DCGAN's first step spent 3.1 of its 3.7 s
linearizing and rendering 171 kernels whose binaries were already on disk.

An entry's name is a sha256 of
- the kernel's `Kernel.key` (its AST, in place or not, its buffers' sizes: what lowering reads of it),
- tg's own code: every .py file under tg/core, hashed when tg/core is imported (a new tg never reads an
  old entry),
- the device: its kind and hardware, the host CPU's model, dialect, renderer threads, lowering options and
  compiler identity (flags and the CPU's features: an entry made for AMX is never read where AMX is missing),
- the knobs lowering reads (`LOWERING_KNOBS`; tests/core/test_lower_cache.py checks that every knob read
  in codegen, the runtimes, device.py and compiler.py is there or named as not read by lowering), and
  every upper-case constant of codegen/heuristics.py (a tuned heuristic files its lowerings apart).

A lowering that chose a nest while the search was unfinished (`search.settled`: the budget ran out) is
not kept: a later process goes on searching. A bfloat16 unit found not to pay (`CPUDevice.usable`, timed
once a process) is decided by the process that lowered first; each choice is a checked, valid program.

`TG_LOWER_CACHE=0` (or `TG_DISABLE_CACHE=1`) lowers every kernel afresh. The test suite turns it off
(tests/conftest.py), since tests patch lowering's functions in ways no key can see; its own tests turn it
on. An entry that cannot be read, or does not hold what an entry holds, is lowered again and rewritten;
entries are written to a temporary file and renamed, so a reader never sees half of one."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tg import config

FORMAT = 1       # bumped when an entry's fields change


@dataclass
class Recalled:
    """What a program and the counters read of a lowering (a Linearized's launch facts), from disk."""
    name: str
    global_size: int
    local_size: int
    flops: int
    mem_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


# the knobs whose values lowering reads (where a kernel runs, caching and DEBUG are not among them)
LOWERING_KNOBS = ("TG_NOOPT", "TG_CPU_THREADS", "TG_CPU_DISABLE", "TG_CC", "TG_CUDA_ARCH", "TG_NULL_DIALECT",
                  "TG_BEAM", "TG_BEAM_MIN_MACS", "TG_CL_SPLIT")


def _code_digest() -> str:
    """sha256 of every .py file under tg/core (names and contents)."""
    root, h = Path(__file__).resolve().parent, hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _host_model() -> str:
    """The host CPU's model name (searched nests are timed on it; the features alone do not tell)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.machine())


def write_record(path: Path, record: dict) -> None:
    """Write a JSON record to the cache atomically (a temporary file renamed: a reader never sees half of
    one); a cache that cannot be written (read-only, full) only costs a later process the work again.
    Lowerings here and the nest search's records (codegen/search.py) are written so."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


# taken when tg/core is imported, not at the first build: sources edited under a running process must not
# file that process's lowerings under the new code's name
_CODE = [_code_digest()]
HOST = _host_model()      # read once a process (the nest search keys its records by it too)


def _settings() -> str:
    """The lowering knobs' values and heuristics' upper-case constants, as one string."""
    from tg.core.codegen import heuristics
    knobs = [f"{name}={getattr(config, name)!r}" for name in LOWERING_KNOBS]
    consts = [f"{k}={v!r}" for k, v in sorted(vars(heuristics).items())
              if k.isupper() and isinstance(v, (int, float, str, bool, tuple))]
    return "\n".join(knobs + consts)


def enabled(dev: Any) -> bool:
    return bool(config.TG_LOWER_CACHE) and not config.TG_DISABLE_CACHE and dev.compiler is not None


class Memo:
    """One device's entries, for one build (the device's part of the key is made once)."""

    def __init__(self, dev: Any):
        renderer = dev.renderer
        facts = [f"format {FORMAT}", _CODE[0], HOST, type(dev).__name__, dev.hardware, repr(renderer.d),
                 f"threads {getattr(renderer, 'threads', None)!r}", repr(sorted(dev.lower_options.items())),
                 f"vector {getattr(dev, 'vector_bytes', 0)}", dev.compiler.ident, _settings()]
        self.device = hashlib.sha256("\n".join(facts).encode()).hexdigest()
        self.folder = Path(config.TG_CACHE_DIR) / "lowered"

    def path(self, kernel: Any) -> Path:
        digest = hashlib.sha256((self.device + "\n" + repr(kernel.key)).encode()).hexdigest()[:40]
        return self.folder / f"{digest}.json"

    def recall(self, kernel: Any) -> tuple[str, str, Recalled] | None:
        """(name, source, launch facts) kept for kernel, or None."""
        try:
            entry = json.loads(self.path(kernel).read_text())
            facts = Recalled(entry["name"], int(entry["global_size"]), int(entry["local_size"]),
                             int(entry["flops"]), int(entry["mem_bytes"]), dict(entry["extra"]))
            src = entry["src"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(src, str) or not isinstance(facts.name, str):
            return None
        return facts.name, src, facts

    def keep(self, kernel: Any, name: str, src: str, info: Any) -> None:
        """File a fresh lowering (best effort: a full disk or a read-only cache only loses the entry);
        not a provisional one (see the module docstring)."""
        extra = getattr(info, "extra", {})
        if extra.get("provisional"):
            return
        try:
            entry = {"name": name, "src": src, "global_size": int(info.global_size),
                     "local_size": int(info.local_size), "flops": int(info.flops),
                     "mem_bytes": int(info.mem_bytes),
                     "extra": {k: v if isinstance(v, (bool, int, float, str)) else repr(v)
                               for k, v in extra.items()}}
        except (AttributeError, TypeError, ValueError):      # a lowering without launch facts: not kept
            return
        write_record(self.path(kernel), entry)
