"""The corpus as one bar, its validation part marked: each file a band (alternating shades, its name under the
pointer), each validation block an orange stroke where it lies (`core.data.preview.SplitView`)."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QRectF, QSize
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from fatstudio.core.data.preview import SplitView

TRAIN_SHADES = (QColor("#c9d7e8"), QColor("#e1e9f3"))  # files, alternating (one shade for a single text)
VAL_COLOR = QColor("#e66c00")
EDGE_COLOR = QColor("#7a8ba0")


class SplitStrip(QWidget):
    """A bar of the whole text: the training part in blue-grey (each file a band), the validation blocks in orange.
    Hovering names the file under the pointer and how much of it validates."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("corpusSplitStrip")
        self.view = SplitView("")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(300, max(14, self.fontMetrics().height()))

    def set_view(self, view: SplitView) -> None:
        self.view = view
        self.setVisible(bool(view.blocks))
        self.update()

    def _x(self, fraction: float) -> float:
        return 1 + fraction * (self.width() - 2)

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        h = self.height() - 1
        files = self.view.files or ()
        if files:
            for i, f in enumerate(files):
                p.fillRect(QRectF(self._x(f.start), 0, max(self._x(f.stop) - self._x(f.start), 1), h),
                           TRAIN_SHADES[i % 2])
        else:
            p.fillRect(QRectF(1, 0, self.width() - 2, h), TRAIN_SHADES[0])
        for a, b in self.view.blocks:
            p.fillRect(QRectF(self._x(a), 0, max(self._x(b) - self._x(a), 1.5), h), VAL_COLOR)
        p.setPen(QPen(EDGE_COLOR))
        for f in files[1:]:
            p.drawLine(round(self._x(f.start)), 0, round(self._x(f.start)), h)
        p.drawRect(QRectF(0.5, 0.5, self.width() - 1, h - 0.5))
        p.end()

    def tip_at(self, x: float) -> str:
        """What the tooltip says at ``x`` pixels: the file there and its share of validation, or the text's."""
        fraction = (x - 1) / max(self.width() - 2, 1)
        for f in self.view.files:
            if f.start <= fraction < f.stop or f is self.view.files[-1]:
                return f"{f.name}: {f.val:.0%} of it validates"
        inside = any(a <= fraction < b for a, b in self.view.blocks)
        return f"{fraction:.0%} of the text: {'validation' if inside else 'training'}"

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip and isinstance(e, QHelpEvent) and self.view.blocks:
            QToolTip.showText(e.globalPos(), self.tip_at(e.pos().x()), self)
            return True
        return super().event(e)


__all__ = ["SplitStrip", "TRAIN_SHADES", "VAL_COLOR"]
