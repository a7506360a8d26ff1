"""Files written whole or not at all, files read only when they are regular files of a bounded size (`read_bytes`:
never a device, a FIFO or a socket, nor a file past its reader's limit), the checksum every weight file carries
(`seal`, `verify`), and the OSError behind an error: what the run folder, the probe files, the configs, the
corpora and the reference curves share; the experiments' CSV text, the step-N files of probes and snapshots, and
the cache's folders.

A safetensors file that fatstudio writes holds, in its header's metadata, ``sha256``: the SHA-256 of the whole file
as it is with that value written as 64 zeros (the header, the tensors' data and all), so any reader can check it
(replace the value by 64 "0"s and hash the file). It is written in the file itself rather than in a file beside it:
the file and its checksum are renamed into place together and copied together, no crash can leave one without the
other, and the file stays a safetensors file that other programs read as any other."""
from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from .environment import CACHE
from .temporary import made_beside

MB = 1 << 20
# The most a reader takes of each kind of file (`read_bytes`'s limit), far above what such a file holds: a file past
# it is not what its name says (a sparse file, another file renamed) and is refused before a byte is read.
JSON_LIMIT = 64 * MB  # a run's config.json or meta.json; a checkpoint's config.json, tokenizer_config.json, index
TOKENIZER_LIMIT = 512 * MB  # a tokenizer.json, vocab.json, merges.txt or vocab.txt (the largest known: tens of MB)
ROWS_LIMIT = 1024 * MB  # metrics.jsonl, samples.jsonl: a row a step, ~200 bytes (5 million steps)


def cache_folder(name: str) -> Path:
    """A folder of the cache (not made here): ``$FATSTUDIO_CACHE/NAME``, else NAME in the user cache folder."""
    folder = CACHE.value()
    if folder is not None:
        return folder / name
    import platformdirs

    return platformdirs.user_cache_path("fatstudio", appauthor=False) / name


def atomic_write(path: Path, data: bytes | str | Sequence[bytes | memoryview]) -> None:
    """Write ``data`` (text, bytes, or pieces of bytes written one after another) to a temporary file beside
    ``path`` (`temporary.made_beside`: held while written, removed by a later write there if this process dies
    first), flush it to disk, then rename it into place. A failed write (a full disk) leaves ``path`` as it was,
    removes the temporary file and raises an OSError naming ``path``."""
    path = Path(path)
    pieces = [data.encode("utf-8")] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    try:
        with made_beside(path) as tmp:
            with open(tmp, "wb") as f:
                for piece in pieces:
                    f.write(piece)
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
    """A path refused without reading it: not a regular file (a device, a FIFO, a socket, a folder, or a link to
    one), one whose size cannot be known before reading it, or one larger than its reader takes (a limit)."""


class Damaged(ValueError):
    """A file whose content does not match the checksum written with it (`verify`): changed since it was written."""


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


def human_bytes(n: float) -> str:
    """A number of bytes as people read it: 512 B, 3.1 MB, 12.0 GB (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def regular_file(path: str | Path, limit: int | None = None) -> os.stat_result:
    """``os.stat(path)`` (links followed) if ``path`` is a regular file of at most ``limit`` bytes (if given); else
    `NotAFile` naming what it is, or its size and the limit. Nothing is opened, so a FIFO cannot block and a
    device is not read. A missing or unreadable path is the OSError of ``os.stat``."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        link = f" (a link to {os.path.realpath(path)})" if os.path.islink(path) else ""
        raise NotAFile(f"{path}{link} is {_kind(st.st_mode)}, not a regular file; give a file.")
    if limit is not None and st.st_size > limit:
        raise NotAFile(f"{path} is {human_bytes(st.st_size)}, more than such a file can hold (at most {human_bytes(limit)}); "
                       "it is not what its name says.")
    return st


