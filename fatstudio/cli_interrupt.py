"""How a command ends when it is interrupted: SIGTERM raised as Ctrl-C's KeyboardInterrupt (so that what the
command was writing is removed) and the exit status 128 + the signal."""
from __future__ import annotations

import signal
from typing import Any


def interrupted(e: KeyboardInterrupt) -> int:
    """The exit code of an interrupted command: 128 + the signal."""
    return 143 if str(e) == "SIGTERM" else 130


def interrupt(signum: int, _frame: Any) -> None:
    """SIGTERM ends a command as Ctrl-C does: a KeyboardInterrupt, so that what it was writing is removed."""
    raise KeyboardInterrupt(signal.Signals(signum).name)
