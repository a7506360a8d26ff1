"""Direct logit attribution as a bar chart (``attributionBars``): one bar per part of a target's logit (the
embedding, each head, each MLP, the biases), up for a part that raises the logit and down for one that lowers
it, labelled as the app counts (layers and heads from 1); a tooltip names the part and its value. With no
parts it shows a line of words instead (why there is none)."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from ...core.names import ComponentName

UP, DOWN = QColor("#2e86c1"), QColor("#c0392b")


def part_label(name: str) -> str:
    """A part's short label: "emb", "bias", "MLP 2", a head "1.3" (layer.head, from 1), a cross head "x1.3"."""
    if name == "embedding":
        return "emb"
    if name == "biases":
        return "bias"
    c = ComponentName.parse(name)
    if c.head is None:
        return f"MLP {c.map.layer + 1}"
    return f"{'x' if c.map.kind == 'cross' else ''}{c.map.layer + 1}.{c.head + 1}"


def part_words(name: str) -> str:
    """A part in words: "the embedding", "layer 1, head 3", "the MLP of layer 2", "the biases"."""
    if name in ("embedding", "biases"):
        return f"the {name}"
    c = ComponentName.parse(name)
    if c.head is None:
        return f"the MLP of layer {c.map.layer + 1}"
    return f"{'cross-attention ' if c.map.kind == 'cross' else ''}layer {c.map.layer + 1}, head {c.head + 1}"


class AttributionBars(QWidget):
    """`set_parts(title, names, values)` or `set_message(text)`."""

    TITLE_H, LABEL_H, PAD = 40, 30, 8

    def __init__(self, parent=None):
        super().__init__(parent, objectName="attributionBars")
        self.title = ""
        self.names: list[str] = []
        self.values: list[float] = []
        self.message = ""
        self.setMinimumSize(260, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(420, 170)

    def set_parts(self, title: str, names: list[str], values: list[float]) -> None:
        self.title, self.names, self.values, self.message = title, list(names), [float(v) for v in values], ""
        self.update()

    def set_message(self, text: str) -> None:
        self.title, self.names, self.values, self.message = "", [], [], text
        self.update()

    def _plot_rect(self) -> QRectF:
        return QRectF(self.PAD + 34, self.TITLE_H, self.width() - 2 * self.PAD - 34,
                      self.height() - self.TITLE_H - self.LABEL_H - 4)

    def top(self) -> float:
        """The largest |part|: the chart's half height."""
        return max((abs(v) for v in self.values), default=1.0) or 1.0

    def bar_rect(self, i: int, top: float | None = None) -> QRectF:
        area, n = self._plot_rect(), max(1, len(self.values))
        w = area.width() / n
        top = top or self.top()
        zero = area.top() + area.height() / 2
        h = self.values[i] / top * (area.height() / 2)
        return QRectF(area.left() + i * w + w * 0.15, min(zero, zero - h), w * 0.7, max(1.0, abs(h)))

    def bar_at(self, x: float) -> int | None:
        area = self._plot_rect()
        if not self.values or not area.left() <= x < area.right():
            return None
        return min(len(self.values) - 1, int((x - area.left()) // (area.width() / len(self.values))))

    def event(self, e) -> bool:
        if e.type() == QEvent.Type.ToolTip:
            i = self.bar_at(e.pos().x())
            if i is not None:
                QToolTip.showText(e.globalPos(), f"{part_words(self.names[i])}: {self.values[i]:+.4f}", self)
            else:
                QToolTip.hideText()
            return True
        return super().event(e)

    def paintEvent(self, _e) -> None:
        p = QPainter(self)
        fg = self.palette().color(self.foregroundRole())
        p.setPen(fg)
        if self.message:
            p.drawText(QRectF(self.PAD, self.PAD, self.width() - 2 * self.PAD, self.height() - 2 * self.PAD),
                       int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop) | Qt.TextFlag.TextWordWrap,
                       self.message)
            p.end()
            return
        p.drawText(QRectF(self.PAD, 2, self.width() - 2 * self.PAD, self.TITLE_H - 2),
                   int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter) | Qt.TextFlag.TextWordWrap,
                   self.title)
        if not self.values:
            p.end()
            return
        area = self._plot_rect()
        top = self.top()
        zero = area.top() + area.height() / 2
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.8))
        p.setFont(small)
        fm = QFontMetricsF(small)
        for y, text in ((area.top(), f"{top:+.2g}"), (zero, "0"), (area.bottom(), f"{-top:+.2g}")):
            p.drawText(QRectF(0, y - 8, area.left() - 4, 16), Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                       text)
        w = area.width() / len(self.values)
        labels = [part_label(n) for n in self.names]
        upright = max(fm.horizontalAdvance(t) for t in labels) + 2 <= w  # else written upwards, one per bar
        p.setPen(fg)
        for i, v in enumerate(self.values):
            p.fillRect(self.bar_rect(i, top), UP if v >= 0 else DOWN)
            if upright:
                p.drawText(QRectF(area.left() + i * w, area.bottom() + 2, w, self.LABEL_H),
                           Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, labels[i])
                continue
            p.save()
            p.translate(area.left() + (i + 0.5) * w, area.bottom() + 2)
            p.rotate(-90)
            p.drawText(QRectF(-self.LABEL_H, -w / 2, self.LABEL_H, w), Qt.AlignmentFlag.AlignRight
                       | Qt.AlignmentFlag.AlignVCenter, labels[i])
            p.restore()
        p.setPen(QPen(fg, 1))
        p.drawLine(int(area.left()), int(zero), int(area.right()), int(zero))
        p.end()
