"""Live training curves with pyqtgraph: train/validation loss, learning rate, gradient norm, throughput.

Points go into numpy buffers that double when full (amortised O(1) appends, bounded copies). Drawing is
decoupled from appending: the loss plot redraws at most ~3 times a second and the small plots every 2 s,
each time once for all new points, with peak downsampling and clip-to-view, so a run of a million steps
stays cheap to draw. The x range grows in 1-2-5 jumps rather than with every point, and there is no grid
(pyqtgraph draws grids with the axes, which then repaint on every update): together these keep the GUI
thread's share of the GIL at a few percent while training. Smoothing is an exponential moving average
(debiased, as TensorBoard does) kept incrementally; moving the slider recomputes it once. The curves export
from the buffers as CSV (one row per step) and the loss plot, with its legend, as PNG.

The loss plot shows nats per token, or bits per character ("bits/char": each split's loss / ln 2 / its
characters per token, see `training.chars_per_token`) so that runs with different tokenizers compare; the
buffers keep nats and the conversion happens as they are drawn. Behind the run's curves, faint and grey,
the reference curve of the preset whose settings the run has (`reference_curves`), if one was measured. Before
the first run (`show_plan`) the plot shows the reference of the settings about to be trained over their steps,
and says to press Train.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.config import RunConfig
from fatstudio.core.records import GRAD_NORM, LR, STEP, TOKENS_PER_S, TRAIN_LOSS, VAL_LOSS, WINDOW_END
from fatstudio.core.runs.reference_curves import ReferenceCurve, find_reference
from fatstudio.core.runs.targets import check_output

from . import plot_export
from .curves import (
    BITS,
    GRAD_COLOR,
    LR_COLOR,
    NATS,
    SPEED_COLOR,
    TRAIN_COLOR,
    VAL_COLOR,
    Series,
    SmoothedSeries,
    new_curve,
    new_plot,
    scaled_values,
    swatch,
    unit_factor,
)
from .grokking_plots import GrokkingPlots
from .plot_export import CSV_COLUMNS
from .plot_overlays import Overlays
from .plot_reference import PlanHint, ReferenceBand


class TrainingPlots(QWidget):
    """The curves of one live (or reopened) run, plus faded overlays of other runs for comparison.

    Appending is cheap and immediate; drawing is throttled: the loss plot at most every ``LOSS_INTERVAL_S``,
    the small plots at most every ``SMALL_INTERVAL_S``, and nothing while the plots are hidden (they catch
    up when shown). ``flush()`` draws everything now.
    """

    smoothingChanged = Signal(float)
    exported = Signal(str)  # what an export wrote, or why it could not, in words
    LOSS_INTERVAL_S = 0.3
    SMALL_INTERVAL_S = 2.0

    def __init__(self, parent=None):
        super().__init__(parent)
        self._last_loss = self._last_small = -1e9
        self._follow: dict[int, bool] = {}
        self._xmax = None
        self._planned: int | None = None  # the run's train.steps: the x range stops there while the run is within it
        self._dirty = False
        self._timer = QTimer(self, singleShot=True)
        self._timer.timeout.connect(self._scheduled)
        self.lossPlot = new_plot("loss (cross-entropy, nats)", "lossPlot", "loss")
        self.lrPlot = new_plot("learning rate η", "lrPlot", "η")
        self.gradPlot = new_plot("gradient norm ‖∇‖ (before clipping)", "gradNormPlot", "‖∇‖")
        self.speedPlot = new_plot("throughput", "throughputPlot", "tokens/s")
        self.grokking = GrokkingPlots()  # a "modadd" run's (grokking) plots, in place of the small ones
        self.grokking.setVisible(False)

        self.train = SmoothedSeries()
        self.val = Series(64)
        self.lr = Series()
        self.grad = SmoothedSeries()
        self.speed = Series(256)

        for p in self._all_plots():
            vb = p.getPlotItem().getViewBox()
            vb.sigRangeChangedManually.connect(lambda *_a, vb=vb: self._manual(vb))
        self.trainRawCurve = new_curve(self.lossPlot, TRAIN_COLOR, 1, alpha=70)
        self.trainCurve = new_curve(self.lossPlot, TRAIN_COLOR, 2)
        self.valCurve = new_curve(self.lossPlot, VAL_COLOR, 2, symbol="o", symbolSize=5,
                               symbolBrush=VAL_COLOR, symbolPen=None)
        self.lrCurve = new_curve(self.lrPlot, LR_COLOR, 1.5)
        self.gradRawCurve = new_curve(self.gradPlot, GRAD_COLOR, 1, alpha=70)
        self.gradCurve = new_curve(self.gradPlot, GRAD_COLOR, 1.5)
        self.speedCurve = new_curve(self.speedPlot, SPEED_COLOR, 1.5)
        self._overlays = Overlays(self.lossPlot)
        self._chars: dict | None = None  # the run's characters per token, per split (None: bits/char unknown)
        self._band = ReferenceBand(self.lossPlot)  # drawn behind the run's curves
        self._plan: RunConfig | None = None  # the settings `show_plan` shows, while no run is shown
        self.planHint = PlanHint(self.lossPlot.getPlotItem().getViewBox())

        self.logCheck = QCheckBox("log scale", objectName="logAxisCheck")
        self.logCheck.setToolTip("A logarithmic y axis for the loss and gradient-norm plots.")
        self.logCheck.toggled.connect(self.set_log)
        self.bitsPerCharCheck = QCheckBox("bits/char", objectName="bitsPerCharCheck")
        self.bitsPerCharCheck.toggled.connect(self._units_changed)
        self.smoothingSlider = QSlider(Qt.Orientation.Horizontal, objectName="smoothingSlider")
        self.smoothingSlider.setRange(0, 99)
        self.smoothingSlider.setValue(60)
        self.smoothingSlider.setMaximumWidth(160)
        self.smoothingSlider.setToolTip("Exponential moving average of the train loss and gradient norm "
                                        "(0 = raw; the raw curve stays faint behind).")
        self.smoothingLabel = QLabel()
        self.smoothingSlider.valueChanged.connect(self._smoothing_changed)
        # the legend is a label outside the plot: a pyqtgraph LegendItem inside it repaints with every update
        self.legendLabel = QLabel(objectName="plotLegend")
        self.legendLabel.setTextFormat(Qt.TextFormat.RichText)
        self.legendLabel.setWordWrap(True)
        self.clearOverlaysButton = QPushButton("Clear overlays", objectName="clearOverlaysButton")
        self.clearOverlaysButton.setToolTip("Remove the faded curves of other runs.")
        self.clearOverlaysButton.clicked.connect(self.clear_overlays)
        self.clearOverlaysButton.setEnabled(False)
        self.export_stem = "curves"  # the file the export dialogs propose, without its suffix (a run's folder)
        self.curvesCsvButton = QPushButton("CSV…", objectName="curvesCsvButton")
        self.curvesCsvButton.setToolTip("Save the curves as CSV, one row per step: " + ", ".join(CSV_COLUMNS)
                                        + " (smoothed: the train loss at the current smoothing; the losses in "
                                        "the loss_unit plotted, nats/token or bits/char).")
        self.curvesCsvButton.clicked.connect(lambda: self._export("csv"))
        self.curvesPngButton = QPushButton("PNG…", objectName="curvesPngButton")
        self.curvesPngButton.setToolTip("Save the loss plot, with its legend, as a PNG image.")
        self.curvesPngButton.clicked.connect(lambda: self._export("png"))

        bar = QHBoxLayout()
        bar.addWidget(self.logCheck)
        bar.addWidget(self.bitsPerCharCheck)
        bar.addSpacing(12)
        bar.addWidget(QLabel("smoothing"))
        bar.addWidget(self.smoothingSlider)
        bar.addWidget(self.smoothingLabel)
        bar.addStretch(1)
        bar.addWidget(self.clearOverlaysButton)
        bar.addWidget(self.curvesCsvButton)
        bar.addWidget(self.curvesPngButton)

        curves = QWidget()
        grid = QGridLayout(curves)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.lossPlot, 0, 0, 1, 3)
        grid.addWidget(self.lrPlot, 1, 0)
        grid.addWidget(self.gradPlot, 1, 1)
        grid.addWidget(self.speedPlot, 1, 2)
        grid.addWidget(self.grokking, 2, 0, 1, 3)
        grid.setRowStretch(0, 3)
        grid.setRowStretch(1, 2)
        self._grid = grid
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.legendLabel)  # a row of its own: beside the controls it wrapped to three lines
        self.noCurvesLabel = QLabel(objectName="noCurvesLabel", alignment=Qt.AlignmentFlag.AlignCenter,
                                    wordWrap=True)
        self.stack = QStackedWidget(objectName="curvesStack")
        self.stack.addWidget(curves)
        self.stack.addWidget(self.noCurvesLabel)
        lay.addWidget(self.stack, 1)
        self._set_chars(None)  # nats per token until a run with its characters per token is shown
        self.follow()
        self._smoothing_changed(self.smoothingSlider.value())

    def _update_legend(self) -> None:
        parts = [swatch(TRAIN_COLOR, "train"), swatch(VAL_COLOR, "validation ●"),
                 *self._overlays.legend(self.loss_unit()), *self._band.legend()]
        self.legendLabel.setText("&nbsp;&nbsp;&nbsp;".join(parts))

    # -- data --------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop the run's curves and its reference (`set_run` gives the next run's), or the plan."""
        for s in (self.train, self.val, self.lr, self.grad, self.speed):
            s.clear()
        self.grokking.clear()
        self.show_no_curves(None)
        self._plan = None
        self.planHint.setVisible(False)
        self.set_reference(None)
        self.follow()
        self.redraw()

    def show_no_curves(self, why: str | None) -> None:
        """In the plots' place, why the run shown has no training curves (None: the plots)."""
        self.noCurvesLabel.setText(why or "")
        self.stack.setCurrentIndex(0 if why is None else 1)

    def show_plan(self, config: RunConfig) -> None:
        """Before a run is shown: the reference of ``config`` (if one was measured) over its train.steps, and
        "press Train". Nothing while a run's curves are shown."""
        if self.train.n or self.val.n or config == self._plan:
            return
        self.set_run(config, None)
        self._plan = config
        self.planHint.say(self.reference)

    def plan_text(self) -> str:
        """What the empty plot says before a run ("" once a run is shown)."""
        return self.planHint.toPlainText() if self.planHint.isVisible() else ""

    def set_run(self, config: RunConfig | None, chars_per_token: dict | None) -> None:
        """The run shown (live or reopened): its characters per token per split (``Started.chars_per_token``
        or its meta.json; None: no bits/char) and the reference curve that applies to its settings, if any."""
        self._set_chars(chars_per_token)
        self.show_grokking(config is not None and config.data.corpus == "modadd")
        self._planned = config.train.steps if config is not None else None
        self.set_reference(find_reference(config) if config is not None else None)
        self._follow_x()  # a reopened run's curves came first (`load_metrics`)

    def show_grokking(self, on: bool) -> None:
        """The grokking plots (a "modadd" run) in place of the learning rate, gradient norm and throughput."""
        self.grokking.setVisible(on)
        for p in (self.lrPlot, self.gradPlot, self.speedPlot):
            p.setVisible(not on)
        for row, stretch in enumerate((3, 0, 2) if on else (3, 2, 0)):  # the loss plot as tall as for any preset
            self._grid.setRowStretch(row, stretch)

    # -- the x range: grows in jumps (1-2-5 steps) while following, so the axes are not laid out again
    #    with every new point (that halves the cost of a redraw); a zoom or pan by the user stops following
    def follow(self, on: bool = True) -> None:
        """Let the x range follow the data (again). The y range always auto-ranges unless the user zooms."""
        for p in self._all_plots():
            vb = p.getPlotItem().getViewBox()
            self._follow[id(vb)] = on
            vb.enableAutoRange(x=not on, y=True)
        self._xmax = None

    def _all_plots(self):
        return (self.lossPlot, self.lrPlot, self.gradPlot, self.speedPlot)

    def _manual(self, vb) -> None:
        self._follow[id(vb)] = False

    @staticmethod
    def _nice_ceil(x: float) -> float:
        """The smallest of 1, 2, 5 × 10^k that is ≥ x."""
        if x <= 10:
            return 10.0
        k = 10 ** math.floor(math.log10(x))
        for m in (1, 2, 5, 10):
            if m * k >= x:
                return float(m * k)
        return float(10 * k)

    def _follow_x(self) -> None:
        last = max([s.x[-1] for s in (self.train, self.val) if s.n] + self._overlays.last_steps(), default=0.0)
        if not last and self.reference is not None and self._planned:
            last = float(self._planned)  # the plan before a run: the reference over the steps to train
        xmax = self._nice_ceil(last * 1.1 if last else 10)
        if self._planned and last <= self._planned:  # a finished run fills its axis, not 2000 of 0-5000
            xmax = min(xmax, float(self._planned))
        if xmax == self._xmax:
            return
        self._xmax = xmax
        for p in self._all_plots():
            vb = p.getPlotItem().getViewBox()
            if self._follow.get(id(vb), False):
                vb.setXRange(0, xmax, padding=0.02)

    def append_steps(self, steps, train_loss, lr, grad_norm, tokens_per_s: float | None = None) -> None:
        """One batch of per-step numbers (a core ``Steps`` event); redraws once."""
        self.planHint.setVisible(False)
        self.train.extend(steps, train_loss)
        self.lr.extend(steps, lr)
        scaled = [(s, g) for s, g in zip(steps, grad_norm) if g is not None]  # loss scaling skipped the others
        self.grad.extend([s for s, _ in scaled], [g for _, g in scaled])
        if tokens_per_s is not None and len(steps):
            self.speed.extend(steps[-1:], [tokens_per_s])
        self._request()

    def _request(self) -> None:
        """Draw now if the last drawing is old enough, else once the interval has passed."""
        self._dirty = True
        if not self.isVisible():
            return  # showEvent draws
        wait = self._last_loss + self.LOSS_INTERVAL_S - time.perf_counter()
        if wait <= 0:
            self._draw(force_small=False)
        else:
            ms = int(1000 * wait) + 1
            if not self._timer.isActive() or self._timer.remainingTime() > ms:
                self._timer.start(ms)

    def _scheduled(self) -> None:
        if self._dirty and self.isVisible():
            self._draw(force_small=False)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._dirty:
            self._draw(force_small=True)

    def flush(self) -> None:
        """Draw every curve now (after a run ends, and in tests)."""
        self._timer.stop()
        self._draw(force_small=True)

    def add_eval(self, step: int, val_loss: float) -> None:
        self.val.extend([step], [val_loss])
        self._request()

    def load_metrics(self, rows: list[dict]) -> None:
        """Restore the curves from a run's metrics.jsonl rows (`Run.metrics`): one point per row, the
        throughput once per emission window (its ``window_end`` row), as the live plots got them."""
        self.clear()
        steps = [r for r in rows if STEP in r and TRAIN_LOSS in r]
        scaled = [r for r in steps if r.get(GRAD_NORM) is not None]  # loss scaling skipped the others
        window_ends = [r for r in rows if STEP in r and r.get(WINDOW_END) and r.get(TOKENS_PER_S) is not None]
        evaluated = [r for r in rows if STEP in r and r.get(VAL_LOSS) is not None]
        self.train.extend([r[STEP] for r in steps], [r[TRAIN_LOSS] for r in steps])
        self.lr.extend([r[STEP] for r in steps], [r.get(LR, math.nan) for r in steps])
        self.grad.extend([r[STEP] for r in scaled], [r[GRAD_NORM] for r in scaled])
        self.speed.extend([r[STEP] for r in window_ends], [r[TOKENS_PER_S] for r in window_ends])
        self.val.extend([r[STEP] for r in evaluated], [r[VAL_LOSS] for r in evaluated])
        self.grokking.load_metrics(rows)
        self.redraw()

    def redraw(self) -> None:
        self.flush()

    def _draw(self, force_small: bool) -> None:
        now = time.perf_counter()
        smooth = self.smoothingSlider.value() > 0
        self._follow_x()
        k_train, k_val = self._run_factors()
        self.trainRawCurve.setData(self.train.x, scaled_values(self.train.y, k_train))
        self.trainCurve.setData(*((self.train.smooth.x, scaled_values(self.train.smooth.y, k_train)) if smooth else ([], [])))
        self.valCurve.setData(self.val.x, scaled_values(self.val.y, k_val))
        self._last_loss = now
        self._dirty = False
        if force_small or now - self._last_small >= self.SMALL_INTERVAL_S:
            self.lrCurve.setData(self.lr.x, self.lr.y)
            self.gradRawCurve.setData(self.grad.x, self.grad.y)
            self.gradCurve.setData(*((self.grad.smooth.x, self.grad.smooth.y) if smooth else ([], [])))
            self.speedCurve.setData(self.speed.x, self.speed.y)
            self._last_small = now
        else:
            self._dirty = True  # the small plots still owe an update
            if not self._timer.isActive():
                self._timer.start(int(1000 * (self._last_small + self.SMALL_INTERVAL_S - now)) + 1)

    def _set_smoothing_pens(self) -> None:
        smooth = self.smoothingSlider.value() > 0
        alpha = 70 if smooth else 255
        self.trainRawCurve.setPen(pg.mkPen(color=(*TRAIN_COLOR, alpha), width=1 if smooth else 1.5))
        self.gradRawCurve.setPen(pg.mkPen(color=(*GRAD_COLOR, alpha), width=1 if smooth else 1.5))

    def n_points(self) -> int:
        return self.train.n

    # -- overlays (`plot_overlays`) -----------------------------------------------------------------------
    def add_overlay(self, name: str, rows: list[dict], chars_per_token: dict | None = None) -> None:
        """Another run's train (and validation) loss as faded curves; ``chars_per_token`` (its meta.json's)
        converts them to bits/char, and without it they are hidden while the plot shows bits/char."""
        self._overlays.add(name, rows, chars_per_token, self.train.alpha, self.loss_unit())
        self._overlays_changed()

    def remove_overlay(self, name: str) -> None:
        self._overlays.remove(name)
        self._overlays_changed()

    def clear_overlays(self) -> None:
        for name in self._overlays.names():
            self.remove_overlay(name)

    def overlays(self) -> list[str]:
        return self._overlays.names()

    def _overlays_changed(self) -> None:
        self.clearOverlaysButton.setEnabled(bool(self._overlays.names()))
        self._update_legend()
        self._follow_x()

    # -- the reference curve (`plot_reference`) ----------------------------------------------------------
    @property
    def reference(self) -> ReferenceCurve | None:
        """The reference curve drawn behind the run's curves, if any."""
        return self._band.curve

    def set_reference(self, ref: ReferenceCurve | None) -> None:
        """Draw ``ref`` faintly behind the run's curves: its seeds' train-loss band, their mean train loss
        (dashed) and mean validation loss (dotted); None removes it."""
        self._band.set(ref, self.loss_unit())
        self._update_legend()

    # -- units: nats per token or bits per character -----------------------------------------------------
    def _set_chars(self, chars_per_token: dict | None) -> None:
        """The shown run's characters per token; bits/char is offered only with them (unchecked without)."""
        self._chars = chars_per_token or None
        box = self.bitsPerCharCheck
        box.setEnabled(self._chars is not None)
        if self._chars is None:
            box.setChecked(False)
            box.setToolTip("Bits per character needs a loss over one text (next_token or masked_lm) and the run's "
                           "characters per token, which this run has not recorded.")
        else:
            box.setToolTip("Plot the loss in bits per character (each split's nats per token / ln 2 / its "
                           "characters per token), so that runs with different tokenizers compare. Overlaid runs "
                           "convert with their own ratio; one without it is hidden meanwhile.")
        self._units_changed()

    def loss_unit(self) -> str:
        """What the loss plot shows: "nats/token" or "bits/char"."""
        return BITS if self.bitsPerCharCheck.isChecked() and self._chars else NATS

    def _run_factors(self) -> tuple[float, float]:
        """`unit_factor` of the shown run's train and validation losses (known whenever bits/char can be on)."""
        unit = self.loss_unit()
        return unit_factor(unit, self._chars, "train") or 1.0, unit_factor(unit, self._chars, "val") or 1.0

    def _units_changed(self, *_args) -> None:
        unit = self.loss_unit()
        item = self.lossPlot.getPlotItem()
        item.setTitle(f"loss (cross-entropy, {'bits per character' if unit == BITS else 'nats per token'})",
                      size="9pt", color="#333")
        item.setLabel("left", unit)
        self._overlays.draw(unit)
        self._band.draw(unit)
        self._update_legend()
        self.flush()

    # -- export (`plot_export`) ---------------------------------------------------------------------------
    def curve_rows(self) -> list[dict[str, float]]:
        """One dict per step that has any number, in step order, with the `CSV_COLUMNS` it has: the train
        loss and its smoothing and the validation loss where evaluated (as shown: in `loss_unit`), η, the
        gradient norm, and the throughput where an emission window ended. Past `Series.MAX_POINTS` steps the
        plotted points are thinned evenly, and so are these rows (the run's metrics.jsonl keeps every step)."""
        k_train, k_val = self._run_factors()
        columns = {"train_loss": (self.train, k_train), "smoothed": (self.train.smooth, k_train),
                   "val_loss": (self.val, k_val), "lr": (self.lr, 1.0), "grad_norm": (self.grad, 1.0),
                   "tokens_per_s": (self.speed, 1.0)}
        return plot_export.rows_by_step({name: (s.x, scaled_values(s.y, k)) for name, (s, k) in columns.items()})

    def export_csv(self, path) -> Path:
        """Write the curves (`curve_rows`) to ``path`` as CSV, each row with the losses' unit."""
        return plot_export.write_csv(path, self.curve_rows(), self.loss_unit())

    def export_png(self, path) -> Path:
        """Write the loss plot as it is drawn now, its legend above it, to ``path`` as PNG."""
        self.flush()
        return plot_export.write_png(path, self.lossPlot, self.legendLabel)

    def _export(self, kind: str) -> None:
        """Export as ``kind`` ("csv" or "png") where the user says, and say what was written or why not."""
        path = self.ask_save_path(kind)
        if not path:
            return
        try:
            check_output(path, "the file")  # never into a run folder, a folder or a FIFO
            written = self.export_csv(path) if kind == "csv" else self.export_png(path)
        except ValueError as e:
            self.exported.emit(f"Could not export the curves: {e}")
            return
        except OSError as e:
            self.exported.emit(f"Could not export the curves: {e.strerror or e}")
            return
        self.exported.emit(f"Curves saved to {written}")

    def ask_save_path(self, kind: str) -> str | None:
        """Where to export (``kind``: "csv" or "png"), asked in a dialog; None if cancelled."""
        name, _ = QFileDialog.getSaveFileName(self, f"Export the curves as {kind.upper()}",
                                              f"{self.export_stem}.{kind}", f"{kind.upper()} (*.{kind})")
        return name or None

    # -- view --------------------------------------------------------------------------------------------
    def set_log(self, on: bool) -> None:
        self.lossPlot.getPlotItem().setLogMode(y=on)
        self.gradPlot.getPlotItem().setLogMode(y=on)

    def _smoothing_changed(self, value: int) -> None:
        alpha = value / 100.0
        self.smoothingLabel.setText(f"{alpha:.2f}")
        for series in (self.train, self.grad):
            series.set_alpha(alpha)
        self._overlays.set_smoothing(alpha, self.loss_unit())
        self._set_smoothing_pens()
        self.flush()
        self.smoothingChanged.emit(alpha)

