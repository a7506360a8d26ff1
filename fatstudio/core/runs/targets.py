"""Where commands write, checked before they do, so that a run is only ever changed by a command aimed at it:
an output file (`check_output`: never a run's own file, never inside a run folder, never a folder or a FIFO)
and a resumed run continued in another folder (`copy_run`: the copy is trained, the original left as it is)."""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from ..files import cannot_make, regular_file
from ..temporary import made_beside
from .folder import BUSY, LOCK, Run, run_folder_above


def check_output(path: str | Path, what: str = "--out", parents: bool = False) -> Path:
    """``path`` if a command may write its result there: not a folder, a device, a FIFO or a socket (an existing
    regular file is replaced), not through a file, in a folder that exists (or, with ``parents``, may be made) and
    may be written (`files.cannot_make`), and not inside a run folder (a run's files are the run's own: write
    elsewhere). Else a ValueError naming it: checked before any work, so that none is lost for want of a place."""
    out = Path(path)
    if out.exists() or out.is_symlink():
        if out.is_dir():
            raise ValueError(f"{what} {out} is a folder; give a file name.")
        if out.exists():
            regular_file(out)  # NotAFile for a device, FIFO or socket
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{what} {out}: {parent} is a file, not a folder.")
    inside = run_folder_above(out)
    if inside:
        raise ValueError(f"{what} {out} is inside the run folder {inside}, which only training that run changes; "
                         "write it elsewhere.")
    if not parents and not out.parent.is_dir():
        raise ValueError(f"{what} {out}: the folder {out.parent} does not exist; make it first, or write elsewhere.")
    problem = cannot_make(out.parent)
    if problem:
        raise ValueError(f"{what} {out} cannot be written: {problem}.")
    return out


def copy_run(run: Run, dest: str | Path) -> Run:
    """A copy of ``run`` at ``dest`` (new, or an empty folder: `Run.check_new`) to continue training there (the
    CLI's ``--resume RUN --out NEW``): every file but the lock, copied to a temporary folder beside ``dest``
    (`temporary.made_beside`) and renamed into place, writable whatever ``run``'s files are. ``run`` is only read:
    never written nor locked, so it may be on a read-only disk. Refused while another process trains ``run``, and
    if its files change while they are copied (a process began training it meanwhile)."""
    dest = Path(dest)
    if dest.resolve() == run.path.resolve():
        return run
    Run.check_new(dest)
    if run.trained_elsewhere:
        raise ValueError(BUSY.format(path=run.path))
    before = _identities(run.path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with made_beside(dest, folder=True) as tmp:
            shutil.copytree(run.path, tmp, ignore=shutil.ignore_patterns(LOCK, "*.tmp"), dirs_exist_ok=True,
                            copy_function=_copy_regular)
            if _identities(run.path) != before or run.trained_elsewhere:
                raise ValueError(BUSY.format(path=run.path))
            _writable(tmp)
            if dest.exists():  # an empty folder (perhaps with a stale lock's file)
                with contextlib.suppress(FileNotFoundError):
                    (dest / LOCK).unlink()
                dest.rmdir()
            os.replace(tmp, dest)
    except OSError as e:
        raise ValueError(f"cannot copy the run {run.path} to {dest}: {e.strerror or e}"
                         f"{f' ({e.filename})' if e.filename else ''}.") from None
    copy = Run.open(dest)
    copy.write_meta(copied_from=str(run.path))
    return copy


def _identities(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Each file's (inode, size, modification time) under ``folder``: what changes when a process writes it."""
    found = {}
    for p in folder.rglob("*"):
        with contextlib.suppress(OSError):
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                found[p.relative_to(folder).as_posix()] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return found


def _writable(folder: Path) -> None:
    """Let this user write ``folder`` and what it holds (a copy of a read-only run keeps its files' modes)."""
    for p in (folder, *folder.rglob("*")):
        mode = p.lstat().st_mode
        if not stat.S_ISLNK(mode) and not mode & stat.S_IWUSR:
            p.chmod(stat.S_IMODE(mode) | stat.S_IWUSR)


def _copy_regular(src: str, dst: str) -> None:
    regular_file(src)  # a FIFO or a device inside the run is refused, never read
    shutil.copy2(src, dst)
