"""The Attention panel's activation patching (``patchingView``, `core.inspect.patching`): a clean and a corrupted
prompt of the same length (and, optionally, the target token); the corrupted run with one activation taken from
the clean run, as the fraction of the clean − corrupted logit difference it restores: the residual stream after
each layer at each position (the map: rows the embedding and the layers, columns the positions) and each head's
output (the table: layers × heads). Measured in a worker thread on a copy of the weights; bad input is said in
a line under the fields, counted as typed. Exported as CSV (`PatchResult.csv`) and PNG."""
from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...core.inspect.prompting import display_token, encode_prompt
from ..widgets.heatmap import HeatmapView
from ..widgets.token_view import signed_tint
from ..workers import call_in_thread
from .attention_export import save_with_dialog, show_message

if TYPE_CHECKING:
    from ...core.inspect.patching import PatchResult

HINT = "Write a clean and a corrupted prompt of the same number of tokens."
DECODERS = ("gpt", "gopher")  # `patching.check_decoder`: what patching reads is a next-token prediction
MAX_HINT_WIDTH = 600  # px: the head shown large's width hint (`HeatmapView`)


def run_patch(loaded, clean: str, corrupt: str, target: str | None) -> PatchResult:
    """In a worker: `patching.patch` on a copy of the model (its hooks touch no model the app prompts)."""
    from ...core.inspect.patching import patch

    return patch(copy.deepcopy(loaded.model), loaded.tokenizer, clean, corrupt, target)


