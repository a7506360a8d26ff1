"""A long text coloured token by token, drawn lazily: only the lines in view are painted, each once into a cached
picture, so a validation split of ~100k tokens scrolls without stalls (`tokenLossText` of the Token loss tab).

The text is given as tokens, a background colour per token and the first token of each line (`token_classes.
text_lines`); it is drawn in a fixed-width font, a token's newline, tab and control characters made visible.
Hovering a token shows its tooltip (a callback, built only for the token under the mouse); clicking it emits
``tokenClicked(index)``; `scroll_to` brings one token to the middle and outlines it.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
from PySide6.QtCore import QPoint, QPointF, QRect, Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase, QFontMetricsF, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QAbstractScrollArea, QToolTip

CACHED_LINES = 600  # pictures of lines kept: several screens' worth


class LossText(QAbstractScrollArea):
    """``set_text(tokens, colors, line_starts, tooltip)``; ``tokenClicked(int)``; `scroll_to(index)`."""

    tokenClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.viewport().setMouseTracking(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self._tokens: list[str] = []
        self._colors = np.zeros((0, 3), np.uint8)
        self._starts = np.zeros(1, np.int64)  # first token of each line, then N
        self._cols = np.zeros(0, np.int64)  # each token's first column within its line
        self._lengths = np.zeros(0, np.int64)  # each token's characters
        self._tooltip: Callable[[int], str] | None = None
        self._cache: OrderedDict[int, QPixmap] = OrderedDict()
        self._marked: int | None = None
        self._measure()
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))

    # ---- data --------------------------------------------------------------------------------------------
    def set_text(self, tokens: Sequence[str], colors: np.ndarray, line_starts: np.ndarray,
                 tooltip: Callable[[int], str] | None = None) -> None:
        """``tokens`` as drawn (one line each, no newline), ``colors`` (N, 3) uint8 RGB backgrounds,
        ``line_starts`` the first token of each line then N, ``tooltip(i)`` the hover text of token i."""
        self._tokens = [t or " " for t in tokens]  # every token at least one column wide
        self._colors = np.asarray(colors, np.uint8)
        self._starts = np.asarray(line_starts, np.int64)
        lengths = self._lengths = np.fromiter(map(len, self._tokens), np.int64, len(self._tokens))
        ends = np.cumsum(lengths)
        line_of = np.repeat(np.arange(len(self._starts) - 1), np.diff(self._starts))
        before_line = np.concatenate(([0], ends))[self._starts[:-1]]
        self._cols = ends - lengths - before_line[line_of] if len(lengths) else lengths
        self._width = int((self._cols + lengths).max()) if len(lengths) else 0
        self._tooltip, self._marked = tooltip, None
        self._cache.clear()
        self._update_scrollbars()
        self.verticalScrollBar().setValue(0)
        self.viewport().update()

    @property
    def n_lines(self) -> int:
        return len(self._starts) - 1

    def line_of(self, index: int) -> int:
        return int(np.searchsorted(self._starts, index, side="right")) - 1

    def first_visible_line(self) -> int:
        return self.verticalScrollBar().value()

    def visible_lines(self) -> int:
        return max(1, self.viewport().height() // self._lh)

    @property
    def marked(self) -> int | None:
        return self._marked

    def scroll_to(self, index: int) -> None:
        """Bring token ``index`` to the middle of the view and outline it."""
        line = self.line_of(index)
        self.verticalScrollBar().setValue(max(0, line - self.visible_lines() // 2))
        x = self._x(int(self._cols[index])) if len(self._cols) else 0
        h = self.horizontalScrollBar()
        if not h.value() <= x <= h.value() + self.viewport().width() - self._x(4):
            h.setValue(max(0, x - self.viewport().width() // 2))
        self._marked = index
        self.viewport().update()

    # ---- geometry ----------------------------------------------------------------------------------------
    def _x(self, col: int) -> int:
        """The pixel where column ``col`` begins."""
        return round(col * self._cw)

    def _measure(self) -> None:
        fm = QFontMetricsF(self.font())
        self._cw = fm.horizontalAdvance("M" * 100) / 100  # a column in pixels, fractional as the font's advance
        self._lh, self._ascent = round(fm.height()) + 3, fm.ascent() + 1
        self._width = 0

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.FontChange:
            self._measure()
            self._cache.clear()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._update_scrollbars()

    def _update_scrollbars(self) -> None:
        v, h = self.verticalScrollBar(), self.horizontalScrollBar()
        v.setRange(0, max(0, self.n_lines - self.visible_lines()))
        v.setPageStep(self.visible_lines())
        v.setSingleStep(1)
        h.setRange(0, max(0, self._x(self._width + 1) - self.viewport().width()))
        h.setPageStep(self.viewport().width())
        h.setSingleStep(self._x(4))

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        self.viewport().update()

    def token_at(self, pos: QPoint) -> int | None:
        """The token under ``pos`` (viewport coordinates), or None."""
        line = self.first_visible_line() + pos.y() // self._lh
        if not 0 <= line < self.n_lines:
            return None
        col = int((pos.x() + self.horizontalScrollBar().value()) / self._cw)
        a, b = int(self._starts[line]), int(self._starts[line + 1])
        i = a + int(np.searchsorted(self._cols[a:b], col, side="right")) - 1
        return i if a <= i < b and col < self._cols[i] + max(1, len(self._tokens[i])) else None

    # ---- painting ----------------------------------------------------------------------------------------
    def _line_picture(self, line: int) -> QPixmap:
        pix = self._cache.get(line)
        if pix is not None:
            self._cache.move_to_end(line)
            return pix
        a, b = int(self._starts[line]), int(self._starts[line + 1])
        cols = np.repeat(self._colors[a:b], self._lengths[a:b], axis=0)  # (columns, 3): each character its token's colour
        width = max(1, self._x(len(cols)))
        rgb = np.full((self._lh, width, 3), 255, np.uint8)
        column = np.minimum(len(cols) - 1, (np.arange(width) / self._cw).astype(np.int64))  # of each pixel
        rgb[1:-1] = cols[column][None]  # one pass for the whole line
        image = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888)
        pix = QPixmap.fromImage(image)  # a copy: ``rgb`` may go
        p = QPainter(pix)
        p.setFont(self.font())
        p.setPen(QColor(20, 20, 20))
        text = "".join(self._tokens[a:b])
        for col, run in _runs(text):  # a glyph outside ASCII may be wider in the fallback font: one column each
            p.drawText(QPointF(col * self._cw, self._ascent), run)
        p.end()
        self._cache[line] = pix
        if len(self._cache) > CACHED_LINES:
            self._cache.popitem(last=False)
        return pix

    def paintEvent(self, event) -> None:
        p = QPainter(self.viewport())
        p.fillRect(event.rect(), Qt.GlobalColor.white)
        first, dx = self.first_visible_line(), self.horizontalScrollBar().value()
        last = min(self.n_lines, first + self.viewport().height() // self._lh + 1)
        for k, line in enumerate(range(first, last)):
            p.drawPixmap(-dx, k * self._lh, self._line_picture(line))
        if self._marked is not None and first <= self.line_of(self._marked) < last:
            i = self._marked
            y = (self.line_of(i) - first) * self._lh
            p.setPen(QPen(QColor(20, 20, 20), 2))
            x = int(self._cols[i])
            p.drawRect(QRect(self._x(x) - dx - 1, y, self._x(x + len(self._tokens[i])) - self._x(x) + 2,
                             self._lh - 1))
        p.end()

    # ---- mouse -------------------------------------------------------------------------------------------
    def mouseMoveEvent(self, event) -> None:
        i = self.token_at(event.position().toPoint())
        if i is not None and self._tooltip is not None:
            QToolTip.showText(event.globalPosition().toPoint(), self._tooltip(i), self.viewport())
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)

    def mousePressEvent(self, event) -> None:
        i = self.token_at(event.position().toPoint())
        if i is not None and event.button() == Qt.MouseButton.LeftButton:
            self._marked = i
            self.viewport().update()
            self.tokenClicked.emit(i)
        super().mousePressEvent(event)


def _runs(text: str) -> list[tuple[int, str]]:
    """(first column, text) of ``text``'s runs of ASCII characters and of each other character alone."""
    out: list[tuple[int, str]] = []
    start = 0
    for col, ch in enumerate(text):
        if not ch.isascii():
            if start < col:
                out.append((start, text[start:col]))
            out.append((col, ch))
            start = col + 1
    if start < len(text):
        out.append((start, text[start:]))
    return out


__all__ = ["LossText", "CACHED_LINES"]
