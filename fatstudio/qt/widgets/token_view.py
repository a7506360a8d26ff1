"""A read-only text of tokens: each token a span with its own background colour and tooltip, appended one
at a time while a model streams, recoloured at once (e.g. by an attention row), clickable. And `LossStrip`:
one bar per token, its loss.

Whitespace tokens stay readable: a newline token shows as a small ↵ before the line break (so it has
something to colour); ``text()`` is always the real text, without those marks.
"""
from __future__ import annotations

import bisect
import html
import math
from collections.abc import Sequence

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QSizePolicy, QTextEdit, QToolTip, QWidget

# Probability colours (light tints so black text stays readable): low p warm orange, middle pale yellow,
# high p light blue. Orange/blue stays distinguishable with the common colour-vision deficiencies.
_P_ANCHORS = ((0.0, (244, 165, 130)), (0.5, (255, 244, 190)), (1.0, (160, 206, 232)))


def probability_color(p: float) -> QColor:
    """Background colour of a token whose probability is ``p`` (fixed 0-1 scale)."""
    p = min(max(float(p), 0.0), 1.0)
    for (p0, c0), (p1, c1) in zip(_P_ANCHORS, _P_ANCHORS[1:]):
        if p <= p1:
            f = (p - p0) / (p1 - p0)
            return QColor(*(round(a + (b - a) * f) for a, b in zip(c0, c1)))
    return QColor(*_P_ANCHORS[-1][1])


def probability_colors(p) -> np.ndarray:
    """(N, 3) uint8: `probability_color` of every probability in ``p`` at once."""
    p = np.clip(np.asarray(p, np.float64), 0.0, 1.0)
    xs = [a for a, _ in _P_ANCHORS]
    return np.stack([np.interp(p, xs, [c[k] for _, c in _P_ANCHORS]) for k in range(3)], -1).round().astype(np.uint8)


def delta_colors(delta, scale: float = 1.0) -> np.ndarray:
    """(N, 3) uint8 backgrounds of changes in loss: white at 0, the likely blue where the loss fell by ``scale``
    nats or more, the unlikely orange where it rose by as much (the colours of `probability_color`'s ends)."""
    d = np.clip(np.asarray(delta, np.float64) / scale, -1.0, 1.0)[:, None]
    worse, better = np.array(_P_ANCHORS[0][1], np.float64), np.array(_P_ANCHORS[-1][1], np.float64)
    end = np.where(d > 0, worse, better)
    return (255 + (end - 255) * np.abs(d)).round().astype(np.uint8)


def probability_gradient_css() -> str:
    """A Qt style-sheet gradient of `probability_color` from 0 (left) to 1 (right), for a legend."""
    stops = ", ".join(f"stop:{p} rgb{c}" for p, c in _P_ANCHORS)
    return f"qlineargradient(x1:0, y1:0, x2:1, y2:0, {stops})"


def weight_tint(w: float, base: QColor | None = None) -> QColor:
    """A background for an attention weight in [0, 1]: transparent at 0, ``base`` (orange) at 1."""
    c = QColor(base) if base is not None else QColor(255, 140, 0)
    c.setAlphaF(min(max(float(w), 0.0), 1.0) * 0.85)
    return c


def signed_tint(v: float, scale: float) -> QColor:
    """A background for a change ``v`` (a Δ loss, a Δp, a restored fraction) against the largest |change|
    ``scale``: red for a rise, blue for a fall, transparent at 0, strongest at ±``scale``."""
    c = QColor(214, 96, 77) if v > 0 else QColor(67, 147, 195)
    c.setAlphaF(min(abs(float(v)) / scale, 1.0) * 0.75 if scale > 0 else 0.0)
    return c


def _shown(text: str) -> str:
    """What a token's text looks like in the view: a newline gets a visible ↵ mark in front of it."""
    return text.replace("\n", "↵\n")


