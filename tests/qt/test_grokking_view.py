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
    qtbot.waitUntil(lambda: view.viewRange()[0][1] >= g.grokked_step, timeout=5000)
    assert view.sceneBoundingRect().contains(g.marker.label.sceneBoundingRect())
    g.resize(1400, 250)
    qtbot.waitUntil(lambda: view.sceneBoundingRect().contains(g.marker.label.sceneBoundingRect()), timeout=5000)
