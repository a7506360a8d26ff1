"""The Attention panel's logit lens (``lensView``), under the probe slider: for the text whose attention is
shown, the top token after every layer at every position (`widgets.lens_grid`, the core's `saved_lens`) and, for
a chosen position (click a column; the last at first), its target's logit split into the embedding, each head,
each MLP and the biases (`widgets.attribution_bars`, `lens.attribute`).

- a training probe's step: the lens and attribution saved in that step's probe file (`probes.load_probe_lens`,
  read on the GUI thread like the maps: a few kilobytes, and kept, so scrubbing back and forth reads each step
  once), so the slider scrubs the lens over training; a run whose files have none says so;
- "Your text": measured from the loaded model in a worker (`probe_lens.measure`, its last `TEXT_ATTRIBUTED`
  positions attributed), once per text;
- a model whose output cannot be split (`lens.check_attributable`) shows why instead of the bars;
- Export PNG (the lens and the bars as shown) and CSV (`export_csv`: the grid, then the chosen position's parts).
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ....core.files import atomic_write, csv_text
from ....core.inference.prompting import display_token
from ....core.inspect.saved_lens import SavedLens
from ....core.threads import lower_priority
from ...widgets.attribution_bars import AttributionBars
from ...widgets.lens_grid import LensGrid, RowLabels
from ...widgets.saving import save_with_dialog, write_picture

if TYPE_CHECKING:
    from ....core.app.jobs import Job
    from ....core.app.workspace import Workspace

NO_LENS = ("No lens saved for this run: its probe files were written before the logit lens was saved with them "
           "(or the model is a classifier, whose output is its classes). Train it again to watch the lens form.")


TEXT_ATTRIBUTED = 64  # the user's text's attributed positions, the last ones (one forward pass each, in a worker)
PROBES_KEPT = 64  # the probe steps whose lens is kept once read (the least recently read go first)


def _measure(key: object, model, tokenizer, ids: list[int], context_ids: list[int] | None) -> tuple[object, SavedLens]:
    """In a worker: the lens of a text, its last `TEXT_ATTRIBUTED` positions attributed (`probe_lens.measure`), on the
    loaded model itself: a hook acts only in the thread that attached it (`model.hooks`), so the forward passes other
    workers run on the model meanwhile (head scores, generation) are neither seen nor changed. (A copy of the model
    took 0.5 s and 500 MB for a GPT-2-sized one.) At the lowest CPU priority: a generation started meanwhile goes first."""
    from fatstudio.core.inspect.probe_lens import measure

    lower_priority()
    return key, measure(model, tokenizer, ids, context_ids, attributed=TEXT_ATTRIBUTED)


class LensView(QWidget):
    """The lens of the probe step (`show_probe`) or of the user's text (`show_text`, measured with the model given
    to `set_model`). With no lens it folds to its line of words; ``heightWanted(px)``: folding or unfolding asks
    for this height."""

    heightWanted = Signal(int)
    BARS_MAX_W = 470  # px: the attribution chart's most width

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent, objectName="lensView")
        self.workspace = workspace
        self.lens: SavedLens | None = None  # the lens shown
        self.position: int | None = None  # the column whose attribution is shown
        self.loaded = None
        self.what = ""  # "step N" or "your text"
        self._text_key: object = None  # the text maps whose lens is shown or measured
        self._measured: dict[int, tuple[object, SavedLens]] = {}  # id(maps) → (maps, lens of "Your text"), the last few
        self._read: dict[tuple[str, int], SavedLens | None] = {}  # (probe file, step) → its lens (None: it has none)
        self._call: Job | None = None
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.captionLabel = QLabel(objectName="lensCaption")
        self.captionLabel.setWordWrap(True)
        bar.addWidget(self.captionLabel, 1)
        self.exportPngButton = QPushButton("PNG…", objectName="lensExportPngButton")  # short: the caption keeps the width
        self.exportCsvButton = QPushButton("CSV…", objectName="lensExportCsvButton")
        self.exportPngButton.setToolTip("Save the lens and the attribution as shown, as a PNG picture.")
        self.exportCsvButton.setToolTip("Save the lens (one row per layer: each position's top token and its "
                                        "probability) and the chosen position's parts as CSV.")
        for b in (self.exportPngButton, self.exportCsvButton):
            bar.addWidget(b)
        outer.addLayout(bar)
        self.messageLabel = QLabel(objectName="lensMessage")
        self.messageLabel.setWordWrap(True)
        outer.addWidget(self.messageLabel)
        self.body = QWidget()
        row = QHBoxLayout(self.body)
        row.setContentsMargins(0, 0, 0, 0)
        self.grid = LensGrid()
        self.gridScroll = QScrollArea()
        self.gridScroll.setWidget(self.grid)
        self.gridScroll.setWidgetResizable(True)
        self.gridScroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.gridScroll.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.bars = AttributionBars()
        self.bars.setMaximumWidth(self.BARS_MAX_W)
        self.rowLabels = RowLabels(self.grid)
        row.addWidget(self.rowLabels, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.gridScroll, 1, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.bars, 1)  # the lens and the chart share a narrow column
        outer.addWidget(self.body, 1)
        self.grid.columnClicked.connect(self.select_position)
        self.exportPngButton.clicked.connect(lambda: self._export_dialog("PNG image (*.png)", ".png", self.export_png))
        self.exportCsvButton.clicked.connect(lambda: self._export_dialog("CSV table (*.csv)", ".csv", self.export_csv))
        self.clear()

    # ---- what is shown ----
    def set_model(self, loaded) -> None:
        """The LoadedModel that reads the user's text (None: none)."""
        self.loaded = loaded
        self._measured.clear()

    def clear(self, message: str = "") -> None:
        self.lens, self.position, self._text_key = None, None, None
        self.grid.set_lens(None)
        self.captionLabel.setText("<b>Logit lens</b>" + (f": {html.escape(message)}" if message else ""))
        self._say("")
        self._fold(True)
        self._enable_export()

    def forget_probes(self) -> None:
        """Another run's probe files: the lenses kept are read again when shown."""
        self._read.clear()

    def show_probe(self, path: str | Path, step: int) -> None:
        """The lens saved with the probe maps of ``step`` (in ``path``), read once and kept (`PROBES_KEPT`)."""
        from ....core.inspect.probes import load_probe_lens

        self._text_key = None
        key = (str(path), step)
        if key in self._read:
            lens = self._read.pop(key)  # put back last: the most recently read
        else:
            try:
                lens = load_probe_lens(path)
            except ValueError as e:  # not kept: a file being fixed or written is read again
                self.clear(f"Cannot show the lens of step {step:,}: {e}")
                return
            if len(self._read) >= PROBES_KEPT:
                del self._read[next(iter(self._read))]
        self._read[key] = lens
        if lens is None:
            self.clear(NO_LENS)
            return
        self._show(lens, f"training probe, step {step:,}")

    def show_text(self, maps) -> None:
        """The lens of the text of ``maps`` (an `AttentionMaps` of the loaded model's forward pass, with its ids),
        measured in a worker the first time."""
        if maps is None or getattr(maps, "ids", None) is None:
            self.clear("No lens for this text: its token ids are not known.")
            return
        if self.loaded is None:
            self.clear("Load the run's model to read the lens of your text.")
            return
        if getattr(self.loaded.config.data, "task", "") == "classification":
            self.clear("No lens for a classifier: its output is a class, not a token.")
            return
        self._text_key = maps
        known = self._measured.get(id(maps))
        if known is not None and known[0] is maps:
            self._show(known[1], "your text")
            return
        self.clear("Reading the lens of your text…")
        self._text_key = maps
        loaded = self.loaded
        self._call = self.workspace.jobs.submit(
            "lens", _measure, maps, loaded.model, loaded.tokenizer, list(maps.ids),
            None if maps.context_ids is None else list(maps.context_ids),
            on_result=self._text_measured, on_error=self._text_failed)

    def pending(self) -> bool:
        return self._call is not None and self._call.running

    def _text_measured(self, result: tuple[object, SavedLens]) -> None:
        key, lens = result
        if len(self._measured) > 8:
            self._measured.clear()
        self._measured[id(key)] = (key, lens)
        if key is self._text_key:
            self._show(lens, "your text")

    def _text_failed(self, message: str) -> None:
        self.clear(f"Cannot read the lens of your text: {message}")

    def _show(self, lens: SavedLens, what: str) -> None:
        self.lens, self.what = lens, what
        T = len(lens.tokens)
        if self.position is None or self.position >= T:
            self.position = T - 1  # the last position: its attribution is always saved
        guess = "the next token" if lens.predicts_next else "the (masked) token there"
        src = " (given its source)" if lens.source_tokens else ""
        self.captionLabel.setText(f"<b>Logit lens</b> · {what}{src}: each layer's top guess for {guess}. Click a "
                                  "column for its attribution.")
        self.captionLabel.setToolTip(
            "The residual stream after each layer read through what follows the last layer (the final norm and W_u): "
            "row 0 the embedding, the last row the model's own output. A cell's colour is its guess's probability; "
            "bold: the guess is right. The attribution splits the chosen column's logit by part, the final norm's "
            "scale frozen. "
            + ("Column t guesses token t+1." if lens.predicts_next else "Column t guesses the token at t.")
            + (f" The encoder read {len(lens.source_tokens)} source tokens." if lens.source_tokens else ""))
        self._say("")
        self.grid.set_lens(lens, self.position)
        self._fold(False)
        self._scroll_to(self.position)
        self._draw_bars()
        self._enable_export()

    def folded(self) -> bool:
        return not self.body.isVisibleTo(self)

    def _fold(self, fold: bool) -> None:
        """Show only the caption and the message (no lens), or the grid and the bars too."""
        was, had = self.folded(), self.maximumHeight()
        self.body.setVisible(not fold)
        for b in (self.exportPngButton, self.exportCsvButton):
            b.setVisible(not fold)
        if not fold:
            grid = self.grid.sizeHint().height() + self.gridScroll.horizontalScrollBar().sizeHint().height() + 4
            self.gridScroll.setFixedHeight(grid)
            self.rowLabels.setFixedHeight(grid)
            self.rowLabels.update()
        want = self._want()
        self.setMaximumHeight(want if fold else want + 80)
        if fold != was or had != self.maximumHeight():
            self.heightWanted.emit(want)

    def _want(self) -> int:
        """The height that shows the caption's lines at this width and, unfolded, the grid and the chart whole."""
        fold = self.folded()
        buttons = sum(b.sizeHint().width() for b in (self.exportPngButton, self.exportCsvButton)) + 20
        caption = self.captionLabel.heightForWidth(max(200, self.width() - (0 if fold else buttons)))
        if fold:  # one line of words (two when long)
            return caption + 4
        line = max(self.exportCsvButton.sizeHint().height(), caption)
        return line + max(self.gridScroll.height(), self.bars.minimumSizeHint().height()) + 8

    def _ask_again(self) -> None:
        """Ask for another height when the caption's or the chart's title's lines changed (another width, title)."""
        want = self._want()
        if self.maximumHeight() != (want if self.folded() else want + 80):
            self.setMaximumHeight(want if self.folded() else want + 80)
            self.heightWanted.emit(want)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self._ask_again()

    def select_position(self, t: int) -> None:
        """Show the attribution of position ``t`` (0-based)."""
        if self.lens is None or not 0 <= t < len(self.lens.tokens):
            return
        self.position = t
        self.grid.set_lens(self.lens, t)
        self._scroll_to(t)
        self._draw_bars()

    def _scroll_to(self, t: int) -> None:
        r = self.grid.cell_rect(0, t)
        self.gridScroll.ensureVisible(int(r.center().x()), int(r.center().y()), int(r.width()), 0)

    def _draw_bars(self) -> None:
        lens, t = self.lens, self.position
        assert lens is not None and t is not None
        a = lens.attribution
        if a is None:
            self.bars.set_message("No direct logit attribution: " + (lens.refused or "none was saved."))
            return
        i = a.row(t)
        if i is None:
            first = int(a.positions[0]) + 1
            self.bars.set_message(f"No attribution at position {t + 1}: only the last {len(a.positions)} positions "
                                  f"({first}-{len(lens.tokens)}) are attributed (one forward pass each); click one.")
            return
        whose = "the next token" if a.observed[i] else "the model's top token"
        self.bars.set_parts(f"Position {t + 1} “{display_token(lens.tokens[t])}”: logit of “"
                            f"{display_token(a.target_tokens[i])}” ({whose}) = {a.logits[i]:.2f}, by part",
                            a.names, a.parts[i].tolist())
        self._ask_again()  # the chart's title may take another line

    def _say(self, text: str) -> None:
        self.messageLabel.setText(text)
        self.messageLabel.setVisible(bool(text))

    def _enable_export(self) -> None:
        for b in (self.exportPngButton, self.exportCsvButton):
            b.setEnabled(self.lens is not None)

    # ---- export ----
    def csv_rows(self) -> list[list[str]]:
        """The grid (`SavedLens.csv_rows`), then, after an empty row, the chosen position's target and parts."""
        if self.lens is None:
            raise ValueError("there is no logit lens to export yet.")
        rows = self.lens.csv_rows()
        a, t = self.lens.attribution, self.position
        i = a.row(t) if a is not None and t is not None else None
        if a is not None and t is not None and i is not None:
            rows += [[], ["position", str(t + 1), "target", a.target_tokens[i], "logit", repr(float(a.logits[i]))],
                     ["part", "contribution"], *([n, repr(float(v))] for n, v in zip(a.names, a.parts[i]))]
        return rows

    def export_csv(self, path) -> Path:
        atomic_write(Path(path), csv_text(self.csv_rows()))
        return Path(path)

    def export_png(self, path) -> Path:
        if self.lens is None:
            raise ValueError("there is no logit lens to export yet.")
        return write_picture(self.body.grab(), path)

    def _export_dialog(self, filt: str, suffix: str, fn) -> None:
        if self.lens is None:
            return
        name = "lens-" + self.what.replace("training probe, ", "").replace(",", "").replace(" ", "-")
        save_with_dialog(self, name, filt, suffix, fn, self.messageLabel)
