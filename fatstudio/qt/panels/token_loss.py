"""The Token loss tab (``tokenLossView``): where is the model wrong? The loaded model's validation split, every
token scored once (`core.inspect.token_loss`), shown as the text coloured by the model's probability of each
token (`LossText`, drawn lazily), the worst tokens with the text before them (a click scrolls the text to one),
and the loss by class of token (first the classes the task tells apart, such as the repeat corpus's first and
second copies); against another scoring (the run's weights at another saved step, an earlier scoring of this tab,
or another run on the same validation tokens, each scored with it where it is not yet) the text shows the change
token by token. Scoring runs in a worker thread with its progress, and can be cancelled. CSV (every token) and
PNG (the text in view) export.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..widgets.focus_label import FocusLabel
from ..widgets.loss_text import LossText
from ..widgets.saving import save_with_dialog, write_picture
from ..widgets.token_view import delta_colors, probability_colors, probability_gradient_css

if TYPE_CHECKING:
    from ...core.app.jobs import Job
    from ...core.app.workspace import Workspace
    from ...core.config import RunConfig, Task
    from ...core.inspect.token_classes import ClassRow, WorstToken
    from ...core.inspect.token_loss import TokenLoss, TokenLossDiff

N_WORST = 100
DELTA_SCALE = 1.0  # nats: a change this large or larger gets the full colour
EARLIER = "scoring:"  # an against choice "scoring:LABEL": this tab's earlier scoring of the model LABEL
STEP = "step:"  # an against choice "step:N": the weights the run in focus saved at step N
KEPT_SCORINGS = 5  # earlier scorings kept to compare with
TOKEN_LOSS = "token-loss"  # the scoring's job
FAMILY_TITLES = {"kind": "by kind of token", "frequency": "by how often the token is in the training split",
                 "copy": "by copy (the rest of a second copy follows by induction)",
                 "part": "by part of the example (question > answer)", "target": "by place in the target"}


@dataclass
class Scored:
    """What a scoring brings back to the GUI thread: the scoring, its diff (or None), the lines to draw, the
    drawn tokens and their colours, the worst tokens and the class breakdown."""

    result: TokenLoss
    compared: TokenLossDiff | None
    lines: np.ndarray
    shown: list[str]
    colors: np.ndarray
    worst: list[WorstToken]
    classes: list[ClassRow]


def score_validation(loaded, against: Any = None, progress=None, step: int | None = None) -> Scored:
    """Worker: score ``loaded``'s validation split and, ``against`` a TokenLoss or a run folder (its weights of
    ``step``; None: its last checkpoint's), diff it."""
    from ...core.inspect import token_classes as tc
    from ...core.inspect.token_loss import diff, token_losses, validation_split

    share = 0.5 if isinstance(against, str) else 1.0
    split = validation_split(loaded)
    result = token_losses(loaded, split, progress=lambda f, m: progress(f * share, m) if progress else None)
    compared = None
    if against is not None:
        if isinstance(against, str):
            from ...core.runs.folder import Run

            other = Run.open(against).load_model(step=step)
            against = token_losses(other, validation_split(other),
                                   progress=lambda f, m: progress(0.5 + f / 2, f"{other.label}: {m}") if progress else None)
        compared = diff(result, against)
    delta = compared.delta if compared is not None else None
    colors = delta_colors(delta, DELTA_SCALE) if delta is not None else probability_colors(np.exp(-result.loss))
    return Scored(result, compared, tc.text_lines(result), [tc.shown(t) for t in result.tokens], colors,
                  tc.worst(result, N_WORST, delta), tc.breakdown(result, compared.against if compared else None))


