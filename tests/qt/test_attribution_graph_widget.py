"""The attribution graph view: every node drawn in its layer's band above its position, none overlapping at the
size of a 1366×768 screen; each edge drawn; hovering a node shows what it is and its activation; a click on a
node emits it, a click beside the nodes nothing."""
import itertools
from dataclasses import replace

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsEllipseItem, QGraphicsLineItem, QGraphicsSimpleTextItem

from fatstudio.core.inspect.features.graph import AttributionGraph, Node, influence
from fatstudio.qt.widgets.attribution_graph import AttributionGraphView

TOKENS = ["d", "e", "f", "\n"]


def _graph() -> AttributionGraph:
    """Embeddings at 4 positions, eight features of layer 0 at the last position (a crowded cell), one of layer
    1, an error node, the logit; edges from each layer to the next."""
    nodes = [Node("embedding", -1, t, -1, 1.0, tok) for t, tok in enumerate(TOKENS)]
    nodes += [Node("feature", 0, 3, i, 0.5 + i, "\n") for i in range(8)]
    nodes += [Node("feature", 1, 2, 41, 1.5, "f"), Node("error", 1, 3, -1, 0.2, "\n"), Node("logit", 2, 3, -1, 3.0, "x")]
    n = len(nodes)
    A = torch.zeros(n, n, dtype=torch.float64)
    for f in range(4, 12):
        A[f, 3], A[12, f], A[14, f] = 1.0, 0.1 * (f - 3), -0.05 * f
    A[14, 12], A[14, 13], A[12, 2] = 2.0, -0.5, 0.7
    return AttributionGraph(list(TOKENS), nodes, A, influence(A, n - 1), 7, 3.0, 0.5, 0.4)


@pytest.fixture
def view(qtbot):
    v = AttributionGraphView()
    v.resize(1300, 560)  # the graph's part of a 1366×768 window
    qtbot.addWidget(v)
    v.show()
    v.set_graph(_graph())
    return v


def test_each_node_is_drawn_in_its_layer_s_band_above_its_position_without_overlaps(view):
    g = view.graph
    assert len(view.node_items) == len(g.nodes) == 15
    centre = [item.sceneBoundingRect().center() for item in view.node_items]
    by_layer = {}
    for n, c in zip(g.nodes, centre):
        by_layer.setdefault(n.layer, []).append(c.y())
    bands = [by_layer[layer] for layer in (2, 1, 0, -1)]  # logit, layer 1, layer 0, embeddings: top to bottom
    assert all(max(upper) < min(lower) for upper, lower in zip(bands, bands[1:]))
    xs = [c.x() for n, c in zip(g.nodes, centre) if n.kind == "embedding"]
    assert xs == sorted(xs) and len(set(xs)) == 4
    for a, b in itertools.combinations(view.node_items, 2):
        assert not a.sceneBoundingRect().intersects(b.sceneBoundingRect())
    texts = [i for i in view.scene().items() if isinstance(i, QGraphicsSimpleTextItem)]
    assert {"emb", "L0", "L1", "logit", "d", "↵"} <= {t.text() for t in texts}
    for a, b in itertools.combinations(texts, 2):
        assert not a.sceneBoundingRect().intersects(b.sceneBoundingRect()), (a.text(), b.text())
    lines = [i for i in view.scene().items() if isinstance(i, QGraphicsLineItem)]
    assert len(lines) == view.edge_count == int((g.adjacency != 0).sum()) == 27
    shown = view.mapFromScene(view.sceneRect()).boundingRect()
    assert view.viewport().rect().contains(shown.adjusted(1, 1, -1, -1))  # all of it in sight


def test_hovering_a_node_tells_what_it_is_and_its_activation(view):
    item = view.node_items[12]
    assert item.toolTip().startswith("feature 42 of mlp/1 at position 3 ('f'): activation 1.5\ninfluence on the logit")
    assert view.node_items[13].toolTip().startswith("error of mlp/1's transcoder at position 4 ('\\n')")
    assert view.node_items[-1].toolTip().startswith("logit of 'x' at position 4: 3")
    at = view.mapFromScene(item.sceneBoundingRect().center())
    assert view.node_at(at) == view.graph.nodes[12]


