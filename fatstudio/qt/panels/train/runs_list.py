"""The runs list beside the training view: earlier runs (newest first) to open, resume (to a step), overlay,
take the settings of, fine-tune, export (Hugging Face) or delete."""
from __future__ import annotations

import datetime as _dt
import html
import textwrap

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QStyledItemDelegate,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

RESUME_TIP = "Continue training the run from its last checkpoint up to the given step."
RESUME_TIP_GLASS = ("A glass box's weights were set by hand, not trained: there is nothing to resume "
                    "(Fine-tune… trains from them).")
SWEEP_RUN = Qt.ItemDataRole.UserRole  # a name item's flag: the run is a sweep's (its name begins with its variant)


class _NameDelegate(QStyledItemDelegate):
    """The run column: a name elided in the middle (a run's time, then its architecture and corpus), a sweep run's
    at the end, so that its start, the variant and seed (`sweep.run_folder_name`), shows."""

    def initStyleOption(self, option, index) -> None:
        super().initStyleOption(option, index)
        if index.data(SWEEP_RUN):
            option.textElideMode = Qt.TextElideMode.ElideRight


def _when(ts, short: bool = False) -> str:
    """A run's creation time, "2025-11-24 06:19"; ``short``: "11-24 06:19" (the runs list's column)."""
    try:
        return _dt.datetime.fromtimestamp(float(ts)).strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OSError):
        return ""


