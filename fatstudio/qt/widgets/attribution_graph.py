"""An attribution graph (`core.inspect.features.graph`) drawn in layers: x the position, y the layer (the token
embeddings at the bottom, each MLP layer's features and error node above them, the logit at the top). A node's
size and colour grow with its influence on the logit; an edge's width with its weight, red when it raises its
target, blue when it lowers it. Hovering a node shows what it is and its activation and makes its edges stand
out (the others faint); clicking it emits
``nodeClicked`` with the `Node` (the Features tab opens its dashboard or edits it). The view scales the graph
to fit, within `MIN_ZOOM` … `MAX_ZOOM` so that its text stays readable (a larger graph scrolls); sizes come
from the font's metrics.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsEllipseItem,
    QGraphicsItem,
    QGraphicsLineItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsView,
    QWidget,
)

from ...core.inference.prompting import display_token

if TYPE_CHECKING:
    from ...core.inspect.features.graph import AttributionGraph, Node

MAX_ZOOM, MIN_ZOOM = 1.5, 0.75  # the most a small graph is enlarged, a large one shrunk (then it scrolls)
ROWS = 4  # the most rows of nodes in a layer's band; a crowded position is drawn wider
KIND_COLORS = {"embedding": QColor(120, 170, 215), "error": QColor(150, 150, 150), "logit": QColor(90, 170, 90)}
FEATURE = (QColor(253, 224, 190), QColor(217, 95, 2))  # a feature's colour from no influence to the most
RISE, FALL = QColor(214, 96, 77), QColor(67, 147, 195)  # as `token_view.signed_tint`
MARK = "#ff8c00"  # the ring around the node clicked
FAINT = 0.12  # the opacity of the edges of other nodes than the one hovered


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    t = min(max(t, 0.0), 1.0)
    return QColor(*(round(x + (y - x) * t) for x, y in ((a.red(), b.red()), (a.green(), b.green()),
                                                          (a.blue(), b.blue()))))


class AttributionGraphView(QGraphicsView):
    """The graph of `set_graph` (None: empty, with a line saying why). ``nodeClicked(Node)``."""

    nodeClicked = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attributionGraphView")
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.graph: AttributionGraph | None = None
        self.node_items: list[QGraphicsItem] = []  # one per node of the graph, in its order
        self.edge_count = 0
        self.lines: dict[int, list[QGraphicsLineItem]] = {}  # each node's edges, in and out
        self.hovered: int | None = None  # the node whose edges stand out
        self.marked: int | None = None  # the node clicked, ringed (`mark`)
        self.ring: QGraphicsEllipseItem | None = None
        self.setMouseTracking(True)
        self.set_graph(None)

    # ---- drawing --------------------------------------------------------------------------------------------
    def set_graph(self, graph: AttributionGraph | None, empty: str = "Build a graph to see it here.") -> None:
        """Draw ``graph`` (a pruned one reads best), or ``empty`` when None."""
        scene = self.scene()
        scene.clear()
        self.graph, self.node_items, self.edge_count, self.lines, self.hovered = graph, [], 0, {}, None
        self.marked, self.ring = None, None
        if graph is None:
            scene.addSimpleText(empty)
            self._fit()
            return
        fm = QFontMetricsF(self.font())
        spot = fm.height() * 0.9  # one node's slot
        layers = graph.nodes[-1].layer  # L: the logit's row; embeddings −1
        per_cell: dict[tuple[int, int], int] = {}
        for n in graph.nodes:
            per_cell[(n.layer, n.position)] = per_cell.get((n.layer, n.position), 0) + 1
        rows = min(ROWS, max(per_cell.values()))  # node rows in a layer's band
        wide = [max((-(-c // rows) for (_, p), c in per_cell.items() if p == t), default=1)
                for t in range(len(graph.tokens))]  # nodes side by side at each position
        labels = [display_token(t, 6) for t in graph.tokens]
        widths = [max(w * spot, fm.horizontalAdvance(label)) + spot * 0.6 for w, label in zip(wide, labels)]
        left = fm.horizontalAdvance("logit ") + spot
        xs = [left + sum(widths[:t]) for t in range(len(widths) + 1)]
        row_h = (rows + 1) * spot
        y_of = lambda layer: (layers - layer) * row_h + row_h / 2  # a band's middle: the logit on top
        for layer in range(-1, layers + 1):
            label = scene.addSimpleText("emb" if layer < 0 else "logit" if layer == layers else f"L{layer}")
            label.setPos(0, y_of(layer) - fm.height() / 2)
        for t, token in enumerate(labels):
            text = scene.addSimpleText(token)
            text.setPos((xs[t] + xs[t + 1] - fm.horizontalAdvance(token)) / 2, y_of(-1) + row_h / 2)
        top = max(float(graph.influence[:-1].max()), 1e-12) if len(graph.nodes) > 1 else 1.0
        seen: dict[tuple[int, int], int] = {}
        centres: list[QPointF] = []
        for i, n in enumerate(graph.nodes):
            cell = (n.layer, n.position)
            k, count, across = seen.get(cell, 0), per_cell[cell], wide[n.position]
            seen[cell] = k + 1
            in_row = min(across, count - (k // across) * across)
            x = (xs[n.position] + xs[n.position + 1]) / 2 + (k % across - (in_row - 1) / 2) * spot
            y = y_of(n.layer) + (k // across - (-(-count // across) - 1) / 2) * spot
            centres.append(QPointF(x, y))
            share = 1.0 if n.kind == "logit" else float(graph.influence[i]) / top
            self.node_items.append(self._node(n, x, y, spot, share, float(graph.influence[i])))
        self._edges(graph, centres, spot)
        self._fit()

    def _node(self, n: Node, x: float, y: float, spot: float, share: float, influence: float) -> QGraphicsItem:
        r = spot * (0.22 + 0.22 * min(max(share, 0.0), 1.0) ** 0.5)
        item: QGraphicsRectItem | QGraphicsEllipseItem
        if n.kind == "error":
            item = QGraphicsRectItem(QRectF(x - r, y - r, 2 * r, 2 * r))
        else:
            item = QGraphicsEllipseItem(QRectF(x - r, y - r, 2 * r, 2 * r))
        color = _mix(*FEATURE, share ** 0.5) if n.kind == "feature" else KIND_COLORS[n.kind]
        item.setBrush(QBrush(color))
        item.setPen(QPen(color.darker(150), 0))
        item.setToolTip(f"{n.describe()}\ninfluence on the logit {influence:.3g}")
        item.setData(0, n)
        item.setData(1, len(self.node_items))
        item.setZValue(1)
        item.setAcceptHoverEvents(True)
        item.setCursor(Qt.CursorShape.PointingHandCursor)
        self.scene().addItem(item)
        return item

    def _edges(self, graph: AttributionGraph, centres: list[QPointF], spot: float) -> None:
        edges = graph.edges()
        self.edge_count = len(edges)
        big = max((abs(w) for *_, w in edges), default=1.0) or 1.0
        for s, t, w in sorted(edges, key=lambda e: abs(e[2])):  # the strongest drawn last, on top
            share = abs(w) / big
            color = QColor(RISE if w > 0 else FALL)
            color.setAlphaF(0.08 + 0.8 * share)
            pen = QPen(color, spot * (0.03 + 0.3 * share))
            pen.setCosmetic(False)
            line = self.scene().addLine(centres[s].x(), centres[s].y(), centres[t].x(), centres[t].y(), pen)
            line.setZValue(0)
            for end in (s, t):
                self.lines.setdefault(end, []).append(line)

    def _fit(self) -> None:
        rect = self.scene().itemsBoundingRect().adjusted(-8, -8, 8, 8)
        self.scene().setSceneRect(rect)
        view = self.viewport().size()
        scale = max(MIN_ZOOM, min(MAX_ZOOM, view.width() / rect.width(), view.height() / rect.height()))
        self.resetTransform()
        self.scale(scale, scale)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    # ---- clicking ---------------------------------------------------------------------------------------------
    def node_at(self, pos) -> Node | None:
        """The node drawn at ``pos`` (view coordinates), if any."""
        for item in self.items(pos):
            node = item.data(0)
            if node is not None:
                return node
        return None

    def highlight(self, i: int | None) -> None:
        """Make node ``i``'s edges stand out (the others faint); None: all as drawn."""
        if i == self.hovered:
            return
        self.hovered = i
        mine = set(map(id, self.lines.get(i, []))) if i is not None else set()
        for lines in self.lines.values():
            for line in lines:
                line.setOpacity(1.0 if i is None or id(line) in mine else FAINT)
                line.setZValue(2 if id(line) in mine else 0)

    def mark(self, i: int | None) -> None:
        """Ring node ``i`` (the one clicked or chosen in the table); None: no ring."""
        if self.ring is not None:
            self.scene().removeItem(self.ring)
        self.marked, self.ring = i, None
        if i is None or not 0 <= i < len(self.node_items):
            return
        box = self.node_items[i].sceneBoundingRect()
        pad = QFontMetricsF(self.font()).height() * 0.2
        self.ring = self.scene().addEllipse(box.adjusted(-pad, -pad, pad, pad), QPen(QColor(MARK), pad * 0.8))
        self.ring.setZValue(3)

    def mouseMoveEvent(self, event) -> None:
        item = next((it for it in self.items(event.position().toPoint()) if it.data(1) is not None), None)
        self.highlight(None if item is None else int(item.data(1)))
        super().mouseMoveEvent(event)

    def mousePressEvent(self, event) -> None:
        node = self.node_at(event.position().toPoint())
        if node is not None and event.button() == Qt.MouseButton.LeftButton:
            self.mark(next(i for i, n in enumerate(self.graph.nodes) if n is node) if self.graph else None)
            self.nodeClicked.emit(node)
            event.accept()
            return
        super().mousePressEvent(event)


__all__ = ["AttributionGraphView"]