def test_a_click_on_a_node_emits_it_and_a_click_beside_them_nothing(qtbot, view):
    item = view.node_items[7]
    with qtbot.waitSignal(view.nodeClicked, timeout=1000) as got:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.mapFromScene(item.sceneBoundingRect().center()))
    assert got.args == [view.graph.nodes[7]] and got.args[0].feature == 3
    assert view.marked == 7 and view.ring.sceneBoundingRect().contains(item.sceneBoundingRect())
    view.mark(8)  # chosen in the table: one ring, around it
    assert view.ring.sceneBoundingRect().contains(view.node_items[8].sceneBoundingRect())
    assert sum(isinstance(i, QGraphicsEllipseItem) and i.data(0) is None for i in view.scene().items()) == 1
    corner = view.mapFromScene(view.sceneRect().topLeft())
    with qtbot.assertNotEmitted(view.nodeClicked):
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=corner)


def test_without_a_graph_it_says_what_to_do(view):
    view.set_graph(None, "Train a transcoder for every MLP layer first.")
    texts = [i.text() for i in view.scene().items() if isinstance(i, QGraphicsSimpleTextItem)]
    assert texts == ["Train a transcoder for every MLP layer first."] and view.node_items == []


def test_a_feature_edit_s_result_is_shown_as_the_head_ablation_shows_its(qtbot):
    from fatstudio.core.inspect.features.dictionary import Dictionary
    from fatstudio.core.inspect.features.interventions import FeatureEdit, FeatureIntervention
    from fatstudio.qt.widgets.feature_edit import FeatureEditView

    d = Dictionary("transcoder", "mlp/1/in", "mlp/1/out", 4, 4, 8, 2)
    result = FeatureIntervention(["a", "<b>", "c"], [None, 0.5, 0.25], [None, 0.1, 0.5], (FeatureEdit(d, 4, 0.0, 2),),
                                 ("x", "y"), (0.6, 0.3), (0.2, 0.7))
    view = FeatureEditView()
    qtbot.addWidget(view)
    assert "Click a feature" in view.summary.text() and view.changes.table.rowCount() == 0
    view.show_result(result)
    assert "feature 5 of mlp/1 zeroed at position 3" in view.summary.text() and "0.6000 to 0.2000" in view.summary.text()
    cells = lambda t: [[t.item(r, c).text() for c in range(t.columnCount())] for r in range(t.rowCount())]
    assert cells(view.nextTable) == [["x", "0.6000", "0.2000", "-0.4000"], ["y", "0.3000", "0.7000", "+0.4000"]]
    assert cells(view.changes.table)[1] == ["2", "<b>", "0.5000", "0.1000", "-0.4000"]
    assert view.findChild(object, "featureEditTable") is view.changes.table
    assert view.changes.text.token_count() == 3
    assert "Logit of" not in view.summary.text()
    view.show_result(replace(result, target="x", logit_before=2.0, logit_after=1.5))
    assert "Logit of <code>x</code>: 2.000 → 1.500 (Δ -0.500, live)." in view.summary.text()
    assert "direct effect" not in view.summary.text()
    view.show_result(replace(result, target="x", logit_before=2.0, logit_after=2.5, direct_effect=0.689))
    said = view.summary.text()
    assert "Logit of <code>x</code>: 2.000 → 2.500 (Δ +0.500, live)" in said
    assert "direct effect of this feature on it: +0.689" in said and "by -0.689" in said and "frozen" in said
    view.show_result(None, "Nothing edited yet.")
    assert view.summary.text() == "Nothing edited yet." and view.nextTable.rowCount() == 0


def test_a_graph_too_wide_for_the_view_is_shrunk_only_so_far_and_scrolls(qtbot, view):
    view.resize(int(view.sceneRect().width() * 0.4), int(view.sceneRect().height()))  # it would need 0.4×
    qtbot.wait(10)
    assert view.transform().m11() == pytest.approx(0.75)
    assert view.horizontalScrollBar().maximum() > 0


def test_hovering_a_node_makes_its_edges_stand_out(qtbot, view):
    lines = [i for i in view.scene().items() if isinstance(i, QGraphicsLineItem)]
    at = view.mapFromScene(view.node_items[12].sceneBoundingRect().center())  # 9 in, 1 out
    qtbot.mouseMove(view.viewport(), at)
    qtbot.waitUntil(lambda: view.hovered == 12, timeout=1000)
    bright = [line for line in lines if line.opacity() == 1.0]
    assert len(bright) == 10 and all(line.opacity() < 0.5 for line in lines if line not in bright)
    view.highlight(None)
    assert all(line.opacity() == 1.0 for line in lines)
