"""The live training plots: growing buffers, smoothing, downsampling settings, overlays, log axis, bits per
character, the reference curve of a preset's settings."""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("pyqtgraph")

import pyqtgraph as pg
from PySide6.QtCore import Qt

from fatstudio.qt.widgets.curves import Series, SmoothedSeries
from fatstudio.qt.widgets.forms import SciSpinBox, sci
from fatstudio.qt.widgets.plots import TrainingPlots


def test_series_doubles_and_keeps_points():
    s = Series(4)
    for i in range(0, 100, 7):
        s.extend(list(range(i, i + 7)), [float(j) for j in range(i, i + 7)])
    assert s.n == 105 and len(s._x) == 128  # doubled 4 → 128, never per point
    assert np.array_equal(s.x, np.arange(105)) and np.array_equal(s.y, np.arange(105.0))


def test_a_long_run_keeps_at_most_max_points_per_series_evenly_and_the_last_exactly():
    s = Series(max_points=1000)
    for i in range(0, 200_000, 997):  # odd-sized batches, as the trainer's events come
        xs = np.arange(i, min(i + 997, 200_000))
        s.extend(xs, xs * 0.5)
        assert s.n <= 1000 and s.x[-1] == xs[-1] and s.y[-1] == xs[-1] * 0.5  # the latest point, exact
    assert s.n > 500 and s.x[0] == 0
    gaps = np.diff(s.x[:-1])
    assert np.all(gaps == s.stride)  # evenly thinned: every stride-th step
    assert np.array_equal(s.y, s.x * 0.5)  # each point kept is a real (step, value)


def test_training_plots_keep_50k_points_per_series_from_200k_rows(qtbot):
    p = TrainingPlots()
    qtbot.addWidget(p)
    for start in range(1, 200_001, 5000):
        steps = list(range(start, start + 5000))
        p.append_steps(steps, [1.0 + 1 / s for s in steps], [1e-3] * 5000, [0.5] * 5000, 1e4)
    for s in (p.train, p.train.smooth, p.lr, p.grad, p.grad.smooth):
        assert s.n <= Series.MAX_POINTS and s.x[-1] == 200_000
    assert p.train.y[-1] == 1.0 + 1 / 200_000
    p.smoothingSlider.setValue(30)  # smoothing recomputed from the thinned points keeps their spacing
    assert p.train.smooth.n == p.train.n and p.train.smooth.stride == p.train.stride
    p.append_steps([200_001], [2.0], [1e-3], [0.5])
    assert p.train.smooth.x[-1] == 200_001 and p.train.smooth.n <= Series.MAX_POINTS


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
    assert list(rows[0]) == ["step", "train_loss", "smoothed", "val_loss", "lr", "grad_norm", "tokens_per_s",
                             "loss_unit"]
    assert {r["loss_unit"] for r in rows} == {"nats/token"}
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


# ---- bits per character and reference curves ------------------------------------------------------------
LN2 = math.log(2)


def _y(item) -> np.ndarray:
    return np.asarray(item.getData()[1], dtype=float)


