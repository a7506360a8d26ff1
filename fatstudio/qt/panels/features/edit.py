"""The Features tab's intervention (``featuresEdit``): the feature clicked in the graph or the dashboard, zeroed
(``featuresZeroButton``) or clamped to a value (``featuresClampValue``, ``featuresClampButton``) at its position
or at every one, and the prompt rerun (`Features.intervene`); the next-token probabilities before and after are
shown as the head ablation shows a text's (``featuresEditTable``)."""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from ....core.app.features import EDIT
from ...widgets.forms import float_spin

if TYPE_CHECKING:
    from ....core.app.features import Features


@dataclass(frozen=True)
class Target:
    """What an intervention acts on: feature ``feature`` (0-based) of the dictionary in ``folder``, at
    ``position`` (None: every position) of ``prompt``; ``words`` names it."""

    folder: str
    feature: int
    prompt: str
    position: int | None
    words: str


class EditSection(QWidget):
    """See the module. `set_target` chooses the feature; `zero` and `clamp` rerun the prompt."""

    def __init__(self, features: Features, parent=None):
        super().__init__(parent, objectName="featuresEdit")
        self.features = features
        self.target: Target | None = None
        self.title = QLabel(objectName="featuresEditTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.zeroButton = QPushButton("Zero it", objectName="featuresZeroButton")
        self.clampValue = float_spin(-1000.0, 1000.0, 5.0, decimals=2, step=0.5)
        self.clampValue.setObjectName("featuresClampValue")
        self.clampButton = QPushButton("Clamp to", objectName="featuresClampButton")
        self.everywhere = QCheckBox("at every position", objectName="featuresEditEverywhere")
        self.everywhere.setToolTip("Set the feature at every position of the prompt, not only at the one clicked.")
        bar = QHBoxLayout()
        bar.addWidget(self.title, 1)
        bar.addWidget(self.zeroButton)
        bar.addWidget(self.clampButton)
        bar.addWidget(self.clampValue)
        bar.addWidget(self.everywhere)
        self.summary = QLabel(objectName="featuresEditSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.table = QTableWidget(0, 0, objectName="featuresEditTable")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.summary)
        lay.addWidget(self.table, 1)
        self.zeroButton.clicked.connect(self.zero)
        self.clampButton.clicked.connect(lambda: self.clamp(self.clampValue.value()))
        features.cleared.connect(lambda: self.set_target(None))
        features.chosen_changed.connect(lambda _chosen: self.set_target(None))
        features.edit_ready.connect(self._show)
        features.failed.connect(lambda key, message: self.say(message, True) if key == EDIT else None)
        self.set_target(None)

    def set_target(self, target: Target | None) -> None:
        self.target = target
        self.table.setRowCount(0)
        for button in (self.zeroButton, self.clampButton, self.clampValue, self.everywhere):
            button.setEnabled(target is not None)
        self.everywhere.setChecked(target is None or target.position is None)
        self.everywhere.setEnabled(target is not None and target.position is not None)
        self.title.setText(f"<b>Intervene:</b> {html.escape(target.words)}" if target is not None else
                           "<b>Intervene:</b> click a feature in the graph or choose one in the list.")
        self.say("")

    def zero(self) -> bool:
        return self.clamp(0.0)

    def clamp(self, value: float) -> bool:
        """Rerun the target's prompt with its feature set to ``value``."""
        t = self.target
        if t is None:
            return False
        position = None if self.everywhere.isChecked() else t.position
        started = self.features.intervene(t.folder, t.feature, t.prompt, value, position)
        if started:
            how = "zeroed" if value == 0 else f"clamped to {value:g}"
            where = "at every position" if position is None else f"at position {position + 1}"
            self.say(f"Rerunning the prompt with feature {t.feature + 1} {how} {where}…")
        return started

    def _show(self, result: Any) -> None:
        self.say(html.escape(str(result)))

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setStyleSheet("color: #b00020;" if error else "")
