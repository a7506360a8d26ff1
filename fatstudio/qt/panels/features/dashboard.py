"""The Features tab's features page (``featuresFeatures``): the chosen dictionary's features in a sortable list
(`FeatureList`: frequency, mean activation, a label from their top tokens; counted from 1) beside the dashboard of
the one chosen in it (`FeatureDashboard`: its top validation contexts, histogram, promoted and suppressed tokens,
and its activation on the Prompt text). Choosing a feature asks for its dashboard (`Features.choose_feature`) and
offers it to the intervention (``featureChosen``)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from ....core.app.features import DASHBOARD
from ...widgets.feature_dashboard import FeatureDashboard
from ...widgets.feature_list import FeatureList

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
        self.list = FeatureList()
        self.list.setToolTip("The dictionary's features on the validation split: how often each is active, its "
                             "mean activation when active and its top tokens. Click a header to sort.")
        self.dashboard = FeatureDashboard()
        split = QSplitter(Qt.Orientation.Horizontal, objectName="featuresFeatureSplitter")
        split.addWidget(self.list)
        split.addWidget(self.dashboard)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        em = self.fontMetrics().horizontalAdvance("m")
        split.setSizes([26 * em, 66 * em])
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(split, 1)
        self.list.featureChosen.connect(self._feature_chosen)
        features.chosen_changed.connect(self._chosen)
        features.dashboard_ready.connect(self._shown)
        features.focus.text_changed.connect(self._text_changed)
        features.failed.connect(lambda key, message: self.say(message, True) if key == DASHBOARD else None)
        self._chosen(features.chosen)

    def _chosen(self, chosen: Chosen | None) -> None:
        self.dashboard.clear()
        if chosen is None:
            self.list.set_stats([])
            self.say("Choose a dictionary on the left to list its features.")
            return
        stats = chosen.stats.stats()
        self.list.set_stats(stats)
        alive = sum(1 for s in stats if s.frequency > 0)
        self.say(f"<b>{len(stats):,} features</b> of {html.escape(chosen.dictionary.describe())}, read on "
                 f"{chosen.stats.n_tokens:,} validation tokens: {alive:,} active on them (the quality's dead "
                 "share counts fewer, held-out, tokens). Choose one to see its "
                 "dashboard.")
        if stats:
            self.list.select_feature(self.list.shown()[0])

    def _feature_chosen(self, feature: int | None) -> None:
        if feature is None:
            return
        self.features.choose_feature(feature)
        self.featureChosen.emit(feature)

    def _text_changed(self, _text: str) -> None:
        """The Prompt text changed: the dashboard shows the feature on the new one."""
        feature = self.list.current_feature()
        if feature is not None:
            self.features.choose_feature(feature)

    def _shown(self, shown: Shown) -> None:
        self.dashboard.show_dashboard(shown.dashboard)
        self.dashboard.show_text(shown.on_text)
        self.dashboard.promptLabel.setText("On the Prompt text:" if shown.on_text is not None else shown.note)

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setStyleSheet("color: #b00020;" if error else "")
