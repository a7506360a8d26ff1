"""Background work, one system for the whole application (Qt-free; the Qt layer gives it its event loop).

A job is a function run in a thread of its own, submitted under a key ("token-loss", "knockout", "training"):
the latest submission for a key wins, an earlier one still running is cancelled. Whatever a job hands back — its
result, its error in words, its progress, the items it yields — is *posted* to the thread that owns the
application model (the GUI thread; `Mailbox.drain` in a script or a test) and delivered there once, and only while
the job is still its key's latest and not cancelled: a view never receives a stale result.

A job function that takes a ``progress`` keyword gets a `Progress`: ``progress(fraction, message)`` reports, and
raises `Cancelled` once the job is cancelled, so superseded work ends at its next report (as Orange's compute
functions get a Qt-free reporter). A function that returns an iterator (a generator) has each item it yields
delivered in turn, to ``on_item``; with a ``stop`` hook, cancelling calls it and the iterator runs on to its own
end undelivered (a training run checkpoints), else it is closed at its next item.

Each job's thread comes from `core.threads.spawn`. The threads touch no Qt object: what they hand over are plain values and the
callbacks run on the owner's thread, so a Qt object is made, used and destroyed in the GUI thread alone.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from psygnal import Signal

from ..threads import spawn

log = logging.getLogger("fatstudio.jobs")

Post = Callable[[Callable[[], None]], None]  # hands a callable to the owner's thread, from any thread
EXIT_WAIT_S = 120.0  # a training step, a tokenizer's training or an import of torch ends well within this


class Cancelled(Exception):
    """Raised by a cancelled job's `Progress`: the function stops at its next report."""


class JobFailure(Exception):
    """An error a job function raises in words meant for the user (never a traceback)."""


def describe_error(exc: BaseException) -> str:
    """What went wrong, in words a person reads in a dialog: never a traceback."""
    if isinstance(exc, (JobFailure, ValueError)):
        return str(exc)
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name:
        return f"Out of memory: {str(exc) or 'lower the batch size, ℓ_max or d_e'}."
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return f"A file could not be read or written{where}: {exc.strerror or exc}."
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"Unexpected error ({name}){': ' + text if text else ''}."


