"""The walkthrough (`core.paper.walkthrough`) in the Paper tab: one forward pass of the model in use, line by
line of the pseudocode, or back through the backward pass with gradient checks.

``walkthroughView`` holds ``walkthroughFocusLabel`` (which run and step), ``walkthroughRunButton`` (walk the
Prompt tab's text, in a worker: the Paper panel's job), ``walkthroughQueryCombo`` (the query token),
``walkthroughHeadCombo`` (the head whose Q, K, V, S are shown), ``walkthroughDirectionCombo`` (forward or
backward), ``walkthroughPrevButton`` / ``walkthroughNextButton`` and the step: its title, what happens, each
tensor as a heatmap with its shape in the paper's notation (the query's column framed, its values listed), and in
the backward pass the gradient check. ``stepShown(line, layer)`` asks the panel to highlight the step's line.
"""
from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.app.focus import Focus
from fatstudio.qt.widgets.focus_label import FocusLabel

if TYPE_CHECKING:  # the walkthrough module brings torch, which the window does not import at start
    from fatstudio.core.paper.walkthrough import Shown, Step, Walk

PANES = 3  # the most tensors a step shows
_MAP = pg.colormap.get("CET-D1")  # blue - white - red, 0 white
_QUERY_PEN = pg.mkPen((20, 20, 20), width=2)
_LISTED = 8  # values of the query's column written out, the largest first
MAX_CELL = 28  # px: a square cell's side at most
MAX_HEIGHT = 480  # px: the heatmap's height at most
MAX_TICKS = 24  # position labels on an axis at most


