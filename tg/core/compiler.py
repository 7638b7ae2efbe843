"""Compiling kernel source to a binary, cached on disk by the hash of (source, compiler, flags).

A cache entry is written to a temporary file and renamed into place, so an interrupted compile
never leaves a truncated library under the real name, and a second process compiles nothing.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from tg import config


class CompileError(RuntimeError):
    pass


class Compiler:
    """Subclasses implement compile_to(src, out_path) and set `ident` (compiler + flags)."""
    ident = ""
    suffix = ".bin"

    def cache_dir(self) -> Path:
        path = Path(config.TG_CACHE_DIR) / "kernels"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def cached_path(self, src: str) -> Path:
        digest = hashlib.sha256((self.ident + "\0" + src).encode()).hexdigest()[:40]
        return self.cache_dir() / f"{digest}{self.suffix}"

    def compile(self, src: str) -> Path:
        """Path of the compiled binary for src, compiling only if the cache lacks it."""
        if config.TG_DISABLE_CACHE:
            tmpdir = Path(tempfile.mkdtemp(prefix="tg-"))
            out = tmpdir / f"kernel{self.suffix}"
            self.compile_to(src, out)
            return out
        path = self.cached_path(src)
        if path.exists():
            return path
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
        os.close(fd)
        try:
            self.compile_to(src, Path(tmp))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def compile_to(self, src: str, out: Path) -> None:
        raise NotImplementedError
