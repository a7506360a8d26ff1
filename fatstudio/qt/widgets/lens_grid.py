"""The logit lens as a grid (``lensGrid``): one row per layer (the embedding, after layer 1 … L, the model's
output last; their names in `RowLabels`, which stays put while the grid scrolls), one column per position, each
cell the top token read there on the fixed 0-1 colour scale of its probability (the attention maps' viridis),
in bold where it is the text's own token; the text's tokens above; a tooltip with the probability; a click
chooses a column (``columnClicked``)."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from ...core.inference.attention_maps import colormap
from ...core.inference.prompting import display_token
from ...core.inspect.saved_lens import SavedLens


class LensGrid(QWidget):
    """Draws a `SavedLens` (`set_lens`); ``columnClicked(t)`` when the user clicks position t."""

    columnClicked = Signal(int)
    LABEL_W, MIN_CELL = 2, 22  # LABEL_W: the margin left of the cells

    @property
    def row_height(self) -> int:
        """A row (and the text's row above the grid): a line of its font, bold included, and a little air."""
        return int(QFontMetricsF(self.font()).height()) + 5

    header_height = row_height

    def __init__(self, parent=None):
        super().__init__(parent, objectName="lensGrid")
        self.lens: SavedLens | None = None
        self.selected: int | None = None
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_lens(self, lens: SavedLens | None, selected: int | None = None) -> None:
        self.lens, self.selected = lens, selected
        T = len(lens.tokens) if lens is not None else 0
        self.setMinimumWidth(self.LABEL_W + T * self.MIN_CELL)
        self.setFixedHeight(self.sizeHint().height())
        self.update()

    def changeEvent(self, e) -> None:
        super().changeEvent(e)
        if e.type() == QEvent.Type.FontChange:
            self.set_lens(self.lens, self.selected)  # its rows' height

    def sizeHint(self) -> QSize:
        rows = self.lens.n_rows if self.lens is not None else 0
        T = len(self.lens.tokens) if self.lens is not None else 0
        return QSize(self.LABEL_W + T * self.MIN_CELL, self.header_height + rows * self.row_height + 4)

    # ---- geometry ----
    def cell_width(self) -> float:
        T = len(self.lens.tokens) if self.lens is not None else 1
        return max(float(self.MIN_CELL), (self.width() - self.LABEL_W) / max(1, T))

    def cell_rect(self, row: int, t: int) -> QRectF:
        w = self.cell_width()
        return QRectF(self.LABEL_W + t * w, self.header_height + row * self.row_height, w, self.row_height)

    def cell_at(self, x: float, y: float) -> tuple[int | None, int] | None:
        """(row, or None on the header; column) under (x, y), or None outside the cells."""
        if self.lens is None or x < self.LABEL_W:
            return None
        t = int((x - self.LABEL_W) // self.cell_width())
        if not 0 <= t < len(self.lens.tokens):
            return None
        if y < self.header_height:
            return None, t
        row = int((y - self.header_height) // self.row_height)
        return (row, t) if 0 <= row < self.lens.n_rows else None

    def is_right(self, row: int, t: int) -> bool:
        """Whether the top token of (row, t) is the text's own (next, or for bert the same) token."""
        lens = self.lens
        assert lens is not None
        j = t + 1 if lens.predicts_next else t
        return j < len(lens.tokens) and lens.top_tokens[row][t] == lens.tokens[j]

    def tooltip(self, row: int | None, t: int) -> str:
        lens = self.lens
        assert lens is not None
        where = f"position {t + 1} ({display_token(lens.tokens[t])})"
        if row is None:
            return f"{where}: click to split its target's logit into parts below"
        j = t + 1 if lens.predicts_next else t
        actual = f"; the text has {display_token(lens.tokens[j])}" if j < len(lens.tokens) else ""
        what = "the next token" if lens.predicts_next else "the token here"
        return (f"{lens.row_label(row)}, {where}: top guess for {what} {display_token(lens.top_tokens[row][t])} "
                f"with p = {float(lens.top_probs[row, t]):.3f}{actual}")

    # ---- events ----
    def event(self, e) -> bool:
        if e.type() == QEvent.Type.ToolTip:
            pos = e.pos()
            cell = self.cell_at(pos.x(), pos.y())
            if cell is not None:
                QToolTip.showText(e.globalPos(), self.tooltip(*cell), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(e)

    def mousePressEvent(self, e) -> None:
        cell = self.cell_at(e.position().x(), e.position().y())
        if cell is not None and e.button() == Qt.MouseButton.LeftButton:
            self.columnClicked.emit(cell[1])

    def paintEvent(self, e) -> None:
        lens = self.lens
        if lens is None:
            return
        p = QPainter(self)
        base = QFont(self.font())
        bold = QFont(base)
        bold.setBold(True)
        w = self.cell_width()
        chars = max(1, int((w - 4) // max(1.0, QFontMetricsF(base).horizontalAdvance("M"))))
        T = len(lens.tokens)
        shown = e.rect()  # only the columns exposed (the scroll area shows a part of a long text)
        first = max(0, int((shown.left() - self.LABEL_W) // w))
        last = min(T, int((shown.right() - self.LABEL_W) // w) + 1)
        rgb = colormap(np.asarray(lens.top_probs[:, first:last]))
        dark, light = QColor("black"), QColor("white")
        p.setPen(self.palette().color(self.foregroundRole()))
        for t in range(first, last):  # the text's tokens above the columns
            p.drawText(QRectF(self.LABEL_W + t * w, 0, w, self.header_height), Qt.AlignmentFlag.AlignCenter,
                       display_token(lens.tokens[t], chars))
        for row in range(lens.n_rows):
            y, texts, probs = self.header_height + row * self.row_height, lens.top_tokens[row], lens.top_probs[row]
            for t in range(first, last):
                r = QRectF(self.LABEL_W + t * w, y, w, self.row_height)
                c = rgb[row, t - first]
                p.fillRect(r, QColor(int(c[0]), int(c[1]), int(c[2])))
                p.setPen(dark if probs[t] > 0.55 else light)
                p.setFont(bold if self.is_right(row, t) else base)
                p.drawText(r, Qt.AlignmentFlag.AlignCenter, display_token(texts[t], chars))
        y_out = self.header_height + (lens.n_rows - 1) * self.row_height  # the output row, set apart
        p.setPen(QPen(light, 2))
        p.drawLine(self.LABEL_W, y_out, int(self.LABEL_W + w * T), y_out)
        if self.selected is not None and 0 <= self.selected < T:
            p.setPen(QPen(QColor("#e74c3c"), 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(self.LABEL_W + self.selected * w + 1, 1, w - 2,
                              self.header_height + lens.n_rows * self.row_height - 1))
        p.end()


class RowLabels(QWidget):
    """The names of a `LensGrid`'s rows, level with them ("embedding", "after layer ℓ", "output")."""

    def __init__(self, grid: LensGrid, parent=None):
        super().__init__(parent, objectName="lensRowLabels")
        self.grid = grid
        self.setFixedWidth(int(QFontMetricsF(self.font()).horizontalAdvance("after layer 88")) + 10)

    def paintEvent(self, _e) -> None:
        lens, g = self.grid.lens, self.grid
        if lens is None:
            return
        p = QPainter(self)
        p.setPen(self.palette().color(self.foregroundRole()))
        p.drawText(QRectF(0, 0, self.width() - 6, g.header_height), Qt.AlignmentFlag.AlignRight
                   | Qt.AlignmentFlag.AlignVCenter, "text")
        for row in range(lens.n_rows):
            p.drawText(QRectF(0, g.header_height + row * g.row_height, self.width() - 6, g.row_height),
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, lens.row_label(row))
        p.end()
