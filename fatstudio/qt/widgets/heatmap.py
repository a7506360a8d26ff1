"""Attention heatmaps with pyqtgraph: one head large with the tokens on both axes, and a grid of
layers × heads thumbnails. Every image is drawn on the same fixed 0-1 colour scale, the core's viridis
(`attention_maps.VIRIDIS`, the one its PNG export uses), so a weight reads the same everywhere and in an
exported file; one `ColorBarItem` shows that scale.

Images are set in row-major order: ``image[query, key]``, queries top to bottom, keys left to right. The
arrays handed in are kept as they are (no copy, no rescaling), so ``HeatmapView.matrix`` *is* what is drawn.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QPalette, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QWidget

from ...core.attention_maps import LEVELS, VIRIDIS, VIRIDIS_POSITIONS, max_pool
from ...core.prompting import display_token

COLORMAP = pg.ColorMap(VIRIDIS_POSITIONS, VIRIDIS, name="viridis")

__all__ = ["COLORMAP", "LEVELS", "HeadGrid", "HeatmapView", "TokenAxis", "display_token", "max_pool"]


def _image_item() -> pg.ImageItem:
    """An image ``[query, key]`` on the fixed 0-1 scale."""
    img = pg.ImageItem(axisOrder="row-major")
    img.setColorMap(COLORMAP)
    img.setLevels(LEVELS)
    return img


def _outline(width: float) -> QGraphicsRectItem:
    """A red outline (a selected row or thumbnail), hidden until placed."""
    item = QGraphicsRectItem()
    pen = QPen(QColor(255, 64, 64))
    pen.setWidthF(width)
    pen.setCosmetic(True)
    item.setPen(pen)
    item.setZValue(10)
    item.setVisible(False)
    return item


def _palette_colors(widget: QWidget) -> tuple[QColor, QColor]:
    pal = widget.palette()
    return pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Text)


class TokenAxis(pg.AxisItem):
    """An axis labelled by tokens at the centres of the image's cells (i + 0.5).

    Shows as many labels as fit without overlapping at the current zoom: every token when zoomed in,
    every n-th (n a whole number, labels on multiples of n) when the view is too dense.
    """

    def __init__(self, orientation: str, **kw):
        super().__init__(orientation, **kw)
        self._labels: list[str] = []
        self._extent = 10.0  # px a label needs along the axis
        self.enableAutoSIPrefix(False)

    def set_tokens(self, tokens: Sequence[str]) -> None:
        self._labels = [display_token(t) for t in tokens]
        fm = QFontMetricsF(self.style.get("tickFont") or self.font())
        if self.orientation in ("bottom", "top"):
            widest = max((fm.horizontalAdvance(s) for s in self._labels), default=8.0)
            self._extent = widest + 6.0
        else:
            self._extent = fm.height() * 0.85 + 1.0
        self.picture = None
        self.update()

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    def label_step(self, lo: float, hi: float, size_px: float) -> int:
        """Show every ``step``-th label so that labels of ``_extent`` px do not overlap."""
        span = max(hi - lo, 1e-9)
        px_per_token = max(size_px, 1.0) / span
        return max(1, math.ceil(self._extent / px_per_token))

    def tickValues(self, minVal, maxVal, size):
        n = len(self._labels)
        if n == 0:
            return []
        lo, hi = min(minVal, maxVal), max(minVal, maxVal)
        step = self.label_step(lo, hi, size)
        first = max(0, math.ceil(lo - 0.5))
        first = math.ceil(first / step) * step
        last = min(n - 1, math.floor(hi - 0.5))
        return [(float(step), [i + 0.5 for i in range(first, last + 1, step)])]

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = int(math.floor(v))
            out.append(self._labels[i] if 0 <= i < len(self._labels) else "")
        return out


class HeatmapView(pg.GraphicsLayoutWidget):
    """One attention matrix large: keys along the top/bottom axis, queries down the left axis, token labels,
    zoom and scroll with the mouse (ViewBox), a colour bar on the fixed 0-1 scale, a row highlight.

    Signals: ``hovered(query, key)`` (-1, -1 when the cursor leaves the matrix) and ``queryClicked(query)``.
    """

    hovered = Signal(int, int)
    queryClicked = Signal(int)

    def __init__(self, parent=None, colorbar: bool = True):
        super().__init__(parent)
        bg, fg = _palette_colors(self)
        self.setBackground(bg)
        self._fg = fg
        self.key_axis = TokenAxis("bottom")
        self.query_axis = TokenAxis("left")
        for ax in (self.key_axis, self.query_axis):
            ax.setPen(fg)
            ax.setTextPen(fg)
        self.plot: pg.PlotItem = self.addPlot(row=0, col=0, axisItems={"bottom": self.key_axis, "left": self.query_axis})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setLabel("bottom", "key")
        self.plot.setLabel("left", "query")
        self.plot.titleLabel.item.setDefaultTextColor(fg)
        self.vb: pg.ViewBox = self.plot.getViewBox()
        self.vb.invertY(True)  # query 0 at the top, as a matrix is read
        self.vb.setDefaultPadding(0.0)
        self.image = _image_item()
        self.plot.addItem(self.image)
        self._row = _outline(2.0)
        self.plot.addItem(self._row)
        self.colorbar = None
        if colorbar:
            self.colorbar = pg.ColorBarItem(values=LEVELS, colorMap=COLORMAP, interactive=False, width=14,
                                            label="weight")
            self.colorbar.setImageItem(self.image)
            for name in ("left", "right"):
                ax = self.colorbar.getAxis(name) if hasattr(self.colorbar, "getAxis") else None
                if ax is not None:
                    ax.setPen(fg)
                    ax.setTextPen(fg)
            self.addItem(self.colorbar, row=0, col=1)
        self._matrix: np.ndarray | None = None
        self._query_tokens: list[str] = []
        self._key_tokens: list[str] = []
        self._last_hover = (-2, -2)
        self.scene().sigMouseMoved.connect(self._on_mouse_moved)
        self.scene().sigMouseClicked.connect(self._on_mouse_clicked)

    # ---- data -----------------------------------------------------------------------------------------
    @property
    def matrix(self) -> np.ndarray | None:
        """The (T_query, T_key) array drawn (the very array given to `set_matrix`)."""
        return self._matrix

    @property
    def query_tokens(self) -> list[str]:
        return list(self._query_tokens)

    @property
    def key_tokens(self) -> list[str]:
        return list(self._key_tokens)

    def share_colorbar(self, images: Sequence[pg.ImageItem]) -> None:
        """Let this view's colour bar also govern ``images`` (e.g. a grid of thumbnails): one fixed 0-1 scale."""
        if self.colorbar is not None:
            self.colorbar.setImageItem([self.image, *images])

    def set_matrix(self, matrix: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str],
                   title: str = "", keep_view: bool = False) -> None:
        """Draw ``matrix[query, key]`` on the 0-1 scale with the tokens as axis labels."""
        matrix = np.asarray(matrix)
        if matrix.ndim != 2:
            raise ValueError(f"an attention matrix has two axes (query, key); this one has shape {matrix.shape}.")
        tq, tk = matrix.shape
        if len(query_tokens) != tq or len(key_tokens) != tk:
            raise ValueError(f"{len(query_tokens)} query and {len(key_tokens)} key tokens do not fit a "
                             f"{tq} × {tk} matrix.")
        same_shape = self._matrix is not None and self._matrix.shape == matrix.shape
        self._matrix = matrix
        self._query_tokens, self._key_tokens = list(query_tokens), list(key_tokens)
        self.image.setImage(matrix, autoLevels=False, levels=LEVELS)
        self.image.setRect(QRectF(0, 0, tk, tq))
        self.key_axis.set_tokens(self._key_tokens)
        self.query_axis.set_tokens(self._query_tokens)
        self.plot.setTitle(title, color=self._fg)
        self.vb.setLimits(xMin=0, xMax=tk, yMin=0, yMax=tq, minXRange=min(4, tk), minYRange=min(4, tq))
        if not (keep_view and same_shape):
            self.reset_zoom()

    def clear(self) -> None:
        self._matrix = None
        self._query_tokens, self._key_tokens = [], []
        self.image.clear()
        self.key_axis.set_tokens([])
        self.query_axis.set_tokens([])
        self.plot.setTitle("")
        self._row.setVisible(False)

    def reset_zoom(self) -> None:
        if self._matrix is not None:
            tq, tk = self._matrix.shape
            self.vb.setRange(xRange=(0, tk), yRange=(0, tq), padding=0.0)

    def set_query_highlight(self, query: int | None) -> None:
        """Outline row ``query`` (None: no outline)."""
        if query is None or self._matrix is None or not 0 <= query < self._matrix.shape[0]:
            self._row.setVisible(False)
            return
        self._row.setRect(QRectF(0, query, self._matrix.shape[1], 1))
        self._row.setVisible(True)

    # ---- mouse -----------------------------------------------------------------------------------------
    def cell_at(self, scene_pos) -> tuple[int, int] | None:
        """(query, key) of the cell under a scene position, or None outside the matrix."""
        if self._matrix is None or not self.vb.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.vb.mapSceneToView(scene_pos)
        q, k = math.floor(p.y()), math.floor(p.x())
        tq, tk = self._matrix.shape
        if 0 <= q < tq and 0 <= k < tk:
            return q, k
        return None

    def cell_center_scene(self, query: int, key: int) -> QPointF:
        """Scene position of the centre of a cell (for tests and tooling)."""
        return self.vb.mapViewToScene(QPointF(key + 0.5, query + 0.5))

    def _on_mouse_moved(self, pos) -> None:
        cell = self.cell_at(pos) or (-1, -1)
        if cell != self._last_hover:
            self._last_hover = cell
            self.hovered.emit(*cell)

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        cell = self.cell_at(ev.scenePos())
        if cell is not None:
            self.queryClicked.emit(cell[0])