class TensorPane(QWidget):
    """One tensor: its name and shape, a heatmap (rows × the paper's columns), the query's column framed and
    written out."""

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 4)
        self.caption = QLabel()
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setWordWrap(True)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMinimumHeight(120)
        self.plot.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        item = self.plot.getPlotItem()
        item.setMouseEnabled(False, False)
        item.hideButtons()
        item.invertY(True)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(_MAP)
        item.addItem(self.image)
        self.frame = [pg.InfiniteLine(angle=90, pen=_QUERY_PEN) for _ in range(2)]
        for line in self.frame:
            item.addItem(line)
        self.values = QLabel()
        self.values.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.values.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.values.setWordWrap(True)
        self.row_labels: list[tuple[float, str]] = []
        self._col_labels: list[tuple[float, str]] = []
        self._shape = (0, 0)
        lay.addWidget(self.caption)
        lay.addWidget(self.plot)
        lay.addWidget(self.values)

    def show_tensor(self, s: Shown, tokens: list[str] | None = None) -> None:
        """Show ``s``; ``tokens``: the input's, which label an axis of positions ℓ or ℓ_x (`position_labels`)."""
        a = np.where(np.isfinite(s.values), s.values, 0.0)
        top = float(np.abs(a).max()) or 1.0
        self.caption.setText(f"<b>{html.escape(s.name)}</b> ∈ {html.escape(s.shape)}"
                             + (f" <span style='color:#555'>({html.escape(s.note)})</span>" if s.note else ""))
        self.image.setImage(a, levels=(-top, top), autoLevels=False)
        rows, cols = a.shape
        self.image.setRect(0.5, 0.5, cols, rows)  # entry [i, j] centred on (j + 1, i + 1): the paper counts from 1
        row_sym, col_sym = s.symbols.split("×") if "×" in s.symbols else (s.symbols, "")
        self.row_labels = position_labels(row_sym, rows, tokens)
        col_labels = position_labels(col_sym, cols, tokens)
        item = self.plot.getPlotItem()
        item.showAxis("left", rows > 1)  # a row vector's one row needs no scale
        self._col_labels = [(t, label.split(" ", 1)[1]) for t, label in col_labels]  # the token alone: narrow
        item.getAxis("left").setTicks(_ticks(self.row_labels, 1))
        item.setLabel("left", "row t_z (key)" if self.row_labels else "")
        item.setLabel("bottom", "column t (position, token)" if col_labels else "column")
        item.getViewBox().setRange(xRange=(0.5, cols + 0.5), yRange=(0.5, rows + 0.5), padding=0.02)
        self._shape = (rows, cols)
        self._fit()
        q = s.query
        for k, line in enumerate(self.frame):
            line.setVisible(q is not None)
            if q is not None:
                line.setValue(q + 0.5 + k)
        across = q is None and cols > 1  # a row vector: its entries are columns
        col = a[0] if across else a[:, 0 if q is None else q]
        what = "row" if across else "values" if q is None else \
            f"column t = {q + 1}" + (f" {col_labels[q][1].split(' ', 1)[1]}" if col_labels else "")
        where = [label for _, label in (col_labels if across else self.row_labels)]
        axis = "t" if across else "t_z"
        largest = np.argsort(-np.abs(col), kind="stable")[:_LISTED]
        shown = "  ".join(f"{col[i]:+.3g} ({axis} {where[i]})" if where else f"{col[i]:+.3g} ([{i + 1}])"
                          for i in largest)
        more = f"  … {len(col) - _LISTED} smaller" if len(col) > _LISTED else ""
        order = ", largest first" if len(col) > 1 else ""
        self.values.setText(f"{what}{order}: {shown}{more}   (max |·| = {top:.3g})")

    def _fit(self) -> None:
        """Square cells where the matrix is small enough for them (a softmax(S) of ℓ × ℓ), else the old strip."""
        rows, cols = self._shape
        vb = self.plot.getPlotItem().getViewBox()
        room = max(self.plot.width() - (self.plot.height() - vb.height()) - 60, 100)  # less the left axis, roughly
        cell = min(room / cols, MAX_CELL)
        square = rows > 1 and cols > 1 and rows * cell <= MAX_HEIGHT
        vb.setAspectLocked(square)
        chrome = self.plot.height() - vb.height() if vb.height() > 0 else 50
        height = rows * cell + chrome if square else 70 + 6 * rows
        self.plot.setFixedHeight(int(min(max(height, 90), MAX_HEIGHT + chrome)))
        wide = max((self.fontMetrics().horizontalAdvance(label) for _, label in self._col_labels), default=0) + 8
        column = cell if square else room / cols  # px
        self.plot.getPlotItem().getAxis("bottom").setTicks(_ticks(self._col_labels, math.ceil(wide / column)))

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if self._shape != (0, 0):
            self._fit()


def position_labels(symbol: str, n: int, tokens: list[str] | None) -> list[tuple[float, str]]:
    """(position t, "t 'token'") for each of ``n`` positions where ``symbol`` is the input's positions ℓ or ℓ_x
    (within ``tokens``), else none (a feature axis, or the source's ℓ_z, whose tokens are not at hand)."""
    if symbol not in ("ℓ", "ℓ_x") or tokens is None or n > len(tokens):
        return []
    return [(t + 1, f"{t + 1} {tokens[t]!r}") for t in range(n)]


def _ticks(labels: list[tuple[float, str]], every: int) -> list | None:
    """An axis's ticks: every ``every``-th position's label (at most `MAX_TICKS`), or pyqtgraph's own (none)."""
    if not labels:
        return None
    every = max(every, math.ceil(len(labels) / MAX_TICKS))
    return [[labels[i] for i in range(0, len(labels), every)], []]


