"""Paper panel: the paper inside the app.

- ``pseudocodeView``: the algorithm of the model in use (Algorithm 8, 9 or 10, Gopher's changes written in;
  `core.pseudocode`) with its shapes. Click a line (or walk with the arrow keys): ``fieldsChosen`` names the
  ModelConfig fields it uses (the main window marks those rows in the Model panel) and the details pane shows
  where it stands in the paper, the parameters it uses and, after a forward pass, the tensor it produces.
- ``paperForwardButton``: one forward pass of the model in use on the Prompt tab's text (`core.pseudocode.trace`,
  in a worker thread, on a copy of the model); then each line's tensor shows its shape, mean, std, norm and a
  histogram (``paperHistogram``). Lines inside ``for l`` pick the layer in ``paperLayerCombo``.
- `show_head`: a head clicked in the Attention tab highlights the line whose MHAttention made it, with the
  head's index and that head's softmax(S/√d_attn) after a forward pass.
- ``checkPaperButton``: `core.paper_check.check_against_paper` on the model in use and a short input from the
  corpus, in a worker thread; ``checkPaperLabel`` shows the largest differences of the probabilities and of
  the attention weights, its tooltip what was compared.
- ``walkthroughView`` (its own tab beside the pseudocode, so each step's line shows highlighted in it): one
  forward pass of the model in use line by line, or back through the backward pass with gradient checks
  (`qt.panels.walkthrough`, `core.paper.walkthrough`, in a worker thread).
- ``deviationsView``: every deviation from the paper's pseudocode (`core.fidelity`).

The model in use (``paperModelCombo``): the window's loaded model (a trained run or a snapshot, `set_model`)
or a fresh model built from the current settings with the training seed. The panel follows the window's
``Settings``. torch is imported only in the worker functions.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.app.workspace import TrainingState, Workspace
from fatstudio.core.config import ARCH_NAMES, Arch, ModelConfig
from fatstudio.core.names import MapName
from fatstudio.core.paper.fidelity import deviations
from fatstudio.core.paper.pseudocode import Line, Pseudocode, Tap, TensorStats, Trace, pseudocode, tensor_stats
from fatstudio.qt.binding import Change
from fatstudio.qt.panels.walkthrough import WalkthroughView
from fatstudio.qt.widgets.focus_label import FocusLabel

TOLERANCE = 1e-9  # float64 agreement the reference tests ask for
_SELECTED = QColor(255, 224, 138)  # the clicked line, as the Model panel marks its rows


@dataclass(frozen=True)
class Subject:
    """The model the panel works on: a loaded one, or a fresh one built from ``config`` with ``seed``."""

    config: ModelConfig
    seed: int
    loaded: Any = None  # a runs.LoadedModel


def _model(subject: Subject, cached):
    """Worker: the subject's model (a fresh one built with the seed, unless ``cached`` is it)."""
    if subject.loaded is not None:
        return subject.loaded.model
    if cached is not None:
        return cached
    from fatstudio.core.paper.paper_check import fresh_model

    return fresh_model(subject.config, subject.seed)


def _tokenizer(subject: Subject, prepared):
    """The subject's tokenizer: the loaded run's, else the corpus panel's when its N_V is the settings'."""
    if subject.loaded is not None:
        return subject.loaded.tokenizer
    tok = getattr(prepared, "tokenizer", None)
    return tok if tok is not None and tok.vocab_size == subject.config.vocab_size else None


def _check_job(subject: Subject, cached, prepared):
    """Worker: the model's check against the literal reference on the start of the corpus."""
    from fatstudio.core.paper.paper_check import check_on_corpus

    model = _model(subject, cached)
    return check_on_corpus(model, _tokenizer(subject, prepared), getattr(prepared, "corpus", None)), model


