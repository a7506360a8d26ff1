"""Folders that behave, for this process, as on a read-only disk (``mount -o ro``): every way Python has to write,
create, remove, rename or change one, or to open one for writing, fails with EROFS, as does taking an exclusive
lock on one of its files (a read-only disk would allow that: a command that only reads must not, so it is refused
too). Reading, and a shared lock tried and let go (`fatstudio.core.temporary.held`), work. ``chmod -R a-w`` stops
no write of root, which the tests may be; a bind mount needs privileges they may lack. What was refused is kept in
``refused``. Used through the ``read_only`` fixture (tests/conftest.py); what native code writes (safetensors) goes
past it, so the tests also compare every byte of the folders."""
import builtins
import errno
import fcntl
import io
import os
from pathlib import Path

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ReadOnlyDisk:
    def __init__(self, monkeypatch, *roots):
        self.roots = [Path(os.path.realpath(r)) for r in roots]
        self.refused: list[str] = []
        real_open, real_os_open, real_flock = io.open, os.open, fcntl.flock

        def opened(file, mode="r", *args, **kwargs):
            if not isinstance(file, int) and any(c in mode for c in "wax+"):
                self._check(f"open({mode!r})", file)
            return real_open(file, mode, *args, **kwargs)

        def os_opened(path, flags, *args, dir_fd=None, **kwargs):
            if flags & _WRITING:
                self._check("os.open for writing", path, dir_fd)
            return real_os_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

        def flock(fd, operation):
            if operation & fcntl.LOCK_EX:
                self._check("an exclusive lock (flock)", fd)
            return real_flock(fd, operation)

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(io, "open", opened)
        monkeypatch.setattr(os, "open", os_opened)
        monkeypatch.setattr(fcntl, "flock", flock)
        for name in ("replace", "rename"):
            monkeypatch.setattr(os, name, self._two_paths(name, getattr(os, name)))
        for name in ("unlink", "remove", "rmdir", "mkdir", "utime", "chmod", "truncate", "mkfifo", "chown"):
            monkeypatch.setattr(os, name, self._one_path(name, getattr(os, name)))
        for name in ("link", "symlink"):
            monkeypatch.setattr(os, name, self._two_paths(name, getattr(os, name)))

    def _one_path(self, name, real):
        def call(path, *args, dir_fd=None, **kwargs):
            self._check(f"os.{name}", path, dir_fd)
            return real(path, *args, **({"dir_fd": dir_fd} if dir_fd is not None else {}), **kwargs)
        return call

    def _two_paths(self, name, real):
        def call(src, dst, *args, src_dir_fd=None, dst_dir_fd=None, **kwargs):
            self._check(f"os.{name}", src, src_dir_fd)
            self._check(f"os.{name}", dst, dst_dir_fd)
            extra = {k: v for k, v in (("src_dir_fd", src_dir_fd), ("dst_dir_fd", dst_dir_fd)) if v is not None}
            return real(src, dst, *args, **extra, **kwargs)
        return call

    def _check(self, what, path, dir_fd=None) -> None:
        where = _where(path, dir_fd)
        if where is not None and any(where == r or r in where.parents for r in self.roots):
            self.refused.append(f"{what}: {where}")
            raise OSError(errno.EROFS, "Read-only file system", str(where))


def _where(path, dir_fd=None) -> Path | None:
    """The absolute path, links resolved, that ``path`` (relative to ``dir_fd``, or a descriptor) names."""
    if isinstance(path, int):
        return _descriptor(path)
    name = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(name):
        base = _descriptor(dir_fd)
        if base is None:
            return None
        name = os.path.join(base, name)
    return Path(os.path.realpath(name))


def _descriptor(fd: int) -> Path | None:
    try:
        return Path(os.path.realpath(os.readlink(f"/proc/self/fd/{fd}")))
    except OSError:
        return None