def other_runs(config: RunConfig, exclude: str | None, root) -> list[tuple[str, str]]:
    """Worker: (name, folder) of the finished or stopped runs whose validation tokens are those of a run of ``config``
    (the same corpus, task, tokenizer, validation fraction and split, and the same seed where it draws the corpus
    or shuffles its pairs), newest first."""
    from ...core.data.corpora import seeded
    from ...core.runs.folder import list_runs
    from ...core.runs.tokenizer_lab import same_corpus

    d, exclude_path = config.data, Path(exclude).resolve() if exclude else None
    by_seed = seeded(d.corpus) or d.task == "seq2seq"

    def same_tokens(other: RunConfig) -> bool:
        o = other.data
        return ((o.task, o.tokenizer, o.val_fraction, o.split) == (d.task, d.tokenizer, d.val_fraction, d.split)
                and (d.tokenizer == "char" or o.vocab_size == d.vocab_size) and same_corpus(o.corpus, d.corpus)
                and (not by_seed or other.train.seed == config.train.seed))

    return [(r.name, str(r.path)) for r in list_runs(root) if r.info.status in ("finished", "stopped")
            and same_tokens(r.config) and r.path.resolve() != exclude_path]


def comparisons(config: RunConfig, run_dir: str | None, step: int, root) -> tuple[list[int], list[tuple[str, str]]]:
    """Worker: what a scoring of the weights of ``step`` of the run ``run_dir`` (None: not a run's, a snapshot) can be
    compared with without scoring anything first: the run's other saved steps (`Run.weight_steps`: its snapshots
    and checkpoint), and the other runs on the same validation tokens (`other_runs`)."""
    steps: list[int] = []
    if run_dir is not None:
        from ...core.runs.folder import Run

        try:
            steps = [s for s in Run.open(run_dir).weight_steps() if s != step]
        except ValueError:  # the run went, or its files cannot be read: its steps are no choice
            steps = []
    return steps, other_runs(config, run_dir, root)


def how_scored(task: Task, l_max: int) -> str:
    """What each token's loss is, in a sentence."""
    from ...core.inference.scoring import context_kept

    if task == "masked_lm":
        return ("Each token masked once, as validation masks (about p_mask of its window masked), and predicted from "
                f"the window of ℓ_max = {l_max} around it (Algorithm 12's loss).")
    if task == "seq2seq":
        return "Each target token, and the eos ending it, of every validation pair, given the source (Algorithm 11)."
    return (f"Each token predicted from the tokens before it, at least ⌈ℓ_max/2⌉ = {context_kept(l_max)} of them "
            "(Algorithm 13's loss); hover a token for its loss, click a worst token to find it.")


def _table(name: str, headers: list[str]) -> QTableWidget:
    t = QTableWidget(0, len(headers), objectName=name)
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().hide()
    t.verticalHeader().setDefaultSectionSize(t.fontMetrics().height() + 8)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.horizontalHeader().setStretchLastSection(True)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    return t


