"""The curves' export: rows by step as CSV, and a plot with its legend above it as PNG."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike
from PySide6.QtGui import QColor, QPainter, QPixmap
from PySide6.QtWidgets import QWidget

from ...core.files import atomic_write, csv_text
from .saving import write_picture

CSV_COLUMNS = ("step", "train_loss", "smoothed", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_unit")


def rows_by_step(columns: dict[str, tuple[ArrayLike, ArrayLike]]) -> list[dict[str, float]]:
    """One dict per step that any of the named (steps, values) columns has, in step order: its "step" and the
    value of each column that has that step."""
    rows: dict[float, dict[str, float]] = {}
    for name, (xs, ys) in columns.items():
        for x, y in zip(np.asarray(xs, dtype=np.float64).tolist(), np.asarray(ys, dtype=np.float64).tolist()):
            rows.setdefault(x, {"step": x})[name] = y
    return [rows[x] for x in sorted(rows)]


def write_csv(path, rows: list[dict[str, float]], unit: str) -> Path:
    """Write ``rows`` (`rows_by_step` of the `CSV_COLUMNS`) to ``path`` as CSV, each row with the losses'
    ``unit``; empty cells where a step has no such number. Whole or not at all (`files.atomic_write`)."""
    path = Path(path)
    atomic_write(path, csv_text([CSV_COLUMNS, *([_cell(c, row.get(c)) for c in CSV_COLUMNS[:-1]] + [unit] for row in rows)]))
    return path


def write_png(path, plot: QWidget, legend: QWidget) -> Path:
    """Write ``plot`` as it is drawn now, ``legend`` above it, to ``path`` as PNG."""
    path = Path(path)
    shot, above = plot.grab(), legend.grab()
    if shot.isNull():
        raise OSError(f"the loss plot could not be drawn to {path}")
    image = QPixmap(max(shot.width(), above.width()), shot.height() + above.height())
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.drawPixmap(0, 0, above)
    painter.drawPixmap(0, above.height(), shot)
    painter.end()
    return write_picture(image, path)


def _cell(column: str, value: float | None) -> str:
    """A CSV cell: empty where there is no number, the step as an integer, else the float in full."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if column == "step":
        return str(int(value))
    return repr(float(value))
