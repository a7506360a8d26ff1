"""The cache folder's entries (`files.cache_folder`), bounded together: the token files of large corpora
(``tokens``, `data.streaming`) and the compiled decode steps (``decode``, one per model shape,
`inspect.decode_export`).

An entry is a folder made under a hidden work name (`work_folder`, a `temporary.made_beside` folder: held by the
process making it) and renamed to its key when complete, so a half-made one is never listed (`entries`); a work
folder that no process holds was left by one that died and is removed by the next `work_folder` (`remove_stale`).
An entry's marker (a file of it, or the folder itself) says that it is complete and, by its modification time,
when it was last used (`mark_used`, when it is made or loaded). Past `cache_cap` bytes in all
(``$FATSTUDIO_CACHE_MB``, else `CACHE_MB`), `prune` removes the entries used least recently, whatever their kind,
never the one in use, each renamed to a hidden temporary name before its files go (so one removed part way is not
listed either, and is removed as abandoned)."""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import environment
from .files import cache_folder
from .temporary import SUFFIX, made_beside, remove_abandoned

CACHE_MB = int(environment.CACHE_MB.default)  # the cache's default bound, in MB (10⁶ bytes): the least recently used go past it
STALE_S = 3600  # a folder of an earlier fatstudio's work (not a temporary) untouched this long is removed


@dataclass(frozen=True)
class Kind:
    """A kind of entry: its folder in the cache (``name``) and its marker, the file of an entry that is written
    last ("": the folder itself, renamed into place when complete)."""

    name: str
    marker: str = ""

    def root(self) -> Path:
        return cache_folder(self.name)

    def marker_of(self, entry: Path) -> Path:
        return entry / self.marker if self.marker else entry


TOKENS = Kind("tokens", "meta.json")
DECODE = Kind("decode")
KINDS = (TOKENS, DECODE)


class Entry(NamedTuple):
    folder: Path
    size: int  # bytes
    used: float  # when it was last used (seconds since the epoch)


def cache_cap() -> int:
    """The cache's bound in bytes: ``$FATSTUDIO_CACHE_MB`` (MB), else `CACHE_MB` (`environment.CACHE_MB`)."""
    return int(environment.CACHE_MB.value() * 1e6)


def _folders(kind: Kind) -> Iterable[Path]:
    root = kind.root()
    return (p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ()


def _complete(kind: Kind, folder: Path) -> bool:
    return not folder.name.startswith(".") and kind.marker_of(folder).exists()


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def entries(kind: Kind) -> list[Entry]:
    """The complete entries of ``kind``: (folder, bytes, last used), least recently used first."""
    found = []
    for folder in _folders(kind):
        if _complete(kind, folder):
            with contextlib.suppress(OSError):  # removed meanwhile
                found.append(Entry(folder, _size(folder), kind.marker_of(folder).stat().st_mtime))
    return sorted(found, key=lambda e: e.used)


def mark_used(kind: Kind, entry: Path) -> None:
    """Say that ``entry`` is used now: the last of its cache to go when `prune` removes some."""
    with contextlib.suppress(OSError):
        os.utime(kind.marker_of(entry))


def remove_stale() -> None:
    """Remove the work folders of the cache that no process holds (`temporary.remove_abandoned`: the work of a
    process that was killed), and the folders that are neither entries nor temporaries (an earlier fatstudio's
    work folders) once nothing has written to them for ``STALE_S`` seconds."""
    for kind in KINDS:
        remove_abandoned(kind.root())
        for folder in _folders(kind):
            if _complete(kind, folder) or folder.name.endswith(SUFFIX):
                continue
            try:
                newest = max((p.stat().st_mtime for p in folder.iterdir()), default=folder.stat().st_mtime)
            except OSError:
                continue
            if time.time() - newest > STALE_S:
                shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def work_folder(kind: Kind, key: str) -> Iterator[Path]:
    """A new hidden folder, held while the block runs, in which to make entry ``key`` of ``kind`` (then renamed to
    ``key`` within the block; removed if it is not), once stale work folders are removed."""
    root = kind.root()
    root.mkdir(parents=True, exist_ok=True)
    remove_stale()
    with made_beside(root / key, folder=True) as work:
        yield work


def prune(keep: Path | None = None, cap: int | None = None) -> list[Path]:
    """Remove the least recently used entries, of every kind, until the cache holds at most ``cap`` bytes
    (`cache_cap`), never ``keep`` (the one in use); return those removed. An entry another process has open
    stays readable to it (its files are unlinked, not truncated)."""
    found = sorted((e for kind in KINDS for e in entries(kind)), key=lambda e: e.used)
    total, cap = sum(e.size for e in found), cache_cap() if cap is None else cap
    removed = []
    for e in found:
        if total <= cap:
            break
        if keep is not None and e.folder == keep:
            continue
        if _remove(e.folder):
            total -= e.size
            removed.append(e.folder)
    return removed


def _remove(entry: Path) -> bool:
    """Remove ``entry``, first renamed to a hidden work name, so that one removed part way (its process killed,
    a file held open) is never listed as complete but removed as abandoned (`remove_stale`); whether it is gone."""
    gone = entry.with_name(f".{entry.name}.removed-{os.getpid()}-{time.monotonic_ns()}{SUFFIX}")  # held by none
    try:
        entry.rename(gone)
    except OSError:  # removed by another process meanwhile, or held open where that forbids a rename
        return not entry.exists()
    shutil.rmtree(gone, ignore_errors=True)
    return True