def _forward_job(subject: Subject, cached, prepared, text: str, taps: list[Tap]):
    """Worker: one traced forward pass on ``text`` as the Prompt tab would read it (`paper_check.model_input`);
    returns (Trace, the input in words, the model)."""
    from fatstudio.core.inference.prompting import model_mode, prompt_mode
    from fatstudio.core.paper.paper_check import model_input
    from fatstudio.core.paper.pseudocode import trace

    model = _model(subject, cached)
    mode = prompt_mode(subject.loaded) if subject.loaded is not None else model_mode(model.config)
    x, z, what = model_input(model, _tokenizer(subject, prepared), getattr(prepared, "corpus", None), text, mode)
    return trace(model, taps, x, z), what, model


def _walk_job(subject: Subject, cached, prepared, text: str, query: int | None, head: int):
    """Worker: the walk (`core.paper.walkthrough.walk`) of the model in use on ``text`` as `_forward_job` reads it,
    with the loss of the model at step 0 (a fresh model of its configuration and seed); returns (Walk, the tokens in
    words, the input in words, the model)."""
    from fatstudio.core.inference.prompting import model_mode, prompt_mode
    from fatstudio.core.paper.paper_check import fresh_model, model_input
    from fatstudio.core.paper.walkthrough import walk

    model = _model(subject, cached)
    tok = _tokenizer(subject, prepared)
    mode = prompt_mode(subject.loaded) if subject.loaded is not None else model_mode(model.config)
    x, z, what = model_input(model, tok, getattr(prepared, "corpus", None), text, mode)
    query = None if query is None or query >= len(x) else query
    initial = model if subject.loaded is None else fresh_model(model.config, subject.loaded.config.train.seed)
    w = walk(model, x, z, query, head, initial)
    tokens = [tok.decode([v]) for v in x] if tok is not None else [str(v) for v in x]
    return w, tokens, what, model


def _exp(v: float) -> str:
    return f"{v:.1e}"


def stats_html(title: str, s: TensorStats) -> str:
    return (f"<b>{title}</b>: shape {tuple(s.shape)}<br>mean {s.mean:.4g} · std {s.std:.4g} · ‖·‖ {s.norm:.4g}"
            f" · min {s.min:.4g} · max {s.max:.4g}")


