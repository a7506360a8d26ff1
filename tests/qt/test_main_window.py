"""The desktop app from launch to a trained model: one click on Train, pause/resume, stop, reopening,
bad input and closing mid-run. Offscreen (tests/conftest.py), tiny models, few steps."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QListWidget, QProgressBar, QPushButton, QWidget

LONG = 60_000  # ms: generous ceilings for waits on a slow, shared 2-CPU machine


def set_tiny(w, steps=30, corpus=None, eval_interval=10, checkpoint_interval=1000):
    """A tiny model and a short run, set through the controls a user would touch."""
    m = w.model_panel.fields
    for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
        m[name].setValue(value)
    t = w.train_panel.fields
    for name, value in (("steps", steps), ("batch_size", 4), ("eval_interval", eval_interval), ("eval_iters", 2),
                        ("warmup", 2), ("checkpoint_interval", checkpoint_interval), ("sample_tokens", 16)):
        t[name].setValue(value)
    if corpus is not None:
        w.corpus_panel.set_corpus(corpus)


def wait_idle(qtbot, w, timeout=LONG):
    qtbot.waitUntil(lambda: w.state == "idle" and w.job is None, timeout=timeout)


def meta(run_dir) -> dict:
    return json.loads((Path(run_dir) / "meta.json").read_text())


def test_window_opens_without_torch_and_ready_to_train(tmp_path):
    code = (
        "import sys, os\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from fatstudio.app import MainWindow\n"
        "w = MainWindow(); w.show()\n"
        "heavy = [m for m in ('torch', 'tokenizers', 'fatstudio.core.training.trainer', 'fatstudio.core.data.corpora',"
        " 'fatstudio.core.inference.generation') if m in sys.modules]\n"
        "print('HEAVY', heavy, w.train_view.trainButton.isEnabled())\n"
        "app.processEvents(); w.workspace.jobs.wait(60)\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FATSTUDIO_RUNS": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "HEAVY [] True" in out.stdout, out.stdout + out.stderr


def test_the_first_size_fits_the_screen(qtbot, runs_root):
    from PySide6.QtCore import QRect, QSize

    from fatstudio.app import MainWindow
    from fatstudio.qt.main_window import first_size

    assert first_size(QRect(0, 0, 1920, 1050)) == QSize(1440, 920)  # room for it: the size it was made for
    assert first_size(QRect(0, 27, 1440, 873)).height() <= 873 - 40  # 1440×900 less a top bar: title bar too
    w = MainWindow()  # offscreen: an 800×800 screen
    qtbot.addWidget(w)
    w.confirm_close = lambda: True
    available = w.screen().availableGeometry()
    assert available.height() < 920 and w.height() < available.height()  # the status bar on screen


def test_object_names_and_defaults(window):
    w = window
    for cls, name in ((QComboBox, "archCombo"), (QComboBox, "presetCombo"), (QPushButton, "corpusButton"),
                      (QComboBox, "tokenizerCombo"), (QPushButton, "trainButton"), (QPushButton, "pauseButton"),
                      (QPushButton, "stopButton"), (QWidget, "lossPlot"), (QProgressBar, "progressBar")):
        assert w.findChild(cls, name) is not None, name
    first = w.presets[0]
    assert w.findChild(QComboBox, "presetCombo").currentData() == first.key
    assert w.corpus_panel.spec == first.config.data.corpus
    assert w.current_config().model.L == first.config.model.L
    assert w.findChild(QPushButton, "trainButton").isEnabled()
    # every model field has a tooltip; L_enc/L_dec apply only to edt, d_f only to bert (greyed out in their place)
    for name, field in w.model_panel.fields.items():
        assert field.toolTip(), name
    f = w.model_panel.form
    assert not f.fields["L_enc"].isEnabled() and f.fields["L"].isEnabled()
    w.model_panel.archCombo.set_value("edt")
    assert f.fields["L_enc"].isEnabled() and not f.fields["L"].isEnabled() and not f.labels["L"].isEnabled()
    assert w.corpus_panel.taskCombo.values() == ["seq2seq"]  # TASK_ARCHS
    assert "Algorithm 8" in w.paper_panel.pseudocodeView.toPlainText()  # the Paper tab follows the settings
    w.model_panel.archCombo.set_value("bert")
    assert f.fields["d_f"].isEnabled() and f.layout.isRowVisible(f.fields["d_f"])
    assert set(w.corpus_panel.taskCombo.values()) == {"masked_lm", "classification"}


def test_one_click_training(qtbot, window, runs_root):
    w = window
    set_tiny(w, steps=30)  # the default preset's built-in corpus, a tiny model
    qtbot.mouseClick(w.findChild(QPushButton, "trainButton"), Qt.MouseButton.LeftButton)
    assert w.state != "idle"
    assert not w.model_panel.isEnabled()  # settings are locked while training
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    assert w.plots.n_points() == 30
    x, y = w.plots.trainRawCurve.getData()
    assert len(x) == 30
    assert w.plots.val.n >= 3
    runs = [p for p in runs_root.iterdir() if p.is_dir()]
    assert len(runs) == 1 and (runs[0] / "metrics.jsonl").exists()
    assert meta(runs[0])["status"] == "finished"
    assert w.train_view.progressBar.format().endswith(" · finished")
    assert w.train_view.samplesView.toPlainText().strip()
    healthy = diagnostics_lines(w)  # a healthy run: nothing to flag, and it says so
    assert len(healthy) == 1 and healthy[0].startswith("Nothing unusual at step 30: loss finite and falling"), healthy
    assert w.train_view.samplesTabs.tabText(1) == "Diagnostics"
    assert w.model_panel.isEnabled() and w.findChild(QPushButton, "trainButton").isEnabled()
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)  # the runs folder is read in a worker thread
    assert w.train_view.runs.tree.topLevelItemCount() == 1
    assert str(w.train_view.runs.selected().path) == w.run_dir  # the run just trained is selected
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)  # the model went to the Prompt panel


def forbid_preparing_again(monkeypatch):
    """Loading a corpus or training a tokenizer from now on fails the test: training must reuse the panel's."""
    from fatstudio.core.data import corpora as data
    from fatstudio.core.data import tokenization

    def again(*_a, **_k):
        raise AssertionError("prepared a second time")
    monkeypatch.setattr(data, "load_corpus", again)
    monkeypatch.setattr(tokenization, "train_tokenizer", again)


