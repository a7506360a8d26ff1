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
from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontInfo, QFontMetricsF, QPalette, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QWidget

from ...core.inference.attention_maps import LEVELS, VIRIDIS, VIRIDIS_POSITIONS, max_pool
from ...core.inference.prompting import display_token

COLORMAP = pg.ColorMap(VIRIDIS_POSITIONS, VIRIDIS, name="viridis")

__all__ = ["COLORMAP", "LEVELS", "SHADOWED", "HeadGrid", "HeatmapView", "TokenAxis", "display_token", "max_pool"]


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

    Every token gets its label while the font fits between `MIN_FONT_PX` and the axis's own size: the font
    shrinks with the cells (on inputs up to l_max = 64 at the app's size, all of them), and the key axis
    (bottom) writes its labels upwards when they are wider than a cell. Denser still, every n-th label (n a
    whole number, labels on multiples of n). ``drawn`` holds the labels of the last paint.
    """

    textHeight: int  # pyqtgraph's AxisItem's room for the labels, in px (set there, untyped)
    MIN_FONT_PX = 6  # smallest label text, in pixels

    def __init__(self, orientation: str, **kw):
        super().__init__(orientation, **kw)
        self._labels: list[str] = []
        base = QFont(self.font())
        if base.pixelSize() <= 0:
            base.setPixelSize(max(self.MIN_FONT_PX, round(QFontInfo(base).pixelSize())))
        self._base_font = base
        self.font_px = base.pixelSize()
        self.rotated = False  # the key labels run upwards
        self.drawn: list[str] = []
        self._values: list[float] = []  # the ticks of the last `tickValues`
        self.enableAutoSIPrefix(False)

    def set_tokens(self, tokens: Sequence[str]) -> None:
        self._labels = [display_token(t) for t in tokens]
        self.picture = None
        self.update()

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    def _font(self, px: int) -> QFont:
        font = QFont(self._base_font)
        font.setPixelSize(px)
        return font

    def fit(self, lo: float, hi: float, size_px: float) -> int:
        """Choose the label font, the direction and the label step for ``size_px`` pixels showing tokens
        ``lo``…``hi``; returns the step (1: every token)."""
        if not self._labels:
            return 1
        cell = max(size_px, 1.0) / max(hi - lo, 1e-9)  # px per token along the axis
        base = self._base_font.pixelSize()
        high = max(self.MIN_FONT_PX, min(base, math.floor(cell / 1.1)))  # a line of text per cell
        self.rotated, px = False, high
        if self.orientation in ("bottom", "top"):
            widest = max(QFontMetricsF(self._font(base)).horizontalAdvance(s) for s in self._labels) + 2.0
            across = math.floor(base * cell / widest)  # side by side: the font at which the widest fits
            if across >= min(base, 8):
                px = min(base, across)
            else:
                self.rotated = True
        if self.style["tickFont"] is None or self.style["tickFont"].pixelSize() != px:
            self.setStyle(tickFont=self._font(px))  # only on a change: it asks for a repaint
        self.font_px = px
        extent = 1.1 * px if self.rotated or self.orientation in ("left", "right") else \
            max(QFontMetricsF(self._font(px)).horizontalAdvance(s) for s in self._labels) + 2.0
        return max(1, math.ceil(extent / cell - 1e-9))

    def tickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            i = int(math.floor(v))
            out.append(self._labels[i] if 0 <= i < len(self._labels) else "")
        return out

    def tickValues(self, minVal, maxVal, size):
        n = len(self._labels)
        if n == 0:
            return []
        lo, hi = min(minVal, maxVal), max(minVal, maxVal)
        step = self.fit(lo, hi, size)
        first = max(0, math.ceil(lo - 0.5))
        first = math.ceil(first / step) * step
        last = min(n - 1, math.floor(hi - 0.5))
        self._values = [i + 0.5 for i in range(first, last + 1, step)]
        return [(float(step), list(self._values))]

    def generateDrawSpecs(self, p):
        p.setFont(self.style["tickFont"] or self._base_font)
        specs = super().generateDrawSpecs(p)
        if specs is None or not self.rotated:
            return specs
        # written upwards from under each tick: (x, text) for `drawPicture`; the axis is as tall as the longest
        axis_spec, tick_specs, _ = specs
        width, (r0, r1) = self.mapRectFromParent(self.geometry()).width(), self.range
        scale = width / (r1 - r0) if r1 != r0 else 1.0
        texts = [((v - r0) * scale, s) for v, s in zip(self._values, self.tickStrings(self._values, 1, 1))]
        fm = QFontMetricsF(self.style["tickFont"])
        tall = math.ceil(max((fm.horizontalAdvance(s) for _, s in texts), default=0.0)) + 2
        if tall != self.textHeight:
            self.textHeight = tall
            self._updateHeight()
        return axis_spec, tick_specs, texts

    def _updateMaxTextSize(self, x):
        if not self.rotated:  # rotated: `generateDrawSpecs` sets the height
            super()._updateMaxTextSize(x)

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        if not self.rotated:
            super().drawPicture(p, axisSpec, tickSpecs, textSpecs)
            self.drawn = [text for _, _, text in textSpecs]
            return
        super().drawPicture(p, axisSpec, tickSpecs, [])
        top = self.mapRectFromParent(self.geometry()).top() + max(0, self.style["tickLength"]) + \
            self.style["tickTextOffset"][1]
        line = QFontMetricsF(self.style["tickFont"]).height()
        p.setFont(self.style["tickFont"])
        p.setPen(self.textPen())
        for x, text in textSpecs:
            p.save()
            p.translate(x, top)
            p.rotate(-90)
            p.drawText(QRectF(-self.textHeight, -line / 2, self.textHeight, line),
                       int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), text)
            p.restore()
        self.drawn = [text for _, text in textSpecs]


# GraphicsLayoutWidget.__init__ sets these names on the instance, bound to its layout (``self.clear`` is
# ``self.ci.clear``, which removes every item for good): a method of that name in a subclass never runs.
SHADOWED = ("nextRow", "nextCol", "nextColumn", "addPlot", "addViewBox", "addItem", "getItem", "addLayout",
            "addLabel", "removeItem", "itemIndex", "clear")


class HeatmapView(pg.GraphicsLayoutWidget):
    """One attention matrix large: keys along the top/bottom axis, queries down the left axis, token labels,
    zoom and scroll with the mouse (ViewBox), a colour bar on the fixed 0-1 scale, a row highlight.
    `clear_matrix` empties it (not ``clear``: see `SHADOWED`).

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
                ax = self.colorbar.getAxis(name)
                ax.setPen(fg)
                ax.setTextPen(fg)
            # its tick labels ("0.0" … "1.0") in full: the bar's fixed 45 px cut them at larger fonts
            ticks = self.colorbar.axis
            fm = QFontMetricsF(ticks.style["tickFont"] or ticks.font())
            ticks.setWidth(math.ceil(fm.horizontalAdvance("0.75") + max(0, ticks.style["tickLength"])
                                     + ticks.style["tickTextOffset"][0] + 8))
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

    def clear_matrix(self) -> None:
        """Show no matrix (the plot, its axes and the colour bar stay, for the next `set_matrix`)."""
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
    headMenuRequested = Signal(int, int, QPoint)  # a right click on thumbnail (row, column), at this screen point
    THUMB_CELLS = 64
    MIN_CELL = 32  # px: a thumbnail's side at least (its pattern still shows; click it for the map)
    SPACING, MARGIN = 2, 2  # px: between the layout's cells, around them

    def __init__(self, parent=None):
        super().__init__(parent)
        bg, fg = _palette_colors(self)
        self.setBackground(bg)
        self._fg = fg
        self.ci.setSpacing(self.SPACING)
        self.ci.setContentsMargins(*(self.MARGIN,) * 4)
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

    def _text_width(self, texts, point_size: float) -> float:
        """The widest line of ``texts`` (rich text lines split at <br>) at ``point_size``, in px."""
        font = QFont(self.font())
        font.setPointSizeF(point_size)
        fm = QFontMetricsF(font)
        return max((fm.horizontalAdvance(line) for t in texts for line in t.split("<br>")), default=0.0)

    def label_width(self) -> float:
        """px the row labels take, left of the thumbnails."""
        return self._text_width([label.text for label in self.row_labels], 9) + 10

    def column_widths(self) -> list[float]:
        """Each column's narrowest width at which no thumbnail's title or badge in it is cut."""
        cols = self.grid_shape()[1]
        out = []
        for c in range(cols):
            texts = [row[c] for rows in (self._base_titles, self.badges) for row in rows if c < len(row)]
            out.append(max(float(self.MIN_CELL), self._text_width(texts, 8) + 8))
        return out

    def minimum_width(self) -> int:
        """The narrowest width at which no title, badge or row label is cut."""
        cols = self.grid_shape()[1]
        return math.ceil(self.label_width() + sum(self.column_widths()) + self._air(cols, 1))

    def title_height(self) -> float:
        """px a row of titles takes (two lines where a badge is shown), as its labels lay out in their font."""
        return max((label.item.boundingRect().height() for row in self.titles for label in row), default=0.0)

    def cell_for(self, width: float, height: float | None = None) -> float:
        """The side of a square thumbnail that fits ``width`` (and ``height``, when given), at least `MIN_CELL`."""
        rows, cols = self.grid_shape()
        if not rows or not cols:
            return self.MIN_CELL
        room, narrow = width - self.label_width() - self._air(cols, 1), self.column_widths()
        cell = room / cols
        wide = [w for w in narrow if w > cell]  # columns whose titles are wider than a square thumbnail: as wide
        while wide and len(wide) < cols:
            cell = (room - sum(wide)) / (cols - len(wide))
            if len(wide) == len(now := [w for w in narrow if w > cell]):
                break
            wide = now
        if height is not None:
            cell = min(cell, (height - self._air(rows, 2)) / rows - self.title_height())
        return max(float(self.MIN_CELL), cell)

    def _air(self, n: int, per: int) -> float:
        """The layout's spacing and margins along a side with ``n`` thumbnails, ``per`` layout cells each (a
        row of titles over a row of thumbnails), and the row labels' column across."""
        return n * per * self.SPACING + 2 * self.MARGIN + 2

    def size_for(self, cell: float) -> tuple[int, int]:
        """(width, height) of the grid with thumbnails ``cell`` px a side (a column is never narrower than its
        title)."""
        rows, cols = self.grid_shape()
        if not rows or not cols:
            return 100, 100
        width = self.label_width() + sum(max(cell, w) for w in self.column_widths()) + self._air(cols, 1)
        return math.ceil(width), math.ceil(rows * (cell + self.title_height()) + self._air(rows, 2))

    def fit(self, cell: float) -> None:
        """Lay the grid out with thumbnails ``cell`` px a side (a column as wide as its title where that is
        wider), at the size that holds them (`size_for`)."""
        grid = self.ci.layout
        grid.setColumnMinimumWidth(0, self.label_width())
        for c, narrowest in enumerate(self.column_widths(), 1):
            grid.setColumnMinimumWidth(c, max(cell, narrowest))
        self.setFixedSize(*(max(1, n) for n in self.size_for(cell)))

    def height_for(self, width: int) -> int:
        """A height that makes the thumbnails about square at this width."""
        return self.size_for(self.cell_for(width))[1]

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
                vb.setMinimumSize(self.MIN_CELL, self.MIN_CELL)
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

    def set_selected(self, row: int, col: int) -> None:
        """Outline one thumbnail (row, col); (-1, -1) for none."""
        self._selected = (row, col)
        for r, frow in enumerate(self._frames):
            for c, frame in enumerate(frow):
                frame.setVisible(r == row and c == col)

    def _on_clicked(self, ev) -> None:
        if ev.button() not in (Qt.MouseButton.LeftButton, Qt.MouseButton.RightButton):
            return
        for r, vrow in enumerate(self.views):
            for c, vb in enumerate(vrow):
                if vb.sceneBoundingRect().contains(ev.scenePos()):
                    if ev.button() == Qt.MouseButton.LeftButton:
                        self.headClicked.emit(r, c)
                    else:
                        self.headMenuRequested.emit(r, c, ev.screenPos().toPoint())
                    return