def test_bits_per_char_divides_each_split_by_ln2_and_its_chars_per_token_and_back(qtbot, tmp_path):
    import csv

    p = TrainingPlots()
    qtbot.addWidget(p)
    p.smoothingSlider.setValue(50)
    p.append_steps([1, 2, 3], [3.0, 2.5, 2.0], [1e-3] * 3, [1.0] * 3, 100.0)
    p.add_eval(3, 2.2)
    assert not p.bitsPerCharCheck.isEnabled()  # no run with characters per token shown yet
    p.set_run(None, {"train": 2.5, "val": 4.0})
    p.flush()
    raw, smooth, val = _y(p.trainRawCurve), _y(p.trainCurve), _y(p.valCurve)
    assert list(raw) == [3.0, 2.5, 2.0] and list(val) == [2.2]
    assert p.bitsPerCharCheck.isEnabled() and not p.bitsPerCharCheck.isChecked()
    axis = p.lossPlot.getPlotItem().getAxis("left")
    assert axis.labelText == "nats/token"
    p.bitsPerCharCheck.setChecked(True)
    assert _y(p.trainRawCurve) == pytest.approx(raw / LN2 / 2.5, rel=1e-12)
    assert _y(p.trainCurve) == pytest.approx(smooth / LN2 / 2.5, rel=1e-12)
    assert _y(p.valCurve) == pytest.approx(val / LN2 / 4.0, rel=1e-12)
    assert axis.labelText == "bits/char" and p.loss_unit() == "bits/char"
    p.append_steps([4], [1.5], [1e-3], [1.0], 100.0)  # new points arrive in the unit shown
    p.flush()
    assert _y(p.trainRawCurve)[-1] == pytest.approx(1.5 / LN2 / 2.5, rel=1e-12)
    rows = list(csv.DictReader(p.export_csv(tmp_path / "bits.csv").open(encoding="utf-8")))
    assert {r["loss_unit"] for r in rows} == {"bits/char"}
    assert float(rows[0]["train_loss"]) == pytest.approx(3.0 / LN2 / 2.5, rel=1e-12)
    assert float(rows[2]["val_loss"]) == pytest.approx(2.2 / LN2 / 4.0, rel=1e-12)
    assert float(rows[0]["lr"]) == 1e-3 and float(rows[0]["grad_norm"]) == 1.0  # not losses: unchanged
    p.bitsPerCharCheck.setChecked(False)
    assert list(_y(p.trainRawCurve)) == [3.0, 2.5, 2.0, 1.5] and list(_y(p.valCurve)) == [2.2]  # exactly back
    assert list(p.train.y) == [3.0, 2.5, 2.0, 1.5]  # the buffers always hold nats
    p.bitsPerCharCheck.setChecked(True)
    p.set_run(None, None)  # e.g. a seq2seq run: no bits/char
    assert not p.bitsPerCharCheck.isEnabled() and not p.bitsPerCharCheck.isChecked()
    assert axis.labelText == "nats/token" and list(_y(p.trainRawCurve)) == [3.0, 2.5, 2.0, 1.5]


def test_overlays_convert_with_their_own_ratio_and_one_without_is_hidden_in_bits(qtbot):
    p = TrainingPlots()
    qtbot.addWidget(p)
    p.smoothingSlider.setValue(0)
    p.set_run(None, {"train": 1.0, "val": 1.0})
    rows = [{"step": 1, "train_loss": 3.0}, {"step": 2, "train_loss": 2.0, "val_loss": 2.4}]
    p.add_overlay("bpe run", rows, {"train": 3.0, "val": 3.5})
    p.add_overlay("old run", rows)  # from before runs recorded their characters per token
    items = p.lossPlot.getPlotItem().listDataItems()
    bpe, old = items[3:5], items[5:7]  # after the run's three: each overlay's train and validation curves
    assert len(bpe) == len(old) == 2 and "hidden" not in p.legendLabel.text()
    p.bitsPerCharCheck.setChecked(True)
    assert _y(bpe[0]) == pytest.approx([3.0 / LN2 / 3.0, 2.0 / LN2 / 3.0], rel=1e-12)
    assert _y(bpe[1]) == pytest.approx([2.4 / LN2 / 3.5], rel=1e-12)
    assert all(item.isVisible() for item in bpe) and not any(item.isVisible() for item in old)
    assert "hidden" in p.legendLabel.text()
    p.smoothingSlider.setValue(50)  # smoothing reaches the overlays, in the unit shown
    assert _y(bpe[0])[1] == pytest.approx((0.5 * 3.0 + 2.0) / 1.5 / LN2 / 3.0, rel=1e-12)
    p.bitsPerCharCheck.setChecked(False)
    assert all(item.isVisible() for item in old) and list(_y(old[1])) == [2.4] and list(_y(bpe[1])) == [2.4]
    assert "hidden" not in p.legendLabel.text()


def _in_nats_and_bits(p, item) -> tuple[np.ndarray, np.ndarray]:
    """What ``item`` draws in nats per token and in bits/char (nothing where it is hidden in bits/char)."""
    p.bitsPerCharCheck.setChecked(False)
    nats = _y(item)
    p.bitsPerCharCheck.setChecked(True)
    bits = _y(item) if item.isVisible() else np.array([])
    p.bitsPerCharCheck.setChecked(False)
    return nats, bits


def _reference_in(folder, config, name="Tiny preset"):
    from fatstudio.core.runs.reference_curves import ReferenceCurve, SeedCurves, save_reference

    runs = [SeedCurves(s, [1, 2, 3, 4], [4.0 + s, 3.0 + s, 2.5 + s, 2.0 + s], [2, 4], [3.2 + s, 2.4 + s]) for s in (0, 1)]
    ref = ReferenceCurve.measured("9-tiny", name, config, runs, chars_per_token={"train": 2.0, "val": 2.5})
    save_reference(ref, folder)
    return ref


