"""What the window remembers between sessions (fatstudio.qt.state, QSettings): geometry, splitters, the last
preset and corpus, and the latest finished run, offered in the Prompt tab. Each test has its own store
(tests/conftest.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QPushButton, QSplitter

LONG = 60_000


def _window(qtbot, runs_root):
    from fatstudio.app import MainWindow

    w = MainWindow(runs_root=str(runs_root))
    w.confirm_close = lambda: True
    qtbot.addWidget(w)
    w.show()
    return w


def _close(w) -> None:
    w.close()
    w.workspace.jobs.wait(LONG / 1000)


def _finished_run(runs_root, name):
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides([
        "model.L=1", "model.H=2", "model.d_e=16", "model.d_mlp=32", "model.l_max=16", "data.corpus=copy",
        "train.steps=5", "train.eval_interval=5", "train.eval_iters=1", "train.batch_size=4", "train.sample_tokens=0"])
    events = list(training.train(cfg, run_dir=Path(runs_root) / name))
    assert events[-1].status == "finished"
    return str(Path(runs_root) / name)


def test_the_window_comes_back_as_it_was_left(qtbot, tmp_path):
    w = _window(qtbot, tmp_path / "runs")
    edt = next(p for p in w.presets if p.config.model.arch == "edt")
    w.apply_preset(edt)
    w.settings.update("data", corpus="copy")
    w.move(40, 30)
    splitter = w.findChild(QSplitter, "trainSplitter")
    splitter.setSizes([300, 200])
    sizes, geometry = splitter.sizes(), w.saveGeometry()
    _close(w)
    from fatstudio.qt import state

    assert state.store().value("window/geometry") == geometry  # the offscreen screen cannot show it back

    again = _window(qtbot, tmp_path / "runs")
    assert again.model_panel.preset_key() == edt.key  # the preset they came from (the corpus is not its: custom)
    assert again.settings.data.corpus == "copy" and again.settings.model.arch == "edt"
    a, b = again.findChild(QSplitter, "trainSplitter").sizes()
    assert a / (a + b) == pytest.approx(sizes[0] / sum(sizes), abs=0.01)  # the same split of another height
    _close(again)


def test_a_preset_remembered_by_its_older_key_comes_back(qtbot, tmp_path):
    """Keys were file stems ("4-edt-reverse") before they lost the number that orders the files."""
    from fatstudio.qt import state

    state.remember_choice("4-edt-reverse", "copy")
    w = _window(qtbot, tmp_path / "runs")
    assert w.model_panel.preset_key() == "edt-reverse" and w.settings.model.arch == "edt"
    _close(w)


def test_a_corpus_the_first_preset_refuses_is_not_restored(qtbot, tmp_path):
    """Custom settings on modadd (word tokens) when the window closed: the next session starts on the first
    preset, which modadd's char tokenizer would refuse, so on the preset's own corpus."""
    from fatstudio.qt import state

    state.remember_choice(None, "modadd")
    w = _window(qtbot, tmp_path / "runs")
    assert w.settings.error is None and w.settings.data.corpus == w.presets[0].config.data.corpus
    assert w.trainAction.isEnabled()
    _close(w)


def test_a_corpus_file_that_is_gone_is_not_restored(qtbot, tmp_path):
    corpus = tmp_path / "mine.txt"
    corpus.write_text("hello there\n" * 50, encoding="utf-8")
    w = _window(qtbot, tmp_path / "runs")
    w.settings.update("data", corpus=str(corpus))
    _close(w)
    from fatstudio.qt import state

    assert state.last_choice()[1] == str(corpus)
    corpus.unlink()
    assert state.last_choice()[1] is None
    again = _window(qtbot, tmp_path / "runs")
    assert again.settings.data.corpus == again.presets[0].config.data.corpus
    _close(again)


def test_the_prompt_tab_offers_the_latest_finished_run(qtbot, tmp_path):
    runs = tmp_path / "runs"
    w = _window(qtbot, runs)
    button = w.prompt_panel.findChild(QPushButton, "openLatestRunButton")
    assert button.isHidden()  # no runs: "No model." and nothing to offer
    _close(w)

    first = _finished_run(runs, "first")
    _finished_run(runs, "second")  # the newest
    w = _window(qtbot, runs)
    qtbot.waitUntil(lambda: w.train_view.runs.tree.topLevelItemCount() == 2, timeout=LONG)
    button = w.prompt_panel.findChild(QPushButton, "openLatestRunButton")
    assert not button.isHidden() and button.text() == "Open second"
    from fatstudio.core.runs.folder import Run

    w.open_run(Run.open(first))  # opened most recently: offered next time, before the newest
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert button.isHidden()  # a model is loaded
    _close(w)

    w = _window(qtbot, runs)
    qtbot.waitUntil(lambda: w.train_view.runs.tree.topLevelItemCount() == 2, timeout=LONG)
    button = w.prompt_panel.findChild(QPushButton, "openLatestRunButton")
    assert button.text() == "Open first"
    button.click()
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert w.run_dir == first and button.isHidden()
    _close(w)
