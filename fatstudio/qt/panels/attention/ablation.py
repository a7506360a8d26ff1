"""The Attention panel's knock-out table (``ablationTable``): every head and MLP of the model knocked out alone
(zero, mean or resample: `core.inspect.ablation`) with the validation loss and its change Δ, measured in a worker
thread on a copy of the weights, the rows appearing as they are measured (drained every `DRAIN_MS`), cancellable;
sorted by Δ and coloured by it; exported as the CLI's CSV (`KnockoutTable.csv`) and as a bar chart (PNG).

The weights: the model loaded (a run's or a snapshot of a training run), or any step whose weights the run shown
keeps (`core.runs.snapshots`: every evaluation's, and the last checkpoint's), so a head's necessity can be followed
over training. With "follow the slider" on, the choice is the probe slider's step (`follow_step`) whenever its
weights are listed, also when the list is made again (`set_sources`: a new evaluation, the run's end, its final
model loaded). Probe steps without weights (a run from before snapshots, or ``train.keep_weights = "last"``) are
listed greyed. Weights other than the focus's are said in ``ablationFocusLabel``, and a table of other weights than
those chosen says so in its summary (``ablationStatus``). ``weightsChosen`` tells the head ablation
(`attention_head_ablation`), which uses the same weights."""
from __future__ import annotations

import copy
import dataclasses
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QImage, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ....core.app.focus import Focus, run_name
from ...widgets.focus_label import FocusLabel
from ...widgets.saving import save_with_dialog, show_message, write_picture
from ...widgets.token_view import signed_tint

if TYPE_CHECKING:
    from ....core.app.jobs import Job
    from ....core.app.workspace import Workspace
    from ....core.inference.loaded import LoadedModel
    from ....core.inspect.ablation import AblationKind, KnockoutRow, KnockoutTable

KINDS: dict[AblationKind, str] = {"zero": "zero", "mean": "mean over the validation batch",
                                  "resample": "resample (another row's output)"}
DRAIN_MS = 200  # rows measured in the worker reach the table at most this often
COLUMNS = ("component", "loss", "Δ loss")


Where = tuple[str, int] | None  # a run folder and a step whose weights it keeps, or None: the model loaded


def weights_words(where: Where, loaded: LoadedModel | None, focus: Focus) -> str | None:
    """Whose weights ``where`` are (None: ``loaded``), in words, when they are not ``focus``'s ("weights of step
    1,200"); None when they are."""
    if where is None:
        if loaded is None or loaded is focus.loaded:
            return None
        return f"weights of step {loaded.step:,}"
    folder, step = where
    if focus.loaded is not None and focus.is_run(folder) and focus.step == step:
        return None
    return f"weights of step {step:,}" + ("" if focus.is_run(folder) else f" of {run_name(folder)}")


def weights_at(loaded, where: Where):
    """In a worker: the weights of ``where`` (a run folder and a step its weights are saved at), else a copy of
    ``loaded`` (so hooks touch no model the app prompts)."""
    if where is None:
        return dataclasses.replace(loaded, model=copy.deepcopy(loaded.model))
    from ....core.runs.folder import Run, load_at_step

    return load_at_step(Run.open(where[0]), where[1])


def measure(loaded, where: Where, kind: AblationKind, stop: threading.Event, sink: list,
            progress) -> KnockoutTable:
    """In a worker: the knock-out table of the weights `weights_at` ``where``, each row appended to ``sink`` as it
    is measured; stops when ``stop`` is set."""
    from ....core.inspect.ablation import ablator_for

    if where is not None:
        progress(0.0, f"loading the weights of step {where[1]:,}…")
    loaded = weights_at(loaded, where)
    progress(0.0, "measuring the validation loss with nothing knocked out…")
    return ablator_for(loaded).table(kind, progress=lambda done, total, name: progress(done / total, name.label),
                                     cancelled=stop.is_set, on_row=sink.append)


class _Number(QTableWidgetItem):
    """A cell shown as text and sorted by a number."""

    def __init__(self, text: str, value: float):
        super().__init__(text)
        self.value = float(value)

    def __lt__(self, other) -> bool:
        return self.value < getattr(other, "value", 0.0)


