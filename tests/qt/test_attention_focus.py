"""Issue 33, scene 3: the Attention tab's knock-out table with "follow the slider" ticked, through a run's training
and its end. Its weights are always the slider's step's when they are saved (also when the list of weights is made
again: a new evaluation, the run's end, the final model loaded), its summary never describes other weights than its
box shows, and it, the head ablation menu and their headers say whose weights they use when they are not the
focus's. The run is trained by the core's generator in the test, its events handed to the window's workspace as the
training job hands them, so that the user's actions fall between known events."""
from __future__ import annotations

import pytest
from conftest import LONG

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.inference import generation
from fatstudio.core.training import Probe, Snapshot, train
from fatstudio.core.training.control import Control


@pytest.fixture
def trainer(window, runs_root, tmp_path):
    """A tiny gpt to train 30 steps, evaluated (probe maps and weights saved) at 10, 20 and 30; and its Control,
    the window's runner (`Workspace.start`) until the test ends it."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=1, H=2, d_e=16, d_mlp=32), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=30, batch_size=4, eval_interval=10, eval_iters=1, sample_tokens=0, lr=1e-2,
                                device="cpu"))
    control = Control()
    events = train(cfg, runs_root=runs_root, control=control)
    yield events, control
    events.close()  # a test that failed part way: the run is marked stopped …
    if window.workspace.busy:
        window.workspace.end()  # … and the window's training ended


def test_the_knockout_weights_follow_the_slider_through_training_and_its_end_and_say_whose_they_are(
        qtbot, window, trainer):
    w, (events, control) = window, trainer
    ws, panel = w.workspace, w.attention_panel
    view, heads = panel.ablationView, panel.headAblationView
    w.viewTabs.setCurrentWidget(w._attention_host)  # shown: each probe reaches the tab as it is saved
    assert view.followCheck.isChecked()

    def until(done) -> None:
        """Hand the trainer's events to the workspace, as the training job does, up to the first ``done`` takes."""
        for ev in events:
            ws.take(ev)
            if done(ev):
                return
        raise AssertionError("the run ended first")

    def probe(step):
        return lambda ev: isinstance(ev, Probe) and ev.step == step

    assert ws.start(control)
    until(probe(10))
    assert panel.probe_step == 10 and view.chosen_weights() == (ws.run_dir, 10)
    assert ws.focus.loaded is None  # training, no snapshot: the focus has no weights, the table chose some
    assert "this view: weights of step 10" in view.focusLabel.words()
    assert "this view: weights of step 10, chosen in the knock-out table" in heads.focusLabel.words()
    assert panel.head_menu(0, 0).actions()[0].text() == "Ablate this head (zero) · weights of step 10"
    view.runButton.click()
    qtbot.waitUntil(lambda: not view.running and view.complete, timeout=LONG)
    assert "step 10;" in view.status.text() and "The table is of" not in view.status.text()

    until(probe(20))  # the slider follows the newest step, the weights follow the slider
    assert panel.probe_step == 20 and view.chosen_weights() == (ws.run_dir, 20)
    assert "The table is of step 10; the weights chosen now are step 20: Run measures them." in view.status.text()
    ws.request_snapshot()  # Prompt current weights: the focus takes the live weights, the same as step 20's
    until(lambda ev: isinstance(ev, Snapshot))
    live = ws.focus.loaded
    assert ws.focus.live and live.step == 20 and view.chosen_weights() == (ws.run_dir, 20)
    assert "this view" not in view.focusLabel.words() and "this view" not in heads.focusLabel.words()
    assert w.viewTabs.currentWidget() is w._prompt_host  # where the user prompts the live weights …
    panel.show_maps(generation.attention_maps_for_ids(live.model, live.tokenizer, live.tokenizer.encode("the fox")))
    w.viewTabs.setCurrentWidget(w._attention_host)  # … and comes back to look at the text's attention

    until(probe(30))  # the user's text stays; the slider waits at the newest step, and the weights follow it
    assert panel.source() == "text" and panel.probeTimeline.current_step() == 30
    assert view.chosen_weights() == (ws.run_dir, 30)
    assert "the weights chosen now are step 30" in view.status.text()
    assert "this view: weights of step 30" in view.focusLabel.words()  # the focus: the live weights of step 20
    assert "this view: weights of step 30, chosen in the knock-out table" in heads.focusLabel.words()
    assert panel.head_menu(0, 0).actions()[0].text() == "Ablate this head (zero) · weights of step 30"

    for ev in events:  # the run's last checkpoint and its end
        ws.take(ev)
    ws.end()  # the window loads the final model: the focus moves to it
    qtbot.waitUntil(lambda: ws.focus.loaded is not None and not ws.focus.live, timeout=LONG)
    assert ws.focus.step == 30 and panel.probeTimeline.current_step() == 30
    assert view.chosen_weights() is None and view.stepCombo.currentText().startswith("model loaded · step 30")
    assert "this view" not in view.focusLabel.words() and "this view" not in heads.focusLabel.words()
    assert "the weights chosen now are step 30" in view.status.text()  # the table is still step 10's

    panel.sourceSwitch.probeButton.click()  # the user's text went with the live weights: the probe's maps
    assert [a.text() for a in panel.head_menu(0, 0).actions()] == [
        "Ablate this head (zero)", "Ablate this head (mean over the validation batch)"]
    view.stepCombo.setCurrentIndex(view.stepCombo.findData(10))  # an earlier step, chosen by hand
    assert "this view: weights of step 10" in view.focusLabel.words()
    assert "this view: weights of step 10, chosen in the knock-out table" in heads.focusLabel.words()
    assert "The table is of" not in view.status.text()  # step 10's table, step 10's weights
    panel.head_menu(0, 0).actions()[0].trigger()
    qtbot.waitUntil(lambda: heads.result is not None, timeout=LONG)
    assert "weights of step 10" in heads.summary.text()


