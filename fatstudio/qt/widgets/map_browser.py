"""The Attention tab's map browser: a grid of layers × heads thumbnails (plus the mean over heads) titled
with each head's entropy in nats and its highest head score where ≥ 0.5, the sortable ``entropyTable`` (one
row per head: entropy and head scores) below it, and one head large (``attentionView``) with the tokens on
both axes and the weight under the cursor below it (``attentionHoverLabel``), the first of the tabs
``viewTabs`` (the panel adds its experiments); a right click on a thumbnail asks for its menu
(``cellMenuRequested``).

Two columns the user can widen (``attentionColumns``), each a splitter whose parts the user can move
(``attentionOverview``: the grid over the table, ``attentionDetail``: the tabs), named so that the window
remembers them; the panel adds its own parts under each. The grid's thumbnails are as large as its part allows
and square, so that the whole grid shows when it fits at `HeadGrid.MIN_CELL` px a thumbnail; the helpers
(`grid_heights`, `table_height`, `overview_width`) say what each part needs in the fonts it has."""
from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QScrollArea,
    QSplitter,
    QStyle,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ...core.inference.attention_maps import MEAN_HEAD, AttentionMaps, attention_entropy
from ...core.inference.prompting import display_token
from ...core.inspect.head_scores import SCORE_TITLES, SCORES, HeadScores
from ...core.names import AttentionKind, MapName
from .forms import set_header_tip
from .heatmap import HeadGrid, HeatmapView

MEAN = MEAN_HEAD  # head index of "mean over heads"
BADGES = {"prev": "prev", "diag": "diag", "sink": "sink", "induction": "ind"}  # a score in a thumbnail's title
BADGE_AT = 0.5  # a thumbnail's title names the scores at least this high
HEADERS = {**BADGES, "H (nats)": "H"}  # the table's column headers (its caption says "nats")


class _NumberItem(QTableWidgetItem):
    """A table cell shown as text and sorted by a number."""

    def __init__(self, text: str, value: float):
        super().__init__(text)
        self.value = float(value)

    def __lt__(self, other) -> bool:
        return self.value < getattr(other, "value", 0.0)



