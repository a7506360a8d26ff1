"""Child processes that die with their parent.

fatstudio starts two kinds of child, both ``python -m`` of itself: a sweep's runs (``fatstudio train``,
`training.sweep`) and the compile of a decode step (`inference.decode_export`). `start` starts one with this copy
of fatstudio importable (`child_env`) and the read end of a pipe whose write end only the parent holds; the child
watches it (`watch_parent`, first thing in its ``main``). When the parent ends, however it ends (``kill -9`` too:
the system closes its descriptors), or lets the child go (its ``with`` block ends, on an error too), the child reads
the end of the pipe and sends itself SIGTERM: a training child stops after its step, checkpoints and marks its run
stopped (before its first step it removes the folder it made); a compile ends. `GRACE_S` later it sends SIGKILL.

Why a pipe rather than Linux's ``prctl(PR_SET_PDEATHSIG)``: that signal comes when the *thread* that started the
child ends, not its process, and the app starts children from its job threads; setting it before ``exec`` needs a
``preexec_fn``, which is unsafe in a process with threads; set after ``exec`` it misses a parent that died first; and
it is Linux's alone. A pipe has none of these limits (macOS too), and costs the child one thread blocked in a read.
"""
from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .environment import PARENT_PIPE
from .resources import PACKAGE_ROOT
from .threads import spawn

GRACE_S = 60.0  # after the parent has gone: how long a child has to stop on SIGTERM before it is killed


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child ``python -m fatstudio…``: this one, with this copy of fatstudio importable
    (wherever the parent found it) and output unbuffered, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != PARENT_PIPE.name}  # a child's own is never its children's
    env.update(PYTHONUNBUFFERED="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@contextlib.contextmanager
def start(args: Sequence[str], env: dict[str, str] | None = None, **popen: Any) -> Iterator[subprocess.Popen]:
    """``python -m ARGS…`` as a child that dies with this process (see the module) and, at the latest, when the
    block ends; ``env``: variables added to `child_env`; ``popen``: `subprocess.Popen`'s other arguments. The block
    ends once the child has (`subprocess.Popen`'s own ``with``)."""
    cmd = [sys.executable, "-m", *args]
    if not hasattr(os, "pipe") or sys.platform == "win32":  # no descriptors to pass: the child lives on its own
        with subprocess.Popen(cmd, env=child_env(**(env or {})), **popen) as child:
            yield child
        return
    read, write = os.pipe()  # neither end inheritable: only this child gets the read end (pass_fds)
    try:
        try:
            child = subprocess.Popen(cmd, env=child_env(**(env or {}), **{PARENT_PIPE.name: str(read)}),
                                     pass_fds=(read,), **popen)
        finally:
            os.close(read)
        with child:
            yield child
    finally:
        os.close(write)  # the child reads the end of the pipe (if it still runs: it stops)


def watch_parent() -> None:
    """In a child that `start` started: end this process when its parent ends (SIGTERM, SIGKILL `GRACE_S` later).
    Elsewhere (``FATSTUDIO_PARENT_PIPE`` unset, or not a pipe) nothing. The variable is removed from this process's
    environment, so its own children never see it."""
    fd = PARENT_PIPE.value()
    os.environ.pop(PARENT_PIPE.name, None)
    if fd is None:
        return
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except OSError:
        return

    def wait() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):  # the parent never writes: this returns b"" when it has gone
                pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(GRACE_S)
        os.kill(os.getpid(), signal.SIGKILL)

    spawn(wait, "parent-watch")