class PaperPanel(QWidget):
    """The pseudocode, linked to the model; the check against the paper; the deviations from it."""

    fieldsChosen = Signal(list)  # the ModelConfig fields the clicked line uses

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.settings = self.workspace.settings
        self.loaded = None
        self.training = False  # see `set_training`
        self.code: Pseudocode | None = None
        self.line: int | None = None  # the index of the line shown in the details
        self.layer = 0
        self.head: int | None = None  # a head chosen in the Attention tab (on the attention line)
        self.trace: Trace | None = None
        self.traced: str = ""  # what the traced forward pass read, in words
        self.shapes: dict[str, tuple[int, ...]] = {}  # the parameters' shapes, known after a forward pass
        self.check = None  # the last PaperCheck
        self._fresh: tuple[Subject, Any] | None = None  # the fresh model built for a subject
        self._subject_key: tuple | None = None  # what the model in use is: (config, seed, id of the loaded model)
        self._calls: dict[str, Any] = {}
        self._build()
        self.settings.changed.connect(self._on_settings)
        self.workspace.focus.changed.connect(self._focus_changed)  # the Prompt tab's text and the corpus are read there
        self.workspace.state_changed.connect(lambda s: self.set_training(s != TrainingState.IDLE))
        self._refresh_subject()

    # ---- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        self.focusLabel = FocusLabel(self.workspace.focus, "paperFocusLabel")
        outer.addWidget(self.focusLabel)
        bar = QHBoxLayout()
        self.modelCombo = QComboBox(objectName="paperModelCombo")
        self.modelCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.modelCombo.setToolTip("The model the pseudocode, the forward pass and the check are about: the loaded "
                                   "run (or snapshot), or a fresh model built from the current settings with the "
                                   "training seed.")
        self.forwardButton = QPushButton("Forward pass", objectName="paperForwardButton")
        self.forwardButton.setToolTip("Run the model once on the Prompt tab's text and keep the tensor each line "
                                      "of the pseudocode produces; click a line to see it.")
        self.checkPaperButton = QPushButton("Check against the paper", objectName="checkPaperButton")
        self.checkPaperButton.setToolTip("Run the literal float64 reference of the paper's pseudocode on a short "
                                         "input from the corpus and compare it with this model (in float64).")
        self.checkPaperLabel = QLabel(objectName="checkPaperLabel")
        self.checkPaperLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar.addWidget(QLabel("Model:"))
        bar.addWidget(self.modelCombo)
        bar.addWidget(self.forwardButton)
        bar.addWidget(self.checkPaperButton)
        bar.addWidget(self.checkPaperLabel, 1)
        outer.addLayout(bar)

        self.pseudocodeView = QPlainTextEdit(objectName="pseudocodeView")
        self.pseudocodeView.setReadOnly(True)
        self.pseudocodeView.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.pseudocodeView.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                                    | Qt.TextInteractionFlag.TextSelectableByKeyboard)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPointSizeF(max(8.0, mono.pointSizeF() * 0.95))
        self.pseudocodeView.setFont(mono)
        self.pseudocodeView.setToolTip("Click a line: the Model panel marks the settings it uses, the pane on the "
                                       "right shows its parameters and, after a forward pass, its tensor.")

        self.tabs = QTabWidget(objectName="paperTabs")
        self.tabs.addTab(self._build_details(), "Line")
        self.deviationsView = QTextBrowser(objectName="deviationsView")
        self.tabs.addTab(self.deviationsView, "Deviations from the paper")
        # beside the pseudocode, so the line of each step shows highlighted in it while the learner steps
        self.walkthrough = WalkthroughView(self.workspace.focus)
        self.tabs.addTab(self.walkthrough, "Walkthrough")

        split = self.splitter = QSplitter(Qt.Orientation.Horizontal, objectName="paperSplitter")
        split.addWidget(self.pseudocodeView)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([620, 380])
        split.setChildrenCollapsible(False)
        outer.addWidget(split, 1)

        self.modelCombo.activated.connect(lambda _i: self._refresh_subject())
        self.forwardButton.clicked.connect(self.run_forward)
        self.checkPaperButton.clicked.connect(self.run_check)
        self.pseudocodeView.cursorPositionChanged.connect(self._on_cursor)
        self.layerCombo.activated.connect(lambda i: self.select_line(self.line, layer=i, head=self.head, emit=False))
        self.walkthrough.walkRequested.connect(self.run_walk)
        self.walkthrough.stepShown.connect(lambda line, layer: self.select_line(line, layer=max(layer, 0), emit=False))
        self.tabs.currentChanged.connect(self._tab_changed)

    def _build_details(self) -> QWidget:
        page = QWidget()
        lay = QVBoxLayout(page)
        self.lineTitle = QLabel("Click a line of the pseudocode.", objectName="paperLineTitle")
        self.lineTitle.setWordWrap(True)
        self.lineTitle.setTextFormat(Qt.TextFormat.RichText)
        row = QHBoxLayout()
        self.layerLabel = QLabel("layer l =")
        self.layerCombo = QComboBox(objectName="paperLayerCombo")
        self.layerCombo.setToolTip("The layer whose parameters and tensor are shown (the paper's l; 1 = the first).")
        row.addWidget(self.layerLabel)
        row.addWidget(self.layerCombo)
        row.addStretch(1)
        self.paramsLabel = QLabel(objectName="paperParamsLabel")
        self.paramsLabel.setWordWrap(True)
        self.paramsLabel.setTextFormat(Qt.TextFormat.RichText)
        self.paramsLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tensorLabel = QLabel(objectName="paperTensorLabel")
        self.tensorLabel.setWordWrap(True)
        self.tensorLabel.setTextFormat(Qt.TextFormat.RichText)
        self.tensorLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.histogram = pg.PlotWidget(background="w")
        self.histogram.setObjectName("paperHistogram")
        item = self.histogram.getPlotItem()
        item.setLabel("bottom", "value")
        item.setLabel("left", "count")
        item.setMouseEnabled(False, False)
        self.histogram.setMinimumHeight(140)
        self.bars: pg.BarGraphItem | None = None
        lay.addWidget(self.lineTitle)
        lay.addLayout(row)
        lay.addWidget(self.paramsLabel)
        lay.addWidget(self.tensorLabel)
        lay.addWidget(self.histogram, 1)
        lay.addStretch(0)  # the room left while no histogram is shown
        self.histogram.setVisible(False)  # until a line's tensor is traced: empty axes said nothing
        return page

    @staticmethod
    def _deviations_html(arch: Arch | None) -> str:
        """Every deviation, under a heading per group: the architecture ``arch``'s own, every architecture's,
        the other architectures'."""
        heading = {0: f"For {ARCH_NAMES.get(arch, arch)}" if arch else "", 1: "For every architecture",
                   2: "For the other architectures"}
        parts, group = [], None
        for d in deviations(arch):
            if arch is not None and d.rank(arch) != group:
                group = d.rank(arch)
                parts.append(f"<h3>{html.escape(heading[group])}</h3>")
            setting = f"<br><b>Setting:</b> <code>{html.escape(d.setting)}</code>" if d.setting else ""
            parts.append(f"<h4>{html.escape(d.topic)}</h4><p><b>Paper:</b> {html.escape(d.paper)}<br>"
                         f"<b>fatstudio:</b> {html.escape(d.fatstudio)}<br><b>Why:</b> {html.escape(d.why)}"
                         f"{setting}</p>")
        return "".join(parts)

    # ---- the model in use ---------------------------------------------------------------------------------
    def _focus_changed(self, focus) -> None:
        if focus.loaded is not self.loaded:
            self.set_model(focus.loaded)

    def set_model(self, loaded) -> None:
        """The window's loaded model (a runs.LoadedModel; None: none): chosen as the model in use."""
        self.loaded = loaded
        self._refresh_subject(prefer_loaded=loaded is not None)

    def subject(self) -> Subject | None:
        """The model in use, or None while the settings are not valid (and no model is loaded)."""
        if self.modelCombo.currentData() == "loaded" and self.loaded is not None:
            return Subject(self.loaded.model.config, 0, self.loaded)
        if self.settings.model_error is not None:
            return None
        return Subject(self.settings.model.replace(), self.settings.train.seed)

    def _on_settings(self, change: Change) -> None:
        if change.touches("model") or change.touches("train", "seed"):
            self._refresh_subject()

    def _refresh_subject(self, prefer_loaded: bool = False) -> None:
        """Fill the model combo, then show the pseudocode of the model in use (dropping a trace of another)."""
        keep = "loaded" if prefer_loaded else self.modelCombo.currentData()
        self.modelCombo.clear()
        if self.loaded is not None:
            self.modelCombo.addItem(f"loaded: {self.loaded.label or 'model'}", "loaded")
        self.modelCombo.addItem(f"fresh from the settings (seed {self.settings.train.seed})", "fresh")
        self.modelCombo.setCurrentIndex(max(0, self.modelCombo.findData(keep)))
        subject = self.subject()
        fresh = subject.seed if subject is not None and subject.loaded is None else None
        for label in (self.focusLabel, self.walkthrough.focusLabel):
            label.set_own(None if fresh is None else f"a fresh model built from the settings (seed {fresh})")
        key = None if subject is None else (subject.config, subject.seed, id(subject.loaded))
        if key == self._subject_key and key is not None:
            return  # the same model (a settings change that a loaded model does not follow)
        self._subject_key = key
        for running in list(self._calls):  # their results are of the model no longer in use: none arrives
            self.workspace.jobs.cancel(f"paper-{running}")
            self._ended(running)
        self.trace, self.shapes, self.check = None, {}, None
        self.walkthrough.set_walk(None)
        self.checkPaperLabel.setText("")
        self.checkPaperLabel.setToolTip("")
        self.code = pseudocode(subject.config) if subject is not None else None  # a subject's config is valid
        self.deviationsView.setHtml(self._deviations_html(subject.config.arch if subject is not None else None))
        text = self.code.text() if self.code is not None else "(fix the configuration to see the pseudocode)"
        if text != self.pseudocodeView.toPlainText():
            self.pseudocodeView.blockSignals(True)
            self.pseudocodeView.setPlainText(text)
            self.pseudocodeView.blockSignals(False)
        enabled = subject is not None and self.code is not None
        self.forwardButton.setEnabled(enabled and "forward" not in self._calls)
        self.checkPaperButton.setEnabled(enabled and "check" not in self._calls)
        if self.code is None or self.line is None or self.line >= len(self.code.lines):
            self.line = None
            self._highlight()
            self._show_details()
        else:
            self.select_line(self.line, layer=self.layer, emit=False)

    # ---- lines ---------------------------------------------------------------------------------------------
    def _on_cursor(self) -> None:
        i = self.pseudocodeView.textCursor().blockNumber()
        if self.code is not None and i != self.line:
            self.select_line(i)

    def select_line(self, index: int | None, layer: int | None = None, head: int | None = None,
                    emit: bool = True) -> None:
        """Show line ``index`` (of ``code.lines``): highlight it, list what it uses, show its tensor of ``layer``
        (0-based; lines inside ``for l``) and, on an attention line, head ``head``; ``emit`` ``fieldsChosen``."""
        if self.code is None or index is None or not 0 <= index < len(self.code.lines):
            return
        line = self.code.lines[index]
        n_layers = self.code.layers.get(line.stack, 1) if line.stack else 1
        self.line = index
        self.layer = min(max(0, layer if layer is not None else self.layer), n_layers - 1)
        self.head = head if line.attention is not None else None
        self._highlight()
        self._show_details()
        if emit:
            self.fieldsChosen.emit(list(line.fields))

    def show_head(self, name: MapName, head: int) -> None:
        """A head of the Attention tab's map ``name`` (``head`` -1: the mean over heads): highlight the line whose
        MHAttention made it."""
        if self.code is None:
            return
        try:
            index = self.code.attention_line(name.kind)
        except ValueError:
            return
        self.select_line(index, layer=name.layer, head=head if head >= 0 else None, emit=False)

    def selected_line(self) -> Line | None:
        return self.code.lines[self.line] if self.code is not None and self.line is not None else None

    def _highlight(self) -> None:
        view = self.pseudocodeView
        selections = []
        if self.line is not None:
            sel = QTextEdit.ExtraSelection()
            sel.format.setBackground(_SELECTED)
            sel.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            sel.cursor = QTextCursor(view.document().findBlockByNumber(self.line))
            selections.append(sel)
            if view.textCursor().blockNumber() != self.line:
                view.blockSignals(True)
                view.setTextCursor(sel.cursor)
                view.blockSignals(False)
            view.ensureCursorVisible()
        view.setExtraSelections(selections)

    # ---- details -----------------------------------------------------------------------------------------
    def _show_details(self) -> None:
        line = self.selected_line()
        code = self.code
        if line is None or code is None:
            self.lineTitle.setText("Click a line of the pseudocode.")
            for w in (self.layerLabel, self.layerCombo):
                w.setVisible(False)
            self.paramsLabel.setText("")
            self._show_tensor(None, "")
            return
        n_layers = code.layers.get(line.stack, 1) if line.stack else 0
        where = line.where() or "A note beside the algorithm"
        if self.head is not None and line.attention is not None:
            where += f" · {MapName(line.attention, self.layer).head_label(self.head)}"
        elif line.stack:
            where += f" · layer l = {self.layer + 1} of {n_layers}"
        self.lineTitle.setText(f"<b>{html.escape(where)}</b><br><code>{html.escape(line.text.strip())}</code>")
        self.layerCombo.blockSignals(True)
        self.layerCombo.clear()
        self.layerCombo.addItems([str(l + 1) for l in range(n_layers)])
        self.layerCombo.setCurrentIndex(self.layer if line.stack else -1)
        self.layerCombo.blockSignals(False)
        for w in (self.layerLabel, self.layerCombo):
            w.setVisible(bool(line.stack))
        params = line.parameters(self.layer)
        shown = [f"<code>{html.escape(p)}</code>" + (f" {self.shapes[p]}" if p in self.shapes else "") for p in params]
        fields = ", ".join(line.fields)
        self.paramsLabel.setText(
            (f"<b>Parameters</b> (state-dict names{', shapes' if self.shapes else ''}):<br>" + "<br>".join(shown)
             if shown else "<b>Parameters</b>: none of its own.")
            + (f"<br><b>Settings</b> (marked in the Model panel): {html.escape(fields)}" if fields else ""))
        tap = line.tap_at(self.layer)
        if tap is None and self.head is None:
            self._show_tensor(None, "This line produces no tensor of its own.")
        elif self.trace is None:
            self._show_tensor(None, "Press <b>Forward pass</b> to run the model on the Prompt tab's text and see "
                                    "the tensor this line produces.")
        else:
            self._show_traced(line, tap)

    def _show_traced(self, line: Line, tap: Tap | None) -> None:
        """The traced tensor of ``tap`` and the chosen head's attention weights, with a histogram of the head's
        weights if one was chosen, else of the tensor."""
        assert self.trace is not None
        parts = [f"Forward pass on {html.escape(self.traced)}."]
        drawn: tuple[str, TensorStats] | None = None
        if tap is not None and tap in self.trace.tensors:
            stats = tensor_stats(self.trace.tensors[tap])
            rows = " (one row per position: the paper's columns)" if len(stats.shape) == 2 else ""
            drawn = (line.shape, stats)
            parts.append(stats_html(f"{html.escape(line.shape)}{rows}", stats))
        if self.head is not None and line.attention is not None:
            name = MapName(line.attention, self.layer)
            A = self.trace.attention.get(name)
            if A is not None and self.head < A.shape[0]:
                what = f"softmax(S/√d_attn) of {name.head_label(self.head)}"
                head = tensor_stats(A[self.head])
                parts.append(stats_html(f"{what} (query × key; each row sums to 1)", head))
                drawn = (what, head)  # the head asked about is drawn
        self._show_tensor(drawn, "<br><br>".join(parts))

    def _show_tensor(self, drawn: tuple[str, TensorStats] | None, text: str) -> None:
        """``text`` in the tensor label and the histogram of ``drawn`` (its name, its stats; None: no bars)."""
        self.tensorLabel.setText(text)
        if self.bars is not None:
            self.histogram.removeItem(self.bars)
            self.bars = None
        self.histogram.getPlotItem().setTitle(html.escape(drawn[0]) if drawn else "", size="9pt", color="#333")
        self.histogram.setVisible(drawn is not None)
        if drawn is None:
            return
        s = drawn[1]
        edges = np.asarray(s.edges)
        counts = np.asarray(s.counts, dtype=float)
        width = float(edges[1] - edges[0]) if len(edges) > 1 and edges[1] > edges[0] else 1.0
        self.bars = pg.BarGraphItem(x=(edges[:-1] + edges[1:]) / 2, height=counts, width=width * 0.9,
                                    brush=pg.mkBrush(70, 130, 180, 200), pen=pg.mkPen(None))
        self.histogram.addItem(self.bars)
        self.histogram.getPlotItem().autoRange()

    def histogram_counts(self) -> list[int]:
        """The bar heights drawn (empty when none)."""
        return [int(h) for h in self.bars.opts["height"]] if self.bars is not None else []

    # ---- work in threads ------------------------------------------------------------------------------------
    def set_training(self, on: bool) -> None:
        """Whether a run is training: a fresh model is not built then (building draws from the process's
        random generator, which the run's initialisation and dropout read)."""
        self.training = on

    def _start(self, key: str, func, *args, on_result) -> bool:
        subject = self.subject()
        if subject is None or self.code is None or key in self._calls:
            return False
        cached = self._fresh[1] if self._fresh is not None and self._fresh[0] == subject else None
        if subject.loaded is None and cached is None and self.training:
            self.checkPaperLabel.setText("While training runs, check a snapshot (Prompt current weights) or "
                                         "a run's model; a fresh one is built once it ends.")
            return False
        def done(result):
            *value, model = result
            if subject.loaded is None:
                self._fresh = (subject, model)
            on_result(*value)

        def failed(message: str) -> None:
            self.tensorLabel.setText(f"<span style='color:#c0392b'>{html.escape(message)}</span>")
            if key == "check":
                self.checkPaperLabel.setText(f"Could not check: {message}")
            if key == "walk":
                self.walkthrough.show_error(message)

        self._button(key).setEnabled(False)
        self._calls[key] = self.workspace.jobs.submit(f"paper-{key}", func, subject, cached, self.workspace.prepared,
                                                      *args, on_result=done, on_error=failed,
                                                      on_end=lambda _status: self._ended(key))
        return True

    def _ended(self, key: str) -> None:
        self._calls.pop(key, None)
        self._button(key).setEnabled(self.code is not None)
        if key == "walk":
            self.walkthrough.set_busy(False)

    def _button(self, key: str) -> QPushButton:
        return {"forward": self.forwardButton, "check": self.checkPaperButton, "walk": self.walkthrough.runButton}[key]

    def busy(self) -> bool:
        return bool(self._calls)

    def run_forward(self) -> bool:
        """One traced forward pass of the model in use on the Prompt tab's text, in a worker thread."""
        if self.code is None:
            return False
        self.tensorLabel.setText("Running the forward pass…")
        return self._start("forward", _forward_job, self.workspace.prompt_text, self.code.taps(), on_result=self._traced)

    def run_walk(self) -> bool:
        """Walk the model in use through the Prompt tab's text, in a worker thread (`_walk_job`)."""
        started = self._start("walk", _walk_job, self.workspace.prompt_text, self.walkthrough.query(),
                              self.walkthrough.head(), on_result=self.walkthrough.set_walk)
        if started:
            self.walkthrough.set_busy(True)
        elif self.training and self.checkPaperLabel.text():  # why not: no fresh model is built while training
            self.walkthrough.show_error(self.checkPaperLabel.text())
        return started

    def _tab_changed(self, index: int) -> None:
        """The walkthrough's heatmaps get more of the width; the other tabs give it back."""
        total = sum(self.splitter.sizes())
        share = 0.55 if self.tabs.widget(index) is self.walkthrough else 0.4
        self.splitter.setSizes([int(total * (1 - share)), int(total * share)])

    def _traced(self, trace: Trace, what: str) -> None:
        self.trace, self.traced, self.shapes = trace, what, trace.shapes
        self._show_details()

    def run_check(self) -> bool:
        """Check the model in use against the literal reference, in a worker thread."""
        started = self._start("check", _check_job, on_result=self._checked)
        if started:
            self.checkPaperLabel.setText("checking against the paper…")
            self.checkPaperLabel.setStyleSheet("")
        return started

    def _checked(self, check) -> None:
        self.check = check
        d = check.differences
        text = f"max |ΔP| = {_exp(d.probabilities)} · max |ΔA| = {_exp(d.attention_max)}"
        if d.classes is not None:
            text += f" · max |ΔP(c|x)| = {_exp(d.classes)}"
        ok = d.worst <= TOLERANCE
        self.checkPaperLabel.setText(("✓ " if ok else "✗ ") + text + f"  ({check.seconds:.1f} s)")
        self.checkPaperLabel.setStyleSheet(f"color: {'#1e7b34' if ok else '#c0392b'};")
        self.checkPaperLabel.setToolTip(check.description + (f" Agreement within {TOLERANCE:g} is what the "
                                        "reference tests ask for." if ok else f" More than {TOLERANCE:g}: the "
                                        "fast model does not compute the paper's function."))
