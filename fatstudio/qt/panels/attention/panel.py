"""Attention panel: every head's softmax(S/√d_attn) (Algorithm 4) of the last forward pass.

- two sources, chosen in ``sourceSwitch`` (`widgets.source_switch`): "Your text" (the Prompt tab's last
  forward pass, `show_maps`, with its caption: the prompt and as much of the output as l_max allows) and
  "Training probe, step N" (the slider's step); each keeps its maps while the other is shown;
- an edt opens on its lesson, cross-attention in the last layer; the large map opens on the most informative
  head (`AttentionMaps.focused_head`: the lowest entropy) of each new text and of a run's newest step, until
  the user chooses a layer or head; layers and heads are counted from 1 in everything shown
  (`MapName.label`, `MapName.head_label`);
- a grid of layers × heads thumbnails (plus the mean over heads), titled with each head's entropy in nats
  (the mean over queries of the entropy of each attention row), all on one fixed 0-1 colour scale;
- one head large (``attentionView``) with the tokens on both axes: zoom with the wheel, pan by dragging,
  the weight under the cursor with its query and key tokens below it;
- ``kindCombo`` (edt models: encoder self-, decoder self- and cross-attention), ``layerCombo``, ``headCombo``
  (the heads and "mean over heads");
- click a query (a row of the large map, or a token of the text strip) to lay its attention row over the
  text as token backgrounds;
- head scores (`core.head_scores`, measured in a worker thread): per head the mean weight to the previous
  token, to itself, to the first token (of the maps shown), and, with a model given by `set_model`, the
  induction score on random tokens repeated twice, in the sortable ``entropyTable`` (one row per head) and
  the highest, where ≥ 0.5, in the grid's thumbnail titles; for a probe step, the scores the trainer saved
  with that step's maps (induction from that step's weights; an older run's files have prev, diag and sink);
- over training time: ``probeSlider`` (a QSlider) runs over the evaluation steps whose probe maps the run
  saved (`set_probes` for a reopened run, `add_probe` for each new one while training; `attention_probes`);
  moving it, or the play button (``probePlayButton``, a QTimer stepping it), shows that step's maps in the grid
  and large map;
  ``headScoresPlot`` draws one head score (``headScoreCombo``, opening on the one that rises most over the
  run: a head forming) of every head of the kind shown against the step (`core.probes.score_history`), a dashed line at the
  slider's step, the head shown large drawn bold (click a line to show that head); when every line is flat
  it folds to a one-line note;
- experiments beside the grid, as tabs next to the head shown large (``viewTabs``): the knock-out table
  (``ablationTable``, `attention_ablation`, its weights following the slider's step), activation patching
  (``patchingView``, `attention_patching`), and a head knocked out on the text shown (right-click a head in the
  grid, `head_menu`: ``headAblationView``, `attention_head_ablation`, on the knock-out table's weights);
- under the maps, the logit lens of the text shown (``lensView``, `attention_lens`): the probe step's, saved
  with its maps (so the slider scrubs it over training), or the user's text's, measured in a worker;
- export the large map as a picture with its token labels (`export_png`; "grid": the layers × heads of the
  kind shown as the core's heatmaps) and its numbers as CSV (`export_csv`), both written by the core's
  `AttentionMaps` (the CLI's writers and colours) except the picture of the view (`attention_export`).

The arrays drawn are the ones in the `AttentionMaps` given to `show_maps`, untouched; what there is (kinds,
layers, heads) and every number shown come from it. The model the tab computes from is the focus's
(`workspace.focus`, said in ``attentionFocusLabel``): the user's text's maps go when the focus moves to other
weights, and each experiment says which weights it uses when they are not the focus's.

The panel holds what is shown and passes it to its parts (the views of `attention_*`, each given the workspace),
which answer with signals; no part imports the panel.
"""
from __future__ import annotations

