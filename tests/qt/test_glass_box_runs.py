"""File → Add glass-box model builds a model of hand-set weights (`core.runs.glass_box`) as a run in the runs
folder, in a worker; the runs list shows it as a glass box with its construction, and it opens like any run."""
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from fatstudio.core.runs.folder import Run

LONG = 60_000


def test_add_glass_box_model_lists_and_opens_it_with_its_construction(qtbot, window, runs_root):
    w = window
    w.findChild(QAction, "glassBoxInductionAction").trigger()
    built = runs_root / "glass-box-induction"
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)  # listed and opened: its model loaded
    assert Run.open(built).info.glass_box == "induction" and w.loaded_model.config.data.corpus == "repeat"
    runs = w.train_view.runs
    qtbot.waitUntil(lambda: runs.selected() is not None and runs.selected().path == built, timeout=LONG)
    row = runs.tree.currentItem()
    assert [row.text(1), row.text(2)] == ["glass box", "–"]
    assert "previous-token head" in row.toolTip(0) and "induction head" in row.toolTip(0)
    status = w.train_view.findChild(QLabel, "statusLabel").text()
    assert status.startswith("Opened glass-box-induction: A glass-box model, built by hand") and "W_o" in status

    w.findChild(QAction, "glassBoxInductionAction").trigger()  # a second one: a new name, the first kept
    qtbot.waitUntil(lambda: (runs_root / "glass-box-induction-2").is_dir(), timeout=LONG)
    assert Run.open(built).info.glass_box == "induction"


def test_add_the_superposition_model(qtbot, window, runs_root):
    window.findChild(QAction, "glassBoxSuperpositionAction").trigger()
    qtbot.waitUntil(lambda: window.loaded_model is not None, timeout=LONG)
    assert (runs_root / "glass-box-superposition" / "known_features.safetensors").is_file()
    assert window.loaded_model.config.model.d_mlp == 676


def test_a_glass_box_has_no_curves_to_show_and_nothing_to_resume(qtbot, window, runs_root):
    window.findChild(QAction, "glassBoxInductionAction").trigger()
    qtbot.waitUntil(lambda: window.loaded_model is not None, timeout=LONG)
    runs, plots = window.train_view.runs, window.train_view.plots
    qtbot.waitUntil(lambda: runs.selected() is not None, timeout=LONG)
    assert runs.selected().info.glass_box == "induction"
    assert plots.stack.currentWidget() is plots.noCurvesLabel and not plots.lossPlot.isVisibleTo(plots)
    assert "built by hand: no training curves" in plots.noCurvesLabel.text()
    assert not runs.resumeButton.isEnabled() and not runs.resumeSpin.isEnabled()
    assert "nothing to resume" in runs.resumeButton.toolTip() and runs.openButton.isEnabled()
    plots.clear()  # a run trained next: its curves in their place again
    assert plots.stack.currentWidget() is not plots.noCurvesLabel and plots.lossPlot.isVisibleTo(plots)
