"""The curves' export: one row per step as CSV, and the loss plot with its legend as PNG."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QColor, QPainter, QPixmap

from ...core.runs.targets import check_output
from .curves import scaled_values

if TYPE_CHECKING:
    from .plots import TrainingPlots

CSV_COLUMNS = ("step", "train_loss", "smoothed", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_unit")


def curve_rows(plots: TrainingPlots) -> list[dict[str, float]]:
    """One dict per step that has any number, in step order, with the `CSV_COLUMNS` it has: the train
    loss and its smoothing and the validation loss where evaluated (as shown: in `loss_unit`), η, the
    gradient norm, and the throughput where an emission window ended. Past `Series.MAX_POINTS` steps the
    plotted points are thinned evenly, and so are these rows (the run's metrics.jsonl keeps every step)."""
    k_train, k_val = plots._run_factors()
    rows: dict[float, dict[str, float]] = {}
    for name, series, k in (("train_loss", plots.train, k_train), ("smoothed", plots.train.smooth, k_train),
                            ("val_loss", plots.val, k_val), ("lr", plots.lr, 1.0), ("grad_norm", plots.grad, 1.0),
                            ("tokens_per_s", plots.speed, 1.0)):
        for x, y in zip(series.x.tolist(), scaled_values(series.y, k)):
            rows.setdefault(x, {"step": x})[name] = float(y)
    return [rows[x] for x in sorted(rows)]


def write_csv(plots: TrainingPlots, path) -> Path:
    """Write the curves (`curve_rows`) to ``path`` as CSV, each row with the losses' unit; empty cells
    where a step has no such number."""
    path = Path(path)
    unit = plots.loss_unit()
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(CSV_COLUMNS)
        for row in plots.curve_rows():
            out.writerow([_cell(c, row.get(c)) for c in CSV_COLUMNS[:-1]] + [unit])
    return path


def write_png(plots: TrainingPlots, path) -> Path:
    """Write the loss plot as it is drawn now, its legend above it, to ``path`` as PNG."""
    path = Path(path)
    plots.flush()
    plot, legend = plots.lossPlot.grab(), plots.legendLabel.grab()
    if plot.isNull():
        raise OSError(f"the loss plot could not be drawn to {path}")
    image = QPixmap(max(plot.width(), legend.width()), plot.height() + legend.height())
    image.fill(QColor("white"))
    painter = QPainter(image)
    painter.drawPixmap(0, 0, legend)
    painter.drawPixmap(0, legend.height(), plot)
    painter.end()
    if not image.save(str(path), "PNG"):
        raise OSError(f"could not write {path}")
    return path



def export_clicked(plots: TrainingPlots, kind: str) -> None:
    path = plots.ask_save_path(kind)
    if not path:
        return
    try:
        check_output(path, "the file")  # never into a run folder, a folder or a FIFO
        written = plots.export_csv(path) if kind == "csv" else plots.export_png(path)
    except ValueError as e:
        plots.exported.emit(f"Could not export the curves: {e}")
        return
    except OSError as e:
        plots.exported.emit(f"Could not export the curves: {e.strerror or e}")
        return
    plots.exported.emit(f"Curves saved to {written}")


def _cell(column: str, value: float | None) -> str:
    """A CSV cell: empty where there is no number, the step as an integer, else the float in full."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if column == "step":
        return str(int(value))
    return repr(float(value))