def test_the_reference_curve_is_drawn_faintly_behind_a_run_with_its_settings_only(qtbot, tmp_path, monkeypatch):
    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs import reference_curves

    config = RunConfig().with_overrides(["data.corpus=copy", "model.L=1", "train.steps=4"])
    ref = _reference_in(tmp_path, config)
    monkeypatch.setattr(reference_curves, "reference_dir", lambda: tmp_path)
    p = TrainingPlots()
    qtbot.addWidget(p)
    item = p.lossPlot.getPlotItem()
    p.set_run(config.with_overrides(["train.lr=0.01"]), {"train": 2.0, "val": 2.5})  # other settings
    assert p.reference is None and len(item.listDataItems()) == 3 and "reference" not in p.legendLabel.text()
    p.set_run(config.with_overrides(["train.steps=5000", "train.seed=3"]), {"train": 2.0, "val": 2.5})
    assert p.reference == ref and "reference (Tiny preset)" in p.legendLabel.text()
    assert len(item.listDataItems()) == 3 + 4
    lo, hi, mean, val = item.listDataItems()[3:]  # after the run's three: the band's edges, the means
    [band] = [i for i in item.items if isinstance(i, pg.FillBetweenItem)]
    assert band.scene() is p.lossPlot.scene() and not band.path().isEmpty()
    assert list(_y(lo)) == [4.0, 3.0, 2.5, 2.0] and list(_y(hi)) == [5.0, 4.0, 3.5, 3.0]
    assert list(_y(mean)) == [4.5, 3.5, 3.0, 2.5] and list(_y(val)) == [3.7, 2.9]
    assert all(i.zValue() < p.trainRawCurve.zValue() for i in (lo, hi, mean, val, band))  # behind the run's curves
    assert mean.opts["pen"].style() == Qt.PenStyle.DashLine and mean.opts["pen"].widthF() <= 1
    p.bitsPerCharCheck.setChecked(True)  # converted with the reference's own ratios
    assert _y(mean) == pytest.approx(np.array([4.5, 3.5, 3.0, 2.5]) / LN2 / 2.0, rel=1e-12)
    assert _y(val) == pytest.approx(np.array([3.7, 2.9]) / LN2 / 2.5, rel=1e-12)
    p.clear()  # the next run's reference comes with set_run
    assert p.reference is None and len(item.listDataItems()) == 3 and band.scene() is None


def test_the_reference_band_spans_its_steps_once_the_x_range_has_grown_to_them(qtbot, tmp_path, monkeypatch):
    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs import reference_curves
    from fatstudio.core.runs.reference_curves import ReferenceCurve, SeedCurves, save_reference

    config = RunConfig().with_overrides(["data.corpus=copy", "model.L=1", "train.steps=1000"])
    runs = [SeedCurves(s, [1, 5, 500, 1000], [4.0 + s, 3.5 + s, 3.0 + s, 2.0 + s], [500, 1000], [3.2, 2.4]) for s in (0, 1)]
    save_reference(ReferenceCurve.measured("9-tiny", "Tiny preset", config, runs), tmp_path)
    monkeypatch.setattr(reference_curves, "reference_dir", lambda: tmp_path)
    p = TrainingPlots()  # its x range 0-10, until the plan's 1000 steps
    qtbot.addWidget(p)
    p.show_plan(config)
    [band] = [i for i in p.lossPlot.getPlotItem().items if isinstance(i, pg.FillBetweenItem)]
    assert band.path().boundingRect().left() == 1 and band.path().boundingRect().right() == 1000


