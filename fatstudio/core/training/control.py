"""Requests to a running trainer from another thread: stop, pause, one step, a fixed learning rate, a snapshot."""
from __future__ import annotations

import math
import threading

from ..inference.loaded import LoadedModel


class Control:
    """Requests from another thread, honoured by the trainer between steps.

    Besides stop / pause / resume / snapshot: ``step_once()`` (while paused) runs exactly one step, with its
    usual events, and pauses again; ``set_lr(η)`` replaces the learning-rate schedule by the fixed value η
    from the next step on (what metrics.jsonl records as ``lr``), ``set_lr(None)`` returns to the schedule
    at the step it has reached. The override belongs to this Control: a resumed run follows its schedule."""

    def __init__(self) -> None:
        self._stop, self._run = threading.Event(), threading.Event()
        self._run.set()
        self._snapshot_wanted = threading.Event()
        self._step_wanted = threading.Event()
        self._snapshot: LoadedModel | None = None
        self._lr: float | None = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()  # a paused trainer wakes up to stop

    def pause(self) -> None:
        self._step_wanted.clear()  # a step asked for before this pause is not taken after it
        self._run.clear()

    def step_once(self) -> None:
        """While paused: run one step (its events as usual), then pause again. Not paused: nothing."""
        if self.paused and not self.stopping:
            self._step_wanted.set()

    def step_requested(self) -> bool:
        """Whether one step was asked for (and no longer is)."""
        wanted = self._step_wanted.is_set()
        self._step_wanted.clear()
        return wanted

    def set_lr(self, lr: float | None) -> None:
        """Train at the fixed learning rate ``lr`` from the next step on, instead of the schedule; None: back
        to the schedule. ValueError for a negative or non-finite value."""
        if lr is not None:
            lr = float(lr)
            if not math.isfinite(lr) or lr < 0:
                raise ValueError(f"the learning rate must be a finite number ≥ 0, not {lr}.")
        with self._lock:
            self._lr = lr

    @property
    def lr_override(self) -> float | None:
        """The fixed learning rate set by `set_lr`, or None (the schedule)."""
        with self._lock:
            return self._lr

    def resume(self) -> None:
        self._run.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return not self._run.is_set()

    def wait_while_paused(self, timeout: float) -> None:
        self._run.wait(timeout)

    def request_snapshot(self) -> None:
        self._snapshot_wanted.set()

    @property
    def snapshot_wanted(self) -> bool:
        return self._snapshot_wanted.is_set()

    def deliver(self, snapshot: LoadedModel | None) -> None:
        """The trainer hands over the snapshot asked for (None: it could not be made)."""
        with self._lock:
            self._snapshot = snapshot
        self._snapshot_wanted.clear()

    def take_snapshot(self) -> LoadedModel | None:
        with self._lock:
            snap, self._snapshot = self._snapshot, None
        return snap
