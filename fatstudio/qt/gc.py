"""Python's cyclic garbage collector, run from the GUI thread only.

Left to itself, the collector runs in whichever thread happens to allocate when a threshold is crossed: a
worker thread, often (training, corpus loading, prompting). Qt objects in a cycle collected there have their
deletion handed to the GUI thread by PySide, which runs it at its next chance, even in the middle of another
object's destructor; we saw that deadlock on a Qt mutex. So automatic collection is turned off and a timer in
the GUI thread collects, by the same thresholds, a few times a second.
"""
from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500


def collect_due() -> None:
    """Collect the oldest generation whose count passed its threshold, as the automatic collector would."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    due = [g for g in range(3) if counts[g] > thresholds[g]]
    if due:
        gc.collect(max(due))


class MainThreadCollector(QObject):
    """Turns automatic collection off (for the process) and collects from a timer (`collect_due`) instead."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS):
        super().__init__(parent)
        gc.disable()
        self.timer = QTimer(self, interval=interval_ms, timeout=collect_due)
        self.timer.start()
