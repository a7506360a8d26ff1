"""Corpus panel: open a file or folder (or drop one on the window), or pick a built-in corpus; statistics and
a preview; the tokenizer (char, word, byte-level BPE with its vocabulary size) with a tokenized preview
that shows token boundaries; the validation split and the task. Loading and tokenizer training run in a
worker thread with progress."""
from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
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

from fatstudio.core.config import TASKS, TOKENIZERS, DataConfig, TrainConfig
from fatstudio.qt.widgets.forms import Form, ValueCombo, float_spin, int_spin
from fatstudio.qt.workers import call_in_thread

TASK_LABELS = {"next_token": "next token (Alg. 13)", "masked_lm": "masked LM (Alg. 12)",
               "seq2seq": "seq2seq (Alg. 11)", "classification": "classification (§3)"}
TOKENIZER_LABELS = {"char": "characters", "word": "words", "bpe": "byte-level BPE"}
PREVIEW_CHARS = 2000
TOKEN_PREVIEW_CHARS = 600
_TOKEN_COLORS = ("#cfe3fa", "#fbe3b4")


@dataclass
class CorpusInfo:
    """What the worker hands back: everything the panel shows (plain data, no Qt)."""

    spec: str
    name: str = ""
    kind: str = ""
    stats: dict = field(default_factory=dict)
    preview: str = ""
    notes: list = field(default_factory=list)
    tokens: list = field(default_factory=list)  # readable strings of the preview's first tokens
    n_tokens_preview: int = 0
    n_chars_preview: int = 0
    vocab_size: int | None = None
    tokenizer: str = "char"
    builtins: dict = field(default_factory=dict)
    builtin_tasks: dict = field(default_factory=dict)  # built-in name -> the tasks it has a form for
    task: str = ""
    seed: int = 0  # what a synthetic built-in was generated with
    seeded: bool = False  # whether the corpus depends on the seed (the synthetic built-ins)
    corpus: object = None  # the core Corpus, kept to retrain only the tokenizer
    prepared: object = None  # the core Prepared (corpus + tokenizer), reused by training


class Sep(str):
    """A piece of the tokenized preview that is not a token (between a source and its target, a label)."""


def _preview_tokens(tok, corpus, kind: str, n_chars: int) -> tuple[list[str], int, int]:
    """Readable token strings of the start of the corpus (examples one a line, separators as Sep), the
    number of tokens and of characters they cover."""
    out: list[str] = []
    n_tok = n_chr = 0
    if kind == "text":
        sample = (corpus.text or "")[:n_chars]
        ids = tok.encode(sample) if sample else []
        return tok.token_strings(ids), len(ids), len(sample)
    examples = (corpus.pairs if kind == "pairs" else corpus.labelled) or []
    for a, b in examples:
        if n_chr >= n_chars:
            break
        ids = tok.encode(a)
        out += tok.token_strings(ids)
        n_tok, n_chr = n_tok + len(ids), n_chr + len(a)
        if kind == "pairs":
            ids = tok.encode(b)
            out += [Sep("  →  "), *tok.token_strings(ids)]
            n_tok, n_chr = n_tok + len(ids), n_chr + len(b)
        else:
            out.append(Sep(f"   [{b}]"))
        out.append(Sep("\n"))
    return out, n_tok, n_chr


def _tokenize(info: CorpusInfo, corpus, kind: str, vocab_size: int, progress) -> CorpusInfo:
    from fatstudio.core import data, tokenization

    tok = tokenization.train_tokenizer(kind, corpus.texts(), vocab_size,
                                       progress=lambda f, m="": progress(0.6 + 0.4 * float(f), m))
    info.vocab_size = tok.vocab_size
    info.tokenizer = kind
    info.prepared = data.Prepared(info.spec, info.task, kind, vocab_size, info.seed, corpus, tok)
    try:
        info.tokens, info.n_tokens_preview, info.n_chars_preview = _preview_tokens(
            tok, corpus, getattr(corpus, "kind", "text"), TOKEN_PREVIEW_CHARS)
    except ValueError as e:  # the preview is a courtesy: never block training because of it
        info.tokens, info.n_tokens_preview, info.n_chars_preview = [Sep(f"(no tokenized preview: {e})")], 0, 0
    return info