class HeadGrid(pg.GraphicsLayoutWidget):
    """A grid of small heatmaps, one row per layer and one column per head (plus, optionally, the mean over
    heads), each titled with its head and entropy. Clicking a thumbnail emits ``headClicked(row, column)``
    (column == number of heads for the mean). All thumbnails share the fixed 0-1 scale.

    ``matrices[r][c]`` holds each thumbnail's exact matrix. A thumbnail of more than `THUMB_CELLS` tokens a
    side is drawn max-pooled to that size (each drawn cell = the largest weight of its block)."""

    headClicked = Signal(int, int)
    THUMB_CELLS = 64

    def __init__(self, parent=None):
        super().__init__(parent)
        bg, fg = _palette_colors(self)
        self.setBackground(bg)
        self._fg = fg
        self.ci.setSpacing(2)
        self.ci.setContentsMargins(2, 2, 2, 2)
        self._shape: tuple[int, int, bool] | None = None
        self.views: list[list[pg.ViewBox]] = []
        self.images: list[list[pg.ImageItem]] = []
        self.titles: list[list[pg.LabelItem]] = []
        self.matrices: list[list[np.ndarray | None]] = []
        self.row_labels: list[pg.LabelItem] = []
        self._frames: list[list[QGraphicsRectItem]] = []
        self._sizes: list[list[tuple[int, int]]] = []
        self._selected: tuple[int, int] | None = None
        self._base_titles: list[list[str]] = []  # "h1 · 2.03": what `set_maps` titles each thumbnail
        self.badges: list[list[str]] = []  # per thumbnail, text added to its title (`set_badges`), e.g. head scores
        self.scene().sigMouseClicked.connect(self._on_clicked)

    def grid_shape(self) -> tuple[int, int]:
        """(rows, columns) of thumbnails."""
        return (self._shape[0], self._shape[1]) if self._shape else (0, 0)

    def height_for(self, width: int) -> int:
        """A height that makes the thumbnails about square at this width."""
        rows, cols = self.grid_shape()
        if not rows or not cols:
            return 100
        cell = max(36.0, (width - 40.0) / cols)
        title = 30.0 if any(any(row) for row in self.badges) else 18.0  # badges: a second line of title
        return int(rows * (cell + title) + 6)

    def image_items(self) -> list[pg.ImageItem]:
        return [im for row in self.images for im in row]

    def _build(self, n_rows: int, n_cols: int) -> None:
        self.ci.clear()
        self.views, self.images, self.titles, self.row_labels, self._frames, self._sizes = [], [], [], [], [], []
        self.matrices = [[None] * n_cols for _ in range(n_rows)]
        for r in range(n_rows):
            label = self.ci.addLabel("", row=2 * r + 1, col=0, color=self._fg, size="9pt")
            self.row_labels.append(label)
            vrow, irow, trow, frow = [], [], [], []
            for c in range(n_cols):
                title = self.ci.addLabel("", row=2 * r, col=c + 1, color=self._fg, size="8pt")
                vb = self.ci.addViewBox(row=2 * r + 1, col=c + 1, lockAspect=False, enableMouse=False,
                                        enableMenu=False, invertY=True, defaultPadding=0.0)
                vb.setMinimumSize(36, 36)
                img = _image_item()
                vb.addItem(img)
                frame = _outline(3.0)
                vb.addItem(frame)
                vrow.append(vb)
                irow.append(img)
                trow.append(title)
                frow.append(frame)
            self.views.append(vrow)
            self.images.append(irow)
            self.titles.append(trow)
            self._frames.append(frow)
            self._sizes.append([(0, 0)] * n_cols)

    def set_maps(self, rows: Sequence[tuple[str, np.ndarray, np.ndarray]], with_mean: bool = True,
                 mean_entropies: Sequence[float] | None = None) -> bool:
        """rows: (row label, maps (H, T_q, T_k), entropy (H,)) per layer. Reuses the items when the grid's
        shape is unchanged, so a redraw only replaces the images. Returns whether the items were rebuilt."""
        n_rows = len(rows)
        n_heads = max((m.shape[0] for _, m, _ in rows), default=0)
        n_cols = n_heads + (1 if with_mean and n_heads > 1 else 0)
        rebuilt = self._shape != (n_rows, n_cols, with_mean)
        if rebuilt:
            self._build(n_rows, n_cols)
            self._shape = (n_rows, n_cols, with_mean)
        self._base_titles = [[""] * n_cols for _ in range(n_rows)]
        self.badges = []
        for r, (label, maps, ent) in enumerate(rows):
            self.row_labels[r].setText(label, color=self._fg)
            for c in range(n_cols):
                if c < maps.shape[0]:
                    A, title = maps[c], f"h{c + 1} · {ent[c]:.2f}"
                else:
                    A = maps.mean(0)
                    e = mean_entropies[r] if mean_entropies is not None else None
                    title = "mean" + (f" · {e:.2f}" if e is not None else "")
                img, vb = self.images[r][c], self.views[r][c]
                self.matrices[r][c] = A
                img.setImage(max_pool(A, self.THUMB_CELLS), autoLevels=False, levels=LEVELS)
                tq, tk = A.shape
                if self._sizes[r][c] != (tq, tk):
                    img.setRect(QRectF(0, 0, tk, tq))
                    vb.setRange(xRange=(0, tk), yRange=(0, tq), padding=0.0)
                    self._frames[r][c].setRect(QRectF(0, 0, tk, tq))
                    self._sizes[r][c] = (tq, tk)
                self._base_titles[r][c] = title
                self.titles[r][c].setText(title, color=self._fg)
        self.set_selected(*(self._selected or (-1, -1)))
        return rebuilt

    def set_badges(self, badges: Sequence[Sequence[str]]) -> None:
        """Add ``badges[r][c]`` (e.g. "ind .83") to thumbnail (r, c)'s title, on a second line; "" or a missing
        entry: the title alone. Kept until the next `set_maps`."""
        self.badges = [list(row) for row in badges]
        for r, trow in enumerate(self.titles):
            for c, label in enumerate(trow):
                extra = badges[r][c] if r < len(badges) and c < len(badges[r]) else ""
                base = self._base_titles[r][c] if r < len(self._base_titles) else ""
                label.setText(f"{base}<br>{extra}" if extra else base, color=self._fg)

    def title_text(self, row: int, col: int) -> str:
        """The text of thumbnail (row, col)'s title, as set (badges after "<br>")."""
        return self.titles[row][col].text

    def set_selected(self, row: int, col: int) -> None:
        """Outline one thumbnail (row, col); (-1, -1) for none."""
        self._selected = (row, col)
        for r, frow in enumerate(self._frames):
            for c, frame in enumerate(frow):
                frame.setVisible(r == row and c == col)

    def _on_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        for r, vrow in enumerate(self.views):
            for c, vb in enumerate(vrow):
                if vb.sceneBoundingRect().contains(ev.scenePos()):
                    self.headClicked.emit(r, c)
                    return
