"""The Attention tab's layout at the window's first size (and a 1366×768 screen's): a 4-layer, 4-head model trained
from a preset shows its whole grid, at least 8 rows of the table with every column whole, a large map whose rows
are a line of text high, and the probe button unclipped; the splitters the user moves come back in the next
session. Every length is measured from the fonts the machine has."""
import math
from pathlib import Path

import pytest
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QApplication, QLabel

LONG = 60_000


@pytest.fixture(scope="module")
def run_4x4(tmp_path_factory):
    """The first preset as a 4-layer, 4-head model with l_max = 16, trained 30 steps: probes at steps 10, 20 and 30."""
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides([
        "model.L=4", "model.H=4", "model.d_e=32", "model.d_mlp=64", "model.l_max=16", "data.corpus=copy",
        "train.steps=30", "train.eval_interval=10", "train.eval_iters=1", "train.batch_size=4",
        "train.sample_tokens=0"])
    run_dir = Path(tmp_path_factory.mktemp("layout")) / "run"
    events = list(training.train(cfg, run_dir=run_dir))
    assert events[-1].status == "finished"
    return run_dir


def _show_probes(qtbot, w, run_dir, size):
    from fatstudio.core.inspect.probes import list_probes

    w.resize(*size)
    qtbot.waitUntil(lambda: (w.width(), w.height()) == size, timeout=5000)
    panel = w.attention_panel
    w.viewTabs.setCurrentWidget(w._attention_host)
    for step, path in list_probes(run_dir).items():  # as a training run adds them
        panel.add_probe(step, path)
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: panel.maps is not None and panel.probe_step == 30, timeout=LONG)
    qtbot.wait(300)  # laid out again once the strips, the lens and the scores have asked for their heights
    QApplication.processEvents()
    return panel


@pytest.mark.parametrize("size", [(1440, 920), (1350, 720)], ids=["first-size", "1366x768-screen"])
def test_a_4x4_model_shows_its_whole_grid_8_table_rows_a_readable_map_and_the_probe_button(qtbot, window, run_4x4,
                                                                                           size):
    """(1350, 720): the window's first size on a 1366×768 screen (`first_size`): the map gets what the grid's
    column and the text and the lens under it leave (in a small font, every query still labelled)."""
    panel = _show_probes(qtbot, window, run_4x4, size)
    grid, scroll = panel.headGrid, panel.browser.gridScroll
    assert grid.grid_shape() == (4, 5)  # 4 layers × (4 heads + their mean)
    viewport = scroll.viewport()
    assert grid.width() <= viewport.width() and grid.height() <= viewport.height()  # the whole grid, not scrolled
    assert not scroll.verticalScrollBar().isVisible() and not scroll.horizontalScrollBar().isVisible()

    table = panel.entropyTable
    assert table.rowCount() == 20
    assert table.viewport().height() >= 8 * table.rowHeight(0)  # 8 rows at least
    assert table.rowHeight(0) >= table.fontMetrics().height()
    assert not table.horizontalScrollBar().isVisible()  # every column whole
    header = table.horizontalHeader()
    assert sum(header.sectionSize(c) for c in range(header.count())) <= table.viewport().width()

    view = panel.attentionView
    view.grab()  # painted: its axes fitted
    T = len(view.query_axis.labels)
    if size == (1440, 920):  # every query labelled, each row a line of the labels' text high
        line = QFontMetricsF(view.query_axis._base_font).lineSpacing()
        assert T == 16 and view.query_axis.drawn == view.query_axis.labels
        assert view.plot.vb.height() / T >= line, (view.plot.vb.height(), T, line)

    for label in panel.findChildren(QLabel):  # every caption and note whole
        if label.isVisible() and label.wordWrap() and label.text():
            assert label.height() >= label.heightForWidth(label.width()), (label.objectName(), label.text())

    button = panel.sourceSwitch.probeButton
    assert button.text() == "Training probe, step 30" and button.isVisible()
    hint = button.sizeHint()
    assert button.width() >= hint.width() and button.height() >= hint.height()
    assert button.width() >= button.fontMetrics().horizontalAdvance(button.text())


