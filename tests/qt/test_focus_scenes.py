"""The focus in the window (issue 33): every view that computes from a model follows one focus and says which run
and step it shows. Each test is a scene a user met while views showed another run than they said."""
from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel

from fatstudio.core.runs.folder import Run

LONG = 60_000  # ms, as tests/qt/conftest.py
TINY = ["model.L=1", "model.H=2", "model.d_e=16", "model.d_mlp=32", "model.l_max=16", "data.corpus=copy",
        "train.eval_interval=10", "train.eval_iters=2", "train.batch_size=4", "train.sample_tokens=8"]
FOCUS_LABELS = ("promptFocusLabel", "attentionFocusLabel", "tokenLossFocusLabel", "paperFocusLabel",
                "ablationFocusLabel", "patchingFocusLabel", "headAblationFocusLabel", "featuresFocusLabel")


def tiny_run(runs_root, steps=10, seed=0) -> str:
    """A tiny finished run made by the core (no GUI); its folder."""
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides([*TINY, f"train.steps={steps}", f"train.seed={seed}"])
    events = list(training.train(cfg, runs_root=runs_root))
    assert events[-1].status == "finished"
    return next(e for e in events if e.kind == "started").run_dir


def labels(w) -> dict[str, str]:
    """Every focus label of the window, by objectName (the Prompt and Attention tabs made first)."""
    w.prompt_panel  # noqa: B018 (made on first use)
    found = {lab.objectName(): lab.text() for lab in w.findChildren(QLabel) if lab.objectName().endswith("FocusLabel")}
    assert set(found) >= set(FOCUS_LABELS), sorted(found)
    return found


def open_and_load(qtbot, w, run_dir: str) -> None:
    w.open_run(Run.open(run_dir))
    qtbot.waitUntil(lambda: w.loaded_model is not None and w.workspace.focus.is_run(run_dir), timeout=LONG)


def generate_on(qtbot, w, run_dir: str) -> None:
    """Open ``run_dir``, continue "abc" by 5 tokens in the Prompt tab and wait for the text's attention maps."""
    open_and_load(qtbot, w, run_dir)
    prompt = w.prompt_panel
    prompt.promptEdit.setPlainText("abc")
    prompt.tokensSpin.setValue(5)
    with qtbot.waitSignal(prompt.runFinished, timeout=LONG):
        prompt.run()
    qtbot.waitUntil(lambda: w.attention_panel.text_maps is not None, timeout=LONG)


def set_tiny(w, steps=20):
    for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
        w.model_panel.fields[name].setValue(value)
    for name, value in (("steps", steps), ("batch_size", 4), ("eval_interval", 10), ("eval_iters", 2),
                        ("warmup", 2), ("checkpoint_interval", 1000), ("sample_tokens", 8)):
        w.train_panel.fields[name].setValue(value)


def test_every_view_names_the_run_and_step_in_focus(qtbot, window, runs_root):
    w = window
    run = tiny_run(runs_root)
    open_and_load(qtbot, w, run)
    name = Path(run).name
    for objname, text in labels(w).items():
        assert name in text and "step 10" in text, (objname, text)


def test_your_texts_maps_of_the_previous_run_go_when_another_run_is_opened(qtbot, window, runs_root):
    """Scene 1: the Attention tab's "Your text" kept the previous run's maps (and lens) beside the new run's
    head scores, and nothing said so."""
    w = window
    run_a, run_b = tiny_run(runs_root, seed=1), tiny_run(runs_root, steps=20, seed=2)
    prompt, attention = w.prompt_panel, w.attention_panel
    generate_on(qtbot, w, run_a)
    assert Path(run_a).name in attention.focusLabel.text()
    open_and_load(qtbot, w, run_b)
    assert attention.text_maps is None and attention.source() != "text"  # run A's maps are gone
    assert attention.lensView.lens is None or attention.showing_probe  # so is the lens of A's text
    text = attention.focusLabel.text()
    assert f"{Path(run_b).name} · step 20" in text and f"{Path(run_a).name} ·" not in text
    assert prompt.output_text() == "" and prompt.generated == []  # nor does the Prompt keep A's output


