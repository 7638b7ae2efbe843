"""Compiling kernel source to a binary, cached on disk by the hash of (source, compiler, flags).

A cache entry is written to a temporary file and renamed into place, so an interrupted compile
never leaves a truncated library under the real name, and a second process compiles nothing.
"""
from __future__ import annotations

import functools
import hashlib
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

from tg import config


class CompileError(RuntimeError):
    pass


@functools.cache
def cc_version(cc: str) -> str:
    """The first line of `cc --version` (part of every C build's cache key)."""
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.split(
            "\n"
        )[0]
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(
            f"[cpu] cannot run the C compiler {cc!r}: {e}. Install gcc or clang, or point TG_CC at one."
        ) from None


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

    def compile_batch(self, srcs: list[str]) -> list[Path]:
        """Paths of the binaries for several sources (their kernels' names all different): the
        cached ones as they are, the rest built by one compiler run into one library (the compiler's
        start-up, about two thirds of building a small kernel, is paid once) that is then entered in
        the cache under each source's own name, so a later compile() of any of them hits."""
        if config.TG_DISABLE_CACHE or not self.batches:
            return [self.compile(src) for src in srcs]
        paths = [self.cached_path(src) for src in srcs]
        todo = [i for i, p in enumerate(paths) if not p.exists()]
        if len(todo) < 2:
            return [self.compile(src) for src in srcs]
        fd, tmp = tempfile.mkstemp(dir=paths[0].parent, prefix="batch.", suffix=".tmp")
        os.close(fd)
        try:
            try:
                self.compile_many_to([srcs[i] for i in todo], Path(tmp))
            except CompileError:    # build them one by one, so the error names the kernel that failed
                return [self.compile(src) for src in srcs]
            for i in todo:
                _enter(Path(tmp), paths[i])
        finally:
            os.unlink(tmp)
        return paths

    batches = False        # compile_many_to builds several sources in one run

    def compile_many_to(self, srcs: list[str], out: Path) -> None:
        raise NotImplementedError


class CCompiler(Compiler):
    """The system C compiler (TG_CC) building one source into a shared library with `flags`; `what`
    names the source in errors (its text is written next to the failed output)."""
    suffix = ".so"

    def __init__(self, flags: list[str], what: str) -> None:
        self.cc, self.flags, self.what = config.TG_CC, flags, what
        self.ident = f"{self.cc} {cc_version(self.cc)} {' '.join(self.flags)}"

    def compile_to(self, src: str, out: Path) -> None:
        proc = subprocess.run([self.cc, *self.flags, "-o", str(out)], input=src, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            where = out.with_suffix(".c")
            where.write_text(src)
            raise CompileError(f"{self.what} failed to compile (source written to {where}):\n"
                               f"{proc.stderr.strip()}")


def _enter(built: Path, path: Path) -> None:
    """Put a copy of the built binary (a hard link where the file system has them) at path, atomically,
    through a temporary name no one else uses: a copy is only ever written into a file it created."""
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(8)}.link")      # os.link never overwrites
    try:
        try:
            os.link(built, tmp)
        except OSError:
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".link")
            tmp = Path(name)
            with os.fdopen(fd, "wb") as out, open(built, "rb") as src:
                out.write(src.read())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
