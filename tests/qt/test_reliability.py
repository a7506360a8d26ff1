"""Reliability of the desktop app (issue 14, the GUI cases): closing the window while work runs in threads,
a second Train click while a run starts, changing the settings while a run is open, deleting the run the
Prompt tab shows, and a runs folder of hundreds of runs. Offscreen (tests/conftest.py), tiny models."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

LONG = 60_000  # ms, as tests/qt/conftest.py

TINY = ["model.L=1", "model.H=2", "model.d_e=16", "model.d_mlp=32", "model.l_max=16", "data.corpus=copy",
        "train.eval_interval=10", "train.eval_iters=2", "train.batch_size=4", "train.sample_tokens=8",
        "train.warmup=2"]


def headless_run(runs_root, steps=10) -> str:
    """A tiny finished run made by the core (no GUI); its folder."""
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides([*TINY, f"train.steps={steps}"])
    events = list(training.train(cfg, runs_root=runs_root))
    assert events[-1].status == "finished"
    return next(e for e in events if e.kind == "started").run_dir


def meta(run_dir) -> dict:
    return json.loads((Path(run_dir) / "meta.json").read_text())


# ============================================================================ 1. closing while work runs
# Each scenario runs the app in a process of its own, as a person would (app.exec(), no test harness
# waiting for the threads), closes the window while the work runs and lets the process end: it must end
# soon, print no traceback, and leave a training run stopped and checkpointed.
CLOSE_SCRIPT = textwrap.dedent(r"""
    import json, sys, time
    from pathlib import Path
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    import threading

    from fatstudio.app import MainWindow

    scenario, work = sys.argv[1], Path(sys.argv[2])
    w = MainWindow()
    w.confirm_close = lambda: True
    w.show()
    report = {"scenario": scenario}

    def close_when(ready, then=None):
        def poll():
            if ready():
                report["closing"] = time.time()
                w.close()
                report["hidden_s"] = None if w.isVisible() else time.time() - report["closing"]
                if then:
                    then()
            else:
                QTimer.singleShot(20, poll)
        QTimer.singleShot(0, poll)

    def set_tiny(steps):
        for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
            w.model_panel.fields[name].setValue(value)
        for name, value in (("steps", steps), ("batch_size", 4), ("warmup", 2), ("sample_tokens", 8)):
            w.train_panel.fields[name].setValue(value)

    if scenario == "startup":  # the Train panel's worker is still importing torch
        close_when(lambda: True)
    elif scenario == "tokenizer":  # a BPE tokenizer trains on a corpus of a few MB
        c = w.corpus_panel
        QTimer.singleShot(0, lambda: (c.set_corpus(str(work / "big.txt")), c.tokenizerCombo.set_value("bpe"),
                                      w.settings.update("data", vocab_size=8000)))
        close_when(lambda: c.loading and c.spec.endswith("big.txt") and c.progressBar.value() > 0)
    elif scenario == "lab":  # the tokenizer lab compares tokenizers
        c = w.corpus_panel
        state = {}
        def lab_open():
            if c.info is not None and not c.loading and not state:
                state["lab"] = True
                c.open_tokenizer_lab()
                c.tokenizer_lab.specsEdit.setText("char, word 4000, bpe 6000, bpe 8000")
                c.tokenizer_lab.compare()
            return bool(state) and c.tokenizer_lab is not None and c.tokenizer_lab.running
        QTimer.singleShot(0, lambda: c.set_corpus(str(work / "big.txt")))
        close_when(lab_open)
    elif scenario == "generate":  # a long generation streams into the Prompt tab
        from fatstudio.core.runs.folder import Run
        run = Run.open(sys.argv[3])
        state = {}
        def generating():
            if not state and w.loaded_model is not None:
                state["go"] = True
                p = w.prompt_panel
                p.tokensSpin.setValue(100000)
                p.promptEdit.setPlainText("abc")
                p.run()
            return bool(state) and len(w.prompt_panel.generated) > 20
        QTimer.singleShot(0, lambda: w.open_run(run))
        close_when(generating)
    elif scenario == "evaluation":  # training with an evaluation (many batches) every few steps
        set_tiny(100000)
        for name, value in (("eval_interval", 5), ("eval_iters", 200), ("checkpoint_interval", 100000)):
            w.train_panel.fields[name].setValue(value)
        QTimer.singleShot(0, lambda: w.corpus_panel.set_corpus("copy"))
        state = {}
        def training():
            if not state and w.corpus_panel.info is not None and not w.corpus_panel.loading:
                state["go"] = w.start_training()
            return w.state == "running" and w.plots.val.n >= 1
        close_when(training, lambda: report.update(run_dir=w.run_dir))
    app.exec()
    report["threads_left"] = sum(t.name.startswith("fatstudio-job") for t in threading.enumerate())  # once it quit
    report["app_quit_s"] = time.time() - report.get("closing", time.time())
    print("REPORT " + json.dumps(report), flush=True)