def test_training_reuses_the_corpus_and_tokenizer_the_panel_prepared(qtbot, window, monkeypatch):
    w = window
    set_tiny(w, steps=5)
    qtbot.waitUntil(lambda: w.corpus_panel.corpus.prepared is not None, timeout=LONG)
    vocab = w.corpus_panel.corpus.prepared.tokenizer.vocab_size

    forbid_preparing_again(monkeypatch)
    qtbot.mouseClick(w.findChild(QPushButton, "trainButton"), Qt.MouseButton.LeftButton)
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    from fatstudio.core.runs.folder import Run
    assert Run.open(w.run_dir).load_tokenizer().vocab_size == vocab


def test_synthetic_corpus_follows_the_training_seed_and_is_reused(qtbot, window, monkeypatch):
    w, panel = window, window.corpus_panel
    set_tiny(w, steps=5, corpus="reverse")
    qtbot.waitUntil(lambda: panel.corpus.prepared is not None and panel.info.spec == "reverse", timeout=LONG)
    assert panel.info.seed == w.train_panel.config().seed  # the preview shows the examples trained on
    before = panel.info.preview
    w.train_panel.fields["seed"].setValue(7)
    qtbot.waitUntil(lambda: panel.corpus.prepared is not None and panel.info.seed == 7, timeout=LONG)
    assert panel.info.preview != before

    forbid_preparing_again(monkeypatch)
    qtbot.mouseClick(w.findChild(QPushButton, "trainButton"), Qt.MouseButton.LeftButton)
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error


