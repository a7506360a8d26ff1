"""The tokenizer lab dialog (``tokenizerLab``): opened from the Corpus tab, its table filled in a worker, the
sentence re-tokenized as it is edited, and the runs on the corpus in bits per character."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from fatstudio import ModelConfig
from fatstudio.core import training
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.corpora import load_corpus
from fatstudio.core.runs.folder import Run
from fatstudio.core.runs.tokenizer_lab import DEFAULT_SPECS, spec_label, split_corpus
from fatstudio.qt.panels.corpus.panel import CorpusPanel
from fatstudio.qt.panels.corpus.tokenizer_lab import _UNKNOWN_COLOR, TokenizerLab

LONG = 60_000


def lab(qtbot, corpus, spec, **kw) -> TokenizerLab:
    from fatstudio.qt.jobs import new_jobs

    dialog = TokenizerLab(new_jobs(), corpus, spec, **kw)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: not dialog.running, timeout=LONG)
    return dialog


def test_the_corpus_tab_opens_the_lab_on_the_loaded_corpus(qtbot, tmp_path, monkeypatch, workspace):
    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path))
    panel = CorpusPanel(workspace)
    qtbot.addWidget(panel)
    assert not panel.labButton.isEnabled()  # nothing loaded yet
    panel.set_corpus("reverse")
    qtbot.waitUntil(lambda: panel.info is not None and not panel.loading, timeout=LONG)
    assert panel.labButton.isEnabled()
    qtbot.mouseClick(panel.labButton, Qt.MouseButton.LeftButton)
    dialog = panel.findChild(QDialog, "tokenizerLab")
    assert dialog is panel.tokenizer_lab and dialog.isVisible() and dialog.corpus is panel.info.corpus
    qtbot.waitUntil(lambda: not dialog.running, timeout=LONG)
    dialog.close()


def test_the_table_compares_the_default_tokenizers_on_a_built_in_corpus(qtbot, tmp_path):
    corpus = load_corpus("reverse")
    dialog = lab(qtbot, corpus, "reverse", runs_root=tmp_path)
    assert dialog.objectName() == "tokenizerLab" and dialog.errorLabel.isHidden()
    table, rows = dialog.table, dialog.lab_result.rows
    assert table.rowCount() == len(DEFAULT_SPECS)
    assert [table.item(r, 0).text() for r in range(table.rowCount())] == [spec_label(s) for s in DEFAULT_SPECS]
    train, val = ("".join(part) for part in split_corpus(corpus, 0.1))  # the blocks the dialog measures on
    char = {table.horizontalHeaderItem(c).text(): table.item(0, c).text() for c in range(table.columnCount())}
    assert char["N_V"] == str(len(set(train)) + 4)  # the letters, '>' and '\n', then the four specials
    assert char["tokens / char"] == "1.000" and char["unknown"] == "0.00%"
    lengths = sorted(len(line) for line in val.split("\n") if line)
    assert char["max"] == str(lengths[-1]) and char["median"] == f"{lengths[len(lengths) // 2]:,.0f}"
    for r, row in enumerate(rows):
        assert table.item(r, 1).text() == f"{row.vocab_size:,}" and table.item(r, 2).text() == f"{row.tokens_per_char:.3f}"
    bpe = [float(table.item(r, 2).text()) for r, (kind, _) in enumerate(DEFAULT_SPECS) if kind == "bpe"]
    assert bpe == sorted(bpe, reverse=True) and bpe[0] < 1  # more merges, fewer tokens a character
    curves = dialog.histogram.getPlotItem().listDataItems()
    assert [c.name() for c in curves] == [spec_label(s) for s in DEFAULT_SPECS]
    assert "tokens per line" in dialog.summaryLabel.text() and "No finished run" in dialog.runsNote.text()
    assert dialog.notesLabel.isHidden()  # words and lines: nothing to explain


def test_a_corpus_without_words_or_lines_is_explained_not_measured(qtbot, tmp_path):
    dialog = lab(qtbot, load_corpus("repeat"), "repeat", runs_root=tmp_path,
                 specs=[("char", None), ("word", 1024), ("bpe", 300)])
    table = dialog.table
    cells = [{table.horizontalHeaderItem(c).text(): table.item(r, c) for c in range(table.columnCount())}
             for r in range(table.rowCount())]
    char, word, bpe = cells
    assert word["tokens / char"].text() == word["unknown"].text() == "–"  # not 0.000 and 100.00%
    assert "no words" in word["unknown"].toolTip() and "no words" in word["tokenizer"].toolTip()
    assert char["tokens / char"].text() == "1.000" and bpe["unknown"].text() == "0.00%"
    assert all(row[k].text() == "–" for row in cells for k in ("median", "p90", "max"))
    notes = dialog.notesLabel.text()
    assert not dialog.notesLabel.isHidden() and "No words" in notes and "no line breaks" in notes
    assert dialog.histogram.getPlotItem().listDataItems() == []
    assert "no line breaks" in dialog.histogram.getPlotItem().titleLabel.text


def test_editing_the_sentence_retokenizes_it_in_every_row(qtbot, tmp_path):
    dialog = lab(qtbot, load_corpus("reverse"), "reverse", runs_root=tmp_path,
                 specs=[("char", None), ("word", 1024), ("bpe", 300)])
    char, word, bpe = dialog.sentenceViews
    assert dialog.sentenceEdit.text() == dialog.lab_result.sentence and char.tokens() == list(dialog.lab_result.sentence)
    dialog.sentenceEdit.clear()
    qtbot.keyClicks(dialog.sentenceEdit, "abcab>bacba")
    assert char.tokens() == list("abcab>bacba") and bpe.text() == "abcab>bacba"
    assert word.tokens() == ["abcab", ">", "bacba"]
    assert len(bpe.tokens()) < len(char.tokens())
    assert not any(char.color(i) == _UNKNOWN_COLOR for i in range(char.token_count()))
    qtbot.keyClicks(dialog.sentenceEdit, "z")  # no 'z' in the corpus: unknown to char and word, not to BPE
    assert char.tokens()[-1] == "z" and char.color(char.token_count() - 1) == _UNKNOWN_COLOR
    assert "unknown" in char.tooltip(char.token_count() - 1)
    assert word.tokens()[-1] == "bacbaz" and word.color(word.token_count() - 1) == _UNKNOWN_COLOR
    assert not any(bpe.color(i) == _UNKNOWN_COLOR for i in range(bpe.token_count()))


def test_bad_tokenizers_are_explained(qtbot, tmp_path):
    dialog = lab(qtbot, load_corpus("reverse"), "reverse", runs_root=tmp_path, specs=[("char", None)])
    dialog.specsEdit.setText("char, bpe")
    qtbot.mouseClick(dialog.compareButton, Qt.MouseButton.LeftButton)
    assert not dialog.errorLabel.isHidden() and "vocabulary size" in dialog.errorLabel.text()
    dialog.specsEdit.setText("bpe 100")  # parses, but byte-level BPE needs 260: the worker says so
    qtbot.mouseClick(dialog.compareButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.running, timeout=LONG)
    assert not dialog.errorLabel.isHidden() and "at least 260" in dialog.errorLabel.text()
    assert dialog.table.rowCount() == 1  # the last comparison stays


def tiny_run(corpus, root, tokenizer: str) -> Run:
    cfg = RunConfig(ModelConfig(l_max=16, L=1, H=2, d_e=16, d_mlp=32),
                    DataConfig(corpus=str(corpus), tokenizer=tokenizer, vocab_size=300),
                    TrainConfig(steps=10, batch_size=4, eval_interval=5, eval_iters=2, checkpoint_interval=10,
                                warmup=2, sample_tokens=8, device="cpu"))
    events = list(training.train(cfg, runs_root=root))
    return Run.open(next(e for e in events if e.kind == "started").run_dir)


def test_the_runs_table_gives_bits_per_char_for_runs_on_this_corpus_only(qtbot, tmp_path):
    corpus, other, root = tmp_path / "corpus.txt", tmp_path / "other.txt", tmp_path / "runs"
    corpus.write_text("".join(f"the quick brown fox {i} jumps over the lazy dog.\n" for i in range(400)))
    other.write_text("a different corpus.\n" * 200)
    mine = tiny_run(corpus, root, "bpe")
    tiny_run(other, root, "char")
    dialog = lab(qtbot, load_corpus(str(corpus)), str(corpus), runs_root=root, specs=[("char", None), ("bpe", 300)])
    table = dialog.runsTable
    assert table.rowCount() == 1 and table.item(0, 0).text() == mine.name and table.item(0, 1).text() == "bpe 300"
    best = min(r["val_loss"] for r in mine.metrics() if "val_loss" in r)
    cpt = mine.meta["chars_per_token"]["val"]
    assert cpt > 2  # BPE tokens hold several characters: nats per token and bits per char differ a lot
    assert float(table.item(0, 3).text()) == pytest.approx(best, abs=1e-4)
    assert float(table.item(0, 4).text()) == pytest.approx(1 / cpt, abs=1e-3)
    assert float(table.item(0, 5).text()) == pytest.approx(best / math.log(2) / cpt, abs=1e-4)
    assert "1 finished run" in dialog.runsNote.text()
