"""Training in the window: ``TrainingControl`` starts, resumes and fine-tunes runs in the workspace
(`Workspace.train`: the trainer as a job, its events taken in on the GUI thread), keeps the Train button to what may
start, times the settings (Estimate time), and shows each event in the Training view (plots, progress, status line,
samples, diagnostics). The workspace holds the state and the rules (`core.app.runs`); this only drives and shows."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from fatstudio.core import memory
from fatstudio.core.app.runs import resumption
from fatstudio.core.app.settings import SECTIONS
from fatstudio.core.app.workspace import Ending, TrainingState, Workspace
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
from fatstudio.qt.panels.train.panel import TrainPanel, TrainView

if TYPE_CHECKING:
    from fatstudio.core.runs.folder import Run

BUSY_TRAIN = {  # what the Train button says while it cannot start a run
    TrainingState.STARTING: ("Starting…", "A run is starting (preparing the corpus, the model and the run folder)."),
    TrainingState.RUNNING: ("Training…", "A run is training: stop it first to start another."),
    TrainingState.PAUSED: ("Paused", "A run is paused: resume or stop it first to start another."),
    TrainingState.STOPPING: ("Stopping…", "The run is stopping after the current step and being saved."),
}


def _estimate(config, prepared, progress):
    from fatstudio.core.training.estimate import estimate  # in the job's thread: it imports torch

    return estimate(config, prepared, progress)


class TrainingControl(QObject):
    """Starts runs and routes the buttons of ``view`` to ``workspace``'s commands; shows the trainer's events. A new
    run's probe input comes from ``train_panel``.

    ``message(text, ms)`` is for the status bar, ``error(text or None)`` for the user (a dialog too; None clears it),
    ``snapshotTaken`` when a snapshot of the weights is ready to prompt, ``runStarted(run_dir)`` when a run's folder
    is known. ``closing``: the window closes once the run has stopped, so no run starts."""

    message = Signal(str, int)
    error = Signal(object)
    snapshotTaken = Signal()
    runStarted = Signal(str)
    runsChanged = Signal()  # the run's meta.json has its latest evaluation: the runs list can show it
    trainAllowed = Signal(bool)  # whether a new run may start now (the menu's Train follows the button)
    DIAGNOSE_MS = 500  # diagnosing 10k rows takes tens of ms: at most twice a second while training

    def __init__(self, workspace: Workspace, view: TrainView, train_panel: TrainPanel, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace, self.view, self.plots, self.train_panel = workspace, view, view.plots, train_panel
        self.closing = False
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
        workspace.state_changed.connect(self._state_changed)
        workspace.run_changed.connect(self.show_plan)
        for changed in (workspace.settings.changed, workspace.corpus.changed):
            changed.connect(self.update_train)
        workspace.settings.changed.connect(
            lambda change: view.forget_estimate() if any(map(change.touches, SECTIONS)) else None)
        view.trainRequested.connect(self.start_training)
        view.estimateRequested.connect(self.estimate_time)
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

    def start_training(self) -> bool:
        """Start a new run with the current settings (the Train button); what keeps it from starting is said."""
        ws = self.workspace
        if ws.state != TrainingState.IDLE:
            self.message.emit(f"A run is already {ws.state.value}: no second run is started.", 6000)
            return False
        problem = ws.problem()
        if problem is not None:
            self.message.emit(problem, 8000)
            return False
        return self.start_new_run(ws.settings.config)

    def start_new_run(self, cfg: RunConfig, init_from: str | None = None, run_dir: str | None = None) -> bool:
        """A new run of ``cfg`` (in ``run_dir``; None: a new name in the runs folder); ``init_from``: from that run's
        weights and tokenizer (Fine-tune…, in the folder its question named)."""
        self.plots.clear()
        self.view.clear_run()
        self.workspace.show_rows([], {})
        return self._start(cfg, run_dir=run_dir, resume=False, init_from=init_from)

    def resume_run(self, run: Run, total_steps: int) -> bool:
        """Continue ``run`` from its last checkpoint up to ``total_steps`` (`core.app.runs.resumption`)."""
        if self.workspace.state != TrainingState.IDLE:
            return False
        try:
            plan = resumption(run, total_steps)
        except ValueError as e:
            self.error.emit(str(e))
            return False
        if str(run.path) != self.workspace.run_dir:  # another run than the one shown: its overlays compared that one
            self.plots.clear_overlays()
        self.plots.load_metrics(plan.rows)
        self.workspace.show_rows(plan.rows, {})
        self.view.set_samples(plan.samples)
        return self._start(plan.config, run_dir=str(run.path), resume=True)

    def _start(self, cfg: RunConfig, run_dir: str | None, resume: bool, init_from: str | None = None) -> bool:
        try:
            probe = None if resume else self.train_panel.probe()  # a resumed run keeps its own
        except ValueError as e:
            self.error.emit(str(e))
            return False
        self.error.emit(None)
        return self.start(cfg, run_dir, resume, probe, init_from)

    def start(self, cfg: RunConfig, run_dir: str | None, resume: bool, probe=None, init_from: str | None = None) -> bool:
        """Start a run (``resume``: continue ``run_dir``; ``init_from``: a new run from that run's weights) as the
        workspace's training job."""
        self._started, self.refused = (cfg, run_dir, resume, probe, init_from), None
        if not self.workspace.train(cfg, run_dir=run_dir, resume=resume, probe=probe, init_from=init_from):
            return False
        self.view.show_preparing("starting", 0.0)
        return True

    def holds_close(self, confirm: Callable[[], bool]) -> bool:
        """Whether closing the window must wait: while a run trains, asked once (``confirm``), the run stops and is
        saved (``closing``), and the window closes once it has ended."""
        if not self.workspace.busy:
            return False
        if not self.closing and confirm():
            self.closing = True
            self.workspace.stop()
            self.update_train()
            self.message.emit("Stopping the training and saving the run; closing when done…", 0)
        return True

    # ---- what may start, and how long it takes ---------------------------------------------------------------
    def update_train(self, *_args) -> bool:
        """The Train button (and the estimate) enabled only while a run may start, saying why not; while idle, the
        live η field shows the settings' η (a run shows its own). Whether a run may start."""
        ws = self.workspace
        problem = ws.problem()
        ok = ws.state == TrainingState.IDLE and problem is None and not self.closing
        text, tip = BUSY_TRAIN.get(ws.state, ("▶ Train", ""))
        self.view.allow_train(ok, text, tip or ("Start a new run with the current Model, Corpus and Train settings."
                                                if problem is None else f"Fix this first: {problem}"))
        self.view.allow_estimate(ok, tip or f"Fix this first: {problem}")
        self.trainAllowed.emit(ok)
        if ws.state == TrainingState.IDLE:
            self.view.show_next_lr(ws.settings.train.lr)
        self.show_plan()
        return ok

    def show_plan(self, *_args) -> None:
        """While no run is shown, the loss plot shows the settings' reference band and says to press Train."""
        if self.workspace.state == TrainingState.IDLE and self.workspace.run_dir is None:
            self.plots.show_plan(self.workspace.settings.config)

    def estimate_time(self) -> None:
        """Time a few real steps of the current settings as a job (`core.training.estimate`); the Training view
        shows the estimated time of the run beside Train, or what went wrong. Invalid settings are not timed (what
        is wrong with them is said under the settings)."""
        ws = self.workspace
        if ws.settings.error:
            return
        view, asked = self.view, ws.settings.config

        def show(text: str, details: str = "") -> None:  # an estimate of settings changed since says nothing
            view.show_estimate(text if ws.settings.config == asked else "", details)

        view.show_estimate("estimating…", busy=True)
        ws.jobs.submit("estimate", _estimate, asked, ws.prepared, progress=True,
                       on_progress=lambda f, message: view.show_estimate(f"estimating: {message}…", busy=True),
                       on_result=lambda e: show(e.describe(), e.details()), on_error=lambda message: show(f"⚠ {message}"))

    def _state_changed(self, state: TrainingState) -> None:
        self.view.set_state(state.value)
        self.update_train()

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

    def _on_ended(self, status: Ending) -> None:
        self.plots.flush()
        self.view.show_ended(None if status == "finished" else (status or "ended"))  # finished keeps its text
