"""A labelled picture of attention maps, painted with QPainter into a QImage and saved as PNG: what
``fatstudio attention … --out maps.png`` writes.

One row per map (``kind/l``), the maps grouped by kind (encoder, decoder, cross-attention, each in layer
order) under a heading per kind when there is more than one, one column per head (then, ``with_mean``, the
mean over heads), each heatmap titled as the app titles it, from 1 and with its kind ("decoder layer 1 · head
2", `MapName.head_label`), its query tokens down the left of the row and its key tokens under it (an
edt's cross maps: decoder queries × encoder keys), and one colour bar for the fixed 0-1 viridis scale every
map is drawn on (`attention_maps.colormap`, the scale of the app's views). Each attention weight is a square
of `Layout.cell` pixels, exactly its colour. Up to `ALL_LABELS` tokens a side every token is labelled (the
cells grow to a line of small text); longer inputs get every n-th label.

Painting text needs a QGuiApplication: `ensure_gui_application` makes one (a QApplication) (the "offscreen" platform on Linux,
so that it needs no display) when the command line has none.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QGuiApplication, QImage, QPainter
from PySide6.QtWidgets import QApplication

from ...core.inference.attention_maps import KIND_TITLES, LEVELS, MEAN_HEAD, AttentionMaps, colormap
from ...core.inference.prompting import display_token
from ...core.names import ATTENTION_KINDS, AttentionKind, MapName
from .saving import write_picture

__all__ = ["Layout", "by_kind", "ensure_gui_application", "render_attention_maps", "save_attention_png"]

BACKGROUND = QColor(255, 255, 255)
TEXT = QColor(32, 32, 32)
FRAME = QColor(160, 160, 160)
PAD, GAP, LABEL_GAP = 12, 18, 4  # px: the margin, between tiles, between a tile and its labels
FONT_PX = 12
BUDGET = 320  # px: the longest side of a map is about this long (1 to `MAX_CELL` px per weight)
MAX_CELL = 24
LABEL_CHARS = 12  # tokens longer than this are cut with an ellipsis
ALL_LABELS = 64  # inputs up to this many tokens a side get a label on every token
MIN_LABEL_PX = 8  # the token labels' smallest text, in pixels
BAR_WIDTH, BAR_HEIGHT = 16, 200
BAR_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
HEADER = "attention weights softmax(S/√d_attn) · rows: query tokens · columns: key tokens"

_apps: list[QGuiApplication] = []  # the application made here, kept alive


def ensure_gui_application() -> QGuiApplication:
    """The running application (the app's, a test's), else a new one: on Linux on the "offscreen" platform
    (unless $QT_QPA_PLATFORM names one), so that a command line without a display can paint text. A
    QApplication, not a bare QGuiApplication, so that widgets made later in the same process still work."""
    app = QGuiApplication.instance()
    if app is None:
        argv = ["fatstudio"]
        if sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM"):
            argv += ["-platform", "offscreen"]
        app = QApplication(argv)
        _apps.append(app)
    assert isinstance(app, QGuiApplication)
    return app


def by_kind(names: Sequence[MapName]) -> list[MapName]:
    """``names`` grouped by kind, in the order of `ATTENTION_KINDS` (the model gives an edt's maps interleaved:
    enc/0, enc/1, dec/0, cross/0, dec/1, …), each kind's maps in the order given."""
    return sorted(names, key=lambda n: ATTENTION_KINDS.index(n.kind))


@dataclass
class Layout:
    """Where `render_attention_maps` put things, in pixels of the image; keys (map name, head), head
    `MEAN_HEAD` for the mean; the titles are `MapName.head_label`."""

    width: int
    height: int
    cell: int  # px per attention weight, each side
    label_step: int = 1  # every label_step-th token is labelled (1: all)
    label_px: int = FONT_PX  # the token labels' text size
    tiles: dict[tuple[MapName, int], QRect] = field(default_factory=dict)  # the heatmaps
    titles: dict[tuple[MapName, int], QRect] = field(default_factory=dict)  # the band above each heatmap
    key_labels: dict[tuple[MapName, int], QRect] = field(default_factory=dict)  # the band under each heatmap
    query_labels: dict[MapName, QRect] = field(default_factory=dict)  # left of each row's first heatmap
    headings: dict[AttentionKind, QRect] = field(default_factory=dict)  # kind → its heading (more than one kind)
    rows: list[MapName] = field(default_factory=list)  # the maps, top to bottom
    colorbar: QRect = field(default_factory=QRect)  # the gradient, 1 at the top


