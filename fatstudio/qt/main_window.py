"""The main window: a column of settings tabs (Model | Corpus | Train) beside the views (Training | Prompt |
Attention | Paper). It owns the one ``Settings`` (a RunConfig, validated once per change) that the Model, Corpus and
Train panels are bound to and follow. It drives the Qt-free core: ``training.train`` runs in a worker thread
and each of its events goes, by type, to one handler; runs are listed, reopened, resumed, overlaid and
deleted through ``core.runs.folder``, and exported to Hugging Face through ``core.runs.export_hf``.

Heavy modules (torch, tokenizers, the core's data/training/runs/inference) are imported only inside worker
functions or when first needed, so the window opens fast.
"""
from __future__ import annotations

import html
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QThreadPool, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.config import RunConfig
from fatstudio.core.records import RunMeta
from fatstudio.core.runs.presets import load_presets
from fatstudio.qt import state
from fatstudio.qt.binding import SECTIONS, Settings
from fatstudio.qt.panels.corpus import CorpusPanel
from fatstudio.qt.panels.model import ModelPanel
from fatstudio.qt.panels.paper import PaperPanel
from fatstudio.qt.panels.train import TrainPanel, TrainView
from fatstudio.qt.widgets.forms import ColumnScrollArea
from fatstudio.qt.workers import TrainingJob, call_in_thread, install_shutdown, register_stoppable, shutdown_workers

log = logging.getLogger("fatstudio.qt")
EVAL_ROW_LOOKBACK = 1000  # an evaluation's numbers join its step's row among the last this many rows


def _scroll(widget: QWidget) -> QScrollArea:
    return ColumnScrollArea(widget)  # never narrower than its fields need


def _estimate(config, prepared, progress):
    from fatstudio.core.training.estimate import estimate  # in the worker: it imports torch

    return estimate(config, prepared, progress)


def _import_view_panels():
    """Worker: import the Prompt and Attention panels (the prompt panel pulls in torch) off the GUI thread."""
    import fatstudio.qt.panels.attention
    import fatstudio.qt.panels.prompt  # noqa: F401
    return True


def _diagnosis(train: dict, unigram: float | None, diagnosis=None):
    """The "is this normal?" rules for a run with these train settings and unigram entropy: a new
    `core.inspect.diagnostics.Diagnosis`, or ``diagnosis`` (which has read the run's earlier rows) given them."""
    from fatstudio.core.inspect.diagnostics import Diagnosis

    d = diagnosis or Diagnosis()
    d.grad_clip, d.unigram, d.warmup = float(train.get("grad_clip", 0.0) or 0.0), unigram, int(train.get("warmup", 0) or 0)
    return d


def _diverged_row(diverged: dict) -> dict:
    """A metrics-like row for the step whose numbers were not finite (`training.Finished.diverged`)."""
    def number(value):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return {"step": int(diverged.get("step", 0)), "train_loss": number(diverged.get("train_loss")),
            "grad_norm": number(diverged.get("grad_norm"))}


def _export_hf(run_dir: str, out_dir: str):
    from fatstudio.core.runs.export_hf import export_hf  # in the worker: it imports torch and safetensors

    return export_hf(run_dir, out_dir)


def _load_model(path: str):
    from fatstudio.core.runs.folder import Run
    return Run.open(path).load_model("cpu")


def _list_runs(root: str):
    """Worker: every run of the runs folder, read (config and meta of each) off the GUI thread."""
    from fatstudio.core.runs.folder import list_runs
    return list_runs(Path(root))


BUSY_TRAIN = {  # what the Train button says while it cannot start a run
    "starting": ("Starting…", "A run is starting (preparing the corpus, the model and the run folder)."),
    "running": ("Training…", "A run is training: stop it first to start another."),
    "paused": ("Paused", "A run is paused: resume or stop it first to start another."),
    "stopping": ("Stopping…", "The run is stopping after the current step and being saved."),
}