def test_pause_resume_and_stop(qtbot, window):
    w = window
    set_tiny(w, steps=100_000, corpus="copy")
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 20, timeout=LONG)
    w.train_view.pauseButton.click()
    qtbot.waitUntil(lambda: w.state == "paused", timeout=LONG)
    assert w.train_view.pauseButton.text() == "Resume"
    n = w.plots.n_points()
    qtbot.wait(300)
    assert w.plots.n_points() == n  # nothing moves while paused
    w.train_view.pauseButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > n, timeout=LONG)
    w.train_view.stopButton.click()
    wait_idle(qtbot, w)
    assert w.last_status == "stopped"
    m = meta(w.run_dir)
    assert m["status"] == "stopped" and 0 < m["step"] < 100_000
    assert (Path(w.run_dir) / "model.safetensors").exists()
    said = w.train_view.statusLabel.text()  # the status said once
    assert said.startswith(f"Run stopped at step {m['step']}, checkpoint saved  ·  "), said


def _headless_run(runs_root, steps=20):
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides([
        "model.L=1", "model.H=2", "model.d_e=16", "model.d_mlp=32", "model.l_max=16", "data.corpus=copy",
        f"train.steps={steps}", "train.eval_interval=10", "train.eval_iters=2", "train.batch_size=4",
        "train.sample_tokens=8"])
    events = list(training.train(cfg, runs_root=runs_root))
    return events[-1], next(e for e in events if e.kind == "started").run_dir


def test_reopen_resume_overlay_delete(qtbot, window, runs_root):
    w = window
    fin, run_a = _headless_run(runs_root, steps=20)
    _fin, run_b = _headless_run(runs_root, steps=10)
    assert fin.status == "finished"
    w.refresh_runs()
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)  # read in a worker thread
    runs = w.train_view.runs
    assert runs.tree.topLevelItemCount() == 2
    runs.select_path(run_a)
    w.findChild(QPushButton, "openRunButton").click()
    assert w.plots.n_points() == 20 and w.plots.val.n == 2  # plots restored from metrics.jsonl
    assert "step 10" in w.train_view.samplesView.toPlainText()
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert w.loaded_model.step == 20
    # overlay another run
    runs.select_path(run_b)
    w.findChild(QPushButton, "overlayRunButton").click()
    assert w.plots.overlays() == [Path(run_b).name]
    # resume the first to 30 steps
    runs.select_path(run_a)
    runs.resumeSpin.setValue(30)
    w.findChild(QPushButton, "resumeRunButton").click()
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    assert meta(run_a)["step"] == 30 and w.plots.n_points() == 30
    bar = w.train_view.progressBar.format()  # says it finished, no ETA left over
    assert bar.startswith("step 30 / 30 · loss ") and bar.endswith(" · finished") and "ETA" not in bar, bar
    # delete the second (confirmation answered yes)
    runs.select_path(run_b)
    w.findChild(QPushButton, "deleteRunButton").click()
    assert not Path(run_b).exists() and runs.tree.topLevelItemCount() == 1
    assert w.plots.overlays() == []


def test_opening_or_resuming_another_run_clears_the_overlays(qtbot, window, runs_root):
    from fatstudio.core.runs.folder import Run

    w = window
    a, b, c = (Run.open(_headless_run(runs_root, steps=10)[1]) for _ in range(3))
    w.open_run(a)
    w.runs.overlay_run(b)
    assert w.plots.overlays() == [b.name]
    w.open_run(c)  # another comparison starts
    assert w.run_dir == str(c.path) and w.plots.overlays() == []
    w.runs.open_folders([str(a.path), str(b.path), str(c.path)])  # a sweep's row: the first, the others overlaid
    assert w.run_dir == str(a.path) and w.plots.overlays() == [b.name, c.name]
    assert w.resume_run(a, 12)  # the run shown, resumed: its comparison stays
    wait_idle(qtbot, w)
    assert w.plots.overlays() == [b.name, c.name]
    assert w.resume_run(Run.open(b.path), 12)  # another run resumed
    assert w.plots.overlays() == []
    wait_idle(qtbot, w)