class WalkthroughView(QWidget):
    """Next / Previous through a `Walk`, forward or backward; asks for a walk with ``walkRequested``."""

    walkRequested = Signal()  # walk the model in use again (a new query token or head, or the first time)
    stepShown = Signal(int, int)  # (line index, layer; -1 outside ``for l``) of the step shown

    def __init__(self, focus: Focus, parent=None):
        super().__init__(parent)
        self.setObjectName("walkthroughView")
        self.walk: Walk | None = None
        self.index = 0
        outer = QVBoxLayout(self)
        self.focusLabel = FocusLabel(focus, "walkthroughFocusLabel")
        outer.addWidget(self.focusLabel)
        bar = QHBoxLayout()
        self.runButton = QPushButton("Walk through", objectName="walkthroughRunButton")
        self.runButton.setToolTip("Run the model in use once on the Prompt tab's text and walk through every line "
                                  "of its pseudocode with the tensors it computes, forward and backward.")
        self.queryCombo = QComboBox(objectName="walkthroughQueryCombo")
        self.queryCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.queryCombo.setToolTip("The query token: its column is framed, and the attention steps are read from it.")
        self.headCombo = QComboBox(objectName="walkthroughHeadCombo")
        self.headCombo.setToolTip("The head whose Q, K, V, scores and weights the MHAttention steps show.")
        self.directionCombo = QComboBox(objectName="walkthroughDirectionCombo")
        self.directionCombo.addItems(["Forward", "Backward"])
        self.directionCombo.setToolTip("Forward: from the token ids to P. Backward: from the loss back to the "
                                       "embeddings, each gradient checked against a finite difference.")
        for w in (self.runButton, QLabel("query"), self.queryCombo, QLabel("head"), self.headCombo,
                  self.directionCombo):
            bar.addWidget(w)
        bar.addStretch(1)
        outer.addLayout(bar)
        self.inputLabel = QLabel(objectName="walkthroughInputLabel")
        self.inputLabel.setWordWrap(True)
        self.inputLabel.setStyleSheet("color: #555;")
        outer.addWidget(self.inputLabel)
        nav = QHBoxLayout()
        self.prevButton = QPushButton("◀ Previous", objectName="walkthroughPrevButton")
        self.nextButton = QPushButton("Next ▶", objectName="walkthroughNextButton")
        self.stepLabel = QLabel(objectName="walkthroughStepLabel")
        nav.addWidget(self.prevButton)
        nav.addWidget(self.stepLabel, 1, Qt.AlignmentFlag.AlignCenter)
        nav.addWidget(self.nextButton)
        outer.addLayout(nav)
        self.title = QLabel("Press <b>Walk through</b> to follow one forward pass of the model in use, line by line.",
                            objectName="walkthroughTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.words = QLabel(objectName="walkthroughWords")
        self.words.setWordWrap(True)
        self.checkLabel = QLabel(objectName="walkthroughCheckLabel")
        self.checkLabel.setTextFormat(Qt.TextFormat.RichText)
        self.checkLabel.setWordWrap(True)
        self.checkLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.title)
        outer.addWidget(self.words)
        outer.addWidget(self.checkLabel)
        body = QWidget()
        self.tensors = QVBoxLayout(body)
        self.tensors.setContentsMargins(0, 0, 0, 0)
        self.tokens: list[str] | None = None  # the input's, which label the axes of positions
        self.panes = [TensorPane() for _ in range(PANES)]
        for pane in self.panes:
            self.tensors.addWidget(pane)
            pane.setVisible(False)
        self.tensors.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        outer.addWidget(scroll, 1)
        self.runButton.clicked.connect(self.walkRequested)
        self.queryCombo.activated.connect(lambda _i: self.walkRequested.emit())
        self.headCombo.activated.connect(lambda _i: self.walkRequested.emit())
        self.directionCombo.currentIndexChanged.connect(lambda _i: self.go(0))
        self.prevButton.clicked.connect(lambda: self.go(self.index - 1))
        self.nextButton.clicked.connect(lambda: self.go(self.index + 1))
        self._enable()

    # ---- what is asked --------------------------------------------------------------------------------------
    def query(self) -> int | None:
        """The chosen query position (0-based; None: the default, the last)."""
        data = self.queryCombo.currentData()
        return int(data) if data is not None else None

    def head(self) -> int:
        return max(0, self.headCombo.currentIndex())

    def steps(self) -> list[Step]:
        if self.walk is None:
            return []
        return self.walk.backward if self.directionCombo.currentIndex() == 1 else self.walk.forward

    # ---- a walk arrives -----------------------------------------------------------------------------------------
    def set_walk(self, walk: Walk | None, tokens: list[str] | None = None, what: str = "") -> None:
        """Show ``walk`` (None: none, e.g. for another model) at the same step as before; ``tokens`` the input
        in words, one per position."""
        self.walk = walk
        self.runButton.setText("Walk again" if walk is not None else "Walk through")
        if walk is None:
            self.queryCombo.clear()
            self.headCombo.clear()
            self.title.setText("Press <b>Walk through</b> to follow one forward pass of the model in use, line by "
                               "line.")
            for label in (self.words, self.checkLabel, self.inputLabel, self.stepLabel):
                label.setText("")
            for pane in self.panes:
                pane.setVisible(False)
            self.index = 0
            self._enable()
            return
        self.queryCombo.clear()
        self.tokens = tokens or [str(v) for v in walk.x]
        for t, word in enumerate(self.tokens):
            self.queryCombo.addItem(f"t = {t + 1}: {word!r}", t)
        self.queryCombo.setCurrentIndex(walk.query)
        self.headCombo.clear()
        self.headCombo.addItems([str(h + 1) for h in range(walk.code.config.H)])
        self.headCombo.setCurrentIndex(walk.head)
        self.inputLabel.setText(f"Input: {what} · loss {walk.loss_text()}" if what else "")
        self.go(min(self.index, len(self.steps()) - 1))  # the same step, for another query token or head

    def show_error(self, message: str) -> None:
        self.title.setText(f"<span style='color:#c0392b'>Could not walk: {html.escape(message)}</span>")

    def set_busy(self, busy: bool) -> None:
        self.runButton.setEnabled(not busy)
        if busy:
            self.title.setText("Walking through the forward and backward pass…")

    # ---- steps ------------------------------------------------------------------------------------------------
    def go(self, index: int) -> None:
        """Show step ``index`` of the chosen direction (clamped)."""
        steps = self.steps()
        if not steps:
            return
        self.index = min(max(0, index), len(steps) - 1)
        step = steps[self.index]
        direction = "backward" if self.directionCombo.currentIndex() == 1 else "forward"
        self.stepLabel.setText(f"{direction} step {self.index + 1} of {len(steps)}")
        self.title.setText(f"<b>{html.escape(step.title)}</b><br><code>{html.escape(step.text)}</code>")
        self.words.setText(step.words)
        self.checkLabel.setText(self._check_html(step))
        for pane, shown in zip(self.panes, [*step.shown, *[None] * PANES]):
            if shown is not None:
                pane.show_tensor(shown, self.tokens)
            pane.setVisible(shown is not None)
        self._enable()
        self.stepShown.emit(step.line, -1 if step.layer is None else step.layer)

    @staticmethod
    def _check_html(step: Step) -> str:
        c = step.check
        if c is None:
            return ""
        ok = c.worst <= 1e-6
        rows = "; ".join(f"[{', '.join(str(i + 1) for i in at)}] {a:.6g} vs {n:.6g}: {err:.1e}"
                         for at, a, n, err in c.entries)
        small = any(abs(a) < c.resolution for _at, a, _n, _e in c.entries)
        note = (f" Gradients below {c.resolution:.1e} are under what a float64 difference resolves to 1e-6."
                if small and not ok else "")
        return (f"<span style='color:{'#1e7b34' if ok else '#9a6700'}'>{'✓' if ok else '≈'} gradient check "
                f"of {html.escape(c.tensor)}</span> (central difference, h = {c.step:g}, float64; analytic vs numeric: "
                f"relative error): {html.escape(rows)}.{html.escape(note)}")

    def _enable(self) -> None:
        n = len(self.steps())
        self.prevButton.setEnabled(n > 0 and self.index > 0)
        self.nextButton.setEnabled(n > 0 and self.index < n - 1)
        for w in (self.queryCombo, self.headCombo, self.directionCombo):
            w.setEnabled(self.walk is not None)
