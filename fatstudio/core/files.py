"""Files written whole or not at all, files read only when they are regular files (`read_bytes`: never a device,
a FIFO or a socket), and the OSError behind an error: what the run folder, the probe files, the configs, the
corpora and the reference curves share; the experiments' CSV text, the step-N files of probes and snapshots, and
the cache's folders."""
from __future__ import annotations

import csv
import errno
import io
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from .environment import CACHE
from .temporary import made_beside


def cache_folder(name: str) -> Path:
    """A folder of the cache (not made here): ``$FATSTUDIO_CACHE/NAME``, else NAME in the user cache folder."""
    folder = CACHE.value()
    if folder is not None:
        return folder / name
    import platformdirs

    return platformdirs.user_cache_path("fatstudio", appauthor=False) / name


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary file beside ``path`` (`temporary.made_beside`: held while written, removed by a later
    write there if this process dies first), flush it to disk, then rename it into place. A failed write (a full
    disk) leaves ``path`` as it was, removes the temporary file and raises an OSError naming ``path``."""
    path = Path(path)
    try:
        with made_beside(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
    except OSError as e:
        raise naming(e, path) from None


def csv_text(rows: Iterable[Sequence]) -> str:
    """``rows`` (a header first, if any) as CSV text, quoted as `csv` quotes, one "\\n" per row: what the
    experiments' exports write with `atomic_write`."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


_STEP_FILE = re.compile(r"^step-(\d+)\.safetensors$")


def step_files(folder: Path) -> dict[int, Path]:
    """The ``step-N.safetensors`` files of ``folder`` (probe maps, weight snapshots) by step N, ascending;
    {} if ``folder`` is not a folder."""
    found = {}
    if folder.is_dir():
        for p in folder.iterdir():
            m = _STEP_FILE.match(p.name)
            if m:
                found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def os_error_in(e: BaseException) -> OSError | None:
    """The OSError behind ``e`` (a full disk, a folder that refuses writes): ``e`` itself, its cause or context,
    or the "(os error N)" that safetensors' own error ends with; None if there is none."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"\(os error (\d+)\)", str(e))
    if found:
        number = int(found.group(1))
        return OSError(number, os.strerror(number))
    return None


def naming(e: OSError, path: Path) -> OSError:
    """``e`` with ``path`` as its file name (a write error says which file, not its temporary's), of the same
    OSError subclass (OSError picks it from the errno)."""
    return OSError(e.errno, e.strerror or str(e), str(path))


class NotAFile(ValueError):
    """A path that is not a regular file (a device, a FIFO, a socket, a folder, or a link to one), or one whose
    size cannot be known before reading it: refused without reading it."""


def why_not_written(e: OSError, path: Path) -> str:
    """Why ``path`` could not be made or written, in words: a file where a folder was meant, else the system's."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            break
    if e.errno == errno.ENOSPC:
        return "the disk is full"
    return e.strerror.lower() if e.strerror else str(e)


def cannot_make(path: Path) -> str | None:
    """Why nothing can be made at ``path`` (a file or a folder to create, or to write into if it is a folder), in
    words, found before any work: the nearest folder at or above it that exists refuses writes ("permission denied",
    "read-only file system"), or a file stands in the way; None if it can be made, as far as can be told."""
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            if os.access(p, os.W_OK | os.X_OK):
                return None
            try:
                readonly = bool(os.statvfs(p).f_flag & os.ST_RDONLY)
            except (AttributeError, OSError):  # no statvfs (Windows)
                readonly = False
            return f"{'read-only file system' if readonly else 'permission denied'} ({p})"
    return None


def _kind(mode: int) -> str:
    for test, words in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


def regular_file(path: str | Path) -> os.stat_result:
    """``os.stat(path)`` (links followed) if ``path`` is a regular file; else `NotAFile` naming what it is.
    Nothing is opened, so a FIFO cannot block and a device is not read. A missing or unreadable path is the
    OSError of ``os.stat``."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        raise NotAFile(f"{path}{link} is {_kind(st.st_mode)}, not a regular file; give a file.")
    return st


def open_regular(path: str | Path) -> tuple[BinaryIO, int]:
    """``path`` opened for reading in binary, and its size, if it is a regular file (`regular_file`), checked
    again on the opened file (a path swapped for a FIFO in between cannot block: it is opened non-blocking).
    A file that says it is empty but is not (``/proc`` and ``/sys`` files) has no size known in advance and is
    `NotAFile` too."""
    regular_file(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(f"{path} is {_kind(st.st_mode)}, not a regular file; give a file.")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        if st.st_size == 0 and f.read(1):
            raise NotAFile(f"{path} says it is empty but is not (a /proc or /sys file?): its size cannot be "
                           "known in advance; copy it to a regular file first.")
        f.seek(0)
    except BaseException:
        f.close()
        raise
    return f, st.st_size


def read_bytes(path: str | Path) -> bytes:
    """The bytes of regular file ``path`` (`open_regular`), at most its size when opened (a file growing
    meanwhile is read as it was)."""
    f, size = open_regular(path)
    with f:
        return f.read(size)


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """`read_bytes` decoded (a UnicodeDecodeError if it is not ``encoding``)."""
    return read_bytes(path).decode(encoding)
