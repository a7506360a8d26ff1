"""The main window: the settings column (`settings_column.SettingsColumn`) beside the views (`view_tabs.ViewTabs`),
assembled around one application model (`core.app.workspace.Workspace`); it routes the menus. Training runs through
`training_control.TrainingControl`, the runs folder through `runs_control.RunsControl`; the panels subscribe to the
workspace and call it. Heavy modules (torch, tokenizers) are imported only in jobs or when first needed."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox, QSplitter, QWidget

from ..core.app.settings import Settings
from ..core.app.workspace import Ending, TrainingState, Workspace
from ..core.config import RunConfig
from ..core.runs.presets import load_presets
from . import state
from .error_dialog import ErrorDialog
from .guide_links import GuideLinks
from .jobs import new_jobs
from .panels.exercises import ExercisesPanel
from .panels.experiments import ExperimentsPanel
from .panels.features.panel import FeaturesPanel
from .panels.paper import PaperPanel
from .panels.token_loss import TokenLossPanel
from .panels.train.panel import TrainView
from .panels.train.runs_list import RunsList
from .probe_feed import ProbeFeed
from .runs_control import GLASS_BOXES, RunsControl
from .settings_column import SettingsColumn
from .training_control import TrainingControl
from .view_tabs import ViewTabs
from .widgets.plots import TrainingPlots

FIRST_SIZE = QSize(1440, 920)  # the window's size the first time, where the screen has room for it
FRAME = QSize(16, 48)  # room left for the window manager's frame and title bar


def first_size(available: QRect) -> QSize:
    """`FIRST_SIZE`, or as much as fits in ``available`` (the screen less its panels) with the frame: the status bar too."""
    return FIRST_SIZE.boundedTo(available.size() - FRAME)


class MainWindow(QMainWindow):
    """fatstudio's window. Constructible with no arguments (tests set ``FATSTUDIO_RUNS`` first).

    For tests and scripts: ``workspace`` (the application model) and ``settings``; the panels (``model_panel``,
    ``corpus_panel``, ``train_panel``, ``train_view`` with ``plots`` and ``runs_list``, ``prompt_panel``,
    ``attention_panel``, ``paper_panel``, ``token_loss_panel``, ``features_panel``, ``experiments_panel``); ``state`` (the
    `TrainingState`), ``run_dir``, ``loaded_model``, ``last_status``, ``last_error`` (the last message shown to the
    user), ``validation_error``; ``training`` and ``runs`` (the controls)."""

    trainingFinished = Signal(str)  # the status: an `Ending` ("finished", "stopped", "failed" or "error")

    def __init__(self, parent=None, runs_root: str | Path | None = None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Formal Algorithms for Transformers")  # Qt appends " — fatstudio", the display name
        self.setAcceptDrops(True)
        self.presets = load_presets()
        self.last_error: str | None = None
        ws = self.workspace = Workspace(Settings(self.presets[0].config if self.presets else None), jobs=new_jobs(),
                                        runs_root=Path(runs_root) if runs_root else None)  # the first preset, ready
        self.settings = ws.settings
        self.settingsColumn = column = SettingsColumn(ws, self.presets)
        self.model_panel, self.corpus_panel, self.train_panel = column.model_panel, column.corpus_panel, column.train_panel
        self.settingsTabs, self.validationLabel, self.settingsNoteLabel = (
            column.settingsTabs, column.validationLabel, column.settingsNoteLabel)
        self.plots, self.runs_list = TrainingPlots(), RunsList()
        self.train_view = TrainView(plots=self.plots, runs=self.runs_list)
        self.paper_panel = PaperPanel(ws)  # the pseudocode, linked; the check; deviations
        self.token_loss_panel, self.experiments_panel = TokenLossPanel(ws), ExperimentsPanel(ws)
        self.exercises_panel = ExercisesPanel(ws)  # write the algorithms yourself, checked against the reference
        self.features_panel = FeaturesPanel(ws)
        self.viewTabs = ViewTabs(ws, {"Training": self.train_view, "Paper": self.paper_panel,
                                      "Exercises": self.exercises_panel, "Token loss": self.token_loss_panel,
                                      "Features": self.features_panel, "Experiments": self.experiments_panel})
        self._prompt_host, self._attention_host = self.viewTabs.prompt_host, self.viewTabs.attention_host
        self.training = TrainingControl(ws, self.train_view, self.train_panel, parent=self)
        self.runs = RunsControl(ws, self.train_view, dialogs=self, parent=self)
        self.probes = ProbeFeed(ws, parent=self)
        self.guide = GuideLinks(ws, self.viewTabs, [self.settingsTabs, self.viewTabs], parent=self)
        self.errors = ErrorDialog(self, lambda: self.training.train_anyway if self.training.refused else None)
        runs, t = self.runs, self.training  # what the menus, tests and scripts call on the window:
        self.open_run, self.overlay_run, self.delete_run = runs.open_run, runs.overlay_run, runs.delete_run
        self.delete_question, self.refresh_runs, self.apply_preset = runs.delete_question, runs.refresh, column.apply_preset
        self.start_training, self.resume_run, self.stop_training = t.start_training, t.resume_run, t.stop
        split = QSplitter(Qt.Orientation.Horizontal, objectName="mainSplitter", childrenCollapsible=False)
        split.addWidget(column)  # its minimum width is its settings': no field is clipped
        split.addWidget(self.viewTabs)
        split.setStretchFactor(1, 1)
        split.setSizes([440, 980])
        self.setCentralWidget(split)
        self.resize(first_size(self.screen().availableGeometry()))
        self.statusBar().showMessage("Ready: press Train to train the settings in the column on the left.")
        self._build_menu()
        self._connect()
        column.restore_choice()
        state.restore_window(self)
        column.revalidate()
        self.training.update_train()
        QTimer.singleShot(0, self._after_start)

    # ==================================================================== the workspace, for tests and scripts
    state = property(lambda self: self.workspace.state)
    run_dir = property(lambda self: self.workspace.run_dir)
    loaded_model = property(lambda self: self.workspace.loaded)
    last_status = property(lambda self: self.workspace.last_status)
    validation_error = property(lambda self: self.settingsColumn.problem)
    job = property(lambda self: self.training.job, doc="The Control of the run training (None: none).")
    runs_loading = property(lambda self: self.runs.loading)

    # ============================================================================================== building
    def _build_menu(self) -> None:
        bar, c, t = self.menuBar(), self.corpus_panel, self.training
        file_menu = bar.addMenu("&File")
        file_menu.addAction(QAction("Open corpus &file…", self, triggered=c.open_file_dialog,
                                    shortcut=QKeySequence.StandardKey.Open))
        file_menu.addAction(QAction("Open corpus f&older…", self, triggered=c.open_folder_dialog))
        file_menu.addAction(QAction("&Import model…", self, triggered=self.runs.import_model, objectName="importModelAction"))
        glass = file_menu.addMenu("Add &glass-box model")  # hand-set weights whose workings are known (`glass_box`)
        for kind, words in GLASS_BOXES.items():
            glass.addAction(QAction(words, self, triggered=lambda _=False, k=kind: self.runs.add_glass_box(k),
                                    objectName=f"glassBox{kind.title()}Action"))
        file_menu.addSeparator()
        file_menu.addAction(QAction("&Quit", self, triggered=self.close, shortcut=QKeySequence.StandardKey.Quit))
        run_menu = bar.addMenu("&Run")
        self.trainAction = QAction("&Train", self, triggered=self.start_training, shortcut="Ctrl+Return")
        for action in (self.trainAction, QAction("&Pause / Resume", self, triggered=t.toggle_pause, shortcut="Ctrl+P"),
                       QAction("S&tep (while paused)", self, triggered=t.step_once),
                       QAction("&Stop", self, triggered=self.stop_training, shortcut="Ctrl+.")):
            run_menu.addAction(action)
        bar.addMenu("&View").addAction(self.settingsColumn.toggleAction)
        bar.addMenu("&Help").addAction(self.guide.action)
        self.viewTabs.setCornerWidget(self.settingsColumn.toggleButton, Qt.Corner.TopLeftCorner)  # beside the tabs

    def _connect(self) -> None:
        ws, status, column, runs, ex = self.workspace, self.statusBar(), self.settingsColumn, self.runs, self.experiments_panel
        for source in (self.training, runs, column, self.guide):
            source.message.connect(lambda text, ms: status.showMessage(text, ms))
        self.plots.exported.connect(lambda message: status.showMessage(message, 8000))
        self.training.error.connect(self.show_error)
        runs.error.connect(self.show_error)
        self.training.snapshotTaken.connect(lambda: self.viewTabs.setCurrentWidget(self._prompt_host))
        self.training.runStarted.connect(self._run_started)
        self.training.runsChanged.connect(self.refresh_runs)
        self.training.trainAllowed.connect(self.trainAction.setEnabled)
        runs.fineTuneReady.connect(self.training.start_new_run)
        self.runs_list.resumeRequested.connect(self.resume_run)
        self.runs_list.fineTuneRequested.connect(runs.fine_tune)
        self.runs_list.settingsRequested.connect(column.use_run_settings)
        ws.state_changed.connect(lambda s: self.runs_list.set_busy(s != TrainingState.IDLE, ws.run_dir))
        ws.ended.connect(self._ended)
        ws.head_chosen.connect(self.paper_panel.show_head)  # the line that made the head
        self.paper_panel.fieldsChosen.connect(column.highlight_model_fields)
        self.viewTabs.panelsMade.connect(self._panels_made)
        self.viewTabs.attentionShown.connect(self.probes.set_visible)
        ex.openRequested.connect(runs.open_folders)
        ex.overlayRequested.connect(runs.overlay_folders)
        for shown in (ex.openRequested, ex.overlayRequested):
            shown.connect(lambda *_: self.viewTabs.setCurrentWidget(self.train_view))
        ex.sweepFinished.connect(lambda *_: self.refresh_runs())

    def _after_start(self) -> None:
        if self.training.closing:
            return
        if self.corpus_panel.info is None and not self.corpus_panel.loading:
            self.corpus_panel.reload()
        self.refresh_runs()
        self.viewTabs.make_panels_soon()

    # ================================================================================ the panels made later
    prompt_panel = property(lambda self: self.viewTabs.make_panels() or self.viewTabs.prompt_panel,
                            doc="The Prompt panel (``PromptPanel``), made on first use.")
    attention_panel = property(lambda self: self.viewTabs.make_panels() or self.viewTabs.attention_panel,
                               doc="The Attention panel (``AttentionPanel``), made on first use.")
    _prompt_panel = property(lambda self: self.viewTabs.prompt_panel)
    _attention_panel = property(lambda self: self.viewTabs.attention_panel)

    def _panels_made(self) -> None:
        prompt, attention = self.viewTabs.prompt_panel, self.viewTabs.attention_panel
        assert prompt is not None and attention is not None
        self.workspace.text_maps_changed.connect(attention.show_maps)
        attention.headClicked.connect(self.workspace.choose_head)
        prompt.openOfferedRun.connect(self.runs.open_latest)
        prompt.offer_run(Path(self.runs.latest).name if self.runs.latest else None)
        self.runs.latestRun.connect(prompt.offer_run)
        self.runs.runClosed.connect(prompt.show_note)
        self.probes.attach(attention)

    # ============================================================================ what the menus and lists ask
    def current_config(self) -> RunConfig:
        """A copy of the settings a run would start with."""
        return self.settings.config

    def _run_started(self, run_dir: str) -> None:
        self.runs_list.set_busy(True, run_dir)
        self.workspace.list_probes(run_dir)  # a resumed run's earlier steps; none for a new one
        self.refresh_runs()

    def _ended(self, status: Ending) -> None:
        """The training job has ended with ``status``: the run just ended is selected once the runs list is read,
        and its model loaded into the focus."""
        self.trainingFinished.emit(status)
        if self.training.closing:
            self.close()
            return
        self.refresh_runs(select=self.run_dir)
        if self.run_dir and status in ("finished", "stopped"):
            self.runs.load_model(self.run_dir)

    # ============================================================================ asking and telling the user
    def ask_export_folder(self, run) -> str:
        """The folder to export into, or "" (cancelled); tests replace this."""
        return QFileDialog.getExistingDirectory(self, f"Export {run.name}: choose where {run.name}-hf goes",
                                                str(Path.home()))

    def confirm_delete(self, run) -> bool:
        """Ask before deleting (tests replace this)."""
        return _yes(self, "Delete run", self.delete_question(run))

    def confirm_close(self) -> bool:
        """Ask whether to stop the running training and close (tests replace this)."""
        return _yes(self, "Training is running", "A training run is in progress. Stop it (it is checkpointed and "
                    "kept) and close fatstudio?")

    def show_error(self, message: str | None, dialog: bool = True) -> None:
        """Tell the user, in words: inline under the buttons, and (``dialog``) in a non-blocking box."""
        self.train_view.show_error(message)
        if message:
            self.last_error = message
            self.statusBar().showMessage(message, 10000)
            if dialog and self.isVisible():
                self.errors.show(message)

    def dragEnterEvent(self, event) -> None:
        event.acceptProposedAction() if self.settingsColumn.takes_drop(event.mimeData()) else event.ignore()

    def dropEvent(self, event) -> None:
        if self.settingsColumn.drop(event.mimeData()):
            event.acceptProposedAction()

    def closeEvent(self, event) -> None:
        """While a run trains: ask, stop it (it is checkpointed and kept) and close once it has ended. Then close
        what is still open, end the window's jobs and remember the window and the settings' choice."""
        if self.training.holds_close(self.confirm_close):
            self.settingsColumn.setEnabled(not self.training.closing)
            self.viewTabs.setEnabled(not self.training.closing)
            event.ignore()  # closes itself when the run has ended (`_ended`)
            return
        self.errors.close()
        self.settingsColumn.close_dialogs()
        self.workspace.jobs.shutdown(0)  # a generation stops after its token; nothing lands on a closed window
        state.save_window(self)
        self.settingsColumn.remember_choice()
        super().closeEvent(event)


def _yes(parent: QWidget, title: str, question: str) -> bool:
    answer = QMessageBox.question(parent, title, question, QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                  QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes
