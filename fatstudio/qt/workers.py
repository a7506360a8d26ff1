"""Work off the GUI thread, with superqt workers.

``TrainingJob`` iterates the core's ``training.train(...)`` generator in a worker thread; each yielded event
reaches the GUI thread through a queued ``event`` signal (the core already batches per-step numbers to ~10
events a second). ``call_in_thread`` runs one function (corpus loading, tokenizer training, loading a run's
model) and hands the result or the error message back on the GUI thread.

The heavy modules (torch, tokenizers, the core's training/data/runs) are imported inside the worker
functions, so the window opens without them.

No worker outlives the interpreter: ``shutdown_workers`` asks every running job to stop (a training run then
checkpoints and is marked stopped), drops the results of calls still in flight and waits for the pool's
threads. ``install_shutdown`` runs it when the application is about to quit (before Python's own shutdown
begins: a thread importing torch then still can), and it is registered with ``atexit`` too, after PySide6's own
clean-up (so it runs before it): a script or test that quits while a worker still runs (importing torch,
training a tokenizer, generating) ends quietly, not with tracebacks from threads whose Qt objects are gone.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import traceback
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

from PySide6.QtCore import SIGNAL, QObject, QThreadPool, QTimer, Signal
from superqt.utils import FunctionWorker, GeneratorWorker, WorkerBase

log = logging.getLogger("fatstudio.qt")


class WorkerFailure(Exception):
    """An error from a worker, carried as words. (Not a RuntimeError: superqt's generator worker swallows
    those as 'worker deleted'.)"""


def describe_error(exc: BaseException) -> str:
    """What went wrong, in words a person reads in a dialog: never a traceback."""
    if isinstance(exc, WorkerFailure):
        return str(exc)
    if isinstance(exc, ValueError):
        return str(exc)
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name:
        return f"Out of memory: {exc or 'lower the batch size, ℓ_max or d_e'}."
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return f"A file could not be read or written{where}: {exc.strerror or exc}."
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Unexpected error ({name}){': ' + text if text else ''}."


def _as_failure(exc: BaseException) -> WorkerFailure:
    if not isinstance(exc, (ValueError, WorkerFailure)):
        log.error("worker error:\n%s", "".join(traceback.format_exception(exc)))
    return WorkerFailure(describe_error(exc))


class Cancelled(Exception):
    """Raised by a cancelled call's ``progress`` callable: the function stops at its next report (its result
    would be dropped anyway)."""


class ControlReady:
    """The first item the training generator yields: the core's Control, made in the worker thread so the
    GUI thread never imports torch."""

    kind = "controlready"

    def __init__(self, control):
        self.control = control


def _training_generator(config, run_dir, resume, prepared, probe, init_from):
    try:
        from fatstudio.core import training

        control = training.Control()
        yield ControlReady(control)
        yield from training.train(config, run_dir=run_dir, resume=resume, control=control, prepared=prepared,
                                   probe=probe, init_from=init_from)
    except GeneratorExit:
        raise
    except BaseException as e:
        raise _as_failure(e) from None


class TrainingJob(QObject):
    """One training run in a worker thread.

    Signals: ``event(object)`` for every core event (GUI thread), ``failed(str)`` with a message when the
    trainer raised, ``done()`` when the worker thread has ended (after ``failed`` if it failed).
    """

    # shadows QObject.event(), which Qt calls only on the C++ side for this class; the window and the tests
    # connect to this name (renaming it: a change for all of them at once)
    event = Signal(object)  # type: ignore[assignment]
    failed = Signal(str)
    done = Signal()

    def __init__(self, config, run_dir=None, resume: bool = False, prepared=None, probe=None, parent=None,
                 init_from=None):
        super().__init__(parent)
        self.control = None
        self._pending: list[tuple[str, tuple]] = []  # requests (method, arguments) made before the Control arrived
        self._running = False
        self._worker = GeneratorWorker(_training_generator, config, run_dir, resume, prepared, probe, init_from)
        self._worker.yielded.connect(self._on_yielded)
        self._worker.errored.connect(self._on_error)
        self._worker.finished.connect(self._on_finished)

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        if _QUITTING:  # the application is ending: no run starts
            return
        self._running = True
        _STOPPABLE.add(self)
        start_now(self._worker)

    def _on_error(self, exc) -> None:
        self.failed.emit(describe_error(exc))

    def _on_yielded(self, ev) -> None:
        if isinstance(ev, ControlReady):
            self.control = ev.control
            for name, args in self._pending:
                getattr(self.control, name)(*args)
            self._pending.clear()
            return
        self.event.emit(ev)

    def _on_finished(self, *_args) -> None:
        self._running = False
        self.done.emit()

    def _request(self, name: str, *args) -> None:
        if self.control is not None:
            getattr(self.control, name)(*args)
        else:
            self._pending.append((name, args))

    def stop(self) -> None:
        self._request("stop")

    def pause(self) -> None:
        self._request("pause")

    def resume(self) -> None:
        self._request("resume")

    def step_once(self) -> None:
        """While paused: one step, then paused again (`Control.step_once`)."""
        self._request("step_once")

    def set_lr(self, lr: float | None) -> None:
        """A fixed learning rate from the next step on; None: back to the schedule (`Control.set_lr`)."""
        self._request("set_lr", lr)

    def request_snapshot(self) -> None:
        self._request("request_snapshot")

    def take_snapshot(self):
        return self.control.take_snapshot() if self.control is not None else None

    @property
    def stopping(self) -> bool:
        return ("stop", ()) in self._pending or bool(self.control and self.control.stopping)


class _CallSignals(QObject):
    progress = Signal(float, str)


class Call(QObject):
    """A function run once in a worker thread. ``progress(fraction, message)``, ``result(object)``,
    ``failed(str)``, ``done()`` arrive on the GUI thread. If the function accepts a ``progress`` keyword,
    pass ``with_progress=True`` and it gets a thread-safe callable ``progress(fraction, message)``, which
    raises `Cancelled` once the call is cancelled (`cancel`), so a superseded or abandoned call ends at its next report.

    The worker thread takes the function and its arguments when it begins, and lets go of them when it returns:
    PySide (6.11) keeps about half of the runnables handed to the thread pool (superqt's workers among them)
    alive after they ran, and with them whatever they refer to. A call's arguments (a snapshot's weights, a
    run's paths) stayed resident for good: a long session grew by megabytes a minute. And once done, a call
    disconnects its receivers: a lambda that holds the call (to know whether its result is still wanted) would
    otherwise keep it, through a connection the garbage collector cannot see."""

    progress = Signal(float, str)
    result = Signal(object)
    failed = Signal(str)
    done = Signal()

    def __init__(self, func: Callable[..., Any], *args, with_progress: bool = False, parent=None, **kwargs):
        super().__init__(parent)
        self._sig = _CallSignals()  # emitted from the worker thread, delivered queued to the GUI thread
        self._sig.progress.connect(self._on_progress)
        if with_progress:
            kwargs["progress"] = self._emit_progress
        self._cancel = threading.Event()
        cancel, work = self._cancel, [(func, args, kwargs)]

        def run():  # holds neither the call nor, once it has begun, what it runs: see the class's docstring
            f, a, kw = work.pop()
            try:
                return f(*a, **kw)
            except Cancelled:
                return None
            except BaseException as e:
                if cancel.is_set():  # abandoned (superseded, or the application is ending): nobody to tell
                    return None
                raise _as_failure(e) from None

        self._worker = FunctionWorker(run)
        self._worker.returned.connect(self._on_result)
        self._worker.errored.connect(self._on_error)
        self._worker.finished.connect(self._on_done)
        self._running = False

    def cancel(self) -> None:
        """The caller no longer wants the result: nothing arrives, and a progress report raises `Cancelled`."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _emit_progress(self, fraction: float, message: str = "") -> None:
        if self.cancelled:
            raise Cancelled
        with contextlib.suppress(RuntimeError):  # the receiver is gone
            self._sig.progress.emit(float(fraction), str(message))

    def _on_progress(self, fraction: float, message: str) -> None:
        if not self.cancelled:  # a report queued before the call was cancelled is dropped too
            self.progress.emit(fraction, message)

    def _on_result(self, value) -> None:
        if not self.cancelled:
            self.result.emit(value)

    def _on_error(self, exc) -> None:
        if not self.cancelled:
            self.failed.emit(describe_error(exc))

    def _on_done(self, *_args) -> None:
        self._running = False
        self.done.emit()
        for signature in ("progress(double,QString)", "result(PyObject)", "failed(QString)", "done()"):
            if self.receivers(SIGNAL(signature)):  # a done call emits nothing more
                getattr(self, signature.split("(")[0]).disconnect()
        # Let go of the call from the event loop, not from here: were this its last reference, the call would be
        # destroyed inside the delivery of its own slot, and PySide (6.11) crashes in the QObject's destructor.
        QTimer.singleShot(0, partial(_LIVE.discard, self))

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> Call:
        if _QUITTING:  # the application is ending: no new thread (the call never runs, nothing arrives)
            self.cancel()
            return self
        self._running = True
        _LIVE.add(self)
        start_now(self._worker)
        return self


def start_now(worker: WorkerBase) -> None:
    """Start a superqt worker in the global thread pool at once. (superqt's ``worker.start()``, called from a
    running event loop, starts it from a timer a millisecond later: a call made as the window closed then
    began after quitting had waited for the pool, and ran into Python's shutdown.)"""
    QThreadPool.globalInstance().start(worker)


_LIVE: set[Call] = set()  # calls in flight are kept alive until they are done
_QUITTING = False  # set when the application is about to quit


def call_in_thread(func, *args, on_result=None, on_error=None, on_progress=None, on_done=None,
                   with_progress: bool = False, owner: QObject | None = None, **kwargs) -> Call:
    """Run ``func(*args, **kwargs)`` in a worker thread and call back on the GUI thread. With an ``owner`` (the
    widget whose methods the callbacks call), the call is its child: deleted with it, so reports still queued
    when the owner goes are dropped by Qt instead of reaching a deleted widget."""
    call = Call(func, *args, with_progress=with_progress, parent=owner, **kwargs)
    if on_result:
        call.result.connect(on_result)
    if on_error:
        call.failed.connect(on_error)
    if on_progress:
        call.progress.connect(on_progress)
    if on_done:
        call.done.connect(on_done)
    return call.start()


def wait_for_workers(msecs: int = -1) -> bool:
    """Block until every worker thread of the pool has ended (or ``msecs`` passed)."""
    return QThreadPool.globalInstance().waitForDone(msecs)


_STOPPABLE: weakref.WeakSet = weakref.WeakSet()  # jobs with a stop() that ends their worker soon
EXIT_WAIT_MS = 120_000  # a training step, a tokenizer's training or an import of torch ends well within this


def register_stoppable(obj) -> None:
    """``obj.stop()`` is called by `shutdown_workers` (e.g. a panel's generation in a worker thread)."""
    _STOPPABLE.add(obj)


def shutdown_workers(msecs: int = EXIT_WAIT_MS) -> bool:
    """Before the application ends: ask every registered job to stop, drop the results of calls in flight
    (their receivers are going) and wait until the pool's threads have ended. Returns whether they all did."""
    for call in list(_LIVE):
        call.cancel()
    for job in list(_STOPPABLE):
        with contextlib.suppress(RuntimeError):  # its Qt object is already gone
            job.stop()
    return QThreadPool.globalInstance().waitForDone(msecs)


def install_shutdown(app=None) -> None:
    """Run `shutdown_workers` when the application (``app``, default the running one) is about to quit;
    once per application."""
    from PySide6.QtCore import QCoreApplication

    app = app or QCoreApplication.instance()
    if app is not None and not app.property("fatstudioShutdown"):
        app.setProperty("fatstudioShutdown", True)
        app.aboutToQuit.connect(_about_to_quit)


def _about_to_quit() -> None:
    global _QUITTING
    _QUITTING = True  # what the clean-up after this (deferred deletions, timers) would start, does not start
    if not shutdown_workers():
        log.warning("worker threads still running as the application quits")


def _at_exit() -> None:
    with contextlib.suppress(Exception):
        if not shutdown_workers():
            log.warning("worker threads still running at exit")


atexit.register(_at_exit)  # after PySide6's clean-up was registered (QtCore is imported above): runs before it
