"""Attention panel: every head's softmax(S/√d_attn) (Algorithm 4) of the last forward pass.

- a grid of layers × heads thumbnails (plus the mean over heads), titled with each head's entropy in nats
  (the mean over queries of the entropy of each attention row), all on one fixed 0-1 colour scale;
- one head large (``attentionView``) with the tokens on both axes: zoom with the wheel, pan by dragging,
  the weight under the cursor with its query and key tokens below it;
- ``kindCombo`` (edt models: encoder self-, decoder self- and cross-attention), ``layerCombo``, ``headCombo``
  (the heads and "mean over heads");
- click a query (a row of the large map, or a token of the text strip) to lay its attention row over the
  text as token backgrounds;
- export the large map as a picture with its token labels (`export_png`; "grid": the layers × heads of the
  kind shown as the core's heatmaps) and its numbers as CSV (`export_csv`), both written by the core's
  `AttentionMaps` (the CLI's writers and colours) except the picture of the view.

The arrays drawn are the ones in the `AttentionMaps` given to `show_maps`, untouched; what there is (kinds,
layers, heads) and every number shown come from it.
"""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...core.attention_maps import KIND_TITLES, MEAN_HEAD, AttentionMaps, attention_entropy, map_name
from ...core.prompting import display_token
from ..widgets.heatmap import HeadGrid, HeatmapView
from ..widgets.token_view import TokenView, weight_tint

KIND_NAMES = KIND_TITLES  # "self", "enc", "dec", "cross" → the words shown for them
MEAN = MEAN_HEAD  # head index of "mean over heads"


