"""Temporary work of another process (`fatstudio.core.temporary.made_beside`, its hidden folder): held while that
process lives (`held_by_another_process`), or left by one that was killed (`left_by_a_killed_process`)."""
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

_CHILD = """
import sys, time
from pathlib import Path
from fatstudio.core.temporary import made_beside
folder = sys.argv[2] == "folder"
with made_beside(Path(sys.argv[1]), folder=folder) as tmp:
    (tmp / "part" if folder else tmp).write_bytes(b"half")
    print(tmp if folder else tmp.parent, flush=True)
    time.sleep(600)
"""


def _start(target: Path, folder: bool) -> tuple[subprocess.Popen, Path]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(target), "folder" if folder else "file"],
                             stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline().strip()
    assert line, "the child made no temporary"
    return child, Path(line)


@contextlib.contextmanager
def held_by_another_process(target: Path, folder: bool = True):
    """The hidden folder of a temporary beside ``target`` that another process makes (and holds) while the block
    runs; a file in it unless ``folder``."""
    child, tmp = _start(target, folder)
    try:
        yield tmp
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def left_by_a_killed_process(target: Path, folder: bool = True) -> Path:
    """The hidden folder of a temporary beside ``target``, half made by a process then killed (SIGKILL: nothing of
    it ran after)."""
    child, tmp = _start(target, folder)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert tmp.exists()
    return tmp
