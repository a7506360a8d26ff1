"""The one place that makes threads (`spawn`): the job system (`core.app.jobs`) runs each job in one, and the core's
own background work (a corpus read while the trainer reports its progress, a decode step compiling) in one too.
A thread made here touches no Qt object; what it hands over travels as plain values."""
from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable


def spawn(target: Callable[[], None], name: str) -> threading.Thread:
    """Start ``target()`` in a daemon thread called ``fatstudio-<name>`` (its caller joins it if it must)."""
    thread = threading.Thread(target=target, name=f"fatstudio-{name}", daemon=True)
    thread.start()
    return thread


def lower_priority() -> None:
    """The calling thread, and the processes it starts, at the lowest CPU priority: its work takes what training,
    generation and the GUI leave (Linux, where each thread has its own nice value; elsewhere nothing changes).
    For a job's thread, which ends with its job."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)

