"""The one place that makes threads (`spawn`): the job system (`core.app.jobs`) runs each job in one, and the core's
own background work (a corpus read while the trainer reports its progress, a decode step compiling) in one too.
A thread made here touches no Qt object; what it hands over travels as plain values."""
from __future__ import annotations

import threading
from collections.abc import Callable


def spawn(target: Callable[[], None], name: str) -> threading.Thread:
    """Start ``target()`` in a daemon thread called ``fatstudio-<name>`` (its caller joins it if it must)."""
    thread = threading.Thread(target=target, name=f"fatstudio-{name}", daemon=True)
    thread.start()
    return thread