import html
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ....core.inference.attention_maps import MEAN_HEAD, AttentionMaps
from ....core.inspect.head_scores import HeadScores  # torch-free at import
from ....core.names import AttentionKind, ComponentName, MapName
from ...widgets.focus_label import FocusLabel
from ...widgets.head_score_history import HeadScoreHistory
from ...widgets.map_browser import MapBrowser
from ...widgets.probe_timeline import ProbeTimeline
from ...widgets.query_strips import QueryStrips
from ...widgets.saving import save_with_dialog, show_message
from ...widgets.source_switch import PROBE, TEXT, SourceSwitch
from ...widgets.view_bar import ViewBar
from . import export as attention_export
from .ablation import AblationView
from .head_ablation import HeadAblationView
from .lens import LensView
from .patching import PatchingView
from .probes import ProbeMaps
from .scores import HeadScoreMeter

if TYPE_CHECKING:
    from ....core.app.workspace import Workspace

MEAN = MEAN_HEAD  # head index of "mean over heads"


def _give_height(splitter: QSplitter, part: int, giver: int, want: int) -> None:
    """Part ``part`` of the splitter folded, unfolded or grown to ``want`` px: part ``giver`` (the large map, the
    table) gives or takes the height."""
    sizes = splitter.sizes()
    if sum(sizes) and sizes[part] != want:
        sizes[giver] += sizes[part] - want
        sizes[part] = want
        splitter.setSizes(sizes)