def _font(bold: bool = False, px: int = FONT_PX) -> QFont:
    font = QFont()
    font.setPixelSize(px)
    font.setBold(bold)
    return font


def _rgb_image(rgb: np.ndarray) -> QImage:
    h, w, _ = rgb.shape
    data = np.ascontiguousarray(rgb, np.uint8).tobytes()
    return QImage(data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()  # copy: own the pixels


def render_attention_maps(maps: AttentionMaps, names: Sequence[MapName] | None = None, *,
                          with_mean: bool = False) -> tuple[QImage, Layout]:
    """Paint the maps (all, or ``names``, in that order): see the module. Returns the image and its layout."""
    ensure_gui_application()
    chosen = by_kind(list(maps.maps) if names is None else list(names))
    missing = [n for n in chosen if n not in maps.maps]
    if missing or not chosen:
        raise ValueError(f"there is no attention map '{missing[0]}'; there are {', '.join(map(str, maps.maps))}."
                         if missing else "there are no attention maps to draw.")
    rows = [(n, [*range(maps.n_heads(n)), *([MEAN_HEAD] if with_mean else [])]) for n in chosen]
    labels = {n: ([display_token(t, LABEL_CHARS) for t in maps.query_tokens(n)],
                  [display_token(t, LABEL_CHARS) for t in maps.key_tokens(n)]) for n in chosen}
    fm, bold_fm = QFontMetrics(_font()), QFontMetrics(_font(bold=True))
    line = fm.height()
    longest = max(max(maps.maps[n].shape[1:]) for n in chosen)
    s = max(1, min(MAX_CELL, BUDGET // longest))
    label_px = min(FONT_PX, max(MIN_LABEL_PX, math.floor(s / 1.25)))
    label_fm = QFontMetrics(_font(px=label_px))
    label_line = label_fm.height()
    if longest <= ALL_LABELS:
        s = max(s, label_line)  # a cell holds a line of label text: every token gets its label
    step = max(1, math.ceil(label_line / s))  # label every step-th token so that labels do not overlap
    cell_w = max(maps.maps[n].shape[2] for n in chosen) * s
    cell_h = max(maps.maps[n].shape[1] for n in chosen) * s
    query_w = max(label_fm.horizontalAdvance(t) for n in chosen for t in labels[n][0])
    key_h = max(label_fm.horizontalAdvance(t) for n in chosen for t in labels[n][1])  # written upwards
    n_cols = max(len(heads) for _, heads in rows)
    kinds = [n.kind for n in chosen]
    headed = len(set(kinds)) > 1
    title_h = line + LABEL_GAP
    left = PAD + query_w + LABEL_GAP
    col_w = max(cell_w, *(fm.horizontalAdvance(n.head_label(h)) for n, heads in rows for h in heads))
    grid_w = n_cols * col_w + (n_cols - 1) * GAP
    tick_w = max(fm.horizontalAdvance(f"{v:g}") for v in BAR_TICKS)
    bar_x = left + grid_w + 2 * GAP
    width = max(bar_x + BAR_WIDTH + LABEL_GAP + tick_w + PAD, PAD + fm.horizontalAdvance(HEADER) + PAD)
    top = PAD + line + GAP // 2
    layout = Layout(0, 0, s, step, label_px, rows=chosen)
    y = top
    for r, (name, heads) in enumerate(rows):
        if headed and (r == 0 or kinds[r] != kinds[r - 1]):
            layout.headings[kinds[r]] = QRect(PAD, y, width - 2 * PAD, bold_fm.height())
            y += bold_fm.height() + LABEL_GAP
        tq, tk = maps.maps[name].shape[1:]
        layout.query_labels[name] = QRect(PAD, y + title_h, query_w, tq * s)
        for c, head in enumerate(heads):
            x = left + c * (col_w + GAP)
            layout.titles[name, head] = QRect(x, y, col_w, line)
            layout.tiles[name, head] = QRect(x, y + title_h, tk * s, tq * s)
            layout.key_labels[name, head] = QRect(x, y + title_h + tq * s + LABEL_GAP, tk * s, key_h)
        y += title_h + tq * s + LABEL_GAP + key_h + GAP
    bar_h = min(BAR_HEIGHT, max(cell_h, 5 * line))
    first_tile = layout.tiles[rows[0][0], rows[0][1][0]]
    layout.colorbar = QRect(bar_x, first_tile.y() + line, BAR_WIDTH, bar_h)  # room above for its caption
    layout.width, layout.height = width, max(y - GAP + PAD, layout.colorbar.bottom() + line + PAD)

    image = QImage(layout.width, layout.height, QImage.Format.Format_RGB32)
    image.fill(BACKGROUND)
    p = QPainter(image)
    try:
        p.setFont(_font())
        p.setPen(TEXT)
        p.drawText(QRect(PAD, PAD, width - 2 * PAD, line), Qt.AlignmentFlag.AlignLeft, HEADER)
        for kind, rect in layout.headings.items():
            p.setFont(_font(bold=True))
            p.drawText(rect, Qt.AlignmentFlag.AlignLeft, KIND_TITLES[kind])
        for name, heads in rows:
            q_labels, k_labels = labels[name]
            qrect = layout.query_labels[name]
            p.setFont(_font(px=label_px))
            for i in range(0, len(q_labels), step):
                p.drawText(QRect(qrect.x(), qrect.y() + i * s + (s - label_line) // 2, query_w, label_line),
                           Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, q_labels[i])
            for head in heads:
                A = maps.matrix(name, head)
                tile = layout.tiles[name, head]
                p.drawImage(tile.topLeft(), _rgb_image(colormap(A).repeat(s, 0).repeat(s, 1)))
                p.setPen(FRAME)
                p.drawRect(tile.adjusted(-1, -1, 0, 0))
                p.setPen(TEXT)
                p.setFont(_font())
                p.drawText(layout.titles[name, head], Qt.AlignmentFlag.AlignLeft, name.head_label(head))
                p.setFont(_font(px=label_px))
                krect = layout.key_labels[name, head]
                for j in range(0, len(k_labels), step):
                    p.save()  # a key's label runs upwards from just under its column
                    p.translate(krect.x() + j * s + (s - label_line) // 2, krect.y())
                    p.rotate(-90)
                    p.drawText(QRect(-key_h, 0, key_h, label_line),
                               Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, k_labels[j])
                    p.restore()
        p.setFont(_font())
        bar = layout.colorbar
        ramp = np.linspace(LEVELS[1], LEVELS[0], bar.height())[:, None].repeat(bar.width(), 1)
        p.drawImage(bar.topLeft(), _rgb_image(colormap(ramp)))
        p.setPen(FRAME)
        p.drawRect(bar.adjusted(-1, -1, 0, 0))
        p.setPen(TEXT)
        p.drawText(QRect(bar.x(), bar.y() - line // 2 - LABEL_GAP - line, width - bar.x(), line),
                   Qt.AlignmentFlag.AlignLeft, "weight")
        for v in BAR_TICKS:
            ty = bar.y() + round((1 - v) * (bar.height() - 1))
            p.drawLine(bar.right() + 1, ty, bar.right() + 4, ty)
            p.drawText(QRect(bar.right() + 1 + LABEL_GAP, ty - line // 2, tick_w + 2, line),
                       Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, f"{v:g}")
    finally:
        p.end()
    return image, layout


def save_attention_png(maps: AttentionMaps, path: str | Path, names: Sequence[MapName] | None = None, *,
                       with_mean: bool = False) -> Path:
    """Write `render_attention_maps` to ``path`` as a PNG file. Returns the path."""
    image, _ = render_attention_maps(maps, names, with_mean=with_mean)
    return write_picture(image, path)
