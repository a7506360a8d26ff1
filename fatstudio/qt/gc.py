"""Python's cyclic garbage collector, run from the GUI thread only.

Left to itself, the collector runs in whichever thread happens to allocate when a threshold is crossed: a
worker thread, often (training, corpus loading, prompting). Qt objects in a cycle collected there have their
deletion handed to the GUI thread by PySide, which runs it at its next chance, even in the middle of another
object's destructor; we saw that deadlock on a Qt mutex. So automatic collection is turned off and a timer in
the GUI thread collects, by the same thresholds, a few times a second.

The same object also hands the C heap's free memory back to the system now and then (`release_free_memory`,
glibc's ``malloc_trim``): glibc keeps what is freed inside its heaps, one per thread that allocated, and a
long run's snapshots, prompts and attention maps, made in worker threads and freed in another, left ever more
of it free but resident. A 5-minute soak (bench/soak.py) grew ~28 MB while in-use memory stayed flat;
``malloc_trim(0)`` then gave back 82 MB (3-16 ms). Much of what it gives back is touched again within
seconds; it keeps the rest from staying resident.
"""
from __future__ import annotations

import ctypes
import gc
import sys

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500
TRIM_INTERVAL_MS = 30_000


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc; musl and others have none
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Give the free pages inside the C heaps back to the system (glibc's ``malloc_trim(0)``; a few ms).
    False where there is no such call (not glibc)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


def collect_due() -> None:
    """Collect the oldest generation whose count passed its threshold, as the automatic collector would."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    due = [g for g in range(3) if counts[g] > thresholds[g]]
    if due:
        gc.collect(max(due))


class MainThreadCollector(QObject):
    """Turns automatic collection off (for the process) and collects from a timer (`collect_due`) instead;
    every ``trim_interval_ms`` (0: never) it also `release_free_memory`."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS,
                 trim_interval_ms: int = TRIM_INTERVAL_MS):
        super().__init__(parent)
        gc.disable()
        self.timer = QTimer(self, interval=interval_ms, timeout=collect_due)
        self.timer.start()
        self.trim_timer = QTimer(self, interval=max(1, trim_interval_ms), timeout=release_free_memory)
        if trim_interval_ms > 0 and _TRIM is not None:
            self.trim_timer.start()