def _number(value: float, signed: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(f"{value:+.3f}" if signed else f"{value:.3f}")
    item.setData(Qt.ItemDataRole.UserRole, value)
    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class TokenLossPanel(QWidget):
    """The tab. ``score()`` starts a scoring of the loaded model (against the choice of ``againstCombo``),
    ``cancel()`` abandons it; ``scored`` is the last `Scored` (None: none yet)."""

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.setObjectName("tokenLossView")
        self.workspace = workspace
        self.loaded = None
        self.scored: Scored | None = None
        self.earlier: dict[str, TokenLoss] = {}  # the last scorings by model label, to compare a later one with
        self._runs: list[tuple[str, str]] = []  # (name, folder) of the runs to compare with
        self._steps: list[int] = []  # the other steps of the run in focus whose weights are saved
        self._run_dir: str | None = None  # that run's folder
        self._call: Job | None = None
        self._build()
        workspace.focus.changed.connect(self._focus_changed)
        self.set_model(workspace.loaded)

    def _build(self) -> None:
        self.scoreButton = QPushButton("Score the validation split", objectName="tokenLossScoreButton")
        self.scoreButton.setToolTip("Score every token of the loaded model's validation split once, as its training "
                                    "loss counts it, in a worker thread.")
        self.againstCombo = QComboBox(objectName="tokenLossAgainst")
        self.againstCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.againstCombo.setToolTip("Compare with: the run's weights at another of its saved steps (its evaluations' "
                                     "snapshots and its checkpoint), an earlier scoring in this tab, or another "
                                     "finished run on the same validation tokens; each is scored when you score.")
        self.cancelButton = QPushButton("Cancel", objectName="tokenLossCancelButton")
        self.progressBar = QProgressBar(objectName="tokenLossProgress")
        self.progressBar.setRange(0, 1000)
        self.progressBar.setMaximumWidth(220)
        self.csvButton = QPushButton("Export CSV…", objectName="tokenLossCsvButton")
        self.csvButton.setToolTip("Every validation token with its loss (and, in a diff, the other loss and Δ).")
        self.pngButton = QPushButton("Export PNG…", objectName="tokenLossPngButton")
        self.pngButton.setToolTip("The coloured text as it is shown, with the summary above it.")
        bar = QHBoxLayout()
        bar.addWidget(self.scoreButton)
        bar.addWidget(QLabel("against"))
        bar.addWidget(self.againstCombo)
        bar.addWidget(self.cancelButton)
        bar.addWidget(self.progressBar)
        bar.addStretch(1)
        bar.addWidget(self.csvButton)
        bar.addWidget(self.pngButton)
        self.summaryLabel = QLabel(objectName="tokenLossSummary")
        self.summaryLabel.setWordWrap(True)
        self.summaryLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.legendBar = QLabel()
        self.legendBar.setFixedSize(140, 12)
        self.legendLabel = QLabel()
        self.legendEnds = (QLabel(), QLabel())
        self.legendRow = QWidget()
        legend = QHBoxLayout(self.legendRow)
        legend.setContentsMargins(0, 0, 0, 0)
        legend.addWidget(self.legendLabel)
        legend.addWidget(self.legendEnds[0])
        legend.addWidget(self.legendBar)
        legend.addWidget(self.legendEnds[1])
        legend.addStretch(1)
        self.text = LossText()
        self.text.setObjectName("tokenLossText")
        self.worstTable = _table("tokenLossWorst", ["loss", "token", "text before it"])
        self.worstTable.setToolTip("The tokens the model found hardest (in a diff: that changed most). Click one to "
                                   "see it in the text.")
        self.classTable = _table("tokenLossClasses", ["class", "tokens", "mean loss"])
        self.classTable.setToolTip("The mean loss per token by the classes the task tells apart (the repeat "
                                   "corpus's copies, a synthetic task's question and answer, a seq2seq target's "
                                   "places), by kind of token, and by how often the token occurs in the training "
                                   "split (quarters of its tokens, most frequent first).")
        side = QSplitter(Qt.Orientation.Vertical)
        side.addWidget(self.worstTable)
        side.addWidget(self.classTable)
        side.setSizes([400, 260])
        split = QSplitter(Qt.Orientation.Horizontal, objectName="tokenLossSplitter")
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.legendRow)
        ll.addWidget(self.text, 1)
        split.addWidget(left)
        split.addWidget(side)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([560, 480])
        lay = QVBoxLayout(self)
        self.focusLabel = FocusLabel(self.workspace.focus, "tokenLossFocusLabel")
        lay.addWidget(self.focusLabel)
        lay.addLayout(bar)
        lay.addWidget(self.summaryLabel)
        lay.addWidget(split, 1)
        self.scoreButton.clicked.connect(self.score)
        self.cancelButton.clicked.connect(self.cancel)
        self.csvButton.clicked.connect(lambda: self._export_dialog("CSV table (*.csv)", ".csv", self.export_csv))
        self.pngButton.clicked.connect(lambda: self._export_dialog("PNG image (*.png)", ".png", self.export_png))
        self.worstTable.cellClicked.connect(self._worst_clicked)
        self._set_legend(False)
        self._update_buttons()

    # ---- the model and the choices ---------------------------------------------------------------------
    def _focus_changed(self, focus) -> None:
        if focus.loaded is not self.loaded:
            self.set_model(focus.loaded)
        elif focus.loaded is None:
            self._say_why_no_model()

    def set_model(self, loaded) -> None:
        """Score ``loaded`` (a LoadedModel, None: none) from now on; lists the runs it may be compared with."""
        self.cancel()
        self.loaded = loaded
        task = loaded.config.data.task if loaded is not None else None
        if loaded is None:
            self._say_why_no_model()
        elif task not in ("next_token", "masked_lm", "seq2seq"):
            self._say(f"A {task} model gives one probability for a whole text, not one per token: there is no loss "
                      "per token to show.")
        else:
            self._say(f"{loaded.label}: press “Score the validation split” to colour every validation token by the "
                      "model's probability of it.")
            run_dir = self.workspace.loaded_dir
            self.workspace.jobs.submit("token-loss-runs", comparisons, loaded.config, run_dir, loaded.step,
                                       self.workspace.runs_root,
                                       on_result=lambda found: self._set_choices(run_dir, *found))
        self._set_choices(None, [], [])
        self._update_buttons()

    def _set_choices(self, run_dir: str | None, steps: list[int], runs: list) -> None:
        """The against choices: the run's other saved steps, earlier scorings, the other runs on its tokens."""
        self._run_dir, self._steps = run_dir, list(steps)
        self._set_runs(runs)

    def _step_label(self, step: int) -> str:
        """The label a scoring of the run in focus at ``step`` has (`Run.load_model`'s)."""
        return f"{Path(self._run_dir or '').name} · step {step}"

    def _set_runs(self, runs: list) -> None:
        self._runs = list(runs)
        keep = self.againstCombo.currentData()
        self.againstCombo.clear()
        self.againstCombo.addItem("nothing (the losses)", None)
        here = self.loaded.step if self.loaded is not None else 0
        for step in reversed(self._steps):  # the run's own saved weights, the latest first
            scored = " (scored)" if self._step_label(step) in self.earlier else ""
            when = "earlier" if step < here else "later"
            self.againstCombo.addItem(f"this run at step {step:,} ({when}){scored}", f"{STEP}{step}")
        for label in reversed(self.earlier):
            if (self.loaded is None or label != self.loaded.label) and \
                    label not in {self._step_label(s) for s in self._steps}:
                self.againstCombo.addItem(f"an earlier scoring: {label}", EARLIER + label)
        for name, path in runs:
            self.againstCombo.addItem(f"{name} (another run on these tokens)", path)
        i = self.againstCombo.findData(keep)
        self.againstCombo.setCurrentIndex(max(0, i))

    def choices(self) -> list[str | None]:
        """The data of every against choice (None: nothing; ``step:N``, ``scoring:LABEL`` or a run folder)."""
        return [self.againstCombo.itemData(i) for i in range(self.againstCombo.count())]

    def _scorable(self) -> bool:
        return self.loaded is not None and self.loaded.config.data.task in ("next_token", "masked_lm", "seq2seq")

    def _update_buttons(self) -> None:
        busy = self.busy
        self.scoreButton.setEnabled(self._scorable() and not busy)
        self.cancelButton.setVisible(busy)
        self.progressBar.setVisible(busy)
        for b in (self.csvButton, self.pngButton):
            b.setEnabled(self.scored is not None and not busy)

    def _say_why_no_model(self) -> None:
        focus = self.workspace.focus
        if focus.training:
            self._say(f"{focus.name} is training: “Prompt current weights” on the Training tab takes its weights now, "
                      "to score them here; its final weights come when it ends.")
        else:
            self._say("Open a run (or take a snapshot while training) to see where its model is wrong on the "
                      "validation text.")

    def _say(self, text: str, error: bool = False) -> None:
        self.summaryLabel.setText(text)
        self.summaryLabel.setStyleSheet("color: #b00020;" if error else "")

    # ---- scoring ----------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._call is not None and self._call.running

    def score(self) -> bool:
        """Score the loaded model's validation split in a worker (against the chosen scoring or run)."""
        loaded = self.loaded
        if self.busy or loaded is None or not self._scorable():
            return False
        choice = self.againstCombo.currentData()
        against: Any = choice
        step: int | None = None
        if choice and choice.startswith(EARLIER):
            against = self.earlier[choice[len(EARLIER):]]
        elif choice and choice.startswith(STEP):  # the run's weights of that step, scored already or now
            step = int(choice[len(STEP):])
            against = self.earlier.get(self._step_label(step), self._run_dir)
        self.progressBar.setValue(0)
        self._call = self.workspace.jobs.submit(TOKEN_LOSS, score_validation, loaded, against, step=step, progress=True,
                                                on_result=self._show, on_error=self._failed,
                                                on_progress=self._progress, on_end=self._done)
        self._say(f"Scoring the validation split of {loaded.label}…")
        self._update_buttons()
        return True

    def cancel(self) -> None:
        """Abandon a scoring in flight (it stops at its next forward pass; nothing arrives)."""
        if self.busy:
            self.workspace.jobs.cancel(TOKEN_LOSS)
            self._call = None
            self._say("Scoring cancelled.")
            self._update_buttons()

    def _progress(self, fraction: float, message: str) -> None:
        self.progressBar.setValue(round(fraction * 1000))
        self.progressBar.setFormat(message)

    def _done(self, _status) -> None:
        self._call = None
        self._update_buttons()

    def _failed(self, message: str) -> None:
        self._say(f"Could not score the validation split: {message}", error=True)

    def _show(self, scored: Scored) -> None:
        self.scored = scored
        r, d = scored.result, scored.compared
        self.text.set_text(scored.shown, scored.colors, scored.lines, self._tooltip)
        self._fill_worst(scored.worst, d is not None)
        self._fill_classes(scored.classes, d is not None)
        self._set_legend(d is not None)
        uniform = math.log(len(r.train_counts)) if r.train_counts is not None else float("nan")
        text = (f"<b>{r.n_tokens:,} validation tokens</b> of {r.label}: mean loss <b>{r.mean:.4f}</b> nats per token "
                f"({r.mean / math.log(2):.3f} bits); a uniform guess costs ln N_V = {uniform:.2f}.")
        text += f"<br>{how_scored(r.task, self.loaded.model.config.l_max if self.loaded is not None else 0)}"
        if d is not None:
            text += (f"<br>Against {d.against.label}: {d.against.mean:.4f}, so Δ = <b>{d.delta_mean:+.4f}</b> nats per "
                     f"token (blue: better now, orange: worse).")
        self._say(text)
        for kept in ([d.against] if d is not None else []) + [r]:  # both: a later scoring compares with either at once
            self.earlier.pop(kept.label, None)
            self.earlier[kept.label] = kept
        while len(self.earlier) > KEPT_SCORINGS:
            self.earlier.pop(next(iter(self.earlier)))
        self._set_runs(self._runs)

    # ---- the views --------------------------------------------------------------------------------------
    def _set_legend(self, delta: bool) -> None:
        if delta:
            self.legendLabel.setText("change in loss Δ:")
            self.legendEnds[0].setText(f"−{DELTA_SCALE:g}")
            self.legendEnds[1].setText(f"+{DELTA_SCALE:g} nats")
            stops = "stop:0 rgb(160, 206, 232), stop:0.5 rgb(255, 255, 255), stop:1 rgb(244, 165, 130)"
            css = f"qlineargradient(x1:0, y1:0, x2:1, y2:0, {stops})"
        else:
            self.legendLabel.setText("the model's probability of each token, p = e^(−loss):")
            self.legendEnds[0].setText("0")
            self.legendEnds[1].setText("1")
            css = probability_gradient_css()
        self.legendBar.setStyleSheet(f"background: {css}; border: 1px solid #999;")

    def _tooltip(self, i: int) -> str:
        s = self.scored
        if s is None or i >= s.result.n_tokens:
            return ""
        loss = float(s.result.loss[i])
        tip = f"token {i:,}: {s.shown[i]!r} · loss {loss:.3f} nats (p = {math.exp(-loss):.3f})"
        if s.compared is not None:
            other = float(s.compared.against.loss[i])
            tip += f"\nagainst {other:.3f} nats · Δ = {loss - other:+.3f}"
        return tip

    def _fill_worst(self, worst: list[WorstToken], delta: bool) -> None:
        from ...core.inspect.token_classes import shown

        t = self.worstTable
        t.setHorizontalHeaderLabels(["Δ loss" if delta else "loss", "token", "text before it"])
        t.setRowCount(len(worst))
        for row, w in enumerate(worst):
            value = _number(w.value, delta)
            value.setData(Qt.ItemDataRole.UserRole + 1, w.position)
            t.setItem(row, 0, value)
            t.setItem(row, 1, QTableWidgetItem(shown(w.token).replace(" ", "␣")))
            context = QTableWidgetItem(shown(w.context))
            context.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            t.setItem(row, 2, context)

    def _fill_classes(self, rows: list[ClassRow], delta: bool) -> None:
        t = self.classTable
        t.clearSpans()
        t.setColumnCount(4 if delta else 3)
        t.setHorizontalHeaderLabels(["class", "tokens", "mean loss", *(["mean Δ"] if delta else [])])
        t.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        t.horizontalHeader().setStretchLastSection(False)
        families = list(dict.fromkeys(c.family for c in rows))
        t.setRowCount(len(rows) + len(families))
        row = 0
        for family in families:
            heading = QTableWidgetItem(FAMILY_TITLES.get(family, family))
            font = heading.font()
            font.setBold(True)
            heading.setFont(font)
            t.setItem(row, 0, heading)
            t.setSpan(row, 0, 1, t.columnCount())
            row += 1
            for c in (c for c in rows if c.family == family):
                self._class_row(row, c, delta)
                row += 1

    def _class_row(self, row: int, c: ClassRow, delta: bool) -> None:
        t = self.classTable
        t.setItem(row, 0, QTableWidgetItem(c.name))
        n = QTableWidgetItem(f"{c.count:,}")
        n.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        t.setItem(row, 1, n)
        t.setItem(row, 2, _number(c.mean_loss))
        if delta and c.delta is not None:
            t.setItem(row, 3, _number(c.delta, True))

    def worst_position(self, row: int) -> int:
        item = self.worstTable.item(row, 0)
        return int(item.data(Qt.ItemDataRole.UserRole + 1)) if item is not None else 0

    def _worst_clicked(self, row: int, _column: int) -> None:
        self.text.scroll_to(self.worst_position(row))

    # ---- export -----------------------------------------------------------------------------------------
    def export_csv(self, path) -> Path:
        """Every token with its loss (`TokenLoss.csv`; a diff's `TokenLossDiff.csv`)."""
        from ...core.files import atomic_write

        s = self._exportable()
        path = Path(path)
        atomic_write(path, (s.compared or s.result).csv())
        return path

    def export_png(self, path) -> Path:
        """The summary, the legend and the coloured text in view, as one picture."""
        from PySide6.QtGui import QColor, QPainter, QPixmap

        self._exportable()
        parts = [self.summaryLabel.grab(), self.legendRow.grab(self.legendRow.childrenRect()), self.text.viewport().grab()]
        image = QPixmap(max(p.width() for p in parts), sum(p.height() for p in parts))
        image.fill(QColor("white"))
        painter = QPainter(image)
        y = 0
        for p in parts:
            painter.drawPixmap(0, y, p)
            y += p.height()
        painter.end()
        return write_picture(image, path)

    def _exportable(self) -> Scored:
        if self.scored is None:
            raise ValueError("there is nothing to export yet: score the validation split first.")
        return self.scored

    def _export_dialog(self, filt: str, suffix: str, fn) -> None:
        if self.scored is None:
            return
        name = f"token-loss-{self.scored.result.label.split(' ·')[0] or 'model'}"
        save_with_dialog(self, name, filt, suffix, fn, self.summaryLabel, kept=f"{self.summaryLabel.text()}<br>")


__all__ = ["TokenLossPanel", "Scored", "score_validation", "other_runs", "comparisons"]
