"""The Features tab (featuresView) on a tiny trained run: its header names the run and step, the Train section
trains a dictionary through the one job system (live curves, the quality numbers at the end, a folder saved in the
run's features/), Cancel stops it, the saved dictionaries are listed and chosen, and another focus clears what
was shown; what cannot be done is said inline."""
import pytest
from conftest import LONG

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
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


def test_weights_of_no_run_folder_say_so_inline_and_train_nothing(qtbot, panel, workspace, run_dir):
    workspace.set_model(Run.open(run_dir).load_model())  # weights of no run folder
    t = panel.train_section
    assert not t.trainButton.isEnabled() and "no run folder" in t.summary.text()
    assert not t.train()