def test_the_token_loss_tab_follows_a_new_run_that_trains_and_scores_its_weights(qtbot, window, runs_root):
    """Scene 2: the Token loss tab stayed bound to the old run while a new one trained; scoring would have scored
    the wrong model."""
    w = window
    run_a = tiny_run(runs_root)
    open_and_load(qtbot, w, run_a)
    panel = w.token_loss_panel
    assert panel.scoreButton.isEnabled() and Path(run_a).name in panel.focusLabel.text()
    set_tiny(w, steps=400)
    w.corpus_panel.set_corpus("copy")
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    assert w.start_training()
    qtbot.waitUntil(lambda: w.state == "running", timeout=LONG)
    new_run = w.run_dir
    assert new_run != run_a
    assert panel.loaded is None and not panel.scoreButton.isEnabled()  # not A's weights under the new run's name
    assert Path(new_run).name in panel.focusLabel.text() and "training" in panel.focusLabel.text()
    assert "is training" in panel.summaryLabel.text()
    w.stop_training()
    qtbot.waitUntil(lambda: w.state == "idle" and w.loaded_model is not None, timeout=LONG)
    assert w.workspace.focus.is_run(new_run) and panel.loaded is w.loaded_model
    assert panel.scoreButton.isEnabled() and Path(new_run).name in panel.focusLabel.text()
    assert panel.score()
    qtbot.waitUntil(lambda: panel.scored is not None, timeout=LONG)
    assert panel.scored.result.label == w.loaded_model.label  # the new run's weights were scored


def test_opening_a_sweep_rows_runs_moves_every_view_and_says_so(qtbot, window, runs_root):
    """Scene 4: Experiments → open a row's runs silently replaced the model in the Prompt tab."""
    w = window
    run_a, run_b = tiny_run(runs_root, seed=1), tiny_run(runs_root, seed=2)
    open_and_load(qtbot, w, run_a)
    messages = []
    w.statusBar().messageChanged.connect(messages.append)
    w.experiments_panel.openRequested.emit([run_b])
    qtbot.waitUntil(lambda: w.loaded_model is not None and w.workspace.focus.is_run(run_b), timeout=LONG)
    assert all(Path(run_b).name in text for text in labels(w).values())
    assert any(Path(run_b).name in m and "Prompt" in m for m in messages)  # the move is said where it happens


def test_an_imported_model_says_it_was_imported_not_finished_at_step_0(qtbot, window, runs_root, tmp_path):
    """Scene 5: an imported model read "gpt on python-stdlib, finished at step 0", progress "step 0 / 2,000"."""
    pytest.importorskip("transformers")
    from fatstudio.core.runs.export_hf import export_hf

    w = window
    source = tiny_run(tmp_path / "elsewhere")
    export_hf(source, tmp_path / "tiny-gpt2")
    w.runs.ask_import_folder = lambda: str(tmp_path / "tiny-gpt2")
    w.runs.import_model()
    qtbot.waitUntil(lambda: w.loaded_model is not None and w.workspace.focus.imported, timeout=LONG)
    status, bar = w.train_view.statusLabel.text(), w.train_view.progressBar.format()
    assert "imported" in status and "finished at step 0" not in status and "python-stdlib" not in status
    assert "imported" in bar and "step 0 /" not in bar
    for objname, text in labels(w).items():
        assert "tiny-gpt2" in text and "imported weights" in text and "step 0" not in text, (objname, text)


def test_a_head_knocked_out_on_the_previous_run_s_text_goes_when_another_run_is_opened(qtbot, window, runs_root):
    """The Attention tab's "Head knocked out" kept run A's result under run B's header."""
    w = window
    run_a, run_b = tiny_run(runs_root, seed=1), tiny_run(runs_root, steps=20, seed=2)
    attention = w.attention_panel
    generate_on(qtbot, w, run_a)
    view = attention.headAblationView
    attention.head_menu(0, 0).actions()[0].trigger()
    qtbot.waitUntil(lambda: view.result is not None, timeout=LONG)
    assert view.table.rowCount() > 0
    open_and_load(qtbot, w, run_b)
    assert view.result is None and view.table.rowCount() == 0 and view.text.token_count() == 0
    assert "Right-click a head" in view.summary.text()
    assert f"{Path(run_b).name} · step 20" in view.focusLabel.text()
