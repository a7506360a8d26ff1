"""The grokking lab's plots for a "modadd" run (`inspect.grokking` computes, this draws): train and validation
accuracy with a marker at the step where validation accuracy passed 95 %, the weights' norm ‖θ‖₂, and the
token embedding's energy by frequency at one evaluation, which a slider scrubs through (their numbers are
measured by the trainer, `inspect.grokking`).

Each evaluation is a dot on its curves, so a run of one evaluation shows it; the step axes start at 0, and the
grey line that marks the scrubbed evaluation is drawn only once there are two to scrub between. The bar chart's
height axis holds the largest share of any evaluation so far (`spectrum_top`), so bars compare as the slider moves."""
from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

from fatstudio.core.records import (
    ACCURACY,
    EMBED_FOURIER,
    GROKKED_ACCURACY,
    STEP,
    TRAIN_ACCURACY,
    WEIGHT_NORM,
    grokked_step,
    row_number,
    with_evaluation,
)

from .curves import GRAD_COLOR, TRAIN_COLOR, VAL_COLOR, new_curve, new_plot

MARKER_COLOR = (44, 160, 44)


def _dots(color: tuple[int, int, int]) -> dict[str, Any]:
    """A curve's evaluations drawn as dots too (one evaluation has no line to draw)."""
    return {"symbol": "o", "symbolSize": 5, "symbolBrush": pg.mkBrush(*color), "symbolPen": None}


