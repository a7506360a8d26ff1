"""The Attention panel's experiments on a tiny trained run: the knock-out table (every head and MLP, off the GUI
thread, cancellable, the weights chosen, CSV and PNG), a head ablated from the grid's context menu (the text's
token probabilities before and after), and activation patching for gpt, BERT and the encoder-decoder (the map, the
decoder's stream, the heads, the position and prefix, bad input said inline)."""
import csv
import types

import numpy as np
import pytest
from conftest import LONG
from PySide6.QtCore import Qt

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.inference import generation
from fatstudio.core.inspect import probes
from fatstudio.core.inspect.ablation import knockout_table, text_ablation
from fatstudio.core.names import ComponentName, MapName
from fatstudio.core.runs.folder import Run, load_at_step
from fatstudio.qt.panels.attention.head_ablation import HeadAblationView
from fatstudio.qt.panels.attention.panel import AttentionPanel
from fatstudio.qt.panels.attention.patching import PatchingView

NAMES = ["self/0/0", "self/0/1", "mlp/0", "self/1/0", "self/1/1", "mlp/1"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny gpt trained 30 steps, evaluated (probe maps saved) at 10, 20 and 30."""
    from fatstudio.core.training import train

    tmp = tmp_path_factory.mktemp("run")
    corpus = tmp / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=2, H=2, d_e=16, d_mlp=32), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=30, batch_size=4, eval_interval=10, eval_iters=2, sample_tokens=0,
                                lr=1e-2, device="cpu"))
    for _ in train(cfg, run_dir=tmp / "run"):
        pass
    return tmp / "run"


@pytest.fixture
def panel(qtbot, run_dir, workspace):
    p = AttentionPanel(workspace)
    qtbot.addWidget(p)
    p.resize(1300, 800)
    loaded = Run.open(run_dir).load_model()
    workspace.set_model(loaded, str(run_dir))  # the focus: the run's final weights, which the panel follows
    p.show_maps(generation.attention_maps_for_ids(loaded.model, loaded.tokenizer,
                                                 loaded.tokenizer.encode("the lazy fox")))
    p.show()
    return p


def test_the_knockout_table_fills_with_every_component_sorted_by_delta_and_exports(qtbot, panel, tmp_path):
    view = panel.ablationView
    assert panel.ablationTable.objectName() == "ablationTable" and panel.findChild(object, "ablationTable")
    assert view.stepCombo.currentText().startswith("model loaded · step 30")
    view.kindCombo.setCurrentIndex(view.kindCombo.findData("mean"))
    view.runButton.click()
    assert view.running and not view.runButton.isEnabled() and view.cancelButton.isEnabled()
    qtbot.waitUntil(lambda: not view.running, timeout=LONG)
    expected = knockout_table(panel.loaded, "mean")
    assert sorted(str(r.component) for r in view.rows) == sorted(NAMES) and view.complete
    assert view.baseline == pytest.approx(expected.baseline_loss)
    by_name = {str(r.component): r for r in expected.rows}
    t = panel.ablationTable
    assert t.rowCount() == len(NAMES)
    deltas = [float(t.item(i, 2).text()) for i in range(t.rowCount())]
    assert deltas == sorted(deltas, reverse=True)  # the largest rise first
    for i in range(t.rowCount()):
        name = str(t.item(i, 0).data(Qt.ItemDataRole.UserRole))
        assert float(t.item(i, 2).text()) == pytest.approx(by_name[name].delta_loss, abs=1e-4)
    top = t.item(0, 2).background().color()
    assert top.alphaF() > 0.5 and (top.red() > top.blue()) == (deltas[0] > 0)  # coloured by Δ
    assert "Validation loss" in view.status.text() and "6 components" in view.status.text()
    rows = list(csv.DictReader(view.export_csv(tmp_path / "k.csv").open(encoding="utf-8")))
    assert [r["component"] for r in rows] == NAMES
    assert [float(r["delta_loss"]) for r in rows] == pytest.approx([by_name[n].delta_loss for n in NAMES])
    png = view.export_png(tmp_path / "k.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cancel_stops_the_table_and_keeps_what_was_measured(qtbot, panel):
    view = panel.ablationView
    view.start()
    view.cancelButton.click()  # before the first component: the baseline is still being measured
    qtbot.waitUntil(lambda: not view.running, timeout=LONG)
    assert not view.complete and len(view.rows) < len(NAMES)
    assert "ancel" in view.status.text() and view.runButton.isEnabled() and not view.cancelButton.isEnabled()
    with pytest.raises(ValueError, match="no knock-out table"):
        view.export_csv("never.csv")


def test_the_weights_offer_every_saved_step_and_each_measures_its_own_table(qtbot, panel, run_dir):
    view, run = panel.ablationView, Run.open(run_dir)
    view.set_sources(panel.loaded, None, str(run_dir), [5, 10, 20, 30])  # a snapshot loaded; the run shown
    combo = view.stepCombo
    texts = [combo.itemText(i) for i in range(combo.count())]
    assert texts == ["model loaded · step 30", "run · step 10", "run · step 20", "run · step 30 · last checkpoint",
                     "probe steps 5: attention maps only, no weights"]
    assert not combo.model().item(4).isEnabled()
    tables = {}
    for step in (10, 30):
        combo.setCurrentIndex(combo.findData(step))
        view.start()
        qtbot.waitUntil(lambda: not view.running, timeout=LONG)
        assert len(view.rows) == len(NAMES) and f"step {step}" in view.status.text()
        tables[step] = {panel.ablationTable.item(i, 0).data(Qt.ItemDataRole.UserRole): panel.ablationTable.item(i, 2).text()
                        for i in range(len(NAMES))}
        expected = knockout_table(load_at_step(run, step), "zero")
        assert view.baseline == pytest.approx(expected.baseline_loss)
        assert {r.component: f"{r.delta_loss:+.4f}" for r in expected.rows} == tables[step]
    assert tables[10] != tables[30]
    view.set_sources(None)
    assert combo.count() == 0 and not view.runButton.isEnabled()


def test_the_weights_follow_the_probe_slider_and_the_head_ablation_uses_them(qtbot, panel, run_dir):
    view, run = panel.ablationView, Run.open(run_dir)
    panel.set_probes(probes.list_probes(run_dir))
    combo = view.stepCombo
    assert [combo.itemData(i) for i in range(combo.count())] == [None, 10, 20]  # step 30 is the model loaded
    assert combo.currentIndex() == 0  # the slider at 30
    panel.probeTimeline.set_index(0)
    assert combo.currentData() == 10
    menu = panel.head_menu(1, 0)
    assert menu.actions()[0].text() == "Ablate this head (zero) · weights of step 10"
    menu.actions()[0].trigger()
    qtbot.waitUntil(lambda: panel.headAblationView.result is not None, timeout=LONG)
    text = "".join(t for t in panel.maps.tokens if not t.startswith("["))
    expected = text_ablation(load_at_step(run, 10), ComponentName.parse("self/1/0"), text)
    assert panel.headAblationView.result.after == pytest.approx(expected.after)
    assert "weights of step 10" in panel.headAblationView.summary.text()
    view.followCheck.setChecked(False)
    panel.probeTimeline.set_index(1)
    assert combo.currentData() == 10  # not following: the choice stays


def test_right_clicking_a_head_ablates_it_and_shows_the_change_in_the_text_s_probabilities(qtbot, panel, tmp_path):
    assert panel.head_menu(0, 2) is None  # the mean's column
    menu = panel.head_menu(1, 0)
    actions = menu.actions()
    assert [a.text() for a in actions][0] == "Ablate this head (zero)" and "mean" in actions[1].text()
    actions[0].trigger()
    view = panel.headAblationView
    assert panel.browser.viewTabs.currentWidget().widget() is view  # its tab (a scroll area) shown
    qtbot.waitUntil(lambda: view.result is not None, timeout=LONG)
    expected = text_ablation(panel.loaded, ComponentName.parse("self/1/0"), "the lazy fox")
    assert view.result.after == pytest.approx(expected.after) and view.result.before == pytest.approx(expected.before)
    assert view.table.rowCount() == len(expected.tokens) == view.text.token_count()
    assert view.table.item(1, 4).text() == f"{expected.delta[1]:+.4f}" and view.table.item(0, 4).text() == ""
    assert "layer 2 · head 1" in view.summary.text() and "Δp" in view.summary.text()
    lines = view.export_csv(tmp_path / "a.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "position,token,p_before,p_after,delta_p" and len(lines) == len(expected.tokens) + 1
    panel._on_grid_clicked(0, 0)  # a left click shows the head large again
    assert panel.browser.viewTabs.currentIndex() == 0


def test_patching_shows_the_map_and_says_what_is_wrong_inline(qtbot, panel, tmp_path):
    view = panel.patchingView
    assert panel.findChild(object, "patchingView") is view
    view.cleanEdit.setText("the lazy dog")
    view.corruptEdit.setText("the lazy do")
    assert "12 tokens" in view.message.text() and "same length" in view.message.text()
    assert not view.runButton.isEnabled()
    view.corruptEdit.setText("the lazy d#g")
    assert "#" in view.message.text() and not view.runButton.isEnabled()  # the tokenizer's words, no traceback
    view.corruptEdit.setText("the lazy dog")  # clean into clean: nothing to restore, said inline
    view.runButton.click()
    qtbot.waitUntil(lambda: view._call is None, timeout=LONG)
    assert "same logit difference" in view.message.text() and view.result is None
    view.corruptEdit.setText("the fazy dog")
    view.runButton.click()
    qtbot.waitUntil(lambda: view.result is not None, timeout=LONG)
    r = view.result
    assert view.map.query_tokens == ["embedding", "1", "2"] and view.map.matrix.shape == (3, 12)
    # the last stream at the last position: all of the clean difference, within float32 rounding of the logits
    assert abs(view.map.matrix[2, 11] - 1.0) * abs(r.clean_logit_diff - r.corrupted_logit_diff) < 1e-4
    assert view.heads.rowCount() == 2 and view.heads.columnCount() == 2
    assert view.heads.item(1, 1).text() == f"{r.heads[MapName('self', 1)][1]:.2f}"
    assert "clean" in view.message.text() and "corrupted" in view.message.text() and "logit(" in view.message.text()
    lines = view.export_csv(tmp_path / "p.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "patched,position,token,restored" and len(lines) == 1 + 3 * 12 + 4
    assert view.export_png(tmp_path / "p.png").stat().st_size > 0
    view.positionEdit.setText("12")
    assert "position 12 is not one of the 12 positions" in view.message.text() and not view.runButton.isEnabled()
    view.positionEdit.setText("x")
    assert "not a whole number" in view.message.text() and not view.runButton.isEnabled()
    view.positionEdit.setText("5")
    assert view.runButton.isEnabled() and view.prefixEdit.isHidden() and view.streamCombo.isHidden()
    view.runButton.click()
    qtbot.waitUntil(lambda: view._call is None, timeout=LONG)
    assert view.result.position == 5 if view.result else "same logit difference" in view.message.text()


def _trained(tmp, name, arch, task, corpus):
    from fatstudio.core.training import train

    cfg = RunConfig(ModelConfig(arch=arch, l_max=16, L=2, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32),
                    DataConfig(corpus=str(corpus), task=task),
                    TrainConfig(steps=10, batch_size=4, eval_interval=10, eval_iters=1, sample_tokens=0, device="cpu"))
    for _ in train(cfg, run_dir=tmp / name):
        pass
    return Run.open(tmp / name).load_model()


@pytest.fixture(scope="module")
def other_models(tmp_path_factory, run_dir):
    tmp = tmp_path_factory.mktemp("archs")
    return {"bert": _trained(tmp, "bert", "bert", "masked_lm", run_dir.parent / "c.txt"),
            "edt": _trained(tmp, "edt", "edt", "seq2seq", "reverse")}


def test_patching_a_bert_reads_the_first_mask_or_the_position_given(qtbot, other_models, workspace):
    from fatstudio.core.inspect.patching import patch

    view, loaded = PatchingView(workspace), other_models["bert"]
    qtbot.addWidget(view)
    view.set_model(loaded)
    assert view.prefixEdit.isHidden() and view.streamCombo.isHidden()
    view.cleanEdit.setText("the [MASK]azy dog")
    view.corruptEdit.setText("the [MASK]azy do")
    assert "same length" in view.message.text() and not view.runButton.isEnabled()
    view.corruptEdit.setText("the [MASK]fzy dog")
    view.runButton.click()
    qtbot.waitUntil(lambda: view._call is None, timeout=LONG)
    want = patch(loaded.model, loaded.tokenizer, "the [MASK]azy dog", "the [MASK]fzy dog")
    r = view.result
    assert r is not None and r.position == want.position == 5  # [bos] t h e space [MASK]
    assert view.map.matrix.shape == (3, len(want.corrupt_tokens))
    assert view.map.matrix == pytest.approx(np.asarray(want.residual))
    assert "position 5" in view.message.text()
    view.positionEdit.setText("-2")
    view.runButton.click()
    qtbot.waitUntil(lambda: view._call is None, timeout=LONG)
    n = len(want.clean_tokens)
    assert view.result.position == n - 2 if view.result else "same logit difference" in view.message.text()


def test_patching_an_encoder_decoder_patches_the_sources_and_shows_the_decoder_s_stream(qtbot, other_models, workspace):
    from fatstudio.core.inspect.patching import patch

    view, loaded = PatchingView(workspace), other_models["edt"]
    qtbot.addWidget(view)
    view.set_model(loaded)
    assert not view.prefixEdit.isHidden() and not view.streamCombo.isHidden()
    view.cleanEdit.setText("abcd")
    view.corruptEdit.setText("abce")
    view.prefixEdit.setText("dc")
    view.positionEdit.setText("3")
    assert "position 3 is not one of the 3 positions of [bos] + prefix" in view.message.text()
    view.positionEdit.setText("")
    view.runButton.click()
    qtbot.waitUntil(lambda: view._call is None, timeout=LONG)
    want = patch(loaded.model, loaded.tokenizer, "abcd", "abce", prefix="dc")
    r = view.result
    assert r is not None and r.prefix_tokens == want.prefix_tokens and len(r.prefix_tokens) == 3
    assert view.map.matrix == pytest.approx(np.asarray(want.residual))  # the encoder's, over the source
    assert view.map.key_tokens == want.corrupt_tokens
    view.streamCombo.setCurrentIndex(view.streamCombo.findData("dec"))
    assert view.map.matrix == pytest.approx(np.asarray(want.decoder_residual))
    # the decoder's last stream, where it is read: all of the clean difference, within float32 rounding of the
    # logits (the fraction divides by d_clean - d_corrupted, small for a model trained a few steps)
    assert abs(view.map.matrix[-1, -1] - 1.0) * abs(r.clean_logit_diff - r.corrupted_logit_diff) < 1e-4
    labels = [view.heads.verticalHeaderItem(i).text() for i in range(view.heads.rowCount())]
    assert labels == ["encoder layer 1", "decoder layer 1", "cross-attention layer 1"]
    assert view.heads.item(2, 1).text() == f"{want.heads[MapName('cross', 0)][1]:.2f}"
    assert "of the decoder" in view.message.text()


def test_rows_measured_in_the_worker_reach_the_table_at_each_drain(panel):
    from fatstudio.core.inspect.ablation import KnockoutRow

    view = panel.ablationView
    view._sink.extend([KnockoutRow(ComponentName.parse("self/0/0"), 2.0, 0.5),
                       KnockoutRow(ComponentName.parse("mlp/0"), 1.4, -0.1)])
    view._drain()  # what the timer does every DRAIN_MS while the worker runs
    assert view.baseline == pytest.approx(1.5) and panel.ablationTable.rowCount() == 2
    assert panel.ablationTable.item(1, 2).text() == "-0.1000"  # sorted by Δ
    assert panel.ablationTable.item(1, 2).background().color().blue() > 150  # a fall: blue


def test_a_right_click_on_a_thumbnail_asks_for_its_menu(qtbot, panel):
    grid = panel.headGrid
    vb = grid.views[1][0]
    where = vb.sceneBoundingRect().center()
    event = types.SimpleNamespace(button=lambda: Qt.MouseButton.RightButton, scenePos=lambda: where,
                                  screenPos=lambda: where)
    with qtbot.waitSignal(grid.headMenuRequested, timeout=1000) as got:
        grid._on_clicked(event)
    assert got.args[:2] == [1, 0]
    with qtbot.assertNotEmitted(grid.headClicked):  # a right click does not show the head large
        grid._on_clicked(event)


def test_the_head_ablation_summary_shows_a_token_that_looks_like_markup(qtbot, workspace):
    from fatstudio.core.inspect.ablation import TextAblation

    view = HeadAblationView(workspace)
    qtbot.addWidget(view)
    view._on_result(TextAblation(["a", "<|endoftext|>", "b"], [None, 0.5, 0.4], [None, 0.1, 0.35],
                                 ComponentName.parse("self/0/1"), "zero"))
    assert "<code>&lt;|endoftext|&gt;</code>" in view.summary.text()  # the most changed token, not read as a tag


def test_the_summary_says_when_the_table_is_of_other_weights_than_those_chosen(qtbot, panel, run_dir):
    view = panel.ablationView
    view.set_sources(None, None, str(run_dir))  # the run training, no model in focus yet: its saved steps
    view.followCheck.setChecked(False)
    view.stepCombo.setCurrentIndex(view.stepCombo.findData(30))
    view.start()
    qtbot.waitUntil(lambda: not view.running, timeout=LONG)
    assert "step 30;" in view.status.text() and "The table is of" not in view.status.text()
    view.stepCombo.setCurrentIndex(view.stepCombo.findData(20))
    assert "The table is of step 30; the weights chosen now are step 20: Run measures them." in view.status.text()
    view.set_sources(panel.loaded, str(run_dir), str(run_dir))  # the run's final model (step 30) loaded
    view.stepCombo.setCurrentIndex(view.stepCombo.findData(None))
    assert view.stepCombo.currentText() == "model loaded · step 30"
    assert "The table is of" not in view.status.text()  # the same weights: step 30 of the same run
    view.set_sources(None)
    assert "The table is of step 30; no weights are chosen now." in view.status.text()
