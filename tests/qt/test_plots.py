"""The live training plots: growing buffers, smoothing, downsampling settings, overlays, log axis."""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pyqtgraph")

from fatstudio.qt.widgets.forms import SciSpinBox, sci
from fatstudio.qt.widgets.plots import Series, SmoothedSeries, TrainingPlots


def test_series_doubles_and_keeps_points():
    s = Series(4)
    for i in range(0, 100, 7):
        s.extend(list(range(i, i + 7)), [float(j) for j in range(i, i + 7)])
    assert s.n == 105 and len(s._x) == 128  # doubled 4 → 128, never per point
    assert np.array_equal(s.x, np.arange(105)) and np.array_equal(s.y, np.arange(105.0))


def test_ema_is_incremental_and_debiased():
    ys = [4.0, 2.0, 3.0, 1.0, 5.0]
    s = SmoothedSeries(alpha=0.5)
    s.extend([0, 1], ys[:2])
    s.extend([2, 3, 4], ys[2:])
    acc, want = 0.0, []
    for t, y in enumerate(ys, 1):
        acc = 0.5 * acc + 0.5 * y
        want.append(acc / (1 - 0.5 ** t))
    assert np.allclose(s.smooth.y, want)
    assert s.smooth.y[0] == 4.0  # debiased: the first point is the first value
    s.set_alpha(0.0)
    assert np.allclose(s.smooth.y, ys)


def test_training_plots(qtbot):
    p = TrainingPlots()
    qtbot.addWidget(p)
    item = p.lossPlot.getPlotItem()
    assert p.lossPlot.objectName() == "lossPlot"
    assert item.ctrl.downsampleCheck.isChecked() and item.ctrl.clipToViewCheck.isChecked()
    assert item.ctrl.peakRadio.isChecked()
    p.append_steps([1, 2, 3], [3.0, 2.5, 2.0], [1e-4, 2e-4, 3e-4], [1.0, 0.9, 0.8], 1000.0)
    p.append_steps([4, 5], [1.9, 1.8], [3e-4, 3e-4], [0.7, 0.6], 1100.0)
    p.add_eval(5, 2.1)
    p.flush()  # drawing is throttled; flush draws now
    assert p.n_points() == 5
    assert len(p.trainRawCurve.getData()[0]) == 5 and len(p.valCurve.getData()[0]) == 1
    assert len(p.speedCurve.getData()[0]) == 2
    p.smoothingSlider.setValue(0)  # redraws at once
    assert p.trainCurve.getData()[0] is None or len(p.trainCurve.getData()[0]) == 0
    p.logCheck.setChecked(True)
    assert item.ctrl.logYCheck.isChecked()
    p.add_overlay("other", [{"step": 1, "train_loss": 3.0}, {"step": 2, "train_loss": 2.0, "val_loss": 2.2}])
    assert p.overlays() == ["other"] and p.clearOverlaysButton.isEnabled()
    p.clear_overlays()
    assert p.overlays() == [] and len(item.listDataItems()) == 3  # train raw, train smoothed, val
    p.load_metrics([{"step": 1, "train_loss": 2.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 5.0},
                    {"step": 2, "train_loss": 1.5, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 5.0,
                     "window_end": True, "val_loss": 1.7},
                    {"step": 3, "train_loss": 1.4, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 6.0,
                     "window_end": True}])
    assert p.n_points() == 3 and p.val.n == 1
    assert list(p.speed.x) == [2, 3] and list(p.speed.y) == [5.0, 6.0]  # one point per window, at its end


def test_sci_spin_box(qtbot):
    assert sci(3e-4) == "3e-4" and sci(0.001) == "0.001" and sci(2.5e-7) == "2.5e-7"
    w = SciSpinBox(minimum=1e-8, maximum=10.0)
    qtbot.addWidget(w)
    w.setValue(1e-3)
    w.stepBy(1)
    assert math.isclose(w.value(), 2e-3)
    w.stepBy(-2)
    assert math.isclose(w.value(), 5e-4)
    assert w.valueFromText("3e-4") == 3e-4


def test_steps_skipped_by_loss_scaling_leave_no_gap_value_in_the_gradient_plot(qtbot):
    plots = TrainingPlots()
    qtbot.addWidget(plots)
    plots.append_steps([1, 2, 3], [2.0, 1.9, 1.8], [1e-3] * 3, [0.5, None, 0.4], 1000.0)
    assert list(plots.grad.x) == [1, 3] and all(map(math.isfinite, plots.grad.y))
    plots.load_metrics([{"step": 1, "train_loss": 2.0, "lr": 1e-3, "grad_norm": 0.5},
                        {"step": 2, "train_loss": 1.9, "lr": 1e-3, "grad_norm": None, "skipped": True}])
    assert list(plots.grad.x) == [1] and list(plots.train.x) == [1, 2]


def test_export_curves_as_csv_and_png(qtbot, tmp_path):
    import csv

    from PySide6.QtGui import QImage

    plots = TrainingPlots()
    qtbot.addWidget(plots)
    plots.smoothingSlider.setValue(50)
    plots.append_steps([1, 2, 3], [3.0, 2.0, 1.0], [1e-4, 2e-4, 3e-4], [1.0, None, 0.5], 1000.0)
    plots.append_steps([4], [0.5], [3e-4], [0.4], 1200.0)
    plots.add_eval(3, 2.5)
    messages = []
    plots.exported.connect(messages.append)
    plots.ask_save_path = lambda kind: str(tmp_path / f"out.{kind}")  # the dialog's answer
    plots.curvesCsvButton.click()
    rows = list(csv.DictReader((tmp_path / "out.csv").open(encoding="utf-8")))
    assert list(rows[0]) == ["step", "train_loss", "smoothed", "val_loss", "lr", "grad_norm", "tokens_per_s"]
    assert [r["step"] for r in rows] == ["1", "2", "3", "4"]
    assert [float(r["train_loss"]) for r in rows] == [3.0, 2.0, 1.0, 0.5]
    assert float(rows[0]["smoothed"]) == 3.0 and float(rows[1]["smoothed"]) == pytest.approx((0.5 * 3 + 2) / 1.5)
    assert [r["val_loss"] for r in rows] == ["", "", "2.5", ""]
    assert float(rows[2]["lr"]) == 3e-4 and rows[1]["grad_norm"] == "" and float(rows[3]["grad_norm"]) == 0.4
    assert [r["tokens_per_s"] for r in rows] == ["", "", "1000.0", "1200.0"]  # once per emission window
    plots.curvesPngButton.click()
    image = QImage(str(tmp_path / "out.png"))
    assert not image.isNull() and image.width() >= plots.lossPlot.width() and image.height() > plots.lossPlot.height()
    assert messages == [f"Curves saved to {tmp_path / 'out.csv'}", f"Curves saved to {tmp_path / 'out.png'}"]
    plots.ask_save_path = lambda kind: str(tmp_path / "missing" / f"out.{kind}")
    plots.curvesCsvButton.click()
    assert messages[-1].startswith("Could not export the curves")
    plots.ask_save_path = lambda kind: None  # cancelled: nothing written, nothing said
    plots.curvesCsvButton.click()
    assert len(messages) == 3