def test_use_settings_takes_a_runs_settings_and_shows_its_preset(qtbot, window, runs_root):
    """"Use settings" on a run puts its model, corpus and training settings in the panels (N_V stays the
    tokenizer's, as with a preset), showing the preset they are, else "(custom)"."""
    from fatstudio.core.runs.folder import Run
    w, preset = window, window.presets[1]
    varied_cfg = preset.config.with_overrides(["model.L=1", "train.steps=7"])
    varied = Run.create(varied_cfg.validate(), root=runs_root, name="varied")
    varied.write_meta(hf_class="GPT2LMHeadModel")  # as `fatstudio import` records
    as_preset = Run.create(preset.config.with_overrides(["model.vocab_size=40"]).validate(), root=runs_root,
                           name="as-preset")
    w.refresh_runs()
    qtbot.waitUntil(lambda: not w.runs_loading and w.train_view.runs.tree.topLevelItemCount() == 2, timeout=LONG)
    runs, button = w.train_view.runs, w.findChild(QPushButton, "useRunSettingsButton")
    vocab = w.settings.model.vocab_size
    runs.select_path(varied.path)
    button.click()
    cfg = w.settings.config
    assert (cfg.model, cfg.data, cfg.train) == (varied_cfg.model.replace(vocab_size=vocab), varied_cfg.data,
                                                varied_cfg.train)
    assert w.model_panel.chosen_preset() is None and w.model_panel.presetCombo.currentText() == "(custom)"
    assert "Fine-tune… starts from its weights" in w.statusBar().currentMessage()  # an imported model's settings
    runs.select_path(as_preset.path)
    button.click()
    assert w.model_panel.chosen_preset() == preset and w.settings.model.L == preset.config.model.L
    message = w.statusBar().currentMessage()
    assert message.startswith(f"The settings are as-preset's (the {preset.name} preset)") and "Fine-tune" not in message


def test_the_settings_column_hides_and_the_views_get_its_width(qtbot, window):
    """The ◂ beside the views' tabs (or View → Settings column, Ctrl+B) hides the settings column and the views
    take its width; a settings problem shows it again, with its message."""
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QToolButton

    w = window
    action, button = w.findChild(QAction, "settingsColumnAction"), w.findChild(QToolButton, "settingsColumnButton")
    width = w.viewTabs.width()
    button.click()
    qtbot.waitUntil(lambda: w.viewTabs.width() > width + 300)
    assert w.settingsColumn.isHidden() and not action.isChecked() and "Settings" in button.text()
    action.trigger()
    assert not w.settingsColumn.isHidden() and action.isChecked() and button.text() == "◂"
    action.trigger()
    w.settings.update("model", H_kv=3)  # H = 4: not allowed
    assert not w.settingsColumn.isHidden() and "H_kv" in w.validationLabel.text()


def test_bad_corpus_gets_a_message(qtbot, window, tmp_path):
    w = window
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    w.corpus_panel.set_corpus(str(empty))
    qtbot.waitUntil(lambda: w.corpus_panel.error is not None, timeout=LONG)
    label = w.findChild(QLabel, "validationLabel")  # said once, under the settings column
    assert not label.isHidden() and "empty" in label.text().lower()
    assert "Traceback" not in label.text()
    assert not w.train_view.trainButton.isEnabled()
    assert label.text().startswith("Corpus")
    w.corpus_panel.set_corpus("copy")  # fixed: Train comes back
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    assert w.train_view.trainButton.isEnabled()


def test_training_error_reaches_the_user(qtbot, window):
    w = window
    set_tiny(w, steps=10, corpus="copy")
    w.train_panel.fields["precision"].set_value("fp16")  # needs a GPU: the trainer refuses with a sentence
    w.train_panel.fields["device"].set_value("cpu")
    w.train_view.trainButton.click()
    wait_idle(qtbot, w)
    assert w.last_status == "error"
    assert "fp16" in w.last_error and "Traceback" not in w.last_error
    assert w.findChild(QLabel, "errorLabel").text() == w.last_error
    assert w.train_view.trainButton.isEnabled()


def test_invalid_hyperparameter_disables_train(qtbot, window):
    w = window
    m = w.model_panel.fields
    m["H"].setValue(4)
    m["H_kv"].setValue(3)
    label = w.findChild(QLabel, "validationLabel")
    assert "H_kv" in label.text() and not label.isHidden()  # said there, once; the Model panel marks the row
    assert "#b00020" in w.model_panel.form.labels["H_kv"].styleSheet()
    assert not w.train_view.trainButton.isEnabled()
    assert not w.start_training()
    m["H_kv"].setValue(2)
    assert label.isHidden()
    assert w.train_view.trainButton.isEnabled()
    m["H_kv"].setValue(0)  # auto
    m["positions"].set_value("sinusoidal")
    m["H"].setValue(1)
    m["d_e"].setValue(33)
    assert "d_e" in label.text() and not w.train_view.trainButton.isEnabled()


