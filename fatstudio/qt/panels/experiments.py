"""Experiments panel: a sweep over seeds of the current settings (`core.training.sweep`). The keys to vary and
their values, the seeds and the budget are asked here; the sweep runs in a worker thread, each run its own
process, and the table fills as runs finish: each variant's validation bits per byte (or token) per seed, mean, sd and
Welch's p against the baseline (the first row). A row's runs open in the Training tab or overlay its plot."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCompleter,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QStyledItemDelegate,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.config import RunConfig
from fatstudio.core.config_keys import config_key, config_keys
from fatstudio.core.records import variant_text
from fatstudio.qt.widgets.forms import ValueCombo, int_spin, read_only_table, table_item

if TYPE_CHECKING:
    from fatstudio.core.app.jobs import Job, Progress
    from fatstudio.core.app.workspace import Workspace

VARY_TIP = ("A config key (table.key: train.lr, train.optimizer, model.d_e, data.tokenizer…; type part of one to "
            "pick it from a list with its type) and its values, separated by commas; the first value of every key is "
            "the baseline. Every combination is trained.")
KEY, KIND, VALUES = 0, 1, 2  # the columns of the keys to vary
SEED_KEY = "train.seed"  # the sweep's own (a column per seed), never a key to vary
FEW_MARK = " ⚠"  # after a p-value that rests on too few seeds to mean much
BUDGET_TIP = ("steps: train.steps of every run. seconds: each variant trains as many steps as fit in that "
              "many seconds here (timed first, as Estimate time does), its schedule ending there.")


def _run_sweep(config, vary: list[str], seeds: int, steps: int | None, seconds: float | None, runs_root: str,
               stop: threading.Event, progress: Progress) -> dict:
    """In the sweep's job: the sweep (`run_sweep`), the sweep so far sent after each run (`Sweep.to_dict`); the
    whole sweep's dict at the end."""
    from fatstudio.core.training.sweep import Plan, parse_vary, run_sweep

    plan = Plan(config, [parse_vary(config, v) for v in vary], seeds, steps, seconds)
    return run_sweep(plan, Path(runs_root), progress=lambda sweep, done: progress.send(sweep.to_dict()),
                     stop=stop).to_dict()


def _plan_problem(vary: list[str]) -> str | None:
    """What the form's KEY=V1,V2 rows lack, in the tab's words (the core's messages name the command line's
    flags); None when the sweep can start (a key or value the config refuses is said by `parse_vary`)."""
    if not vary:
        return "Give at least one key to vary, e.g. train.lr with 1e-3, 3e-3."
    keys = [v.partition("=")[0] for v in vary]
    empty = [k for k, v in zip(keys, vary) if not v.partition("=")[2].strip()]
    if empty:
        return f"{empty[0]}: give its values, separated by commas (e.g. 1e-3, 3e-3)."
    twice = [k for k in keys if keys.count(k) > 1]
    return f"{twice[0]} is in two rows: give each key once, its values separated by commas." if twice else None


def key_completions(config: RunConfig, parent=None) -> QStandardItemModel:
    """Every key a sweep may vary, shown with its type and value ("train.lr: a number; now 0.001"), completed as
    the key alone (``parent``: the model's owner)."""
    model = QStandardItemModel(parent)
    for k in config_keys(config, leave_out=(SEED_KEY,)):
        item = QStandardItem(k.describe())
        item.setData(k.key, Qt.ItemDataRole.UserRole)
        model.appendRow(item)
    return model


class KeyDelegate(QStyledItemDelegate):
    """The key column's editor: a line that completes config keys (any part of one: "lr" offers train.lr,
    train.min_lr, train.muon_lr), each shown with its type, from ``config()``."""

    def __init__(self, config, parent=None):
        super().__init__(parent)
        self.config = config

    def createEditor(self, parent, option, index):
        editor = QLineEdit(parent, objectName="varyKeyEdit")
        completer = QCompleter(editor)
        completer.setModel(key_completions(self.config(), completer))
        completer.setCompletionRole(Qt.ItemDataRole.UserRole)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setMaxVisibleItems(12)
        model, metrics = completer.model(), editor.fontMetrics()  # the popup as wide as its keys and their types
        widest = max((metrics.horizontalAdvance(model.index(r, 0).data()) for r in range(model.rowCount())), default=0)
        popup = completer.popup()
        if popup is not None:
            popup.setMinimumWidth(min(widest + 40, 720))
        editor.setCompleter(completer)
        return editor


