"""Other runs on the loss plot, faded, for comparison: each with its own characters per token, so that it
converts to bits/char as the shown run does."""
from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt

from fatstudio.core.records import STEP, TRAIN_LOSS, VAL_LOSS

from .curves import OVERLAY_COLORS, Series, SmoothedSeries, new_curve, scaled_values, swatch, unit_factor


class Overlay:
    """Another run on a plot: its smoothed train loss and its validation loss (dashed, if it was evaluated),
    kept in nats per token and drawn in the unit asked for."""

    def __init__(self, plot: pg.PlotWidget, color: tuple, rows: list[dict], chars_per_token: dict | None,
                 alpha: float):
        self.color = color
        self.chars_per_token = chars_per_token or None
        self.train, self.val = SmoothedSeries(alpha), Series(64)
        steps = [r for r in rows if TRAIN_LOSS in r and STEP in r]
        self.train.extend([r[STEP] for r in steps], [r[TRAIN_LOSS] for r in steps])
        evaluated = [r for r in rows if STEP in r and r.get(VAL_LOSS) is not None]
        self.val.extend([r[STEP] for r in evaluated], [r[VAL_LOSS] for r in evaluated])
        self._plot = plot
        self._items = [new_curve(plot, color, 1.5, alpha=110)]
        if self.val.n:
            self._items.append(new_curve(plot, color, 1.5, alpha=110, style=Qt.PenStyle.DashLine, symbol="t",
                                         symbolSize=5, symbolBrush=(*color, 110), symbolPen=None))

    def shown_in(self, unit: str) -> bool:
        """Whether it converts to ``unit`` (bits/char needs its characters per token); hidden where not."""
        return unit_factor(unit, self.chars_per_token, "train") is not None

    def draw(self, unit: str) -> None:
        for item in self._items:
            item.setVisible(self.shown_in(unit))
        k_train = unit_factor(unit, self.chars_per_token, "train") or 1.0
        self._items[0].setData(self.train.smooth.x, scaled_values(self.train.smooth.y, k_train))
        if len(self._items) > 1:
            k_val = unit_factor(unit, self.chars_per_token, "val") or 1.0
            self._items[1].setData(self.val.x, scaled_values(self.val.y, k_val))

    def remove(self) -> None:
        """Take its curves off the plot."""
        for item in self._items:
            self._plot.removeItem(item)


class Overlays:
    """The runs overlaid on one plot, by name, each in a colour of its own while the colours last."""

    def __init__(self, plot: pg.PlotWidget):
        self._plot = plot
        self._by_name: dict[str, Overlay] = {}

    def names(self) -> list[str]:
        return list(self._by_name)

    def add(self, name: str, rows: list[dict], chars_per_token: dict | None, alpha: float, unit: str) -> None:
        """Run ``name``'s metrics rows (replacing an overlay of that name), smoothed with ``alpha``, drawn in
        ``unit``; ``chars_per_token`` (its meta.json's) converts them to bits/char."""
        self.remove(name)
        used = {ov.color for ov in self._by_name.values()}
        color = next((c for c in OVERLAY_COLORS if c not in used), OVERLAY_COLORS[len(self._by_name) % len(OVERLAY_COLORS)])
        self._by_name[name] = ov = Overlay(self._plot, color, rows, chars_per_token, alpha)
        ov.draw(unit)

    def remove(self, name: str) -> None:
        if (ov := self._by_name.pop(name, None)) is not None:
            ov.remove()

    def draw(self, unit: str) -> None:
        for ov in self._by_name.values():
            ov.draw(unit)

    def set_smoothing(self, alpha: float, unit: str) -> None:
        for ov in self._by_name.values():
            ov.train.set_alpha(alpha)
            ov.draw(unit)

    def last_steps(self) -> list[float]:
        """The last step of each overlaid curve (the x range covers them)."""
        return [float(s.x[-1]) for ov in self._by_name.values() for s in (ov.train, ov.val) if s.n]

    def legend(self, unit: str) -> list[str]:
        """A legend entry each, saying whether it is drawn in ``unit``."""
        entries = []
        for name, ov in self._by_name.items():
            note = ("faded; dashed = validation" if ov.shown_in(unit)
                    else "hidden: its characters per token are unknown, so no bits/char")
            entries.append(swatch(ov.color, f"{name} <small>({note})</small>"))
        return entries