class PatchingView(QWidget):
    """Fields, Run and export buttons, ``patchingMessage``, the map ``patchingMap`` and ``patchingHeads``."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("patchingView")
        self.loaded = None
        self.result: PatchResult | None = None
        self._call = None
        self.cleanEdit = QLineEdit(objectName="patchingClean", placeholderText="e.g. the cat sat on the mat")
        self.corruptEdit = QLineEdit(objectName="patchingCorrupt", placeholderText="e.g. the dog sat on the mat")
        self.targetEdit = QLineEdit(objectName="patchingTarget", placeholderText="the clean run's top token")
        self.targetEdit.setToolTip("The token whose logit difference over the corrupted run's top other token is "
                                   "measured at the last position (one token of the vocabulary).")
        self.runButton = QPushButton("Run", objectName="patchingRunButton")
        self.csvButton = QPushButton("Export CSV…", objectName="patchingCsvButton")
        self.pngButton = QPushButton("Export PNG…", objectName="patchingPngButton")
        self.targetEdit.setMaximumWidth(160)
        form = QGridLayout()  # two rows: the map below gets the height
        form.setContentsMargins(0, 0, 0, 0)
        form.addWidget(QLabel("clean"), 0, 0)
        form.addWidget(self.cleanEdit, 0, 1)
        form.addWidget(QLabel("target"), 0, 2, Qt.AlignmentFlag.AlignRight)
        form.addWidget(self.targetEdit, 0, 3, 1, 2)
        form.addWidget(QLabel("corrupted"), 1, 0)
        form.addWidget(self.corruptEdit, 1, 1)
        for c, b in enumerate((self.runButton, self.csvButton, self.pngButton), 2):
            form.addWidget(b, 1, c)
        form.setColumnStretch(1, 1)
        self.message = QLabel(objectName="patchingMessage")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.RichText)
        self.map = HeatmapView()
        self.map.setObjectName("patchingMap")
        self.map.setToolTip("Each cell: the fraction of the clean − corrupted logit difference at the last position "
                            "that patching the residual stream after that layer (row) at that position (column) "
                            "restores: 0 none, 1 all; the colours clip at 0 and 1. Hover a cell for its number.")
        self.map.plot.setLabel("bottom", "position (corrupted token)")
        self.map.plot.setLabel("left", "residual stream after layer")
        if self.map.colorbar is not None:  # the title says what the colours are: the room goes to the map
            self.map.colorbar.getAxis("left").showLabel(False)
        self.heads = QTableWidget(0, 0, objectName="patchingHeads")
        self.heads.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.heads.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.heads.setToolTip("Each head's output Y^h patched at every position: the fraction restored.")
        self.hover = QLabel(" ", objectName="patchingHover")
        self.hover.setTextFormat(Qt.TextFormat.RichText)
        self.results = QSplitter(Qt.Orientation.Horizontal)
        self.results.addWidget(self.map)
        heads = QWidget()
        hl = QVBoxLayout(heads)
        hl.setContentsMargins(0, 0, 0, 0)
        hl.addWidget(QLabel("each head patched\n(rows: layers)"))
        hl.addWidget(self.heads, 1)
        self.results.addWidget(heads)
        self.results.setStretchFactor(0, 3)
        self.results.setStretchFactor(1, 1)
        self.results.setChildrenCollapsible(False)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(form)
        lay.addWidget(self.message)
        lay.addWidget(self.results, 1)
        lay.addWidget(self.hover)
        for edit in (self.cleanEdit, self.corruptEdit, self.targetEdit):
            edit.textChanged.connect(self.check)
            edit.returnPressed.connect(self.start)
        self.runButton.clicked.connect(self.start)
        self.csvButton.clicked.connect(lambda: self._export("CSV table (*.csv)", ".csv", self.export_csv))
        self.pngButton.clicked.connect(lambda: self._export("PNG image (*.png)", ".png", self.export_png))
        self.map.hovered.connect(self._on_hover)
        self.check()

    def sizeHint(self) -> QSize:
        """No wider than the head shown large beside whose tab it sits: the grid keeps its share of the width."""
        hint = super().sizeHint()
        return QSize(min(hint.width(), MAX_HINT_WIDTH), hint.height())

    def set_model(self, loaded) -> None:
        self.loaded = loaded
        self.check()

    # ---- input -------------------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """What keeps the fields from being patched, in words (None: they can be)."""
        loaded = self.loaded
        if loaded is None:
            return "Load a model first (open a trained run, or take a snapshot while training)."
        arch = loaded.model.config.arch
        if arch not in DECODERS:
            return (f"Patching reads a decoder-only model's next-token prediction at the last position; this is a "
                    f"{arch!r} model. Open a gpt or gopher run.")
        clean, corrupt = self.cleanEdit.text(), self.corruptEdit.text()
        if not clean or not corrupt:
            return HINT
        try:
            n = [len(encode_prompt(loaded.tokenizer, t, "generate", l_max=loaded.model.config.l_max).ids)
                 for t in (clean, corrupt)]
        except ValueError as e:
            return str(e)
        if n[0] != n[1]:
            return f"The clean prompt is {n[0]} tokens and the corrupted one {n[1]}: they must be the same length."
        return None

    def check(self) -> bool:
        """Say under the fields what is wrong with them (nothing: how long they are); Run only when they can be
        patched."""
        problem = self.problem()
        self.runButton.setEnabled(problem is None and self._call is None)
        if problem is not None:
            show_message(self.message, html.escape(problem), error=problem != HINT)
        elif self.result is None:
            show_message(self.message, "Run patches each layer's residual stream at each position, and each head, "
                                       "from the clean run into the corrupted one.")
        return problem is None

    # ---- running -----------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._call is not None or not self.check():
            return
        target = self.targetEdit.text() or None
        self.runButton.setEnabled(False)
        show_message(self.message, "Patching…")
        self._call = call_in_thread(run_patch, self.loaded, self.cleanEdit.text(), self.corruptEdit.text(), target,
                                    owner=self, on_result=self._on_result, on_error=self._on_error)

    def _on_error(self, message: str) -> None:
        self._call = None
        self.check()
        show_message(self.message, html.escape(message), error=True)

    def _on_result(self, r: PatchResult) -> None:
        self._call, self.result = None, r
        self.check()
        rows = ["embedding", *(str(l) for l in range(1, len(r.residual)))]
        self.map.set_matrix(np.asarray(r.residual, dtype=np.float64), rows, r.corrupt_tokens,
                            title=html.escape(f"fraction of logit({display_token(r.target)}) − "
                                              f"logit({display_token(r.foil)}) restored"))
        layers = list(r.heads)
        H = max((len(v) for v in r.heads.values()), default=0)
        t = self.heads
        t.clear()
        t.setRowCount(len(layers))
        t.setColumnCount(H)
        t.setHorizontalHeaderLabels([f"h{h + 1}" for h in range(H)])
        t.setVerticalHeaderLabels([str(int(n.split('/')[1]) + 1) for n in layers])  # the layer, from 1
        for i, n in enumerate(layers):
            for h, v in enumerate(r.heads[n]):
                item = QTableWidgetItem(f"{v:.2f}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setBackground(signed_tint(v, 1.0))
                item.setToolTip(f"{n}/{h}: restores {v:.4f}")
                t.setItem(i, h, item)
        t.resizeColumnsToContents()
        want = (t.verticalHeader().sizeHint().width() + sum(t.columnWidth(c) for c in range(H)) + 2 * t.frameWidth()
                + t.verticalScrollBar().sizeHint().width() + 4)  # room for a scroll bar: a short pane needs one
        total = sum(self.results.sizes())
        if total > 2 * want:  # the whole table in view, the rest to the map
            self.results.setSizes([total - want, want])
        best = max(((n, h) for n in layers for h in range(len(r.heads[n]))), key=lambda nh: r.heads[nh[0]][nh[1]],
                   default=None)
        most = "" if best is None else (f" Of the heads, layer {int(best[0].split('/')[1]) + 1} head {best[1] + 1} "
                                        f"restores the most ({r.heads[best[0]][best[1]]:.0%}).")
        show_message(self.message, html.escape(
            f"logit({display_token(r.target)}) − logit({display_token(r.foil)}) at the last position: "
            f"{r.clean_logit_diff:.3f} clean, {r.corrupted_logit_diff:.3f} corrupted.{most}"))

    def _on_hover(self, q: int, k: int) -> None:
        r = self.result
        if r is None or q < 0:
            self.hover.setText(" ")
            return
        where = "the embedding" if q == 0 else f"layer {q}"
        self.hover.setText(f"residual after {where} at position {k + 1} "
                           f"<code>{html.escape(display_token(r.corrupt_tokens[k]))}</code>: restores "
                           f"<b>{r.residual[q][k]:.4f}</b>")

    # ---- export ------------------------------------------------------------------------------------------
    def export_csv(self, path) -> Path:
        """`PatchResult.csv`: each residual patch (layer, position) and each head with the fraction restored."""
        if self.result is None:
            raise ValueError("nothing has been patched yet; press Run.")
        from ...core.files import atomic_write

        atomic_write(Path(path), self.result.csv())
        return Path(path)

    def export_png(self, path) -> Path:
        """The map and the heads' table as they are shown."""
        if self.result is None:
            raise ValueError("nothing has been patched yet; press Run.")
        path = Path(path)
        if not self.results.grab().save(str(path), "PNG"):
            raise OSError(f"could not write {path}.")
        return path

    def _export(self, filt: str, suffix: str, fn) -> None:
        if self.result is None:
            show_message(self.message, "Nothing to export yet; press Run.", error=True)
            return
        save_with_dialog(self, "patching", filt, suffix, fn, self.message)