def load_and_tokenize(spec: str, task: str, kind: str, vocab_size: int, seed: int, progress) -> CorpusInfo:
    """Worker: load the corpus (a synthetic built-in generated with ``seed``, the training seed, so the preview
    shows what will be trained on), train the tokenizer on it, build the previews."""
    from fatstudio.core import data

    progress(0.0, f"loading {spec}")
    corpus = data.load_corpus(spec, task, progress=lambda f, m="": progress(0.6 * float(f), m),
                              seed=seed)
    info = CorpusInfo(spec=spec, task=task, seed=seed, seeded=data.seeded(spec), name=getattr(corpus, "name", spec),
                      kind=getattr(corpus, "kind", ""),
                      stats=dict(corpus.stats()), preview=corpus.preview(PREVIEW_CHARS),
                      notes=list(getattr(corpus, "notes", []) or []), builtins=dict(data.BUILTINS),
                      builtin_tasks=dict(getattr(data, "BUILTIN_TASKS", {})), corpus=corpus)
    progress(0.6, f"training the {kind} tokenizer")
    return _tokenize(info, corpus, kind, vocab_size, progress)


def retokenize(info: CorpusInfo, kind: str, vocab_size: int, progress) -> CorpusInfo:
    """Worker: only retrain the tokenizer on an already loaded corpus."""
    new = dataclasses.replace(info, tokens=[], vocab_size=None, prepared=None)
    return _tokenize(new, info.corpus, kind, vocab_size, progress)


def tokens_html(tokens: list[str]) -> str:
    """Tokens on alternating backgrounds so every boundary shows; newlines as ↵ then a line break."""
    parts = []
    i = 0
    for t in tokens:
        if isinstance(t, Sep):
            parts.append("<br>" if t == "\n" else f"<span style='color:#777'>{html.escape(t)}</span>")
            continue
        text = html.escape(t).replace("\t", "→").replace("\n", "↵<br>")  # indentation after a newline stays
        parts.append(f"<span style='background-color:{_TOKEN_COLORS[i % 2]}'>{text}</span>")
        i += 1
    return "<div style='white-space:pre-wrap; font-family:monospace'>" + "".join(parts) + "</div>"


