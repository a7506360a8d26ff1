"""What the training plots are drawn from: growable point buffers (plain and exponentially smoothed), the
plot and curve factories the plots share, their colours and legend swatches, and the loss's units."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from fatstudio.core.runs.reference_curves import bits_per_char

TRAIN_COLOR = (31, 119, 180)
VAL_COLOR = (214, 39, 40)
LR_COLOR = (44, 160, 44)
GRAD_COLOR = (148, 103, 189)
SPEED_COLOR = (255, 127, 14)
REFERENCE_COLOR = (160, 160, 160)
OVERLAY_COLORS = [(44, 160, 44), (148, 103, 189), (255, 127, 14), (140, 86, 75), (227, 119, 194), (23, 190, 207)]
NATS, BITS = "nats/token", "bits/char"  # the loss plot's units


class Series:
    """x/y buffers that double when full; ``x``/``y`` are views of the filled part.

    Bounded: past ``max_points`` the series keeps every ``stride``-th point it was given (the stride doubles
    each time the buffer fills again, so the points stay evenly spaced) and always the latest one, exactly. A
    run's length then costs no memory here; metrics.jsonl keeps every row."""

    MAX_POINTS = 50_000

    def __init__(self, capacity: int = 1024, max_points: int | None = None):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self.n = 0
        self.max_points = max_points or self.MAX_POINTS
        self.stride = 1  # every stride-th point given is kept (and the latest)
        self.seen = 0  # points given since the last clear

    def extend(self, xs, ys) -> None:
        k = len(xs)
        if not k:
            return
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        first, self.seen = self.seen, self.seen + k
        if self.stride > 1:
            if (first - 1) % self.stride:  # the latest point kept so far is off the stride: a newer one replaces it
                self.n -= 1
            keep = np.arange(first, self.seen) % self.stride == 0
            keep[-1] = True
            xs, ys = xs[keep], ys[keep]
        self._append(xs, ys)
        while self.n > self.max_points:
            self._thin()

    def _append(self, xs: np.ndarray, ys: np.ndarray) -> None:
        need = self.n + len(xs)
        if need > len(self._x):
            cap = len(self._x)
            while cap < need:
                cap *= 2
            for name in ("_x", "_y"):
                old = getattr(self, name)
                new = np.empty(cap, dtype=np.float64)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        self._x[self.n:need] = xs
        self._y[self.n:need] = ys
        self.n = need

    def _thin(self) -> None:
        """Double the stride: keep the points kept so far at every other stride step, and the latest."""
        last = self.n - 1
        on_stride = last if (self.seen - 1) % self.stride == 0 else last - 1  # the last point kept for its index
        idx = np.arange(0, on_stride + 1, 2)
        if idx[-1] != last:
            idx = np.append(idx, last)
        self._x[: len(idx)] = self._x[idx]
        self._y[: len(idx)] = self._y[idx]
        self.n, self.stride = len(idx), self.stride * 2

    def clear(self) -> None:
        self.n, self.stride, self.seen = 0, 1, 0

    @property
    def x(self) -> np.ndarray:
        return self._x[: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self.n]


class SmoothedSeries(Series):
    """A Series with its debiased EMA kept alongside: s_t = α s_{t-1} + (1-α) y_t, shown as s_t / (1-α^t)."""

    def __init__(self, alpha: float = 0.0, capacity: int = 1024, max_points: int | None = None):
        super().__init__(capacity, max_points)
        self.smooth = Series(capacity, max_points)
        self.alpha = alpha
        self._acc = 0.0
        self._count = 0

    def extend(self, xs, ys) -> None:
        super().extend(xs, ys)
        self._smooth_from(xs, ys)

    def _smooth_from(self, xs, ys) -> None:
        a, acc, count = self.alpha, self._acc, self._count
        out = np.empty(len(ys), dtype=np.float64)
        for i, y in enumerate(ys):
            if not math.isfinite(y):
                out[i] = y
                continue
            acc = a * acc + (1 - a) * y
            count += 1
            out[i] = acc / (1 - a ** count) if a > 0 else acc
        self._acc, self._count = acc, count
        self.smooth.extend(xs, out)

    def set_alpha(self, alpha: float) -> None:
        """Recompute the smoothing from the points kept: thinned to every stride-th step, each point kept
        stands for ``stride`` steps, so it weighs as α^stride (the latest, kept off the stride, approximately)."""
        self.alpha = alpha
        self.smooth.clear()
        self._acc, self._count = 0.0, 0
        self.alpha = alpha ** self.stride
        self._smooth_from(self.x.copy(), self.y.copy())
        self.alpha, self._count = alpha, max(self._count, self.seen)
        self.smooth.stride, self.smooth.seen = self.stride, self.seen

    def clear(self) -> None:
        super().clear()
        self.smooth.clear()
        self._acc, self._count = 0.0, 0


def new_plot(title: str, name: str, left: str) -> pg.PlotWidget:
    w = pg.PlotWidget(background="w")
    w.setObjectName(name)
    item = w.getPlotItem()
    item.setTitle(title, size="9pt", color="#333")
    for side in ("left", "bottom"):
        axis = item.getAxis(side)
        axis.setPen("#666")
        axis.setTextPen("#333")
        axis.enableAutoSIPrefix(False)
    item.setLabel("bottom", "step")
    item.setLabel("left", left)
    # no grid: pyqtgraph draws grid lines as part of the axes, which then repaint with every new point
    # (5-6× the paint cost per update)
    item.setDownsampling(auto=True, mode="peak")
    item.setClipToView(True)
    w.setMinimumHeight(110)
    w.setMenuEnabled(True)
    return w


def new_curve(plot: pg.PlotWidget, color, width=1.5, alpha=255, style=Qt.PenStyle.SolidLine, **kw):
    pen = pg.mkPen(color=(*color, alpha), width=width, style=style)
    item = plot.plot([], [], pen=pen, **kw)
    item.setDownsampling(auto=True, method="peak")
    item.setClipToView(True)
    return item


def scaled_values(y: np.ndarray | list[float], factor: float) -> np.ndarray | list[float]:
    return y if factor == 1.0 else np.asarray(y, dtype=np.float64) * factor


def unit_factor(unit: str, chars_per_token: dict | None, split: str) -> float | None:
    """What a ``split``'s loss in nats per token is multiplied by to be drawn in ``unit``: 1 in `NATS`, 1 / ln 2 /
    the split's characters per token in `BITS` (a split without its own ratio takes the train split's), None
    where that is unknown."""
    if unit == NATS:
        return 1.0
    known = chars_per_token if isinstance(chars_per_token, dict) else {}  # a run's meta.json may say anything
    ratio = known.get(split) or known.get("train")
    return bits_per_char(1.0, ratio) if isinstance(ratio, (int, float)) and ratio > 0 else None


def swatch(color: tuple, text: str, dash: bool = False) -> str:
    """A legend entry: a line in ``color`` (dashed or solid), then ``text`` (rich text)."""
    r, g, b = color[:3]
    line = "╌╌" if dash else "━━"
    return f"<span style='color:rgb({r},{g},{b})'>{line}</span>&nbsp;{text}"
