"""The Attention panel's activation patching (``patchingView``, `core.inspect.patching`) for every architecture: a
clean and a corrupted prompt of the same length (an encoder-decoder's: sources, its decoder reading the same
``prefix``), optionally the target token and the ``position`` the prediction is read at (default as the core's: the
last; BERT the first [MASK]); the corrupted run with one activation taken from the clean run, as the fraction of
the clean − corrupted logit difference it restores: the residual stream after each layer at each position (the map:
rows the embedding and the layers, columns the positions; an encoder-decoder's encoder over the source, or with the
stream switch its decoder over the prefix) and each head's output (the table: a row per layer of self-, encoder,
decoder and cross-attention, a column per head). Measured in a worker thread on a copy of the weights; bad input is
said in a line under the fields, counted as typed. Exported as CSV (`PatchResult.csv`) and PNG."""
from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
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

from ....core.inference.prompting import display_token
from ....core.names import ComponentName
from ...widgets.focus_label import FocusLabel
from ...widgets.heatmap import HeatmapView
from ...widgets.saving import save_with_dialog, show_message, write_picture
from ...widgets.token_view import signed_tint

if TYPE_CHECKING:
    from ....core.app.jobs import Job
    from ....core.app.workspace import Workspace
    from ....core.inspect.patching import PatchResult

HINT = "Write a clean and a corrupted prompt of the same number of tokens."
MAX_HINT_WIDTH = 600  # px: the head shown large's width hint (`HeatmapView`)
STREAMS = (("encoder (source)", "enc"), ("decoder (prefix)", "dec"))  # an encoder-decoder's two residual maps


def run_patch(loaded, clean: str, corrupt: str, target: str | None, position: int | None = None,
              prefix: str | None = None) -> PatchResult:
    """In a worker: `patching.patch` on a copy of the model (its hooks touch no model the app prompts)."""
    from ....core.inspect.patching import patch

    return patch(copy.deepcopy(loaded.model), loaded.tokenizer, clean, corrupt, target, position=position,
                 prefix=prefix)


def prompt_lengths(loaded, clean: str, corrupt: str, prefix: str) -> tuple[list[int], int]:
    """The two prompts' token counts as patching frames them (`lens.encode`: BERT's [bos] … [eos], an
    encoder-decoder's framed sources) and the length of the sequence the prediction is read in (an
    encoder-decoder's decoder: [bos] + prefix). ValueError, in words, for a text the model cannot read."""
    from ....core.inspect.lens import encode

    model, tokenizer = loaded.model, loaded.tokenizer
    if model.config.arch == "edt":
        framed = [encode(model, tokenizer, prefix, t) for t in (clean, corrupt)]
        return [len(z or ()) for _, z in framed], len(framed[0][0])
    n = [len(encode(model, tokenizer, t)[0]) for t in (clean, corrupt)]
    return n, n[0]


