"""Direct logit attribution as a bar chart (``attributionBars``): one bar per part of a target's logit (the
embedding, each head, each MLP, the biases), up for a part that raises the logit and down for one that lowers
it, labelled as the app counts (layers and heads from 1); a tooltip names the part and its value. With no
parts it shows a line of words instead (why there is none)."""
from __future__ import annotations

import math

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
    """`set_parts(title, names, values)` or `set_message(text)`. Its title (two lines) and the bars' labels
    (written upwards when they do not fit under a bar) take the room their fonts need."""

    PAD = 8

    def __init__(self, parent=None):
        super().__init__(parent, objectName="attributionBars")
        self.title = ""
        self.names: list[str] = []
        self.values: list[float] = []
        self.message = ""
        self.drawn: list[str] = []  # the bars' labels of the last paint
        self.setMinimumWidth(200)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.setMouseTracking(True)

    def small_font(self) -> QFont:
        """The font of the axis's numbers and the bars' labels."""
        small = QFont(self.font())
        small.setPointSizeF(max(6.0, small.pointSizeF() * 0.8))
        return small

    TITLE_LINES = (2, 4)  # the title's lines: room for two at least, at most four

    @property
    def title_height(self) -> int:
        """The title's lines at this width (two at least, four at most)."""
        fm = QFontMetricsF(self.font())
        least, most = (n * fm.lineSpacing() for n in self.TITLE_LINES)
        wrapped = fm.boundingRect(QRectF(0, 0, max(1, self.width() - 2 * self.PAD), 10_000),
                                  int(Qt.TextFlag.TextWordWrap), self.title).height() if self.title else 0.0
        return int(min(max(wrapped, least), most)) + 6

    @property
    def label_height(self) -> int:
        """The bars' labels written upwards: as long as the longest ("MLP 12"; the names shown, when longer)."""
        fm = QFontMetricsF(self.small_font())
        return int(max(fm.horizontalAdvance(t) for t in ("MLP 12", *map(part_label, self.names)))) + 4

    BARS_H = 50  # px: the bars' own height at least (a half up, a half down)

    def minimumSizeHint(self) -> QSize:
        """The title's lines at this width, the bars and their labels."""
        return QSize(200, self.title_height + self.label_height + self.BARS_H + 4)

    def sizeHint(self) -> QSize:
        return QSize(420, self.title_height + self.label_height + 100)

    def set_parts(self, title: str, names: list[str], values: list[float]) -> None:
        self.title, self.names, self.values, self.message = title, list(names), [float(v) for v in values], ""
        self.update()

    def set_message(self, text: str) -> None:
        self.title, self.names, self.values, self.message = "", [], [], text
        self.update()

    def _plot_rect(self) -> QRectF:
        fm = QFontMetricsF(self.small_font())
        axis = fm.horizontalAdvance("+0.25") + 8  # the axis's numbers left of it
        half = fm.lineSpacing() / 2  # the top number, centred on the chart's top, clear of the title
        return QRectF(self.PAD + axis, self.title_height + half, self.width() - 2 * self.PAD - axis,
                      self.height() - self.title_height - half - self.label_height - 4)

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
        p.drawText(QRectF(self.PAD, 2, self.width() - 2 * self.PAD, self.title_height - 2),
                   int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter) | Qt.TextFlag.TextWordWrap,
                   self.title)
        if not self.values:
            p.end()
            return
        area = self._plot_rect()
        top = self.top()
        zero = area.top() + area.height() / 2
        small = self.small_font()
        p.setFont(small)
        fm = QFontMetricsF(small)
        line = fm.lineSpacing()
        for y, text in ((area.top(), f"{top:+.2g}"), (zero, "0"), (area.bottom(), f"{-top:+.2g}")):
            p.drawText(QRectF(0, y - line / 2, area.left() - 4, line),
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, text)
        w = area.width() / len(self.values)
        labels = [part_label(n) for n in self.names]
        upright = max(fm.horizontalAdvance(t) for t in labels) + 2 <= w  # else written upwards, one per bar …
        step = 1 if upright else math.ceil(fm.height() / w)  # … or per `step` bars where a bar is thinner than a line
        p.setPen(fg)
        self.drawn = []
        for i, v in enumerate(self.values):
            p.fillRect(self.bar_rect(i, top), UP if v >= 0 else DOWN)
            if i % step:  # (hover a bar for its part)
                continue
            self.drawn.append(labels[i])
            if upright:
                p.drawText(QRectF(area.left() + i * w, area.bottom() + 2, w, self.label_height),
                           Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, labels[i])
                continue
            p.save()
            p.translate(area.left() + (i + 0.5) * w, area.bottom() + 2)
            p.rotate(-90)
            p.drawText(QRectF(-self.label_height, -w / 2, self.label_height, w), Qt.AlignmentFlag.AlignRight
                       | Qt.AlignmentFlag.AlignVCenter, labels[i])
            p.restore()
        p.setPen(QPen(fg, 1))
        p.drawLine(int(area.left()), int(zero), int(area.right()), int(zero))
        p.end()
