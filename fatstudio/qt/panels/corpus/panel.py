"""Corpus panel: open a file or folder (or drop one on the window), or pick a built-in corpus; statistics and
a preview; the tokenizer (char, word, byte-level BPE with its vocabulary size) with a tokenized preview
that shows token boundaries; the validation split and the task. The form is bound to the window's Settings
(``data``); the corpus itself is the application model's (`core.app.corpus.Corpus`: read and its tokenizer trained
as a job, with progress): this panel asks and draws. A corpus that cannot be used is said once, under the settings
column (the main window's ``validationLabel``, from ``error``); the panel marks its source."""
from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QFontDatabase
from PySide6.QtWidgets import (
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.app.corpus import tasks_for_arch
from fatstudio.core.config import MODADD_MAX_P, MODADD_P, SPLITS, TASKS, TOKENIZERS, DataConfig
from fatstudio.core.data import preview, splits
from fatstudio.core.data.preview import CorpusPreview, Piece, SplitView
from fatstudio.qt.binding import Binding, Change
from fatstudio.qt.panels.corpus.split_strip import VAL_COLOR, SplitStrip
from fatstudio.qt.widgets.forms import ElidedLabel, Form, ValueCombo, float_spin, int_spin

if TYPE_CHECKING:
    from fatstudio.core.app.workspace import Workspace
    from fatstudio.qt.panels.corpus.tokenizer_lab import TokenizerLab

TASK_LABELS = {"next_token": "next token (Alg. 13)", "masked_lm": "masked LM (Alg. 12)",
               "seq2seq": "seq2seq (Alg. 11)", "classification": "classification (§3)"}
TOKENIZER_LABELS = {"char": "characters", "word": "words", "bpe": "byte-level BPE"}
SPLIT_LABELS = {"blocks": "blocks spread over the text", "tail": "the last part (tail)"}
_TOKEN_COLORS = ("#cfe3fa", "#fbe3b4")
_CHOOSE_BUILTIN = "(choose a built-in corpus)"


def tokens_html(pieces: Sequence[Piece]) -> str:
    """Tokens on alternating backgrounds so every boundary shows; newlines as ↵ then a line break;
    separators grey."""
    parts = []
    for p in pieces:
        if not p.is_token:
            parts.append("<br>" if p.text == "\n" else f"<span style='color:#777'>{html.escape(p.text)}</span>")
            continue
        text = html.escape(p.text).replace("\t", "→").replace("\n", "↵<br>")  # indentation after a newline stays
        shade = _TOKEN_COLORS[(p.token or 0) % 2]  # a token piece has its index
        parts.append(f"<span style='background-color:{shade}'>{text}</span>")
    return "<div style='white-space:pre-wrap; font-family:monospace'>" + "".join(parts) + "</div>"


def stats_html(info: CorpusPreview, description: str | None = None) -> str:
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in preview.stat_rows(info.stats))
    notes = "".join(f"<br><i>{html.escape(str(n))}</i>" for n in info.notes)
    head = f"<b>{html.escape(info.name)}</b>" + (f" – {html.escape(str(description))}" if description else "")
    return f"{head}<table cellspacing='0' cellpadding='1'>{rows}</table>{notes}"


