"""The Experiments tab: a tiny sweep of the current settings queued from the tab, its table filled as the runs
(each its own process) finish, a row's runs opened in the Training tab and overlaid on its plot."""
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
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
    names = {Path(r["runs"][0]).name for r in rows}  # the runs list shows them, each named by its variant
    sweep_name = Path(rows[0]["runs"][0]).name.split("-", 2)[2]  # the variant (what varies), the seed, the sweep
    assert names == {f"lr=0.001-s1337-{sweep_name}", f"lr=0.03-s1337-{sweep_name}"} and sweep_name.startswith("sweep-")
    assert t.horizontalHeaderItem(1).text() == "seed 1337"  # the seed, not its place
    qtbot.waitUntil(lambda: names <= {run.name for run in w.runs_list.runs}, timeout=60_000)
    tree = w.runs_list.tree
    tips = [tree.topLevelItem(i).toolTip(0) for i in range(tree.topLevelItemCount())]
    assert any('train.lr = 0.03, train.optimizer = "adamw", seed 1337' in tip for tip in tips), tips  # its variant
    from PySide6.QtWidgets import QStyleOptionViewItem

    delegate, modes = tree.itemDelegateForColumn(0), {}
    for i in range(tree.topLevelItemCount()):  # a sweep run's name elides at its end: its variant and seed show
        option = QStyleOptionViewItem()
        delegate.initStyleOption(option, tree.model().index(i, 0))
        modes[tree.topLevelItem(i).text(0)] = option.textElideMode
    assert {modes[n] for n in names} == {Qt.TextElideMode.ElideRight}


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


def test_keys_complete_with_their_types_and_the_type_shows_beside_each_key(qtbot, window):
    from PySide6.QtWidgets import QLineEdit

    from fatstudio.qt.panels.experiments import KEY, VALUES

    ex = window.experiments_panel
    window.viewTabs.setCurrentWidget(ex)
    assert ex.kinds() == ["one of adamw, sgd, muon", ""]  # the row the tab opens with
    t = ex.varyTable
    t.setCurrentCell(1, KEY)
    t.editItem(t.item(1, KEY))
    editor = t.findChild(QLineEdit, "varyKeyEdit")
    assert editor is not None
    completer = editor.completer()
    completer.setCompletionPrefix("lr")  # any part of a key
    shown = [completer.completionModel().index(i, 0).data() for i in range(completer.completionCount())]
    lr = window.settings.config.train.lr
    assert f"train.lr: a number; now {lr:g}" in shown and any(s.startswith("train.min_lr: a number") for s in shown)
    assert all("lr" in s.split(":")[0] for s in shown), shown
    completer.setCompletionPrefix("optim")
    assert completer.currentCompletion() == "train.optimizer"  # the key alone goes into the cell
    qtbot.keyClicks(editor, "train.warmup")
    t.commitData(editor)
    t.closeEditor(editor, t.itemDelegate().EndEditHint.NoHint)
    assert t.item(1, KEY).text() == "train.warmup" and ex.kinds()[1] == "whole number"
    assert t.item(1, 1).toolTip() == f"train.warmup: a whole number; now {window.settings.config.train.warmup}"
    ex.set_plan([("model.positions", "learned, rope"), ("train.nope", "1"), ("train.seed", "1, 2"),
                 ("model.d_attn", "none, 8")], seeds=2, budget=3)
    assert ex.kinds() == ["one of learned, sinusoidal, rope, alibi, relative, none", "no such key", "set by the seeds",
                          "whole number or none"]
    assert t.item(1, 1).toolTip().startswith("train.nope: no such key")
    assert t.item(0, VALUES).text() == "learned, rope" and ex.vary()[0] == "model.positions=learned, rope"


def test_the_table_names_each_seed_and_says_when_a_p_value_rests_on_too_few_seeds(qtbot, window):
    from fatstudio.core.training.sweep import Row, Sweep, few_seeds, welch_df

    ex = window.experiments_panel
    base, other = [1.50, 1.52], [1.40, 1.46]
    sweep = Sweep([Row({"train.lr": 1e-3}, base, [1337, 1338], ["a", "b"]),
                   Row({"train.lr": 3e-3}, other, [1337, 1338], ["c", "d"])], unit="bits/byte")
    ex._finished(sweep.to_dict())
    t = ex.table
    headers = [t.horizontalHeaderItem(c).text() for c in range(t.columnCount())]
    assert headers == ["variant", "seed 1337", "seed 1338", "mean (bits/byte)", "sd", "p (Welch)"]
    p = t.item(1, 5)
    assert p.text() == f"{sweep.p_value(1):.3g} ⚠"
    df = welch_df(other, base)
    assert f"(df ≈ {df:.1f})" in p.toolTip() and few_seeds(df) in p.toolTip()
    said = ex.statusLabel.text()
    assert said.startswith("Sweep done: 4 of 4 runs gave a value. ⚠ p-values: Welch's df ≈ 1.2: too few seeds")
    five = Sweep([Row({"train.lr": 1e-3}, [1.50, 1.52, 1.49, 1.55, 1.51], list(range(7, 12))),
                  Row({"train.lr": 3e-3}, [1.40, 1.46, 1.43, 1.45, 1.41], list(range(7, 12)))])
    ex._finished(five.to_dict())
    assert t.horizontalHeaderItem(1).text() == "seed 7" and "⚠" not in t.item(1, 7).text()
    assert "⚠" not in ex.statusLabel.text()