class MapBrowser(QSplitter):
    """The grid and table (left) and the large map (right) of one kind of attention. ``cellClicked(row,
    column)``: a thumbnail or a table row chose a layer (row) and head (column; the heads' count: the
    mean); ``queryClicked(query)``: a row of the large map was clicked."""

    cellClicked = Signal(int, int)
    cellMenuRequested = Signal(int, int, QPoint)  # a right click on a thumbnail: row, column, screen point
    queryClicked = Signal(int)
    TABLE_COLUMNS = ("layer", "head", "H (nats)", *SCORES)  # the entropy table's columns

    def __init__(self, parent=None):
        super().__init__(Qt.Orientation.Horizontal, parent)
        self.setObjectName("attentionColumns")
        self.maps: AttentionMaps | None = None  # what `show_grid` drew: the maps, the kind and the head scores
        self.kind: AttentionKind | None = None
        self.scores: HeadScores | None = None
        self._tokens: tuple[list[str], list[str]] = ([], [])  # the large map's query and key tokens
        self.headGrid = HeadGrid()
        self.headGrid.setObjectName("headGrid")
        self.headGrid.setToolTip("Every head of every layer (rows: layers, columns: heads, then their mean), "
                                 "titled with the head's entropy in nats and its highest head score when that "
                                 "is at least 0.5 (prev, diag, sink, ind = induction). Click one to show it "
                                 "large.")
        self.gridScroll = QScrollArea(objectName="headGridScroll")
        self.gridScroll.setWidgetResizable(False)  # sized by `_fit_grid`: square thumbnails, centred
        self.gridScroll.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.gridScroll.setWidget(self.headGrid)
        self.gridScroll.setMinimumHeight(60)
        self.gridScroll.installEventFilter(self)

        self.attentionView = HeatmapView()
        self.attentionView.setObjectName("attentionView")
        self.attentionView.setToolTip("")
        self.hoverLabel = QLabel(" ")
        self.hoverLabel.setObjectName("attentionHoverLabel")
        self.hoverLabel.setTextFormat(Qt.TextFormat.RichText)
        self.hoverLabel.setWordWrap(True)  # a long line must not widen the window
        self.hoverLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right = QWidget()  # the first of ``viewTabs``; the panel adds its experiments beside it
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.attentionView, 1)
        rl.addWidget(self.hoverLabel)

        self.entropyTable = QTableWidget(0, 0)
        self.entropyTable.setObjectName("entropyTable")
        self.entropyTable.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.entropyTable.setToolTip(
            "One row per head (and per layer's mean over heads). H: entropy of the head's attention rows, averaged "
            "over the queries, in nats (0 = every query looks at one key; log(T) = uniform). The scores are mean "
            "attention weights (0-1): prev = to the previous token, diag = to itself, sink = to the first token "
            "(all on the text shown), induction = from each token of the second copy of random tokens repeated "
            "twice to the token after its earlier occurrence (the loaded model). Click a header to sort, a row "
            "to show that head large.")
        self.entropyTable.setSortingEnabled(True)
        self.entropyTable.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.entropyTable.verticalHeader().setVisible(False)
        self.entropyCaption = QLabel("Per-head entropy (nats) and scores")
        self.tableBox = QWidget(objectName="entropyTableBox")
        tl = self._tableLayout = QVBoxLayout(self.tableBox)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.entropyCaption)
        tl.addWidget(self.entropyTable, 1)
        self.entropyTable.setMinimumHeight(60)
        self.viewTabs = QTabWidget()
        self.viewTabs.setObjectName("attentionViewTabs")
        self.viewTabs.setDocumentMode(True)
        self.viewTabs.addTab(right, "Head shown large")

        self.overview = QSplitter(Qt.Orientation.Vertical, objectName="attentionOverview")
        self.overview.addWidget(self.gridScroll)
        self.overview.addWidget(self.tableBox)
        self.detail = QSplitter(Qt.Orientation.Vertical, objectName="attentionDetail")
        self.detail.addWidget(self.viewTabs)
        for part in (self.overview, self.detail):
            part.setChildrenCollapsible(False)
        self.addWidget(self.overview)
        self.addWidget(self.detail)
        self.setStretchFactor(0, 0)  # a wider window widens the large map
        self.setStretchFactor(1, 1)
        self.setChildrenCollapsible(False)
        self.headGrid.headClicked.connect(self.cellClicked)
        self.headGrid.headMenuRequested.connect(self.cellMenuRequested)
        self.entropyTable.cellClicked.connect(self._on_table_clicked)
        self.attentionView.hovered.connect(self._on_hover)
        self.attentionView.queryClicked.connect(self.queryClicked)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Resize and obj is self.gridScroll:
            self._fit_grid()
        return super().eventFilter(obj, event)

    # ---- drawing -------------------------------------------------------------------------------------------
    def show_grid(self, maps: AttentionMaps, kind: AttentionKind, scores: HeadScores | None, current: MapName) -> None:
        """Draw every layer × head of ``kind`` in ``maps`` in the grid and the table, with the head ``scores``
        (None: not measured yet); ``current``: the map shown large."""
        self.maps, self.kind, self.scores = maps, kind, scores
        names = [MapName(kind, l) for l in maps.layers(kind)]
        rows = [(name.label.replace(" layer", "<br>layer"), maps.maps[name], maps.entropy(name)) for name in names]
        mean_ents = [maps.mean_entropy(name) for name in names]
        if self.headGrid.set_maps(rows, with_mean=True, mean_entropies=mean_ents):
            self.attentionView.share_colorbar(self.headGrid.image_items())  # one colour bar for all
        self._fill_entropy_table(maps, names, rows, mean_ents, current)
        self.headGrid.set_badges(self._grid_badges(maps, names))
        self._fit_grid()

    def _grid_badges(self, maps: AttentionMaps, names: list[MapName]) -> list[list[str]]:
        """Per thumbnail (layers ``names`` × heads, then the mean) its highest score if ≥ `BADGE_AT`, e.g. "ind
        0.83"."""
        out = []
        for name in names:
            per = [(sc, v) for sc in SCORES if (v := self._score(name, sc)) is not None]
            n = maps.n_heads(name)
            row = []
            for h in range(n + 1):
                best = max(((float(v[h] if h < n else v.mean()), sc) for sc, v in per), default=(0.0, ""))
                row.append(f"{BADGES[best[1]]} {best[0]:.2f}" if best[0] >= BADGE_AT else "")
            out.append(row)
        return out

    def _fill_entropy_table(self, maps: AttentionMaps, names: list[MapName], rows, mean_ents,
                            current: MapName) -> None:
        """One row per head of each layer ``names`` of the kind shown, then the layer's mean over heads: layer, head,
        entropy, and the head scores of `scores` (blank until they arrive; the mean's are the heads' mean,
        as every score is linear in the weights). Sortable by any column."""
        t = self.entropyTable
        t.setSortingEnabled(False)  # filling a sorted table would move rows under the loop
        t.clear()
        t.setColumnCount(len(self.TABLE_COLUMNS))
        t.setHorizontalHeaderLabels([HEADERS.get(c, c) for c in self.TABLE_COLUMNS])  # "ind", "H": a narrow column
        set_header_tip(t, 2, "H: the entropy of the head's attention rows, averaged over the queries, in nats")
        for c, score in enumerate(SCORES, 3):
            set_header_tip(t, c, SCORE_TITLES[score] + ": mean attention weight, 0-1")
        T = max(2, maps.maps[current].shape[-1])
        log_T = np.log(T)
        out: list[tuple[int, int, str, float, dict[str, float]]] = []  # (row, col, head, entropy, scores)
        for r, (name, (_, _, ent)) in enumerate(zip(names, rows)):
            per = {sc: v for sc in SCORES if (v := self._score(name, sc)) is not None}
            for h, e in enumerate(ent):
                out.append((r, h, f"{h + 1}", float(e), {sc: float(v[h]) for sc, v in per.items()}))
            out.append((r, len(ent), "mean", float(mean_ents[r]), {sc: float(v.mean()) for sc, v in per.items()}))
        t.setRowCount(len(out))
        for i, (r, c, head, e, sc) in enumerate(out):
            layer = names[r].layer
            where = names[r].head_label(MEAN if head == "mean" else c)
            layer_item = _NumberItem(f"{layer + 1}", layer + (0.5 if head == "mean" else 0.0))
            layer_item.setData(Qt.ItemDataRole.UserRole + 1, (r, c))  # what a click shows large
            t.setItem(i, 0, layer_item)
            t.setItem(i, 1, _NumberItem(head, c))
            item = _NumberItem(f"{e:.2f}", e)
            shade = QColor(70, 130, 180)  # darker = more focused (lower entropy)
            shade.setAlphaF(max(0.0, 1.0 - e / log_T) * 0.6)
            item.setBackground(shade)
            item.setToolTip(f"{where}: {e:.4f} nats (uniform over {T} keys would be {log_T:.2f})")
            t.setItem(i, 2, item)
            for col, score in enumerate(SCORES, 3):
                value = sc.get(score)
                item = _NumberItem("" if value is None else f"{value:.2f}", -1.0 if value is None else value)
                if value is not None:
                    tint = QColor(230, 126, 34)  # more orange = higher score
                    tint.setAlphaF(min(max(value, 0.0), 1.0) * 0.6)
                    item.setBackground(tint)
                    item.setToolTip(f"{where}: {SCORE_TITLES[score]} score {value:.4f}")
                else:
                    item.setToolTip("cross-attention relates two sequences: it gets no head scores"
                                    if not names[r].self_attention else
                                    "not measured: the scores come from a worker; induction needs the model loaded "
                                    "(probe maps of a run trained before scores were saved have none)")
                t.setItem(i, col, item)
        for i in range(t.rowCount()):
            for col in range(t.columnCount()):
                if (cell := t.item(i, col)) is not None:  # every cell is set above
                    cell.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        # each column as wide as its header and numbers (a narrow pane scrolls rather than cutting them)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        rows = t.verticalHeader()  # rows a line of text high (the style's default is taller): more rows shown
        rows.setMinimumSectionSize(1)
        rows.setDefaultSectionSize(t.fontMetrics().lineSpacing() + 6)
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        t.setSortingEnabled(True)

    def _score(self, name: MapName, score: str) -> np.ndarray | None:
        return self.scores.get(name, score) if self.scores is not None else None

    def score_table(self) -> list[dict[str, str]]:
        """The entropy table as shown (in its current order): one dict per row, column (`TABLE_COLUMNS`) → text."""
        t = self.entropyTable
        cols = self.TABLE_COLUMNS
        return [{cols[c]: item.text() if (item := t.item(r, c)) is not None else "" for c in range(t.columnCount())}
                for r in range(t.rowCount())]

    def _fit_grid(self) -> None:
        """Square thumbnails as large as the grid's part allows, the whole grid where it fits at
        `HeadGrid.MIN_CELL` (else it scrolls, and never cuts a title: a column is as wide as its title)."""
        sa, grid = self.gridScroll, self.headGrid
        viewport = sa.maximumViewportSize()  # the viewport without scroll bars
        cell = grid.cell_for(viewport.width(), viewport.height())
        if grid.size_for(cell)[1] > viewport.height():  # it scrolls: room for the scroll bar (no oscillation)
            cell = grid.cell_for(viewport.width() - sa.verticalScrollBar().sizeHint().width(), viewport.height())
        grid.fit(cell)

    # ---- what each part needs, in its own fonts (the panel lays its columns out with these) -------------------
    def grid_heights(self, width: int) -> tuple[int, int]:
        """(least, best): the grid's part's height that shows the whole grid at ``width`` (the column's), its
        thumbnails at their least, and square at the column's width (no taller than that is of use)."""
        grid, frame = self.headGrid, 2 * self.gridScroll.frameWidth()
        inner = width - frame
        return grid.size_for(grid.MIN_CELL)[1] + frame, grid.size_for(grid.cell_for(inner))[1] + frame

    def table_height(self, rows: int) -> int:
        """The table's part's height that shows its caption, header and ``rows`` rows (fewer if it has fewer)."""
        t = self.entropyTable
        rows = min(rows, t.rowCount()) if t.rowCount() else rows
        row = t.rowHeight(0) if t.rowCount() else t.verticalHeader().defaultSectionSize()
        sideways = t.horizontalScrollBar().sizeHint().height() if t.horizontalScrollBar().isVisible() else 0
        return (self.entropyCaption.sizeHint().height() + self._tableLayout.spacing() + t.horizontalHeader().sizeHint().height()
                + rows * row + 2 * t.frameWidth() + sideways)

    def overview_width(self) -> int:
        """The left column's width at which the grid and the table need not scroll sideways."""
        t = self.entropyTable
        header = t.horizontalHeader()
        # each column as its header and its cells need (not as laid out: the last one stretches to the column)
        table = sum(max(header.sectionSizeHint(c), t.sizeHintForColumn(c)) for c in range(header.count()))
        table += 2 * t.frameWidth() + t.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent) + 4
        grid = self.headGrid.minimum_width() + 2 * self.gridScroll.frameWidth()
        return max(table, grid, 240)

    def show_large(self, A: np.ndarray, queries: list[str], keys: list[str], where: str, cell: tuple[int, int]) -> None:
        """Draw ``A`` (T_query × T_key) large, titled ``where`` and its entropy, and outline its ``cell`` of the
        grid (row, column)."""
        ent = float(attention_entropy(A))
        title = f"{where} · H = {ent:.2f} nats"
        self.attentionView.set_matrix(A, queries, keys, title=html.escape(title))
        self.headGrid.set_selected(*cell)
        self._tokens = (queries, keys)
        self.hoverLabel.setText(f"{where}: hover for a weight; click a row to lay it over the text.")

    def _on_table_clicked(self, row: int, col: int) -> None:
        item = self.entropyTable.item(row, 0)
        cell = item.data(Qt.ItemDataRole.UserRole + 1) if item is not None else None
        if cell is not None:
            self.cellClicked.emit(*cell)

    def _on_hover(self, q: int, k: int) -> None:
        A = self.attentionView.matrix
        if q < 0 or A is None:
            return
        qt, kt = self._tokens
        self.hoverLabel.setText(
            f"query {q + 1} <b><code>{html.escape(display_token(qt[q]))}</code></b> → key {k + 1} "
            f"<b><code>{html.escape(display_token(kt[k]))}</code></b>: weight <b>{A[q, k]:.4f}</b>")
