"""The job secret for a job on one host started without tglaunch and without TG_SECRET.

No secret is ever derived from public facts (address, port, world size): anyone on the machine
could derive it too. Instead the rank that hosts the store takes 32 random bytes and, once it holds
the store's port, shares them through a file only this user can read:

    /dev/shm/tg-<uid>/secret-<master address>-<port>     (the folder 0700, the file 0600)

written under a temporary name and renamed into place. The other ranks read it, waiting for it to
appear. A file left by an earlier job on the same port (one that was killed) does not break a
job: a rank whose secret the store rejects reads the file again, until the store accepts it or
the timeout passes. The host removes the file once every rank has joined. A folder or file that is
not this user's private one (a symlink, another owner, a wider mode) raises DistributedError
saying what is there.

    >>> store, secret, done = join_store("127.0.0.1", 0, hosts_store=True, timeout=5)
    >>> len(secret)
    32
    >>> done(); store.close()
"""
from __future__ import annotations

import os
import re
import secrets
import socket
import stat
import time
from typing import Callable

from tg.distributed.errors import DistributedError
from tg.distributed.store import SecretRejected, StoreTimeout, TCPStore
from tg.distributed.transport.shm import SHM_DIR

SECRET_BYTES = 32
POLL = 0.05          # seconds between two looks at a file that is missing or stale


def secret_dir() -> str:
    """This user's private folder for job secrets."""
    return os.path.join(SHM_DIR, f"tg-{os.getuid()}")


def secret_path(master: str, port: int) -> str:
    """The file that holds the secret of the job whose store is at master:port."""
    try:
        address = socket.gethostbyname(master)     # one name for the job, however each rank spells it
    except OSError:
        address = master
    return os.path.join(secret_dir(), f"secret-{re.sub(r'[^0-9A-Za-z.-]', '_', address)}-{port}")


def join_store(master: str, port: int, hosts_store: bool, timeout: float
               ) -> tuple[TCPStore, bytes, Callable[[], None]]:
    """Connect to (and with hosts_store, host) the store of a one-host job without TG_SECRET: the
    store, the job secret, and what to call once every rank has joined (it removes the file)."""
    folder = _private_folder()
    path = secret_path(master, port)
    name = os.path.basename(path)
    if hosts_store:
        secret = secrets.token_bytes(SECRET_BYTES)
        try:
            store = TCPStore(master, port, is_server=True, secret=secret, timeout=timeout)
        except BaseException:
            os.close(folder)
            raise
        try:
            # written only now that this rank holds the port: a job that cannot bind it never replaces
            # the file of the job that did
            _write(folder, name, secret)
        except BaseException:
            os.close(folder)
            store.close(grace=0)
            raise

        def remove() -> None:
            try:
                if _read(folder, name, path) == secret:    # never another job's file
                    os.unlink(name, dir_fd=folder)
            except (OSError, DistributedError):
                pass
            finally:
                os.close(folder)
        return store, secret, remove
    try:
        return _join(folder, name, path, master, port, timeout)
    finally:
        os.close(folder)


def _join(folder: int, name: str, path: str, master: str, port: int, timeout: float
          ) -> tuple[TCPStore, bytes, Callable[[], None]]:
    deadline = time.monotonic() + timeout
    stale = False
    while True:
        secret = _read(folder, name, path)
        if secret is not None:
            try:
                store = TCPStore(master, port, secret=secret, timeout=max(deadline - time.monotonic(), 0.1))
                return store, secret, lambda: None
            except SecretRejected:
                stale = True     # an earlier job's file, not yet replaced by this job's host: read it again
        if time.monotonic() > deadline:
            if stale:
                raise StoreTimeout(f"[distributed] no TG_SECRET: for {timeout:.0f}s the store at "
                                   f"{master}:{port} rejected the secret in {path}, a file an earlier job on "
                                   f"this port left; is rank 0 of this job running on this host? Give every "
                                   f"rank the same TG_SECRET to do without the file")
            raise StoreTimeout(f"[distributed] no TG_SECRET, and the job secret file {path} did not appear "
                               f"within {timeout:.0f}s: rank 0 writes it once it hosts the store at "
                               f"{master}:{port}; is it running on this host, as the same user, with the "
                               f"same MASTER_ADDR and MASTER_PORT? (or give every rank the same TG_SECRET)")
        time.sleep(POLL)


def _private_folder() -> int:
    """A descriptor of secret_dir(), created if missing, after checking it is this user's, mode 0700."""
    path = secret_dir()
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)          # a umask that took owner bits away; the entry is ours, no race
    except FileExistsError:
        pass
    problem = _folder_problem(os.lstat(path))    # before opening: never follow a symlink planted there
    if not problem:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as e:
            problem = f"it cannot be opened ({e.strerror})"
        else:
            problem = _folder_problem(os.fstat(fd))      # the folder opened is the one checked
            if not problem:
                return fd
            os.close(fd)
    raise DistributedError(f"[distributed] refusing to keep the job secret in {path}: {problem}. It must "
                           f"be a folder of this user (uid {os.getuid()}) that only they can open "
                           f"(drwx------). Remove it (and find out who made it), or give every rank the same "
                           f"TG_SECRET")


def _folder_problem(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"it is not a folder (mode {stat.filemode(st.st_mode)})"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}"
    if stat.S_IMODE(st.st_mode) != 0o700:
        return f"its mode is {stat.filemode(st.st_mode)}"
    return ""


def _write(folder: int, name: str, secret: bytes) -> None:
    """The whole file appears at once: written under a temporary name, then renamed."""
    temp = f".{name}.{secrets.token_hex(8)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)       # a default ACL on the folder must not widen it
            f.write(secret)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=folder)
        except OSError:
            pass
        raise


def _read(folder: int, name: str, path: str) -> bytes | None:
    """The secret in the file, or None while there is none; DistributedError for a file that is not
    one this user wrote for a job."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DistributedError(f"[distributed] cannot read the job secret from {path}: {e.strerror} (a "
                               f"symlink is refused); remove it, or give every rank the same TG_SECRET") \
            from None
    try:
        st = os.fstat(fd)
        problem = ""
        if not stat.S_ISREG(st.st_mode):
            problem = f"it is not a regular file (mode {stat.filemode(st.st_mode)})"
        elif st.st_uid != os.getuid():
            problem = f"it belongs to uid {st.st_uid}"
        elif st.st_mode & 0o077:
            problem = f"other users may read it (mode {stat.filemode(st.st_mode)})"
        elif st.st_size != SECRET_BYTES:
            problem = f"it holds {st.st_size} bytes, not {SECRET_BYTES}"
        if problem:
            raise DistributedError(f"[distributed] refusing to read the job secret from {path}: {problem}; "
                                   f"remove it, or give every rank the same TG_SECRET")
        return os.read(fd, SECRET_BYTES)
    finally:
        os.close(fd)
