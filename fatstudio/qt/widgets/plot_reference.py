"""The loss plot's reference band (`reference_curves`: the seeds' train-loss band, their mean train and
validation losses, faint and grey behind the run) and, before the first run, the hint that says to press Train
and what the band is."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt

from fatstudio.core.runs.reference_curves import ReferenceCurve

from .curves import REFERENCE_COLOR, new_curve, scaled_values, swatch, unit_factor


class ReferenceBand:
    """A reference curve behind a plot's curves: its seeds' train-loss band, their mean train loss (dashed) and
    mean validation loss (dotted), each split converted with the reference's own characters per token."""

    def __init__(self, plot: pg.PlotWidget):
        self._plot = plot
        self.curve: ReferenceCurve | None = None
        self._items: list = []

    def set(self, ref: ReferenceCurve | None, unit: str) -> None:
        """Draw ``ref`` in ``unit``; None removes it."""
        for item in self._items:
            self._plot.removeItem(item)
        self.curve, self._items = ref, []
        if ref is None:
            return
        lo, hi = (new_curve(self._plot, REFERENCE_COLOR, 1, alpha=0) for _ in range(2))  # the band's edges
        # between the edges' drawn curves: they change as the view clips them again (a PlotDataItem says not)
        band = pg.FillBetweenItem(lo.curve, hi.curve, brush=(*REFERENCE_COLOR, 45))
        self._plot.addItem(band)
        mean = new_curve(self._plot, REFERENCE_COLOR, 1, style=Qt.PenStyle.DashLine)
        val = new_curve(self._plot, REFERENCE_COLOR, 1, style=Qt.PenStyle.DotLine, symbol="o", symbolSize=4,
                        symbolBrush=None, symbolPen=REFERENCE_COLOR)
        self._items = [lo, hi, mean, val, band]
        for item in self._items:
            item.setZValue(-10)  # behind the run's and the overlays' curves
        self.draw(unit)

    def draw(self, unit: str) -> None:
        """Redraw in ``unit``, hidden where the reference does not convert to it."""
        ref = self.curve
        if ref is None:
            return
        lo, hi, mean, val, _band = self._items
        k_train, k_val = unit_factor(unit, ref.chars_per_token, "train"), unit_factor(unit, ref.chars_per_token, "val")
        for item in self._items:
            item.setVisible(k_train is not None)
        for item, ys in ((lo, ref.train.min), (hi, ref.train.max), (mean, ref.train.mean)):
            item.setData(ref.train.step, scaled_values(ys, k_train or 1.0))
        val.setData(ref.val.step, scaled_values(ref.val.mean, k_val or 1.0))

    def legend(self) -> list[str]:
        """Its legend entry, if a reference is drawn."""
        if self.curve is None:
            return []
        return [swatch(REFERENCE_COLOR, f"reference ({self.curve.name}) <small>(mean and band of "
                                        f"{len(self.curve.seeds)} seeds; dotted = validation)</small>", dash=True)]


class PlanHint(pg.TextItem):
    """Before the first run, at the top right of a view (a falling loss is not there) and in its pixels: "press
    Train", and what the grey band of the settings' reference is, if they have one."""

    def __init__(self, view: pg.ViewBox):
        super().__init__(anchor=(1, 0), color="#444")
        self.setParentItem(view)
        self.setVisible(False)
        view.sigResized.connect(self._place)

    def say(self, ref: ReferenceCurve | None) -> None:
        self.setText("Press ▶ Train to start." + (f"\nThe grey band is this preset as measured over {len(ref.seeds)}"
                                                  " seeds:\nyour run's loss should fall inside it."
                                                  if ref is not None else "\nThe loss is drawn here as it trains."))
        self.setVisible(True)
        self._place()

    def _place(self, *_args) -> None:
        rect = self.parentItem().boundingRect()
        self.setPos(rect.right() - 0.02 * rect.width(), rect.top() + 0.04 * rect.height())
