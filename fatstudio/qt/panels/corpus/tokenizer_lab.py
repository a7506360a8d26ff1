"""The tokenizer lab (``tokenizerLab``): char, word and byte-level BPE tokenizers side by side on the loaded
corpus, and the finished runs on it in bits per character. A dialog opened from the Corpus tab ("Compare
tokenizers…"); the measuring is the core's (`core.runs.tokenizer_lab`), run in a worker thread with progress.
Editing the sentence re-tokenizes it at once with the tokenizers already trained."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
)

from fatstudio.core.inference.prompting import display_token
from fatstudio.core.runs.tokenizer_lab import (
    DEFAULT_SPECS,
    LabResult,
    RunScore,
    Spec,
    compare_tokenizers,
    finished_runs_on,
    parse_specs,
    spec_label,
    tokenize_sentence,
)
from fatstudio.qt.widgets.curves import OVERLAY_COLORS, TRAIN_COLOR, VAL_COLOR, new_plot
from fatstudio.qt.widgets.forms import read_only_table, set_header_tip, table_item
from fatstudio.qt.widgets.token_view import TokenView

if TYPE_CHECKING:
    from fatstudio.core.app.jobs import Job, Jobs
    from fatstudio.core.config import Task
    from fatstudio.core.data.corpora import Corpus

LAB_COLUMNS = ("tokenizer", "N_V", "tokens / char", "unknown", "median", "p90", "max", "train (s)")
RUN_COLUMNS = ("run", "tokenizer", "steps", "val loss (nats/token)", "tokens / char", "bits / char")
COLORS = (TRAIN_COLOR, VAL_COLOR, *OVERLAY_COLORS)
_TOKEN_COLORS = (QColor("#cfe3fa"), QColor("#fbe3b4"))
_UNKNOWN_COLOR = QColor("#f4a582")


def _lab_and_runs(corpus, specs, val_fraction, sentence, spec, task, seed, runs_root, progress):
    """Worker: the comparison, then the runs on the corpus (``progress`` 0–0.9 and 0.9–1)."""
    lab = compare_tokenizers(corpus, specs, val_fraction, sentence, progress=lambda f, m: progress(0.9 * f, m))
    runs = finished_runs_on(spec, runs_root, task=task, loaded=corpus, seed=seed,
                            progress=lambda f, m: progress(0.9 + 0.1 * f, m))
    return lab, runs


TOKENIZER_LAB = "tokenizer-lab"  # the comparison's job


class TokenizerLab(QDialog):
    """The tokenizers ``specs`` compared on ``corpus`` (loaded from ``spec`` for ``task`` with ``seed``),
    measured on its last ``val_fraction``; the finished runs under ``runs_root`` on the same corpus and task.
    The comparison starts at once; ``result`` and ``runs`` hold the latest."""

    def __init__(self, jobs: Jobs, corpus: Corpus, spec: str, task: Task = "next_token", seed: int = 0,
                 val_fraction: float = 0.1, runs_root: str | Path | None = None, specs: Sequence[Spec] = DEFAULT_SPECS,
                 parent=None):
        super().__init__(parent)
        self.jobs = jobs
        self.setObjectName("tokenizerLab")
        self.setWindowTitle(f"Tokenizer lab – {corpus.name}")
        self.corpus, self.spec, self.task, self.seed = corpus, spec, task, seed
        self.val_fraction, self.runs_root = val_fraction, runs_root
        self.lab_result: LabResult | None = None  # (not `result`: QDialog.result() is the dialog's code)
        self.runs: list[RunScore] = []
        self.sentenceViews: list[TokenView] = []
        self._sentenceLabels: list[QLabel] = []
        self._call: Job | None = None

        outer = QVBoxLayout(self)
        outer.addLayout(self._build_controls(specs))
        self.progressBar = QProgressBar(objectName="labProgress")
        self.progressBar.setRange(0, 1000)
        outer.addWidget(self.progressBar)
        self.errorLabel = QLabel(objectName="labErrorLabel")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.setStyleSheet("color: #b00020; font-weight: bold;")
        self.errorLabel.hide()
        outer.addWidget(self.errorLabel)
        self.summaryLabel = QLabel(objectName="labSummaryLabel")
        self.summaryLabel.setWordWrap(True)
        outer.addWidget(self.summaryLabel)
        self.notesLabel = QLabel(objectName="labNotesLabel")  # what the corpus lacks: words, lines
        self.notesLabel.setWordWrap(True)
        self.notesLabel.setStyleSheet("color: #8a5300;")
        self.notesLabel.hide()
        outer.addWidget(self.notesLabel)
        self.table = read_only_table("labTable", LAB_COLUMNS)
        for col, tip in ((2, "Tokens per character of the validation split: lower packs more text into ℓ_max."),
                         (3, "Unknown tokens of the validation split: <unk> for words, characters a char "
                             "tokenizer has no token for."),
                         (4, "Tokens per line of the validation split (each line on its own): median, 90th "
                             "percentile, longest.")):
            set_header_tip(self.table, col, tip)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        middle = QSplitter(Qt.Orientation.Horizontal)
        middle.addWidget(self._build_histogram())
        middle.addWidget(self._build_sentence())
        middle.setSizes([450, 650])
        splitter.addWidget(middle)
        splitter.addWidget(self._build_runs())
        splitter.setSizes([220, 300, 200])
        outer.addWidget(splitter, 1)
        self.resize(1150, 850)
        self.compare()

    # -- building --------------------------------------------------------------------------------------------
    def _build_controls(self, specs: Sequence[Spec]) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(QLabel("Tokenizers:"))
        self.specsEdit = QLineEdit(", ".join(map(spec_label, specs)), objectName="labSpecsEdit")
        self.specsEdit.setToolTip("The tokenizers to compare, separated by commas: char, word N, bpe N (N: the most "
                                  "tokens it may have; BPE needs at least 260).")
        self.specsEdit.returnPressed.connect(self.compare)
        row.addWidget(self.specsEdit, 1)
        self.compareButton = QPushButton("Compare", objectName="labCompareButton")
        self.compareButton.setToolTip("Train each tokenizer on the training split and measure it on the validation split.")
        self.compareButton.clicked.connect(self.compare)
        row.addWidget(self.compareButton)
        return row

    def _build_histogram(self) -> pg.PlotWidget:
        self.histogram = new_plot("Sequence lengths on the validation split", "labHistogram", "lines")
        self.histogram.getPlotItem().setLabel("bottom", "tokens per line")
        self.histogram.addLegend(offset=(-10, 10))
        self.histogram.setMinimumHeight(200)
        return self.histogram

    def _build_sentence(self) -> QGroupBox:
        box = QGroupBox("One sentence, as each tokenizes it (unknown tokens in orange)")
        layout = QVBoxLayout(box)
        self.sentenceEdit = QLineEdit(objectName="labSentenceEdit")
        self.sentenceEdit.setPlaceholderText("a sentence to tokenize")
        self.sentenceEdit.textChanged.connect(self._show_sentences)
        layout.addWidget(self.sentenceEdit)
        self.sentenceGrid = QGridLayout()
        layout.addLayout(self.sentenceGrid)
        layout.addStretch(1)
        return box

    def _build_runs(self) -> QGroupBox:
        box = QGroupBox("Finished runs on this corpus")
        layout = QVBoxLayout(box)
        self.runsNote = QLabel(objectName="labRunsNote")
        self.runsNote.setWordWrap(True)
        layout.addWidget(self.runsNote)
        self.runsTable = read_only_table("labRunsTable", RUN_COLUMNS)
        set_header_tip(self.runsTable, 5,
            "The best validation loss / ln 2 × the run's tokens per character of its validation split: "
            "comparable across tokenizers, lower is better.")
        layout.addWidget(self.runsTable)
        return box

    # -- the worker ----------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._call is not None and self._call.running

    def compare(self) -> None:
        """Train and measure the tokenizers of ``specsEdit`` in a worker thread."""
        try:
            specs = parse_specs(self.specsEdit.text())
        except ValueError as e:
            self._set_error(str(e))
            return
        self._set_error(None)
        self.compareButton.setEnabled(False)
        self.progressBar.setValue(0)
        self.progressBar.show()
        sentence = self.sentenceEdit.text() or None
        self._call = self.jobs.submit(TOKENIZER_LAB, _lab_and_runs, self.corpus, specs, self.val_fraction, sentence,
                                      self.spec, self.task, self.seed, self.runs_root, progress=True,
                                      on_progress=self._progress, on_result=self._done,
                                      on_error=lambda message: self._done(None, message))

    def _progress(self, fraction: float, message: str) -> None:
        self.progressBar.setValue(int(1000 * max(0.0, min(1.0, fraction))))
        self.progressBar.setFormat(f"{message} – %p%" if message else "%p%")

    def _done(self, value, error: str | None = None) -> None:
        self._call = None
        self.compareButton.setEnabled(True)
        self.progressBar.hide()
        if error is not None:
            self._set_error(error)
            return
        self.lab_result, self.runs = value
        self._show(self.lab_result)
        self._show_runs(self.runs)

    def done(self, r: int) -> None:
        self.jobs.cancel(TOKENIZER_LAB)  # its result, if any, has nowhere to go
        self._call = None
        super().done(r)

    def _set_error(self, message: str | None) -> None:
        self.errorLabel.setText(message or "")
        self.errorLabel.setVisible(bool(message))

    # -- showing -------------------------------------------------------------------------------------------------
    def _show(self, lab: LabResult) -> None:
        sampled = " (an even sample)" if lab.rows and lab.rows[0].chars < lab.val_chars else ""
        self.summaryLabel.setText(
            f"Trained on the first {1 - lab.val_fraction:.0%} of {lab.corpus} ({lab.train_chars:,} characters), "
            f"measured on the last {lab.val_fraction:.0%} ({lab.val_chars:,} characters{sampled}), text the "
            f"tokenizers never saw." + (f" Sequence lengths are tokens per {lab.unit}." if lab.rows[0].lengths.size
                                        else ""))
        self.notesLabel.setText("\n".join(lab.notes))
        self.notesLabel.setVisible(bool(lab.notes))
        self.table.setRowCount(len(lab.rows))
        for r, row in enumerate(lab.rows):
            q = row.quantiles
            cells = [table_item(row.label, row.note, align_right=False), table_item(f"{row.vocab_size:,}"),
                     table_item("–", row.note) if row.note else
                     table_item(f"{row.tokens_per_char:.3f}", f"{row.chars_per_token:.2f} characters per token"),
                     table_item("–", row.note) if row.note else
                     table_item(f"{row.unknown_rate:.2%}", f"{row.unknown:,} of {row.tokens:,} tokens"),
                     *(table_item(f"{q[k]:,.0f}", "") if q else table_item("–", "no line breaks in the validation split")
                       for k in ("median", "p90", "max")),
                     table_item(f"{row.train_seconds:.2f}")]
            for c, item in enumerate(cells):
                self.table.setItem(r, c, item)
        self._show_histogram(lab)
        if not self.sentenceEdit.text():
            self.sentenceEdit.setText(lab.sentence)  # shows the sentences
        else:
            self._show_sentences()

    def _show_histogram(self, lab: LabResult) -> None:
        plot = self.histogram.getPlotItem()
        plot.clear()  # the legend's entries go with the curves
        plot.setLabel("bottom", f"tokens per {lab.unit}")
        measured = any(len(row.lengths) for row in lab.rows)
        plot.setTitle("Sequence lengths on the validation split" if measured else
                      "Sequence lengths: none, the validation split has no line breaks", size="9pt", color="#333")
        for i, row in enumerate(lab.rows if measured else []):
            plot.plot(lab.bin_edges, row.histogram, stepMode="center", name=row.label,
                      pen=pg.mkPen(COLORS[i % len(COLORS)], width=1.5))

    def _show_sentences(self) -> None:
        """The sentence as each trained tokenizer cuts it, one TokenView a tokenizer."""
        rows = self.lab_result.rows if self.lab_result else []
        while len(self.sentenceViews) < len(rows):
            label, view = QLabel(), TokenView()
            view.setObjectName(f"labSentenceView{len(self.sentenceViews)}")
            view.setFixedHeight(48)
            self.sentenceGrid.addWidget(label, len(self.sentenceViews), 0)
            self.sentenceGrid.addWidget(view, len(self.sentenceViews), 1)
            self.sentenceViews.append(view)
            self._sentenceLabels.append(label)
        text = self.sentenceEdit.text()
        for i, (label, view) in enumerate(zip(self._sentenceLabels, self.sentenceViews)):
            view.setVisible(i < len(rows))
            label.setVisible(i < len(rows))
            if i >= len(rows):
                continue
            tokens = tokenize_sentence(rows[i].tokenizer, text)
            label.setText(f"{rows[i].label}\n{len(tokens)} tokens")
            colors = [_UNKNOWN_COLOR if unknown else _TOKEN_COLORS[j % 2] for j, (_, unknown) in enumerate(tokens)]
            tips = [f"{display_token(t)}: unknown to {rows[i].label}" if unknown else f"token {j + 1}: {display_token(t)}"
                    for j, (t, unknown) in enumerate(tokens)]
            view.set_tokens([t for t, _ in tokens], colors, tips)

    def _show_runs(self, runs: list[RunScore]) -> None:
        note = (f"{len(runs)} finished run(s) on {self.spec} ({self.task}). Bits per character = the best validation "
                "loss in nats per token / ln 2 × tokens per character of the run's validation split: lower is "
                "better, whatever the tokenizer." if runs else f"No finished run on {self.spec} ({self.task}) yet.")
        if any(s.tokenizer == "word" for s in runs):
            note += (" A word tokenizer's loss says nothing about the words it turns into <unk>, so its bits per "
                     "character flatter it (see its unknown rate above).")
        self.runsNote.setText(note)
        self.runsTable.setRowCount(len(runs))
        for r, s in enumerate(runs):
            cpt = s.chars_per_token
            cells = [table_item(s.name, s.path, align_right=False), table_item(s.tokenizer_label, align_right=False),
                     table_item(f"{s.steps:,}", s.status), table_item(f"{s.val_loss:.4f}"),
                     table_item(f"{1 / cpt:.3f}" if cpt else "–"),
                     table_item(f"{s.bits_per_char:.4f}" if s.bits_per_char is not None else "–",
                           "" if cpt else "unknown: the run's corpus or tokenizer cannot be read, or its loss "
                                          "is not over one text")]
            for c, item in enumerate(cells):
                self.runsTable.setItem(r, c, item)