def open_regular(path: str | Path, limit: int | None = None) -> tuple[BinaryIO, int]:
    """``path`` opened for reading in binary, and its size, if it is a regular file of at most ``limit`` bytes
    (`regular_file`), checked again on the opened file (a path swapped for a FIFO in between cannot block: it is
    opened non-blocking). A file that says it is empty but is not (``/proc`` and ``/sys`` files) has no size
    known in advance and is `NotAFile` too."""
    regular_file(path, limit)
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


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of regular file ``path`` of at most ``limit`` bytes (`open_regular`), at most its size when
    opened (a file growing meanwhile is read as it was)."""
    f, size = open_regular(path, limit)
    with f:
        return f.read(size)


def read_text(path: str | Path, encoding: str = "utf-8", limit: int | None = None) -> str:
    """`read_bytes` decoded (a UnicodeDecodeError if it is not ``encoding``)."""
    return read_bytes(path, limit).decode(encoding)


# ---- the checksum of a safetensors file ----------------------------------------------------------------------
CHECKSUM = "sha256"  # the metadata key: the SHA-256 of the whole file as it is with this value written as 64 zeros
_UNSEALED = "0" * 64  # its value until `seal` or `sealed` fills it: the same length, so nothing moves
MAX_HEADER = 100_000_000  # the largest header safetensors reads


def unsealed(metadata: dict[str, str]) -> dict[str, str]:
    """A safetensors file's ``metadata`` with the place for its checksum, which `seal` (a file) or `sealed` (its
    bytes) fills once the tensors are written."""
    return {**metadata, CHECKSUM: _UNSEALED}


def _place(header: bytes, value: str, what: object) -> int:
    """Where the checksum's ``value`` starts in ``header`` (as safetensors writes it: ``"sha256":"…"``), counted
    from the start of the file."""
    at = header.find(f'"{CHECKSUM}":"{value}"'.encode())
    if at < 0:
        raise Damaged(f"{what} is damaged: its checksum is not where its header says.")
    return 8 + at + len(CHECKSUM) + 4


def _header_length(first: bytes, size: int, what: object) -> int:
    n = int.from_bytes(first, "little") if len(first) == 8 else -1
    if not 0 < n <= min(size - 8, MAX_HEADER):
        raise Damaged(f"{what} is damaged or not a safetensors file: its header length ({n}) does not fit its "
                      f"{human_bytes(size)}.")
    return n


def _digest(pieces: Iterable[bytes | memoryview], f: BinaryIO | None = None, size: int = 0) -> str:
    """The SHA-256 of ``pieces``, then of the next ``size`` bytes of ``f`` (read a few megabytes at a time)."""
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    while f is not None and size > 0:
        chunk = f.read(min(size, 8 * MB))
        if not chunk:
            break
        h.update(chunk)
        size -= len(chunk)
    return h.hexdigest()


def sealed(data: bytes) -> list[bytes | memoryview]:
    """The bytes of a safetensors file (written with `unsealed` metadata) with its checksum filled in, as pieces
    for `atomic_write` (the tensors' data is not copied)."""
    n = _header_length(data[:8], len(data), "the file")
    at = _place(data[8:8 + n], _UNSEALED, "the file")
    digest = _digest([data])
    return [memoryview(data)[:at], digest.encode(), memoryview(data)[at + 64:]]


def seal(path: str | Path) -> None:
    """Fill the checksum of the safetensors file at ``path`` (written with `unsealed` metadata) in place, and flush
    it to disk: for a file a library wrote itself (before it is renamed into place)."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        header = f.read(_header_length(first, size, path))
        at = _place(header, _UNSEALED, path)
        digest = _digest([first, header], f, size - 8 - len(header))
        f.seek(at)
        f.write(digest.encode())
        f.flush()
        os.fsync(f.fileno())


def verify(path: str | Path) -> bool:
    """Check the safetensors file at ``path`` (a regular file: `open_regular`) against the checksum in its header:
    True if it matches, False if it has none (a file written before fatstudio wrote them, or by another program);
    `Damaged`, naming the file, if it does not match or its header cannot be read. Any byte changed anywhere in the
    file (the header, the tensors, the checksum itself) fails. The file is read once, a few megabytes at a time."""
    f, size = open_regular(path)
    with f:
        first = f.read(8)
        header = f.read(_header_length(first, size, path))
        try:
            said = (json.loads(header).get("__metadata__") or {}).get(CHECKSUM)
        except (ValueError, AttributeError, RecursionError):
            raise Damaged(f"{path} is damaged: its header is not the JSON object a safetensors file begins "
                          "with.") from None
        if said is None:
            return False
        at = _place(header, str(said), path) - 8
        zeroed = header[:at] + _UNSEALED.encode() + header[at + len(str(said)):]
        if said != _digest([first, zeroed], f, size - 8 - len(header)):
            raise Damaged(f"{path} is damaged: it does not match the checksum written into it ({CHECKSUM}); it was "
                          "changed after it was written.")
    return True
