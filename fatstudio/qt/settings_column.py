"""The settings column: the Model, Corpus and Train tabs over the application model's settings, what keeps a run
from starting said once under them (``validationLabel``), and what the settings apply to (``settingsNoteLabel``).
It sets the settings from a preset, a run or the last session's choice, and marks a pseudocode line's fields."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QMimeData, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QTabWidget, QToolButton, QVBoxLayout, QWidget

from ..core.app.workspace import TrainingState
from ..core.runs.presets import key_of, preset_of
from . import state
from .panels.corpus.panel import CorpusPanel
from .panels.model import ModelPanel
from .panels.train.panel import TrainPanel
from .widgets.forms import ColumnScrollArea

if TYPE_CHECKING:
    from ..core.app.workspace import Workspace
    from ..core.runs.folder import Run
    from ..core.runs.presets import Preset


class SettingsColumn(QWidget):
    """``model_panel``, ``corpus_panel``, ``train_panel`` in ``settingsTabs``; ``problemChanged(message or None)``
    after each validation; ``message(text, ms)`` for the status bar. ``toggleAction`` (View → Settings column,
    Ctrl+B) and ``toggleButton`` (the ◂ beside the views' tabs) hide the column, so the views get its width; a
    problem shows it again."""

    problemChanged = Signal(object)
    message = Signal(str, int)

    def __init__(self, workspace: Workspace, presets: list[Preset], parent=None):
        super().__init__(parent, objectName="settingsColumn")
        self.workspace, self.settings, self.presets = workspace, workspace.settings, presets
        self.problem: str | None = None
        self.model_panel = ModelPanel(workspace, presets)
        self.corpus_panel = CorpusPanel(workspace)
        self.train_panel = TrainPanel(workspace)
        self.settingsTabs = QTabWidget(objectName="settingsTabs")
        for panel, title in ((self.model_panel, "Model"), (self.corpus_panel, "Corpus"), (self.train_panel, "Train")):
            self.settingsTabs.addTab(ColumnScrollArea(panel), title)  # never narrower than its fields need
        self.validationLabel = QLabel(objectName="validationLabel", wordWrap=True)
        self.validationLabel.setStyleSheet("color: #b00020; font-weight: bold; padding: 4px;")
        self.validationLabel.hide()
        self.settingsNoteLabel = QLabel(objectName="settingsNoteLabel", wordWrap=True)  # what the settings apply to
        self.settingsNoteLabel.setStyleSheet("color: #555; padding: 4px;")
        self.settingsNoteLabel.hide()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 0, 4)
        lay.addWidget(self.settingsTabs, 1)
        lay.addWidget(self.validationLabel)
        lay.addWidget(self.settingsNoteLabel)
        self.toggleAction = QAction("&Settings column", self, checkable=True, checked=True, shortcut="Ctrl+B",
                                    objectName="settingsColumnAction")
        self.toggleButton = QToolButton(objectName="settingsColumnButton", autoRaise=True)
        self.toggleButton.clicked.connect(self.toggleAction.toggle)
        self.toggleAction.toggled.connect(self.show_column)
        self.problemChanged.connect(lambda problem: self.show_column(True) if problem else None)
        self.show_column(True)
        self.model_panel.presetChosen.connect(self.apply_preset)
        for changed in (self.settings.changed, workspace.corpus.changed):
            changed.connect(self.revalidate)
        workspace.focus.changed.connect(self.update_note)
        workspace.state_changed.connect(self._state_changed)

    def show_column(self, shown: bool) -> None:
        """Show or hide the column: hidden, the views get its width."""
        self.toggleAction.setChecked(shown)
        self.setVisible(shown)
        self.toggleButton.setText("◂" if shown else "▸ Settings")
        self.toggleButton.setToolTip(f"{'Hide' if shown else 'Show'} the settings column (Ctrl+B): "
                                     f"{'the views get its width' if shown else 'Model, Corpus and Train'}.")

    # ---- what the settings are -----------------------------------------------------------------------------
    def revalidate(self, *_args) -> str | None:
        """Say what keeps a run from starting (the settings', validated once per change, or the corpus's), once,
        under the column; announce it."""
        self.problem = message = self.workspace.problem()
        self.validationLabel.setText(message or "")
        self.validationLabel.setVisible(bool(message))
        self.update_note()
        self.problemChanged.emit(message)
        return message

    def update_note(self, *_args) -> None:
        """Say what the settings apply to when that is not obvious: they are locked while a run trains, the chosen
        preset's walkthrough needs more steps than train.steps (`Preset.steps_note`), and with a model in focus that
        they no longer describe, they are the next run's."""
        ws, note = self.workspace, ""
        if ws.state != TrainingState.IDLE:
            note = "The settings are locked while a run trains; changes apply to the next run."
        elif ws.loaded is not None:
            m = ws.loaded.config.model
            if self.settings.model.replace(vocab_size=m.vocab_size, n_classes=m.n_classes) != m:  # both the data's
                note = (f"These settings are for the next run. The views keep {ws.focus.words()} ({m.arch}); "
                        "Use settings under the runs list takes a run's settings.")
        chosen = self.settings.base  # its steps note, while its model and data are the settings'
        if ws.state == TrainingState.IDLE and chosen is not None:
            note = " ".join(filter(None, (chosen.steps_note(self.settings.config), note)))
        if ws.state == TrainingState.IDLE:
            note = " ".join(filter(None, (note, self.settings.config.train.warmup_note())))
        self.settingsNoteLabel.setText(note)
        self.settingsNoteLabel.setVisible(bool(note))

    def _state_changed(self, state: TrainingState) -> None:
        for panel in (self.model_panel, self.corpus_panel, self.train_panel):
            panel.setEnabled(state == TrainingState.IDLE)
        self.update_note()

    # ---- setting them -------------------------------------------------------------------------------------
    def apply_preset(self, preset: Preset) -> None:
        """Set the model, corpus and training settings from a Preset (the panels follow)."""
        self.settings.take(preset.config, preset)

    def use_run_settings(self, run: Run) -> None:
        """Set the settings from ``run``'s config as from a preset's (N_V stays the tokenizer's), showing the preset
        they are, if they are one's: a new run trains a variant."""
        chosen = preset_of(run.config, self.presets)
        self.settings.take(run.config, chosen)
        imported = " (from its random start: Fine-tune… starts from its weights)" if run.info.imported_class else ""
        self.message.emit(f"The settings are {run.name}'s" + (f" (the {chosen.name} preset)" if chosen else "")
                          + f": ▶ Train starts a new run with them{imported}.", 8000)

    def restore_choice(self) -> None:
        """The preset and corpus of the last session (`state`), else the first preset; the corpus only where these
        settings take it (custom settings are not kept: a corpus they alone allowed, modadd with its word tokens,
        would leave the first preset's refused)."""
        key, corpus = state.last_choice()
        chosen = next((p for p in self.presets if key and p.key == key_of(key)), None)  # an older key: its number too
        if chosen is None and self.presets:
            chosen = self.presets[0]
        if chosen is not None:
            self.apply_preset(chosen)
        if corpus and corpus != self.settings.data.corpus and self.settings.allows("data", corpus=corpus):
            self.settings.update("data", corpus=corpus)

    def remember_choice(self) -> None:
        state.remember_choice(self.model_panel.preset_key(), self.settings.data.corpus)

    def takes_drop(self, mime: QMimeData) -> bool:
        """Whether a drop of ``mime`` can be the corpus: a local file or folder, while no run trains."""
        urls = mime.urls() if mime.hasUrls() else []
        return self.workspace.state == TrainingState.IDLE and any(u.isLocalFile() for u in urls)

    def drop(self, mime: QMimeData) -> bool:
        """Use the first local file or folder of a drop as the corpus (its tab shown); whether it was taken."""
        paths = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
        if not paths or self.workspace.state != TrainingState.IDLE:
            return False
        self.corpus_panel.set_corpus(paths[0])
        self.settingsTabs.setCurrentIndex(1)
        return True

    def close_dialogs(self) -> None:
        """The tokenizer lab goes with the window (its comparison's result is dropped)."""
        if self.corpus_panel.tokenizer_lab is not None:
            self.corpus_panel.tokenizer_lab.close()

    def highlight_model_fields(self, names: list) -> None:
        """Mark the Model panel's rows of these fields (a pseudocode line's) and show the first one."""
        self.model_panel.highlight_fields(names)
        row = self.model_panel.first_highlighted_row()
        if row is not None:
            self.settingsTabs.setCurrentIndex(0)
            scroll = self.settingsTabs.widget(0)
            if isinstance(scroll, ColumnScrollArea):
                scroll.ensureWidgetVisible(row)
