"""The grokking lab's views: shown in the Train panel for the grokking preset (a "modadd" run) in place of the
small plots, hidden for other presets; the accuracy plot marks the step where validation accuracy passed 95 %,
and the Fourier bar chart scrubs through the evaluations."""
import pytest

pytest.importorskip("pyqtgraph")

from PySide6.QtWidgets import QComboBox

from fatstudio.core.training import Evaluation


def _rows(accuracies):
    """Synthetic metrics.jsonl rows: a step row, then an evaluation every 100 steps with these val accuracies."""
    rows = []
    for i, acc in enumerate(accuracies, 1):
        rows.append({"step": 100 * i - 1, "train_loss": 1.0, "lr": 1e-3, "grad_norm": 1.0})
        rows.append({"step": 100 * i, "train_loss": 0.1, "lr": 1e-3, "grad_norm": 1.0, "eval_train_loss": 0.1,
                     "val_loss": 2.0 * (1 - acc), "accuracy": acc, "train_accuracy": 1.0, "weight_norm": 30.0 - i,
                     "embed_fourier": [0.1 * (k == i % 5) for k in range(5)]})
    return rows


def test_the_grokking_preset_shows_the_grokking_views_and_marks_95_percent(qtbot, window):
    w = window
    combo = w.findChild(QComboBox, "presetCombo")
    assert combo.findData("grokking") >= 0
    combo.setCurrentIndex(combo.findData("grokking"))
    combo.activated.emit(combo.currentIndex())  # as a user's pick
    g = w.plots.grokking
    qtbot.waitUntil(lambda: g.isVisible(), timeout=5000)
    assert not w.plots.lrPlot.isVisible() and w.plots.lossPlot.isVisible()
    for name in ("grokAccuracyPlot", "weightNormPlot", "fourierPlot"):
        assert g.findChild(type(g.accuracyPlot), name).isVisible(), name

    w.plots.load_metrics(_rows([0.1, 0.3, 0.94]))  # not yet 95 %: no marker
    assert g.grokked_step is None and not g.marker.isVisible()
    assert "not reached 95%" in g.accuracyLegend.text()
    w.plots.load_metrics(_rows([0.1, 0.3, 0.94, 0.96, 1.0]))
    assert g.grokked_step == 400 and g.marker.isVisible() and g.marker.value() == 400
    assert "step 400" in g.accuracyLegend.text()
    x, y = g.valAccCurve.getData()
    assert list(x) == [100, 200, 300, 400, 500] and list(y) == [0.1, 0.3, 0.94, 0.96, 1.0]
    assert list(g.trainAccCurve.getData()[1]) == [1.0] * 5 and list(g.normCurve.getData()[1]) == [29, 28, 27, 26, 25]
    assert g.shown_spectrum() == (500, [0.1, 0, 0, 0, 0])  # the latest evaluation's spectrum…
    g.stepSlider.setValue(1)  # …scrubbed back to the second
    assert g.shown_spectrum() == (200, [0, 0, 0.1, 0, 0]) and "step 200" in g.stepLabel.text()
    assert g.scrubLine.value() == 200

    g.add_evaluation(Evaluation(600, 0.1, 0.1, 1.0, 1.0, 24.0, (0.2, 0, 0, 0, 0)))  # live, as the trainer says
    assert list(g.valAccCurve.getData()[0])[-1] == 600 and g.stepSlider.maximum() == 5
    assert g.shown_spectrum()[0] == 200  # the slider moved by hand stays

    w.plots.clear()  # no run shown: the plan of the preset picked
    combo.setCurrentIndex(0)  # another preset: the small plots are back, the grokking views gone
    combo.activated.emit(0)
    qtbot.waitUntil(lambda: not g.isVisible(), timeout=5000)
    assert w.plots.lrPlot.isVisible() and w.plots.gradPlot.isVisible() and w.plots.speedPlot.isVisible()


@pytest.mark.parametrize("accuracies", [[0.1, 0.3, 0.5, 0.7, 0.96],  # passed at the last evaluation: right edge
                                        [0.1, 0.3, 0.96, 1.0, 1.0], [0.96, 1.0, 1.0, 1.0, 1.0]])
def test_the_95_percent_label_stays_inside_the_accuracy_plot(qtbot, accuracies):
    from fatstudio.qt.widgets.grokking_plots import GrokkingPlots

    g = GrokkingPlots()
    qtbot.addWidget(g)
    g.resize(1000, 250)  # the accuracy plot about as wide as in the window
    g.show()
    g.load_metrics(_rows(accuracies))
    view = g.accuracyPlot.getPlotItem().getViewBox()
    assert view.viewRange()[0][1] >= g.grokked_step  # the step axis reaches the marker at once
    qtbot.waitUntil(lambda: view.sceneBoundingRect().contains(g.marker.label.sceneBoundingRect()), timeout=5000)
    g.resize(1400, 250)
    qtbot.waitUntil(lambda: view.sceneBoundingRect().contains(g.marker.label.sceneBoundingRect()), timeout=5000)


def test_one_evaluation_is_a_dot_at_its_step_without_a_scrub_line(qtbot):
    """A run's first evaluation: no line to draw, so a dot on each curve at its step on an axis from 0, and no
    grey scrub line (nothing to scrub between yet); the second evaluation brings the line back."""
    from fatstudio.qt.widgets.grokking_plots import GrokkingPlots

    g = GrokkingPlots()
    qtbot.addWidget(g)
    g.resize(1000, 250)
    g.show()
    g.load_metrics(_rows([0.3]))
    for curve in (g.trainAccCurve, g.valAccCurve, g.normCurve):
        assert list(curve.getData()[0]) == [100] and curve.opts["symbol"] == "o"
    assert not g.scrubLine.isVisible() and not g.marker.isVisible()
    (x0, x1), _ = g.accuracyPlot.getPlotItem().getViewBox().viewRange()
    assert x0 <= 0 and 100 <= x1 < 120  # the dot at the right end of 0…100, not a lone line mid-plot
    assert g.normPlot.getPlotItem().getViewBox().viewRange()[0][0] <= 0
    g.add_evaluation(Evaluation(200, 0.1, 0.1, 0.5, 1.0, 24.0, (0.2, 0, 0, 0, 0)))
    assert g.scrubLine.isVisible() and g.scrubLine.value() == 200


def test_the_fourier_bars_keep_one_height_axis_while_scrubbing(qtbot):
    """The bar chart's height axis is the largest share of any evaluation (with a little room), the same at every
    step of the slider, so bars compare across steps; a later evaluation with a higher peak raises it."""
    from fatstudio.qt.widgets.grokking_plots import GrokkingPlots

    g = GrokkingPlots()
    qtbot.addWidget(g)
    g.show()
    rows = _rows([0.1, 0.3, 0.6, 0.9])
    for i, r in enumerate(r for r in rows if "embed_fourier" in r):
        r["embed_fourier"] = [0.02 * (i + 1), 0.01, 0.01, 0.01, 0.01]  # peaks 0.02 … 0.08
    g.load_metrics(rows)
    view = g.fourierPlot.getPlotItem().getViewBox()
    tops = []
    for index in range(g.stepSlider.maximum() + 1):
        g.stepSlider.setValue(index)
        tops.append(view.viewRange()[1])
    assert len({tuple(t) for t in tops}) == 1  # one axis over the scrub
    assert tops[0][0] == 0 and 0.08 <= tops[0][1] <= 0.09
    g.add_evaluation(Evaluation(500, 0.1, 0.1, 1.0, 1.0, 24.0, (0.3, 0, 0, 0, 0)))
    assert 0.3 <= view.viewRange()[1][1] <= 0.32
