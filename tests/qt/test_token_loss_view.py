"""The Token loss tab (tokenLossView): the validation text coloured by loss, drawn lazily and scrolled; the worst
tokens (a click shows one in the text); the class breakdown; a diff against an earlier scoring; CSV and PNG."""
import math

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QWidget

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inspect.token_loss import token_losses
from fatstudio.core.model import build_model
from fatstudio.qt.panels.token_loss import EARLIER, TokenLossPanel
from fatstudio.qt.widgets.loss_text import CACHED_LINES
from fatstudio.qt.widgets.token_view import probability_colors

LONG = 60_000
TEXT = "".join(f"line {i}: the quick fox {i * 7 % 13} jumps over the lazy dog.\n" for i in range(1200))


@pytest.fixture
def make(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    tok = train_tokenizer("char", [TEXT])

    def model(seed=0):
        import torch

        torch.manual_seed(seed)
        cfg = ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=16, L=1, H=2, d_e=16, d_mlp=32)
        run = RunConfig(cfg, DataConfig(corpus=str(corpus), val_fraction=0.2, split="tail"), TrainConfig())  # the last 20%
        return LoadedModel(build_model(cfg).eval(), tok, run, label=f"seed {seed} · step {seed}", step=seed)
    return model


@pytest.fixture
def panel(qtbot, runs_root, workspace, wait_for_jobs):
    p = TokenLossPanel(workspace)
    p.resize(1100, 600)
    qtbot.addWidget(p)
    p.show()
    yield p
    wait_for_jobs(workspace)


def score_and_wait(qtbot, panel):
    assert panel.score()
    qtbot.waitUntil(lambda: not panel.busy, timeout=LONG)
    assert panel.scored is not None, panel.summaryLabel.text()
    return panel.scored


def test_the_view_fills_with_every_validation_token_coloured_by_its_probability(qtbot, panel, make):
    loaded = make()
    panel.set_model(loaded)
    assert panel.scoreButton.isEnabled() and not panel.csvButton.isEnabled()
    s = score_and_wait(qtbot, panel)
    expected = token_losses(loaded)
    assert s.result.n_tokens == expected.n_tokens == len(TEXT) - int(len(TEXT) * 0.8)
    assert np.allclose(s.result.loss, expected.loss, atol=1e-6)
    text = panel.text
    assert text.n_lines == TEXT[int(len(TEXT) * 0.8):].count("\n") + 1 - (TEXT.endswith("\n"))
    assert np.array_equal(s.colors, probability_colors(np.exp(-s.result.loss)))
    assert f"{s.result.n_tokens:,} validation tokens" in panel.summaryLabel.text()
    assert panel.csvButton.isEnabled() and panel.pngButton.isEnabled()
    kinds = {panel.classTable.item(r, 0).text(): r for r in range(panel.classTable.rowCount())}
    assert {"by kind of token", "letters", "digits", "punctuation"} <= set(kinds) and any(k.startswith("Q1") for k in kinds)
    assert "at least ⌈ℓ_max/2⌉ = 8" in panel.summaryLabel.text()
    assert "token 0:" in text._tooltip(0) and "nats" in text._tooltip(0)