def test_the_window_gives_the_plots_a_runs_reference_and_chars_per_token(qtbot, tmp_path, monkeypatch, wait_for_jobs):
    from fatstudio.app import MainWindow
    from fatstudio.core import training
    from fatstudio.core.runs import reference_curves
    from fatstudio.core.runs.folder import Run

    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(reference_curves, "reference_dir", lambda: tmp_path / "refs")
    from fatstudio.core.config import RunConfig

    cfg = RunConfig().with_overrides(["model.L=1", "model.H=2", "model.d_e=16", "model.d_mlp=32", "model.l_max=16",
                                      "data.corpus=copy", "train.steps=4", "train.eval_interval=2", "train.eval_iters=1",
                                      "train.batch_size=2", "train.sample_tokens=0", "train.device=cpu"])
    started = [e for e in training.train(cfg, runs_root=tmp_path / "runs") if e.kind == "started"][0]
    other = [e for e in training.train(cfg.with_overrides(["train.lr=0.01"]), runs_root=tmp_path / "runs")
             if e.kind == "started"][0]
    _reference_in(tmp_path / "refs", cfg)
    w = MainWindow()
    qtbot.addWidget(w)
    w.open_run(Run.open(started.run_dir))
    assert started.chars_per_token == other.chars_per_token == {"train": 1.0, "val": 1.0}
    assert w.plots.reference is not None and w.plots.bitsPerCharCheck.isEnabled()
    nats, bits = _in_nats_and_bits(w.plots, w.plots.trainRawCurve)
    assert len(nats) == 4 and bits == pytest.approx(nats / LN2, rel=1e-12)  # the run's own ratio, 1
    w.overlay_run(Run.open(other.run_dir))
    overlay = w.plots.lossPlot.getPlotItem().listDataItems()[-1]  # drawn last: its validation curve
    nats, bits = _in_nats_and_bits(w.plots, overlay)
    assert len(nats) == 2 and bits == pytest.approx(nats / LN2, rel=1e-12)  # its own ratio, 1: not hidden
    w.open_run(Run.open(other.run_dir))  # its learning rate differs: no reference
    assert w.plots.reference is None
    w.workspace.take(started)  # a live run's Started event
    assert w.plots.reference is not None and w.plots.bitsPerCharCheck.isEnabled()
    wait_for_jobs(w.workspace)  # the opened runs' models, loaded in the background


def test_the_x_range_grows_in_jumps_and_stops_at_the_runs_planned_steps(qtbot):
    from fatstudio.core.config import RunConfig

    p = TrainingPlots()
    qtbot.addWidget(p)
    p.set_run(RunConfig().with_overrides(["data.corpus=copy", "train.steps=2000"]), None)

    def x_range_after(step: int) -> float:
        p.append_steps([step], [2.0], [1e-3], [0.5])
        p.flush()
        return p.lossPlot.getPlotItem().getViewBox().viewRange()[0][1]

    assert x_range_after(100) == pytest.approx(200 * 1.02, rel=0.01)  # a 1-2-5 jump past 110
    assert x_range_after(2000) == pytest.approx(2000 * 1.02, rel=0.01)  # not 5000: the run ends at 2000
    assert x_range_after(2100) == pytest.approx(5000 * 1.02, rel=0.01)  # a resumed run's steps go past it
    reopened = TrainingPlots()  # a finished run opened from the runs list: its curves come first
    qtbot.addWidget(reopened)
    reopened.load_metrics([{"step": s, "train_loss": 2.0} for s in range(1, 2001)])
    reopened.set_run(RunConfig().with_overrides(["data.corpus=copy", "train.steps=2000"]), None)
    assert reopened.lossPlot.getPlotItem().getViewBox().viewRange()[0][1] == pytest.approx(2000 * 1.02, rel=0.01)


def test_before_a_run_the_plot_shows_the_settings_reference_over_their_steps_and_says_press_train(qtbot, tmp_path,
                                                                                                  monkeypatch):
    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs import reference_curves

    config = RunConfig().with_overrides(["data.corpus=copy", "model.L=1", "train.steps=4"])
    ref = _reference_in(tmp_path, config)
    monkeypatch.setattr(reference_curves, "reference_dir", lambda: tmp_path)
    p = TrainingPlots()
    qtbot.addWidget(p)
    p.show()
    assert p.plan_text() == ""  # nothing planned yet
    p.show_plan(config.with_overrides(["train.steps=400"]))
    assert p.reference == ref and "Press ▶ Train" in p.plan_text() and "2 seeds" in p.plan_text()
    assert p.lossPlot.getPlotItem().getViewBox().viewRange()[0][1] == pytest.approx(400 * 1.02, rel=0.01)
    p.show_plan(config.with_overrides(["train.lr=0.01"]))  # settings nobody measured: still "press Train"
    assert p.reference is None and "Press ▶ Train" in p.plan_text() and "grey band" not in p.plan_text()
    p.append_steps([1], [3.0], [1e-3], [0.5])  # a run's first steps: the hint goes…
    assert p.plan_text() == ""
    p.show_plan(config)  # …and a plan does not replace a run's curves
    assert p.plan_text() == "" and p.reference is None and p.train.n == 1
    p.clear()
    p.show_plan(config)
    assert p.reference == ref and p.plan_text()