class CorpusPanel(QWidget):
    """Signals: ``changed`` (the data configuration changed), ``vocabSizeChanged(int)`` (N_V of the
    tokenizer trained for the preview), ``statusChanged`` (loading started/ended, error set/cleared)."""

    changed = Signal()
    vocabSizeChanged = Signal(int)
    statusChanged = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.spec = ""
        self.info: CorpusInfo | None = None
        self.error: str | None = None
        self.loading = False
        self._call = None
        self._job = 0
        self._updating = False
        self.builtins: dict = {}
        self.builtin_tasks: dict = {}
        self.seed = TrainConfig().seed

        outer = QVBoxLayout(self)
        src = QGroupBox("Source")
        sl = QVBoxLayout(src)
        self.sourceLabel = QLabel("–", objectName="corpusSourceLabel")
        self.sourceLabel.setWordWrap(True)
        self.sourceLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        sl.addWidget(self.sourceLabel)
        row = QHBoxLayout()
        self.builtinCombo = ValueCombo()
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
        row.addWidget(QLabel("Built-in:"))
        row.addWidget(self.builtinCombo, 1)
        row.addWidget(self.corpusButton)
        sl.addLayout(row)
        outer.addWidget(src)

        f = Form(prefix="data")
        self.form = f
        self.taskCombo = f.add("task", "task", ValueCombo([(TASK_LABELS[t], t) for t in TASKS]),
                               "What the model learns: next-token prediction (DTransformer), masked language "
                               "modelling (BERT), sequence-to-sequence (encoder-decoder) or classification "
                               "(BERT with a class head). The architecture decides which tasks are possible.")
        self.taskCombo.setObjectName("taskCombo")
        self.tokenizerCombo = f.add("tokenizer", "tokenizer", ValueCombo([(TOKENIZER_LABELS[t], t) for t in TOKENIZERS]),
                                    "How text becomes token IDs: one token per character, per word (with its "
                                    "leading space), or byte-level BPE trained to the vocabulary size.")
        self.tokenizerCombo.setObjectName("tokenizerCombo")
        self.vocabSizeSpin = f.add("vocab_size", "vocabulary size", int_spin(8, 1_000_000, 1000, step=100),
                                   "The most tokens the word or BPE tokenizer may have (N_V); BPE needs ≥ 260.")
        self.vocabSizeSpin.setObjectName("vocabSizeSpin")
        self.valFractionSpin = f.add("val_fraction", "validation split",
                                     float_spin(0.0, 0.9, 0.1, decimals=3, step=0.05),
                                     "The fraction of the corpus held out to measure the validation loss.")
        self.valFractionSpin.setObjectName("valFractionSpin")
        self.pMaskSpin = f.add("p_mask", "p<sub>mask</sub>", float_spin(0.01, 0.99, 0.15, decimals=2, step=0.05),
                               "Masked LM (Algorithm 12): the probability that each token is masked.")
        self.pMaskSpin.setObjectName("pMaskSpin")
        box = QWidget()
        box.setLayout(f.layout)
        outer.addWidget(box)

        self.progressBar = QProgressBar(objectName="corpusProgress")
        self.progressBar.setRange(0, 1000)
        self.progressBar.setTextVisible(True)
        self.progressBar.hide()
        outer.addWidget(self.progressBar)
        self.errorLabel = QLabel(objectName="corpusErrorLabel")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.setStyleSheet("color: #b00020; font-weight: bold;")
        self.errorLabel.hide()
        outer.addWidget(self.errorLabel)

        stats_box = QGroupBox("Statistics")
        stl = QVBoxLayout(stats_box)
        self.statsLabel = QLabel("–", objectName="corpusStatsLabel")
        self.statsLabel.setWordWrap(True)
        self.statsLabel.setTextFormat(Qt.TextFormat.RichText)
        self.statsLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        stl.addWidget(self.statsLabel)
        outer.addWidget(stats_box)

        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        prev_box = QGroupBox("Preview")
        pl = QVBoxLayout(prev_box)
        self.previewView = QPlainTextEdit(objectName="corpusPreview")
        self.previewView.setReadOnly(True)
        self.previewView.setFont(mono)
        self.previewView.setMinimumHeight(110)
        pl.addWidget(self.previewView)
        outer.addWidget(prev_box, 1)

        tok_box = QGroupBox("Tokenized (each token on its own background)")
        tl = QVBoxLayout(tok_box)
        self.tokenSummary = QLabel("", objectName="tokenSummaryLabel")
        self.tokenSummary.setWordWrap(True)
        tl.addWidget(self.tokenSummary)
        self.tokenView = QTextEdit(objectName="tokenPreview")
        self.tokenView.setReadOnly(True)
        self.tokenView.setMinimumHeight(110)
        tl.addWidget(self.tokenView)
        outer.addWidget(tok_box, 1)

        self._retok_timer = QTimer(self, singleShot=True, interval=400)
        self._retok_timer.timeout.connect(self._retokenize)
        self._reload_timer = QTimer(self, singleShot=True, interval=400)
        self._reload_timer.timeout.connect(self.reload)
        self.taskCombo.valueChanged.connect(self._task_changed)
        self.tokenizerCombo.valueChanged.connect(self._tokenizer_changed)
        self.vocabSizeSpin.valueChanged.connect(self._vocab_changed)
        self.valFractionSpin.valueChanged.connect(self._emit_changed)
        self.pMaskSpin.valueChanged.connect(self._emit_changed)
        self._update_visibility()

    # -- the configuration -------------------------------------------------------------------------------
    def prepared(self):
        """The loaded corpus and its trained tokenizer (a core ``Prepared``) while they are current, else None;
        training reuses them when its settings match."""
        return self.info.prepared if self.info is not None and not self.loading else None

    def config(self) -> DataConfig:
        return DataConfig(corpus=self.spec, tokenizer=self.tokenizerCombo.value(),
                          vocab_size=self.vocabSizeSpin.value(), val_fraction=round(self.valFractionSpin.value(), 4),
                          task=self.taskCombo.value(), p_mask=round(self.pMaskSpin.value(), 4))

    def set_config(self, d: DataConfig, load: bool = True) -> None:
        self._updating = True
        try:
            if d.task not in self.taskCombo.values():
                self.taskCombo.set_items([(TASK_LABELS[t], t) for t in TASKS])
            self.taskCombo.set_value(d.task)
            self.tokenizerCombo.set_value(d.tokenizer)
            self.vocabSizeSpin.setValue(d.vocab_size)
            self.valFractionSpin.setValue(d.val_fraction)
            self.pMaskSpin.setValue(d.p_mask)
        finally:
            self._updating = False
        self._update_visibility()
        self.set_corpus(d.corpus, load=load)

    def set_allowed_tasks(self, tasks, load: bool = True) -> None:
        """Only the tasks the chosen architecture can learn (TASK_ARCHS); ``load=False`` does not reload."""
        tasks = [t for t in TASKS if t in tasks]
        if tasks == self.taskCombo.values():
            return
        before = self.taskCombo.value()
        self._updating = True
        try:
            self.taskCombo.set_items([(TASK_LABELS[t], t) for t in tasks])
        finally:
            self._updating = False
        self._update_visibility()
        if self.taskCombo.value() != before and load:
            self._task_changed(self.taskCombo.value())

    def set_corpus(self, spec: str, load: bool = True) -> None:
        """Use ``spec`` (a path, or the name of a built-in) and load it in a worker thread (``load``)."""
        self.spec = str(spec)
        p = Path(self.spec)
        shown = f"{p.name}  <small>({html.escape(str(p.parent))})</small>" if p.is_absolute() or p.exists() else \
            f"built-in <b>{html.escape(self.spec)}</b>"
        self.sourceLabel.setText(shown)
        if self.builtinCombo.findData(self.spec) >= 0:
            self.builtinCombo.set_value(self.spec)
        self.info = None
        self.changed.emit()
        if load:
            self.reload()

    def reload(self) -> None:
        self._reload_timer.stop()
        self._start(load_and_tokenize, self.spec, self.taskCombo.value(), self.tokenizerCombo.value(),
                    self.vocabSizeSpin.value(), self.seed)

    def set_seed(self, seed: int, load: bool = True) -> None:
        """The training seed. A synthetic built-in is generated with it, so it is regenerated (shortly after the
        last change; ``load=False`` does not) when the seed changes."""
        if seed != self.seed:
            self.seed = seed
            if load and self.info is not None and self.info.seeded:
                self._reload_timer.start()

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
    def _start(self, func, *args) -> None:
        if not self.spec:
            return
        if self._call is not None:
            self._call.cancelled = True  # its result, if any, is stale
        self._job += 1
        job = self._job
        self.loading = True
        self._set_error(None)
        self.progressBar.setValue(0)
        self.progressBar.setFormat("%p%")
        self.progressBar.show()
        self.statusChanged.emit()
        self._call = call_in_thread(func, *args, with_progress=True,
                                    on_result=lambda info, j=job: self._loaded(j, info),
                                    on_error=lambda msg, j=job: self._failed(j, msg),
                                    on_progress=lambda f, m, j=job: self._progress(j, f, m))

    def _progress(self, job: int, fraction: float, message: str) -> None:
        if job == self._job:
            self.progressBar.setValue(int(1000 * max(0.0, min(1.0, fraction))))
            if message:
                self.progressBar.setFormat(f"{message} – %p%")

    def _finish(self) -> None:
        self.loading = False
        self._call = None
        self.progressBar.hide()
        self.statusChanged.emit()

    def _loaded(self, job: int, info: CorpusInfo) -> None:
        if job != self._job:
            return
        self.info = info
        if info.builtins and not self.builtins:
            self.builtin_tasks = dict(info.builtin_tasks)
            self.set_builtins(info.builtins)
        self._show(info)
        self._finish()
        if info.vocab_size:
            self.vocabSizeChanged.emit(info.vocab_size)
        if info.seeded and info.seed != self.seed:  # the seed changed while it loaded
            self._reload_timer.start()

    def _failed(self, job: int, message: str) -> None:
        if job != self._job:
            return
        self.info = None
        self.statsLabel.setText("–")
        self.previewView.setPlainText("")
        self.tokenView.clear()
        self.tokenSummary.setText("")
        self._set_error(message)
        self._finish()

    def _set_error(self, message: str | None) -> None:
        self.error = message
        self.errorLabel.setText(message or "")
        self.errorLabel.setVisible(bool(message))

    def set_builtins(self, builtins: dict) -> None:
        self.builtins = dict(builtins)
        self.builtinCombo.blockSignals(True)
        self.builtinCombo.clear()
        self.builtinCombo.addItem("(choose a built-in corpus)", None)
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
        task = self.taskCombo.value()
        for i in range(1, self.builtinCombo.count()):
            name = self.builtinCombo.itemData(i)
            tasks = self.builtin_tasks.get(name)
            item = model.item(i) if hasattr(model, "item") else None
            if item is not None:
                ok = tasks is None or task in tasks
                flags = item.flags()
                item.setFlags(flags | Qt.ItemFlag.ItemIsEnabled if ok else flags & ~Qt.ItemFlag.ItemIsEnabled)
                item.setText(name if ok else f"{name} (no {TASK_LABELS.get(task, task).split(' (')[0]} form)")

    def _show(self, info: CorpusInfo) -> None:
        rows = []
        for k, v in info.stats.items():
            if k in ("name", "notes"):
                continue
            if isinstance(v, float):
                v = f"{v:,.4g}"
            elif isinstance(v, int):
                v = f"{v:,}"
            elif isinstance(v, (list, tuple)):
                v = ", ".join(map(str, v[:12])) + (" …" if len(v) > 12 else "")
            elif isinstance(v, dict):
                v = ", ".join(f"{a}: {b}" for a, b in list(v.items())[:8])
            rows.append(f"<tr><td>{html.escape(str(k).replace('_', ' '))}</td><td>{html.escape(str(v))}</td></tr>")
        notes = "".join(f"<br><i>{html.escape(str(n))}</i>" for n in info.notes)
        desc = self.builtins.get(info.spec)
        head = f"<b>{html.escape(info.name)}</b>" + (f" – {html.escape(str(desc))}" if desc else "")
        self.statsLabel.setText(f"{head}<table cellspacing='0' cellpadding='1'>{''.join(rows)}</table>{notes}")
        self.previewView.setPlainText(info.preview)
        self._show_tokens(info)

    def _show_tokens(self, info: CorpusInfo) -> None:
        self.tokenView.setHtml(tokens_html(info.tokens))
        chars = info.n_chars_preview
        ratio = chars / info.n_tokens_preview if info.n_tokens_preview else 0
        self.tokenSummary.setText(f"{TOKENIZER_LABELS.get(info.tokenizer, info.tokenizer)} tokenizer: N_V = "
                                  f"{info.vocab_size}; the first {chars} characters make {info.n_tokens_preview} "
                                  f"tokens ({ratio:.2f} characters a token).")

    # -- reactions -------------------------------------------------------------------------------------------
    def _builtin_activated(self, _index: int) -> None:
        name = self.builtinCombo.value()
        if name and name != self.spec:
            self.set_corpus(name)

    def _task_changed(self, _task) -> None:
        self._update_visibility()
        if self._updating:
            return
        self.changed.emit()
        self.reload()  # a corpus reads differently per task (pairs, labels)

    def _tokenizer_changed(self, _kind) -> None:
        self._update_visibility()
        if self._updating:
            return
        if self.tokenizerCombo.value() == "bpe" and self.vocabSizeSpin.value() < 260:
            self.vocabSizeSpin.setValue(1000)
        self.changed.emit()
        self._retok_timer.start(0)

    def _vocab_changed(self, _v) -> None:
        if self._updating:
            return
        self.changed.emit()
        if self.tokenizerCombo.value() != "char":
            self._retok_timer.start()

    def _retokenize(self) -> None:
        if self.info is not None and self.info.corpus is not None and not self.loading:
            self._start(retokenize, self.info, self.tokenizerCombo.value(), self.vocabSizeSpin.value())
        else:
            self.reload()

    def _emit_changed(self, *_):
        if not self._updating:
            self.changed.emit()

    def _update_visibility(self) -> None:
        if self.builtins:
            self._mark_builtins()
        self.form.set_row_visible("vocab_size", self.tokenizerCombo.value() != "char")
        self.form.set_row_visible("p_mask", self.taskCombo.value() == "masked_lm")