class CorpusPanel(QWidget):
    """The [data] table: the corpus, its tokenizer, the task and the split, bound to ``settings.data``.

    The panel follows the settings it depends on: the architecture (which tasks it offers), the corpus, the
    task and the tokenizer (what it loads and previews) and the training seed (a synthetic built-in is
    generated with it). It records the tokenizer's N_V as ``settings.model.vocab_size``. Signals
    ``statusChanged`` when loading starts or ends and when its error is set or cleared.
    """

    statusChanged = Signal()

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.settings, self.corpus = workspace.settings, workspace.corpus
        self.tokenizer_lab: TokenizerLab | None = None  # the open TokenizerLab dialog, if any

        outer = QVBoxLayout(self)
        outer.addWidget(self._build_source())
        outer.addWidget(self._build_form())
        outer.addWidget(self._build_progress())
        outer.addWidget(self._build_stats())
        outer.addWidget(self._build_split())
        outer.addWidget(self._build_preview(), 1)
        outer.addWidget(self._build_tokens(), 1)

        self._offer_tasks()
        self.binding = Binding(self.settings, "data", self.form.fields, also={"tokenizer": self.corpus.tokenizer_resets})
        self.settings.changed.connect(self._on_settings)
        self.corpus.changed.connect(self._corpus_changed)
        self.corpus.progress.connect(self._progress)
        self.statusChanged.connect(lambda: self.labButton.setEnabled(self.info is not None and not self.loading))
        self._show_source()
        self._update_visibility()

    # -- building --------------------------------------------------------------------------------------------
    def _build_source(self) -> QGroupBox:
        src = QGroupBox("Source", objectName="data.corpus")  # the corpus: a file, a folder or a built-in
        sl = QVBoxLayout(src)
        self.sourceLabel = ElidedLabel("–", "corpusSourceLabel")  # one line: a long path moves nothing under it
        sl.addWidget(self.sourceLabel)
        self.builtinCombo = ValueCombo([(_CHOOSE_BUILTIN, None)])  # the built-ins come with the first corpus
        self.builtinCombo.setObjectName("builtinCombo")
        self.builtinCombo.setToolTip("Corpora generated by fatstudio itself (no downloads): synthetic tasks with "
                                     "recognisable attention patterns, and real text available offline.")
        self.builtinCombo.activated.connect(self._builtin_activated)
        self.corpusButton = QPushButton("Open…", objectName="corpusButton")
        self.corpusButton.setToolTip("Open a text file (or a TSV/JSONL of pairs or labels), or a folder of text "
                                     "files. You can also drop a file or folder on the window.")
        menu = QMenu(self.corpusButton)
        self.openFileAction = QAction("File…", self, triggered=self.open_file_dialog)
        self.openFolderAction = QAction("Folder…", self, triggered=self.open_folder_dialog)
        menu.addAction(self.openFileAction)
        menu.addAction(self.openFolderAction)
        self.corpusButton.setMenu(menu)
        row = QHBoxLayout()
        row.addWidget(QLabel("Built-in:"))
        row.addWidget(self.builtinCombo, 1)
        row.addWidget(self.corpusButton)
        sl.addLayout(row)
        src.setFocusProxy(self.builtinCombo)
        return src

    def _build_form(self) -> QWidget:
        f = Form(section="data")
        self.form = f
        self.taskCombo = f.add("task", "task", ValueCombo([(TASK_LABELS[t], t) for t in TASKS]),
                               "What the model learns: next-token prediction (DTransformer), masked language "
                               "modelling (BERT), sequence-to-sequence (encoder-decoder) or classification "
                               "(BERT with a class head). The architecture decides which tasks are possible.")
        self.tokenizerCombo = ValueCombo([(TOKENIZER_LABELS[t], t) for t in TOKENIZERS])
        self.tokenizerCombo.setObjectName("tokenizerCombo")  # the public name; the row is data.tokenizer
        f.add("tokenizer", "tokenizer", self.tokenizerCombo,
              "How text becomes token IDs: one token per character, per word (with its leading space), or "
              "byte-level BPE trained to the vocabulary size.")
        self.vocabSizeSpin = f.add("vocab_size", "vocabulary size", int_spin(8, 1_000_000, 1000, step=100),
                                   "The most tokens the word or BPE tokenizer may have (N_V); BPE needs ≥ 260.")
        self.valFractionSpin = f.add("val_fraction", "validation split",
                                     float_spin(0.0, 0.9, 0.1, decimals=3, step=0.05),
                                     "The fraction of the corpus held out to measure the validation loss.")
        self.splitCombo = f.add("split", "validation part", ValueCombo([(SPLIT_LABELS[s], s) for s in SPLITS]),
                                "Where a text's validation part lies. Blocks: the text is cut into equal stretches "
                                "and each gives the validation fraction of itself, so every file (every language, "
                                "every kind of text) is validated on in its share. The last part (tail): the end "
                                "of the text, as runs before this setting were split; on a folder that is its last "
                                "files alone. Examples are drawn at random whatever this says.")
        self.pMaskSpin = f.add("p_mask", "p<sub>mask</sub>", float_spin(0.01, 0.99, 0.15, decimals=2, step=0.05),
                               "Masked LM (Algorithm 12): the probability that each token is masked.")
        self.modaddPSpin = f.add("modadd_p", "p (a + b mod p)", int_spin(2, MODADD_MAX_P, MODADD_P),
                                 "The modadd corpus: every a + b mod p for a, b < p, p² pairs; the validation "
                                 "split holds a fraction of them (training fraction = 1 - validation split).")
        box = QWidget()
        box.setLayout(f.layout)
        return box

    def _build_progress(self) -> QProgressBar:
        self.progressBar = QProgressBar(objectName="corpusProgress")
        self.progressBar.setRange(0, 1000)
        self.progressBar.setTextVisible(True)
        self.progressBar.hide()
        return self.progressBar

    def _build_stats(self) -> QGroupBox:
        box = QGroupBox("Statistics")
        self.statsLabel = QLabel("–", objectName="corpusStatsLabel")
        self.statsLabel.setWordWrap(True)
        self.statsLabel.setTextFormat(Qt.TextFormat.RichText)
        self.statsLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        QVBoxLayout(box).addWidget(self.statsLabel)
        return box

    def _build_split(self) -> QGroupBox:
        box = QGroupBox("Validation split", objectName="corpusSplitBox")
        lay = QVBoxLayout(box)
        self.splitStrip = SplitStrip()
        self.splitStrip.setToolTip("The text from start to end: each file a band, the validation part in orange.")
        lay.addWidget(self.splitStrip)
        self.splitLabel = QLabel("–", objectName="corpusSplitLabel")
        self.splitLabel.setWordWrap(True)
        self.splitLabel.setTextFormat(Qt.TextFormat.RichText)
        self.splitLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.splitLabel)
        return box

    def _build_preview(self) -> QGroupBox:
        box = QGroupBox("Preview")
        self.previewView = QPlainTextEdit(objectName="corpusPreview")
        self.previewView.setReadOnly(True)
        self.previewView.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.previewView.setMinimumHeight(110)
        QVBoxLayout(box).addWidget(self.previewView)
        return box

    def _build_tokens(self) -> QGroupBox:
        box = QGroupBox("Tokenized (each token on its own background)")
        tl = QVBoxLayout(box)
        self.tokenSummary = QLabel("", objectName="tokenSummaryLabel")
        self.tokenSummary.setWordWrap(True)
        self.labButton = QPushButton("Compare tokenizers…", objectName="tokenizerLabButton", enabled=False)
        self.labButton.setToolTip("The tokenizer lab: char, word and BPE of several sizes side by side on this corpus, "
                                  "and the finished runs on it in bits per character.")
        self.labButton.clicked.connect(self.open_tokenizer_lab)
        row = QHBoxLayout()
        row.addWidget(self.tokenSummary, 1)
        row.addWidget(self.labButton)
        tl.addLayout(row)
        self.tokenView = QTextEdit(objectName="tokenPreview")
        self.tokenView.setReadOnly(True)
        self.tokenView.setMinimumHeight(110)
        tl.addWidget(self.tokenView)
        return box

    # -- the corpus (the application model's) ----------------------------------------------------------------
    @property
    def spec(self) -> str:
        """The corpus: a path or the name of a built-in."""
        return self.corpus.spec

    @property
    def info(self) -> CorpusPreview | None:
        """What the corpus read is (None: none current)."""
        return self.corpus.preview

    @property
    def error(self) -> str | None:
        return self.corpus.error

    @property
    def loading(self) -> bool:
        return self.corpus.loading

    @property
    def builtins(self) -> dict:
        return self.corpus.builtins

    @property
    def seed(self) -> int:
        """The training seed, which a synthetic built-in is generated with."""
        return self.settings.train.seed

    def config(self) -> DataConfig:
        """The data settings (a copy)."""
        return self.settings.data.replace()

    def set_config(self, d: DataConfig) -> None:
        self.settings.set_section("data", d)

    def set_corpus(self, spec: str) -> None:
        """Use ``spec`` (a path, or the name of a built-in) and read it as a job; the same corpus again is read
        again."""
        self.corpus.use(spec)

    def _on_settings(self, change: Change) -> None:
        if change.touches("model", "arch"):
            self._offer_tasks()
        self.binding.show(change)
        data = change.of("data")
        if data:
            self._update_visibility()
        if "corpus" in data:
            self._show_source()
        if data & {"val_fraction", "split"} or change.touches("train", "seed"):
            self._show_split()

    def _offer_tasks(self) -> None:
        """Offer only the tasks the architecture can learn (the corpus makes a task it cannot the first it can)."""
        tasks = tasks_for_arch(self.settings.model.arch)
        if tasks != self.taskCombo.values():
            self.taskCombo.set_items([(TASK_LABELS[t], t) for t in tasks])

    # -- dialogs and drops -------------------------------------------------------------------------------
    def open_file_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a corpus file", "",
                                              "Text and data (*.txt *.md *.py *.tsv *.jsonl *.json *.csv);;All files (*)")
        if path:
            self.set_corpus(path)

    def open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a folder of text files")
        if path:
            self.set_corpus(path)

    # -- workers -------------------------------------------------------------------------------------------
    def reload(self) -> None:
        """Read the corpus and train its tokenizer again (the application model's job)."""
        self.corpus.reload()

    def _progress(self, fraction: float, message: str) -> None:
        self.progressBar.setValue(int(1000 * max(0.0, min(1.0, fraction))))
        if message:
            self.progressBar.setFormat(f"{message} – %p%")

    def _corpus_changed(self) -> None:
        """The corpus started or ended reading, or its error changed: show where it stands."""
        info = self.corpus.preview
        if self.loading:
            self.progressBar.setValue(0)
            self.progressBar.setFormat("%p%")
            self.progressBar.show()
        else:
            self.progressBar.hide()
            if self.builtins and len(self.builtins) != self.builtinCombo.count() - 1:
                self._show_builtins()
            if info is not None:
                self._show(info)
            elif self.error:
                self.statsLabel.setText("–")
                self._show_split()
                self.previewView.setPlainText("")
                self.tokenView.clear()
                self.tokenSummary.setText("")
        self._show_source()
        self.statusChanged.emit()

    # -- showing -----------------------------------------------------------------------------------------------
    def _show_builtins(self) -> None:
        self.builtinCombo.blockSignals(True)
        self.builtinCombo.clear()
        self.builtinCombo.addItem(_CHOOSE_BUILTIN, None)
        for name, desc in self.builtins.items():
            self.builtinCombo.addItem(name, name)
            self.builtinCombo.setItemData(self.builtinCombo.count() - 1, str(desc), Qt.ItemDataRole.ToolTipRole)
        self._mark_builtins()
        if not self.builtinCombo.set_value(self.spec):
            self.builtinCombo.setCurrentIndex(0)
        self.builtinCombo.blockSignals(False)

    def _mark_builtins(self) -> None:
        """Grey out the built-ins that have no form for the chosen task."""
        model = self.builtinCombo.model()
        task = self.settings.data.task
        for i in range(1, self.builtinCombo.count()):
            name = self.builtinCombo.itemData(i)
            tasks = self.corpus.builtin_tasks.get(name)
            item = model.item(i) if hasattr(model, "item") else None
            if item is not None:
                ok = tasks is None or task in tasks
                flags = item.flags()
                item.setFlags(flags | Qt.ItemFlag.ItemIsEnabled if ok else flags & ~Qt.ItemFlag.ItemIsEnabled)
                item.setText(name if ok else f"{name} (no {TASK_LABELS.get(task, task).split(' (')[0]} form)")

    def _show_source(self) -> None:
        """The one source the settings name: a file or folder (the Built-in list then says none is chosen), or
        the built-in the list shows."""
        spec = self.spec
        p = Path(spec)
        path = p.is_absolute() or p.exists()
        shown = f"{p.name}  ({p.parent})" if path else f"built-in: {spec}"
        if self.error:  # the message is the window's, below the settings
            shown = f"⚠ {shown}: cannot be used"
        self.sourceLabel.setText(shown)
        self.sourceLabel.setStyleSheet("color: #b00020; font-weight: bold;" if self.error else "")
        if path or not self.builtinCombo.set_value(spec):
            self.builtinCombo.setCurrentIndex(0)

    def _show_split(self) -> None:
        """Where the validation split lies, for the corpus read and the split settings."""
        info, d = self.info, self.settings.data
        view = preview.split_view(info, d.val_fraction, d.split, self.seed) if info is not None else SplitView("–")
        self.splitStrip.set_view(view)
        marked = f"<span style='color:{VAL_COLOR.name()}'>■</span> " if view.blocks else ""
        self.splitLabel.setText(marked + html.escape(view.text or "–"))

    def _show(self, info: CorpusPreview) -> None:
        self._show_split()
        self.statsLabel.setText(stats_html(info, self.builtins.get(info.spec)))
        self.previewView.setPlainText(info.preview)
        self.tokenView.setHtml(tokens_html(info.tokens))
        self.tokenSummary.setText(f"{TOKENIZER_LABELS.get(info.tokenizer, info.tokenizer)} tokenizer: N_V = "
                                  f"{info.vocab_size}; the first {info.n_chars_preview} characters make "
                                  f"{info.n_tokens_preview} tokens ({info.chars_per_token:.2f} characters a token).")

    def _update_visibility(self) -> None:
        if self.builtins:
            self._mark_builtins()
        d = self.settings.data
        self.form.set_row_applies("vocab_size", d.tokenizer != "char")
        self.form.set_row_applies("p_mask", d.task == "masked_lm")
        self.form.set_row_applies("modadd_p", d.corpus == "modadd")
        self.form.set_row_applies("split", splits.applies(d))

    # -- reactions -------------------------------------------------------------------------------------------
    def open_tokenizer_lab(self) -> None:
        """Open the tokenizer lab (``tokenizerLab``) on the loaded corpus, in place of one already open."""
        from fatstudio.qt.panels.corpus.tokenizer_lab import TokenizerLab

        if self.info is None or self.info.corpus is None:
            return
        if self.tokenizer_lab is not None:
            self.tokenizer_lab.close()
        d = self.settings.data
        lab = self.tokenizer_lab = TokenizerLab(self.workspace.jobs, self.info.corpus, self.info.spec, self.info.task,
                                                self.info.seed, d.val_fraction or 0.1, parent=self, split=d.split)
        lab.show()

    def _builtin_activated(self, _index: int) -> None:
        name = self.builtinCombo.value()
        if name and name != self.spec:
            self.set_corpus(name)
