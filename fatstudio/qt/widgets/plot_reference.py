"""The loss plot's reference band (`reference_curves`: the seeds' train-loss band, their mean train and
validation losses, faint and grey behind the run) and, before the first run, the plan: the reference of the
settings about to be trained over their steps, and "press Train"."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import Qt

from fatstudio.core.config import RunConfig
from fatstudio.core.runs.reference_curves import ReferenceCurve

from .curves import REFERENCE_COLOR, new_curve, scaled_values

if TYPE_CHECKING:
    from .plots import TrainingPlots


def show_plan(plots: TrainingPlots, config: RunConfig) -> None:
    """Before a run is shown: the reference of ``config`` (if one was measured) over its train.steps, and
    "press Train". Nothing while a run's curves are shown."""
    if plots.train.n or plots.val.n or config == plots._plan:
        return
    plots.set_run(config, None)
    plots._plan = config
    ref = plots.reference
    plots.planHint.setText(
        "Press ▶ Train to start." + (f"\nThe grey band is this preset as measured over {len(ref.seeds)} seeds:"
                                     "\nyour run's loss should fall inside it."
                                     if ref is not None else "\nThe loss is drawn here as it trains."))
    plots.planHint.setVisible(True)
    place_hint(plots)


def place_hint(plots: TrainingPlots, *_args) -> None:
    rect = plots.lossPlot.getPlotItem().getViewBox().boundingRect()  # top right: a falling loss is not there
    plots.planHint.setPos(rect.right() - 0.02 * rect.width(), rect.top() + 0.04 * rect.height())


def set_reference(plots: TrainingPlots, ref: ReferenceCurve | None) -> None:
    """Draw ``ref`` faintly behind the run's curves: its seeds' train-loss band, their mean train loss
    (dashed) and mean validation loss (dotted); None removes it."""
    for item in plots._reference_items:
        plots.lossPlot.removeItem(item)
    plots.reference, plots._reference_items = ref, []
    if ref is not None:
        lo, hi = (new_curve(plots.lossPlot, REFERENCE_COLOR, 1, alpha=0) for _ in range(2))  # the band's edges
        band = pg.FillBetweenItem(lo, hi, brush=(*REFERENCE_COLOR, 45))
        plots.lossPlot.addItem(band)
        mean = new_curve(plots.lossPlot, REFERENCE_COLOR, 1, style=Qt.PenStyle.DashLine)
        val = new_curve(plots.lossPlot, REFERENCE_COLOR, 1, style=Qt.PenStyle.DotLine, symbol="o", symbolSize=4,
                     symbolBrush=None, symbolPen=REFERENCE_COLOR)
        plots._reference_items = [lo, hi, mean, val, band]
        for item in plots._reference_items:
            item.setZValue(-10)  # behind the run's and the overlays' curves
        draw_reference(plots)
    plots._update_legend()


def draw_reference(plots: TrainingPlots) -> None:
    ref = plots.reference
    if ref is None:
        return
    lo, hi, mean, val, _band = plots._reference_items
    k_train, k_val = plots._factor(ref.chars_per_token, "train"), plots._factor(ref.chars_per_token, "val")
    for item in plots._reference_items:
        item.setVisible(k_train is not None)
    for item, ys in ((lo, ref.train.min), (hi, ref.train.max), (mean, ref.train.mean)):
        item.setData(ref.train.step, scaled_values(ys, k_train or 1.0))
    val.setData(ref.val.step, scaled_values(ref.val.mean, k_val or 1.0))