class AblationView(QWidget):
    """Kind and weights choosers, Run and Cancel, a status line and the ``ablationTable``; `set_sources` says
    what can be measured, `follow_step` where the probe slider stands. ``weightsChosen(where, loaded)``: the
    weights chosen changed (`chosen_weights`; None: ``loaded``, the model loaded), or the focus did."""

    weightsChosen = Signal(object, object)

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.loaded = None
        self.rows: list[KnockoutRow] = []  # measured so far, in the order measured
        self.baseline: float | None = None
        self.kind: AblationKind = "zero"
        self.step: int | None = None  # the step of the weights measured
        self.folder: str | None = None  # the run whose saved steps the chooser lists
        self.loaded_run: str | None = None  # the run the model loaded is of (its folder, or the run it is a snapshot of)
        self.slider_step: int | None = None  # the probe slider's step (`follow_step`)
        self.complete = False
        self._call: Job | None = None
        self._measured: tuple[str | None, int] | None = None  # the weights of the table (`_weights_of`)
        self._result = ""  # the summary of the table measured, in words
        self._stop = threading.Event()
        self._sink: list = []
        self._started = 0.0
        self.seconds: float | None = None  # how long the last whole table took
        self._build()
        workspace.focus.changed.connect(self._choice_changed)

    def _build(self) -> None:
        self.kindCombo = QComboBox(objectName="ablationKindCombo")
        for k, words in KINDS.items():
            self.kindCombo.addItem(words, k)
        self.kindCombo.setToolTip("How a component is knocked out: its output replaced by zeros (a head: its slice "
                                  "of W_o's input), by its mean over the validation batch at each position, or by "
                                  "its output on another row of the batch.")
        self.stepCombo = QComboBox(objectName="ablationStepCombo")
        self.stepCombo.setToolTip("Whose weights: the model loaded, or the run's weights at one of its evaluations "
                                  "(saved with the probe maps) or its last checkpoint.")
        self.followCheck = QCheckBox("follow the slider", objectName="ablationFollowCheck", checked=True)
        self.followCheck.setToolTip("Choose the weights of the probe slider's step whenever it moves or the list "
                                    "of weights changes (when that step's weights are saved).")
        self.runButton = QPushButton("Run", objectName="ablationRunButton")
        self.runButton.setToolTip("Knock each head and MLP out in turn and measure the validation loss (the "
                                  "trainer's validation batches), in the background.")
        self.cancelButton = QPushButton("Cancel", objectName="ablationCancelButton")
        self.cancelButton.setEnabled(False)
        self.csvButton = QPushButton("Export CSV…", objectName="ablationCsvButton")
        self.pngButton = QPushButton("Export PNG…", objectName="ablationPngButton")
        for combo in (self.kindCombo, self.stepCombo):  # a narrow pane shortens their text, not the panel
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(8)
        choose, weights, act = QHBoxLayout(), QHBoxLayout(), QHBoxLayout()  # rows that fit the map's narrow column
        for row, parts in ((choose, (QLabel("knock out by"), self.kindCombo)),
                           (weights, (QLabel("weights"), self.stepCombo, self.followCheck))):
            for w in parts:
                row.addWidget(w, 1 if isinstance(w, QComboBox) else 0)
        for w in (self.runButton, self.cancelButton):
            act.addWidget(w)
        act.addStretch(1)
        for w in (self.csvButton, self.pngButton):
            act.addWidget(w)
        self.status = QLabel(objectName="ablationStatus")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.table = QTableWidget(0, len(COLUMNS), objectName="ablationTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setToolTip("Each head and MLP knocked out alone: the validation loss and Δ = its change from the "
                              "loss with nothing knocked out (red: the loss rose, the component was needed). Click a "
                              "header to sort.")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.focusLabel = FocusLabel(self.workspace.focus, "ablationFocusLabel")
        lay.addWidget(self.focusLabel)
        lay.addLayout(choose)
        lay.addLayout(weights)
        lay.addLayout(act)
        lay.addWidget(self.status)
        lay.addWidget(self.table, 1)
        self._timer = QTimer(self, interval=DRAIN_MS)
        self._timer.timeout.connect(self._drain)
        self.runButton.clicked.connect(self.start)
        self.cancelButton.clicked.connect(self.cancel)
        self.stepCombo.currentIndexChanged.connect(self._choice_changed)
        self.followCheck.toggled.connect(self._follow)
        self.csvButton.clicked.connect(lambda: self._export("CSV table (*.csv)", ".csv", self.export_csv))
        self.pngButton.clicked.connect(lambda: self._export("PNG image (*.png)", ".png", self.export_png))
        self._say("Run knocks each head and MLP out in turn and measures the validation loss.")

    # ---- what can be measured -------------------------------------------------------------------------------
    def set_sources(self, loaded, loaded_dir: str | None = None, run_dir: str | None = None,
                    probe_steps: list[int] | None = None) -> None:
        """The model loaded (from ``loaded_dir``; None: a snapshot), the steps whose weights the run shown
        (``run_dir``, else ``loaded_dir``) keeps, and its probe steps that keep none (listed greyed). The choice
        stays, or with "follow the slider" on is the slider's step's weights if they are listed."""
        self.loaded, self.loaded_run = loaded, loaded_dir or run_dir
        combo = self.stepCombo
        chosen = combo.currentData()
        combo.blockSignals(True)
        combo.clear()
        if loaded is not None:
            combo.addItem(f"model loaded · step {loaded.step:,}", None)
        self.folder = run_dir or loaded_dir
        steps, last, name = _saved_steps(self.folder)
        for step in steps:
            if not (self.folder == loaded_dir and loaded is not None and step == loaded.step):  # that is the one loaded
                combo.addItem(f"{name} · step {step:,}" + (" · last checkpoint" if step == last else ""), step)
        without = [s for s in probe_steps or () if s not in steps]
        if without:
            combo.addItem(f"probe steps {_span(without)}: attention maps only, no weights", "")
            item = combo.model().item(combo.count() - 1)  # type: ignore[attr-defined]
            item.setEnabled(False)
        if (i := combo.findData(chosen)) > 0:
            combo.setCurrentIndex(i)  # the choice stays while a training run adds steps
        combo.blockSignals(False)
        combo.setEnabled(combo.count() > 0)
        if not self._follow():
            self._choice_changed()

    def follow_step(self, step: int | None) -> None:
        """The probe slider is at ``step`` (None: it has none): with "follow the slider" on, choose its weights if
        they are listed (else the choice stays), now and whenever the list is made again."""
        self.slider_step = step
        self._follow()

    def _follow(self, *_args) -> bool:
        """Choose the slider's step's weights, if following and they are listed; whether the choice changed."""
        step = self.slider_step
        if not self.followCheck.isChecked() or step is None:
            return False
        i = self.stepCombo.findData(step)
        if i < 0 and self.loaded is not None and self.loaded.step == step:
            i = self.stepCombo.findData(None)  # the model loaded is that step's
        if i < 0 or i == self.stepCombo.currentIndex():
            return False
        self.stepCombo.setCurrentIndex(i)  # → _choice_changed
        return True

    def chosen_weights(self) -> Where | Literal[False]:
        """What `weights_at` loads for the choice: (the run folder, a step), None the model loaded, False nothing."""
        data = self.stepCombo.currentData()
        if data is None:
            return None if self.loaded is not None and self.stepCombo.count() else False
        return (self.folder, data) if isinstance(data, int) and self.folder else False

    def _weights_of(self, where: Where | Literal[False]) -> tuple[str | None, int] | None:
        """The run and step of the weights ``where`` (None: the model loaded; False: none)."""
        if where is None and self.loaded is not None:
            return self.loaded_run, self.loaded.step
        return where or None

    def _choice_changed(self, *_args) -> None:
        """Say whose weights are chosen (beside the focus's, in the header) and whether the table is of them."""
        where = self.chosen_weights()
        self.runButton.setEnabled(not self.running and where is not False)
        self.focusLabel.set_own(None if where is False else weights_words(where, self.loaded, self.workspace.focus))
        if self._result and not self.running:
            self._say(self._result + self._other_weights())
        self.weightsChosen.emit(where, self.loaded)

    def _other_weights(self) -> str:
        """What the summary adds when the weights chosen are not the table's ("" when they are)."""
        chosen = self._weights_of(self.chosen_weights())
        if chosen == self._measured:
            return ""
        now = ("no weights are chosen now" if chosen is None
               else f"the weights chosen now are step {chosen[1]:,}: Run measures them")
        return f" <b>The table is of step {self.step:,}; {now}.</b>"

    # ---- measuring --------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._call is not None and self._call.running

    def start(self) -> None:
        """Measure the table in a worker; the rows appear as they come."""
        source = self.chosen_weights()
        if self.running or source is False:
            if source is False:
                self._say("Load a model first (open a trained run, or take a snapshot while training).", error=True)
            return
        self.kind = self.kindCombo.currentData()
        self.rows, self.baseline, self.complete, self.seconds, self._result = [], None, False, None, ""
        self._measured = self._weights_of(source)
        self.step = self._measured[1] if self._measured else None
        self.table.setRowCount(0)
        self._stop, self._sink = threading.Event(), []
        self._started = time.monotonic()
        self._call = self.workspace.jobs.submit(
            "knockout", measure, self.loaded, source, self.kind, self._stop, self._sink, progress=True,
            on_progress=self._on_progress, on_result=self._on_result, on_error=self._on_error)
        self.runButton.setEnabled(False)
        self.cancelButton.setEnabled(True)
        self._timer.start()
        self._say("Preparing the validation batch…")

    def cancel(self) -> None:
        """Stop after the component being measured; the rows so far stay."""
        if self.running:
            self._stop.set()
            self._say("Cancelling after the component being measured…")

    def _on_progress(self, fraction: float, message: str) -> None:
        if self.running and not self._stop.is_set():
            self._say(f"{fraction:.0%} · measured {message}" if fraction else message.capitalize())

    def _drain(self) -> None:
        """Add the rows measured since the last drain to the table (one redraw for them all)."""
        n = len(self._sink)
        if n <= len(self.rows):
            return
        new = self._sink[len(self.rows):n]
        self.rows.extend(new)
        if self.baseline is None:
            self.baseline = new[0].loss - new[0].delta_loss
        self._fill()

    def _on_result(self, table: KnockoutTable) -> None:
        self._finish()
        self.rows, self.baseline, self.complete = list(table.rows), table.baseline_loss, table.complete
        self.seconds = time.monotonic() - self._started
        self._fill()
        if not self.rows:
            self._say("Cancelled before any component was measured.")
            return
        worst = max(self.rows, key=lambda r: r.delta_loss)
        done = (f"{len(self.rows)} components in {self.seconds:.1f} s" if table.complete else
                f"<b>cancelled</b> after {len(self.rows)} components")
        self._result = (f"Validation loss <b>{table.baseline_loss:.4f}</b> with nothing knocked out ({KINDS[self.kind]}, "
                        f"step {self.step:,}; {done}). Knocking out <b>{worst.component.label}</b> changes "
                        f"it most ({worst.delta_loss:+.4f}).")
        self._say(self._result + self._other_weights())

    def _on_error(self, message: str) -> None:
        self._finish()
        self._say(f"Could not measure the knock-out table: {message}", error=True)

    def _finish(self) -> None:
        self._call = None
        self._timer.stop()
        self.cancelButton.setEnabled(False)
        self.runButton.setEnabled(self.chosen_weights() is not False)

    def _fill(self) -> None:
        """The rows measured, sorted by Δ (largest rise first), Δ coloured on the largest |Δ|."""
        t = self.table
        t.setSortingEnabled(False)
        t.setRowCount(len(self.rows))
        scale = max((abs(r.delta_loss) for r in self.rows), default=0.0)
        for i, r in enumerate(self.rows):
            name = _Number(r.component.label, i)
            name.setToolTip(f"{r.component} (as the CLI's files name it)")
            name.setData(Qt.ItemDataRole.UserRole, r.component)
            delta = _Number(f"{r.delta_loss:+.4f}", r.delta_loss)
            delta.setBackground(signed_tint(r.delta_loss, scale))
            for c, item in enumerate((name, _Number(f"{r.loss:.4f}", r.loss), delta)):
                t.setItem(i, c, item)
        t.setSortingEnabled(True)
        t.sortItems(2, Qt.SortOrder.DescendingOrder)

    def _say(self, text: str, error: bool = False) -> None:
        show_message(self.status, text, error)

    # ---- export -------------------------------------------------------------------------------------------
    def knockout_table(self) -> KnockoutTable:
        """The rows measured so far as the core's `KnockoutTable` (what the CLI writes)."""
        if not self.rows or self.baseline is None:
            raise ValueError("there is no knock-out table yet; press Run.")
        from ....core.inspect.ablation import KnockoutTable

        return KnockoutTable(self.kind, self.baseline, list(self.rows), self.complete)

    def export_csv(self, path) -> Path:
        """The CLI's CSV (`KnockoutTable.csv`): component, loss, delta_loss, in the order measured."""
        from ....core.files import atomic_write

        atomic_write(Path(path), self.knockout_table().csv())
        return Path(path)

    def export_png(self, path) -> Path:
        """A bar per component, its Δ loss, largest rise first (`knockout_image`)."""
        return write_picture(knockout_image(self.knockout_table(), self.font()), path)

    def _export(self, filt: str, suffix: str, fn) -> None:
        if not self.rows:
            self._say("There is no knock-out table to export yet; press Run.", error=True)
            return
        save_with_dialog(self, f"knockout-{self.kind}", filt, suffix, fn, self.status)


