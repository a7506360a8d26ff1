"""Where commands write, checked before they do, so that a run is only ever changed by a command aimed at it:
an output file (`check_output`: never a run's own file, never inside a run folder, never a folder or a FIFO)
and a resumed run continued in another folder (`copy_run`: the copy is trained, the original left as it is)."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ..files import regular_file
from .folder import LOCK, Run, run_folder_above


def check_output(path: str | Path, what: str = "--out") -> Path:
    """``path`` if a command may write its result there: not a folder, a device, a FIFO or a socket (an existing
    regular file is replaced), not through a file, and not inside a run folder (a run's files are the run's
    own: write elsewhere). Else a ValueError naming it."""
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
    return out


def copy_run(run: Run, dest: str | Path) -> Run:
    """A copy of ``run`` at ``dest`` (new, or an empty folder: `Run.check_new`) to continue training there (the
    CLI's ``--resume RUN --out NEW``): every file but the lock, copied to a temporary folder beside ``dest`` and
    renamed into place; ``run`` is left exactly as it was. Refused while another process trains ``run``."""
    dest = Path(dest)
    if dest.resolve() == run.path.resolve():
        return run
    Run.check_new(dest)
    run.lock()  # a run being trained would be copied mid-write: refused at once
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
        shutil.copytree(run.path, tmp, ignore=shutil.ignore_patterns(LOCK, "*.tmp"), dirs_exist_ok=True,
                        copy_function=_copy_regular)
        if dest.exists():  # an empty folder (perhaps with a stale lock's file)
            with contextlib.suppress(FileNotFoundError):
                (dest / LOCK).unlink()
            dest.rmdir()
        os.replace(tmp, dest)
        tmp = None
    except OSError as e:
        raise ValueError(f"cannot copy the run {run.path} to {dest}: {e.strerror or e}"
                         f"{f' ({e.filename})' if e.filename else ''}.") from None
    finally:
        run.unlock()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    copy = Run.open(dest)
    copy.write_meta(copied_from=str(run.path))
    return copy


def _copy_regular(src: str, dst: str) -> None:
    regular_file(src)  # a FIFO or a device inside the run is refused, never read
    shutil.copy2(src, dst)