""")


def _big_corpus(path: Path) -> None:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(30000)]
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(60000)))


@pytest.mark.parametrize("scenario", ["startup", "tokenizer", "lab", "generate", "evaluation"])
def test_closing_while_work_runs_ends_quietly(tmp_path, runs_root, scenario):
    extra = []
    if scenario in ("tokenizer", "lab"):
        _big_corpus(tmp_path / "big.txt")
    if scenario == "generate":
        extra = [headless_run(runs_root)]
    script = tmp_path / "close.py"
    script.write_text(CLOSE_SCRIPT)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FATSTUDIO_RUNS": str(runs_root),
           "FATSTUDIO_STATE": str(tmp_path / "state"), "OMP_NUM_THREADS": "1"}
    start = time.time()
    out = subprocess.run([sys.executable, str(script), scenario, str(tmp_path), *extra], capture_output=True,
                         text=True, env=env, timeout=300)
    ended = time.time()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "Error calling Python" not in out.stderr, out.stderr
    assert "worker error" not in out.stderr, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("REPORT "))
    report = json.loads(line[len("REPORT "):])
    assert "closing" in report, report
    assert report["threads_left"] == 0, json.dumps(report)  # no worker outlives the application
    after_close = ended - report["closing"]  # the process's exit included
    if scenario == "evaluation":  # closes once the run is stopped and checkpointed
        m = meta(report["run_dir"])
        assert m["status"] == "stopped" and m["step"] > 0, m
        assert (Path(report["run_dir"]) / "model.safetensors").exists()
    else:
        assert report["hidden_s"] is not None and report["hidden_s"] < 1.0, report  # the window goes at once
    assert after_close < 30, (after_close, ended - start, report)


def set_tiny(w, steps=30):
    m = w.model_panel.fields
    for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
        m[name].setValue(value)
    t = w.train_panel.fields
    for name, value in (("steps", steps), ("batch_size", 4), ("eval_interval", 10), ("eval_iters", 2),
                        ("warmup", 2), ("checkpoint_interval", 1000), ("sample_tokens", 8)):
        t[name].setValue(value)


def wait_idle(qtbot, w):
    qtbot.waitUntil(lambda: w.state == "idle" and w.job is None, timeout=LONG)


# ============================================================================ 2. a second Train click
def test_a_second_train_click_while_a_run_starts_starts_nothing(qtbot, window, runs_root):
    from PySide6.QtCore import Qt

    w = window
    set_tiny(w, steps=20)
    w.corpus_panel.set_corpus("copy")
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    button = w.train_view.trainButton
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert w.state == "starting"
    job = w.job
    # every way to ask again, before Started arrives: the button, the menu's action (Ctrl+Return), the method
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    w.trainAction.trigger()
    assert w.start_training() is False
    assert w.job is job and w.state == "starting"
    assert not button.isEnabled() and not w.trainAction.isEnabled()
    assert "starting" in button.text().lower() and "starting" in button.toolTip().lower()  # says what happens
    assert "already" in w.statusBar().currentMessage().lower()
    wait_idle(qtbot, w)
    assert w.last_status == "finished", w.last_error
    assert len([p for p in runs_root.iterdir() if p.is_dir()]) == 1  # one run
    assert button.isEnabled() and "Train" in button.text()


# ============================================================================ 3. settings change, a run open
def test_switching_architecture_or_preset_leaves_the_open_run_working(qtbot, window, runs_root):
    from fatstudio.core.runs.folder import Run

    w = window
    run_dir = headless_run(runs_root)
    w.open_run(Run.open(run_dir))
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    loaded = w.loaded_model
    arch = loaded.model.config.arch
    other = next(p for p in w.presets if p.config.model.arch != arch)
    w.model_panel.archCombo.set_value("bert" if arch != "bert" else "gpt")
    w.apply_preset(other)
    assert w.settings.model.arch == other.config.model.arch
    assert w.loaded_model is loaded and w.prompt_panel.loaded is loaded  # the open run stays in the Prompt tab
    note = w.findChild(type(w.validationLabel), "settingsNoteLabel")
    assert note is not None and not note.isHidden() and "next run" in note.text()
    assert Path(run_dir).name in note.text() and "Use settings" in note.text()  # the way to its settings
    # prompting and attention still work on the open run
    p = w.prompt_panel
    p.promptEdit.setPlainText("abc")
    p.tokensSpin.setValue(5)
    assert p.run()
    qtbot.waitUntil(lambda: not p.is_running(), timeout=LONG)
    assert p.last_status in (None, "finished") and len(p.generated) == 5, p.messageLabel.text()
    qtbot.waitUntil(lambda: w.attention_panel.maps is not None, timeout=LONG)
    assert w.paper_panel.subject().config == loaded.model.config  # the Paper tab shows the open run's model
    # back to the open run's own settings: nothing to say any more
    w.apply_preset(next(p for p in w.presets if p.config.model.arch == arch))
    w.settings.replace(loaded.config)
    assert note.isHidden()


def test_a_classification_run_open_with_its_own_settings_says_nothing(qtbot, window, runs_root):
    """n_classes (like N_V) comes from the data when the run starts: the settings that made the run, loaded
    back, are not "for the next run"."""
    from fatstudio.core import training
    from fatstudio.core.runs.folder import Run
    from fatstudio.core.runs.presets import load_presets

    w = window
    preset = next(p for p in load_presets() if p.config.data.task == "classification")
    cfg = preset.config.with_overrides(["model.L=1", "model.d_e=16", "model.d_mlp=32", "train.steps=5",
                                        "train.warmup=1", "train.eval_interval=5", "train.eval_iters=1",
                                        "train.batch_size=4"])
    events = list(training.train(cfg, runs_root=runs_root))
    run_dir = next(e for e in events if e.kind == "started").run_dir
    w.apply_preset(preset)
    w.settings.replace(cfg)
    w.open_run(Run.open(run_dir))
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert w.loaded_model.config.model.n_classes > 0 and w.settings.model.n_classes == 0
    assert w.findChild(type(w.validationLabel), "settingsNoteLabel").isHidden()


def test_settings_are_locked_while_training_and_say_so(qtbot, window):
    w = window
    set_tiny(w, steps=100_000)
    w.corpus_panel.set_corpus("copy")
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 3, timeout=LONG)
    assert not w.model_panel.isEnabled() and not w.corpus_panel.isEnabled() and not w.train_panel.isEnabled()
    note = w.findChild(type(w.validationLabel), "settingsNoteLabel")
    assert not note.isHidden() and "locked" in note.text()
    w.stop_training()
    wait_idle(qtbot, w)
    assert w.model_panel.isEnabled()


# ============================================================================ 4. deleting the open run
def test_deleting_the_run_open_in_the_prompt_tab_closes_it_with_a_message(qtbot, window, runs_root):
    from fatstudio.core.runs.folder import Run

    w = window
    run_a, run_b = headless_run(runs_root), headless_run(runs_root)
    w.open_run(Run.open(run_a))
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    asked = []
    w.confirm_delete = lambda run: asked.append(w.delete_question(run)) or True
    w.delete_run(Run.open(run_b))  # another run: the open one stays
    assert not Path(run_b).exists() and w.loaded_model is not None and w.run_dir == run_a
    assert "Prompt tab" not in asked[-1]
    w.delete_run(Run.open(run_a))
    assert "open in the Training and the Prompt tabs" in asked[-1]  # the question says what happens
    assert not Path(run_a).exists()
    assert w.loaded_model is None and w.prompt_panel.loaded is None and w.run_dir is None
    assert "deleted" in w.prompt_panel.modelLabel.text().lower() or "deleted" in w.prompt_panel.messageLabel.text()
    assert "deleted" in w.train_view.statusLabel.text().lower()
    assert w.plots.n_points() == 0
    assert w.attention_panel.maps is None and w.paper_panel.loaded is None
    assert not w.prompt_panel.run()  # nothing to prompt: says so


def test_deleting_the_open_run_while_its_model_loads(qtbot, window, runs_root, wait_for_jobs):
    from fatstudio.core.runs.folder import Run

    w = window
    run_a = headless_run(runs_root)
    w.open_run(Run.open(run_a))
    w.delete_run(Run.open(run_a))  # the model of the run is still loading
    qtbot.wait(500)
    wait_for_jobs(w.workspace)
    assert w.loaded_model is None and w.run_dir is None
    assert w.last_error is None  # the load was cancelled, not failed on the missing files


def test_deleting_a_run_another_process_trains_is_refused_with_a_message(qtbot, window, runs_root):
    from fatstudio.core import training
    from fatstudio.core.runs.folder import WEIGHTS, Run
    from fatstudio.core.runs.presets import load_presets

    w = window
    cfg = load_presets()[0].config.with_overrides([*TINY, "train.steps=400", "train.checkpoint_interval=5"])
    trainer = training.train(cfg, runs_root=runs_root)  # as `fatstudio train` would, holding RUN/.lock
    run_dir = next(e.run_dir for e in trainer if e.kind == "started")
    next(e for e in trainer if e.kind == "checkpoint")
    w.confirm_delete = lambda run: True
    try:
        w.delete_run(Run.open(run_dir))
        assert "being trained by another process" in (w.last_error or "")
        assert (Path(run_dir) / WEIGHTS).exists()
    finally:
        trainer.close()
    w.delete_run(Run.open(run_dir))  # once it has stopped, it goes
    assert not Path(run_dir).exists()


def test_deleting_a_run_closes_it_in_the_tabs_it_is_open_in(qtbot, window, runs_root):
    """Opening a run moves every view to it, a run without weights too (they say it has none; the model opened
    before is not kept under its name); deleting the run in focus closes it in the Training and the Prompt tabs."""
    from PySide6.QtWidgets import QLabel

    from fatstudio.core.runs.folder import WEIGHTS, Run

    w = window
    run_a, run_c = headless_run(runs_root), headless_run(runs_root)
    (Path(run_c) / WEIGHTS).unlink()  # a run that never reached a checkpoint
    w.open_run(Run.open(run_a))
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    w.open_run(Run.open(run_c))
    assert w.run_dir == run_c and w.loaded_model is None and w.prompt_panel.loaded is None
    label = w.prompt_panel.findChild(QLabel, "promptFocusLabel").text()
    assert Path(run_c).name in label and "no weights" in label
    asked = []
    w.confirm_delete = lambda run: asked.append(w.delete_question(run)) or True
    w.delete_run(Run.open(run_c))
    assert "open in the Training and the Prompt tabs:" in asked[-1]
    assert w.run_dir is None and w.plots.n_points() == 0 and "deleted" in w.train_view.statusLabel.text().lower()
    assert w.workspace.focus.run is None and "deleted" in w.prompt_panel.messageLabel.text()
    w.open_run(Run.open(run_a))  # another run opens as before
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert w.workspace.focus.is_run(run_a)


# ============================================================================ 5. hundreds of runs
def make_runs(root: Path, n: int) -> list[Path]:
    """``n`` valid runs: copies of one tiny real run, each with a name and a creation time of its own."""
    source = Path(headless_run(root / "_source"))
    base = json.loads((source / "meta.json").read_text())
    made = []
    for i in range(n):
        dest = root / f"run-{i:04d}"
        shutil.copytree(source, dest)
        m = dict(base, created=base["created"] - 60 * (n - i), corpus=f"copy-{i}")
        (dest / "meta.json").write_text(json.dumps(m))
        made.append(dest)
    shutil.rmtree(root / "_source")
    return made


def test_hundreds_of_runs_are_read_off_the_gui_thread_and_open(qtbot, window, runs_root, monkeypatch):
    """The runs folder is read in a worker thread (500 runs took 0.36-0.68 s on the GUI thread before); the
    list shows "reading" meanwhile and then every run, newest first, and one of them opens."""
    import threading

    from fatstudio.core.runs import folder as core_runs

    w = window
    made = make_runs(runs_root, 500)
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)  # the startup's reading
    readers = []
    list_runs = core_runs.list_runs
    monkeypatch.setattr(core_runs, "list_runs", lambda root: readers.append(threading.current_thread()) or list_runs(root))
    runs = w.train_view.runs
    w.refresh_runs()
    assert w.runs_loading and "reading" in runs.folderLabel.text()
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)
    assert readers and threading.main_thread() not in readers
    assert runs.tree.topLevelItemCount() == 500
    assert runs.runs[0].path.name == made[-1].name  # newest first
    runs.select_path(made[250])
    w.findChild(type(runs.openButton), "openRunButton").click()
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    assert w.run_dir == str(made[250]) and w.plots.n_points() == 10


# ============================================================================ a runs folder on a read-only disk
def test_runs_on_a_read_only_disk_list_open_and_prompt_writing_nothing(qtbot, window, runs_root, read_only):
    """Issue 34: the runs list and opening a run only read (no byte written, no lock taken), and a run whose
    meta.json says "running" while no process trains it (killed) is listed "interrupted"."""
    from fatstudio.core.runs.folder import LOCK, Run

    w = window
    run_a, run_b = headless_run(runs_root), headless_run(runs_root)
    (Path(run_b) / "meta.json").write_text(json.dumps({**meta(run_b), "status": "running"}))
    (Path(run_b) / LOCK).touch()  # as a process killed -9 mid-run leaves it: the file, no one holding it
    before = {p: p.read_bytes() for p in sorted(runs_root.rglob("*")) if p.is_file()}
    guard = read_only(runs_root)
    w.refresh_runs()
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)
    runs = w.train_view.runs
    listed = {runs.tree.topLevelItem(i).text(0): runs.tree.topLevelItem(i).text(1)
              for i in range(runs.tree.topLevelItemCount())}
    assert listed == {Path(run_a).name: "finished", Path(run_b).name: "interrupted"}
    for run_dir in (run_a, run_b):
        w.open_run(Run.open(run_dir))
        qtbot.waitUntil(lambda d=run_dir: w.loaded_model is not None and w.run_dir == d, timeout=LONG)
        w.prompt_panel.promptEdit.setPlainText("abc")
        w.prompt_panel.tokensSpin.setValue(3)
        assert w.prompt_panel.run()
        qtbot.waitUntil(lambda: not w.prompt_panel.is_running(), timeout=LONG)
        assert len(w.prompt_panel.generated) == 3, w.prompt_panel.messageLabel.text()
    assert guard.refused == []
    assert {p: p.read_bytes() for p in sorted(runs_root.rglob("*")) if p.is_file()} == before
