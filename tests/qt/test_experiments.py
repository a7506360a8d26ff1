"""The Experiments tab: a tiny sweep of the current settings queued from the tab, its table filled as the runs
(each its own process) finish, a row's runs opened in the Training tab and overlaid on its plot."""
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QPushButton
from test_main_window import set_tiny

SWEEP_WAIT = 300_000  # ms: each run is a process that imports torch, on a slow shared machine


def test_a_tiny_sweep_fills_the_table_and_its_rows_open_and_overlay(qtbot, window, runs_root, tmp_path):
    w = window
    corpus = tmp_path / "c.txt"
    corpus.write_text("héllo wörld, hello transformers.\n" * 100, encoding="utf-8")
    set_tiny(w, steps=50, corpus=str(corpus))
    ex = w.experiments_panel
    w.viewTabs.setCurrentWidget(ex)
    ex.set_plan([("train.lr", "1e-3, 3e-2"), ("train.optimizer", "adamw")], seeds=1, budget=4)
    filled, said = [], []
    ex.sweepReported.connect(lambda d: filled.append(sum(len(r["values"]) for r in d["rows"])))
    ex.sweepReported.connect(lambda d: said.append(ex.statusLabel.text()))  # after the table shows it
    with qtbot.waitSignal(ex.sweepFinished, timeout=SWEEP_WAIT) as done:
        ex.findChild(QPushButton, "runSweepButton").click()
        assert ex.running and not ex.runButton.isEnabled()
    rows = done.args[0]["rows"]
    assert filled == [1, 2]  # the table was filled run by run
    assert said == ["Running: 1 of 2 runs done.", "Running: 2 of 2 runs done."]
    assert [r["variant"] for r in rows] == [{"train.lr": 0.001, "train.optimizer": "adamw"},
                                           {"train.lr": 0.03, "train.optimizer": "adamw"}]
    assert all(isinstance(r["values"][0], float) for r in rows)
    assert all(Path(r["runs"][0]).parent == runs_root for r in rows)
    t = ex.table
    assert t.rowCount() == 2 and "(baseline)" in t.item(0, 0).text()
    assert float(t.item(1, 1).text()) == pytest.approx(rows[1]["values"][0], abs=1e-4)
    assert "Sweep done: 2 of 2" in ex.statusLabel.text() and ex.runButton.isEnabled()
    assert not ex.openButton.isEnabled()  # nothing selected yet

    t.selectRow(0)
    ex.findChild(QPushButton, "openRowButton").click()
    assert w.run_dir == rows[0]["runs"][0] and w.viewTabs.currentWidget() is w.train_view
    t.selectRow(1)
    ex.findChild(QPushButton, "overlayRowButton").click()
    assert w.plots.overlays() == [Path(rows[1]["runs"][0]).name]
    names = {Path(r["runs"][0]).name for r in rows}  # the runs list shows them
    qtbot.waitUntil(lambda: names <= {run.name for run in w.runs_list.runs}, timeout=60_000)
    tree = w.runs_list.tree
    tips = [tree.topLevelItem(i).toolTip(0) for i in range(tree.topLevelItemCount())]
    assert any('train.lr = 0.03, train.optimizer = "adamw", seed 1337' in tip for tip in tips), tips  # its variant


def test_bad_keys_are_said_inline(qtbot, window):
    ex = window.experiments_panel
    ex.set_plan([("train.nope", "1, 2")], seeds=1, budget=3)
    ex.start()
    qtbot.waitUntil(lambda: not ex.running, timeout=60_000)
    said = ex.statusLabel.text()  # the core's message, without the command line's "--vary"
    assert said.startswith("train.nope: no such key; give table.key") and ex.runButton.isEnabled(), said
    ex.set_plan([], seeds=1, budget=3)
    ex.start()
    assert "at least one key" in ex.statusLabel.text() and not ex.running
    ex.set_plan([("train.lr", " ")], seeds=1, budget=3)
    ex.start()
    assert ex.statusLabel.text().startswith("train.lr: give its values") and not ex.running
    ex.set_plan([("train.lr", "1e-3"), ("train.lr", "3e-3")], seeds=1, budget=3)
    ex.start()
    assert ex.statusLabel.text().startswith("train.lr is in two rows") and not ex.running
    ex.set_plan([("train.weight_decay", "-1")], seeds=1, budget=2)  # refused before any run trains
    ex.start()
    qtbot.waitUntil(lambda: not ex.running, timeout=60_000)
    assert ex.statusLabel.text().startswith("the run of train.weight_decay=-1.0, seed 1337: train.weight_decay = "
                                            "-1.0 is not allowed"), ex.statusLabel.text()
    assert not list(window.workspace.runs_root.glob("sweep-*"))
