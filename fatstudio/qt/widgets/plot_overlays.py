"""Other runs on the loss plot, faded, for comparison: each with its own characters per token, so that it
converts to bits/char as the shown run does."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt

from fatstudio.core.records import STEP, TRAIN_LOSS, VAL_LOSS

from .curves import OVERLAY_COLORS, Series, SmoothedSeries, new_curve, scaled_values

if TYPE_CHECKING:
    from .plots import TrainingPlots


@dataclass
class _Overlay:
    """Another run on the loss plot: its curves in nats per token, its characters per token, its items."""

    color: tuple
    train: SmoothedSeries
    val: Series
    chars_per_token: dict | None
    items: list  # the train curve, then the validation curve if it was evaluated


def add_overlay(plots: TrainingPlots, name: str, rows: list[dict], chars_per_token: dict | None = None) -> None:
    """Another run's train (and validation) loss as faded curves; ``chars_per_token`` (its meta.json's)
    converts them to bits/char, and without it they are hidden while the plot shows bits/char."""
    plots.remove_overlay(name)
    used = {ov.color for ov in plots._overlays.values()}
    color = next((c for c in OVERLAY_COLORS if c not in used), OVERLAY_COLORS[len(plots._overlays) % len(OVERLAY_COLORS)])
    train, val = SmoothedSeries(plots.train.alpha), Series(64)
    steps = [r for r in rows if TRAIN_LOSS in r and STEP in r]
    train.extend([r[STEP] for r in steps], [r[TRAIN_LOSS] for r in steps])
    evaluated = [r for r in rows if STEP in r and r.get(VAL_LOSS) is not None]
    val.extend([r[STEP] for r in evaluated], [r[VAL_LOSS] for r in evaluated])
    items = [new_curve(plots.lossPlot, color, 1.5, alpha=110)]
    if val.n:
        items.append(new_curve(plots.lossPlot, color, 1.5, alpha=110, style=Qt.PenStyle.DashLine, symbol="t",
                            symbolSize=5, symbolBrush=(*color, 110), symbolPen=None))
    plots._overlays[name] = ov = _Overlay(color, train, val, chars_per_token or None, items)
    draw_overlay(plots, ov)
    plots.clearOverlaysButton.setEnabled(True)
    plots._update_legend()
    plots._follow_x()


def draw_overlay(plots: TrainingPlots, ov: _Overlay) -> None:
    k_train = plots._factor(ov.chars_per_token, "train")
    for item in ov.items:
        item.setVisible(k_train is not None)
    ov.items[0].setData(ov.train.smooth.x, scaled_values(ov.train.smooth.y, k_train or 1.0))
    if len(ov.items) > 1:
        ov.items[1].setData(ov.val.x, scaled_values(ov.val.y, plots._factor(ov.chars_per_token, "val") or 1.0))
