"""The Features tab's intervention (``featuresEdit``): the feature clicked in the graph or the dashboard, zeroed
(``featuresZeroButton``) or clamped to a value (``featuresClampValue``, ``featuresClampButton``) at its position
or at every one, and the prompt rerun (`Features.intervene`); the result shown as the head ablation shows its
(`FeatureEditView`: the next token's most likely before and after, the prompt's tokens coloured by Δp)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ....core.app.features import EDIT
from ...widgets.feature_edit import FeatureEditView
from ...widgets.forms import float_spin

if TYPE_CHECKING:
    from ....core.app.features import EditTarget, Features
    from ....core.inspect.features.interventions import FeatureIntervention


class EditSection(QWidget):
    """See the module. `set_target` chooses the feature; `zero` and `clamp` rerun the prompt."""

    def __init__(self, features: Features, parent=None):
        super().__init__(parent, objectName="featuresEdit")
        self.features = features
        self.target: EditTarget | None = None
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
        self.result = FeatureEditView()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.summary)
        lay.addWidget(self.result, 1)
        self.zeroButton.clicked.connect(self.zero)
        self.clampButton.clicked.connect(lambda: self.clamp(self.clampValue.value()))
        features.cleared.connect(lambda: self.set_target(None))
        features.chosen_changed.connect(lambda _chosen: self.set_target(None))
        features.edit_ready.connect(self._show)
        features.failed.connect(lambda key, message: self.say(message, True) if key == EDIT else None)
        self.set_target(None)

    def set_target(self, target: EditTarget | None) -> None:
        self.target = target
        self.result.show_result(None)
        for button in (self.zeroButton, self.clampButton, self.clampValue, self.everywhere):
            button.setEnabled(target is not None)
        self.everywhere.setChecked(target is None or target.position is None)
        self.everywhere.setEnabled(target is not None and target.position is not None)
        self.title.setText(f"<b>Intervene:</b> {html.escape(target.words)} on “<span style='white-space: pre-wrap'>"
                           f"{html.escape(target.prompt)}</span>”"  # the prompt's spaces kept, leading ones too
                           if target is not None else
                           "<b>Intervene:</b> click a feature in the graph or choose one in the list.")
        self.say("")

    def zero(self) -> bool:
        return self.clamp(0.0)

    def clamp(self, value: float) -> bool:
        """Rerun the target's prompt with its feature set to ``value``."""
        t = self.target
        if t is None:
            return False
        everywhere = self.everywhere.isChecked()
        started = self.features.intervene(t, value, everywhere)
        if started:
            how = "zeroed" if value == 0 else f"clamped to {value:g}"
            where = "at every position" if everywhere or t.position is None else f"at position {t.position + 1}"
            self.say(f"Rerunning the prompt with feature {t.feature + 1} {how} {where}…")
        return started

    def _show(self, result: FeatureIntervention) -> None:
        self.say("")
        self.result.show_result(result)

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setStyleSheet("color: #b00020;" if error else "")
        self.summary.setVisible(bool(text))
