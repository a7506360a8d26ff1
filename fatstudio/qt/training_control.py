"""Training in the window: ``TrainingControl`` starts runs in the workspace (`Workspace.train`: the trainer as a job,
its events taken in on the GUI thread) and shows each event in the Training view (plots, progress, status line,
samples, diagnostics). The workspace holds the state; this only drives and shows."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from fatstudio.core import memory
from fatstudio.core.app.workspace import TrainingState, Workspace
from fatstudio.core.config import RunConfig
from fatstudio.core.training.events import (
    Checkpoint,
    Evaluation,
    Event,
    Finished,
    Note,
    Paused,
    Prepare,
    Resumed,
    Sample,
    Snapshot,
    Started,
    Steps,
)
from fatstudio.qt import state
from fatstudio.qt.panels.train import TrainView


class TrainingControl(QObject):
    """Starts runs and routes the buttons of ``view`` to ``workspace``'s commands; shows the trainer's events.

    ``message(text, ms)`` is for the status bar, ``error(text)`` for the user (a dialog too), ``snapshotTaken``
    when a snapshot of the weights is ready to prompt, ``runStarted(run_dir)`` when a run's folder is known."""

    message = Signal(str, int)
    error = Signal(str)
    snapshotTaken = Signal()
    runStarted = Signal(str)
    runsChanged = Signal()  # the run's meta.json has its latest evaluation: the runs list can show it
    DIAGNOSE_MS = 500  # diagnosing 10k rows takes tens of ms: at most twice a second while training

    def __init__(self, workspace: Workspace, view: TrainView, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace, self.view, self.plots = workspace, view, view.plots
        self._started: tuple | None = None  # the latest start's arguments
        self.refused: tuple | None = None  # those of a start refused for memory (`train_anyway`)
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            Prepare: lambda ev: self.view.show_preparing(ev.message, ev.fraction),
            Started: self._on_started, Steps: self._on_steps, Evaluation: self._on_evaluation,
            Sample: lambda ev: self.view.add_sample(ev.step, ev.text),
            Checkpoint: lambda ev: self.message.emit(f"Checkpoint at step {ev.step:,} saved.", 4000),
            Paused: lambda ev: self._on_pause(f"Paused at step {ev.step:,}.", 0),
            Resumed: lambda ev: self._on_pause(f"Resumed at step {ev.step:,}.", 4000),
            Note: lambda ev: self.message.emit(ev.message, 10000),
            Snapshot: self._on_snapshot, Finished: self._on_finished,
        }
        self._runs_stale = False  # an evaluation arrived; the trainer writes meta.json after its sample
        self.diag_timer = QTimer(self, singleShot=True, interval=self.DIAGNOSE_MS)
        self.diag_timer.timeout.connect(workspace.diagnose)
        workspace.diagnostics_due.connect(self._schedule_diagnostics)
        workspace.diagnosed.connect(self._show_diagnostics)
        workspace.event.connect(self._show_event)
        workspace.failed.connect(self._on_failed)
        workspace.ended.connect(self._on_ended)
        workspace.state_changed.connect(lambda s: view.set_state(s.value))
        view.pauseRequested.connect(self.toggle_pause)
        view.stopRequested.connect(self.stop)
        view.stepRequested.connect(self.step_once)
        view.lrRequested.connect(self.set_live_lr)
        view.snapshotRequested.connect(self.prompt_with_snapshot)

    # ---- commands --------------------------------------------------------------------------------------
    @property
    def job(self):
        """The running run's `Control` (None: no run)."""
        return self.workspace.runner

    def start(self, cfg: RunConfig, run_dir: str | None, resume: bool, probe=None, init_from: str | None = None) -> bool:
        """Start a run (``resume``: continue ``run_dir``; ``init_from``: a new run from that run's weights) as the
        workspace's training job."""
        self._started, self.refused = (cfg, run_dir, resume, probe, init_from), None
        if not self.workspace.train(cfg, run_dir=run_dir, resume=resume, probe=probe, init_from=init_from):
            return False
        self.view.show_preparing("starting", 0.0)
        return True

    def toggle_pause(self) -> None:
        pausing = self.workspace.state is TrainingState.RUNNING
        if self.workspace.toggle_pause():
            self.view.wait_for_trainer()  # until the trainer says Paused (or Resumed)
            if pausing:
                self.message.emit("Pausing after the current step…", 0)

    def step_once(self) -> None:
        """While paused: train one step, then pause again (the trainer says Paused again)."""
        if self.workspace.step_once():
            self.message.emit("One step…", 0)

    def set_live_lr(self, lr: float | None) -> None:
        """Train the running (or paused) run at the fixed learning rate ``lr`` from the next step on, or
        return to its schedule (None)."""
        if self.workspace.set_lr(lr):
            self.view.show_lr_override(lr)
            self.message.emit("η follows the schedule from the next step on." if lr is None else
                              f"η = {lr:g} from the next step on.", 6000)

    def stop(self) -> None:
        if self.workspace.stop():
            self.message.emit("Stopping after the current step; the run is saved…", 0)

    def prompt_with_snapshot(self) -> None:
        """Prompt the weights as they are now, without disturbing the training."""
        if self.workspace.request_snapshot():
            self.message.emit("Copying the current weights for prompting…", 0)

    # ---- diagnostics -----------------------------------------------------------------------------------
    def _schedule_diagnostics(self) -> None:
        if not self.diag_timer.isActive():
            self.diag_timer.start()

    def _show_diagnostics(self, findings: list, summary: str) -> None:
        self.diag_timer.stop()
        self.view.set_diagnostics(findings, summary)

    # ---- the trainer's events, shown ---------------------------------------------------------------------
    def _show_event(self, ev: Event) -> None:
        handler = self._handlers.get(type(ev))
        if handler is not None:
            handler(ev)

    def _on_pause(self, message: str, ms: int) -> None:
        self.view.set_state(self.workspace.state.value)  # paused again after one step: Step can be clicked
        self.message.emit(message, ms)

    def _on_started(self, ev) -> None:
        self.view.show_progress(ev.start_step, ev.total_steps)
        self.view.start_live_lr(float(ev.config.train.lr))
        self.plots.export_stem = f"{ev.run_dir}-curves"  # beside the run: a run folder is the run's alone
        self.plots.set_run(ev.config, ev.chars_per_token)
        self.view.show_status(
            f"Training {Path(ev.run_dir).name} on {ev.device} in {ev.precision}: {ev.n_parameters:,} parameters, "
            f"steps {ev.start_step:,} → {ev.total_steps:,}.")
        self.message.emit(f"Run folder: {ev.run_dir}", 0)
        self.runStarted.emit(ev.run_dir)

    def _on_steps(self, ev) -> None:
        self.plots.append_steps(ev.steps, ev.train_loss, ev.lr, ev.grad_norm, ev.tokens_per_s)
        self.view.show_progress(ev.step, ev.total_steps, ev.tokens_per_s, ev.eta_s,
                                f"loss {ev.train_loss[-1]:.3f}" if ev.train_loss else None, throttle=True)
        if self._runs_stale:  # show the step and best validation loss so far in the runs list
            self._runs_stale = False
            self.runsChanged.emit()

    def _on_evaluation(self, ev) -> None:
        self.plots.add_eval(ev.step, ev.val_loss)
        self.plots.grokking.add_evaluation(ev)
        numbers = self.workspace.last_evaluation.split(": ", 1)[-1]
        self.view.show_status(f"Step {ev.step:,}: {numbers}  ·  {self.workspace.run_dir}")
        self._runs_stale = True

    def _on_snapshot(self, ev) -> None:
        if ev.message:
            self.message.emit(f"No snapshot: {ev.message}", 10000)
        elif self.workspace.focus.live:
            self.snapshotTaken.emit()
            self.message.emit(f"Prompting the weights of step {ev.step:,}; training goes on.", 6000)

    def _on_finished(self, ev) -> None:
        ws = self.workspace
        evaluated = f"  ·  last evaluation, {ws.last_evaluation}" if ws.last_evaluation else ""
        self.view.show_status(f"Run {ev.said}{evaluated}  ·  {ws.run_dir}")
        if ev.status == "failed":
            self.error.emit(f"Training failed: {ev.message}")
        elif ev.status == "finished":
            self.view.show_complete()
            if ws.run_dir:
                state.add_recent_run(ws.run_dir)

    def _on_failed(self, message: str) -> None:
        self.refused = self._started if memory.OVERRIDE in message else None  # `memory.DoesNotFit`'s words
        self.error.emit(message)

    def train_anyway(self) -> None:
        """Start the run refused for memory again, the check off for the rest of the session (the error
        dialog's "Train anyway")."""
        if self.refused is not None and self.job is None:
            os.environ[memory.IGNORE_ENV] = "1"
            self.start(*self.refused)

    def _on_ended(self, status: str) -> None:
        self.plots.flush()
        self.view.show_ended(None if status == "finished" else (status or "ended"))  # finished keeps its text
