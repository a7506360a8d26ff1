"""The Features tab (``featuresView``): sparse dictionaries of the focused run (said in ``featuresFocusLabel``).

On the left, the Train section (`train.TrainSection`) and the dictionary picker (``featuresDictionaries``: the
run's saved dictionaries, each with its quality), and for a glass-box run with known features which of them the
chosen dictionary recovered (``featuresRecovered``). On the right, two pages: the chosen dictionary's features
(`dashboard.FeatureSection`: the sortable list and one feature's dashboard) and the attribution graph of a prompt
(`graph.GraphSection`); below them the intervention on a feature clicked in either (`edit.EditSection`). Everything is computed by
`core.app.features.Features` in the one job system; the tab only shows it.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ....core.app.features import DASHBOARD, Chosen, Saved
from ...widgets.focus_label import FocusLabel
from .edit import EditSection
from .graph import GraphSection
from .train import TrainSection, quality_words

if TYPE_CHECKING:
    from ....core.app.workspace import Workspace
    from ....core.runs.glass_box import Recovery
    from .dashboard import FeatureSection

EDIT_LINES = 16  # the intervention's room once it has a result


def saved_words(s: Saved) -> tuple[str, str]:
    """A dictionary as the picker lists it, one short line ("mlp/1 · step 2,000 · transcoder"), and its tooltip
    (what it is, its folder and quality; or why it cannot be read)."""
    if s.error:
        return s.words, f"{s.folder}\n{s.error}"
    kind = "transcoder" if s.kind == "transcoder" else "SAE"
    return f"{s.point} · step {s.step:,} · {kind}", f"{s.words}\n{s.folder}\n{plain(quality_words(s.quality or {}))}"


class FeaturesPanel(QWidget):
    """See the module. ``features`` is the workspace's `Features`."""

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.setObjectName("featuresView")
        self.workspace = workspace
        self.features = f = workspace.features
        self.focusLabel = FocusLabel(workspace.focus, "featuresFocusLabel")
        self.train_section = TrainSection(f)
        self.dictionaries = QListWidget(objectName="featuresDictionaries")
        self.dictionaries.setToolTip("The run's saved dictionaries (its features/ folder). Choose one to see its "
                                     "features.")
        self.dictionaryLabel = QLabel(objectName="featuresDictionarySummary")
        self.dictionaryLabel.setWordWrap(True)
        self.dictionaryLabel.setTextFormat(Qt.TextFormat.RichText)
        self.recovered = QLabel(objectName="featuresRecovered")
        self.recovered.setWordWrap(True)
        self.recovered.setTextFormat(Qt.TextFormat.RichText)
        self.recovered.hide()
        self.readingBar = QProgressBar(objectName="featuresReading")
        self.readingBar.setRange(0, 1000)
        self.readingBar.hide()
        picker = QGroupBox("Dictionaries of this run", objectName="featuresPicker")
        pl = QVBoxLayout(picker)
        pl.addWidget(self.dictionaries, 1)
        pl.addWidget(self.readingBar)
        pl.addWidget(self.dictionaryLabel)
        pl.addWidget(self.recovered)
        column = QWidget()  # the curves, once shown, take their room from the list; scrolled on a short screen
        ll = QVBoxLayout(column)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.train_section)
        ll.addWidget(picker, 1)
        left = scrolled(column, horizontal=False)
        left.setObjectName("featuresLeft")
        self.feature_section: FeatureSection | None = None  # made when the tab is first shown (`showEvent`)
        self.features_page = QWidget(objectName="featuresFeaturesPage")
        QVBoxLayout(self.features_page).setContentsMargins(0, 0, 0, 0)
        self.graph_section = GraphSection(f)
        self.edit_section = EditSection(f)
        self.pages = QTabWidget(objectName="featuresPages")
        self.pages.addTab(self.features_page, "Features")
        self.pages.addTab(self.graph_section, "Attribution graph")
        right = QSplitter(Qt.Orientation.Vertical, objectName="featuresRightSplitter")
        right.addWidget(self.pages)
        right.addWidget(scrolled(self.edit_section))
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        line = self.fontMetrics().height()
        right.setSizes([40 * line, 6 * line])  # the intervention grows when it has a result (`_edited`)
        self.right = right
        split = QSplitter(Qt.Orientation.Horizontal, objectName="featuresSplitter")
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        em = self.fontMetrics().horizontalAdvance("m")
        split.setSizes([25 * em, 80 * em])
        lay = QVBoxLayout(self)
        lay.addWidget(self.focusLabel)
        lay.addWidget(split, 1)
        self.dictionaries.currentItemChanged.connect(self._picked)
        self.graph_section.nodeClicked.connect(lambda node: self.edit_section.set_target(f.node_target(node)))
        f.cleared.connect(self._cleared)
        f.listed.connect(self._listed)
        f.chosen_changed.connect(self._chosen)
        f.reading.connect(lambda fraction, _message: self.readingBar.setValue(round(fraction * 1000)))
        f.edit_ready.connect(self._edited)
        f.failed.connect(self._failed)
        self._cleared()
        self._listed(f.saved)

    # ---- the picker ----------------------------------------------------------------------------------------
    def _cleared(self) -> None:
        self.readingBar.hide()
        self.dictionaries.clear()
        self.recovered.hide()
        self._say("")

    def _listed(self, saved: list[Saved]) -> None:
        self.dictionaries.blockSignals(True)
        self.dictionaries.clear()
        for s in saved:
            line, tip = saved_words(s)
            item = QListWidgetItem(line)
            item.setData(Qt.ItemDataRole.UserRole, s)
            item.setToolTip(tip)
            self.dictionaries.addItem(item)
        self.dictionaries.blockSignals(False)
        self._select(self.features.picked)
        if self.features.picked is None:
            self._say(f"{len(saved)} saved: choose one to see its features." if saved else
                      "No dictionary saved yet: train one." if self.features.no_weights() is None else "")

    def _select(self, saved: Saved | None) -> None:
        """Show ``saved`` as the one chosen in the list (without choosing it again)."""
        self.dictionaries.blockSignals(True)
        for row in range(self.dictionaries.count()):
            if saved is not None and self.dictionaries.item(row).data(Qt.ItemDataRole.UserRole).folder == saved.folder:
                self.dictionaries.setCurrentRow(row)
        self.dictionaries.blockSignals(False)

    def _picked(self, item: QListWidgetItem | None, _previous=None) -> None:
        self.features.choose(item.data(Qt.ItemDataRole.UserRole) if item is not None else None)

    def _chosen(self, chosen: Chosen | None) -> None:
        step = chosen.saved.step if chosen is not None else None
        self.focusLabel.set_own(None if step is None or step == self.workspace.focus.step else
                                f"the weights of step {step:,}, the chosen dictionary's")
        self.recovered.setVisible(chosen is not None and chosen.recovered is not None)
        picked = self.features.picked
        self.readingBar.setVisible(chosen is None and picked is not None and not picked.error)
        self.readingBar.setValue(0)
        if chosen is None:
            self._select(picked)
            if picked is not None and not picked.error:
                self._say(f"Reading {html.escape(picked.words)} and measuring its features on the validation "
                          "split…")
            return
        self._say(f"<b>{html.escape(chosen.dictionary.describe())}</b> at step {chosen.saved.step:,}"
                  + (f"<br>{quality_words(chosen.saved.quality)}" if chosen.saved.quality else ""))
        if chosen.recovered is not None:
            self.recovered.setText(recovered_words(chosen.recovered))

    def showEvent(self, event) -> None:
        self.make_feature_section()
        super().showEvent(event)

    def make_feature_section(self) -> FeatureSection:
        """The features page's list and dashboard, made once: their widgets import the dashboards' core (torch),
        which the window leaves out of its start."""
        if self.feature_section is None:
            from .dashboard import FeatureSection

            self.feature_section = FeatureSection(self.features)
            self.feature_section.featureChosen.connect(self._feature_chosen)
            page = self.features_page.layout()
            assert page is not None  # made with its layout
            page.addWidget(self.feature_section)
        return self.feature_section

    def show_page(self, section: QWidget) -> None:
        """Show the page of ``section`` (`feature_section` or `graph_section`)."""
        self.pages.setCurrentWidget(self.features_page if section is self.feature_section else section)

    # ---- what an intervention acts on -------------------------------------------------------------------
    def prompt(self) -> str:
        """The prompt an intervention reruns: the graph page's (the Prompt text to begin with)."""
        return self.graph_section.prompt.text() or self.workspace.focus.text

    def _feature_chosen(self, feature: int) -> None:
        self.edit_section.set_target(self.features.feature_target(feature, self.prompt()))

    def _edited(self, _result) -> None:
        """Room for the intervention's result: `EDIT_LINES` lines of text (at most 2/5 of the height), taken from
        the pages."""
        pages, edit = self.right.sizes()
        room = min(EDIT_LINES * self.fontMetrics().height(), (pages + edit) * 2 // 5)  # the pages keep the most
        if edit < room:
            self.right.setSizes([max(pages - (room - edit), 0), room])

    def _failed(self, key: str, message: str) -> None:
        if key == DASHBOARD:
            self.readingBar.hide()
            self._say(message, True)

    def _say(self, text: str, error: bool = False) -> None:
        self.dictionaryLabel.setText(text)
        self.dictionaryLabel.setStyleSheet("color: #b00020;" if error else "")


def scrolled(widget: QWidget, horizontal: bool = True) -> QScrollArea:
    """``widget`` in a frameless scroll area: on a short screen it scrolls instead of raising the window's least
    size (the window fits 1366×768: the intervention and the left column scroll)."""
    area = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
    if not horizontal:
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setWidget(widget)
    return area


def plain(text: str) -> str:
    return text.replace("<b>", "").replace("</b>", "")


def recovered_words(recovered: Recovery | str) -> str:
    """Which known features of a glass-box run a dictionary recovered and which it missed (counted from 1), or
    why it cannot be compared with them."""
    if isinstance(recovered, str):
        return f"<span style='color:#b00020'>Known features: {html.escape(recovered)}</span>"
    listed = lambda ids: ", ".join(str(i + 1) for i in ids) or "none"
    return (f"<b>Glass box:</b> {html.escape(recovered.summary())}.<br><b>Missed:</b> {listed(recovered.missed)}"
            f"<br><span style='color:#555'>Found (known → feature): "
            f"{', '.join(f'{i + 1}→{recovered.match[i] + 1}' for i in recovered.found) or 'none'}</span>")
