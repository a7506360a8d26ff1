"""The Prompt panel's result widgets besides the text: the table of predictions at each mask (fill_mask), the
table of class probabilities (classify) and the legend of the probability colours with the run's status."""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from ...core.inference.generation import MaskPrediction
from ...core.inference.prompting import display_token
from .token_view import probability_color, probability_gradient_css


class MaskTable(QTableWidget):
    """A row per mask, a column per candidate: each candidate's token and p on the colour of p."""

    def __init__(self, parent=None):
        super().__init__(0, 0, parent)
        self.setObjectName("maskTable")
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)

    def show_predictions(self, predictions: Sequence[MaskPrediction]) -> None:
        n = max((len(p.candidates) for p in predictions), default=0)
        t = self
        t.clear()
        t.setColumnCount(1 + n)
        t.setHorizontalHeaderLabels(["mask (position)"] + [f"#{i + 1}" for i in range(n)])
        t.setRowCount(len(predictions))
        for r, p in enumerate(predictions):
            t.setItem(r, 0, QTableWidgetItem(f"{r + 1} (t = {p.position})"))
            for c, (tk, prob) in enumerate(p.candidates):
                item = QTableWidgetItem(f"{display_token(tk)}   {prob:.3f}")
                item.setBackground(probability_color(prob))
                item.setForeground(QColor(0, 0, 0))
                item.setToolTip(f"{tk!r}: p = {prob:.6f}")
                t.setItem(r, 1 + c, item)
        t.resizeColumnsToContents()


class ClassTable(QTableWidget):
    """A row per class: its name, P(c | x) and a bar of it."""

    def __init__(self, parent=None):
        super().__init__(0, 3, parent)
        self.setObjectName("classTable")
        self.setHorizontalHeaderLabels(["class", "P(c | x)", ""])
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().setVisible(False)
        self.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)

    def show_probabilities(self, probs: Sequence[tuple[str, float]]) -> None:
        t = self
        t.setRowCount(len(probs))
        for r, (name, p) in enumerate(probs):
            t.setItem(r, 0, QTableWidgetItem(str(name)))
            item = QTableWidgetItem(f"{p:.4f}")
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            t.setItem(r, 1, item)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setValue(round(p * 1000))
            bar.setTextVisible(False)
            bar.setToolTip(f"P({name} | x) = {p:.6f}")
            t.setCellWidget(r, 2, bar)
        t.resizeColumnToContents(0)


class ProbabilityLegend(QWidget):
    """The colour bar of token probabilities, the run's status (``statusLabel``) and ``reuseSeedButton``."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.legendLabel = QLabel("token probability p:")
        bar = QLabel()
        bar.setFixedSize(140, 12)
        bar.setStyleSheet(f"background: {probability_gradient_css()}; border: 1px solid #999;")
        bar.setToolTip("Each output token's background shows the model's probability of it (τ = 1): "
                       "orange = unlikely, yellow = 0.5, blue = likely. Hover a token for the alternatives.")
        ll = QHBoxLayout(self)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.legendLabel)
        ll.addWidget(QLabel("0"))
        ll.addWidget(bar)
        ll.addWidget(QLabel("1"))
        ll.addStretch(1)
        self.statusLabel = QLabel()
        self.statusLabel.setObjectName("promptStatus")
        self.statusLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ll.addWidget(self.statusLabel)
        self.reuseSeedButton = QPushButton(objectName="reuseSeedButton")
        self.reuseSeedButton.setToolTip("Put this seed in the seed box: Generate then draws the same sample again "
                                        "(with the same prompt, settings and model). Set the box back to "
                                        "'random' for fresh samples.")
        self.reuseSeedButton.hide()
        ll.addWidget(self.reuseSeedButton)
