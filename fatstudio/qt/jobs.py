"""The Qt side of the job system (`core.app.jobs`): its post is the GUI thread's event loop.

One `_Mailbox`, a QObject made in the GUI thread, lives as long as the application: a job's thread posts a
callable by emitting its signal (a queued connection: the callable runs on the GUI thread at its next turn of the
event loop). The job threads touch no other Qt object, and no Qt object is made for a job, so none is ever
destroyed outside the GUI thread (what the superqt workers did: their signal objects died with their runnables in
the pool's threads, now and then while the GUI thread was delivering one of their signals: a segmentation fault).

When the application is about to quit, every job system is shut down (a training run stops and is saved) and the
mailbox is closed before it goes: what a thread posts after that is dropped.
"""
from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal

from ..core.app.jobs import EXIT_WAIT_S, Jobs, shutdown_all

log = logging.getLogger("fatstudio.qt")


class _Mailbox(QObject):
    posted = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    @staticmethod
    def _run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("delivering a job's result")


def _alive(callback: Callable[..., object]) -> bool:
    """Whether a callback's receiver is still there: a bound method of a widget deleted since has nobody to tell."""
    receiver = getattr(callback, "__self__", None)
    return not isinstance(receiver, QObject) or shiboken6.isValid(receiver)


_box: _Mailbox | None = None
_lock = threading.Lock()  # a post and the mailbox's closing never overlap


def _post(fn: Callable[[], None]) -> None:
    with _lock:
        if _box is not None:
            _box.posted.emit(fn)


def _mailbox() -> None:
    """Make the mailbox, in the GUI thread, once per application; close it when the application quits."""
    global _box
    if _box is not None:
        return
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("the job system needs a QApplication.")
    _box = _Mailbox()
    app.aboutToQuit.connect(shutdown)


def new_jobs() -> Jobs:
    """A job system whose callbacks run on the GUI thread (call it from the GUI thread)."""
    _mailbox()
    return Jobs(_post, _alive)


def shutdown(timeout: float = EXIT_WAIT_S) -> bool:
    """Stop every job (a training run is saved) and wait for their threads; then close the mailbox. Whether every
    thread ended in time."""
    global _box
    ended = shutdown_all(timeout)
    if not ended:
        log.warning("job threads still running as the application quits")
    with _lock:
        box, _box = _box, None
    if box is not None:
        box.deleteLater()
    return ended


def process_posted() -> None:
    """Deliver what the job threads posted so far (the event loop does this by itself; for a closing window)."""
    QCoreApplication.sendPostedEvents(None, 0)


atexit.register(lambda: shutdown_all(EXIT_WAIT_S))  # a script that ends without quitting the application