class TokenView(QTextEdit):
    """Tokens as coloured, hoverable, clickable spans. ``tokenClicked(index)`` on a left click."""

    tokenClicked = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.setMouseTracking(True)
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.TypeWriter)
        self.setFont(font)
        self._texts: list[str] = []
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._tips: list[str | None] = []
        self._colors: list[QColor | None] = []
        self._extra: list[tuple[int, str]] = []  # plain text before token i: (i, text)
        self._marked: int | None = None

    # ---- content ---------------------------------------------------------------------------------------
    def clear_tokens(self) -> None:
        self.clear()
        self._texts, self._starts, self._ends, self._tips, self._colors = [], [], [], [], []
        self._extra = []
        self._marked = None

    def set_tokens(self, tokens: Sequence[str], colors: Sequence[QColor | None] | None = None,
                   tooltips: Sequence[str | None] | None = None) -> None:
        self.clear_tokens()
        self.append_tokens(tokens, colors, tooltips)

    def append_text(self, text: str, color: QColor | None = None) -> None:
        """Plain text that is not a token (e.g. the prompt before the generated tokens), in ``color``."""
        if not text:
            return
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        fmt = QTextCharFormat()
        if color is not None:
            fmt.setForeground(color)
        cur.insertText(_shown(text), fmt)
        self._extra.append((len(self._texts), text))

    def append_tokens(self, tokens: Sequence[str], colors: Sequence[QColor | None] | None = None,
                      tooltips: Sequence[str | None] | None = None, shown: Sequence[str] | None = None) -> None:
        """Append ``tokens`` (their real text); ``shown``: what each shows instead, where a token that shows ""
        takes no room (a byte of a character that a later token shows whole); else an empty token shows ∅."""
        if not tokens:
            return
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        cur.beginEditBlock()
        for i, tok in enumerate(tokens):
            color = colors[i] if colors is not None else None
            tip = tooltips[i] if tooltips is not None else None
            fmt = QTextCharFormat()
            if color is not None:
                fmt.setBackground(color)
            start = cur.position()
            text = shown[i] if shown is not None else tok
            cur.insertText(_shown(text) if text else "" if shown is not None else "∅", fmt)
            self._texts.append(tok)
            self._starts.append(start)
            self._ends.append(cur.position())
            self._tips.append(tip)
            self._colors.append(color)
        cur.endEditBlock()
        if at_bottom:
            bar.setValue(bar.maximum())

    def token_count(self) -> int:
        return len(self._texts)

    def tokens(self) -> list[str]:
        return list(self._texts)

    def text(self) -> str:
        """The real text: plain pieces and tokens concatenated, without the visible ↵ marks."""
        extra: dict[int, str] = {}
        for idx, t in self._extra:
            extra[idx] = extra.get(idx, "") + t
        out = []
        for i, tok in enumerate(self._texts):
            out.append(extra.get(i, ""))
            out.append(tok)
        out.append(extra.get(len(self._texts), ""))
        return "".join(out)

    def tooltip(self, index: int) -> str | None:
        return self._tips[index]

    def color(self, index: int) -> QColor | None:
        return self._colors[index]

    def set_colors(self, colors: Sequence[QColor | None], tooltips: Sequence[str | None] | None = None) -> None:
        """Recolour every token (None: no background), optionally replacing the tooltips."""
        cur = QTextCursor(self.document())
        cur.beginEditBlock()
        for i, (s, e) in enumerate(zip(self._starts, self._ends)):
            c = colors[i] if i < len(colors) else None
            fmt = QTextCharFormat()
            fmt.setBackground(c if c is not None else QColor(0, 0, 0, 0))
            cur.setPosition(s)
            cur.setPosition(e, QTextCursor.MoveMode.KeepAnchor)
            cur.mergeCharFormat(fmt)
            self._colors[i] = c
            if tooltips is not None and i < len(tooltips):
                self._tips[i] = tooltips[i]
        cur.endEditBlock()

    def set_marked(self, index: int | None) -> None:
        """Underline and embolden one token (the chosen query), None for none."""
        cur = QTextCursor(self.document())
        for i, on in ((self._marked, False), (index, True)):
            if i is None or not 0 <= i < len(self._starts):
                continue
            fmt = QTextCharFormat()
            fmt.setFontUnderline(on)
            fmt.setFontWeight(QFont.Weight.Bold if on else QFont.Weight.Normal)
            cur.setPosition(self._starts[i])
            cur.setPosition(self._ends[i], QTextCursor.MoveMode.KeepAnchor)
            cur.mergeCharFormat(fmt)
        self._marked = index if index is not None and 0 <= index < len(self._starts) else None

    # ---- hit testing -------------------------------------------------------------------------------------
    def token_at(self, viewport_pos: QPoint) -> int | None:
        """Index of the token under a point of the viewport, or None."""
        if not self._starts:
            return None
        layout = self.document().documentLayout()
        doc_pos = viewport_pos + QPoint(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
        p = layout.hitTest(doc_pos.toPointF() if hasattr(doc_pos, "toPointF") else doc_pos,
                           Qt.HitTestAccuracy.ExactHit)
        if p < 0:
            return None
        cur = QTextCursor(self.document())
        cur.setPosition(p)
        if self.cursorRect(cur).x() > viewport_pos.x():  # hitTest gives the nearer edge: the glyph is left of it
            p -= 1
        i = bisect.bisect_right(self._starts, p) - 1
        if 0 <= i < len(self._starts) and self._starts[i] <= p < self._ends[i]:
            return i
        return None

    def token_rect_center(self, index: int) -> QPoint:
        """Viewport position of the middle of a token's first character (for tests and tooling)."""
        cur = QTextCursor(self.document())
        cur.setPosition(self._starts[index])
        r1 = self.cursorRect(cur)
        cur.setPosition(self._starts[index] + 1)
        r2 = self.cursorRect(cur)
        x = (r1.x() + r2.x()) // 2 if r2.y() == r1.y() else r1.x() + 3
        return QPoint(x, r1.center().y())

    def viewportEvent(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            i = self.token_at(event.pos())
            tip = self._tips[i] if i is not None else None
            if tip:
                QToolTip.showText(event.globalPos(), tip, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            i = self.token_at(event.position().toPoint())
            if i is not None:
                self.tokenClicked.emit(i)
        super().mousePressEvent(event)


class LossStrip(QWidget):
    """One bar per token position, its loss −ln p in nats (height, on a scale from 0 to ``top``, e.g. ln N_V:
    the loss of a uniform guess) coloured by p as the tokens are; a position without a loss stays empty. A
    dashed line marks the mean loss and a dotted one ``top``. Hover a bar: the token and its loss; click one:
    ``positionClicked(index)``."""

    positionClicked = Signal(int)
    LEFT, RIGHT, TOP, BOTTOM = 36, 110, 8, 16  # margins around the bars: the axis and line labels live there

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setMinimumHeight(110)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._losses: list[float | None] = []
        self._labels: list[str] = []
        self._top = 1.0  # the scale's top: the larger of the largest loss and the top line's value
        self._top_line: float | None = None
        self._top_label = ""
        self._mean: float | None = None
        self._marked: int | None = None

    def set_losses(self, losses: Sequence[float | None], labels: Sequence[str], top: float,
                   top_label: str = "", mean: float | None = None) -> None:
        """Show ``losses`` (None: a position not scored), with ``labels`` (each token, readable) for the
        tooltips. The scale reaches ``top`` (named ``top_label``) or the largest loss, whichever is larger."""
        self._losses, self._labels = list(losses), list(labels)
        self._top_label, self._mean, self._marked = top_label, mean, None
        self._top_line = top
        self._top = max([top, *(v for v in self._losses if v is not None)], default=1.0) or 1.0
        self.update()

    def losses(self) -> list[float | None]:
        return list(self._losses)

    def set_marked(self, index: int | None) -> None:
        """Outline one bar (the token chosen in the text), None for none."""
        self._marked = index if index is not None and 0 <= index < len(self._losses) else None
        self.update()

    def marked(self) -> int | None:
        return self._marked

    def _plot(self) -> QRectF:
        return QRectF(self.LEFT, self.TOP, max(1, self.width() - self.LEFT - self.RIGHT),
                      max(1, self.height() - self.TOP - self.BOTTOM))

    def bar_rect(self, index: int) -> QRectF:
        """The full-height column of a position (its bar fills the lower part)."""
        r = self._plot()
        w = r.width() / max(1, len(self._losses))
        return QRectF(r.left() + index * w, r.top(), w, r.height())

    def index_at(self, x: float) -> int | None:
        r = self._plot()
        if not self._losses or not r.left() <= x < r.right():
            return None
        return min(len(self._losses) - 1, int((x - r.left()) / (r.width() / len(self._losses))))

    def _y(self, loss: float) -> float:
        r = self._plot()
        return r.bottom() - r.height() * min(loss, self._top) / self._top

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        r = self._plot()
        p.fillRect(r, QColor(255, 255, 255))
        p.setPen(QColor(170, 170, 170))
        p.drawRect(r)
        font = p.font()
        font.setPointSizeF(max(6.5, font.pointSizeF() * 0.8))
        p.setFont(font)
        p.setPen(QColor(80, 80, 80))
        fm = p.fontMetrics()
        p.drawText(QRectF(0, r.top() - 2, self.LEFT - 4, fm.height()), Qt.AlignmentFlag.AlignRight,
                   f"{self._top:.1f}")
        p.drawText(QRectF(0, r.bottom() - fm.height() + 2, self.LEFT - 4, fm.height()),
                   Qt.AlignmentFlag.AlignRight, "0")
        p.drawText(QRectF(r.left(), r.bottom(), r.width(), self.BOTTOM), Qt.AlignmentFlag.AlignLeft,
                   "loss −ln p (nats) per token →")
        gap = 1 if r.width() / max(1, len(self._losses)) >= 4 else 0
        for i, loss in enumerate(self._losses):
            if loss is None:
                continue
            col = self.bar_rect(i)
            color = probability_color(math.exp(-loss))
            bar = QRectF(col.left(), self._y(loss), max(1.0, col.width() - gap), r.bottom() - self._y(loss))
            p.fillRect(bar, color.darker(115))
            if i == self._marked:
                p.setPen(QPen(QColor(0, 0, 0), 2))
                p.drawRect(col.adjusted(0, 1, -gap, -1))
        for value, style, name in ((self._top_line, Qt.PenStyle.DotLine, self._top_label),
                                   (self._mean, Qt.PenStyle.DashLine, "mean")):
            if value is None or not self._losses:
                continue
            y = self._y(value)
            p.setPen(QPen(QColor(60, 60, 60), 1, style))
            p.drawLine(int(r.left()), int(y), int(r.right()), int(y))
            if name:
                p.drawText(QRectF(r.right() + 4, y - fm.height() / 2, self.RIGHT - 4, fm.height()),
                           Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"{name} {value:.2f}")
        p.end()

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            i = self.index_at(event.pos().x())
            if i is None:
                return super().event(event)  # the widget's own tooltip, if any
            loss = self._losses[i]
            label = html.escape(self._labels[i]) if i < len(self._labels) else ""
            what = ("not scored" if loss is None else
                    f"loss {loss:.3f} nats, p = {math.exp(-loss):.4f}")
            QToolTip.showText(event.globalPos(), f"token {i + 1} <code>{label}</code>: {what}", self)
            return True
        return super().event(event)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            i = self.index_at(event.position().x())
            if i is not None:
                self.set_marked(i)
                self.positionClicked.emit(i)
        super().mousePressEvent(event)