class AttentionPanel(QWidget):
    """Shows an `AttentionMaps`; the main window connects ``prompt.attentionReady`` to `show_maps`."""

    viewChanged = Signal()  # kind, layer, head or the maps changed

    def __init__(self, parent=None):
        super().__init__(parent)
        self.maps: AttentionMaps | None = None
        self.kind: str | None = None
        self.layer = 0
        self.head = 0  # MEAN for the mean over heads
        self.query: int | None = None
        self._cross = False  # the queries are not the keys: a separate query strip is shown
        self._updating = False
        self._build()

    # ---- layout ------------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        self.stack = QStackedWidget()
        outer.addWidget(self.stack)
        self.placeholder = QLabel("No attention yet. Generate, translate, predict masks or classify in the Prompt "
                                  "panel: the attention weights of that forward pass appear here.")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.stack.addWidget(self.placeholder)

        page = QWidget()
        pl = QVBoxLayout(page)
        pl.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.kindCombo = QComboBox()
        self.kindCombo.setObjectName("kindCombo")
        self.kindCombo.setToolTip("Which attention of an encoder-decoder: the encoder's self-attention over the "
                                  "source, the decoder's causal self-attention, or the decoder's cross-attention "
                                  "to the encoder's output.")
        self.layerCombo = QComboBox()
        self.layerCombo.setObjectName("layerCombo")
        self.layerCombo.setToolTip("Layer l of the stack (0 = the first).")
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("headCombo")
        self.headCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.kindCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.headCombo.setToolTip("Head h of MHAttention (Algorithm 5), or the mean of the layer's heads. "
                                  "H = entropy of the attention rows, averaged over queries, in nats.")
        self.kindLabel = QLabel("attention")
        bar.addWidget(self.kindLabel)
        bar.addWidget(self.kindCombo)
        bar.addWidget(QLabel("layer"))
        bar.addWidget(self.layerCombo)
        bar.addWidget(QLabel("head"))
        bar.addWidget(self.headCombo)
        bar.addStretch(1)
        self.fitButton = QPushButton("Fit")
        self.fitButton.setObjectName("attentionFitButton")
        self.fitButton.setToolTip("Show the whole matrix again (zoom with the mouse wheel, pan by dragging).")
        self.exportPngButton = QPushButton("Export PNG…")
        self.exportPngButton.setObjectName("exportPngButton")
        self.exportPngButton.setToolTip("Save the large map (the head, or the mean, shown) as a PNG heatmap: one "
                                        "square of pixels per weight on the fixed 0-1 colour scale, drawn as "
                                        "'fatstudio attention --out FILE.png' draws maps.")
        self.exportCsvButton = QPushButton("Export CSV…")
        self.exportCsvButton.setObjectName("exportCsvButton")
        self.exportCsvButton.setToolTip("Save the numbers of the large map: one row per query token, the key "
                                        "tokens as the header.")
        for b in (self.fitButton, self.exportPngButton, self.exportCsvButton):
            bar.addWidget(b)
        pl.addLayout(bar)

        self.headGrid = HeadGrid()
        self.headGrid.setObjectName("headGrid")
        self.headGrid.setToolTip("Every head of every layer (rows: layers, columns: heads, then their mean), "
                                 "titled with the head's entropy in nats. Click one to show it large.")
        self.gridScroll = QScrollArea()
        self.gridScroll.setWidgetResizable(True)
        self.gridScroll.setWidget(self.headGrid)
        self.gridScroll.setMinimumWidth(220)
        self.gridScroll.installEventFilter(self)

        self.attentionView = HeatmapView()
        self.attentionView.setObjectName("attentionView")
        self.attentionView.setToolTip("")
        self.hoverLabel = QLabel(" ")
        self.hoverLabel.setObjectName("attentionHoverLabel")
        self.hoverLabel.setTextFormat(Qt.TextFormat.RichText)
        self.hoverLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.attentionView, 1)
        rl.addWidget(self.hoverLabel)

        self.entropyTable = QTableWidget(0, 0)
        self.entropyTable.setObjectName("entropyTable")
        self.entropyTable.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.entropyTable.setToolTip("Entropy of each head's attention rows, averaged over the queries, in nats: "
                                     "0 = every query looks at one key; log(T) = uniform. Click a cell to show "
                                     "that head large.")
        self.entropyCaption = QLabel("Per-head entropy (nats)")
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.gridScroll, 3)
        lv.addWidget(self.entropyCaption)
        lv.addWidget(self.entropyTable, 1)
        self.gridScroll.setMinimumHeight(120)
        self.entropyTable.setMinimumHeight(60)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setChildrenCollapsible(False)

        strip = QWidget()
        sl = QVBoxLayout(strip)
        sl.setContentsMargins(0, 0, 0, 0)
        self.queryCaption = QLabel("queries (decoder): click one")
        self.queryStrip = TokenView()
        self.queryStrip.setObjectName("attentionQueries")
        line = self.queryStrip.fontMetrics().lineSpacing()
        self.queryStrip.setMaximumHeight(3 * line + 12)
        self.stripCaption = QLabel()
        self.stripCaption.setWordWrap(True)
        self.tokenStrip = TokenView()
        self.tokenStrip.setObjectName("attentionTokens")
        self.tokenStrip.setMaximumHeight(5 * line + 12)
        sl.addWidget(self.queryCaption)
        sl.addWidget(self.queryStrip)
        sl.addWidget(self.stripCaption)
        sl.addWidget(self.tokenStrip)

        vsplit = QSplitter(Qt.Orientation.Vertical)
        vsplit.addWidget(split)
        vsplit.addWidget(strip)
        vsplit.setStretchFactor(0, 4)
        vsplit.setStretchFactor(1, 1)
        vsplit.setChildrenCollapsible(False)
        pl.addWidget(vsplit, 1)
        self.messageLabel = QLabel()
        self.messageLabel.setObjectName("attentionMessage")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setVisible(False)
        pl.addWidget(self.messageLabel)
        self.stack.addWidget(page)

        self.kindCombo.currentIndexChanged.connect(self._on_kind_combo)
        self.layerCombo.currentIndexChanged.connect(self._on_layer_combo)
        self.headCombo.currentIndexChanged.connect(self._on_head_combo)
        self.headGrid.headClicked.connect(self._on_grid_clicked)
        self.entropyTable.cellClicked.connect(self._on_grid_clicked)
        self.attentionView.hovered.connect(self._on_hover)
        self.attentionView.queryClicked.connect(self.select_query)
        self.tokenStrip.tokenClicked.connect(self._on_strip_clicked)
        self.queryStrip.tokenClicked.connect(self.select_query)
        self.fitButton.clicked.connect(self.attentionView.reset_zoom)
        self.exportPngButton.clicked.connect(self._export_png_dialog)
        self.exportCsvButton.clicked.connect(self._export_csv_dialog)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QEvent.Type.Resize and obj is self.gridScroll:
            self._fit_grid()
        return super().eventFilter(obj, event)

    # ---- data ---------------------------------------------------------------------------------------------
    def kinds(self) -> list[str]:
        return self.maps.kinds() if self.maps is not None else []

    def layers(self, kind: str | None = None) -> list[int]:
        kind = kind or self.kind
        return self.maps.layers(kind) if self.maps is not None and kind is not None else []

    def n_heads(self) -> int:
        return self.maps.n_heads(self.current_name()) if self.maps is not None else 0

    def current_name(self) -> str:
        """The map shown large, e.g. "self/1", "cross/0"."""
        return map_name(self.kind, self.layer)

    def current_matrix(self) -> np.ndarray:
        """(T_query, T_key): the head shown large, or the mean over the layer's heads."""
        return self.maps.matrix(self.current_name(), self.head)

    def query_tokens(self) -> list[str]:
        return list(self.maps.query_tokens(self.current_name()))

    def key_tokens(self) -> list[str]:
        return list(self.maps.key_tokens(self.current_name()))

    def show_maps(self, maps) -> None:
        """Show an `AttentionMaps` (the last forward pass). Keeps the chosen kind, layer and head
        when the new maps have them."""
        if maps is None or not getattr(maps, "maps", None):
            self.clear()
            return
        self.maps = maps
        kinds = self.kinds()
        if self.kind not in kinds:
            self.kind = "dec" if "dec" in kinds else kinds[0]
        if self.layer not in self.layers():
            self.layer = self.layers()[0]
        if self.head != MEAN and self.head >= self.n_heads():
            self.head = 0
        self.query = None
        self.messageLabel.setVisible(False)
        self.stack.setCurrentIndex(1)
        self._refresh(new_maps=True)

    def clear(self) -> None:
        self.maps = None
        self.kind = None
        self.query = None
        self.attentionView.clear()
        self.stack.setCurrentIndex(0)

    def set_view(self, kind: str | None = None, layer: int | None = None, head: int | None = None) -> None:
        """Choose what is shown large: ``kind`` ("self", "enc", "dec", "cross"), ``layer``, ``head``
        (0-based; `MEAN` = -1 for the mean over heads). Unchanged where None."""
        if self.maps is None:
            return
        if kind is not None:
            if kind not in self.kinds():
                raise ValueError(f"these maps have no {kind!r} attention; they have {', '.join(self.kinds())}.")
            self.kind = kind
        layers = self.layers()
        if layer is not None:
            if layer not in layers:
                raise ValueError(f"there is no layer {layer} of {self.kind!r} attention (layers {layers}).")
            self.layer = layer
        elif self.layer not in layers:
            self.layer = layers[0]
        if head is not None:
            if head != MEAN and not 0 <= head < self.n_heads():
                raise ValueError(f"there is no head {head} (heads 0-{self.n_heads() - 1}, or -1 for the mean).")
            self.head = head
        elif self.head != MEAN and self.head >= self.n_heads():
            self.head = 0
        kind_changed = kind is not None
        if kind_changed:
            self.query = None
        self._refresh(new_maps=kind_changed)

    # ---- drawing -------------------------------------------------------------------------------------------
    def _refresh(self, new_maps: bool = False) -> None:
        self._updating = True
        try:
            kinds = self.kinds()
            self.kindCombo.clear()
            for k in kinds:
                self.kindCombo.addItem(KIND_NAMES.get(k, k), k)
            self.kindCombo.setCurrentIndex(kinds.index(self.kind))
            multi = len(kinds) > 1
            self.kindCombo.setVisible(multi)
            self.kindLabel.setVisible(multi)
            self.layerCombo.clear()
            for l in self.layers():
                self.layerCombo.addItem(f"{l}", l)
            self.layerCombo.setCurrentIndex(self.layers().index(self.layer))
            ent = self.maps.entropy(self.current_name())
            self.headCombo.clear()
            for h in range(self.n_heads()):
                self.headCombo.addItem(f"{h + 1}  (H = {ent[h]:.2f} nats)", h)
            mean_ent = self.maps.mean_entropy(self.current_name())
            self.headCombo.addItem(f"mean over heads  (H = {mean_ent:.2f} nats)", MEAN)
            self.headCombo.setCurrentIndex(self.n_heads() if self.head == MEAN else self.head)
        finally:
            self._updating = False
        if new_maps:
            self._draw_grid()
            self._set_strips()
        self._draw_large()
        self.viewChanged.emit()

    def _draw_grid(self) -> None:
        rows, mean_ents = [], []
        for l in self.layers():
            name = map_name(self.kind, l)
            rows.append((f"l{l}", self.maps.maps[name], self.maps.entropy(name)))
            mean_ents.append(self.maps.mean_entropy(name))
        if self.headGrid.set_maps(rows, with_mean=True, mean_entropies=mean_ents):
            self.attentionView.share_colorbar(self.headGrid.image_items())  # one colour bar for all
        n_cols = self.headGrid.grid_shape()[1]
        self.headGrid.setMinimumWidth(40 + 40 * n_cols)
        self._fill_entropy_table(rows, mean_ents)
        self._fit_grid()

    def _fill_entropy_table(self, rows, mean_ents) -> None:
        t = self.entropyTable
        n_heads = max((A.shape[0] for _, A, _ in rows), default=0)
        t.clear()
        t.setRowCount(len(rows))
        t.setColumnCount(n_heads + 1)
        t.setHorizontalHeaderLabels([f"h{h + 1}" for h in range(n_heads)] + ["mean"])
        t.setVerticalHeaderLabels([label for label, _, _ in rows])
        T = max(2, self.maps.maps[self.current_name()].shape[-1])
        log_T = np.log(T)
        layers = self.layers()
        for r, (_, _, ent) in enumerate(rows):
            for c, e in enumerate(list(ent) + [mean_ents[r]]):
                item = QTableWidgetItem(f"{e:.2f}")
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                shade = QColor(70, 130, 180)  # darker = more focused (lower entropy)
                shade.setAlphaF(max(0.0, 1.0 - float(e) / log_T) * 0.6)
                item.setBackground(shade)
                item.setToolTip(f"layer {layers[r]}, {'mean over heads' if c == len(ent) else f'head {c + 1}'}: "
                                f"{e:.4f} nats (uniform over {T} keys would be {log_T:.2f})")
                t.setItem(r, c, item)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        t.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)

    def _fit_grid(self) -> None:
        """Give the grid the height that keeps its thumbnails about square (it scrolls when taller)."""
        sa = self.gridScroll
        bar = sa.verticalScrollBar().sizeHint().width()
        # sized as if the scroll bar were there, so that showing or hiding it cannot make the height oscillate
        h = self.headGrid.height_for(sa.width() - 2 * sa.frameWidth() - bar)
        self.headGrid.setFixedHeight(h)
        # the scroll area is no taller than the grid, so spare height goes to the entropy table
        sa.setMaximumHeight(h + 2 * sa.frameWidth() + 2)

    def _grid_cell(self) -> tuple[int, int]:
        r = self.layers().index(self.layer)
        c = self.n_heads() if self.head == MEAN else self.head
        return r, c

    def _draw_large(self) -> None:
        A = self.current_matrix()
        name = self.current_name()
        head = "mean over heads" if self.head == MEAN else f"head {self.head + 1}"
        ent = float(attention_entropy(A))
        title = f"{KIND_NAMES.get(self.kind, self.kind)} · layer {self.layer} · {head} · H = {ent:.2f} nats"
        self.attentionView.set_matrix(A, self.query_tokens(), self.key_tokens(), title=html.escape(title))
        self.headGrid.set_selected(*self._grid_cell())
        if self.query is None or self.query >= A.shape[0]:
            self.query = A.shape[0] - 1  # the last query: what the model looked at to predict the next token
        self._overlay()
        self.hoverLabel.setText(f"{name}: hover the map for a weight; click a row or a token to lay its "
                                "attention over the text.")

    def _set_strips(self) -> None:
        """The token strips of the current kind (the same for all its layers and heads)."""
        queries, keys = self.query_tokens(), self.key_tokens()
        cross = self._cross = queries != keys or self.kind == "cross"
        self.queryCaption.setVisible(cross)
        self.queryStrip.setVisible(cross)
        if cross:
            self.queryStrip.set_tokens(queries)
        self.tokenStrip.set_tokens(keys)

    def _overlay(self) -> None:
        """Token backgrounds of the text strip = the chosen query's attention row."""
        A = self.attentionView.matrix
        q = self.query
        row = np.asarray(A[q], dtype=np.float64)
        keys, queries = self.key_tokens(), self.query_tokens()
        tips = [f"key {j} <code>{html.escape(display_token(keys[j]))}</code>: weight {row[j]:.4f}"
                for j in range(len(keys))]
        # the fixed 0-1 scale of the heatmaps, through a square root so that weights of a few percent show
        self.tokenStrip.set_colors([weight_tint(np.sqrt(max(w, 0.0))) for w in row], tips)
        self.attentionView.set_query_highlight(q)
        if self._cross:  # not isVisible(): that is False for all while the panel is hidden
            self.queryStrip.set_marked(q)
            self.tokenStrip.set_marked(None)
        else:
            self.tokenStrip.set_marked(q)
        self.stripCaption.setText(
            f"Attention of query {q} <b><code>{html.escape(display_token(queries[q]))}</code></b> over the "
            f"{'source' if self.kind in ('cross', 'enc') else 'text'}: the more orange, the larger the weight "
            f"(√ of the 0-1 scale; largest here {row.max():.3f}, hover a token for its weight). "
            "Click a token to choose another query.")

    # ---- interaction --------------------------------------------------------------------------------------
    def select_query(self, q: int) -> None:
        """Lay query ``q``'s attention row over the text (and outline the row in the large map)."""
        if self.maps is None or not 0 <= q < self.attentionView.matrix.shape[0]:
            return
        self.query = q
        self._overlay()

    def _on_strip_clicked(self, i: int) -> None:
        if not self._cross:
            self.select_query(i)

    def _on_kind_combo(self, index: int) -> None:
        if not self._updating and index >= 0:
            self.set_view(kind=self.kindCombo.itemData(index))

    def _on_layer_combo(self, index: int) -> None:
        if not self._updating and index >= 0:
            self.set_view(layer=self.layerCombo.itemData(index))

    def _on_head_combo(self, index: int) -> None:
        if not self._updating and index >= 0:
            self.set_view(head=self.headCombo.itemData(index))

    def _on_grid_clicked(self, row: int, col: int) -> None:
        layers = self.layers()
        if not 0 <= row < len(layers):
            return
        heads = self.maps.n_heads(map_name(self.kind, layers[row]))
        self.set_view(layer=layers[row], head=MEAN if col >= heads else col)

    def _on_hover(self, q: int, k: int) -> None:
        if q < 0 or self.maps is None:
            return
        A = self.attentionView.matrix
        qt, kt = self.query_tokens(), self.key_tokens()
        self.hoverLabel.setText(
            f"query {q} <b><code>{html.escape(display_token(qt[q]))}</code></b> → key {k} "
            f"<b><code>{html.escape(display_token(kt[k]))}</code></b>: weight <b>{A[q, k]:.4f}</b>")

    # ---- export ---------------------------------------------------------------------------------------------
    def export_png(self, path, what: str = "view") -> Path:
        """Save the large map as it is shown ("view": a picture of the head, or the mean, with its token labels
        and colour bar) or the head grid ("grid": every layer × head of the kind shown, then the mean over
        heads, as the core's heatmaps, `AttentionMaps.save`). Returns the path."""
        maps = self._maps_to_export()
        if what == "view":
            path = Path(path)
            if not self.attentionView.grab().save(str(path), "PNG"):
                raise OSError(f"could not write {path}.")
            return path
        if what == "grid":
            return maps.save(path, [map_name(self.kind, l) for l in self.layers()], with_mean=True)
        raise ValueError(f"what = {what!r}: choose 'view' or 'grid'.")

    def export_csv(self, path) -> Path:
        """Save the numbers of the large map (the core's `AttentionMaps.head_csv`): a header "query \\ key" +
        the key tokens, then one row per query: its token and its weights, with full precision."""
        return self._maps_to_export().save_head(path, self.current_name(), self.head)

    def _maps_to_export(self) -> AttentionMaps:
        if self.maps is None:
            raise ValueError("there is no attention map to export yet.")
        return self.maps

    def _default_name(self) -> str:
        head = "mean" if self.head == MEAN else f"h{self.head + 1}"
        return f"attention-{self.kind}-l{self.layer}-{head}"

    def _export_png_dialog(self) -> None:
        self._export_dialog("PNG image (*.png)", ".png", self.export_png)

    def _export_csv_dialog(self) -> None:
        self._export_dialog("CSV table (*.csv)", ".csv", self.export_csv)

    def _export_dialog(self, filt: str, suffix: str, fn) -> None:
        if self.maps is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export", self._default_name() + suffix, filt)
        if not path:
            return
        if not path.lower().endswith(suffix):
            path += suffix
        try:
            fn(path)
        except (OSError, ValueError) as e:
            self.messageLabel.setText(f"Export failed: {e}")
            self.messageLabel.setStyleSheet("color: #c0392b;")
            self.messageLabel.setVisible(True)
        else:
            self.messageLabel.setText(f"Saved {path}.")
            self.messageLabel.setStyleSheet("")
            self.messageLabel.setVisible(True)