def test_closing_mid_run_stops_and_saves(qtbot, window):
    w = window
    set_tiny(w, steps=100_000, corpus="copy")
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 5, timeout=LONG)
    run_dir = w.run_dir
    asked = []
    w.confirm_close = lambda: asked.append(1) or True
    w.close()
    assert asked == [1]
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=LONG)
    assert w.job is None
    m = meta(run_dir)
    assert m["status"] == "stopped" and m["step"] > 0
    assert (Path(run_dir) / "model.safetensors").exists()


def test_closing_mid_run_can_be_cancelled(qtbot, window):
    w = window
    set_tiny(w, steps=100_000, corpus="copy")
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running", timeout=LONG)
    w.confirm_close = lambda: False
    w.close()
    assert w.isVisible() and w.state == "running"
    w.stop_training()
    wait_idle(qtbot, w)


def test_corpus_tokenizers_preview_boundaries(qtbot, window):
    w = window
    c = w.corpus_panel
    qtbot.waitUntil(lambda: c.info is not None and not c.loading, timeout=LONG)
    assert c.builtinCombo.count() > 3  # built-ins listed once data is imported
    c.set_corpus("copy")
    qtbot.waitUntil(lambda: c.info is not None and c.info.spec == "copy" and not c.loading, timeout=LONG)
    assert "chars" in c.statsLabel.text() and c.previewView.toPlainText()
    assert "background-color" in c.tokenView.toHtml()
    n_char = c.info.vocab_size
    assert w.model_panel.vocabLabel.text().startswith(str(n_char))
    c.tokenizerCombo.set_value("word")
    qtbot.waitUntil(lambda: c.info is not None and c.info.tokenizer == "word" and not c.loading, timeout=LONG)
    assert c.info.tokens and c.info.vocab_size != n_char


@pytest.mark.parametrize("task", ["seq2seq", "classification"])
def test_other_presets_train(qtbot, window, task):
    w = window
    preset = next((p for p in w.presets if p.config.data.task == task), None)
    if preset is None:
        pytest.skip(f"no {task} preset")
    combo = w.findChild(QComboBox, "presetCombo")
    combo.setCurrentIndex(combo.findData(preset.key))
    combo.activated.emit(combo.currentIndex())  # as a user's pick
    assert w.model_panel.archCombo.value() == preset.config.model.arch
    assert w.corpus_panel.taskCombo.value() == task
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    assert w.corpus_panel.error is None and w.validation_error is None
    assert "background-color" in w.corpus_panel.tokenView.toHtml()
    set_tiny(w, steps=20)
    w.model_panel.fields["L_enc"].setValue(1)
    w.model_panel.fields["L_dec"].setValue(1)
    w.train_view.trainButton.click()
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    assert "→" in w.train_view.samplesView.toPlainText()


def test_prompt_current_weights_during_training(qtbot, window):
    w = window
    set_tiny(w, steps=100_000, corpus="copy")
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 5, timeout=LONG)
    assert w.findChild(QPushButton, "snapshotButton").isEnabled()
    w.findChild(QPushButton, "snapshotButton").click()
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert "snapshot" in w.loaded_model.label and w.state == "running"
    assert w.viewTabs.currentIndex() == 1  # the Prompt tab
    w.stop_training()
    wait_idle(qtbot, w)


def test_drop_a_corpus_file(qtbot, window, tmp_path):
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    w = window
    path = tmp_path / "tiny.txt"
    path.write_text("hello world, hello transformers.\n" * 50)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    ev = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                    Qt.KeyboardModifier.NoModifier)
    w.dropEvent(ev)
    assert w.corpus_panel.spec == str(path) and w.settingsTabs.currentIndex() == 1
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    assert "hello world" in w.corpus_panel.previewView.toPlainText()
    assert w.corpus_panel.error is None and w.train_view.trainButton.isEnabled()


