"""The Features tab's attribution graph page (``featuresGraph``): a prompt (``featuresPrompt``, the Prompt tab's
text to begin with) and a target token (``featuresTarget``; empty: the model's most likely next token), Build
(``featuresGraphButton``), and the graph of the target's logit through the transcoders of every MLP layer
(`Features.build_graph`), pruned: drawn in layers (`AttributionGraphView`) above its nodes, most influential
first (``featuresGraphNodes``). Clicking a feature node in either asks for an intervention on it
(``nodeClicked``)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ....core.app.features import GRAPH
from ...widgets.attribution_graph import AttributionGraphView

if TYPE_CHECKING:
    from ....core.app.features import Features

NODE_COLUMNS = ("node", "kind", "influence", "direct effect", "activation", "what it is")


class GraphSection(QWidget):
    """See the module. ``nodeClicked(node)``: a feature node of the graph shown was clicked."""

    nodeClicked = Signal(object)

    def __init__(self, features: Features, parent=None):
        super().__init__(parent, objectName="featuresGraph")
        self.features = features
        self.graph: Any = None  # the graph shown
        self.prompt = QLineEdit(objectName="featuresPrompt")
        self.prompt.setPlaceholderText("a prompt whose next token to trace")
        self.target = QLineEdit(objectName="featuresTarget")
        self.target.setPlaceholderText("most likely")
        self.target.setMaxLength(16)
        self.target.setMaximumWidth(self.fontMetrics().horizontalAdvance("most likely") * 2)
        self.target.setToolTip("The token whose logit is traced (one token); empty: the model's most likely next token.")
        self.buildButton = QPushButton("Build graph", objectName="featuresGraphButton")
        self.buildButton.setToolTip("Trace the target's logit through the transcoders of every MLP layer (saved at "
                                    "one step), with attention and norms frozen at the prompt's values.")
        bar = QHBoxLayout()
        bar.addWidget(QLabel("prompt"))
        bar.addWidget(self.prompt, 1)
        bar.addWidget(QLabel("target"))
        bar.addWidget(self.target)
        bar.addWidget(self.buildButton)
        self.summary = QLabel(objectName="featuresGraphSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.nodes = QTableWidget(0, len(NODE_COLUMNS), objectName="featuresGraphNodes")
        self.nodes.setHorizontalHeaderLabels(list(NODE_COLUMNS))
        self.nodes.setToolTip("The graph's nodes, most influential on the logit first: influence (the share of "
                              "the logit's attribution flowing through the node, along every path) and the direct "
                              "effect (its edge into the logit). Click a feature to intervene on it.")
        self.nodes.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.nodes.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.nodes.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.nodes.verticalHeader().setVisible(False)
        self.nodes.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        self.nodes.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.nodes.horizontalHeader().setStretchLastSection(True)
        self.view = AttributionGraphView()
        split = QSplitter(Qt.Orientation.Vertical, objectName="featuresGraphSplitter")
        split.addWidget(self.view)
        split.addWidget(self.nodes)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        line = self.fontMetrics().height()
        split.setSizes([30 * line, 10 * line])
        lay = QVBoxLayout(self)
        lay.addLayout(bar)
        lay.addWidget(self.summary)
        lay.addWidget(split, 1)
        self.view.nodeClicked.connect(self._node_clicked)
        self.nodes.currentCellChanged.connect(lambda row, *_: self._node_chosen(row))
        self.buildButton.clicked.connect(self.build)
        self.prompt.returnPressed.connect(self.build)
        features.cleared.connect(self._cleared)
        features.graph_ready.connect(self._show)
        features.failed.connect(lambda key, message: self.say(message, True) if key == GRAPH else None)
        features.focus.text_changed.connect(self._text_changed)
        self._cleared()

    def _text_changed(self, text: str) -> None:
        if not self.prompt.text():
            self.prompt.setText(text)

    def _cleared(self) -> None:
        self.graph = None
        self.view.set_graph(None)
        self.nodes.setRowCount(0)
        if not self.prompt.text():
            self.prompt.setText(self.features.focus.text)
        self.say("Build the graph of a prompt: how its next token's logit comes from the tokens, the features of "
                 "every MLP's transcoder and their errors.")

    def build(self) -> bool:
        started = self.features.build_graph(self.prompt.text(), self.target.text() or None)
        if started:
            self.say(f"Tracing the logit after “{html.escape(self.prompt.text())}”…")
        return started

    def _show(self, graph: Any) -> None:
        self.say(graph_words(graph))
        self.graph = graph
        self.view.set_graph(graph)
        direct = graph.adjacency[graph.target_index]
        order = sorted(range(len(graph.nodes)), key=lambda i: -float(graph.influence[i]))
        self.nodes.blockSignals(True)
        self.nodes.setRowCount(len(order))
        for row, i in enumerate(order):
            node = graph.nodes[i]
            cells = (node.label(), node.kind, f"{float(graph.influence[i]):.3f}", f"{float(direct[i]):+.3f}",
                     f"{node.activation:.3g}", node.describe())
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, i)
                self.nodes.setItem(row, c, item)
        self.nodes.blockSignals(False)

    def _node_chosen(self, row: int) -> None:
        item = self.nodes.item(row, 0) if row >= 0 else None
        if item is not None and self.graph is not None:
            self.view.mark(item.data(Qt.ItemDataRole.UserRole))
            self.nodeClicked.emit(self.graph.nodes[item.data(Qt.ItemDataRole.UserRole)])

    def _node_clicked(self, node: Any) -> None:
        """A node clicked in the graph (ringed there): its row selected in the table, and emitted once."""
        row = next((r for r in range(self.nodes.rowCount())
                    if self.nodes.item(r, 0).data(Qt.ItemDataRole.UserRole) == self.view.marked), -1)
        self.nodes.blockSignals(True)
        self.nodes.setCurrentCell(row, 0)
        self.nodes.blockSignals(False)
        if row >= 0:
            self.nodes.scrollToItem(self.nodes.item(row, 0))
        self.nodeClicked.emit(node)

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text if "<" in text else html.escape(text))
        self.summary.setStyleSheet("color: #b00020;" if error else "")


def graph_words(graph: Any) -> str:
    """The graph in one line: its target, logit and size."""
    features = sum(1 for n in graph.nodes if n.kind == "feature")
    return (f"Logit of <b>{html.escape(graph.nodes[graph.target_index].token)}</b>: {graph.logit:.3f} "
            f"(p = {graph.probability:.3f}; {graph.baseline:.3f} from the biases alone) · {len(graph.nodes)} nodes "
            f"kept, {features} of them features. Click a feature to intervene on it.")