class ExperimentsPanel(QWidget):
    """Queue a sweep of the settings' config into the runs folder and show its table as it fills. Signals
    ``openRequested(list)`` and ``overlayRequested(list)`` with a row's run folders (the finished ones)."""

    openRequested = Signal(object)
    overlayRequested = Signal(object)
    sweepFinished = Signal(object)  # the sweep's dict (see `Sweep.to_dict`)
    sweepReported = Signal(object)  # the sweep so far, after each of its runs, once the table shows it

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.setObjectName("experimentsPanel")
        self.workspace, self.settings = workspace, workspace.settings
        self.rows: list[dict] = []  # the sweep's rows as last reported
        self._seeds = 0  # the seeds per variant of the sweep running
        self._first_seed = 0  # its first seed (train.seed): the seeds are it, +1, …
        self._call: Job | None = None
        self._stop = threading.Event()
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("<b>Experiments over seeds</b>: the current settings, with the keys below varied and "
                             "each run trained for the budget below (in place of the Train tab's steps). "
                             "Each run trains in its own process; each value is the final validation loss in "
                             "bits per byte (comparable across tokenizers), or in bits per token where there are no "
                             "bytes to count (modadd, seq2seq, classification).", wordWrap=True))
        lay.addWidget(self._build_plan())
        self.statusLabel = QLabel(objectName="sweepStatus", wordWrap=True)
        lay.addWidget(self.statusLabel)
        self.table = read_only_table("sweepTable", ("variant", "mean", "sd", "p (Welch)", "runs"))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.cellDoubleClicked.connect(lambda *_: self.open_row())
        lay.addWidget(self.table, 1)
        buttons = QHBoxLayout()
        self.openButton = QPushButton("Open row's runs", objectName="openRowButton", enabled=False,
                                      toolTip="Show the row's first run in the Training tab, its other seeds overlaid.")
        self.overlayButton = QPushButton("Overlay row's runs", objectName="overlayRowButton", enabled=False,
                                         toolTip="Overlay the row's runs (faded) on the run shown in the Training tab.")
        self.openButton.clicked.connect(self.open_row)
        self.overlayButton.clicked.connect(self.overlay_row)
        buttons.addWidget(self.openButton)
        buttons.addWidget(self.overlayButton)
        buttons.addStretch(1)
        lay.addLayout(buttons)

    def _build_plan(self) -> QWidget:
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        self.varyTable = QTableWidget(0, 3, objectName="varyTable")
        self.varyTable.setHorizontalHeaderLabels(("key", "type", "values (the first is the baseline)"))
        self.varyTable.horizontalHeader().setStretchLastSection(True)
        self.varyTable.setColumnWidth(KEY, 200)
        self.varyTable.setColumnWidth(KIND, 260)
        self.varyTable.verticalHeader().hide()
        self.varyTable.setToolTip(VARY_TIP)
        self.varyTable.setMaximumHeight(120)
        self.varyTable.setItemDelegateForColumn(KEY, KeyDelegate(lambda: self.settings.config, self.varyTable))
        self.varyTable.itemChanged.connect(self._vary_changed)
        for key, values in (("train.optimizer", "adamw, muon"), ("", "")):
            self._add_vary_row(key, values)
        lay.addWidget(self.varyTable)
        row = QHBoxLayout()
        add = QPushButton("Add key", toolTip="Another key to vary (every combination is trained).")
        add.clicked.connect(lambda: self._add_vary_row())
        row.addWidget(add)
        row.addWidget(QLabel("seeds"))
        self.seedsSpin: QSpinBox = int_spin(1, 1000, 3)
        self.seedsSpin.setToolTip("Runs per variant, with seeds train.seed, train.seed + 1, …")
        row.addWidget(self.seedsSpin)
        row.addWidget(QLabel("budget"))
        self.budgetSpin: QSpinBox = int_spin(1, 100_000_000, 500, step=100)
        self.budgetSpin.setToolTip(BUDGET_TIP)
        self.budgetKind = ValueCombo([("steps", "steps"), ("seconds", "seconds")])
        self.budgetKind.setToolTip(BUDGET_TIP)
        row.addWidget(self.budgetSpin)
        row.addWidget(self.budgetKind)
        row.addStretch(1)
        self.runButton = QPushButton("Run sweep", objectName="runSweepButton")
        self.runButton.clicked.connect(self.start)
        self.stopButton = QPushButton("Stop", objectName="stopSweepButton", enabled=False,
                                      toolTip="End the run in progress and leave the rest out.")
        self.stopButton.clicked.connect(self.stop)
        row.addWidget(self.runButton)
        row.addWidget(self.stopButton)
        lay.addLayout(row)
        return box

    def _add_vary_row(self, key: str = "", values: str = "") -> None:
        t = self.varyTable
        r = t.rowCount()
        t.insertRow(r)
        kind = QTableWidgetItem("")
        kind.setFlags(kind.flags() & ~Qt.ItemFlag.ItemIsEditable)
        t.setItem(r, KIND, kind)
        t.setItem(r, VALUES, QTableWidgetItem(values))
        t.setItem(r, KEY, QTableWidgetItem(key))  # last: its change fills the type

    def _vary_changed(self, item: QTableWidgetItem) -> None:
        """A key typed or picked: its type beside it (in red where the config has no such key)."""
        if item.column() == KEY:
            self._show_kind(item.row())

    def _show_kind(self, row: int) -> None:
        t, key = self.varyTable, self.varyTable.item(row, KEY)
        kind = t.item(row, KIND)
        if kind is None or key is None:
            return
        text = key.text().strip()
        try:
            k = config_key(self.settings.config, text) if text and text != SEED_KEY else None
            said, tip, bad = (k.kind, k.describe(), False) if k else \
                ("set by the seeds", "The sweep runs seeds train.seed, train.seed + 1, …: give the number of seeds.",
                 True) if text == SEED_KEY else ("", "", False)
        except ValueError as e:
            said, tip, bad = "no such key", str(e), True
        t.blockSignals(True)
        kind.setText(said)
        kind.setToolTip(tip)
        kind.setForeground(QBrush(QColor("#b00020")) if bad else QBrush())
        t.blockSignals(False)

    def kinds(self) -> list[str]:
        """The type shown beside each row's key ("" for a row without one)."""
        return [(self.varyTable.item(r, KIND) or QTableWidgetItem()).text() for r in range(self.varyTable.rowCount())]

    # -- the plan -----------------------------------------------------------------------------------------
    def vary(self) -> list[str]:
        """The rows with a key, as KEY=V1,V2."""
        out = []
        for r in range(self.varyTable.rowCount()):
            key, values = (self.varyTable.item(r, c) for c in (KEY, VALUES))
            k, v = (key.text().strip() if key else ""), (values.text().strip() if values else "")
            if k:
                out.append(f"{k}={v}")
        return out

    def set_plan(self, vary: list[tuple[str, str]], seeds: int, budget: int, kind: str = "steps") -> None:
        """Fill the form: (key, "V1, V2") rows, seeds, the budget in steps or seconds."""
        self.varyTable.setRowCount(0)
        for key, values in vary:
            self._add_vary_row(key, values)
        self.seedsSpin.setValue(seeds)
        self.budgetSpin.setValue(budget)
        self.budgetKind.set_value(kind)

    @property
    def running(self) -> bool:
        return self._call is not None and self._call.running

    def start(self) -> None:
        """Queue the sweep in a worker thread."""
        if self.running:
            return
        vary = self.vary()
        problem = _plan_problem(vary)
        if problem:
            self._say(problem, error=True)
            return
        seconds = self.budgetKind.value() == "seconds"
        budget = self.budgetSpin.value()
        self._stop = threading.Event()
        self.rows, self._seeds, self._first_seed = [], self.seedsSpin.value(), self.settings.config.train.seed
        self.table.setRowCount(0)
        self.runButton.setEnabled(False)
        self.stopButton.setEnabled(True)
        self._say("Starting the sweep…")
        self._call = self.workspace.jobs.submit(
            "sweep", _run_sweep, self.settings.config, vary, self.seedsSpin.value(), None if seconds else budget,
            float(budget) if seconds else None, str(self.workspace.runs_root), self._stop, progress=True,
            on_item=self._reported, on_result=self._finished, on_error=self._failed, stop=self._stop.set)

    def _reported(self, sweep: dict) -> None:
        self.show_rows(sweep)
        self.sweepReported.emit(sweep)

    def stop(self) -> None:
        """End the run in progress (its process is ended) and leave the rest out."""
        self._stop.set()

    def _finished(self, result: dict) -> None:
        self._call = None
        self.show_rows(result)
        self._idle()
        done = sum(v is not None for r in self.rows for v in r["values"])
        total = sum(len(r["values"]) for r in self.rows)
        missing = next(((r, seed, e) for r in self.rows for seed, e in r["errors"].items()), None)
        why = "" if missing is None else \
            f" The first missing, {variant_text(missing[0]['variant'])} with seed {missing[1]}: {missing[2]}"
        few = next((r["p_note"] for r in self.rows if r.get("p_note")), None)
        self._say(f"Sweep done: {done} of {total} runs gave a value.{why}" + (f" ⚠ p-values: {few}" if few else ""),
                  error=done < total)
        self.sweepFinished.emit(result)

    def _failed(self, message: str) -> None:
        self._call = None
        self._idle()
        self._say(message, error=True)

    def _idle(self) -> None:
        self.runButton.setEnabled(True)
        self.stopButton.setEnabled(False)

    def _say(self, text: str, error: bool = False) -> None:
        self.statusLabel.setStyleSheet("color: #b00020;" if error else "")
        self.statusLabel.setText(text)

    # -- the table ----------------------------------------------------------------------------------------
    def show_rows(self, sweep: dict) -> None:
        """Fill the table from a sweep's dict (`Sweep.to_dict`): one line per variant, a column per seed."""
        rows = sweep["rows"]
        if not rows:
            return
        selected = self._selected()
        self.rows = rows
        n = max(len(r["values"]) for r in rows)
        seeds = max(self._seeds, n)
        names = max((r["seeds"] for r in rows), key=len)  # the seeds run so far, then those to come
        names = [*names, *(self._first_seed + i for i in range(len(names), seeds))]
        unit = f" ({sweep['unit']})" if sweep.get("unit") else ""
        columns = ("variant", *(f"seed {s}" for s in names), f"mean{unit}", "sd", "p (Welch)")
        self.table.setColumnCount(len(columns))
        self.table.setHorizontalHeaderLabels(columns)
        self.table.setRowCount(len(rows))
        for i, r in enumerate(rows):
            label = variant_text(r["variant"])
            self.table.setItem(i, 0, table_item(label + (" (baseline)" if i == 0 else ""), align_right=False))
            for j in range(seeds):
                value = r["values"][j] if j < len(r["values"]) else None
                error = r["errors"].get(str(r["seeds"][j]), "") if j < len(r["values"]) else ""
                text = "missing" if error else ("" if value is None else f"{value:.4f}")
                self.table.setItem(i, 1 + j, table_item(text, error or (r["runs"][j] if j < len(r["runs"]) else "")))
            p = r["p_value"]
            for c, v in ((seeds + 1, r["mean"]), (seeds + 2, r["sd"])):
                self.table.setItem(i, c, table_item("" if v is None else f"{v:.4f}"))
            few = r.get("p_note")
            self.table.setItem(i, seeds + 3, table_item("" if p is None else f"{p:.3g}" + (FEW_MARK if few else ""),
                                                        "Welch's t-test against the baseline row" +
                                                        (f" (df ≈ {r['df']:.1f})" if r.get("df") else "") +
                                                        (f".\n⚠ {few}" if few else "")))
        done = sum(len(r["values"]) for r in rows)
        if self.running:
            self._say(f"Running: {done} of {len(rows) * self._seeds} runs done.")
        if selected is not None and selected < len(rows):
            self.table.selectRow(selected)

    def _selected(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows else None

    def _selection_changed(self) -> None:
        has = bool(self.row_runs(self._selected()))
        self.openButton.setEnabled(has)
        self.overlayButton.setEnabled(has)

    def row_runs(self, i: int | None) -> list[str]:
        """The run folders of row ``i`` that gave a value."""
        if i is None or i >= len(self.rows):
            return []
        r = self.rows[i]
        return [d for d, v in zip(r["runs"], r["values"]) if v is not None]

    def open_row(self) -> None:
        runs = self.row_runs(self._selected())
        if runs:
            self.openRequested.emit(runs)

    def overlay_row(self) -> None:
        runs = self.row_runs(self._selected())
        if runs:
            self.overlayRequested.emit(runs)