class GrokkingPlots(QWidget):
    """Accuracy, weight norm and Fourier energy of a modadd run's evaluations (`load_metrics`, `add_evaluation`)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict[str, Any]] = []  # the evaluated rows, in step order
        self.accuracyPlot = new_plot("accuracy (answer token)", "grokAccuracyPlot", "accuracy")
        self.accuracyPlot.setYRange(0, 1.02, padding=0)
        self.accuracyPlot.getPlotItem().getViewBox().enableAutoRange(y=False)
        self.trainAccCurve = new_curve(self.accuracyPlot, TRAIN_COLOR, 2, **_dots(TRAIN_COLOR))
        self.valAccCurve = new_curve(self.accuracyPlot, VAL_COLOR, 2, **_dots(VAL_COLOR))
        pen = pg.mkPen(color=MARKER_COLOR, width=1.5, style=Qt.PenStyle.DashLine)
        self.marker = pg.InfiniteLine(angle=90, pen=pen, movable=False, label="",
                                      labelOpts={"position": 0.12, "color": MARKER_COLOR})
        self.marker.setVisible(False)
        self.accuracyPlot.addItem(self.marker)
        view = self.accuracyPlot.getPlotItem().getViewBox()
        for moved in (view.sigXRangeChanged, view.sigResized):
            moved.connect(self._place_marker_label)
        self.scrubLine = pg.InfiniteLine(angle=90, pen=pg.mkPen(color=(120, 120, 120), width=1), movable=False)
        self.scrubLine.setVisible(False)
        self.accuracyPlot.addItem(self.scrubLine)
        self.accuracyLegend = QLabel(objectName="grokAccuracyLegend")
        self.accuracyLegend.setTextFormat(Qt.TextFormat.RichText)

        self.normPlot = new_plot("weight norm ‖θ‖₂", "weightNormPlot", "‖θ‖₂")
        self.normCurve = new_curve(self.normPlot, GRAD_COLOR, 2, **_dots(GRAD_COLOR))

        self.fourierPlot = new_plot("token embedding W_e: energy by frequency", "fourierPlot", "share of energy")
        self.fourierPlot.getPlotItem().setLabel("bottom", "frequency k (over the numbers 0 … p-1)")
        self.fourierBars = pg.BarGraphItem(x=[], height=[], width=0.8, brush=pg.mkBrush(*TRAIN_COLOR), pen=None)
        self.fourierPlot.addItem(self.fourierBars)
        self.fourierPlot.getPlotItem().getViewBox().enableAutoRange(y=False)  # `spectrum_top`, not each bar chart's
        self.stepSlider = QSlider(Qt.Orientation.Horizontal, objectName="fourierStepSlider")
        self.stepSlider.setToolTip("The evaluation whose embedding spectrum is shown (the grey line in the accuracy plot).")
        self.stepSlider.valueChanged.connect(self._show_index)
        self.stepLabel = QLabel("", objectName="fourierStepLabel")
        self._follow = True  # the slider stays on the latest evaluation until moved

        left = QVBoxLayout()
        left.setContentsMargins(0, 0, 0, 0)
        left.addWidget(self.accuracyLegend)
        left.addWidget(self.accuracyPlot, 1)
        scrub = QHBoxLayout()
        scrub.addWidget(self.stepLabel)
        scrub.addWidget(self.stepSlider, 1)
        right = QVBoxLayout()
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(self.fourierPlot, 1)
        right.addLayout(scrub)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(left, 5)
        lay.addWidget(self.normPlot, 3)
        lay.addLayout(right, 5)
        self.clear()

    # -- data --------------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.rows = []
        self._follow = True
        self.redraw()

    def load_metrics(self, rows: list[dict]) -> None:
        """A run's metrics.jsonl rows (`Run.metrics`): its evaluations are drawn."""
        self.rows = [r for r in rows if STEP in r and r.get(ACCURACY) is not None]
        self._follow = True
        self.redraw()

    def add_evaluation(self, ev: Any) -> None:
        """One core ``Evaluation`` event, as it comes."""
        row: dict[str, Any] = {STEP: ev.step}
        with_evaluation(row, ev.eval_train_loss, ev.val_loss, ev.accuracy,  # type: ignore[arg-type]
                        ev.train_accuracy, ev.weight_norm, ev.embed_fourier)
        if ev.accuracy is not None:
            self.rows.append(row)
            self.redraw()

    @property
    def grokked_step(self) -> int | None:
        """The step where validation accuracy first reached 95 % (where the marker stands), or None."""
        return grokked_step(self.rows)

    # -- drawing -----------------------------------------------------------------------------------------
    def _series(self, key: str) -> tuple[list[int], list[float]]:
        pairs = [(int(r[STEP]), v) for r in self.rows if (v := row_number(r, key)) is not None]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def redraw(self) -> None:
        self.trainAccCurve.setData(*self._series(TRAIN_ACCURACY))
        self.valAccCurve.setData(*self._series(ACCURACY))
        self.normCurve.setData(*self._series(WEIGHT_NORM))
        last = max((int(r[STEP]) for r in self.rows), default=0)
        for plot in (self.accuracyPlot, self.normPlot):  # from step 0: one evaluation is a dot at its step
            plot.setXRange(0, max(last, 1), padding=0.03)
        self.fourierPlot.setYRange(0, self.spectrum_top(), padding=0)
        step = self.grokked_step
        self.marker.setVisible(step is not None)
        if step is not None:
            self.marker.setValue(step)
            self.marker.label.setFormat(f" validation ≥ {GROKKED_ACCURACY:.0%} at step {step:,} ")
            self._place_marker_label()
        self.accuracyLegend.setText(self._legend(step))
        n = sum(1 for r in self.rows if r.get(EMBED_FOURIER))
        self.stepSlider.blockSignals(True)
        self.stepSlider.setRange(0, max(0, n - 1))
        if self._follow:
            self.stepSlider.setValue(max(0, n - 1))
        self.stepSlider.blockSignals(False)
        self._show_index(self.stepSlider.value(), follow=self._follow)

    def _legend(self, step: int | None) -> str:
        def swatch(color, text):
            return f"<span style='color:rgb{color}'>━━</span>&nbsp;{text}"

        parts = [swatch(TRAIN_COLOR, "train"), swatch(VAL_COLOR, "validation")]
        parts.append(swatch(MARKER_COLOR, f"╎ validation ≥ {GROKKED_ACCURACY:.0%} at step {step:,}") if step is not None
                     else f"<span style='color:#666'>validation has not reached {GROKKED_ACCURACY:.0%} yet</span>")
        return "&nbsp;&nbsp;&nbsp;".join(parts)

    def _place_marker_label(self) -> None:
        """The marker's label right of it where it fits in the plot, else left of it, else across it (its anchor
        at the marker's place in the view), so the label stays inside the plot whatever the step."""
        vb = self.accuracyPlot.getPlotItem().getViewBox()
        (x0, x1), _ = vb.viewRange()
        f = min(max((self.marker.value() - x0) / (x1 - x0), 0.0), 1.0) if x1 > x0 else 0.0
        room, width = vb.width(), self.marker.label.boundingRect().width()  # pixels
        x = 0.0 if f * room + width <= room else 1.0 if f * room >= width else f
        self.marker.label.anchors = [(x, 1), (x, 1)]  # above the point the label is pinned to
        self.marker.label.updatePosition()

    def _show_index(self, index: int, follow: bool = False) -> None:
        """Show the Fourier energy of the ``index``-th evaluation that has it."""
        self._follow = follow or index == self.stepSlider.maximum()
        spectra = [r for r in self.rows if r.get(EMBED_FOURIER)]
        if not spectra:
            self.fourierBars.setOpts(x=[], height=[])
            self.stepLabel.setText("no spectrum yet")
            self.scrubLine.setVisible(False)
            return
        row = spectra[min(index, len(spectra) - 1)]
        energy: list[float] = row[EMBED_FOURIER]
        self.fourierBars.setOpts(x=list(range(1, len(energy) + 1)), height=energy, width=0.8)
        self.fourierPlot.setXRange(0.4, len(energy) + 0.6, padding=0)
        top = sorted(range(len(energy)), key=energy.__getitem__, reverse=True)[:3]
        self.stepLabel.setText(f"step {int(row[STEP]):,} · top k: {', '.join(str(k + 1) for k in sorted(top))}")
        self.scrubLine.setValue(int(row[STEP]))
        self.scrubLine.setVisible(len(spectra) > 1)  # with one evaluation there is nothing to scrub between

    def spectrum_top(self) -> float:
        """The bar chart's fixed height: the largest share of energy at any evaluation so far, with a little room
        (at least 0.05), so a bar's height means the same at every step of the slider."""
        top = max((max(r[EMBED_FOURIER], default=0.0) for r in self.rows if r.get(EMBED_FOURIER)), default=0.0)
        return max(0.05, 1.05 * top)

    def shown_spectrum(self) -> tuple[int, list[float]] | None:
        """The step and energies the bar chart shows, or None."""
        spectra = [r for r in self.rows if r.get(EMBED_FOURIER)]
        if not spectra:
            return None
        row = spectra[min(self.stepSlider.value(), len(spectra) - 1)]
        return int(row[STEP]), list(row[EMBED_FOURIER])
