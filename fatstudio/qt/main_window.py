"""The main window: a column of settings tabs (Model | Corpus | Train) beside the views (Training | Prompt |
Attention | Paper | Experiments). It assembles the window around one `core.app.workspace.Workspace` (the settings, the corpus,
the training state, the run shown, the model prompted) and routes the menus. Training runs through
`training_control.TrainingControl` (a worker thread feeding the workspace), the runs folder through
`runs_control.RunsControl`; the panels subscribe to the workspace and call it.

Heavy modules (torch, tokenizers, the core's data/training/runs/inference) are imported only inside worker
functions or when first needed, so the window opens fast.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.app.settings import Settings
from fatstudio.core.app.workspace import TrainingState, Workspace
from fatstudio.core.config import RunConfig
from fatstudio.core.memory import OVERRIDE
from fatstudio.core.runs.presets import load_presets
from fatstudio.qt import closing, settings_control, state
from fatstudio.qt.binding import SECTIONS
from fatstudio.qt.jobs import new_jobs
from fatstudio.qt.panels.corpus import CorpusPanel
from fatstudio.qt.panels.experiments import ExperimentsPanel
from fatstudio.qt.panels.model import ModelPanel
from fatstudio.qt.panels.paper import PaperPanel
from fatstudio.qt.panels.runs_list import RunsList
from fatstudio.qt.panels.token_loss import TokenLossPanel
from fatstudio.qt.panels.train import TrainPanel, TrainView
from fatstudio.qt.probe_feed import ProbeFeed
from fatstudio.qt.runs_control import RunsControl
from fatstudio.qt.training_control import TrainingControl
from fatstudio.qt.widgets.forms import ColumnScrollArea
from fatstudio.qt.widgets.plots import TrainingPlots

if TYPE_CHECKING:  # made on first use (their modules import pyqtgraph's heavier parts)
    from fatstudio.qt.panels.attention import AttentionPanel
    from fatstudio.qt.panels.prompt import PromptPanel

log = logging.getLogger("fatstudio.qt")

FIRST_SIZE = QSize(1440, 920)  # the window's size the first time, where the screen has room for it
FRAME = QSize(16, 48)  # room left for the window manager's frame and title bar


def first_size(available: QRect) -> QSize:
    """`FIRST_SIZE`, or as much of it as fits in ``available`` (the screen less its panels) with the frame, so
    that the status bar is on screen."""
    return FIRST_SIZE.boundedTo(available.size() - FRAME)


def _scroll(widget: QWidget) -> QScrollArea:
    return ColumnScrollArea(widget)  # never narrower than its fields need


def _import_view_panels():
    """Worker: import the Prompt and Attention panels (the prompt panel pulls in torch) off the GUI thread."""
    import fatstudio.qt.panels.attention
    import fatstudio.qt.panels.prompt  # noqa: F401
    return True


class MainWindow(QMainWindow):
    """fatstudio's window. Constructible with no arguments (tests set ``FATSTUDIO_RUNS`` first).

    Useful attributes for tests and scripts: ``workspace`` (the application's model), ``settings`` (the
    settings a new run starts with), ``model_panel``, ``corpus_panel``, ``train_panel``, ``train_view``
    (``plots``), ``prompt_panel``, ``attention_panel``, ``paper_panel``, ``state`` (the workspace's
    `TrainingState`, equal to "idle", "starting", "running", "paused", "stopping"), ``run_dir`` (the current
    run's folder), ``loaded_model``, ``last_status`` (the last Finished status), ``last_error`` (the last
    message shown to the user), ``validation_error``.
    """

    trainingFinished = Signal(str)  # the status: "finished" | "stopped" | "failed" | "error"

    def __init__(self, parent=None, runs_root: str | Path | None = None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Formal Algorithms for Transformers")  # Qt appends " — fatstudio", the display name
        self.setAcceptDrops(True)
        self.presets = load_presets()
        self.last_error: str | None = None
        self.validation_error: str | None = None
        self._close_pending = False
        self._error_box: QMessageBox | None = None
        # the settings: the first preset's, ready to train
        self.workspace = Workspace(Settings(self.presets[0].config if self.presets else None), jobs=new_jobs())
        self.settings = self.workspace.settings
        self._build_panels()
        self.training = TrainingControl(self.workspace, self.train_view, parent=self)
        self.runs = RunsControl(self.workspace, self.train_view, dialogs=self,
                                runs_root=Path(runs_root) if runs_root else None, parent=self)
        self.probes = ProbeFeed(self.workspace, parent=self)
        self.setCentralWidget(self._build_layout())
        self.resize(first_size(self.screen().availableGeometry()))
        self.statusBar().showMessage("Ready: press Train to train the selected preset.")
        self._build_menu()
        self._connect()
        settings_control.restore_choice(self)
        state.restore_window(self)
        self.revalidate()
        QTimer.singleShot(0, self._after_start)

    # ==================================================================== the workspace, for tests and scripts
    @property
    def state(self) -> TrainingState:
        return self.workspace.state

    @property
    def run_dir(self) -> str | None:
        return self.workspace.run_dir

    @property
    def loaded_model(self):
        return self.workspace.loaded

    @property
    def last_status(self) -> str | None:
        return self.workspace.last_status

    @property
    def job(self):
        """The Control of the run training (None: none)."""
        return self.training.job

    @property
    def runs_loading(self) -> bool:
        return self.runs.loading

    # ============================================================================================== building
    def _build_panels(self) -> None:
        """The settings panels, bound to ``settings``, and the training view. The Prompt and Attention panels
        are made once their modules are imported in a worker thread (the prompt panel imports torch);
        ``prompt_panel`` / ``attention_panel`` make them on first use."""
        self.model_panel = ModelPanel(self.presets, settings=self.settings)
        self.corpus_panel = CorpusPanel(self.workspace)
        self.train_panel = TrainPanel(self.workspace)
        self.plots = TrainingPlots()
        self.runs_list = RunsList()
        self.train_view = TrainView(plots=self.plots, runs=self.runs_list)
        self.paper_panel = PaperPanel(self.workspace)  # the pseudocode, linked; the check; deviations
        self.token_loss_panel = TokenLossPanel(self.workspace, runs_root=lambda: self.runs.root())
        self.experiments_panel = ExperimentsPanel(self.workspace, runs_root=lambda: self.runs.root())  # sweeps
        self._prompt_panel: PromptPanel | None = None
        self._attention_panel: AttentionPanel | None = None
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
        left = self.settingsColumn = QWidget(objectName="settingsColumn")
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
        self.viewTabs.addTab(self.token_loss_panel, "Token loss")  # where is it wrong? the validation text
        self.viewTabs.addTab(self.experiments_panel, "Experiments")

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
        file_menu.addAction(QAction("&Import model…", self, triggered=self.runs.import_model, objectName="importModelAction"))
        file_menu.addSeparator()
        file_menu.addAction(QAction("&Quit", self, triggered=self.close, shortcut=QKeySequence.StandardKey.Quit))
        run_menu = self.menuBar().addMenu("&Run")
        self.trainAction = QAction("&Train", self, triggered=self.start_training, shortcut="Ctrl+Return")
        run_menu.addAction(self.trainAction)
        run_menu.addAction(QAction("&Pause / Resume", self, triggered=self.toggle_pause, shortcut="Ctrl+P"))
        run_menu.addAction(QAction("S&tep (while paused)", self, triggered=self.step_once))
        run_menu.addAction(QAction("&Stop", self, triggered=self.stop_training, shortcut="Ctrl+."))
        self.settingsColumnAction = QAction("&Settings column", self, checkable=True, checked=True, shortcut="Ctrl+B",
                                            objectName="settingsColumnAction")
        self.menuBar().addMenu("&View").addAction(self.settingsColumnAction)
        button = self.settingsColumnButton = QToolButton(objectName="settingsColumnButton", autoRaise=True)
        button.clicked.connect(self.settingsColumnAction.toggle)
        self.viewTabs.setCornerWidget(button, Qt.Corner.TopLeftCorner)  # beside the views' tabs
        self.settingsColumnAction.toggled.connect(self.show_settings_column)
        self.show_settings_column(True)

    def _connect(self) -> None:
        ws, tv = self.workspace, self.train_view
        tv.trainRequested.connect(self.start_training)
        tv.estimateRequested.connect(self.estimate_time)
        self.runs_list.resumeRequested.connect(self.resume_run)
        self.runs_list.fineTuneRequested.connect(self.runs.fine_tune)
        self.runs_list.settingsRequested.connect(self.use_run_settings)
        self.runs.fineTuneReady.connect(self.start_new_run)
        self.plots.exported.connect(lambda message: self.statusBar().showMessage(message, 8000))
        for control in (self.training, self.runs):
            control.message.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        self.training.error.connect(self.show_error)
        self.training.snapshotTaken.connect(lambda: self.viewTabs.setCurrentWidget(self._prompt_host))
        self.training.runStarted.connect(self._run_started)
        self.training.runsChanged.connect(self.refresh_runs)
        self.runs.error.connect(self.show_error)
        self.runs.latestRun.connect(lambda name: self._prompt_panel.offer_run(name) if self._prompt_panel is not None else None)
        self.runs.runClosed.connect(
            lambda message: self._prompt_panel.show_note(message) if self._prompt_panel is not None else None)
        ws.state_changed.connect(self._state_changed)
        ws.ended.connect(self._ended)
        ws.focus.changed.connect(lambda *_: settings_control.update_settings_note(self))
        ws.run_changed.connect(lambda *_: settings_control.show_plan(self))
        self.viewTabs.currentChanged.connect(lambda i: self._ensure_view_panels() if i > 0 else None)
        self.viewTabs.currentChanged.connect(
            lambda *_: self.probes.set_visible(self.viewTabs.currentWidget() is self._attention_host))
        self.model_panel.presetChosen.connect(self.apply_preset)
        self.settings.changed.connect(lambda change: tv.forget_estimate() if any(map(change.touches, SECTIONS)) else None)
        self.model_panel.presetShown.connect(lambda: settings_control.update_settings_note(self))  # its steps note
        for changed in (self.settings.changed, self.corpus_panel.statusChanged):
            changed.connect(self.revalidate)
        self.paper_panel.fieldsChosen.connect(self.highlight_model_fields)
        ex = self.experiments_panel
        ex.openRequested.connect(self.runs.open_folders)
        ex.overlayRequested.connect(self.runs.overlay_folders)
        for shown in (ex.openRequested, ex.overlayRequested):
            shown.connect(lambda *_: self.viewTabs.setCurrentWidget(self.train_view))
        ex.sweepFinished.connect(lambda *_: self.refresh_runs())

    # ============================================================================ startup, presets, validation
    def _after_start(self) -> None:
        if self._close_pending:
            return
        if self.corpus_panel.info is None and not self.corpus_panel.loading:
            self.corpus_panel.reload()
        self.refresh_runs()
        if self._prompt_panel is None:
            self.workspace.jobs.submit("import-views", _import_view_panels, on_result=lambda _ok: self._ensure_view_panels())

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

        prompt = self._prompt_panel = PromptPanel(self.workspace, self._prompt_host)
        attention = self._attention_panel = AttentionPanel(self.workspace, self._attention_host)
        for host, panel in ((self._prompt_host, prompt), (self._attention_host, attention)):
            lay = host.layout()
            assert lay is not None  # each host is made with its layout (_build_panels)
            while lay.count():
                item = lay.takeAt(0)
                if (placeholder := item.widget() if item is not None else None) is not None:
                    placeholder.deleteLater()
            lay.addWidget(panel)
        prompt.attentionReady.connect(attention.show_maps)
        prompt.openOfferedRun.connect(self.runs.open_latest)
        prompt.offer_run(Path(self.runs.latest).name if self.runs.latest else None)
        attention.headClicked.connect(self.paper_panel.show_head)  # the line that made the head
        self.probes.attach(attention)

    def highlight_model_fields(self, names: list) -> None:
        """Mark the Model panel's rows of these fields and show the first (`settings_control`)."""
        settings_control.highlight_model_fields(self, names)

    def estimate_time(self) -> None:
        """Estimate the run's time in a worker (`settings_control.estimate_time`)."""
        settings_control.estimate_time(self)

    def apply_preset(self, preset) -> None:
        """Set the model, corpus and training settings from a Preset (the panels follow)."""
        settings_control.apply_preset(self, preset)

    def show_settings_column(self, shown: bool) -> None:
        """Show or hide the settings column (View → Settings column, Ctrl+B, the ◂ beside the views' tabs):
        hidden, the views get its width."""
        self.settingsColumnAction.setChecked(shown)
        self.settingsColumn.setVisible(shown)
        button = self.settingsColumnButton
        button.setText("◂" if shown else "▸ Settings")
        button.setToolTip(f"{'Hide' if shown else 'Show'} the settings column (Ctrl+B): "
                          f"{'the views get its width' if shown else 'Model, Corpus and Train'}.")

    def use_run_settings(self, run) -> None:
        """Set the model, corpus and training settings from a run's (the panels follow)."""
        settings_control.use_run_settings(self, run)

    def revalidate(self, *_args) -> str | None:
        """Explain a problem of the settings or the corpus inline; Train stays disabled until it is fixed."""
        return settings_control.revalidate(self)

    def current_config(self) -> RunConfig:
        """A copy of the settings a run would start with."""
        return self.settings.config

    # ============================================================================================ training
    def start_training(self) -> bool:
        """Start a new run with the current settings (the Train button)."""
        if self.state != TrainingState.IDLE:
            self.statusBar().showMessage(f"A run is already {self.state.value}: no second run is started.", 6000)
            return False
        if self.revalidate() is not None:
            self.statusBar().showMessage(self.validation_error or "", 8000)
            return False
        return self.start_new_run(self.current_config())

    def start_new_run(self, cfg: RunConfig, init_from: str | None = None) -> bool:
        """A new run of ``cfg``; ``init_from``: from that run's weights and tokenizer (`RunsControl.fine_tune`)."""
        self.plots.clear()
        self.train_view.clear_run()
        self.workspace.show_rows([], {})
        return self._start_job(cfg, run_dir=None, resume=False, init_from=init_from)

    def resume_run(self, run, total_steps: int) -> bool:
        """Continue ``run`` from its last checkpoint up to ``total_steps``."""
        if self.state != TrainingState.IDLE:
            return False
        if run.resume_problem(int(total_steps)):
            self.show_error(run.resume_problem(int(total_steps)))
            return False
        cfg, upto = RunConfig.from_dict(run.config.to_dict()), run.info.checkpoint_step
        cfg.train.steps = int(total_steps)
        rows = [r for r in run.metrics() if r.get("step", 0) <= upto]
        if str(run.path) != self.run_dir:  # another run than the one shown: its overlays compared that one
            self.plots.clear_overlays()
        self.plots.load_metrics(rows)
        self.workspace.show_rows(rows, {})
        self.train_view.set_samples([r for r in run.samples() if r.get("step", 0) <= upto])
        return self._start_job(cfg, run_dir=str(run.path), resume=True)

    def _start_job(self, cfg: RunConfig, run_dir, resume: bool, init_from: str | None = None) -> bool:
        try:
            probe = None if resume else self.train_panel.probe()  # a resumed run keeps its own
        except ValueError as e:
            self.show_error(str(e))
            return False
        self.show_error(None)
        return self.training.start(cfg, run_dir, resume, probe, init_from)

    def toggle_pause(self) -> None:
        self.training.toggle_pause()

    def step_once(self) -> None:
        self.training.step_once()

    def stop_training(self) -> None:
        self.training.stop()

    def _state_changed(self, state: TrainingState) -> None:
        busy = state != TrainingState.IDLE
        for panel in (self.model_panel, self.corpus_panel, self.train_panel):
            panel.setEnabled(not busy)
        self.runs_list.set_busy(busy, self.run_dir)
        settings_control.update_train_enabled(self)
        settings_control.update_settings_note(self)

    def _run_started(self, run_dir: str) -> None:
        self.runs_list.set_busy(True, run_dir)
        self.workspace.list_probes(run_dir)  # a resumed run's earlier steps; none for a new one
        self.refresh_runs()

    def _ended(self, status: str) -> None:
        """The training worker has ended with ``status``: the run just ended is selected once the runs list is
        read, and its model loaded for prompting."""
        self.revalidate()
        self.trainingFinished.emit(status)
        if self._close_pending:
            self.close()
            return
        self.refresh_runs(select=self.run_dir)
        if self.run_dir and status in ("finished", "stopped"):
            self.runs.load_model(self.run_dir)

    # ================================================================================================= runs
    def refresh_runs(self, select: str | None = None) -> None:
        self.runs.refresh(select)

    def open_run(self, run) -> None:
        self.runs.open_run(run)

    def overlay_run(self, run) -> None:
        self.runs.overlay_run(run)

    def delete_run(self, run) -> None:
        self.runs.delete_run(run)

    def export_run(self, run) -> None:
        self.runs.export_run(run)

    def delete_question(self, run) -> str:
        return self.runs.delete_question(run)

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
            if self.training.refused is not None and OVERRIDE in message:  # a run refused for memory
                anyway = box.addButton("Train anyway", QMessageBox.ButtonRole.AcceptRole)
                anyway.setObjectName("trainAnywayButton")
                anyway.clicked.connect(self.training.train_anyway)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
            self._error_box = box
            box.destroyed.connect(lambda *_: setattr(self, "_error_box", None))

    # ======================================================================================= drag and drop
    def dragEnterEvent(self, event) -> None:
        settings_control.accept_drag(self, event)

    def dropEvent(self, event) -> None:
        settings_control.drop_corpus(self, event)

    # ============================================================================================== closing
    def confirm_close(self) -> bool:
        """Ask whether to stop the running training and close (tests replace this)."""
        answer = QMessageBox.question(
            self, "Training is running",
            "A training run is in progress. Stop it (it is checkpointed and kept) and close fatstudio?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event) -> None:
        if closing.may_close(self, event):
            super().closeEvent(event)

