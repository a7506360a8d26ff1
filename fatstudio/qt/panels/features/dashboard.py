"""The Features tab's features page (``featuresFeatures``): the chosen dictionary's features in a sortable list
(frequency, mean activation, a label from their top tokens; counted from 1) and the dashboard of the one chosen
in it (its top validation contexts, histogram, promoted and suppressed tokens, and its activation on the Prompt
text). Choosing a feature asks for an intervention on it (``featureChosen``)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ....core.app.features import DASHBOARD

if TYPE_CHECKING:
    from ....core.app.features import Chosen, Features, Shown


class FeatureSection(QWidget):
    """See the module. ``featureChosen(feature)``: a feature (0-based) was chosen in the list."""

    featureChosen = Signal(int)

    def __init__(self, features: Features, parent=None):
        super().__init__(parent, objectName="featuresFeatures")
        self.features = features
        self.summary = QLabel(objectName="featuresFeatureSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addStretch(1)
        features.chosen_changed.connect(self._chosen)
        features.dashboard_ready.connect(self._shown)
        features.failed.connect(lambda key, message: self.say(message, True) if key == DASHBOARD else None)
        self._chosen(None)

    def _chosen(self, chosen: Chosen | None) -> None:
        if chosen is None:
            self.say("Choose a dictionary on the left to list its features.")
            return
        self.say(f"{chosen.dictionary.d_f:,} features of {html.escape(chosen.dictionary.describe())}.")

    def _shown(self, shown: Shown) -> None:
        self.say(f"Feature {shown.feature + 1}")

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setStyleSheet("color: #b00020;" if error else "")
