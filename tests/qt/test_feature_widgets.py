"""The feature list (features numbered from 1, sorted by any column, the chosen feature 0-based) and the feature
dashboard (contexts with the activating token marked and lined up, histogram, promoted and suppressed tokens, the
activation on the Prompt text) show the data they are given."""
import numpy as np
from PySide6.QtCore import QPoint, Qt

from fatstudio.core.inspect.features.dashboard import (
    Context,
    Dashboard,
    FeatureStats,
    Histogram,
    LogitEffects,
    TextActivations,
)
from fatstudio.qt.widgets.feature_dashboard import FeatureDashboard, tint_css
from fatstudio.qt.widgets.feature_list import FeatureList
from fatstudio.qt.widgets.token_view import weight_tint

STATS = [FeatureStats(0, 0.25, 1.5, "a b"), FeatureStats(1, 0.0, 0.0, ""), FeatureStats(2, 0.5, 0.75, "␣"),
         FeatureStats(3, 0.125, 3.0, "x")]


def cells(view, column):
    m = view.model()
    return [m.index(r, column).data() for r in range(m.rowCount())]


def test_the_list_numbers_features_from_1_and_sorts_by_each_column(qtbot):
    view = FeatureList()
    qtbot.addWidget(view)
    view.set_stats(STATS)
    assert cells(view, 0) == ["1", "2", "3", "4"] and cells(view, 3) == ["a b", "", "␣", "x"]
    assert cells(view, 1) == ["25.00%", "0.0e+00", "50.00%", "12.50%"] and cells(view, 2) == ["1.5", "0", "0.75", "3"]
    view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert view.shown() == [2, 0, 3, 1] and cells(view, 0) == ["3", "1", "4", "2"]
    view.sortByColumn(2, Qt.SortOrder.DescendingOrder)
    assert view.shown() == [3, 0, 2, 1]
    view.sortByColumn(3, Qt.SortOrder.AscendingOrder)
    assert view.shown() == [1, 0, 3, 2]  # "" < "a b" < "x" < "␣"
    view.set_stats(STATS)  # new rows keep the header's sort
    assert view.shown() == [1, 0, 3, 2]
    header = view.horizontalHeader()
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(header.sectionViewportPosition(0) + 5, header.height() // 2))
    ascending = header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
    assert header.sortIndicatorSection() == 0 and view.shown() == ([0, 1, 2, 3] if ascending else [3, 2, 1, 0])


def test_choosing_a_row_emits_the_feature_and_the_choice_follows_it_through_a_sort(qtbot):
    view = FeatureList()
    qtbot.addWidget(view)
    view.set_stats(STATS)
    view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
    got = []
    view.featureChosen.connect(got.append)
    rect = view.visualRect(view.model().index(2, 1))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert got == [2] and view.current_feature() == 2  # the third row: feature 3 in the app, index 2
    view.sortByColumn(1, Qt.SortOrder.DescendingOrder)  # feature 3 moves from the third row to the first
    assert view.shown()[0] == 2 and view.currentIndex().row() == 0 and view.current_feature() == 2
    view.select_feature(3)
    assert got == [2, 3] and view.current_feature() == 3
    dead = view.model().index(view.shown().index(1), 0)
    assert dead.data(Qt.ItemDataRole.ForegroundRole) is not None and "never active" in dead.data(Qt.ItemDataRole.ToolTipRole)


def dashboard(index=4):
    contexts = [Context(list("ab x\n"), [0.0, 0.0, 0.0, 2.0, 0.0], 3, 40), Context(list("zx"), [0.0, 1.0], 1, 7),
                Context(list("a b"), [0.0, 0.5, 0.0], 1, 9)]
    return Dashboard(FeatureStats(index, 0.1, 1.5, "x"), contexts, Histogram([0.0, 1.0, 2.0], [1, 1], 98),
                     LogitEffects([("y", 0.5), ("z", 0.25)], [("q", -0.75)], "W_u (γ ⊙ (d − mean d))"))


def test_the_dashboard_shows_contexts_with_the_token_marked_histogram_and_logit_effects(qtbot):
    w = FeatureDashboard()
    qtbot.addWidget(w)
    w.show_dashboard(dashboard())
    assert "Feature 5" in w.title.text() and "10.00%" in w.title.text()  # index 4, numbered from 1
    lines = [line.replace("\xa0", " ") for line in w.contexts.toPlainText().splitlines() if line.strip()]
    assert lines == ["2 ", "ab x↵", "1 ", "  zx", "0.5 ", "  a␣b"]  # the marked tokens lined up; a space as ␣
    body = w.contexts.toHtml()
    assert body.count("text-decoration: underline") == 3  # the marked tokens, one a context
    assert tint_css(1.0) in body.lower() and tint_css(0.5) in body.lower()  # x at 2 (the largest) and at 1
    assert w.histogram_counts() == [1, 1] and "98 inactive" in w.histogram.getPlotItem().titleLabel.text
    promoted = [(w.promoted.item(r, 0).text(), w.promoted.item(r, 1).text()) for r in range(w.promoted.rowCount())]
    assert promoted == [("y", "+0.500"), ("z", "+0.250")]
    assert [w.suppressed.item(0, c).text() for c in range(2)] == ["q", "-0.750"] and w.suppressed.rowCount() == 1
    assert "γ" in w.logitNote.text()


def test_the_prompt_text_is_tinted_by_the_feature_s_activation(qtbot):
    w = FeatureDashboard()
    qtbot.addWidget(w)
    w.show_dashboard(dashboard(index=1))
    acts = np.zeros((3, 4))
    acts[1, 1], acts[2, 1], acts[0, 0] = 1.0, 4.0, 9.0  # feature 1 on "b" and "c"; feature 0 elsewhere
    w.show_text(TextActivations(["a", "b", "c"], acts))
    v = w.promptTokens
    assert v.tokens() == ["a", "b", "c"] and v.color(0) is None
    assert v.color(1) == weight_tint(0.25) and v.color(2) == weight_tint(1.0)  # against the text's largest, 4
    assert v.tooltip(2) == "activation 4"
    w.clear()
    assert v.token_count() == 0 and w.histogram_counts() == [] and w.promoted.rowCount() == 0


def test_a_dead_feature_says_so(qtbot):
    w = FeatureDashboard()
    qtbot.addWidget(w)
    w.show_dashboard(Dashboard(FeatureStats(0, 0.0, 0.0, ""), [], Histogram([0.0, 1.0], [0], 100),
                               LogitEffects([], [], "")))
    assert "Feature 1" in w.title.text() and "never active" in w.title.text()
    assert "No validation token" in w.contexts.toPlainText()


def test_long_contexts_scroll_to_the_marked_column_and_the_parts_keep_room_for_their_headings(qtbot):
    from dataclasses import replace

    from PySide6.QtGui import QTextCursor

    long = Context(list("x" * 80 + "M" + "y" * 8), [0.0] * 80 + [2.0] + [0.0] * 8, 80, 3)
    w = FeatureDashboard()
    qtbot.addWidget(w)
    em = w.fontMetrics().horizontalAdvance("m")
    w.resize(w.minimumSizeHint().width(), 30 * w.fontMetrics().height())
    w.show()
    w.show_dashboard(replace(dashboard(), contexts=[long]))
    doc = w.contexts.document()
    cursor = QTextCursor(doc)
    cursor.setPosition(doc.toPlainText().index("M") + 1)
    x = w.contexts.cursorRect(cursor).left()
    assert w.contexts.horizontalScrollBar().value() > 0 and 0 <= x < w.contexts.viewport().width()  # in view
    for table, heading in ((w.promoted, "promotes"), (w.suppressed, "suppresses")):
        assert table.width() >= table.fontMetrics().horizontalAdvance(f"{heading} +0.000") + 2 * em
    assert w.histogram.width() >= 16 * em and w.contexts.width() >= 16 * em
    assert w.histogram.getPlotItem().titleLabel.item.boundingRect().width() <= w.histogram.width()  # not cut
