"""Attention panel: every head's softmax(S/√d_attn) (Algorithm 4) of the last forward pass.

- two sources, chosen in ``sourceSwitch`` (`widgets.source_switch`): "Your text" (the Prompt tab's last
  forward pass, `show_maps`, with its caption: the prompt and as much of the output as l_max allows) and
  "Training probe, step N" (the slider's step); each keeps its maps while the other is shown;
- an edt opens on its lesson, cross-attention in the last layer; layers and heads are counted from 1 in
  everything shown (`attention_maps.layer_label`, `head_label`);
- a grid of layers × heads thumbnails (plus the mean over heads), titled with each head's entropy in nats
  (the mean over queries of the entropy of each attention row), all on one fixed 0-1 colour scale;
- one head large (``attentionView``) with the tokens on both axes: zoom with the wheel, pan by dragging,
  the weight under the cursor with its query and key tokens below it;
- ``kindCombo`` (edt models: encoder self-, decoder self- and cross-attention), ``layerCombo``, ``headCombo``
  (the heads and "mean over heads");
- click a query (a row of the large map, or a token of the text strip) to lay its attention row over the
  text as token backgrounds;
- head scores (`core.inspect.head_scores`, measured in a worker thread): per head the mean weight to the previous
  token, to itself, to the first token (of the maps shown), and, with a model given by `set_model`, the
  induction score on random tokens repeated twice, in the sortable ``entropyTable`` (one row per head) and
  the highest, where ≥ 0.5, in the grid's thumbnail titles; for a probe step, the scores the trainer saved
  with that step's maps (induction from that step's weights; an older run's files have prev, diag and sink);
- over training time: ``probeSlider`` (a QSlider) runs over the evaluation steps whose probe maps the run
  saved (`set_probes` for a reopened run, `add_probe` for each new one while training); moving it, or the
  play button (``probePlayButton``, a QTimer stepping it), shows that step's maps in the grid and large map;
  ``headScoresPlot`` draws one head score (``headScoreCombo``, opening on the one that moves most over the
  run) of every head of the kind shown against the step (`core.inspect.probes.score_history`), a dashed line at the
  slider's step, the head shown large drawn bold (click a line to show that head); when every line is flat
  it folds to a one-line note;
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
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
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
    QSlider,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ...core.inspect.attention_maps import (
    KIND_TITLES,
    MEAN_HEAD,
    AttentionMaps,
    attention_entropy,
    head_label,
    layer_label,
    map_name,
    parse_map_name,
)
from ...core.inspect.head_scores import (  # torch-free at import
    SCORE_TITLES,
    SCORES,
    HeadScores,
    head_scores,
    is_self_attention,
    map_scores,
    score_movement,
)
from ...core.inspect.probes import load_probe_file, probe_scores, score_history, score_series
from ...core.inspect.prompting import display_token
from ..widgets.heatmap import HeadGrid, HeatmapView
from ..widgets.plots import _curve, _plot
from ..widgets.source_switch import PROBE, TEXT, SourceSwitch
from ..widgets.token_view import TokenView, weight_tint
from ..workers import call_in_thread

KIND_NAMES = KIND_TITLES  # "self", "enc", "dec", "cross" → the words shown for them
MEAN = MEAN_HEAD  # head index of "mean over heads"
BADGES = {"prev": "prev", "diag": "diag", "sink": "sink", "induction": "ind"}  # a score in a thumbnail's title
BADGE_AT = 0.5  # a thumbnail's title names the scores at least this high


class _NumberItem(QTableWidgetItem):
    """A table cell shown as text and sorted by a number."""

    def __init__(self, text: str, value: float):
        super().__init__(text)
        self.value = float(value)

    def __lt__(self, other) -> bool:
        return self.value < getattr(other, "value", 0.0)


class AttentionPanel(QWidget):
    """Shows an `AttentionMaps`; the main window connects ``prompt.attentionReady`` to `show_maps`."""

    viewChanged = Signal()  # kind, layer, head or the maps changed
    headClicked = Signal(str, int, int)  # a click in the grid or table chose (kind, layer, head; MEAN: the mean)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.maps: AttentionMaps | None = None  # the maps shown: `text_maps` or a probe step's
        self.text_maps: AttentionMaps | None = None  # the user's text's (`show_maps`), kept while a probe is shown
        self.kind: str | None = None
        self.layer = 0
        self.head = 0  # MEAN for the mean over heads
        self.query: int | None = None
        self._cross = False  # the queries are not the keys: a separate query strip is shown
        self._updating = False
        self.loaded = None  # the LoadedModel whose head scores are measured (`set_model`)
        self.scores: HeadScores | None = None  # of the maps shown (induction: of the loaded model)
        self._scores_call = None
        self._scores_for: object = None  # the maps the call in flight measures
        self.probe_paths: dict[int, Path] = {}  # the run's saved probe maps by step (`set_probes`)
        self.probe_step: int | None = None  # the step whose probe maps were shown last
        self._probe_maps: AttentionMaps | None = None
        self.score_history: dict[int, HeadScores] = {}  # the head scores saved with each probe step
        self._score_curves: dict[tuple[str, int], pg.PlotDataItem] = {}  # (map name, head) → its line
        self._auto_score = True  # the plot picks the score that moves most, until the user picks one
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
        self.layerCombo.setToolTip("Layer l of the stack (1 = the first, as the paper counts).")
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
        self.sourceSwitch = SourceSwitch()
        self.sourceSwitch.chosen.connect(self.show_source)
        pl.addWidget(self.sourceSwitch)
        pl.addLayout(bar)
        pl.addWidget(self._build_probe_bar())

        self.headGrid = HeadGrid()
        self.headGrid.setObjectName("headGrid")
        self.headGrid.setToolTip("Every head of every layer (rows: layers, columns: heads, then their mean), "
                                 "titled with the head's entropy in nats and its highest head score when that "
                                 "is at least 0.5 (prev, diag, sink, ind = induction). Click one to show it "
                                 "large.")
        self.gridScroll = QScrollArea()
        self.gridScroll.setWidgetResizable(True)
        self.gridScroll.setWidget(self.headGrid)
        self.gridScroll.setMinimumWidth(260)
        self.gridScroll.installEventFilter(self)

        self.attentionView = HeatmapView()
        self.attentionView.setObjectName("attentionView")
        self.attentionView.setToolTip("")
        self.hoverLabel = QLabel(" ")
        self.hoverLabel.setObjectName("attentionHoverLabel")
        self.hoverLabel.setTextFormat(Qt.TextFormat.RichText)
        self.hoverLabel.setWordWrap(True)  # a long line must not widen the window
        self.hoverLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right = QWidget()
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
        self.entropyCaption = QLabel("Per-head entropy (nats) and scores")
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
        for view in (self.queryStrip, self.tokenStrip):  # two lines at least, scrolling: the maps keep the height
            view.setMinimumHeight(2 * line + 12)
        sl.addWidget(self.queryCaption)
        sl.addWidget(self.queryStrip)
        sl.addWidget(self.stripCaption)
        sl.addWidget(self.tokenStrip)

        vsplit = self._vsplit = QSplitter(Qt.Orientation.Vertical)
        vsplit.addWidget(self._build_score_plot())
        vsplit.addWidget(split)
        vsplit.addWidget(strip)
        for i, stretch in enumerate((0, 1, 0)):  # spare height goes to the maps, not the score plot or the strips
            vsplit.setStretchFactor(i, stretch)
        vsplit.setSizes([100, 800, 80])  # the maps first; the others at about their least
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
        self.entropyTable.cellClicked.connect(self._on_table_clicked)
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
        """Show the attention of the user's text (an `AttentionMaps` of the Prompt tab's last forward pass; a
        `TextAttention` says what of the text it shows) and keep it for "Your text". Keeps the chosen kind,
        layer and head when the new maps have them. None: the user's text has no maps."""
        self.text_maps = maps if maps is not None and getattr(maps, "maps", None) else None
        if self.text_maps is not None:
            self._show(self.text_maps)
        elif not self.showing_probe:
            self._blank()

    def show_source(self, source: str) -> None:
        """Show the user's text's maps (`TEXT`) or the probe maps at the slider's step (`PROBE`), if there are."""
        if source == TEXT and self.text_maps is not None:
            self._show(self.text_maps)
        elif source == PROBE and self.probe_paths:
            self._on_probe_slider(self.probeSlider.value())
        else:
            self._update_source()

    def _show(self, maps: AttentionMaps) -> None:
        """Draw ``maps`` (the user's text's or a probe step's). A kind not in them: the lesson's view, an
        edt's cross-attention in its last layer (else the decoder's, or the only kind, first layer)."""
        self.maps = maps
        kinds = self.kinds()
        if self.kind not in kinds:
            self.kind = next(k for k in ("cross", "dec", *kinds) if k in kinds)
            self.layer = self.layers()[-1] if self.kind == "cross" else self.layers()[0]
        if self.layer not in self.layers():
            self.layer = self.layers()[0]
        if self.head != MEAN and self.head >= self.n_heads():
            self.head = 0
        self.query = None
        self.messageLabel.setVisible(False)
        self.stack.setCurrentIndex(1)
        saved = self._saved_scores()
        if saved is not None:
            self.scores, self._scores_for = saved, maps
        elif self.scores is not None and self._scores_for is not maps:
            self.scores = None  # the old maps' scores: not shown beside new maps
        self._refresh(new_maps=True)
        self._request_scores()

    def clear(self) -> None:
        """Forget the user's text's maps and show none (the probe slider stays)."""
        self.text_maps = None
        self._blank()

    def _blank(self) -> None:
        self.maps = None
        self.scores = None
        self.kind = None
        self.query = None
        self.attentionView.clear_matrix()
        self.stack.setCurrentIndex(0)
        self._update_source()

    def source(self) -> str | None:
        """What the maps shown are: `PROBE`, `TEXT`, or None (none shown)."""
        return None if self.maps is None else PROBE if self.showing_probe else TEXT

    def source_caption(self) -> str:
        """What is shown, in words ("Your text: the prompt (12 tokens) + …", "Training probe, step 400: …")."""
        if self.maps is None:
            return ""
        n = len(self.maps.tokens)
        if self.showing_probe:
            return (f"<b>Training probe, step {self.probe_step:,}</b>: the run's probe input ({n} tokens) as the "
                    "model read it at that evaluation.")
        what = getattr(self.maps, "caption", "") or (
            f"the source ({len(self.maps.context_tokens)} tokens) → {n} tokens" if self.maps.context_tokens
            else f"{n} tokens")
        return f"<b>Your text</b>: {html.escape(what)}."

    def _update_source(self) -> None:
        steps = self.probe_steps()
        i = self.probeSlider.value()
        self.sourceSwitch.set_state(self.source(), self.text_maps is not None,
                                    steps[i] if 0 <= i < len(steps) else None, self.source_caption())

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
            fm = self.kindCombo.fontMetrics()  # room for the longest kind: the bar must not clip it
            self.kindCombo.setMinimumWidth(max((fm.horizontalAdvance(KIND_NAMES.get(k, k)) for k in kinds),
                                               default=0) + 40)
            self.layerCombo.clear()
            for l in self.layers():
                self.layerCombo.addItem(f"{l + 1}", l)  # as the paper counts
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
            rows.append((layer_label(name).replace(" layer", "<br>layer"), self.maps.maps[name],
                         self.maps.entropy(name)))
            mean_ents.append(self.maps.mean_entropy(name))
        if self.headGrid.set_maps(rows, with_mean=True, mean_entropies=mean_ents):
            self.attentionView.share_colorbar(self.headGrid.image_items())  # one colour bar for all
        self._fill_entropy_table(rows, mean_ents)
        self.headGrid.set_badges(self._grid_badges())
        # every title whole: narrower than this, the grid scrolls sideways rather than cutting them
        self.headGrid.setMinimumWidth(self.headGrid.minimum_width())
        self._fit_grid()

    def _grid_badges(self) -> list[list[str]]:
        """Per thumbnail (layers × heads, then the mean) its highest score if ≥ `BADGE_AT`, e.g. "ind 0.83"."""
        out = []
        for l in self.layers():
            name = map_name(self.kind, l)
            per = [(sc, v) for sc in SCORES if (v := self._score(name, sc)) is not None]
            n = self.maps.n_heads(name)
            row = []
            for h in range(n + 1):
                best = max(((float(v[h] if h < n else v.mean()), sc) for sc, v in per), default=(0.0, ""))
                row.append(f"{BADGES[best[1]]} {best[0]:.2f}" if best[0] >= BADGE_AT else "")
            out.append(row)
        return out

    # ---- head scores (measured in a worker) ------------------------------------------------------------
    def set_model(self, loaded) -> None:
        """The LoadedModel (model, tokenizer) whose head scores are measured beside the maps shown: prev, diag
        and sink on the maps' text, induction on random tokens repeated twice. None: no scores."""
        self.loaded = loaded
        if self.maps is not None:
            self._request_scores()

    def _request_scores(self) -> None:
        """Measure the scores of the maps shown in a worker thread (`core.inspect.head_scores.head_scores`); the table
        and the grid show them when they arrive, if those maps are still shown."""
        if self._scores_call is not None:
            self._scores_call.cancel()  # its result is for maps no longer shown
            self._scores_call = None
        maps, loaded = self.maps, self.loaded
        if maps is None or self._saved_scores() is not None:
            return  # nothing shown, or a probe step's scores, saved as it trained
        self._scores_for = maps
        done = dict(on_result=lambda sc, m=maps: self._on_scores(m, sc), on_error=self._on_scores_failed)
        # a probe's maps are of a past step's weights: the loaded model's induction score would not be theirs
        if loaded is None or getattr(loaded, "model", None) is None or getattr(self, "showing_probe", False):
            self._scores_call = call_in_thread(map_scores, maps, **done)  # prev, diag, sink: no model needed
        else:
            self._scores_call = call_in_thread(head_scores, loaded.model, loaded.tokenizer, maps, **done)

    def _saved_scores(self) -> HeadScores | None:
        """The scores saved with the probe step shown (None: a prompt's maps, or none saved)."""
        return self.score_history.get(self.probe_step) if self.showing_probe and self.probe_step is not None else None

    def scores_pending(self) -> bool:
        return self._scores_call is not None and self._scores_call.running

    def _on_scores(self, maps, scores: HeadScores) -> None:
        self._scores_call = None
        if maps is not self.maps:
            return
        self.scores = scores
        if self.kind is not None:
            self._draw_grid()

    def _on_scores_failed(self, message: str) -> None:
        self._scores_call = None
        self.messageLabel.setText(f"Could not measure the head scores: {message}")
        self.messageLabel.setStyleSheet("color: #c0392b;")
        self.messageLabel.setVisible(True)

    TABLE_COLUMNS = ("layer", "head", "H (nats)", *SCORES)  # the entropy table's columns

    def _fill_entropy_table(self, rows, mean_ents) -> None:
        """One row per head of each layer of the kind shown, then the layer's mean over heads: layer, head,
        entropy, and the head scores of `scores` (blank until they arrive; the mean's are the heads' mean,
        as every score is linear in the weights). Sortable by any column."""
        t = self.entropyTable
        t.setSortingEnabled(False)  # filling a sorted table would move rows under the loop
        t.clear()
        t.setColumnCount(len(self.TABLE_COLUMNS))
        t.setHorizontalHeaderLabels([BADGES.get(c, c) for c in self.TABLE_COLUMNS])  # "ind": the narrow pane
        for c, score in enumerate(SCORES, 3):
            t.horizontalHeaderItem(c).setToolTip(SCORE_TITLES[score] + ": mean attention weight, 0-1")
        T = max(2, self.maps.maps[self.current_name()].shape[-1])
        log_T = np.log(T)
        layers = self.layers()
        out: list[tuple[int, int, str, float, dict[str, float]]] = []  # (row, col, head, entropy, scores)
        for r, (_, _, ent) in enumerate(rows):
            name = map_name(self.kind, layers[r])
            per = {sc: v for sc in SCORES if (v := self._score(name, sc)) is not None}
            for h, e in enumerate(ent):
                out.append((r, h, f"{h + 1}", float(e), {sc: float(v[h]) for sc, v in per.items()}))
            out.append((r, len(ent), "mean", float(mean_ents[r]), {sc: float(v.mean()) for sc, v in per.items()}))
        t.setRowCount(len(out))
        for i, (r, c, head, e, sc) in enumerate(out):
            where = head_label(map_name(self.kind, layers[r]), MEAN if head == "mean" else c)
            layer_item = _NumberItem(f"{layers[r] + 1}", layers[r] + (0.5 if head == "mean" else 0.0))
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
                v = sc.get(score)
                item = _NumberItem("" if v is None else f"{v:.2f}", -1.0 if v is None else v)
                if v is not None:
                    tint = QColor(230, 126, 34)  # more orange = higher score
                    tint.setAlphaF(min(max(v, 0.0), 1.0) * 0.6)
                    item.setBackground(tint)
                    item.setToolTip(f"{where}: {SCORE_TITLES[score]} score {v:.4f}")
                else:
                    item.setToolTip("cross-attention relates two sequences: it gets no head scores"
                                    if not is_self_attention(map_name(self.kind, 0)) else
                                    "not measured: the scores come from a worker; induction needs the model loaded "
                                    "(probe maps of a run trained before scores were saved have none)")
                t.setItem(i, col, item)
        for i in range(t.rowCount()):
            for col in range(t.columnCount()):
                t.item(i, col).setTextAlignment(Qt.AlignmentFlag.AlignCenter)
        # each column as wide as its header and numbers (a narrow pane scrolls rather than cutting them)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        t.horizontalHeader().setStretchLastSection(True)
        t.verticalHeader().setVisible(False)
        t.setSortingEnabled(True)

    def _score(self, name: str, score: str) -> np.ndarray | None:
        return self.scores.get(name, score) if self.scores is not None else None

    def score_table(self) -> list[dict[str, str]]:
        """The entropy table as shown (in its current order): one dict per row, column (`TABLE_COLUMNS`) → text."""
        t = self.entropyTable
        cols = self.TABLE_COLUMNS
        return [{cols[c]: t.item(r, c).text() for c in range(t.columnCount())} for r in range(t.rowCount())]

    def _fit_grid(self) -> None:
        """Give the grid the height that keeps its thumbnails about square (it scrolls when taller)."""
        sa = self.gridScroll
        bar = sa.verticalScrollBar().sizeHint().width()
        # sized as if the scroll bar were there, so that showing or hiding it cannot make the height oscillate
        inner = sa.width() - 2 * sa.frameWidth() - bar
        h = self.headGrid.height_for(max(inner, self.headGrid.minimumWidth()))
        self.headGrid.setFixedHeight(h)
        # the scroll area is no taller than the grid (and its sideways scroll bar), so spare height goes to the table
        sideways = sa.horizontalScrollBar().sizeHint().height() if self.headGrid.minimumWidth() > inner else 0
        sa.setMaximumHeight(h + 2 * sa.frameWidth() + 2 + sideways)

    def _grid_cell(self) -> tuple[int, int]:
        r = self.layers().index(self.layer)
        c = self.n_heads() if self.head == MEAN else self.head
        return r, c

    def _draw_large(self) -> None:
        A = self.current_matrix()
        where = head_label(self.current_name(), self.head)
        ent = float(attention_entropy(A))
        title = f"{where} · H = {ent:.2f} nats"
        self.attentionView.set_matrix(A, self.query_tokens(), self.key_tokens(), title=html.escape(title))
        self.headGrid.set_selected(*self._grid_cell())
        if self.query is None or self.query >= A.shape[0]:
            self.query = A.shape[0] - 1  # the last query: what the model looked at to predict the next token
        self._overlay()
        self.hoverLabel.setText(f"{where}: hover the map for a weight; click a row or a token to lay its "
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
        self.headClicked.emit(self.kind, self.layer, self.head)

    def _on_table_clicked(self, row: int, col: int) -> None:
        item = self.entropyTable.item(row, 0)
        cell = item.data(Qt.ItemDataRole.UserRole + 1) if item is not None else None
        if cell is not None:
            self._on_grid_clicked(*cell)

    def _on_hover(self, q: int, k: int) -> None:
        if q < 0 or self.maps is None:
            return
        A = self.attentionView.matrix
        qt, kt = self.query_tokens(), self.key_tokens()
        self.hoverLabel.setText(
            f"query {q} <b><code>{html.escape(display_token(qt[q]))}</code></b> → key {k} "
            f"<b><code>{html.escape(display_token(kt[k]))}</code></b>: weight <b>{A[q, k]:.4f}</b>")

    # ---- probe maps over training time -------------------------------------------------------------------
    def _build_probe_bar(self) -> QWidget:
        """``probeSlider`` over the run's saved evaluation steps, its step label and a play button."""
        self.probeBar = QWidget(objectName="probeBar")
        row = QHBoxLayout(self.probeBar)
        row.setContentsMargins(0, 0, 0, 0)
        self.probePlayButton = QPushButton("▶ Play", objectName="probePlayButton")
        self.probePlayButton.setCheckable(True)
        self.probePlayButton.setToolTip("Play the heads forming: step through the saved evaluations.")
        self.probeSlider = QSlider(Qt.Orientation.Horizontal, objectName="probeSlider")
        self.probeSlider.setRange(0, 0)  # one position per saved step (`_sync_probe_slider`)
        self.probeSlider.setPageStep(1)
        self.probeSlider.setToolTip("The run's probe input at each evaluation step: every head's attention "
                                    "map, saved while it trained. Drag to watch the heads form.")
        self.probeStepLabel = QLabel(objectName="probeStepLabel")
        self.probeStepLabel.setMinimumWidth(150)
        row.addWidget(QLabel("Over training:"))
        row.addWidget(self.probePlayButton)
        row.addWidget(self.probeSlider, 1)
        row.addWidget(self.probeStepLabel)
        self.probeTimer = QTimer(self)
        self.probeTimer.setInterval(400)
        self.probeTimer.timeout.connect(self._advance_probe)
        self.probeSlider.valueChanged.connect(self._on_probe_slider)
        self.probeSlider.valueChanged.connect(self._move_score_marker)
        self.probePlayButton.toggled.connect(self._on_probe_play)
        self.viewChanged.connect(self._update_source)
        self.probeBar.setVisible(False)
        return self.probeBar

    def probe_steps(self) -> list[int]:
        """The saved evaluation steps the slider runs over, ascending."""
        return list(self.probe_paths)

    @property
    def showing_probe(self) -> bool:
        """Whether the maps shown are a saved probe's (not a prompt's)."""
        return self.maps is not None and self.maps is self._probe_maps

    def set_probes(self, paths: dict[int, str | Path]) -> None:
        """The run's saved probe files by step (`probes.list_probes`): the slider runs over them and the last
        step's maps are shown. Empty: the slider hides, and probe maps shown give way to the user's text's."""
        self.probePlayButton.setChecked(False)
        self.probe_paths = {int(k): Path(v) for k, v in sorted(paths.items())}
        self.score_history = score_history(self.probe_paths)
        self._auto_score = True  # another run: its own most moving score
        self._sync_probe_slider()
        if self.probe_paths:
            self._set_probe_index(len(self.probe_paths) - 1, force=True)
        elif self.showing_probe:
            self._probe_maps = self.probe_step = None
            self.show_maps(self.text_maps)

    def add_probe(self, step: int, path: str | Path, scores: dict | None = None) -> None:
        """A new evaluation's probe maps (the trainer's Probe event) and head ``scores`` (the event's,
        `HeadScores.to_dict`; None: read from the file). The slider follows it when it was at the last step
        and the maps shown are a probe's (or there are none)."""
        at_end = self.probeSlider.value() >= self.probeSlider.maximum()
        follow = (self.maps is None or self.showing_probe) and at_end and not self.probeTimer.isActive()
        self.probe_paths = dict(sorted({**self.probe_paths, int(step): Path(path)}.items()))
        try:
            self.score_history[int(step)] = HeadScores.from_dict(scores) if scores is not None else probe_scores(path)
        except ValueError:
            self.score_history.pop(int(step), None)  # the slider says why when the step is shown
        self._sync_probe_slider()
        if follow:
            self._set_probe_index(len(self.probe_paths) - 1, force=True)
        elif at_end and not self.probeTimer.isActive():  # the user's text stays; the slider waits at the newest
            self.probeSlider.blockSignals(True)
            self.probeSlider.setValue(len(self.probe_paths) - 1)
            self.probeSlider.blockSignals(False)
            self._update_probe_label()
            self._move_score_marker()

    def show_probe_step(self, step: int) -> None:
        """Move the slider to ``step`` (one of `probe_steps`) and show its maps."""
        if step not in self.probe_paths:
            raise ValueError(f"no probe maps are saved at step {step}; steps: {self.probe_steps()}.")
        self._set_probe_index(self.probe_steps().index(step), force=True)

    def _sync_probe_slider(self) -> None:
        n = len(self.probe_paths)
        self.probeSlider.blockSignals(True)
        self.probeSlider.setRange(0, max(0, n - 1))
        self.probeSlider.blockSignals(False)
        self.probeBar.setVisible(n > 0)
        self.scoreHistory.setVisible(n > 0)
        self.probePlayButton.setEnabled(n > 1)
        self._update_probe_label()
        self._update_source()
        if self._auto_score:
            self._pick_score()
        self._draw_score_plot()
        if n:  # the steps from the start of training to the last evaluation
            self.headScoresPlot.getPlotItem().setXRange(0, self.probe_steps()[-1], padding=0.02)

    def _set_probe_index(self, i: int, force: bool = False) -> None:
        if self.probeSlider.value() != i:
            self.probeSlider.setValue(i)  # → _on_probe_slider
        elif force:
            self._on_probe_slider(i)

    def _on_probe_slider(self, i: int) -> None:
        steps = self.probe_steps()
        if not 0 <= i < len(steps):
            return
        try:  # a small file (L·H·T² float16 numbers): read on the GUI thread in about a millisecond
            maps = load_probe_file(self.probe_paths[steps[i]])
        except ValueError as e:
            self.messageLabel.setText(f"Cannot show the probe maps of step {steps[i]}: {e}")
            self.messageLabel.setStyleSheet("color: #c0392b;")
            self.messageLabel.setVisible(True)
            return
        self._probe_maps, self.probe_step = maps, steps[i]
        self._show(maps)
        self._update_probe_label()

    def _update_probe_label(self) -> None:
        steps = self.probe_steps()
        if not steps:
            self.probeStepLabel.setText("")
            return
        i = self.probeSlider.value()
        self.probeStepLabel.setText(f"step {steps[i]:,}  ({i + 1}/{len(steps)})")
        self._update_source()

    def _on_probe_play(self, playing: bool) -> None:
        self.probePlayButton.setText("❚❚ Pause" if playing else "▶ Play")
        if not playing:
            self.probeTimer.stop()
            return
        if self.probeSlider.value() >= self.probeSlider.maximum():
            self._set_probe_index(0, force=True)  # from the start again
        self.probeTimer.start()

    def _advance_probe(self) -> None:
        i = self.probeSlider.value()
        if i >= self.probeSlider.maximum():
            self.probePlayButton.setChecked(False)
            return
        self._set_probe_index(i + 1)
        if self.probeSlider.value() >= self.probeSlider.maximum():
            self.probePlayButton.setChecked(False)

    # ---- head scores over training time ----------------------------------------------------------------------
    def _build_score_plot(self) -> QWidget:
        """``headScoresPlot`` (one line per head, x = step, y = score in [0, 1]) and ``headScoreCombo``."""
        self.scoreHistory = QWidget(objectName="headScoresBox")
        box = QVBoxLayout(self.scoreHistory)
        box.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.headScoreCombo = QComboBox(objectName="headScoreCombo")
        for score in SCORES:
            self.headScoreCombo.addItem(SCORE_TITLES[score], score)
        self.headScoreCombo.setCurrentIndex(SCORES.index("induction"))
        self.headScoreCombo.activated.connect(self._on_score_picked)
        self.headScoreCombo.setToolTip("The head score plotted against the training step: the mean attention "
                                       "weight (0-1) to the previous token, to itself, to the first token (of the "
                                       "probe input), or induction (random tokens repeated twice), measured at "
                                       "every evaluation.")
        # the legend is a label outside the plot (as the loss plot's): inside, 16 heads would cover the lines
        self.headScoresLegend = QLabel(objectName="headScoresLegend")
        self.headScoresLegend.setTextFormat(Qt.TextFormat.RichText)
        self.headScoresLegend.setWordWrap(True)
        # every line flat: the box is one line, this note and a button that shows the plot anyway
        self.headScoresNote = QLabel(objectName="headScoresNote")
        self.headScoresNote.setWordWrap(True)
        self.headScoresToggle = QPushButton("Show plot", objectName="headScoresToggle")
        self.headScoresToggle.setCheckable(True)
        self.headScoresToggle.toggled.connect(self._fold_score_plot)
        bar.addWidget(QLabel("Head scores over training:"))
        bar.addWidget(self.headScoreCombo)
        bar.addSpacing(12)
        bar.addWidget(self.headScoresLegend, 1)
        bar.addWidget(self.headScoresNote, 1)
        bar.addWidget(self.headScoresToggle)
        box.addLayout(bar)
        self.headScoresPlot = _plot("", "headScoresPlot", "score")
        self.headScoresPlot.setToolTip("One line per head (L = layer, H = head, as in the grid); the head shown "
                                       "large is bold. Dashed: the step on the slider. Click a line to show its "
                                       "head.")
        self.headScoresPlot.setMinimumHeight(100)
        item = self.headScoresPlot.getPlotItem()
        # low and wide: three y ticks, the x axis's ticks are the steps (its label would take a line)
        item.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])
        item.getAxis("bottom").showLabel(False)
        item.setYRange(0, 1, padding=0.02)
        item.getViewBox().enableAutoRange(y=False)
        self.scoreMarker = pg.InfiniteLine(angle=90, movable=False,
                                           pen=pg.mkPen((90, 90, 90), width=1, style=Qt.PenStyle.DashLine))
        item.addItem(self.scoreMarker, ignoreBounds=True)
        box.addWidget(self.headScoresPlot, 1)
        self.headScoreCombo.currentIndexChanged.connect(self._draw_score_plot)
        self.viewChanged.connect(self._draw_score_plot)  # another kind, or another head in bold
        self.scoreHistory.setVisible(False)
        return self.scoreHistory

    FLAT = 0.05  # every head's score moves less than this over the run's probe steps: the plot folds away
    SCORE_PLOT_MAX = 220  # px: the score plot's box at most, so that the maps keep the height

    def score_moves(self) -> dict[str, float]:
        """Per score, how far it moves over the saved probe steps: the largest (max - min) of any head of
        `score_kind` (`head_scores.score_movement`)."""
        kind = self.score_kind()
        names = {n for sc in self.score_history.values() for n in sc.names() if parse_map_name(n).kind == kind}
        return {score: score_movement(self.score_history, sorted(names), score) for score in SCORES}

    def _pick_score(self) -> None:
        """Open the plot on the score that moves most over this run (previous-token, typically, for a
        character model; induction where an induction head forms)."""
        moves = self.score_moves()
        best = max(SCORES, key=lambda sc: moves[sc])
        if moves[best] > 0:
            self.headScoreCombo.blockSignals(True)
            self.headScoreCombo.setCurrentIndex(SCORES.index(best))
            self.headScoreCombo.blockSignals(False)

    def _on_score_picked(self, _index: int) -> None:
        self._auto_score = False  # the user's choice stays, until another run's probes

    def score_plot_folded(self) -> bool:
        """Whether the plot is folded to its one-line note (every line flat, and not asked for)."""
        return not self.headScoresPlot.isVisibleTo(self.scoreHistory)

    def _fold_score_plot(self, *_args) -> None:
        """Fold the plot to one line when every score of every head is flat (`FLAT`), unless asked for."""
        moves = self.score_moves()
        steps = len(self.score_history)
        flat = max(moves.values(), default=0.0) < self.FLAT
        fold = flat and not self.headScoresToggle.isChecked()
        self.headScoresToggle.setVisible(flat)
        self.headScoresToggle.setText("Hide plot" if self.headScoresToggle.isChecked() else "Show plot")
        self.headScoresNote.setVisible(flat)
        self.headScoresNote.setText(
            f"flat so far: no head's score moved by {self.FLAT} or more over {steps} evaluation"
            f"{'s' if steps != 1 else ''}." if steps else "")
        if fold == self.score_plot_folded():
            return
        self.headScoresPlot.setVisible(not fold)
        self.headScoresLegend.setVisible(not fold)
        self.headScoreCombo.setVisible(not fold)
        box = self.scoreHistory
        box.setMaximumHeight(self.headScoresToggle.sizeHint().height() + 4 if fold else self.SCORE_PLOT_MAX)
        sizes = self._vsplit.sizes()  # the height it gives or takes goes to the maps
        want = box.maximumHeight() if fold else max(box.minimumSizeHint().height(), 130)
        if sum(sizes):
            self._vsplit.setSizes([want, sizes[1] + sizes[0] - want, sizes[2]])

    def score_kind(self) -> str | None:
        """The kind of attention whose heads the plot draws: the one shown if it gets scores, else the
        decoder's (or the first) of the scores saved."""
        kinds = list(dict.fromkeys(parse_map_name(n).kind for sc in self.score_history.values() for n in sc.names()))
        if self.kind in kinds:
            return self.kind
        return "dec" if "dec" in kinds else next(iter(kinds), None)

    def _draw_score_plot(self, *_args) -> None:
        """One line per head of `score_kind` for the chosen score (`core.inspect.probes.score_series`)."""
        score, kind = self.headScoreCombo.currentData(), self.score_kind()
        names = sorted({n for sc in self.score_history.values() for n in sc.names() if parse_map_name(n).kind == kind},
                       key=lambda n: parse_map_name(n).layer)
        series = {name: score_series(self.score_history, name, score) for name in names}
        keys = [(name, h) for name, (_, v) in series.items() for h in range(v.shape[1])]
        item = self.headScoresPlot.getPlotItem()
        if keys != list(self._score_curves):
            for curve in self._score_curves.values():
                item.removeItem(curve)
            self._score_curves = {}
            for i, (name, h) in enumerate(keys):
                color = pg.intColor(i, hues=max(len(keys), 1), maxValue=220).getRgb()[:3]
                curve = _curve(self.headScoresPlot, color, symbol="o", symbolSize=4, symbolBrush=color,
                               symbolPen=None)
                curve.setCurveClickable(True, width=6)
                curve.sigClicked.connect(lambda _c, _e, name=name, h=h: self._on_score_curve_clicked(name, h))
                self._score_curves[(name, h)] = curve
        shown = self.current_name() if self.kind is not None else None
        legend = []
        for (name, h), curve in self._score_curves.items():
            steps, values = series[name]
            bold = name == shown and self.head in (h, MEAN)
            color = curve.opts["pen"].color()
            curve.setPen(pg.mkPen(color, width=3 if bold else 1.2))
            curve.setData(steps, values[:, h])
            label = f"L{parse_map_name(name).layer + 1}&nbsp;H{h + 1}"
            legend.append(f"<span style='color:{color.name()}'>━━</span>&nbsp;" + (f"<b>{label}</b>" if bold else label))
        self.headScoresLegend.setText("&nbsp;&nbsp; ".join(legend))
        title = f"{SCORE_TITLES[score]} score of each head"
        if kind is not None:
            title += f" · {KIND_NAMES.get(kind, kind).lower()}"
        if self.score_history and not keys:
            title += " · not saved for this run"
        item.setTitle(title, size="9pt", color="#333")
        self._move_score_marker()
        self._fold_score_plot()

    def _move_score_marker(self, *_args) -> None:
        steps = self.probe_steps()
        i = self.probeSlider.value()
        self.scoreMarker.setVisible(0 <= i < len(steps))
        if 0 <= i < len(steps):
            self.scoreMarker.setValue(steps[i])

    def score_marker_step(self) -> int | None:
        """The step the plot's marker stands at (the slider's), None when hidden."""
        return int(self.scoreMarker.value()) if self.scoreMarker.isVisible() else None

    def score_curves(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The plot's lines as drawn: label as in the legend ("L1 H1", from 1) → (steps, scores)."""
        return {f"L{parse_map_name(name).layer + 1} H{h + 1}": tuple(np.asarray(a) for a in curve.getData())
                for (name, h), curve in self._score_curves.items()}

    def _on_score_curve_clicked(self, name: str, h: int) -> None:
        if self.maps is not None and name in self.maps.maps:
            kind, layer = parse_map_name(name)
            self.set_view(kind=kind, layer=layer, head=h)

    # ---- export ---------------------------------------------------------------------------------------------
    def export_png(self, path, what: str = "view") -> Path:
        """Save the large map as it is shown ("view": a picture of the head, or the mean, with its token labels
        and colour bar) or the head grid ("grid": every layer × head of the kind shown, then the mean over
        heads, labelled as the command line draws them, `attention_png`). Returns the path."""
        maps = self._maps_to_export()
        if what == "view":
            path = Path(path)
            if not self.attentionView.grab().save(str(path), "PNG"):
                raise OSError(f"could not write {path}.")
            return path
        if what == "grid":
            from fatstudio.qt.widgets.attention_png import save_attention_png

            return save_attention_png(maps, path, [map_name(self.kind, l) for l in self.layers()], with_mean=True)
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
        head = "mean" if self.head == MEAN else f"head{self.head + 1}"
        return f"attention-{self.kind}-layer{self.layer + 1}-{head}"

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