def test_step_button_and_learning_rate_while_training(qtbot, window):
    w, tv = window, window.train_view
    step = w.findChild(QPushButton, "stepButton")
    assert step is tv.stepButton and not step.isEnabled() and step.toolTip()
    assert not tv.lrApplyButton.isEnabled() and tv.lrSpin.toolTip()
    set_tiny(w, steps=100_000, corpus="copy")
    tv.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 5, timeout=LONG)
    assert not step.isEnabled() and tv.lrApplyButton.isEnabled() and tv.lrScheduleButton.isEnabled()
    assert tv.lrSpin.value() == w.current_config().train.lr  # starts at the run's η
    tv.lrSpin.setValue(0.0042)
    tv.lrApplyButton.click()  # while running: from a following step on
    qtbot.waitUntil(lambda: w.plots.lr.n and w.plots.lr.y[-1] == 0.0042, timeout=LONG)
    assert "fixed" in tv.lrLabel.text()
    tv.pauseButton.click()
    qtbot.waitUntil(lambda: w.state == "paused" and step.isEnabled(), timeout=LONG)
    n = w.plots.n_points()
    last = int(w.plots.train.x[-1])
    for i in (1, 2):  # one click, one step
        qtbot.mouseClick(step, Qt.MouseButton.LeftButton)
        assert not step.isEnabled()  # until the trainer has paused again
        qtbot.waitUntil(lambda: step.isEnabled(), timeout=LONG)
        assert w.state == "paused" and w.plots.n_points() == n + i and int(w.plots.train.x[-1]) == last + i
    tv.lrScheduleButton.click()  # while paused: the next step follows the schedule again
    step.click()
    qtbot.waitUntil(lambda: w.plots.n_points() == n + 3 and step.isEnabled(), timeout=LONG)
    assert w.plots.lr.y[-2] == 0.0042 and w.plots.lr.y[-1] != 0.0042 and "schedule" in tv.lrLabel.text()
    qtbot.wait(200)
    assert w.plots.n_points() == n + 3  # still paused
    tv.stopButton.click()
    wait_idle(qtbot, w)
    assert not step.isEnabled() and not tv.lrApplyButton.isEnabled()
    assert tv.lrSpin.value() == w.current_config().train.lr != 0.0042  # the next run's η, not the last set
    rows = [json.loads(line) for line in (Path(w.run_dir) / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in rows if "train_loss" in r}
    assert lrs[last + 1] == lrs[last + 2] == 0.0042 and lrs[last + 3] != 0.0042  # what metrics.jsonl records


def diagnostics_lines(w) -> list[str]:
    view = w.findChild(QListWidget, "diagnosticsView")
    return [view.item(i).text() for i in range(view.count())]


def test_diagnostics_flag_a_non_finite_loss_live_and_reopened(qtbot, window, monkeypatch):
    import math

    from fatstudio.core import training

    real, calls = training.task_loss, {"n": 0}

    def exploding(model, batch, task):
        loss, logits, y = real(model, batch, task)
        calls["n"] += model.training
        return (loss * math.nan if model.training and calls["n"] >= 12 else loss), logits, y

    monkeypatch.setattr(training.loss, "task_loss", exploding)
    w = window
    set_tiny(w, steps=30, corpus="copy")
    w.train_view.trainButton.click()
    wait_idle(qtbot, w)
    assert w.last_status == "failed"
    lines = diagnostics_lines(w)
    assert len(lines) == 1 and lines[0].startswith("step 12 · the loss became nan"), lines
    assert w.train_view.samplesTabs.tabText(1) == "Diagnostics (1)"
    run_dir = w.run_dir
    w.train_view.set_diagnostics([])
    from fatstudio.core.runs.folder import Run
    w.open_run(Run.open(run_dir))  # reopened: from metrics.jsonl and meta.json
    assert diagnostics_lines(w) == lines


def test_diagnostics_from_rows(window):
    w = window
    rows = [{"step": s, "train_loss": 2.0, "lr": 1e-3, "grad_norm": 3.0} for s in range(1, 301)]
    w.workspace.show_rows(rows, {"grad_clip": 1.0, "warmup": 10})
    lines = diagnostics_lines(w)
    assert lines[0].startswith("No warning at step 300: loss finite but not falling (2.00 → 2.00), no spikes")
    assert len(lines) == 2 and lines[1].startswith("step 300 · the gradient norm was above grad_clip = 1 on 100 of")
    assert w.train_view.samplesTabs.tabText(1) == "Diagnostics"  # a note, no warning
    w.workspace.show_rows(rows, {"grad_clip": 5.0})
    assert diagnostics_lines(w) == ["No warning at step 300: loss finite but not falling (2.00 → 2.00), no spikes, "
                                    "gradient clipped on 0 of the last 100 steps."]
    w.workspace.show_rows([], {})
    assert diagnostics_lines(w) == []


def test_a_probe_of_ones_own_and_an_encoder_decoders(qtbot, window):
    w = window
    p = w.train_panel
    set_tiny(w, steps=10)
    assert not p.probeSourceEdit.isVisibleTo(p) and "validation window" in p.probeEdit.placeholderText()
    qtbot.keyClicks(p.probeEdit, "import os")
    w.train_view.trainButton.click()
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    assert meta(w.run_dir)["probe"] == {"text": "import os"}
    from fatstudio.core.inspect.probes import load_probe

    assert "".join(load_probe(w.run_dir, 10).tokens) == "import os"

    w.model_panel.archCombo.setCurrentIndex(w.model_panel.archCombo.findData("edt"))
    w.corpus_panel.taskCombo.setCurrentIndex(w.corpus_panel.taskCombo.findData("seq2seq"))
    assert p.probeSourceEdit.isVisibleTo(p) and "target" in p.probeEdit.placeholderText()
    w.train_view.trainButton.click()  # a target without its source
    assert w.job is None and "both a source and a target" in w.train_view.errorLabel.text()


def test_estimate_button_times_the_settings_and_forgets_when_they_change(qtbot, window):
    w = window
    set_tiny(w, steps=400)
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    button, label = w.findChild(QPushButton, "estimateButton"), w.findChild(QLabel, "estimateLabel")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert not button.isEnabled() and label.text().startswith("estimating")
    qtbot.waitUntil(lambda: button.isEnabled(), timeout=LONG)
    from fatstudio.core.device import resolve_device
    here = resolve_device("auto").type  # the default device: the GPU where there is one
    assert re.fullmatch(rf"400 steps ≈ (\d+ s|\d+ min \d\d s) on {here}", label.text()), label.text()
    assert "ms a step" in label.toolTip() and "40 evaluations" in label.toolTip()
    assert not [p for p in Path(os.environ["FATSTUDIO_RUNS"]).glob("*") if p.is_dir()]  # no run was made
    w.train_panel.fields["steps"].setValue(500)
    assert label.text() == ""  # an estimate of other settings is not shown
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    w.train_panel.fields["steps"].setValue(600)  # while it measures
    qtbot.waitUntil(lambda: button.isEnabled(), timeout=LONG)
    assert label.text() == ""  # it measured the settings of before
    w.model_panel.fields["H_kv"].setValue(3)  # does not divide H = 2: no valid model
    assert not button.isEnabled() and label.text() == ""  # what is wrong is said under the settings, once


def test_a_run_refused_for_memory_says_why_and_offers_train_anyway(qtbot, window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from fatstudio.core import memory

    monkeypatch.setenv(memory.IGNORE_ENV, "0")  # checked (and put back after the test)
    monkeypatch.setattr(memory, "ram_available", lambda: 1000)  # 1 kB free: nothing fits
    w = window
    w.show()
    set_tiny(w, steps=4, corpus="copy")
    w.train_view.trainButton.click()
    wait_idle(qtbot, w)
    assert "needs about" in w.last_error and "of RAM is free" in w.last_error and "Traceback" not in w.last_error
    box = w.findChild(QMessageBox, "errorDialog")
    anyway = box.findChild(QPushButton, "trainAnywayButton")
    assert anyway is not None and "needs about" in box.text()
    anyway.click()  # the user knows better
    qtbot.waitUntil(lambda: w.last_status == "finished", timeout=LONG)
    assert os.environ[memory.IGNORE_ENV] == "1"