def test_when_the_focus_moves_to_other_weights_the_tab_shows_no_number_of_the_old_ones(qtbot, workspace):
    """The user's text's maps, their head scores and lens, and a patching result are the focus's model's: when the
    focus moves to other weights they go (a patching result on its way too), and the tab says what it shows."""
    from test_attention import make_loaded

    from fatstudio.qt.panels.attention.panel import AttentionPanel

    panel = AttentionPanel(workspace)
    qtbot.addWidget(panel)
    first, other = make_loaded("gpt"), make_loaded("gpt")
    workspace.set_model(first)
    assert panel.loaded is first
    tok = first.tokenizer
    panel.show_maps(generation.attention_maps_for_ids(first.model, tok, tok.encode("the fox")))
    lens, patching = panel.lensView, panel.patchingView
    qtbot.waitUntil(lambda: lens.lens is not None and panel.scores is not None, timeout=LONG)
    assert "your text" in lens.captionLabel.text() and "Your text" in panel.sourceSwitch.caption.text()
    patching.cleanEdit.setText("the fox")
    patching.corruptEdit.setText("the dog")
    patching.runButton.click()
    qtbot.waitUntil(lambda: patching.result is not None, timeout=LONG)
    assert patching.map.matrix is not None and patching.heads.rowCount() == 2

    workspace.set_model(other)
    assert panel.loaded is other and panel.maps is None and panel.text_maps is None and panel.scores is None
    assert lens.lens is None and panel.source() is None
    assert patching.result is None and patching.map.matrix is None and patching.heads.rowCount() == 0
    assert patching.runButton.isEnabled()  # the same prompts, patched again on the weights in focus
    patching.runButton.click()
    workspace.set_model(first)  # the focus moves while it patches: what arrives is not shown
    qtbot.waitUntil(lambda: workspace.jobs.idle, timeout=LONG)
    assert patching.result is None and patching.map.matrix is None