def test_the_splitters_the_user_moved_come_back_and_the_others_are_laid_out_anew(qtbot, tmp_path, run_4x4):
    from fatstudio.app import MainWindow
    from fatstudio.qt import state

    def open_window():
        w = MainWindow(runs_root=str(tmp_path / "runs"))
        w.confirm_close = lambda: True
        qtbot.addWidget(w)
        w.show()
        return w

    w = open_window()
    panel = _show_probes(qtbot, w, run_4x4, (1440, 920))
    columns, overview, detail = panel.splitters()
    left = columns.sizes()[0]
    columns.moveSplitter(left + 40, 1)  # as a drag of the handle does
    overview.moveSplitter(overview.sizes()[0] - 40, 1)
    moved = columns.sizes(), overview.sizes()
    assert moved[0][0] == left + 40
    assert panel.user_sized(columns) and panel.user_sized(overview) and not panel.user_sized(detail)
    w.close()
    w.workspace.jobs.wait(LONG / 1000)
    saved = state.store().allKeys()
    assert "splitters/attentionColumns" in saved and "splitters/attentionDetail" not in saved  # laid out: not kept

    unshown = open_window()  # a session that does not show the maps: what was saved stays
    assert unshown.attention_panel is not None
    unshown.close()
    unshown.workspace.jobs.wait(LONG / 1000)
    assert state.store().allKeys() == saved

    again = open_window()
    panel = _show_probes(qtbot, again, run_4x4, (1440, 920))
    columns, overview, detail = panel.splitters()
    assert columns.sizes() == moved[0]  # as the user left them
    assert panel.user_sized(columns) and panel.user_sized(overview) and not panel.user_sized(detail)
    # the overview's grid part: restored while the scores' box is unfolded (its least height squeezes the others),
    # which then folds and gives its height to the table: near the user's, not exact
    assert overview.sizes()[0] == pytest.approx(moved[1][0], abs=0.12 * moved[1][0])
    again.close()
    again.workspace.jobs.wait(LONG / 1000)


@pytest.fixture
def panel_alone(qtbot, workspace):
    from fatstudio.qt.panels.attention.panel import AttentionPanel

    p = AttentionPanel(workspace)
    qtbot.addWidget(p)
    return p


def test_a_tall_experiment_tab_does_not_set_the_maps_least_height(qtbot, panel_alone):
    """The experiments scroll in their tabs: the tabs beside the map are no taller at least than the map's own
    tab needs, whatever the Patching view's controls need."""
    tabs = panel_alone.browser.viewTabs
    pages = [tabs.widget(i) for i in range(tabs.count())]
    assert panel_alone.patchingView.minimumSizeHint().height() > tabs.minimumSizeHint().height()
    assert tabs.minimumSizeHint().height() <= pages[0].minimumSizeHint().height() + tabs.tabBar().sizeHint().height() + 8


def test_the_attribution_charts_upward_labels_do_not_overlap(qtbot):
    """Bars thinner than a line of the labels' font: every n-th bar is labelled, n bars at least a line wide."""
    from fatstudio.qt.widgets.attribution_bars import AttributionBars, part_label

    bars = AttributionBars()
    qtbot.addWidget(bars)
    heads = [f"self/{ell}/{h}" for ell in range(4) for h in range(4)]
    names = ["biases", "embedding", *heads, *(f"mlp/{ell}" for ell in range(4))]
    bars.set_parts("title", names, [0.1 * (i % 3 - 1) for i in range(len(names))])
    bars.resize(220, 200)
    bars.grab()
    w = bars._plot_rect().width() / len(names)
    line = QFontMetricsF(bars.small_font()).height()
    assert w < line  # thinner than a line: written upwards, not one per bar
    assert bars.drawn == [part_label(n) for n in names][::math.ceil(line / w)]