def _saved_steps(folder: str | None) -> tuple[list[int], int | None, str]:
    """The steps whose weights the run ``folder`` keeps, its last checkpoint's step and its name ([] for none,
    a run being written or gone)."""
    if not folder:
        return [], None, ""
    from ....core.runs.folder import Run

    try:
        run = Run.open(folder)
        return run.weight_steps(), run.info.checkpoint_step if run.has_checkpoint else None, run.name
    except (OSError, ValueError):
        return [], None, ""


def _span(steps: list[int]) -> str:
    return f"{steps[0]:,}" if len(steps) == 1 else f"{steps[0]:,}…{steps[-1]:,}"


def knockout_image(table: KnockoutTable, font: QFont, width: int = 720) -> QImage:
    """The table as a bar chart: one row per component (largest rise first), its label, a bar of its Δ loss
    from a zero line (red a rise, blue a fall) and the number; a title with the baseline."""
    rows = sorted(table.rows, key=lambda r: r.delta_loss, reverse=True)
    line, label_w, number_w = 22, 230, 90
    image = QImage(width, line * (len(rows) + 2), QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    p.setFont(font)
    p.setPen(QColor("black"))
    p.drawText(8, 0, width - 16, line, int(Qt.AlignmentFlag.AlignVCenter),
               f"Δ validation loss, {table.kind} ablation (baseline {table.baseline_loss:.4f})"
               + ("" if table.complete else " · cancelled"))
    scale = max((abs(r.delta_loss) for r in rows), default=0.0) or 1.0
    lo = min(0.0, min(r.delta_loss for r in rows)) / scale
    span = width - label_w - number_w - 16
    zero = label_w + span * (-lo / (1.0 - lo))
    unit = span / (1.0 - lo)
    for i, r in enumerate(rows, 1):
        y = line * i + 4
        p.setPen(QColor("black"))
        p.drawText(8, y, label_w - 12, line - 6, int(Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight),
                   r.component.label)
        bar = QColor(214, 96, 77) if r.delta_loss > 0 else QColor(67, 147, 195)
        w = unit * r.delta_loss / scale
        p.fillRect(int(min(zero, zero + w)), y + 3, max(1, int(abs(w))), line - 12, bar)
        p.drawText(width - number_w - 4, y, number_w, line - 6, int(Qt.AlignmentFlag.AlignVCenter),
                   f"{r.delta_loss:+.4f}")
    p.setPen(QColor(120, 120, 120))
    p.drawLine(int(zero), line, int(zero), line * (len(rows) + 1) + 4)
    p.end()
    return image
