"""What the main window does with the settings: validate them (inline, and Train disabled until they are
fixed), say what they apply to (the settings note), show their plan on the empty loss plot, time them (the
estimate), set them from a preset, a run or the last session's choice, and take a corpus dropped on the window."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QScrollArea

from fatstudio.core.app.workspace import TrainingState
from fatstudio.core.runs.presets import key_of, preset_of
from fatstudio.qt import state

if TYPE_CHECKING:
    from fatstudio.qt.main_window import MainWindow


def _estimate(config, prepared, progress):
    from fatstudio.core.training.estimate import estimate  # in the worker: it imports torch

    return estimate(config, prepared, progress)


BUSY_TRAIN = {  # what the Train button says while it cannot start a run
    TrainingState.STARTING: ("Starting…", "A run is starting (preparing the corpus, the model and the run folder)."),
    TrainingState.RUNNING: ("Training…", "A run is training: stop it first to start another."),
    TrainingState.PAUSED: ("Paused", "A run is paused: resume or stop it first to start another."),
    TrainingState.STOPPING: ("Stopping…", "The run is stopping after the current step and being saved."),
}


def highlight_model_fields(window: MainWindow, names: list) -> None:
    """Mark the Model panel's rows of these fields (a pseudocode line's) and show the first one."""
    window.model_panel.highlight_fields(names)
    row = window.model_panel.first_highlighted_row()
    if row is not None:
        window.settingsTabs.setCurrentIndex(0)
        scroll = window.settingsTabs.widget(0)
        if isinstance(scroll, QScrollArea):
            scroll.ensureWidgetVisible(row)


def estimate_time(window: MainWindow) -> None:
    """Time a few real steps of the current settings in a worker (`core.estimate`); the Training view shows
    the estimated time of the run beside Train, or what went wrong. Invalid settings are not timed (what is
    wrong with them is said under the settings)."""
    if window.settings.error:
        return
    panel, asked = window.train_view, window.settings.config

    def show(text: str, details: str = "") -> None:  # an estimate of settings changed since says nothing
        panel.show_estimate(text if window.settings.config == asked else "", details)

    panel.show_estimate("estimating…", busy=True)
    window.workspace.jobs.submit("estimate", _estimate, asked, window.workspace.prepared, progress=True,
                                 on_progress=lambda f, message: panel.show_estimate(f"estimating: {message}…", busy=True),
                                 on_result=lambda e: show(e.describe(), e.details()),
                                 on_error=lambda message: show(f"⚠ {message}"))


def restore_choice(window: MainWindow) -> None:
    """The preset and corpus of the last session (`state`), else the first preset; the corpus only where these
    settings take it (custom settings are not kept: a corpus they alone allowed, modadd with its word tokens,
    would leave the first preset's refused)."""
    key, corpus = state.last_choice()
    chosen = next((p for p in window.presets if key and p.key == key_of(key)), None)  # an older key: its number too
    if chosen is not None:
        window.apply_preset(chosen)
    elif window.presets:
        window.model_panel.select_preset(window.presets[0].key)
    if corpus and corpus != window.settings.data.corpus and window.settings.allows("data", corpus=corpus):
        window.settings.update("data", corpus=corpus)


def apply_preset(window: MainWindow, preset) -> None:
    """Set the model, corpus and training settings from a Preset (the panels follow)."""
    window.settings.take(preset.config)
    window.model_panel.select_preset(preset.key)


def use_run_settings(window: MainWindow, run) -> None:
    """Set the model, corpus and training settings from ``run``'s config, as `apply_preset` does from a preset's
    (N_V stays the tokenizer's), showing the preset they are, if they are one's: a new run trains a variant."""
    window.settings.take(run.config)
    chosen = preset_of(run.config, window.presets)
    window.model_panel.select_preset(chosen.key if chosen is not None else None)
    imported = " (from its random start: Fine-tune… starts from its weights)" if run.meta.get("hf_class") else ""
    window.statusBar().showMessage(f"The settings are {run.name}'s" + (f" (the {chosen.name} preset)" if chosen else "")
                                   + f": ▶ Train starts a new run with them{imported}.", 8000)


def revalidate(window: MainWindow, *_args) -> str | None:
    """Explain a problem of the settings (validated once per change) or of the corpus inline, and keep
    Train disabled until it is fixed; while idle, the live η field shows the settings' η."""
    message = window.settings.error
    corpus = window.corpus_panel
    if message is None and corpus.error and not corpus.loading:
        message = f"Corpus: {corpus.error}"
    window.validation_error = message
    if message and not window.settingsColumnAction.isChecked():  # the message is there: show it
        window.show_settings_column(True)
    window.validationLabel.setText(message or "")
    window.validationLabel.setVisible(bool(message))
    update_train_enabled(window)
    update_settings_note(window)
    show_plan(window)
    if window.state == TrainingState.IDLE:  # a run shows its own η (`TrainView.start_live_lr`)
        window.train_view.show_next_lr(window.settings.train.lr)
    return message


def show_plan(window: MainWindow, *_args) -> None:
    """While no run is shown, the loss plot shows the settings' reference band and says to press Train."""
    if window.state == TrainingState.IDLE and window.run_dir is None:
        window.plots.show_plan(window.settings.config)


def update_train_enabled(window: MainWindow) -> None:
    ok = window.state == TrainingState.IDLE and window.validation_error is None and not window._close_pending
    window.trainAction.setEnabled(ok)
    text, tip = BUSY_TRAIN.get(window.state, ("▶ Train", ""))
    window.train_view.allow_train(ok, text, tip or ("Start a new run with the current Model, Corpus and Train settings."
                                                    if window.validation_error is None else
                                                    f"Fix this first: {window.validation_error}"))
    window.train_view.allow_estimate(ok, tip or f"Fix this first: {window.validation_error}")


def update_settings_note(window: MainWindow, *_args) -> None:
    """Say what the settings apply to when that is not obvious: they are locked while a run trains, the
    chosen preset's walkthrough needs more steps than train.steps (`Preset.steps_note`), and with a run open
    in the Prompt tab whose model they no longer describe, they are the next run's."""
    note = ""
    if window.state != TrainingState.IDLE:
        note = "The settings are locked while a run trains; changes apply to the next run."
    elif window.loaded_model is not None:
        m = window.loaded_model.config.model
        if window.settings.model.replace(vocab_size=m.vocab_size, n_classes=m.n_classes) != m:  # both from the data
            note = (f"These settings are for the next run. The Prompt, Attention and Paper tabs keep "
                    f"{window.loaded_model.label or 'the open model'} ({m.arch}); Use settings under the runs "
                    "list takes a run's settings.")
    chosen = window.model_panel.chosen_preset()
    if window.state == TrainingState.IDLE and chosen is not None:
        note = " ".join(filter(None, (chosen.steps_note(window.settings.config), note)))
    window.settingsNoteLabel.setText(note)
    window.settingsNoteLabel.setVisible(bool(note))


def accept_drag(window: MainWindow, event) -> None:
    idle = window.state == TrainingState.IDLE
    if idle and event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
        event.acceptProposedAction()
    else:
        event.ignore()


def drop_corpus(window: MainWindow, event) -> None:
    paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
    if paths and window.state == TrainingState.IDLE:
        window.corpus_panel.set_corpus(paths[0])
        window.settingsTabs.setCurrentIndex(1)
        event.acceptProposedAction()
