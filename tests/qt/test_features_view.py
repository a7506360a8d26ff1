"""The Features tab (featuresView) on a tiny trained run: its header names the run and step, the Train section
trains a dictionary through the one job system (live curves, the quality numbers at the end, a folder saved in the
run's features/), Cancel stops it, the saved dictionaries are listed and chosen, and another focus clears what
was shown; what cannot be done is said inline."""
import shutil

import pytest
from conftest import LONG
from PySide6.QtCore import Qt

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.inspect.features.dictionary import load, saved_dictionaries
from fatstudio.core.runs.folder import Run
from fatstudio.qt.panels.features.panel import FeaturesPanel


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny gpt trained 20 steps, its weights saved at 10 and 20."""
    from fatstudio.core.training import train

    tmp = tmp_path_factory.mktemp("run")
    corpus = tmp / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=2, H=2, d_e=16, d_mlp=32), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=20, batch_size=4, eval_interval=10, eval_iters=2, checkpoint_interval=10,
                                sample_tokens=0, lr=1e-2, device="cpu"))
    for _ in train(cfg, run_dir=tmp / "run"):
        pass
    return tmp / "run"


@pytest.fixture
def panel(qtbot, workspace, wait_for_jobs):
    p = FeaturesPanel(workspace)
    qtbot.addWidget(p)
    p.resize(1300, 800)
    p.show()
    yield p
    workspace.features.cancel_training()
    wait_for_jobs(workspace)


def focus_on(qtbot, workspace, run_dir, step=None):
    workspace.set_model(Run.open(run_dir).load_model(step=step), str(run_dir))
    qtbot.waitUntil(lambda: not workspace.jobs.busy("features-list"), timeout=LONG)


def test_the_tab_is_in_the_window_with_its_names(window):
    tabs = window.viewTabs
    titles = [tabs.tabText(i) for i in range(tabs.count())]
    assert "Features" in titles
    view = tabs.widget(titles.index("Features"))
    assert view.objectName() == "featuresView" and view is window.features_panel
    assert view.feature_section is None  # its list and dashboard are made when the tab is first shown
    tabs.setCurrentWidget(view)
    assert view.feature_section is not None and view.feature_section.objectName() == "featuresFeatures"
    frame = 48  # the window manager's title bar and frame (main_window.FRAME)
    assert window.minimumSizeHint().height() <= 768 - frame  # the tab keeps the window fitting a 1366×768 screen
    for name in ("featuresFocusLabel", "featuresTrain", "featuresTrainButton", "featuresCancelButton",
                 "featuresProgress", "featuresCurves", "featuresDictionaries", "featuresPrompt", "featuresTarget",
                 "featuresGraphButton", "featuresEdit"):
        assert view.findChild(object, name) is not None, name


def test_the_header_names_the_run_and_step_and_the_train_section_offers_its_points_and_steps(qtbot, panel, workspace,
                                                                                             run_dir):
    t = panel.train_section
    assert not t.trainButton.isEnabled() and "Open a run" in t.summary.text()
    focus_on(qtbot, workspace, run_dir, step=10)
    assert panel.focusLabel.words() == f"Run: {run_dir.name} · step 10"
    assert t.pointCombo.values()[:2] == ["mlp/0", "mlp/1"] and t.pointCombo.value() == "self/0/resid_post"
    assert t.stepCombo.values() == [20, 10] and t.stepCombo.value() == 10
    assert t.trainButton.isEnabled() and not t.cancelButton.isEnabled()
    assert not t.curves.isVisible()  # no room taken until a training draws them


def test_weights_of_no_run_folder_say_so_inline_and_train_nothing(qtbot, panel, workspace, run_dir):
    workspace.set_model(Run.open(run_dir).load_model())  # weights of no run folder
    t = panel.train_section
    assert not t.trainButton.isEnabled() and "no run folder" in t.summary.text()
    assert not t.train()


def test_training_a_tiny_dictionary_shows_its_curves_and_quality_and_saves_it_in_the_run(qtbot, panel, workspace,
                                                                                         run_dir):
    focus_on(qtbot, workspace, run_dir)
    t = panel.train_section
    t.pointCombo.set_value("mlp/1")
    t.multSpin.setValue(2)
    t.kSpin.setValue(4)
    t.tokensSpin.setValue(20_000)
    events = []
    workspace.features.train_event.connect(events.append)
    assert t.train() and t.cancelButton.isEnabled() and not t.trainButton.isEnabled() and t.curves.isVisible()
    qtbot.waitUntil(lambda: workspace.features.chosen is not None, timeout=LONG)  # trained, saved, listed, read
    folder = run_dir / "features" / "mlp-1-step20"
    assert saved_dictionaries(run_dir) == [folder]
    d = load(folder)
    assert (d.kind, d.point_in, d.point_out, d.d_f, d.k) == ("transcoder", "mlp/1/in", "mlp/1/out", 32, 4)
    assert d.info["step"] == 20 and d.info["run"] == run_dir.name
    q = d.info["quality"]
    text = t.summary.text()
    assert f"explained variance <b>{q['explained_variance']:.3f}</b>" in text and "mean L0" in text
    assert "dead features" in text and str(folder) in text
    assert f"(on {q['tokens']:,} held-out validation tokens)" in text  # what each dead count is counted on
    assert "in training" in t.plots["dead_fraction"].titleLabel.text
    assert t.progressBar.value() == 1000 and t.trainButton.isEnabled() and not t.cancelButton.isEnabled()
    assert len(t.series["explained_variance"].x) == sum(e.kind == "progress" for e in events if hasattr(e, "kind")) > 0
    assert list(t.series["explained_variance"].x) == sorted(t.series["explained_variance"].x)  # against the tokens seen
    picked = panel.dictionaries.currentItem()
    assert picked is not None and picked.text().startswith("mlp/1 · step 20")
    assert workspace.features.chosen.saved.folder == str(folder)


def test_cancel_stops_the_training_and_saves_nothing(qtbot, panel, workspace, run_dir, wait_for_jobs):
    focus_on(qtbot, workspace, run_dir, step=10)
    t = panel.train_section
    t.pointCombo.set_value("self/0/resid_post")
    t.tokensSpin.setValue(50_000_000)  # far more than the test waits for
    progress = []
    workspace.features.train_event.connect(progress.append)
    assert t.train()
    qtbot.waitUntil(lambda: len(progress) >= 2, timeout=LONG)
    t.cancelButton.click()
    assert "cancelled" in t.summary.text() and t.trainButton.isEnabled() and not t.cancelButton.isEnabled()
    wait_for_jobs(workspace)  # the job's thread has ended
    assert not (run_dir / "features" / "self-0-resid_post-step10").exists()
    assert workspace.features.training is None and t.progressBar.value() == 0


def random_transcoder(run_dir, layer: int, step: int):
    import torch

    from fatstudio.core.inspect.features.dictionary import Dictionary, dictionary_folder

    torch.manual_seed(layer)
    d = Dictionary("transcoder", f"mlp/{layer}/in", f"mlp/{layer}/out", 16, 16, 32, 4, info={"step": step})
    torch.nn.init.normal_(d.W_dec)
    d.normalize_decoder()
    with torch.no_grad():
        d.W_enc.copy_(d.W_dec.T)
    return d.save(dictionary_folder(run_dir, f"mlp/{layer}", step))


def test_a_chosen_dictionary_lists_its_features_and_a_feature_shows_its_dashboard_and_can_be_zeroed(
        qtbot, panel, workspace, run_dir):
    folder = random_transcoder(run_dir, 0, 10)
    workspace.set_prompt_text("the lazy dog")
    focus_on(qtbot, workspace, run_dir, step=20)  # the dictionary is of step 10's weights: the header says so
    items = {panel.dictionaries.item(r).text(): r for r in range(panel.dictionaries.count())}
    row = items["mlp/0 · step 10 · transcoder"]  # one short line, the details in its tooltip
    tip = panel.dictionaries.item(row).toolTip()
    assert "transcoder mlp/0/in → mlp/0/out" in tip and "k = 4" in tip and str(folder) in tip
    panel.dictionaries.setCurrentRow(row)
    assert panel.readingBar.isVisible() and "Reading" in panel.dictionaryLabel.text()  # the validation split
    section = panel.feature_section
    qtbot.waitUntil(lambda: section.list.table.rowCount() == 32, timeout=LONG)
    assert not panel.readingBar.isVisible() and "k = 4" in panel.dictionaryLabel.text()
    assert panel.focusLabel.words() == (f"Run: {run_dir.name} · step 20 — this view: the weights of step 10, the "
                                        "chosen dictionary's")
    assert "32 features" in section.summary.text() and "validation tokens" in section.summary.text()
    assert "held-out" in section.summary.text()
    qtbot.waitUntil(lambda: section.dashboard.dashboard is not None, timeout=LONG)  # the first feature's
    section.list.select_feature(6)
    qtbot.waitUntil(lambda: section.dashboard.dashboard.stats.index == 6, timeout=LONG)
    assert section.dashboard.title.text().startswith("<b>Feature 7</b>")
    assert section.dashboard.promptTokens.toPlainText() == "the lazy dog"  # the Prompt text, tinted
    edit = panel.edit_section
    assert edit.target.feature == 6 and edit.target.folder == str(folder) and edit.zeroButton.isEnabled()
    assert "feature 7 of mlp/0 (step 10)" in edit.title.text() and "the lazy dog" in edit.title.text()
    edit.clampValue.setValue(4.0)
    edit.clampButton.click()
    result = edit.result
    qtbot.waitUntil(lambda: result.nextTable.rowCount() > 0, timeout=LONG)
    assert "feature 7 of mlp/0 clamped to 4 at every position" in result.summary.text()
    assert result.changes.text.toPlainText() == "the lazy dog"
    assert result.nextTable.item(0, 3).text().startswith(("+", "-"))
    workspace.set_prompt_text("the fox")  # the dashboard follows the Prompt text; the edit keeps its prompt
    qtbot.waitUntil(lambda: section.dashboard.promptTokens.toPlainText() == "the fox", timeout=LONG)
    assert result.nextTable.rowCount() > 0 and edit.target.prompt == "the lazy dog"
    workspace.set_model(Run.open(run_dir).load_model(step=10), str(run_dir))  # another focus: all of it goes
    assert section.list.table.rowCount() == 0 and section.dashboard.dashboard is None
    assert edit.target is None and result.nextTable.rowCount() == 0 and workspace.features.chosen is None
    assert panel.dictionaries.currentItem() is None and panel.focusLabel.words() == f"Run: {run_dir.name} · step 10"


def test_the_graph_says_inline_what_it_needs_then_lists_its_nodes_and_a_feature_node_is_the_edit_target(
        qtbot, panel, workspace, run_dir):
    shutil.rmtree(run_dir / "features", ignore_errors=True)  # other tests' dictionaries
    focus_on(qtbot, workspace, run_dir, step=10)
    g = panel.graph_section
    panel.show_page(g)
    assert panel.pages.currentIndex() == 1
    g.prompt.setText("the lazy")
    assert g.build()
    qtbot.waitUntil(lambda: "no transcoder of mlp/0, mlp/1 at step 10" in g.summary.text(), timeout=LONG)
    for layer in (0, 1):
        random_transcoder(run_dir, layer, 10)
    assert g.build()
    qtbot.waitUntil(lambda: g.nodes.rowCount() > 0, timeout=LONG)
    graph = workspace.features.graph
    assert g.nodes.rowCount() == len(graph.nodes) and "Logit of" in g.summary.text()
    assert g.view.graph is graph
    shown = [float(g.nodes.item(r, 2).text()) for r in range(g.nodes.rowCount())]
    assert shown == sorted(shown, reverse=True)  # the most influential first
    row = next(r for r in range(g.nodes.rowCount()) if g.nodes.item(r, 1).text() == "feature")
    g.nodes.setCurrentCell(row, 0)
    target = panel.edit_section.target
    node = graph.nodes[g.nodes.item(row, 0).data(Qt.ItemDataRole.UserRole)]
    assert target is not None and target.folder.endswith(f"mlp-{node.layer}-step10") and target.position == node.position
    assert target.prompt == "the lazy" and not panel.edit_section.everywhere.isChecked()
    assert g.view.marked == graph.nodes.index(node)  # the row chosen: its node ringed in the graph
    other = next(i for i, n in enumerate(graph.nodes) if n.kind == "feature" and n is not node)
    clicked = []
    g.nodeClicked.connect(clicked.append)
    g.view.mark(other)
    g.view.nodeClicked.emit(graph.nodes[other])  # as a click on it does
    assert clicked == [graph.nodes[other]] and g.nodes.item(g.nodes.currentRow(), 0).data(Qt.ItemDataRole.UserRole) == other


def test_a_glass_box_runs_dictionary_says_which_known_features_it_found_and_missed(qtbot, panel, workspace,
                                                                                  tmp_path):
    from fatstudio.core.runs.glass_box import build_glass_box

    run = build_glass_box("superposition", tmp_path / "glass").run_dir
    focus_on(qtbot, workspace, run)
    t = panel.train_section
    assert t.stepCombo.values() == [0]
    t.pointCombo.set_value("mlp/0/out")
    t.multSpin.setValue(2)
    t.tokensSpin.setValue(20_000)
    assert t.train()
    qtbot.waitUntil(lambda: workspace.features.chosen is not None, timeout=LONG)
    recovery = workspace.features.chosen.recovered
    assert len(recovery.cosine) == 128 and panel.recovered.isVisible()
    text = panel.recovered.text()
    assert f"found {len(recovery.found)} of the 128 known features" in text
    missed = ", ".join(str(i + 1) for i in recovery.missed) or "none"
    assert f"<b>Missed:</b> {missed}" in text
    workspace.set_model(None)
    assert not panel.recovered.isVisible()


def test_the_intervene_title_keeps_the_prompt_s_spaces_leading_ones_too(panel):
    from PySide6.QtGui import QTextDocument

    from fatstudio.core.app.features import EditTarget

    edit = panel.edit_section
    edit.set_target(EditTarget("f", 2, "  the  lazy", 1, 10, "feature 3 of mlp/0"))
    shown = QTextDocument()
    shown.setHtml(edit.title.text())
    assert shown.toPlainText() == "Intervene: feature 3 of mlp/0 on “  the  lazy”"