class AttentionPanel(QWidget):
    """Shows an `AttentionMaps`; the main window connects the workspace's ``text_maps_changed`` to `show_maps`."""

    viewChanged = Signal()  # kind, layer, head or the maps changed
    headClicked = Signal(object, int)  # a click in the grid or table chose (the MapName, head; MEAN: the mean)
    shownSized = Signal()  # first shown at its size with maps: the splitters the user left may come back unsqueezed
    TABLE_COLUMNS = MapBrowser.TABLE_COLUMNS  # the entropy table's columns

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.maps: AttentionMaps | None = None  # the maps shown: `text_maps` or a probe step's
        self.text_maps: AttentionMaps | None = None  # the user's text's (`show_maps`), kept while a probe is shown
        self.kind: AttentionKind | None = None
        self.layer = 0
        self.head = 0  # MEAN for the mean over heads
        self.head_chosen = False  # the user chose the layer or head: new maps keep it (until another run's probes)
        self.query: int | None = None
        self.loaded = None  # the LoadedModel whose head scores are measured (`set_model`: the focus's)
        self.scores: HeadScores | None = None  # of the maps shown (induction: of the loaded model)
        self._scores_for: object = None  # the maps whose scores are measured or shown
        self.workspace = workspace
        self._shown_sized = False  # `shownSized` was emitted
        self._wanted: dict[QWidget, int] = {}  # the heights the parts under the map and the table asked for
        self._build()
        workspace.focus.changed.connect(self._focus_changed)  # the head scores are the focus's model's
        workspace.run_changed.connect(self._refresh_sources)
        if workspace.loaded is not None:
            self.set_model(workspace.loaded)

    def _focus_changed(self, focus) -> None:
        """Other weights in focus: the user's text's maps (and its lens and attribution) were another model's, so
        they go; the probe maps stay (they are the run's own, listed with `set_probes`)."""
        if focus.loaded is self.loaded:
            return
        if self.showing_probe:
            self.text_maps = None
            self._update_source()
        elif self.text_maps is not None:
            self.clear()
        self.set_model(focus.loaded)

    # ---- layout ------------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 0, 4, 0)  # the header row costs no height the maps and the text need
        header = QHBoxLayout()  # which run and weights | which of their attention: one row
        self.focusLabel = FocusLabel(self.workspace.focus, "attentionFocusLabel")
        self.sourceSwitch = SourceSwitch()
        self.sourceSwitch.chosen.connect(self.show_source)
        header.addWidget(self.focusLabel, 2)
        header.addWidget(self.sourceSwitch, 3)
        outer.addLayout(header)
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
        self.viewBar = ViewBar()
        pl.addWidget(self.viewBar)
        self.probeTimeline = ProbeTimeline()
        pl.addWidget(self.probeTimeline)
        self.browser = MapBrowser()
        self._add_experiments()

        self.strips = QueryStrips()

        self.scoreHistory = HeadScoreHistory()
        self.probes = ProbeMaps(self.probeTimeline, self.scoreHistory, self)  # the slider's steps and their maps
        self.scoreMeter = HeadScoreMeter(self.workspace, self)  # the scores of the maps shown, measured
        self.lensView = LensView(self.workspace)  # the logit lens of the text shown, under the maps (`attention_lens`)
        # two columns: every head (the grid, the table, the scores over training) | one head (the map large, the
        # text under it, the lens of that text); each part's height the user can move, each splitter remembered
        self.browser.overview.addWidget(self.scoreHistory)
        self.browser.detail.addWidget(self.strips)
        self.browser.detail.addWidget(self.lensView)
        for splitter in self.splitters():  # laid out here until the user moves it (`user_sized`)
            splitter.setProperty("userSized", False)
            splitter.splitterMoved.connect(lambda *_, s=splitter: s.setProperty("userSized", True))
        self.browser.installEventFilter(self)
        pl.addWidget(self.browser, 1)
        self.messageLabel = QLabel()
        self.messageLabel.setObjectName("attentionMessage")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setVisible(False)
        pl.addWidget(self.messageLabel)
        self.stack.addWidget(page)

        self.viewBar.kindChosen.connect(lambda kind: self.set_view(kind=kind))
        self.viewBar.layerChosen.connect(lambda layer: self.set_view(layer=layer))
        self.viewBar.headChosen.connect(lambda head: self.set_view(head=head))
        self.browser.cellClicked.connect(self._on_grid_clicked)
        self.browser.queryClicked.connect(self.select_query)
        self.strips.queryClicked.connect(self.select_query)
        self.probes.listed.connect(self._probes_listed)
        self.probes.shown.connect(self._show)
        self.probes.stepsChanged.connect(self._probe_steps_changed)
        self.probes.failed.connect(lambda message: show_message(self.messageLabel, message, error=True))
        self.probeTimeline.stepChanged.connect(self._slider_moved)
        self.scoreMeter.measured.connect(self._scores_measured)
        self.scoreMeter.failed.connect(lambda message: show_message(
            self.messageLabel, f"Could not measure the head scores: {message}", error=True))
        self.viewChanged.connect(self._update_source)
        self.viewChanged.connect(self._score_view_changed)  # another kind, or another head in bold
        self.scoreHistory.headClicked.connect(self._on_score_curve_clicked)
        for asking in (self.scoreHistory, self.strips, self.lensView):
            asking.heightWanted.connect(partial(self._height_wanted, asking))
        # the parts' widgets that tests and the window read by name
        b, t, s = self.browser, self.probeTimeline, self.scoreHistory
        self.headGrid, self.attentionView, self.entropyTable, self.hoverLabel = (
            b.headGrid, b.attentionView, b.entropyTable, b.hoverLabel)
        self.probeBar, self.probeSlider, self.probePlayButton, self.probeStepLabel, self.probeTimer = (
            t, t.probeSlider, t.probePlayButton, t.probeStepLabel, t.probeTimer)
        self.headScoreCombo, self.headScoresPlot, self.headScoresNote, self.headScoresToggle = (
            s.headScoreCombo, s.headScoresPlot, s.headScoresNote, s.headScoresToggle)
        self.queryStrip, self.tokenStrip = self.strips.queryStrip, self.strips.tokenStrip
        self.viewBar.fitClicked.connect(self.browser.attentionView.reset_zoom)
        self.viewBar.exportPngClicked.connect(lambda: self._export_dialog("PNG image (*.png)", ".png", self.export_png))
        self.viewBar.exportCsvClicked.connect(lambda: self._export_dialog("CSV table (*.csv)", ".csv", self.export_csv))
        self.kindCombo, self.layerCombo, self.headCombo = self.viewBar.kindCombo, self.viewBar.layerCombo, self.viewBar.headCombo

    # ---- the parts' sizes -----------------------------------------------------------------------------------
    TABLE_ROWS = 8  # the table's rows shown at least, where the height allows (the grid whole first)

    def splitters(self) -> tuple[QSplitter, QSplitter, QSplitter]:
        """The columns (``attentionColumns``), the left one's parts (``attentionOverview``: grid, table, scores
        over training) and the right one's (``attentionDetail``: the map's tabs, the text, the lens)."""
        return self.browser, self.browser.overview, self.browser.detail

    @staticmethod
    def user_sized(splitter: QSplitter) -> bool:
        """The user moved the splitter (in this session or, restored, the last): its sizes are kept as they are."""
        return bool(splitter.property("userSized"))

    def eventFilter(self, obj, event) -> bool:
        if obj is self.browser and event.type() == QEvent.Type.Resize:
            self.lay_out()
        return super().eventFilter(obj, event)

    def _height_wanted(self, part: QWidget, want: int) -> None:
        """A part under the map (the text, the lens) or under the table (the scores over training) asks for its
        height: it is given, by the map or the table, unless the column is laid out anew."""
        self._wanted[part] = want
        overview, detail = self.browser.overview, self.browser.detail
        splitter = overview if part is self.scoreHistory else detail
        if not self.user_sized(splitter):
            self.lay_out(splitter)
        elif not part.isHidden():  # (a hidden part's height would go to the others, not back to the giver)
            _give_height(splitter, splitter.indexOf(part), 1 if splitter is overview else 0, want)

    def lay_out(self, only: QSplitter | None = None) -> None:
        """Size the columns and their parts (``only``: that splitter's) by what each shows, in its own fonts; a
        splitter the user moved keeps its sizes."""
        b = self.browser
        if b.width() <= 0 or b.height() <= 0:
            return
        if not self._shown_sized and b.isVisible() and self.maps is not None:  # its parts as they will be
            self._shown_sized = True
            self.shownSized.emit()  # those the user moved, restored: `user_sized`
        for splitter, fit in ((b, self._fit_columns), (b.overview, self._fit_overview), (b.detail, self._fit_detail)):
            if only in (None, splitter) and not self.user_sized(splitter):
                fit()

    def _fit_columns(self) -> None:
        """The left column as wide as the grid's titles and the table's columns need, half the width at most."""
        b, handle = self.browser, self.browser.handleWidth()
        left = min(b.overview_width(), int(0.5 * (b.width() - handle)))
        b.setSizes([left, b.width() - handle - left])

    def _fit_overview(self) -> None:
        """In the left column the whole grid (its thumbnails at their least, square up to the column's width),
        then `TABLE_ROWS` rows of the table, the scores over training as they ask, the rest to the table."""
        b, ov = self.browser, self.browser.overview
        avail = b.height() - 2 * ov.handleWidth()
        shown = not self.scoreHistory.isHidden()
        scores_least = self.scoreHistory.minimumSizeHint().height() if shown else 0
        scores_want = self._wanted_height(self.scoreHistory)
        least, best = b.grid_heights(ov.width())
        # in turn, as far as the height goes: the whole grid, five rows of the table, the scores' plot at its
        # least, `TABLE_ROWS` rows, the plot as it asks, square thumbnails, and what is left to the table
        grid = max(60, min(least, avail - b.table_height(3) - scores_least))
        table, scores, rest = 0, 0, avail - grid
        for part, want in (("table", b.table_height(5)), ("scores", scores_least),
                           ("table", b.table_height(self.TABLE_ROWS)), ("scores", scores_want),
                           ("grid", best)):
            have = {"table": table, "scores": scores, "grid": grid}[part]
            more = max(0, min(want - have, rest))
            rest -= more
            table, scores, grid = (table + more * (part == "table"), scores + more * (part == "scores"),
                                   grid + more * (part == "grid"))
        ov.setSizes([grid, table + rest, scores])

    def _fit_detail(self) -> None:
        """In the right one the text and the lens as they ask, the rest to the large map."""
        de = self.browser.detail
        strips, lens = self._wanted_height(self.strips), self._wanted_height(self.lensView)
        avail = self.browser.height() - 2 * de.handleWidth()
        de.setSizes([max(120, avail - strips - lens), strips, lens])

    def _wanted_height(self, part: QWidget) -> int:
        """The height a part asked for (its size hint before it asked), within its least and most; 0 hidden."""
        if part.isHidden():
            return 0
        want = self._wanted.get(part, part.sizeHint().height())
        return max(part.minimumSizeHint().height(), min(want, part.maximumHeight()))

    def _add_experiments(self) -> None:
        """The experiments as tabs beside the head shown large: ``ablationView`` (its ``ablationTable``),
        ``patchingView`` and ``headAblationView`` (a right click on a head in the grid), which knocks heads out of
        the weights chosen in the knock-out table."""
        ws, tabs = self.workspace, self.browser.viewTabs
        self.ablationView, self.patchingView = AblationView(ws), PatchingView(ws)
        self.headAblationView = HeadAblationView(ws)
        pages = {}
        for view, title in ((self.ablationView, "Knock-out table"), (self.patchingView, "Patching"),
                            (self.headAblationView, "Head knocked out")):
            # each scrolls where the map's part is short: the tabs' least height is not the tallest experiment's
            pages[view] = page = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
            page.setWidget(view)
            tabs.addTab(page, title)
        self.ablationTable = self.ablationView.table
        self.ablationView.weightsChosen.connect(self.headAblationView.set_weights)
        self.headAblationView.showRequested.connect(lambda: tabs.setCurrentWidget(pages[self.headAblationView]))
        self.browser.cellMenuRequested.connect(self._show_head_menu)

    # ---- data ---------------------------------------------------------------------------------------------
    def kinds(self) -> list[AttentionKind]:
        return self.maps.kinds() if self.maps is not None else []

    def layers(self, kind: AttentionKind | None = None) -> list[int]:
        kind = kind or self.kind
        return self.maps.layers(kind) if self.maps is not None and kind is not None else []

    def n_heads(self) -> int:
        return self.maps.n_heads(self.current_name()) if self.maps is not None else 0

    def _shown(self) -> tuple[AttentionMaps, AttentionKind]:
        """The maps shown and the kind of attention shown large (what draws them runs only while maps are)."""
        if self.maps is None or self.kind is None:
            raise ValueError("no attention maps are shown.")
        return self.maps, self.kind

    def current_name(self) -> MapName:
        """The map shown large, e.g. "self/1", "cross/0"."""
        return MapName(self._shown()[1], self.layer)

    def current_matrix(self) -> np.ndarray:
        """(T_query, T_key): the head shown large, or the mean over the layer's heads."""
        return self._shown()[0].matrix(self.current_name(), self.head)

    def query_tokens(self) -> list[str]:
        return list(self._shown()[0].query_tokens(self.current_name()))

    def key_tokens(self) -> list[str]:
        return list(self._shown()[0].key_tokens(self.current_name()))

    def show_maps(self, maps) -> None:
        """Show the attention of the user's text (an `AttentionMaps` of the Prompt tab's last forward pass; a
        `TextAttention` says what of the text it shows) and keep it for "Your text". Keeps the kind, and the
        layer and head the user chose, when the new maps have them (`_show`). None: the user's text has no maps."""
        self.text_maps = maps if maps is not None and getattr(maps, "maps", None) else None
        if self.text_maps is not None:
            self._show(self.text_maps, fresh=True)
        elif not self.showing_probe:
            self._blank()

    def show_source(self, source: str) -> None:
        """Show the user's text's maps (`TEXT`) or the probe maps at the slider's step (`PROBE`), if there are."""
        if source == TEXT and self.text_maps is not None:
            self._show(self.text_maps)
        elif source == PROBE and self.probes.paths:
            self.probes.show_index(self.probeTimeline.index())
        else:
            self._update_source()

    def _show(self, maps: AttentionMaps, fresh: bool = False) -> None:
        """Draw ``maps`` (the user's text's or a probe step's). A kind not in them: the lesson's
        (`AttentionMaps.lesson_kind`) on its most informative head (`AttentionMaps.focused_head`), as are
        ``fresh`` maps (a new text, a run's newest step) unless the user chose a head; else the view is kept."""
        self.maps = maps
        kind = self.kind if self.kind in self.kinds() else None
        if kind is None or (fresh and not self.head_chosen):
            self.kind = kind = kind or maps.lesson_kind()
            self.layer, self.head = maps.focused_head(kind)
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
        self._measure_scores()
        self._follow_lens()

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
        self.lensView.clear()
        self.stack.setCurrentIndex(0)
        self.scoreHistory.set_view(None, None, self.head)
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
            return f"<b>Training probe, step {self.probe_step:,}</b>: the run's probe input ({n} tokens) at that evaluation."
        what = getattr(self.maps, "caption", "") or (
            f"the source ({len(self.maps.context_tokens)} tokens) → {n} tokens" if self.maps.context_tokens
            else f"{n} tokens")
        return f"<b>Your text</b>: {html.escape(what)}."

    def _update_source(self) -> None:
        self.sourceSwitch.set_state(self.source(), self.text_maps is not None, self.probeTimeline.current_step(),
                                    self.source_caption())

    def set_view(self, kind: AttentionKind | None = None, layer: int | None = None, head: int | None = None) -> None:
        """Choose what is shown large: ``kind`` ("self", "enc", "dec", "cross"), ``layer``, ``head``
        (0-based; `MEAN` = -1 for the mean over heads). Unchanged where None; a layer or head is the user's
        choice (new maps keep it), another kind alone opens on its most informative head until there is one."""
        if self.maps is None:
            return
        if kind is not None:
            if kind not in self.kinds():
                raise ValueError(f"these maps have no {kind!r} attention; they have {', '.join(self.kinds())}.")
            self.kind = kind
            if layer is None and head is None and not self.head_chosen:
                self.layer, self.head = self.maps.focused_head(kind)
        self.head_chosen = self.head_chosen or layer is not None or head is not None
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
        maps, kind = self._shown()
        ent = maps.entropy(self.current_name())
        self.viewBar.set_choices(self.kinds(), kind, self.layers(), self.layer, list(ent),
                                 float(maps.mean_entropy(self.current_name())), self.head)
        if new_maps:
            self._draw_grid()
            self._set_strips()
        self._draw_large()
        self.viewChanged.emit()

    def _draw_grid(self) -> None:
        self.browser.show_grid(*self._shown(), self.scores, self.current_name())
        self.lay_out()  # another grid (or its titles a line taller with scores): its part's height

    # ---- head scores (measured in a worker) ------------------------------------------------------------
    def set_model(self, loaded) -> None:
        """The LoadedModel (model, tokenizer) whose head scores are measured beside the maps shown: prev, diag
        and sink on the maps' text, induction on random tokens repeated twice. None: no scores."""
        self.loaded = loaded
        self.patchingView.set_model(loaded)
        self.lensView.set_model(loaded)
        self._refresh_sources()
        if self.maps is not None:
            self._measure_scores()
            self._follow_lens()

    def _refresh_sources(self, *_args) -> None:
        """The weights the knock-out table may measure: the model loaded, the run's checkpoint, its probe steps."""
        ws = self.workspace
        self.ablationView.set_sources(self.loaded, ws.loaded_dir, ws.run_dir, self.probe_steps())

    def _saved_scores(self) -> HeadScores | None:
        """The scores saved with the probe step shown (None: a prompt's maps, or none saved)."""
        return self.score_history.get(self.probe_step) if self.showing_probe and self.probe_step is not None else None

    def _measure_scores(self) -> None:
        """Measure the scores of the maps shown in a worker, unless they are a probe step's saved ones; the table
        and the grid show them when they arrive, if those maps are still shown."""
        if self.maps is None or self._saved_scores() is not None:
            self.scoreMeter.cancel()
            return
        self._scores_for = self.maps
        # a probe's maps are of a past step's weights: the loaded model's induction score would not be theirs
        self.scoreMeter.measure(self.maps, None if self.showing_probe else self.loaded)

    def _scores_measured(self, maps: AttentionMaps, scores: HeadScores) -> None:
        if maps is self.maps:
            self.scores = scores
            if self.kind is not None:
                self._draw_grid()

    def scores_pending(self) -> bool:
        return self.scoreMeter.pending()

    def _follow_lens(self) -> None:
        """Show the lens of the maps shown: saved with the probe step's, or measured for the user's text."""
        step = self.probe_step
        if self.showing_probe and step is not None and step in self.probes.paths:
            self.lensView.show_probe(self.probes.paths[step], step)
        else:
            self.lensView.show_text(self.maps)

    def score_table(self) -> list[dict[str, str]]:
        """The entropy table as shown (in its current order): one dict per row, column (`TABLE_COLUMNS`) → text."""
        return self.browser.score_table()

    def _grid_cell(self) -> tuple[int, int]:
        r = self.layers().index(self.layer)
        c = self.n_heads() if self.head == MEAN else self.head
        return r, c

    def _draw_large(self) -> None:
        A = self.current_matrix()
        self.browser.show_large(A, self.query_tokens(), self.key_tokens(), self.current_name().head_label(self.head),
                                self._grid_cell())
        if self.query is None or self.query >= A.shape[0]:
            self.query = A.shape[0] - 1  # the last query: what the model looked at to predict the next token
        self._overlay()

    def _set_strips(self) -> None:
        """The token strips of the current kind (the same for all its layers and heads)."""
        queries, keys = self.query_tokens(), self.key_tokens()
        self.strips.set_tokens(queries, keys, cross=queries != keys or self.kind == "cross")

    def _overlay(self) -> None:
        """Token backgrounds of the text strip = the chosen query's attention row."""
        A, q = self.attentionView.matrix, self.query
        if A is None or q is None:
            return
        self.strips.show_row(q, np.asarray(A[q], dtype=np.float64), self.query_tokens(), self.key_tokens(),
                             "source" if self.kind in ("cross", "enc") else "text")
        self.attentionView.set_query_highlight(q)

    # ---- interaction --------------------------------------------------------------------------------------
    def select_query(self, q: int) -> None:
        """Lay query ``q``'s attention row over the text (and outline the row in the large map)."""
        A = self.attentionView.matrix
        if self.maps is None or A is None or not 0 <= q < A.shape[0]:
            return
        self.query = q
        self._overlay()

    def _cell(self, row: int, col: int) -> tuple[MapName, int] | None:
        """The grid's thumbnail (row, column) as (its map, head; MEAN: the mean's column); None: no such."""
        layers = self.layers()
        if self.maps is None or self.kind is None or not 0 <= row < len(layers):
            return None
        name = MapName(self.kind, layers[row])
        return name, MEAN if col >= self.maps.n_heads(name) else col

    def _on_grid_clicked(self, row: int, col: int) -> None:
        cell = self._cell(row, col)
        if cell is None:
            return
        name, head = cell
        self.browser.viewTabs.setCurrentIndex(0)  # the head large
        self.set_view(layer=name.layer, head=head)
        self.headClicked.emit(self.current_name(), self.head)

    def head_menu(self, row: int, col: int) -> QMenu | None:
        """The grid's context menu for thumbnail (row, column): the head's ablations on the text shown
        (`HeadAblationView.menu`; None: the mean's column, or no maps shown)."""
        cell, maps = self._cell(row, col), self.maps
        if cell is None or cell[1] == MEAN or maps is None:
            return None
        return self.headAblationView.menu(ComponentName(*cell), maps, self)

    def _show_head_menu(self, row: int, col: int, at: QPoint) -> None:
        menu = self.head_menu(row, col)
        if menu is not None:
            menu.popup(at)

    # ---- probe maps over training time -------------------------------------------------------------------
    def probe_steps(self) -> list[int]:
        """The saved evaluation steps the slider runs over, ascending."""
        return self.probeTimeline.probe_steps()

    @property
    def probe_step(self) -> int | None:
        """The step whose probe maps were shown last."""
        return self.probes.step

    @property
    def showing_probe(self) -> bool:
        """Whether the maps shown are a saved probe's (not a prompt's)."""
        return self.maps is not None and self.maps is self.probes.maps

    def set_probes(self, paths: Mapping[int, str | Path]) -> None:
        """The run's saved probe files by step (`probes.list_probes`): the slider runs over them and the last
        step's maps are shown. Empty: the slider hides, and probe maps shown give way to the user's text's."""
        showing = self.showing_probe
        self.probes.set_paths(paths)
        if not paths and showing:
            self.show_maps(self.text_maps)

    def add_probe(self, step: int, path: str | Path, scores: dict | None = None) -> None:
        """A new evaluation's probe maps and head ``scores`` (`ProbeMaps.add`): shown if the maps shown are a
        probe's (or there are none) and the slider was at the last step."""
        self.probes.add(step, path, scores, follow=self.maps is None or self.showing_probe)

    def _probes_listed(self, another: bool) -> None:
        """A run's probe files listed anew: their lenses are read again; another run's open on their most
        informative head again."""
        self.lensView.forget_probes()
        if another:
            self.head_chosen = False

    def _probe_steps_changed(self) -> None:
        self._update_source()
        self.lay_out()  # the scores over training shown or gone
        self._refresh_sources()  # the knock-out table lists the probe steps

    def _slider_moved(self, step: int | None) -> None:
        self._update_source()
        self.ablationView.follow_step(step)  # the experiments' weights follow the slider's step

    # ---- head scores over training time ----------------------------------------------------------------------
    SCORE_PLOT_MAX = HeadScoreHistory.SCORE_PLOT_MAX

    @property
    def score_history(self) -> dict[int, HeadScores]:
        """The head scores saved with each probe step."""
        return self.scoreHistory.score_history

    def score_moves(self, rise: bool = False) -> dict[str, float]:
        return self.scoreHistory.score_moves(rise)

    def score_plot_folded(self) -> bool:
        return self.scoreHistory.score_plot_folded()

    def score_marker_step(self) -> int | None:
        return self.scoreHistory.score_marker_step()

    def score_curves(self) -> dict[str, tuple[np.ndarray, ...]]:
        return self.scoreHistory.score_curves()

    def _score_view_changed(self) -> None:
        self.scoreHistory.set_view(self.kind, self.current_name() if self.kind is not None else None, self.head)
        self.scoreHistory.draw()

    def _on_score_curve_clicked(self, name: MapName, h: int) -> None:
        if self.maps is not None and name in self.maps.maps:
            self.set_view(kind=name.kind, layer=name.layer, head=h)

    # ---- export (`attention_export`) ----------------------------------------------------------------------
    def export_png(self, path, what: str = "view") -> Path:
        """Save the large map as it is shown ("view") or the head grid ("grid"); returns the path."""
        names = [MapName(self.kind, layer) for layer in self.layers()] if self.kind is not None else []
        return attention_export.export_png(path, self.maps, self.attentionView, names, what)

    def export_csv(self, path) -> Path:
        """Save the numbers of the large map (the core's `AttentionMaps.head_csv`)."""
        return attention_export.export_csv(path, self.maps, self.current_name(), self.head)

    def _export_dialog(self, filt: str, suffix: str, fn) -> None:
        if self.maps is not None:
            save_with_dialog(self, attention_export.export_name(self.kind, self.layer, self.head), filt, suffix, fn,
                             self.messageLabel)