class MainWindow(QMainWindow):
    """fatstudio's window. Constructible with no arguments (tests set ``FATSTUDIO_RUNS`` first).

    Useful attributes for tests and scripts: ``settings`` (the settings a new run starts with),
    ``model_panel``, ``corpus_panel``, ``train_panel``, ``train_view`` (``plots``), ``prompt_panel``,
    ``attention_panel``, ``paper_panel``, ``state`` ("idle", "starting", "running", "paused", "stopping"), ``run_dir`` (the
    current run's folder), ``last_status`` (the last Finished status), ``last_error`` (the last message
    shown to the user), ``validation_error``.
    """

    trainingFinished = Signal(str)  # the status: "finished" | "stopped" | "failed" | "error"
    DIAGNOSE_MS = 500  # diagnosing 10k rows takes tens of ms: at most twice a second while training

    def __init__(self, parent=None, runs_root: str | Path | None = None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("fatstudio — Formal Algorithms for Transformers")
        self.setAcceptDrops(True)
        self.runs_root = Path(runs_root) if runs_root else None
        self.presets = load_presets()
        pool = QThreadPool.globalInstance()  # training holds one thread; corpus, model loading and prompting
        pool.setMaxThreadCount(max(pool.maxThreadCount(), 4))  # must never queue behind it (1-CPU machines)
        self.job: TrainingJob | None = None
        self.state = "idle"
        self.run_dir: str | None = None
        self.last_status: str | None = None
        self.last_error: str | None = None
        self.validation_error: str | None = None
        self._last_evaluation = ""  # the running run's last evaluation, which its finished status line keeps
        self.loaded_model = None
        self._close_pending = False
        self._error_box: QMessageBox | None = None
        self._model_call = None
        self._model_call_path: str | None = None
        self._loaded_dir: str | None = None  # the run folder whose model the Prompt tab has (None: none, a snapshot)
        self._runs_call: Any = None  # the Call reading the runs folder in a worker
        self._runs_select: str | None = None  # the run to select once it has been read
        self.runs_loading = False
        self._runs_stale = False
        self._event_handlers: dict[type, Callable[[Any], None]] | None = None
        self._probe_dir: str | None = None  # the run whose saved probe maps the Attention tab's slider shows
        self._probes_pending: list[tuple] = []  # Probe events (step, path, scores) kept for the Attention tab
        # "is this normal?": the shown run's metrics rows and settings, diagnosed at most every DIAGNOSE_MS
        self._diag_new: list[dict] = []  # metrics rows the diagnosis has not read yet
        self._diag_recent: deque[dict] = deque(maxlen=EVAL_ROW_LOOKBACK)  # the last rows (evaluations join them)
        self._diagnosis: Any = None  # core.diagnostics.Diagnosis of the run shown: it keeps what it needs
        self._diag_heads: Any = None  # diagnostics.HeadCheck: its latest probe step and that step's head findings
        self._diag_timer = QTimer(self, singleShot=True, interval=self.DIAGNOSE_MS, timeout=self.update_diagnostics)

        # the settings: the first preset's, ready to train
        self.settings = Settings(self.presets[0].config if self.presets else None, parent=self)
        self._build_panels()
        self.setCentralWidget(self._build_layout())
        self.resize(1440, 920)
        self.statusBar().showMessage("Ready: press Train to train the selected preset.")
        self._build_menu()
        self._connect()
        self._latest_run: str | None = None  # the run the Prompt tab offers while there is no model
        self._restore_choice()
        state.restore_window(self)
        self.revalidate()
        install_shutdown()  # no worker thread outlives the application
        QTimer.singleShot(0, self._after_start)

    # ============================================================================================== building
    def _build_panels(self) -> None:
        """The settings panels, bound to ``settings``, and the training view. The Prompt and Attention panels
        are made once their modules are imported in a worker thread (the prompt panel imports torch);
        ``prompt_panel`` / ``attention_panel`` make them on first use."""
        self.model_panel = ModelPanel(self.presets, settings=self.settings)
        self.corpus_panel = CorpusPanel(settings=self.settings)
        self.train_panel = TrainPanel(settings=self.settings)
        self.train_view = TrainView()
        self.plots = self.train_view.plots
        self.paper_panel = PaperPanel(settings=self.settings)  # the pseudocode, linked; the check; deviations
        self.paper_panel.prompt_source = self._prompt_text
        self.paper_panel.corpus_source = self.corpus_panel.prepared
        self._prompt_panel = None
        self._attention_panel = None
        self._prompt_host = QWidget(objectName="promptHost")
        self._attention_host = QWidget(objectName="attentionHost")
        for host in (self._prompt_host, self._attention_host):
            hl = QVBoxLayout(host)
            hl.setContentsMargins(0, 0, 0, 0)
            hl.addWidget(QLabel("Loading…", alignment=Qt.AlignmentFlag.AlignCenter))

    def _build_layout(self) -> QSplitter:
        """The settings column (Model | Corpus | Train, and the validation message) beside the views
        (Training | Prompt | Attention | Paper)."""
        self.settingsTabs = QTabWidget(objectName="settingsTabs")
        self.settingsTabs.addTab(_scroll(self.model_panel), "Model")
        self.settingsTabs.addTab(_scroll(self.corpus_panel), "Corpus")
        self.settingsTabs.addTab(_scroll(self.train_panel), "Train")
        self.validationLabel = QLabel(objectName="validationLabel")
        self.validationLabel.setWordWrap(True)
        self.validationLabel.setStyleSheet("color: #b00020; font-weight: bold; padding: 4px;")
        self.validationLabel.hide()
        self.settingsNoteLabel = QLabel(objectName="settingsNoteLabel")  # what the settings apply to
        self.settingsNoteLabel.setWordWrap(True)
        self.settingsNoteLabel.setStyleSheet("color: #555; padding: 4px;")
        self.settingsNoteLabel.hide()
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(4, 4, 0, 4)
        ll.addWidget(self.settingsTabs, 1)
        ll.addWidget(self.validationLabel)
        ll.addWidget(self.settingsNoteLabel)
        # its minimum width is the settings' own (`ColumnScrollArea`): no field is clipped

        self.viewTabs = QTabWidget(objectName="viewTabs")
        self.viewTabs.addTab(self.train_view, "Training")
        self.viewTabs.addTab(self._prompt_host, "Prompt")
        self.viewTabs.addTab(self._attention_host, "Attention")
        self.viewTabs.addTab(self.paper_panel, "Paper")

        split = QSplitter(Qt.Orientation.Horizontal, objectName="mainSplitter")
        split.addWidget(left)
        split.addWidget(self.viewTabs)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([440, 980])
        split.setChildrenCollapsible(False)
        return split

    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        file_menu.addAction(QAction("Open corpus &file…", self, triggered=self.corpus_panel.open_file_dialog,
                                    shortcut=QKeySequence.StandardKey.Open))
        file_menu.addAction(QAction("Open corpus f&older…", self, triggered=self.corpus_panel.open_folder_dialog))
        file_menu.addSeparator()
        file_menu.addAction(QAction("&Quit", self, triggered=self.close, shortcut=QKeySequence.StandardKey.Quit))
        run_menu = self.menuBar().addMenu("&Run")
        self.trainAction = QAction("&Train", self, triggered=self.start_training, shortcut="Ctrl+Return")
        run_menu.addAction(self.trainAction)
        run_menu.addAction(QAction("&Pause / Resume", self, triggered=self.toggle_pause, shortcut="Ctrl+P"))
        run_menu.addAction(QAction("S&tep (while paused)", self, triggered=self.step_once))
        run_menu.addAction(QAction("&Stop", self, triggered=self.stop_training, shortcut="Ctrl+."))

    def _connect(self) -> None:
        tv = self.train_view
        tv.trainButton.clicked.connect(self.start_training)
        tv.pauseButton.clicked.connect(self.toggle_pause)
        tv.stopButton.clicked.connect(self.stop_training)
        tv.stepRequested.connect(self.step_once)
        tv.lrRequested.connect(self.set_live_lr)
        tv.plots.exported.connect(lambda message: self.statusBar().showMessage(message, 8000))
        tv.snapshotButton.clicked.connect(self.prompt_with_snapshot)
        tv.runs.openRequested.connect(self.open_run)
        tv.runs.resumeRequested.connect(self.resume_run)
        tv.runs.overlayRequested.connect(self.overlay_run)
        tv.runs.deleteRequested.connect(self.delete_run)
        tv.runs.exportRequested.connect(self.export_run)
        tv.runs.refreshRequested.connect(self.refresh_runs)
        self.viewTabs.currentChanged.connect(lambda i: i > 0 and self._ensure_view_panels())
        self.viewTabs.currentChanged.connect(self._deliver_probes)
        self.model_panel.presetChosen.connect(self.apply_preset)
        tv.estimateRequested.connect(self.estimate_time)
        self.settings.changed.connect(lambda change: any(map(change.touches, SECTIONS)) and tv.forget_estimate())
        self.model_panel.presetCombo.currentIndexChanged.connect(self._update_settings_note)  # its steps note
        self.settings.changed.connect(self.revalidate)
        self.corpus_panel.statusChanged.connect(self.revalidate)
        self.paper_panel.fieldsChosen.connect(self.highlight_model_fields)

    # ============================================================================ startup, presets, validation
    def _after_start(self) -> None:
        if self._close_pending:
            return
        if self.corpus_panel.info is None and not self.corpus_panel.loading:
            self.corpus_panel.reload()
        self.refresh_runs()
        if self._prompt_panel is None:
            call_in_thread(_import_view_panels, on_result=lambda _ok: self._ensure_view_panels())

    @property
    def prompt_panel(self):
        """The Prompt panel (``PromptPanel``), made on first use."""
        self._ensure_view_panels()
        return self._prompt_panel

    @property
    def attention_panel(self):
        """The Attention panel (``AttentionPanel``), made on first use."""
        self._ensure_view_panels()
        return self._attention_panel

    def _ensure_view_panels(self) -> None:
        if self._prompt_panel is not None:
            return
        from fatstudio.qt.panels.attention import AttentionPanel
        from fatstudio.qt.panels.prompt import PromptPanel

        self._prompt_panel = PromptPanel(self._prompt_host)
        self._attention_panel = AttentionPanel(self._attention_host)
        for host, panel in ((self._prompt_host, self._prompt_panel), (self._attention_host, self._attention_panel)):
            lay = host.layout()
            while lay.count():
                item = lay.takeAt(0)
                if item.widget() is not None:
                    item.widget().deleteLater()
            lay.addWidget(panel)
        self._prompt_panel.attentionReady.connect(self._attention_panel.show_maps)
        register_stoppable(self._prompt_panel)  # a generation stops when the application ends
        self._prompt_panel.openOfferedRun.connect(self._open_latest_run)
        self._prompt_panel.offer_run(Path(self._latest_run).name if self._latest_run else None)
        self._attention_panel.headClicked.connect(self.paper_panel.show_head)  # the line that made the head
        if self._probe_dir is not None:
            self._list_probes(self._probe_dir)
        if self.loaded_model is not None:
            self._set_prompt_model(self.loaded_model, self._loaded_dir)

    def highlight_model_fields(self, names: list) -> None:
        """Mark the Model panel's rows of these fields (a pseudocode line's) and show the first one."""
        self.model_panel.highlight_fields(names)
        if self.model_panel.highlighted:
            self.settingsTabs.setCurrentIndex(0)
            self.settingsTabs.widget(0).ensureWidgetVisible(self.model_panel.form.labels[self.model_panel.highlighted[0]])

    def _prompt_text(self) -> str:
        """The Prompt tab's text ("" before the tab is made)."""
        return self._prompt_panel.promptEdit.toPlainText() if self._prompt_panel is not None else ""

    def estimate_time(self) -> None:
        """Time a few real steps of the current settings in a worker (`core.training.estimate`); the Training view shows
        the estimated time of the run beside Train, or what went wrong. Invalid settings are not timed (what is
        wrong with them is said under the settings)."""
        if self.settings.error:
            return
        panel, asked = self.train_view, self.settings.config

        def show(text: str, details: str = "") -> None:  # an estimate of settings changed since says nothing
            panel.show_estimate(text if self.settings.config == asked else "", details)

        panel.show_estimate("estimating…", busy=True)
        call_in_thread(_estimate, asked, self.corpus_panel.prepared(), with_progress=True,
                       on_progress=lambda f, message: panel.show_estimate(f"estimating: {message}…", busy=True),
                       on_result=lambda e: show(e.describe(), e.details()),
                       on_error=lambda message: show(f"⚠ {message}"))

    def _restore_choice(self) -> None:
        """The preset and corpus of the last session (`state`), else the first preset."""
        key, corpus = state.last_choice()
        chosen = next((p for p in self.presets if p.key == key), None)
        if chosen is not None:
            self.apply_preset(chosen)
        elif self.presets:
            self.model_panel.select_preset(self.presets[0].key)
        if corpus and corpus != self.settings.data.corpus:
            self.settings.update("data", corpus=corpus)

    def apply_preset(self, preset) -> None:
        """Set the model, corpus and training settings from a Preset (the panels follow)."""
        cfg: RunConfig = preset.config
        # N_V is the tokenizer's: it stays until the panel has trained the preset's tokenizer
        keep = cfg.model.replace(vocab_size=self.settings.model.vocab_size)
        self.settings.replace(RunConfig(model=keep, data=cfg.data, train=cfg.train))
        self.model_panel.select_preset(preset.key)

    def current_config(self) -> RunConfig:
        """A copy of the settings a run would start with."""
        return self.settings.config

    def revalidate(self, *_args) -> str | None:
        """Explain a problem of the settings (validated once per change) or of the corpus inline, and keep
        Train disabled until it is fixed."""
        message = self.settings.error
        corpus = self.corpus_panel
        if message is None and corpus.error and not corpus.loading:
            message = f"Corpus: {corpus.error}"
        self.validation_error = message
        self.validationLabel.setText(message or "")
        self.validationLabel.setVisible(bool(message))
        self._update_train_enabled()
        self._update_settings_note()
        self._show_plan()
        return message

    def _show_plan(self) -> None:
        """While no run is shown, the loss plot shows the settings' reference band and says to press Train."""
        if self.state == "idle" and self.run_dir is None:
            self.plots.show_plan(self.settings.config)

    def _update_train_enabled(self) -> None:
        ok = self.state == "idle" and self.validation_error is None and not self._close_pending
        button = self.train_view.trainButton
        button.setEnabled(ok)
        self.trainAction.setEnabled(ok)
        text, tip = BUSY_TRAIN.get(self.state, ("▶ Train", ""))
        button.setText(text)
        button.setToolTip(tip or ("Start a new run with the current Model, Corpus and Train settings."
                                  if self.validation_error is None else f"Fix this first: {self.validation_error}"))
        self.train_view.allow_estimate(ok, tip or f"Fix this first: {self.validation_error}")

    def _update_settings_note(self) -> None:
        """Say what the settings apply to when that is not obvious: they are locked while a run trains, the
        chosen preset's walkthrough needs more steps than train.steps (`Preset.steps_note`), and with a run open
        in the Prompt tab whose model they no longer describe, they are the next run's."""
        note = ""
        if self.state != "idle":
            note = "The settings are locked while a run trains; changes apply to the next run."
        elif self.loaded_model is not None:
            m = self.loaded_model.config.model
            if self.settings.model.replace(vocab_size=m.vocab_size, n_classes=m.n_classes) != m:  # both from the data
                note = (f"These settings are for the next run. The Prompt, Attention and Paper tabs keep "
                        f"{self.loaded_model.label or 'the open model'} ({m.arch}).")
        chosen = self.model_panel.chosen_preset()
        if self.state == "idle" and chosen is not None:
            note = " ".join(filter(None, (chosen.steps_note(self.settings.config), note)))
        self.settingsNoteLabel.setText(note)
        self.settingsNoteLabel.setVisible(bool(note))

    # ============================================================================================ training
    def start_training(self) -> bool:
        """Start a new run with the current settings (the Train button)."""
        if self.state != "idle":
            self.statusBar().showMessage(f"A run is already {self.state}: no second run is started.", 6000)
            return False
        if self.revalidate() is not None:
            self.statusBar().showMessage(self.validation_error or "", 8000)
            return False
        self.plots.clear()
        self.train_view.samplesView.clear()
        self._set_diagnostics_rows([], {})
        return self._start_job(self.current_config(), run_dir=None, resume=False)

    def resume_run(self, run, total_steps: int) -> bool:
        """Continue ``run`` from its last checkpoint up to ``total_steps``."""
        if self.state != "idle":
            return False
        cfg = RunConfig.from_dict(run.config.to_dict())
        cfg.train.steps = int(total_steps)
        if not run.has_checkpoint:
            self.show_error(f"{run.name} has no checkpoint to resume from; start a new run instead.")
            return False
        upto = run.info.checkpoint_step
        if cfg.train.steps <= upto:
            self.show_error(f"{run.name} is already at step {upto}; resume to a larger number of steps.")
            return False
        rows = [r for r in run.metrics() if r.get("step", 0) <= upto]
        self.plots.load_metrics(rows)
        self._set_diagnostics_rows(rows, {})
        self.train_view.set_samples([r for r in run.samples() if r.get("step", 0) <= upto])
        return self._start_job(cfg, run_dir=str(run.path), resume=True)

    def _start_job(self, cfg: RunConfig, run_dir, resume: bool) -> bool:
        try:
            probe = None if resume else self.train_panel.probe()  # a resumed run keeps its own
        except ValueError as e:
            self.show_error(str(e))
            return False
        self.show_error(None)
        self.last_status = None
        self._last_evaluation = ""
        self.run_dir = run_dir
        self.job = TrainingJob(cfg, run_dir=run_dir, resume=resume, prepared=self.corpus_panel.prepared(), probe=probe,
                               parent=self)
        self.job.event.connect(self._on_event)
        self.job.failed.connect(self._on_failed)
        self.job.done.connect(self._on_done)
        self._set_state("starting")
        self.train_view.show_preparing("starting", 0.0)
        self.job.start()
        return True

    def toggle_pause(self) -> None:
        if self.job is None:
            return
        if self.state == "running":
            self.job.pause()
            self.train_view.pauseButton.setEnabled(False)  # until the trainer says Paused
            self.statusBar().showMessage("Pausing after the current step…")
        elif self.state == "paused":
            self.job.resume()
            self.train_view.pauseButton.setEnabled(False)

    def step_once(self) -> None:
        """While paused: train one step, then pause again (the trainer says Paused again)."""
        if self.job is None or self.state != "paused":
            return
        self.train_view.stepButton.setEnabled(False)
        self.job.step_once()
        self.statusBar().showMessage("One step…")

    def set_live_lr(self, lr: float | None) -> None:
        """Train the running (or paused) run at the fixed learning rate ``lr`` from the next step on, or
        return to its schedule (None)."""
        if self.job is None or self.state not in ("running", "paused"):
            return
        self.job.set_lr(lr)
        self.train_view.show_lr_override(lr)
        self.statusBar().showMessage("η follows the schedule from the next step on." if lr is None else
                                     f"η = {lr:g} from the next step on.", 6000)

    def stop_training(self) -> None:
        if self.job is None or self.state in ("idle", "stopping"):
            return
        self.job.stop()
        self._set_state("stopping")
        self.statusBar().showMessage("Stopping after the current step; the run is saved…")

    def prompt_with_snapshot(self) -> None:
        """Prompt the weights as they are now, without disturbing the training."""
        if self.job is not None and self.state == "running":
            self.job.request_snapshot()
            self.statusBar().showMessage("Copying the current weights for prompting…")

    def _set_state(self, state: str) -> None:
        self.state = state
        self.train_view.set_state(state)
        busy = state != "idle"
        for panel in (self.model_panel, self.corpus_panel, self.train_panel):
            panel.setEnabled(not busy)
        self.paper_panel.set_training(busy)
        self.train_view.runs.set_busy(busy, self.run_dir)
        self._update_train_enabled()
        self._update_settings_note()

    # ========================================================================================= the trainer's events
    def _on_event(self, ev) -> None:
        """Route an event of the trainer to its handler (the dispatch table, by event type)."""
        handler = self._handlers().get(type(ev))
        if handler is not None:
            handler(ev)

    def _handlers(self) -> dict[type, Callable[[Any], None]]:
        if self._event_handlers is None:
            from fatstudio.core import training as t  # imported by the worker already: the events are its

            self._event_handlers = {
                t.Prepare: self._on_prepare, t.Started: self._on_started, t.Steps: self._on_steps,
                t.Evaluation: self._on_evaluation, t.Sample: self._on_sample, t.Checkpoint: self._on_checkpoint,
                t.Paused: self._on_paused, t.Resumed: self._on_resumed, t.Note: self._on_note,
                t.Snapshot: self._on_snapshot, t.Finished: self._on_finished, t.Probe: self._on_probe,
            }
        return self._event_handlers

    def _on_prepare(self, ev) -> None:
        self.train_view.show_preparing(ev.message, ev.fraction)

    def _on_started(self, ev) -> None:
        self.run_dir = ev.run_dir
        self.train_view.runs.set_busy(True, self.run_dir)
        if self.state == "starting":
            self._set_state("running")
        self.train_view.show_progress(ev.start_step, ev.total_steps)
        self.train_view.lrSpin.setValue(float(ev.config.train.lr))
        self.train_view.show_lr_override(None)
        train = ev.config.to_dict()["train"]
        self._diagnosis = _diagnosis(train, ev.unigram_entropy, self._diagnosis)  # a resumed run's rows are read
        self.plots.export_stem = str(Path(ev.run_dir) / "curves")
        self.plots.set_run(ev.config, ev.chars_per_token)
        self.train_view.statusLabel.setText(
            f"Training {Path(ev.run_dir).name} on {ev.device} in {ev.precision}: {ev.n_parameters:,} parameters, "
            f"steps {ev.start_step:,} → {ev.total_steps:,}.")
        self.statusBar().showMessage(f"Run folder: {ev.run_dir}")
        self._list_probes(ev.run_dir)  # a resumed run's earlier steps; none for a new one
        self.refresh_runs()

    def _on_steps(self, ev) -> None:
        self.plots.append_steps(ev.steps, ev.train_loss, ev.lr, ev.grad_norm, ev.tokens_per_s)
        self._add_diag_rows([{"step": s, "train_loss": loss, "lr": lr, "grad_norm": g}
                             for s, loss, lr, g in zip(ev.steps, ev.train_loss, ev.lr, ev.grad_norm)])
        self._schedule_diagnostics()
        if self._runs_stale:  # show the step and best validation loss so far in the runs list
            self._runs_stale = False
            self.refresh_runs()
        self.train_view.show_progress(ev.step, ev.total_steps, ev.tokens_per_s, ev.eta_s,
                                      f"loss {ev.train_loss[-1]:.3f}" if ev.train_loss else None, throttle=True)

    def _on_evaluation(self, ev) -> None:
        self.plots.add_eval(ev.step, ev.val_loss)
        row = next((r for r in reversed(self._diag_recent) if r.get("step") == ev.step), None)
        if row is None:
            row = {"step": ev.step}
            self._add_diag_rows([row])
        row.update(eval_train_loss=ev.eval_train_loss, val_loss=ev.val_loss, accuracy=ev.accuracy)
        self._schedule_diagnostics()
        acc = f", accuracy {ev.accuracy:.1%}" if ev.accuracy is not None else ""
        numbers = f"train loss {ev.eval_train_loss:.4f}, validation loss {ev.val_loss:.4f}{acc}"
        self._last_evaluation = f"step {ev.step:,}: {numbers}"
        self.train_view.statusLabel.setText(f"Step {ev.step:,}: {numbers}  ·  {self.run_dir}")
        self._runs_stale = True  # the trainer writes meta.json after the evaluation's sample

    def _on_sample(self, ev) -> None:
        self.train_view.add_sample(ev.step, ev.text)

    def _on_checkpoint(self, ev) -> None:
        self.statusBar().showMessage(f"Checkpoint at step {ev.step:,} saved.", 4000)

    def _on_paused(self, ev) -> None:
        if self.state != "stopping":
            self._set_state("paused")
        self.statusBar().showMessage(f"Paused at step {ev.step:,}.")

    def _on_resumed(self, ev) -> None:
        if self.state != "stopping":
            self._set_state("running")
        self.statusBar().showMessage(f"Resumed at step {ev.step:,}.", 4000)

    def _on_note(self, ev) -> None:
        self.statusBar().showMessage(ev.message, 10000)

    def _on_probe(self, ev) -> None:
        """Step ``ev.step``'s probe maps are saved: the Attention tab's slider gets the step, its head scores
        plot the step's scores, the Diagnostics tab its dead heads."""
        self._diag_heads = (ev.step, list(ev.findings))
        self._schedule_diagnostics()
        if self._attention_panel is not None:  # else listed from the folder when the panel is made
            self._probes_pending.append((ev.step, ev.path, ev.scores))
            self._deliver_probes()

    def _deliver_probes(self, *_args) -> None:
        """Hand the Attention tab the probe steps that arrived while it was hidden, once it is shown: a panel
        draws a new step's maps and head scores as it gets them (0.1-0.3 s of the GUI thread at each
        evaluation when that ran hidden). Several steps go at once (`set_probes`, one drawing) when the panel
        follows the latest step; one by one (no map drawn) when it shows an earlier step or a prompt's maps."""
        panel = self._attention_panel
        if not self._probes_pending or panel is None or self.viewTabs.currentWidget() is not self._attention_host:
            return
        pending, self._probes_pending = self._probes_pending, []
        steps = panel.probe_steps()
        following = panel.maps is None or (panel.showing_probe and panel.probe_step == (steps[-1] if steps else None))
        if len(pending) > 1 and following and self._probe_dir is not None:
            from fatstudio.core.inspect.probes import list_probes
            panel.set_probes(list_probes(self._probe_dir))
            return
        for step, path, scores in pending:
            panel.add_probe(step, path, scores)

    def _list_probes(self, run_dir: str) -> None:
        """Give the Attention tab's slider the probe maps saved in ``run_dir`` (once the panel exists: making
        it imports torch, which opening a run does not need), and the Diagnostics tab the dead heads of the
        latest one (its file read in a worker)."""
        from fatstudio.core.inspect.diagnostics import latest_head_findings

        self._probe_dir = run_dir
        self._probes_pending = []  # the folder lists them all
        call_in_thread(latest_head_findings, run_dir, on_result=lambda heads: self._latest_heads(run_dir, heads))
        if self._attention_panel is not None:
            from fatstudio.core.inspect.probes import list_probes
            self._attention_panel.set_probes(list_probes(run_dir))

    def _on_snapshot(self, ev) -> None:
        loaded = self.job.take_snapshot() if self.job else None
        if ev.message:
            self.statusBar().showMessage(f"No snapshot: {ev.message}", 10000)
        elif loaded is not None:
            self._set_prompt_model(loaded)
            self.viewTabs.setCurrentWidget(self._prompt_host)
            self.statusBar().showMessage(f"Prompting the weights of step {ev.step:,}; training goes on.", 6000)

    def _on_finished(self, ev) -> None:
        self.last_status = ev.status
        evaluated = f"  ·  last evaluation, {self._last_evaluation}" if self._last_evaluation else ""
        self.train_view.statusLabel.setText(f"Run {ev.status}: {ev.message}{evaluated}  ·  {self.run_dir}")
        if ev.diverged:
            self._add_diag_rows([_diverged_row(ev.diverged)])
        self.update_diagnostics()
        if ev.status == "failed":
            self.show_error(f"Training failed: {ev.message}")
        elif ev.status == "finished":
            self.train_view.progressBar.setValue(1000)
            if self.run_dir:
                state.add_recent_run(self.run_dir)

    def _on_failed(self, message: str) -> None:
        self.last_status = "error"
        self.show_error(message)

    def _on_done(self) -> None:
        job, self.job = self.job, None
        self.plots.flush()
        self.train_view.flush_progress()
        if self.last_status != "finished":  # a finished run keeps its last progress text
            self.train_view.progressBar.setFormat(f"{self.last_status or 'ended'}".replace("%", "%%"))
        self._set_state("idle")
        self.revalidate()
        if job is not None:
            job.deleteLater()
        self.trainingFinished.emit(self.last_status or "error")
        if self._close_pending:
            self.close()
            return
        self.refresh_runs(select=self.run_dir)  # the run just ended is selected once the list is read
        if self.run_dir and self.last_status in ("finished", "stopped"):
            self._load_run_model(self.run_dir)

    # ========================================================================================== diagnostics
    def _set_diagnostics_rows(self, rows: list[dict], train: dict, meta: RunMeta | None = None) -> None:
        """Diagnose these metrics rows (a reopened or resumed run's, or none) now; ``train`` its train settings,
        ``meta`` its meta.json (the unigram entropy, a non-finite step)."""
        meta = meta or RunMeta({})
        self._diag_new, self._diag_recent = [], deque(maxlen=EVAL_ROW_LOOKBACK)
        self._diag_heads = None  # until the run's probes are listed
        self._add_diag_rows(list(rows))
        if meta.diverged and meta.status == "failed":
            self._add_diag_rows([_diverged_row(meta.diverged)])
        self._diagnosis = _diagnosis(train, meta.unigram_entropy)
        self.update_diagnostics()

    def _add_diag_rows(self, rows: list[dict]) -> None:
        self._diag_new.extend(rows)
        self._diag_recent.extend(rows)

    def _schedule_diagnostics(self) -> None:
        if not self._diag_timer.isActive():
            self._diag_timer.start()

    def update_diagnostics(self) -> None:
        """Run the "is this normal?" rules (`core.inspect.diagnostics.Diagnosis`: each call reads the rows added since
        the last) over the rows so far, with the dead heads of the latest probe step, into ``diagnosticsView``."""
        self._diag_timer.stop()
        self._diagnosis = self._diagnosis or _diagnosis({}, None)
        new, self._diag_new = self._diag_new, []
        found = self._diagnosis(new, self._diag_heads)
        self.train_view.set_diagnostics([(f.line, f.warning) for f in found], self._diagnosis.summary(found))

    def _latest_heads(self, run_dir: str, heads) -> None:
        """The head findings of ``run_dir``'s latest saved probe (`_list_probes`), unless a newer probe
        arrived or another run is shown meanwhile."""
        if self._probe_dir == run_dir and heads is not None and (self._diag_heads is None or
                                                                  self._diag_heads[0] < heads[0]):
            self._diag_heads = heads
            self.update_diagnostics()

    # ================================================================================================= runs
    def _root(self):
        if self.runs_root is not None:
            return self.runs_root
        from fatstudio.core.runs.folder import default_runs_root
        return default_runs_root()

    def refresh_runs(self, select: str | None = None) -> None:
        """Read the runs folder again in a worker thread (hundreds of runs take a while); the list is filled
        when it has been read (``runs_loading`` until then), with ``select`` selected if given."""
        root = self._root()
        if self._runs_call is not None:
            self._runs_call.cancel()  # a newer reading wins, selecting what the older one would have
            select = select or self._runs_select
        self.runs_loading = True
        self.train_view.runs.folderLabel.setText(f"<small>reading the runs folder {html.escape(str(root))}…</small>")
        call = call_in_thread(_list_runs, str(root))
        call.result.connect(lambda runs, c=call: self._runs_listed(c, root, runs, select))
        call.failed.connect(lambda message, c=call: self._runs_listed(c, root, [], select, message))
        self._runs_call, self._runs_select = call, select

    def _runs_listed(self, call, root, runs: list, select: str | None, error: str | None = None) -> None:
        if call is not self._runs_call:
            return
        self._runs_call = None
        self.runs_loading = False
        if error:
            self.show_error(f"Cannot read the runs folder {root}: {error}", dialog=False)
        self.train_view.runs.set_runs(runs, root)
        if select:
            self.train_view.runs.select_path(select)
        self._offer_latest_run(runs)

    def _offer_latest_run(self, runs: list) -> None:
        """The Prompt tab offers the latest finished run (the most recent one opened or trained, else the
        newest) while no model is loaded."""
        finished = {str(r.path): r for r in runs if r.info.status == "finished"}
        recent = [p for p in state.recent_runs() if p in finished]
        self._latest_run = recent[0] if recent else next(iter(finished), None)
        if self._prompt_panel is not None:
            self._prompt_panel.offer_run(Path(self._latest_run).name if self._latest_run else None)

    def _open_latest_run(self) -> None:
        from fatstudio.core.runs.folder import Run
        if self._latest_run is not None:
            try:
                self.open_run(Run.open(self._latest_run))
            except ValueError as e:
                self.show_error(str(e))

    def open_run(self, run) -> None:
        """Show a run's curves and samples and load its model for prompting."""
        if self.state != "idle":
            return
        from fatstudio.core.runs.folder import Run
        try:
            run = Run.open(run.path)  # fresh meta and metrics
        except ValueError as e:
            self.show_error(str(e))
            return
        self.run_dir = str(run.path)
        state.add_recent_run(self.run_dir)
        self.plots.load_metrics(run.metrics())
        self.plots.set_run(run.config, run.info.chars_per_token)
        self._set_diagnostics_rows(run.metrics(), run.config.train.to_dict(), run.info)
        self.plots.export_stem = str(run.path / "curves")
        self.train_view.set_samples(run.samples())
        m = run.meta
        step, total = int(m.get("step", 0) or 0), int(m.get("total_steps", run.config.train.steps) or 0)
        self.train_view.show_progress(step, total, text=str(m.get("status", "")))
        best = m.get("best_val_loss")
        self.train_view.statusLabel.setText(
            f"Opened {run.name}: {run.config.model.arch} on {run.config.data.corpus}, {m.get('status', '?')} at step "
            f"{step:,}" + (f", best validation loss {best:.4f}" if isinstance(best, (int, float)) else "") + ".")
        self.show_error(None)
        self._list_probes(str(run.path))
        if run.has_checkpoint:
            self._load_run_model(str(run.path))
        else:
            self.statusBar().showMessage(f"{run.name} has no weights yet; nothing to prompt.", 6000)

    def _load_run_model(self, path: str) -> None:
        if self._model_call is not None:
            self._model_call.cancel()
        self.statusBar().showMessage(f"Loading the model of {Path(path).name}…")
        self._model_call_path = path
        self._model_call = call_in_thread(_load_model, path, on_result=lambda m, p=path: self._model_loaded(m, p),
                                          on_error=lambda msg: self.show_error(f"Cannot load the model: {msg}"))

    def _model_loaded(self, loaded, path: str | None = None) -> None:
        self._model_call = None
        self._set_prompt_model(loaded, path)
        self.statusBar().showMessage(f"Model {getattr(loaded, 'label', '')} ready in the Prompt tab.", 6000)

    def _set_prompt_model(self, loaded, path: str | None = None) -> None:
        """Prompt ``loaded``, the model of the run folder ``path`` (None: a snapshot, or no model)."""
        self.loaded_model = loaded
        self._loaded_dir = path if loaded is not None else None
        self._update_settings_note()
        self.paper_panel.set_model(loaded)
        try:
            self.prompt_panel.set_model(loaded)
            self.attention_panel.set_model(loaded)  # the head scores of the maps it shows
        except Exception as e:
            log.exception("prompt panel set_model failed")
            self.show_error(f"The Prompt panel could not take the model: {e}", dialog=False)

    def overlay_run(self, run) -> None:
        if self.run_dir and str(run.path) == str(self.run_dir):
            self.statusBar().showMessage("That run is the one shown; pick another to compare.", 5000)
            return
        self.plots.add_overlay(run.name, run.metrics(), run.info.chars_per_token)
        self.statusBar().showMessage(f"Overlaid {run.name} (faded) on the loss plot.", 5000)

    def _open_in(self, run) -> list[str]:
        """The tabs ``run`` is open in: "Training" (its curves shown), "Prompt" (its model prompted or loading)."""
        path = str(run.path)
        loading = self._model_call is not None and self._model_call.running and self._model_call_path == path
        return [tab for tab, here in (("Training", self.run_dir == path), ("Prompt", self._loaded_dir == path or loading))
                if here]

    def delete_run(self, run) -> None:
        """Delete a run's folder (asked first). The run open in the Training and Prompt tabs is closed with it,
        and the tabs say so."""
        if self.state != "idle":
            return
        if not self.confirm_delete(run):
            return
        open_in = self._open_in(run)
        try:
            run.delete()
        except (OSError, ValueError) as e:  # a file that will not go; another process training the run
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).rstrip(".")
            self.show_error(f"Could not delete {run.path}: {why}.")
            self.refresh_runs()
            return
        self.plots.remove_overlay(run.name)
        if self._probe_dir == str(run.path):
            self._list_probes(str(run.path))  # its probe files are gone: the slider goes
        if open_in:
            self._close_open_run(run, open_in)
        runs = self.train_view.runs
        runs.set_runs([r for r in runs.runs if str(r.path) != str(run.path)])  # at once; then read again
        self.refresh_runs()

    def _close_open_run(self, run, tabs: list[str]) -> None:
        """``run`` was deleted while open in ``tabs`` (`_open_in`): those tabs let it go and say so; a run open
        in another tab stays."""
        message = f"The run {run.name} was deleted"
        if "Training" in tabs:
            self.run_dir = None
            self.plots.clear()
            self.train_view.samplesView.clear()
            self._set_diagnostics_rows([], {})
            self.train_view.progressBar.setValue(0)
            self.train_view.progressBar.setFormat("deleted")
            self.train_view.statusLabel.setText(f"Deleted {run.name}.")
            self._show_plan()
        if "Prompt" in tabs:
            if self._model_call is not None and self._model_call_path == str(run.path):
                self._model_call.cancel()  # its model would arrive for a folder that is gone
                self._model_call = None
            if self._loaded_dir == str(run.path):
                self._set_prompt_model(None)
                if self._attention_panel is not None:
                    self._attention_panel.clear()
            message += "; open another run to prompt it"
            if self._prompt_panel is not None:
                self._prompt_panel.show_note(message + ".")
        self.statusBar().showMessage(message + ".", 10000)

    def delete_question(self, run) -> str:
        """What `confirm_delete` asks: the run, its folder, and whether it is the one open."""
        text = f"Delete the run {run.name} and all its files?\n{run.path}"
        tabs = self._open_in(run)
        if tabs:
            text += f"\n\nIt is open in the {' and the '.join(tabs)} tab{'s' * (len(tabs) > 1)}: it will be closed there."
        return text

    def export_run(self, run) -> None:
        """Write the run as a Hugging Face transformers folder, ``<run name>-hf`` in a folder the user picks,
        in a worker thread; the result or the reason it cannot (a field no standard class expresses) shows."""
        parent = self.ask_export_folder(run)
        if not parent:
            return
        out = Path(parent) / f"{run.name}-hf"
        self.show_error(None)
        self.statusBar().showMessage(f"Exporting {run.name} to {out}…")
        call_in_thread(_export_hf, str(run.path), str(out),
                       on_result=lambda r: self.statusBar().showMessage(
                           f"Exported {run.name} as a Hugging Face {r.model_class} to {r.out_dir}. Note: {r.note}",
                           30000),
                       on_error=lambda message: self.show_error(f"Cannot export {run.name}: {message}"))

    def ask_export_folder(self, run) -> str:
        """The folder to export into, or "" (cancelled); tests replace this."""
        return QFileDialog.getExistingDirectory(self, f"Export {run.name}: choose where {run.name}-hf goes",
                                                str(Path.home()))

    def confirm_delete(self, run) -> bool:
        """Ask before deleting (tests replace this)."""
        answer = QMessageBox.question(self, "Delete run", self.delete_question(run),
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    # =============================================================================================== errors
    def show_error(self, message: str | None, dialog: bool = True) -> None:
        """Tell the user, in words: inline under the buttons, and (``dialog``) in a non-blocking box."""
        self.train_view.show_error(message)
        if not message:
            return
        self.last_error = message
        self.statusBar().showMessage(message, 10000)
        if dialog and self.isVisible():
            if self._error_box is not None:
                self._error_box.close()
            box = QMessageBox(QMessageBox.Icon.Warning, "fatstudio", message, QMessageBox.StandardButton.Ok, self)
            box.setObjectName("errorDialog")
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
            self._error_box = box
            box.destroyed.connect(lambda *_: setattr(self, "_error_box", None))

    # ======================================================================================= drag and drop
    def dragEnterEvent(self, event) -> None:
        if self.state == "idle" and event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths and self.state == "idle":
            self.corpus_panel.set_corpus(paths[0])
            self.settingsTabs.setCurrentIndex(1)
            event.acceptProposedAction()

    # ============================================================================================== closing
    def confirm_close(self) -> bool:
        """Ask whether to stop the running training and close (tests replace this)."""
        answer = QMessageBox.question(
            self, "Training is running",
            "A training run is in progress. Stop it (it is checkpointed and kept) and close fatstudio?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event) -> None:
        if self.job is not None and self.job.running:
            if not self._close_pending:
                if not self.confirm_close():
                    event.ignore()
                    return
                self._close_pending = True
                self.job.stop()
                self._set_state("stopping")
                self.centralWidget().setEnabled(False)
                self.statusBar().showMessage("Stopping the training and saving the run; closing when done…")
            event.ignore()  # closes itself when the worker has finished (see _on_done)
            return
        if self._error_box is not None:
            self._error_box.close()
        if self.corpus_panel.tokenizer_lab is not None:
            self.corpus_panel.tokenizer_lab.close()  # its comparison's result is dropped
        shutdown_workers(0)  # a generation stops after its token, no result lands on a closed window; no wait
        state.save_window(self)
        state.remember_choice(self.model_panel.presetCombo.currentData(), self.settings.data.corpus)
        super().closeEvent(event)

    def wait_until_idle(self, timeout_s: float = 60.0) -> bool:
        """Block (processing events) until no training runs; for scripts and benchmarks."""
        import time

        from PySide6.QtCore import QCoreApplication
        end = time.monotonic() + timeout_s
        while self.job is not None and time.monotonic() < end:
            QCoreApplication.processEvents()
            time.sleep(0.005)
        return self.job is None
