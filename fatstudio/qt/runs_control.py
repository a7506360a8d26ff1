"""The runs folder in the window: ``RunsControl`` reads it in a worker thread into the runs list, and opens,
overlays, deletes, exports and fine-tunes runs (`core.runs`, `core.export_hf`) and imports Hugging Face models as
runs (`core.import_hf`); the model of the run opened is loaded in a worker and set on the `Workspace`, which the
Prompt, Attention and Paper tabs follow."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from fatstudio.core.app.runs import fine_tune, import_destination
from fatstudio.core.app.workspace import Workspace
from fatstudio.qt import state
from fatstudio.qt.panels.train.panel import TrainView


def _export_hf(run_dir: str, out_dir: str):
    from fatstudio.core.runs.export_hf import export_hf  # in the worker: it imports torch and safetensors

    return export_hf(run_dir, out_dir)


def _import_hf(source: str, out: str, progress):
    from fatstudio.core.runs.import_hf import import_hf  # in the worker: it imports torch and tokenizers

    return import_hf(source, out, progress=progress)


def _build_glass_box(kind: str, out: str):
    from fatstudio.core.runs.glass_box import build_glass_box  # in the worker: it imports torch

    return build_glass_box(kind, out)


def _load_model(path: str):
    from fatstudio.core.runs.folder import Run
    return Run.open(path).load_model("cpu")


GLASS_BOXES = {  # the glass-box models (`core.runs.glass_box.KINDS`) as the File menu offers them
    "induction": "&Induction: a previous-token head and an induction head",
    "superposition": "&Superposition: an MLP writing 128 known features into 96 dimensions",
}
LOAD_MODEL = "load-model"  # the job loading the model of the run opened


def _list_runs(root: str):
    """Worker: every run of the runs folder, read (config and meta of each) off the GUI thread."""
    from fatstudio.core.runs.folder import list_runs
    return list_runs(Path(root))


class RunsControl(QObject):
    """The runs list of ``view`` and what its buttons ask, on ``workspace`` (its runs folder: `Workspace.runs_root`).
    ``dialogs`` asks the user (``confirm_delete(run)``, ``ask_export_folder(run)``). ``message(text, ms)`` is for the
    status bar, ``error(text, dialog)`` for the user; ``latestRun(name or None)`` names the finished run to offer
    while no model is loaded; ``runClosed(message)`` says the run in focus was deleted; ``fineTuneReady(config,
    source run folder, new run folder)`` asks for a new run from that run's weights, in the folder the user was told."""

    message = Signal(str, int)
    fineTuneReady = Signal(object, str, str)
    error = Signal(object, bool)  # str or None (clear), whether in a dialog too
    latestRun = Signal(object)
    runClosed = Signal(str)

    def __init__(self, workspace: Workspace, view: TrainView, dialogs: Any, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace, self.view, self.plots, self.dialogs = workspace, view, view.plots, dialogs
        self.loading = False
        self.latest: str | None = None  # the run the Prompt tab offers while there is no model
        self._select: str | None = None  # the run to select once it has been read
        runs = view.runs
        runs.openRequested.connect(self.open_run)
        runs.overlayRequested.connect(self.overlay_run)
        runs.deleteRequested.connect(self.delete_run)
        runs.exportRequested.connect(self.export_run)
        runs.refreshRequested.connect(self.refresh)

    def root(self) -> Path:
        return self.workspace.runs_root

    def refresh(self, select: str | None = None) -> None:
        """Read the runs folder again in a worker thread (hundreds of runs take a while); the list is filled
        when it has been read (``loading`` until then), with ``select`` selected if given."""
        root = self.root()
        if self.loading:  # a newer reading wins, selecting what the older one would have
            select = select or self._select
        self.loading = True
        self.view.runs.show_reading(root)
        self._select = select
        self.workspace.jobs.submit("runs-list", _list_runs, str(root),
                                   on_result=lambda runs: self._listed(root, runs, select),
                                   on_error=lambda message: self._listed(root, [], select, message))

    def _listed(self, root, runs: list, select: str | None, error: str | None = None) -> None:
        self.loading = False
        if error:
            self.error.emit(f"Cannot read the runs folder {root}: {error}", False)
        self.view.runs.set_runs(runs, root)
        if select:
            self.view.runs.select_path(select)
        self._offer_latest(runs)

    def _offer_latest(self, runs: list) -> None:
        """The Prompt tab offers the latest finished run (the most recent one opened or trained, else the
        newest) while no model is loaded."""
        finished = {str(r.path): r for r in runs if r.info.status == "finished"}
        recent = [p for p in state.recent_runs() if p in finished]
        self.latest = recent[0] if recent else next(iter(finished), None)
        self.latestRun.emit(Path(self.latest).name if self.latest else None)

    def open_latest(self) -> None:
        from fatstudio.core.runs.folder import Run
        if self.latest is not None:
            try:
                self.open_run(Run.open(self.latest))
            except ValueError as e:
                self.error.emit(str(e), True)

    def open_run(self, run) -> None:
        """Show a run's curves and samples and load its model for prompting; the overlays of the run shown before
        go (`open_folders` overlays a row's other runs after)."""
        if self.workspace.busy:
            return
        from fatstudio.core.runs.folder import Run
        try:
            run = Run.open(run.path)  # fresh meta and metrics
        except ValueError as e:
            self.error.emit(str(e), True)
            return
        state.add_recent_run(str(run.path))
        self.plots.clear_overlays()  # they compared the run shown before with others
        rows = run.metrics()  # one read of metrics.jsonl for the curves and the diagnosis
        self.plots.load_metrics(rows)
        self.plots.set_run(run.config, run.info.chars_per_token)
        self.workspace.show_run(str(run.path), rows, run.config.train.to_dict(), run.meta, run.config)
        self.plots.export_stem = f"{run.path}-curves"  # beside the run: a run folder is the run's alone
        self.view.set_samples(run.samples())
        m = run.meta
        imported, glass = run.info.imported_class, run.info.glass_box
        step, total = int(m.get("step", 0) or 0), int(m.get("total_steps", run.config.train.steps) or 0)
        best = m.get("best_val_loss")
        if imported:  # its weights were trained elsewhere: no steps, no corpus of its own here
            self.view.show_untrained(f"imported {imported}: not trained here")
            self.plots.show_no_curves(f"imported ({imported}): trained elsewhere, no training curves here")
            status = (f"Opened {run.name}: a {run.config.model.arch} imported from {m.get('imported_from', 'elsewhere')} "
                      f"({imported}); its weights were not trained here. Fine-tune… trains it on the current corpus.")
        elif glass:  # built by hand: no steps, its construction said
            self.view.show_untrained(f"glass box ({glass}): built by hand, not trained")
            self.plots.show_no_curves(f"glass box ({glass}): built by hand: no training curves")
            status = f"Opened {run.name}: {run.info.description or 'a glass-box model'}"
        else:
            shown = run.info.status
            self.view.show_progress(step, total, text=shown or "")
            status = (f"Opened {run.name}: {run.config.model.arch} on {run.config.data.corpus}, {shown or '?'} at "
                      f"step {step:,}" + (f", best validation loss {best:.4f}" if isinstance(best, (int, float))
                                          else "") + ".")
        unverified = run.unverified()  # an older run's weights: nothing can tell whether they were damaged
        self.view.show_status(f"{status} {unverified}" if unverified else status)
        self.error.emit(None, False)
        self.workspace.list_probes(str(run.path))
        if run.has_checkpoint:
            self.load_model(str(run.path), imported=bool(imported))
        else:
            self.workspace.set_model(None, str(run.path))  # the views say it has none
            self.message.emit(f"{run.name} has no weights yet; nothing to prompt.", 6000)

    def load_model(self, path: str, imported: bool = False) -> None:
        """Load the model of the run folder ``path`` as a job: the focus is on the run meanwhile, on its weights
        once they are read (every view that computes from a model follows it)."""
        self.message.emit(f"Loading the model of {Path(path).name}…", 0)
        self.workspace.focus.open(path, imported=imported)
        self.workspace.jobs.submit(LOAD_MODEL, _load_model, path,
                                   on_result=lambda m: self._model_loaded(m, path, imported),
                                   on_error=lambda msg: self._model_failed(path, msg))

    def _model_loaded(self, loaded, path: str, imported: bool) -> None:
        self.workspace.set_model(loaded, path, imported=imported)
        self.message.emit(f"{self.workspace.focus.words()}: ready in the Prompt, Attention, Token loss and Paper tabs.",
                          6000)

    def _model_failed(self, path: str, message: str) -> None:
        if self.workspace.focus.is_run(path):
            self.workspace.set_model(None)
        self.error.emit(f"Cannot load the model: {message}", True)

    def overlay_run(self, run) -> None:
        if self.workspace.run_dir and str(run.path) == str(self.workspace.run_dir):
            self.message.emit("That run is the one shown; pick another to compare.", 5000)
            return
        self.plots.add_overlay(run.name, run.metrics(), run.info.chars_per_token)
        self.message.emit(f"Overlaid {run.name} (faded) on the loss plot.", 5000)

    def open_folders(self, paths: list[str]) -> None:
        """Open the first run of ``paths`` and overlay the others (a sweep's row)."""
        runs = self._read(paths)
        if runs:
            self.open_run(runs[0])
            for run in runs[1:]:
                self.overlay_run(run)

    def overlay_folders(self, paths: list[str]) -> None:
        for run in self._read(paths):
            self.overlay_run(run)

    def _read(self, paths: list[str]) -> list:
        from fatstudio.core.runs.folder import Run
        try:
            return [Run.open(p) for p in paths]
        except ValueError as e:
            self.error.emit(str(e), True)
            return []

    def open_in(self, run) -> list[str]:
        """The tabs ``run`` is open in: "Training" (its curves shown), "Prompt" (its model prompted or loading)."""
        path = str(run.path)
        return [tab for tab, here in (("Training", self.workspace.run_dir == path),
                                      ("Prompt", self.workspace.focus.is_run(path))) if here]

    def delete_question(self, run) -> str:
        """What `confirm_delete` asks: the run, its folder, and whether it is the one open."""
        text = f"Delete the run {run.name} and all its files?\n{run.path}"
        tabs = self.open_in(run)
        if tabs:
            text += f"\n\nIt is open in the {' and the '.join(tabs)} tab{'s' * (len(tabs) > 1)}: it will be closed there."
        return text

    def delete_run(self, run) -> None:
        """Delete a run's folder (asked first). The run open in the Training and Prompt tabs is closed with it,
        and the tabs say so."""
        if self.workspace.busy or not self.dialogs.confirm_delete(run):
            return
        open_in = self.open_in(run)
        try:
            run.delete()
        except (OSError, ValueError) as e:  # a file that will not go; another process training the run
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).rstrip(".")
            self.error.emit(f"Could not delete {run.path}: {why}.", True)
            self.refresh()
            return
        self.plots.remove_overlay(run.name)
        if self.workspace.probe_dir == str(run.path):
            self.workspace.list_probes(str(run.path))  # its probe files are gone: the slider goes
        if open_in:
            self._close_open_run(run, open_in)
        self.view.runs.drop(run.path)  # at once; then read again
        self.refresh()

    def _close_open_run(self, run, tabs: list[str]) -> None:
        """``run`` was deleted while open in ``tabs`` (`open_in`): those tabs let it go and say so; a run open
        in another tab stays."""
        message = f"The run {run.name} was deleted"
        if "Training" in tabs:
            self.plots.clear()
            self.view.clear_run("deleted")
            self.workspace.show_run(None, [], {})
            self.view.show_status(f"Deleted {run.name}.")
        if "Prompt" in tabs:  # the run in focus: its model, loaded or loading, goes (none arrives for it)
            self.workspace.jobs.cancel(LOAD_MODEL)
            self.workspace.focus.clear()
            message += "; open another run to prompt it"
            self.runClosed.emit(message + ".")
        self.message.emit(message + ".", 10000)

    def export_run(self, run) -> None:
        """Write the run as a Hugging Face transformers folder, ``<run name>-hf`` in a folder the user picks,
        in a worker thread; the result or the reason it cannot (a field no standard class expresses) shows."""
        parent = self.dialogs.ask_export_folder(run)
        if not parent:
            return
        out = Path(parent) / f"{run.name}-hf"
        self.error.emit(None, False)
        self.message.emit(f"Exporting {run.name} to {out}…", 0)
        self.workspace.jobs.submit(
            "export", _export_hf, str(run.path), str(out),
            on_result=lambda r: self.message.emit(
                f"Exported {run.name} as a Hugging Face {r.model_class} to {r.out_dir}. Note: {r.note}", 30000),
            on_error=lambda message: self.error.emit(f"Cannot export {run.name}: {message}", True))

    # -- Hugging Face models in, runs fine-tuned ---------------------------------------------------------------
    def ask_import_folder(self) -> str:
        """The transformers folder to import, or "" (cancelled); tests replace this."""
        return QFileDialog.getExistingDirectory(None, "Import a Hugging Face model: choose the folder with its "
                                                "config.json", str(Path.home()))

    def import_model(self) -> None:
        """Import a transformers folder as a new run in the runs folder (named after it), in a worker thread with
        its progress in the status bar; then list and open it. A model fatstudio cannot express shows why."""
        source = self.ask_import_folder()
        if not source:
            return
        out = import_destination(self.root(), source)
        name = out.name
        self.error.emit(None, False)
        self.message.emit(f"Importing {source}…", 0)
        self.workspace.jobs.submit(
            "import", _import_hf, source, str(out), progress=True,
            on_progress=lambda fraction, text: self.message.emit(f"Importing {name}: {text} ({fraction:.0%})", 0),
            on_result=self._imported, on_error=lambda text: self.error.emit(f"Cannot import {source}: {text}", True))

    def add_glass_box(self, kind: str) -> None:
        """Build the glass-box model ``kind`` (`core.runs.glass_box`: hand-set weights) as a new run in the runs
        folder, in a worker thread; then list and open it, its construction in the status line."""
        out = import_destination(self.root(), f"glass-box-{kind}")
        self.error.emit(None, False)
        self.message.emit(f"Building the {kind} glass-box model…", 0)
        self.workspace.jobs.submit(
            "glass-box", _build_glass_box, kind, str(out), on_result=self._imported,
            on_error=lambda text: self.error.emit(f"Cannot build the {kind} glass-box model: {text}", True))

    def _imported(self, done) -> None:
        from fatstudio.core.runs.folder import Run

        self.message.emit(done.summary(), 15000)
        self.refresh(select=str(done.run_dir))
        self.open_run(Run.open(done.run_dir))

    def confirm_fine_tune(self, question: str) -> bool:
        """Ask before a fine-tuning run starts, saying what it will use (tests replace this)."""
        answer = QMessageBox.question(self.view.window(), "Fine-tune", question,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def fine_tune(self, run) -> None:
        """Ask for a new run from ``run``'s weights and tokenizer on the current Corpus and Train settings
        (`core.app.runs.fine_tune`): once the user has said yes to what it will use (``confirm_fine_tune``)."""
        if self.workspace.busy:
            return
        try:
            plan = fine_tune(run, self.workspace.settings.config)
        except ValueError as e:
            self.error.emit(str(e), True)
            return
        if self.confirm_fine_tune(plan.question(self.root())):
            self.fineTuneReady.emit(plan.config, str(run.path), str(self.root() / plan.name))  # the name asked