def test_the_text_scrolls_to_the_end_and_paints_only_what_is_in_view(qtbot, panel, make):
    panel.set_model(make())
    score_and_wait(qtbot, panel)
    text = panel.text
    bar = text.verticalScrollBar()
    assert bar.maximum() == text.n_lines - text.visible_lines() > 100
    for value in range(0, bar.maximum() + 1, 7):
        bar.setValue(value)
        text.viewport().repaint()
    bar.setValue(bar.maximum())
    text.viewport().repaint()
    assert text.first_visible_line() == bar.maximum()
    assert len(text._cache) <= min(text.n_lines, CACHED_LINES)  # line pictures are cached, bounded
    i = text.token_at(QPoint(int(text._cw * 2), text._lh // 2))
    assert i is not None and text.line_of(i) == bar.maximum()
    last = panel.scored.result.n_tokens - 1
    assert text.line_of(last) == text.n_lines - 1


def test_a_click_on_a_worst_token_scrolls_the_text_to_it(qtbot, panel, make):
    panel.set_model(make())
    s = score_and_wait(qtbot, panel)
    table = panel.worstTable
    assert table.rowCount() == min(100, s.result.n_tokens)
    values = [table.item(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(table.rowCount())]
    assert values == sorted(values, reverse=True) and values[0] == pytest.approx(float(s.result.loss.max()))
    row = table.rowCount() - 1
    table.scrollToItem(table.item(row, 1))
    rect = table.visualItemRect(table.item(row, 1))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    position = panel.worst_position(row)
    text = panel.text
    assert text.marked == position
    line = text.line_of(position)
    assert text.first_visible_line() <= line < text.first_visible_line() + text.visible_lines()


def test_a_diff_against_an_earlier_scoring(qtbot, panel, make):
    panel.set_model(make(0))
    first = score_and_wait(qtbot, panel).result
    panel.set_model(make(1))
    i = panel.againstCombo.findData(EARLIER + "seed 0 · step 0")
    assert i > 0 and "seed 0" in panel.againstCombo.itemText(i)
    panel.againstCombo.setCurrentIndex(i)
    s = score_and_wait(qtbot, panel)
    d = s.compared
    assert d is not None and d.against is first
    assert math.isclose(math.fsum(d.delta), d.this.n_tokens * d.delta_mean, abs_tol=1e-6)
    assert panel.worstTable.horizontalHeaderItem(0).text() == "Δ loss"
    assert panel.classTable.columnCount() == 4 and panel.classTable.horizontalHeaderItem(3).text() == "mean Δ"
    assert f"{d.delta_mean:+.4f}" in panel.summaryLabel.text() and "change in loss" in panel.legendLabel.text()
    choices = [panel.againstCombo.itemData(i) for i in range(panel.againstCombo.count())]
    assert choices == [None, EARLIER + "seed 0 · step 0"]  # the model shown is no choice against itself
    assert panel.againstCombo.currentData() == EARLIER + "seed 0 · step 0"
    top = panel.worstTable.item(0, 0).data(Qt.ItemDataRole.UserRole)
    assert abs(top) == pytest.approx(float(np.abs(d.delta).max()))


def test_export_csv_and_png(qtbot, panel, make, tmp_path):
    panel.set_model(make())
    s = score_and_wait(qtbot, panel)
    lines = panel.export_csv(tmp_path / "t.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "position,token,loss" and len(lines) > s.result.n_tokens  # a token "\n" spans two lines
    png = panel.export_png(tmp_path / "t.png")
    from PySide6.QtGui import QImage

    image = QImage(str(png))
    assert image.width() >= panel.text.viewport().width() and image.height() > panel.text.viewport().height()


def test_export_dialog_keeps_the_summary_and_refuses_a_folder(qtbot, panel, make, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    panel.set_model(make())
    score_and_wait(qtbot, panel)
    summary = panel.summaryLabel.text()
    chosen = [str(tmp_path / "out")]
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (chosen[0], "")))
    panel.csvButton.click()
    assert (tmp_path / "out.csv").read_text(encoding="utf-8").startswith("position,token,loss")
    assert panel.summaryLabel.text() == f"{summary}<br>Saved {tmp_path / 'out.csv'}."
    (tmp_path / "dir.csv").mkdir()
    chosen[0] = str(tmp_path / "dir.csv")
    panel.csvButton.click()
    assert panel.summaryLabel.text().startswith("Export failed:") and "is a folder" in panel.summaryLabel.text()


def test_cancel_drops_the_scoring_and_a_classifier_has_no_scoring(qtbot, panel, make, wait_for_jobs):
    panel.set_model(make())
    assert panel.score() and panel.busy and panel.cancelButton.isVisible()
    panel.cancel()
    assert not panel.busy and "cancelled" in panel.summaryLabel.text()
    wait_for_jobs(panel.workspace)
    qtbot.wait(50)
    assert panel.scored is None
    loaded = make()
    loaded.config = loaded.config.with_overrides(["data.task=classification"])
    panel.set_model(loaded)
    assert not panel.scoreButton.isEnabled() and "no loss per token" in panel.summaryLabel.text()


def test_the_window_has_the_tab(window):
    view = window.findChild(QWidget, "tokenLossView")
    assert view is not None and window.viewTabs.indexOf(view) >= 0
    assert not view.findChild(QWidget, "tokenLossScoreButton").isEnabled()  # no model yet


def test_a_masked_lm_scores_every_token_masked_once(qtbot, panel, make):
    loaded = make()
    bert = build_model(ModelConfig(arch="bert", vocab_size=loaded.tokenizer.vocab_size, l_max=16, L=1, H=2, d_e=16,
                                   d_mlp=32)).eval()
    loaded = LoadedModel(bert, loaded.tokenizer, loaded.config.with_overrides(["data.task=masked_lm"]), label="bert")
    panel.set_model(loaded)
    s = score_and_wait(qtbot, panel)
    assert s.result.n_tokens == len(TEXT) - int(len(TEXT) * 0.8) and s.result.task == "masked_lm"
    assert np.allclose(s.result.loss, token_losses(loaded).loss, atol=1e-6)
    assert "masked once" in panel.summaryLabel.text()


def test_against_another_run_on_the_same_corpus(qtbot, make, tmp_path):
    from fatstudio.core.runs.folder import Run
    from fatstudio.qt.panels.token_loss import other_runs, score_validation

    loaded = make(0)
    run = Run.create(loaded.config, root=tmp_path / "runs", name="other")
    other = make(1)
    run.save_tokenizer(other.tokenizer)
    import torch

    run.save_checkpoint(other.model, torch.optim.SGD(other.model.parameters(), lr=0.1), 5, {})
    run.write_meta(status="finished")
    assert other_runs(loaded.config, None, tmp_path / "runs") == [("other", str(run.path))]
    for key in ("data.corpus=python-stdlib", "data.val_fraction=0.1", "data.split=blocks", "data.tokenizer=bpe"):
        assert other_runs(loaded.config.with_overrides([key]), None, tmp_path / "runs") == [], key  # other tokens
    assert other_runs(loaded.config, str(run.path), tmp_path / "runs") == []  # the run in focus is no choice
    scored = score_validation(loaded, str(run.path))
    d = scored.compared
    assert d is not None and d.against.label == "other · step 5"
    assert np.allclose(d.against.loss, token_losses(other).loss, atol=1e-6)
    assert math.isclose(math.fsum(d.delta), d.this.n_tokens * d.delta_mean, abs_tol=1e-6)


def _finished_run(root, name, config, steps: dict):
    """A finished run ``name`` whose weights of each step are ``steps[step]`` (snapshots; the last the checkpoint)."""
    import torch

    from fatstudio.core.runs import snapshots
    from fatstudio.core.runs.folder import Run

    run = Run.create(config, root=root, name=name)
    *earlier, last = sorted(steps)
    run.save_tokenizer(steps[last].tokenizer)
    for step in earlier:
        snapshots.save_snapshot(run.path, steps[step].model, step, run.meta.get("run_id"))
    run.save_checkpoint(steps[last].model, torch.optim.SGD(steps[last].model.parameters(), lr=0.1), last, {})
    run.write_meta(status="finished")
    return run


def test_against_offers_the_run_s_other_steps_and_other_runs_and_scores_a_step_when_chosen(qtbot, panel, make,
                                                                                            runs_root):
    from fatstudio.qt.panels.token_loss import STEP

    mine = _finished_run(runs_root, "mine", make(0).config, {1: make(1), 2: make(2), 3: make(3)})
    other = _finished_run(runs_root, "other", make(0).config, {5: make(5)})
    _finished_run(runs_root, "far", make(0).config.with_overrides(["data.val_fraction=0.1"]), {5: make(5)})
    panel.workspace.set_model(mine.load_model(), str(mine.path))
    qtbot.waitUntil(lambda: len(panel.choices()) > 1, timeout=LONG)
    assert panel.choices() == [None, f"{STEP}2", f"{STEP}1", str(other.path)]  # nothing scored by hand first
    texts = [panel.againstCombo.itemText(i) for i in range(panel.againstCombo.count())]
    assert texts[1] == "this run at step 2 (earlier)" and "other" in texts[3]
    panel.againstCombo.setCurrentIndex(2)
    d = score_and_wait(qtbot, panel).compared
    assert d is not None and d.against.label == "mine · step 1" and d.this.label == "mine · step 3"
    assert np.allclose(d.against.loss, token_losses(make(1)).loss, atol=1e-6)
    assert panel.againstCombo.itemText(2) == "this run at step 1 (earlier) (scored)"
    assert panel.againstCombo.currentData() == f"{STEP}1"
    again = score_and_wait(qtbot, panel).compared
    assert again is not None and again.against is d.against  # scored once: the second diff reuses it


def test_a_repeat_run_s_classes_are_its_copies(qtbot, panel, make):
    from dataclasses import replace

    from fatstudio.core.data.corpora import load_corpus
    from fatstudio.qt.panels.token_loss import FAMILY_TITLES

    tok = train_tokenizer("char", [load_corpus("repeat").text])
    loaded = make()
    loaded = LoadedModel(build_model(replace(loaded.model.config, vocab_size=tok.vocab_size)).eval(), tok,
                         loaded.config.with_overrides(["data.corpus=repeat", "data.val_fraction=0.05"]), label="repeat")
    panel.set_model(loaded)
    s = score_and_wait(qtbot, panel)
    table = panel.classTable
    names = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert names[:4] == [FAMILY_TITLES["copy"], "first copy", "second copy: its first letter", "second copy: the rest"]
    rest = s.result.loss[s.result.task_classes.of == 2].mean()
    assert float(table.item(3, 2).data(Qt.ItemDataRole.UserRole)) == pytest.approx(float(rest))