class PatchingView(QWidget):
    """Fields, Run and export buttons, ``patchingMessage``, the map ``patchingMap`` and ``patchingHeads``."""

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.setObjectName("patchingView")
        self.loaded = None
        self.result: PatchResult | None = None
        self._call: Job | None = None
        self.cleanEdit = QLineEdit(objectName="patchingClean", placeholderText="e.g. the cat sat on the mat")
        self.corruptEdit = QLineEdit(objectName="patchingCorrupt", placeholderText="e.g. the dog sat on the mat")
        self.targetEdit = QLineEdit(objectName="patchingTarget", placeholderText="the clean run's top token")
        self.targetEdit.setToolTip("The token whose logit difference over the corrupted run's top other token is "
                                   "measured at the position read (one token of the vocabulary).")
        self.positionEdit = QLineEdit(objectName="patchingPosition", placeholderText="default")
        self.positionEdit.setToolTip("Where the prediction is read, counted from 0 (-1: the last). BERT: of [bos] + "
                                     "text + [eos], default the first [MASK], else the last text token; an "
                                     "encoder-decoder: of [bos] + prefix, default the last; else default the last.")
        self.prefixEdit = QLineEdit(objectName="patchingPrefix", placeholderText="none: the decoder reads [bos]")
        self.prefixEdit.setToolTip("An encoder-decoder's target prefix, the same in both runs: the clean and corrupted "
                                   "prompts are its sources.")
        self.streamCombo = QComboBox(objectName="patchingStreamCombo")
        for words, key in STREAMS:
            self.streamCombo.addItem(words, key)
        self.streamCombo.setToolTip("An encoder-decoder's residual map: its encoder's over the source, or its "
                                    "decoder's over [bos] + prefix.")
        self.runButton = QPushButton("Run", objectName="patchingRunButton")
        self.csvButton = QPushButton("Export CSV…", objectName="patchingCsvButton")
        self.pngButton = QPushButton("Export PNG…", objectName="patchingPngButton")
        self.targetEdit.setMaximumWidth(160)
        self.positionEdit.setMaximumWidth(70)
        form = QGridLayout()  # three rows: the map below gets the height
        form.setContentsMargins(0, 0, 0, 0)
        self.prefixLabel = QLabel("prefix")
        for r, (words, edit) in enumerate((("clean", self.cleanEdit), ("corrupted", self.corruptEdit),
                                           ("prefix", self.prefixEdit))):
            form.addWidget(self.prefixLabel if edit is self.prefixEdit else QLabel(words), r, 0)
            form.addWidget(edit, r, 1)
        form.addWidget(QLabel("target"), 0, 2, Qt.AlignmentFlag.AlignRight)
        form.addWidget(self.targetEdit, 0, 3)
        form.addWidget(QLabel("position"), 0, 4, Qt.AlignmentFlag.AlignRight)
        form.addWidget(self.positionEdit, 0, 5)
        buttons = QHBoxLayout()
        for b in (self.runButton, self.csvButton, self.pngButton):
            buttons.addWidget(b)
        form.addLayout(buttons, 1, 2, 1, 4)
        form.addWidget(self.streamCombo, 2, 2, 1, 4)
        form.setColumnStretch(1, 1)
        self.message = QLabel(objectName="patchingMessage")
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.RichText)
        self.map = HeatmapView()
        self.map.setObjectName("patchingMap")
        self.map.setToolTip("Each cell: the fraction of the clean − corrupted logit difference at the position read "
                            "that patching the residual stream after that layer (row) at that position (column) "
                            "restores: 0 none, 1 all; the colours clip at 0 and 1. Hover a cell for its number.")
        self.map.plot.setLabel("bottom", "position (corrupted token)")
        self.map.plot.setLabel("left", "residual stream after layer")
        if self.map.colorbar is not None:  # the title says what the colours are: the room goes to the map
            self.map.colorbar.getAxis("left").showLabel(False)
        self.heads = QTableWidget(0, 0, objectName="patchingHeads")
        self.heads.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.heads.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.heads.setToolTip("Each head's output Y^h patched at every position: the fraction restored (rows: "
                              "the layers of each kind of attention).")
        self.hover = QLabel(" ", objectName="patchingHover")
        self.hover.setTextFormat(Qt.TextFormat.RichText)
        self.results = QSplitter(Qt.Orientation.Horizontal)
        self.results.addWidget(self.map)
        heads = QWidget()
        hl = QVBoxLayout(heads)
        hl.setContentsMargins(0, 0, 0, 0)
        hl.addWidget(QLabel("each head patched"))
        hl.addWidget(self.heads, 1)
        self.results.addWidget(heads)
        self.results.setStretchFactor(0, 3)
        self.results.setStretchFactor(1, 1)
        self.results.setChildrenCollapsible(False)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.focusLabel = FocusLabel(self.workspace.focus, "patchingFocusLabel")
        lay.addWidget(self.focusLabel)
        lay.addLayout(form)
        lay.addWidget(self.message)
        lay.addWidget(self.results, 1)
        lay.addWidget(self.hover)
        for edit in (self.cleanEdit, self.corruptEdit, self.targetEdit, self.positionEdit, self.prefixEdit):
            edit.textChanged.connect(self.check)
            edit.returnPressed.connect(self.start)
        self.streamCombo.currentIndexChanged.connect(self._show_map)
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
        """The model patched: an encoder-decoder shows the prefix field and the stream switch. Another model's
        result, shown or on its way, goes (its numbers are not this model's)."""
        if loaded is not self.loaded:
            self._forget()
        self.loaded = loaded
        edt = loaded is not None and loaded.model.config.arch == "edt"
        for w in (self.prefixLabel, self.prefixEdit, self.streamCombo):
            w.setVisible(edt)
        self.check()

    def _forget(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self.result = None
        self.map.clear_matrix()
        self.heads.setRowCount(0)
        self.heads.setColumnCount(0)
        self._on_hover(-1, -1)

    def position(self) -> int | None:
        """The position field: None empty (the default); ValueError for what is not a whole number."""
        text = self.positionEdit.text().strip()
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"The position {text!r} is not a whole number (0 the first, -1 the last).") from None

    # ---- input -------------------------------------------------------------------------------------------
    def problem(self) -> str | None:
        """What keeps the fields from being patched, in words (None: they can be)."""
        loaded = self.loaded
        if loaded is None:
            return "Load a model first (open a trained run, or take a snapshot while training)."
        clean, corrupt = self.cleanEdit.text(), self.corruptEdit.text()
        if not clean or not corrupt:
            return HINT
        try:
            n, T = prompt_lengths(loaded, clean, corrupt, self.prefixEdit.text())
            position = self.position()
        except ValueError as e:
            return str(e)
        if n[0] != n[1]:
            return f"The clean prompt is {n[0]} tokens and the corrupted one {n[1]}: they must be the same length."
        if position is not None and not -T <= position < T:
            where = "[bos] + prefix" if loaded.model.config.arch == "edt" else "the prompt"
            return f"The position {position} is not one of the {T} positions of {where} (0 to {T - 1}, or -1 to {-T})."
        return None

    def check(self) -> bool:
        """Say under the fields what is wrong with them (nothing: how long they are); Run only when they can be
        patched."""
        problem = self.problem()
        self.runButton.setEnabled(problem is None and not self.running)
        if problem is not None:
            show_message(self.message, html.escape(problem), error=problem != HINT)
        elif self.result is None:
            show_message(self.message, "Run patches each layer's residual stream at each position, and each head, "
                                       "from the clean run into the corrupted one.")
        return problem is None

    # ---- running -----------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._call is not None and self._call.running

    def start(self) -> None:
        if self.running or not self.check():
            return
        assert self.loaded is not None  # `check` says so
        target = self.targetEdit.text() or None
        prefix = self.prefixEdit.text() if self.loaded.model.config.arch == "edt" else None
        self.runButton.setEnabled(False)
        show_message(self.message, "Patching…")
        self._call = self.workspace.jobs.submit(
            "patching", run_patch, self.loaded, self.cleanEdit.text(), self.corruptEdit.text(), target, self.position(),
            prefix, on_result=self._on_result, on_error=self._on_error)

    def _on_error(self, message: str) -> None:
        self._call = None
        self.check()
        show_message(self.message, html.escape(message), error=True)

    def _on_result(self, r: PatchResult) -> None:
        self._call, self.result = None, r
        self.check()
        self._show_map()
        layers = list(r.heads)
        H = max((len(v) for v in r.heads.values()), default=0)
        t = self.heads
        t.clear()
        t.setRowCount(len(layers))
        t.setColumnCount(H)
        t.setHorizontalHeaderLabels([f"h{h + 1}" for h in range(H)])
        t.setVerticalHeaderLabels([n.label for n in layers])  # "layer 1", "decoder layer 1", …
        for i, n in enumerate(layers):
            for h, v in enumerate(r.heads[n]):
                item = QTableWidgetItem(f"{v:.2f}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setBackground(signed_tint(v, 1.0))
                item.setToolTip(f"{ComponentName(n, h)}: restores {v:.4f}")
                t.setItem(i, h, item)
        t.resizeColumnsToContents()
        want = (t.verticalHeader().sizeHint().width() + sum(t.columnWidth(c) for c in range(H)) + 2 * t.frameWidth()
                + t.verticalScrollBar().sizeHint().width() + 4)  # room for a scroll bar: a short pane needs one
        total = sum(self.results.sizes())
        if total > 2 * want:  # the whole table in view, the rest to the map
            self.results.setSizes([total - want, want])
        best = max(((n, h) for n in layers for h in range(len(r.heads[n]))), key=lambda nh: r.heads[nh[0]][nh[1]],
                   default=None)
        most = "" if best is None else (f" Of the heads, {best[0].head_label(best[1])} restores the most "
                                        f"({r.heads[best[0]][best[1]]:.0%}).")
        read = r.prefix_tokens if r.prefix_tokens is not None else r.clean_tokens
        show_message(self.message, html.escape(
            f"logit({display_token(r.target)}) − logit({display_token(r.foil)}) at position {r.position} "
            f"({display_token(read[r.position])}{' of the decoder' if r.prefix_tokens is not None else ''}): "
            f"{r.clean_logit_diff:.3f} clean, {r.corrupted_logit_diff:.3f} corrupted.{most}"))

    def shown_stream(self) -> tuple[list[list[float]], list[str]]:
        """The residual map shown and its positions' tokens: the prompts' (an encoder-decoder's encoder's over the
        corrupted source) or, with the stream switch on "decoder", an encoder-decoder's decoder's over its prefix."""
        r = self.result
        assert r is not None
        if r.decoder_residual is not None and self.streamCombo.currentData() == "dec":
            return r.decoder_residual, r.prefix_tokens or []
        return r.residual, r.corrupt_tokens

    def _show_map(self, *_args) -> None:
        if self.result is None:
            return
        r, (matrix, tokens) = self.result, self.shown_stream()
        rows = ["embedding", *(str(l) for l in range(1, len(matrix)))]
        self.map.set_matrix(np.asarray(matrix, dtype=np.float64), rows, tokens,
                            title=html.escape(f"fraction of logit({display_token(r.target)}) − "
                                              f"logit({display_token(r.foil)}) restored"))
        self._on_hover(-1, -1)

    def _on_hover(self, q: int, k: int) -> None:
        if self.result is None or q < 0:
            self.hover.setText(" ")
            return
        matrix, tokens = self.shown_stream()
        where = "the embedding" if q == 0 else f"layer {q}"
        self.hover.setText(f"residual after {where} at position {k} "
                           f"<code>{html.escape(display_token(tokens[k]))}</code>: restores "
                           f"<b>{matrix[q][k]:.4f}</b>")

    # ---- export ------------------------------------------------------------------------------------------
    def export_csv(self, path) -> Path:
        """`PatchResult.csv`: each residual patch (layer, position) and each head with the fraction restored."""
        if self.result is None:
            raise ValueError("nothing has been patched yet; press Run.")
        from ....core.files import atomic_write

        atomic_write(Path(path), self.result.csv())
        return Path(path)

    def export_png(self, path) -> Path:
        """The map and the heads' table as they are shown."""
        if self.result is None:
            raise ValueError("nothing has been patched yet; press Run.")
        return write_picture(self.results.grab(), path)

    def _export(self, filt: str, suffix: str, fn) -> None:
        if self.result is None:
            show_message(self.message, "Nothing to export yet; press Run.", error=True)
            return
        save_with_dialog(self, "patching", filt, suffix, fn, self.message)
