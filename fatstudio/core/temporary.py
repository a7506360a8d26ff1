"""Temporary work, told apart from work that a process which died left behind.

Whatever fatstudio writes whole is first made in a hidden folder beside its target (`made_beside`: the folder
``.TARGET.XXXXXXXX.fatstudio.tmp``, or a file of that name in it) and renamed into place when complete. While it is
made, the process making it holds an OS lock on that folder (``flock``, which the system releases however the
process ends, ``kill -9`` too; on the folder, as libraries replace the files they write): a temporary that no
process holds is abandoned, and the next `made_beside` in the same folder, by any
fatstudio process, removes it (`remove_abandoned`) before it makes its own. Hidden names are never listed as runs
or cache entries, so what a killed process left is never taken for something whole meanwhile.

The same kind of lock marks a run that a process trains (`runs.folder.Run.lock`); `held` tells whether some process
holds one without taking it and without writing anything (a read-only disk answers too).

Where the system has no such locks (Windows), a temporary is abandoned once nothing in it changed for `STALE_S`.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

SUFFIX = ".fatstudio.tmp"  # every temporary's name ends so: nothing else is ever removed as one
STALE_S = 3600  # without OS locks: a temporary untouched this long is abandoned
_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)  # what flock says of a lock another process holds
_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)


def temporary_name(target: Path) -> str:
    """The prefix of ``target``'s temporaries (``.NAME.``): `made_beside` adds a random part and `SUFFIX`."""
    return f".{target.name}."


@contextlib.contextmanager
def made_beside(target: Path, folder: bool = False) -> Iterator[Path]:
    """Where to make ``target`` (then renamed into place within the block): a new empty hidden folder beside it, or
    with ``folder`` false the path ``target``'s name would have in that folder. The folder is held by this process
    until the block ends and then removed, with whatever was not renamed out of it (an error, or scratch work). The
    abandoned temporaries beside ``target`` are removed first. An OSError of the folder (missing, not writable,
    full) is raised as the system gives it."""
    target = Path(target)
    remove_abandoned(target.parent)
    while True:
        tmp = Path(tempfile.mkdtemp(prefix=temporary_name(target), suffix=SUFFIX, dir=target.parent))
        lock = _lock(tmp, wait=True)
        if lock is None or _same(lock, tmp):
            break
        os.close(lock)  # another process found it unheld in the instant before we held it, and removed it
    try:
        yield tmp if folder else tmp / target.name
    finally:
        try:
            if lock is None and os.path.lexists(tmp) or lock is not None and _same(lock, tmp):
                shutil.rmtree(tmp, ignore_errors=True)  # unless it was renamed into place itself
        finally:
            if lock is not None:
                os.close(lock)  # releases the lock


@contextlib.contextmanager
def scratch_folder(name: str) -> Iterator[Path]:
    """A temporary folder for work that is never renamed into place (a sweep's configs, the self-test's runs), in
    the system's temporary folder, held until the block ends and then removed (`made_beside`)."""
    with made_beside(Path(tempfile.gettempdir()) / f"fatstudio-{name}", folder=True) as tmp:
        yield tmp


def remove_abandoned(folder: Path) -> list[Path]:
    """Remove the temporaries in ``folder`` (folders named ending in `SUFFIX`) that no process holds: left by a process
    that was killed, or that lost its power. Return those removed. Nothing else is touched; a folder that cannot be
    read or written is left as it is."""
    try:
        names = [e.name for e in os.scandir(folder) if e.name.startswith(".") and e.name.endswith(SUFFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        path = Path(folder) / name
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        if fcntl is None:
            if _untouched_for(path) >= STALE_S and _remove(path):
                removed.append(path)
            continue
        try:
            lock = _lock(path, wait=False)
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if lock is None:  # held: work under way
            continue
        try:
            if _same(lock, path) and _remove(path):
                removed.append(path)
        finally:
            os.close(lock)
    return removed


def held(path: Path) -> bool:
    """Whether some process holds an OS lock on the file or folder ``path`` (as `Run.lock` holds a run's ``.lock``,
    `made_beside` a temporary). A shared lock is tried on a read-only descriptor and let go at once: nothing is
    written, nothing needs to be writable, and a process taking the lock meanwhile waits a moment rather than being
    refused (`Run.lock`). False for a missing path; True where it cannot be told (unreadable, not a file nor a
    folder, no OS locks), which keeps what is recorded."""
    if fcntl is None:
        return True
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return True
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # held (or a file system without locks: cannot be told)
        return True
    finally:
        os.close(fd)  # lets the shared lock go
    return False


def _lock(path: Path, wait: bool) -> int | None:
    """A descriptor of the folder ``path`` (never followed through a link) that holds an exclusive lock on it; None
    if another process holds one and not ``wait``, or where there are no OS locks. OSError if it cannot be opened
    (gone, not a folder, unreadable)."""
    if fcntl is None:
        return None
    fd = os.open(path, _OPEN)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOTDIR, "not a folder", str(path))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as e:
            if e.errno in _BUSY and not wait:
                os.close(fd)
                return None
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd


def _same(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file or folder that ``fd`` is open on (not removed, not replaced)."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _remove(path: Path) -> bool:
    """Remove a temporary folder; whether it is gone."""
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def _untouched_for(path: Path) -> float:
    """Seconds since anything in the folder ``path`` (it, or what it holds) last changed."""
    try:
        times = [os.lstat(path).st_mtime, *(p.lstat().st_mtime for p in Path(path).rglob("*"))]
    except OSError:
        return 0.0
    return time.time() - max(times)