class RunsList(QWidget):
    """Earlier runs (newest first) with Open, Resume (to a step), Overlay, Export (Hugging Face) and Delete."""

    openRequested = Signal(object)  # a runs.Run
    resumeRequested = Signal(object, int)  # run, total steps
    overlayRequested = Signal(object)
    deleteRequested = Signal(object)
    exportRequested = Signal(object)  # a runs.Run to write as a Hugging Face transformers folder
    fineTuneRequested = Signal(object)  # a runs.Run whose weights and tokenizer a new run starts from
    settingsRequested = Signal(object)  # a runs.Run whose model, corpus and training settings the panels take
    refreshRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.runs: list = []
        self._busy = False
        self._running_path = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self._build_tree(), 1)
        lay.addLayout(self._build_buttons())
        self.folderLabel = QLabel(objectName="runsFolderLabel")
        self.folderLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folderLabel.setWordWrap(True)
        folder = QHBoxLayout()  # the folder, and ↻ to read it again
        folder.addWidget(self.folderLabel, 1)
        folder.addWidget(self.refreshButton)
        lay.addLayout(folder)
        self._selection_changed()

    def _build_tree(self) -> QTreeWidget:
        self.tree = QTreeWidget(objectName="runsList")
        self.tree.setHeaderLabels(["run", "status", "step", "best val", "created"])
        self.tree.headerItem().setToolTip(3, "The run's best (lowest) validation loss, nats per token.")
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a run's time, then its arch and corpus
        self.tree.setItemDelegateForColumn(0, _NameDelegate(self.tree))  # a sweep's runs differ at the start
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.header().setStretchLastSection(False)  # the run's name takes the room left, not the date too
        self.tree.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, 5):
            self.tree.header().setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.setToolTip("Earlier runs in the runs folder. Double-click to open one.")
        self._fit_columns()
        self.tree.itemSelectionChanged.connect(self._selection_changed)
        self.tree.itemDoubleClicked.connect(lambda *_: self._emit(self.openRequested))
        return self.tree

    def _build_buttons(self) -> QVBoxLayout:
        def button(text: str, name: str, tip: str) -> QPushButton:
            b = QPushButton(text, objectName=name)
            b.setToolTip(tip)
            return b

        self.openButton = button("Open", "openRunButton",
                                 "Show the run's curves and samples and load its model for prompting.")
        self.resumeButton = button("Resume to", "resumeRunButton", RESUME_TIP)
        self.overlayButton = button("Overlay", "overlayRunButton",
                                    "Draw this run's loss curves faded in the loss plot, for comparison.")
        self.deleteButton = button("Delete…", "deleteRunButton", "Delete the run's folder (asks first).")
        self.exportButton = button("Export…", "runsExportButton",
                                   "Write the run as a Hugging Face transformers folder (GPT-2 or Llama) that "
                                   "AutoModelForCausalLM and AutoTokenizer load (asks for a folder).")
        self.fineTuneButton = button("Fine-tune…", "fineTuneRunButton",
                                     "Start a new run from this run's weights and tokenizer (an imported model too), "
                                     "on the Corpus and Train settings; the model settings are this run's.")
        self.useSettingsButton = button("Use settings", "useRunSettingsButton",
                                        "Put this run's model, corpus and training settings in the Model, Corpus and "
                                        "Train panels, to train a variant of it (▶ Train starts a new run).")
        self.refreshButton = button("↻", "refreshRunsButton", "Read the runs folder again.")
        self.refreshButton.setMaximumWidth(32)
        self.resumeSpin = QSpinBox(objectName="resumeStepsSpin")
        self.resumeSpin.setRange(1, 100_000_000)
        self.resumeSpin.setSingleStep(500)
        self.resumeSpin.setToolTip("The total number of steps the resumed run trains to.")
        self.openButton.clicked.connect(lambda: self._emit(self.openRequested))
        self.overlayButton.clicked.connect(lambda: self._emit(self.overlayRequested))
        self.deleteButton.clicked.connect(lambda: self._emit(self.deleteRequested))
        self.exportButton.clicked.connect(lambda: self._emit(self.exportRequested))
        self.fineTuneButton.clicked.connect(lambda: self._emit(self.fineTuneRequested))
        self.useSettingsButton.clicked.connect(lambda: self._emit(self.settingsRequested))
        self.resumeButton.clicked.connect(self._resume_clicked)
        self.refreshButton.clicked.connect(self.refreshRequested)
        first, second = QHBoxLayout(), QHBoxLayout()  # two rows: the samples beside them get the width
        for w in (self.openButton, self.overlayButton, self.resumeButton, self.resumeSpin):
            first.addWidget(w)
        first.addStretch(1)
        for w in (self.useSettingsButton, self.fineTuneButton, self.exportButton, self.deleteButton):
            second.addWidget(w)
        second.addStretch(1)
        buttons = QVBoxLayout()
        buttons.addLayout(first)
        buttons.addLayout(second)
        return buttons

    def set_runs(self, runs: list, root=None) -> None:
        selected = self.selected()
        keep = selected.path if selected is not None else None
        self.runs = list(runs)
        self.tree.clear()
        items = [self._item(run) for run in self.runs]
        self.tree.addTopLevelItems(items)  # at once: one layout and one column resize, not one per run
        self._fit_columns()
        for run, item in zip(self.runs, items):
            if keep is not None and run.path == keep:
                item.setSelected(True)
        if root is not None:
            self.folderLabel.setText(f"<small>runs folder: {html.escape(str(root))}</small>")
        self._selection_changed()

    NAME_COLUMN = "20250101-120000-…"  # what the run's name column shows at least (the rest elides)

    def _fit_columns(self) -> None:
        """At least as wide as the status, step, loss and date columns and the start of a run's name: no
        sideways scrolling."""
        tree, header = self.tree, self.tree.header()
        columns = sum(max(tree.sizeHintForColumn(i), header.sectionSizeHint(i)) for i in range(1, header.count()))
        frame = 2 * tree.frameWidth() + tree.verticalScrollBar().sizeHint().width()
        tree.setMinimumWidth(columns + tree.fontMetrics().horizontalAdvance(self.NAME_COLUMN) + frame)

    @staticmethod
    def _item(run) -> QTreeWidgetItem:
        m = run.info
        val = m.best_val_loss if m.best_val_loss is not None else m.val_loss
        status, steps = m.status or "?", f"{m.step}/{m.total_steps(run.config.train.steps)}"
        if m.imported_class:  # its weights were trained elsewhere: no status or steps of its own here
            status, steps = "imported", "–"
        if m.glass_box:  # its weights were set by hand: no steps
            status, steps = "glass box", "–"
        item = QTreeWidgetItem([run.name, status, steps, f"{val:.4f}" if val is not None else "",
                                _when(m.created, short=True)])
        item.setToolTip(0, f"{run.path}\n{run.config.model.arch} on {run.config.data.corpus} "
                           f"({run.config.data.task}, {run.config.data.tokenizer} tokens)"
                           + (f"\n{m.sweep_variant}, seed {run.config.train.seed}" if m.sweep_variant else "")
                           + (f"\nfine-tuned from the weights of {m.init_from}" if m.init_from else "")
                           + (f"\nimported ({m.imported_class}): not trained here" if m.imported_class else "")
                           + (f"\n\n{textwrap.fill(m.description, 90)}" if m.description else ""))
        item.setToolTip(4, _when(m.created))
        item.setData(0, SWEEP_RUN, m.sweep_variant is not None)
        return item

    def select_path(self, path) -> None:
        for i, run in enumerate(self.runs):
            if str(run.path) == str(path):
                item = self.tree.topLevelItem(i)
                if item is not None:
                    self.tree.setCurrentItem(item)
                return

    def selected(self):
        items = self.tree.selectedItems()
        if not items:
            return None
        i = self.tree.indexOfTopLevelItem(items[0])
        return self.runs[i] if 0 <= i < len(self.runs) else None

    def show_reading(self, root) -> None:
        """Say that the runs folder ``root`` is being read."""
        self.folderLabel.setText(f"<small>reading the runs folder {html.escape(str(root))}…</small>")

    def drop(self, path) -> None:
        """Take the run at ``path`` off the list (deleted; the folder is read again after)."""
        self.set_runs([r for r in self.runs if str(r.path) != str(path)])

    def set_busy(self, busy: bool, running_path=None) -> None:
        """While a training runs: no open, resume or delete (overlay stays)."""
        self._busy, self._running_path = busy, running_path
        self._selection_changed()

    def _selection_changed(self) -> None:
        run = self.selected()
        has = run is not None
        self.openButton.setEnabled(has and not self._busy)
        built = has and bool(run.info.glass_box)  # set by hand, never trained: nothing to resume
        self.resumeButton.setEnabled(has and not self._busy and not built)
        self.resumeSpin.setEnabled(has and not self._busy and not built)
        self.resumeButton.setToolTip(RESUME_TIP_GLASS if built else RESUME_TIP)
        self.deleteButton.setEnabled(has and not self._busy)
        self.fineTuneButton.setEnabled(has and not self._busy)
        self.useSettingsButton.setEnabled(has and not self._busy)
        self.overlayButton.setEnabled(has)
        self.exportButton.setEnabled(has)
        if has:
            step, total = run.info.step, run.info.total_steps(run.config.train.steps)
            self.resumeSpin.setValue(total if step < total else step + max(500, total // 2))

    def _emit(self, signal) -> None:
        run = self.selected()
        if run is not None:
            signal.emit(run)

    def _resume_clicked(self) -> None:
        run = self.selected()
        if run is not None:
            self.resumeRequested.emit(run, self.resumeSpin.value())