class Status(str, Enum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


@dataclass(eq=False)
class Job:
    """One submission: its ``key``, a ``number`` unique in the process, and where it stands (``status``)."""

    key: str
    number: int
    status: Status = Status.RUNNING
    stop: Callable[[], None] | None = field(default=None, repr=False)
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _progress: list[tuple[float, str]] = field(default_factory=list, repr=False)  # reports not yet delivered
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def running(self) -> bool:
        """Not yet ended, nor cancelled."""
        return self.status is Status.RUNNING and not self.cancelled

    def cancel(self) -> None:
        """Nothing more of this job is delivered; its `Progress` raises `Cancelled`; its ``stop`` hook runs."""
        if self._cancel.is_set():
            return
        self._cancel.set()
        if self.stop is not None:
            try:
                self.stop()
            except Exception:  # a stop hook that fails leaves the job to end by itself
                log.exception("stopping job %s", self.key)


class Progress:
    """What a job function gets as ``progress``: call it with (fraction, message); it raises `Cancelled` once the
    job is cancelled. Reports come faster than a view draws them: of undelivered reports with the same message only
    the latest is kept (each new message is delivered).
    `send` hands over a partial result (to ``on_item``), every one delivered in turn."""

    def __init__(self, job: Job, post: Callable[[], None], send: Callable[[Any], None]):
        self._job, self._post, self._send = job, post, send

    @property
    def cancelled(self) -> bool:
        return self._job.cancelled

    def __call__(self, fraction: float, message: str = "") -> None:
        job = self._job
        if job.cancelled:
            raise Cancelled
        report = (float(fraction), str(message))
        with job._lock:
            pending = job._progress
            if pending and pending[-1][1] == report[1]:
                pending[-1] = report
                return
            pending.append(report)
            if len(pending) > 1:
                return
        self._post()

    def send(self, item: Any) -> None:
        """Deliver ``item`` to the job's ``on_item``; `Cancelled` once the job is cancelled."""
        if self._job.cancelled:
            raise Cancelled
        self._send(item)


@dataclass
class _Callbacks:
    on_result: Callable[[Any], None] | None = None
    on_error: Callable[[str], None] | None = None
    on_progress: Callable[[float, str], None] | None = None
    on_item: Callable[[Any], None] | None = None
    on_end: Callable[[Status], None] | None = None


class Mailbox:
    """A `Post` for a thread without an event loop: callables queue up until `drain` runs them on the caller's
    thread (a script, a test)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def post(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def drain(self) -> int:
        """Run what was posted so far; how many."""
        n = 0
        while True:
            try:
                fn = self._queue.get_nowait()
            except queue.Empty:
                return n
            fn()
            n += 1


_NUMBERS = itertools.count(1)
_ALL: weakref.WeakSet[Jobs] = weakref.WeakSet()  # for `shutdown_all`


class Jobs:
    """The application's background work (see the module's docstring). ``post`` hands a callable to the owner's
    thread (the Qt layer's event loop, or a `Mailbox`); ``alive(callback)``, if given, says whether a callback's
    receiver still exists (a widget deleted meanwhile gets nothing).

    Signals, on the owner's thread: ``started(key)``, ``ended(key, status)`` (every job, cancelled ones too:
    their thread has ended)."""

    started = Signal(str)
    ended = Signal(str, object)

    def __init__(self, post: Post, alive: Callable[[Callable[..., Any]], bool] | None = None):
        self._post, self._alive = post, alive
        self._current: dict[str, Job] = {}  # each key's latest job, until it has ended
        self._threads: dict[Job, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = False
        _ALL.add(self)

    # ---- submitting --------------------------------------------------------------------------------------
    def submit(self, key: str, fn: Callable[..., Any], *args: Any, on_result: Callable[[Any], None] | None = None,
               on_error: Callable[[str], None] | None = None, on_progress: Callable[[float, str], None] | None = None,
               on_item: Callable[[Any], None] | None = None, on_end: Callable[[Status], None] | None = None,
               stop: Callable[[], None] | None = None, progress: bool = False, **kwargs: Any) -> Job:
        """Run ``fn(*args, **kwargs)`` (with ``progress=`` a `Progress` if ``progress``) in a thread; the job
        submitted before under ``key`` is cancelled. Callbacks run on the owner's thread: ``on_result(value)``,
        ``on_error(message)``, ``on_progress(fraction, message)``, ``on_item(item)`` for each item of an iterator
        ``fn`` returns, and ``on_end(status)`` last. ``stop``: how to end the job early (cancelling calls it)."""
        job = Job(key, next(_NUMBERS), stop=stop)
        calls = _Callbacks(on_result, on_error, on_progress, on_item, on_end)
        if progress:
            kwargs["progress"] = Progress(job, lambda: self._post(lambda: self._deliver_progress(job, calls)),
                                          lambda item: self._post_item(job, calls, item))
        with self._lock:
            if self._closed:  # the application is ending: nothing starts
                job.status = Status.CANCELLED
                job._cancel.set()
                return job
            earlier = self._current.get(key)
            self._current[key] = job
            held = [calls, fn, args, kwargs]  # taken by the job's thread, which keeps no reference of its own
            self._threads[job] = spawn(lambda: self._run(job, held), f"job-{key}")
        if earlier is not None:
            earlier.cancel()
        self.started.emit(key)
        return job

    def cancel(self, key: str) -> bool:
        """Cancel ``key``'s job, if one runs: nothing more of it arrives."""
        job = self._current.get(key)
        if job is None:
            return False
        job.cancel()
        return True

    def current(self, key: str) -> Job | None:
        """``key``'s latest job while it runs (None once it has ended or was cancelled)."""
        job = self._current.get(key)
        return job if job is not None and not job.cancelled else None

    def busy(self, key: str) -> bool:
        return self.current(key) is not None

    @property
    def idle(self) -> bool:
        """No job's thread runs, and every job's end has been delivered (so has all it posted before)."""
        with self._lock:
            return not self._threads

    # ---- ending ------------------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until every thread started so far has ended (or ``timeout`` seconds passed); whether they did.
        What they posted is still to be delivered."""
        with self._lock:
            threads = list(self._threads.values())
        for t in threads:
            t.join(timeout)
        return not any(t.is_alive() for t in threads)

    def shutdown(self, timeout: float = EXIT_WAIT_S) -> bool:
        """Before the application ends: no job starts any more, every job is cancelled (a training run stops and
        is saved) and its thread waited for; whether they all ended."""
        with self._lock:
            self._closed = True
            jobs = list(self._threads)
        for job in jobs:
            job.cancel()
        return self.wait(timeout)

    # ---- in the job's thread -------------------------------------------------------------------------------
    def _run(self, job: Job, held: list[Any]) -> None:
        """The job's thread. Everything it was handed (the function, its arguments, the callbacks: a widget's bound
        method holds the widget) and made (the result) goes back to the owner's thread to be let go of there: were
        the last reference dropped here, a Qt object would be destroyed outside its thread."""
        calls, fn, args, kwargs = held
        held.clear()
        status, outcome, value = Status.DONE, None, None
        try:
            value = fn(*args, **kwargs)
            if isinstance(value, Iterator):
                value = self._iterate(job, calls, value)
            if not job.cancelled and calls.on_result is not None:
                self._post(partial(self._deliver, job, calls.on_result, value))
        except Cancelled:
            status = Status.CANCELLED
        except BaseException as e:  # a job's error reaches the user in words, never as a traceback
            status = Status.FAILED
            if not isinstance(e, (ValueError, JobFailure)) and not job.cancelled:
                log.error("job %s failed:\n%s", job.key, "".join(traceback.format_exception(e)))
            outcome = describe_error(e)
            if calls.on_error is not None and not job.cancelled:
                self._post(partial(self._deliver, job, calls.on_error, outcome))
        finally:
            ending = partial(self._end, job, status, [calls, fn, args, kwargs, value])
            del calls, fn, args, kwargs, value
            self._post(ending)

    def _iterate(self, job: Job, calls: _Callbacks, items: Iterator[Any]) -> Any:
        """Deliver each item; cancelled, run on undelivered (a ``stop`` hook ends it) or close the iterator."""
        try:
            while True:
                try:
                    item = next(items)
                except StopIteration as done:
                    return done.value
                if job.cancelled:
                    if job.stop is None:
                        raise Cancelled
                else:
                    self._post_item(job, calls, item)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _post_item(self, job: Job, calls: _Callbacks, item: Any) -> None:
        if calls.on_item is not None:
            self._post(partial(self._deliver, job, calls.on_item, item))

    # ---- on the owner's thread -------------------------------------------------------------------------------
    def _deliverable(self, job: Job, callback: Callable[..., Any]) -> bool:
        return (not job.cancelled and self._current.get(job.key) is job
                and (self._alive is None or self._alive(callback)))

    def _deliver(self, job: Job, callback: Callable[..., Any], *args: Any) -> None:
        if self._deliverable(job, callback):
            callback(*args)

    def _deliver_progress(self, job: Job, calls: _Callbacks) -> None:
        with job._lock:
            reports, job._progress = job._progress, []
        if calls.on_progress is not None:
            for report in reports:
                self._deliver(job, calls.on_progress, *report)

    def _end(self, job: Job, status: Status, held: list[Any]) -> None:
        """On the owner's thread, last: the job has ended; what its thread held is let go of here."""
        calls: _Callbacks = held[0]
        if job.cancelled:
            status = Status.CANCELLED
        job.status = status
        with self._lock:
            self._threads.pop(job, None)
        latest = self._current.get(job.key) is job
        if latest:
            del self._current[job.key]
        if latest and status is not Status.CANCELLED and calls.on_end is not None and (
                self._alive is None or self._alive(calls.on_end)):
            calls.on_end(status)
        self.ended.emit(job.key, status)


def shutdown_all(timeout: float = EXIT_WAIT_S) -> bool:
    """`Jobs.shutdown` for every job system of the process (the application is ending)."""
    return all([jobs.shutdown(timeout) for jobs in list(_ALL)])  # noqa: C419 (every one, not until one fails)
