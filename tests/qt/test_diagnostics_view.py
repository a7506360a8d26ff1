"""The Diagnostics list as a learner reads it: warnings counted in the tab's title, notes apart, an all-clear
line that says what was checked, a solved task's heads left alone, and the latest probe read off the GUI
thread."""
from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidget

from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.inspect.probes import save_probe
from fatstudio.core.names import MapName
from fatstudio.core.training import Evaluation, Probe
from fatstudio.core.training.diagnostics import head_findings


def lines(w) -> list[str]:
    view = w.findChild(QListWidget, "diagnosticsView")
    return [view.item(i).text() for i in range(view.count())]


def falling_rows(n=600):
    return [{"step": s, "train_loss": 1.5 + 2.5 * math.exp(-s / 100), "lr": 1e-3, "grad_norm": 0.5}
            for s in range(1, n + 1)]


def uniform_maps(T=6) -> AttentionMaps:
    """Two layers of four heads: heads 1 and 3 of layer 2 and every head of layer 1 average their past."""
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    looking = np.eye(T, k=-1)
    looking[0, 0] = 1.0
    second = np.stack([uniform, looking, uniform, looking])
    return AttentionMaps(list("abcdef"), None, {MapName("self", 0): np.stack([uniform] * 4), MapName("self", 1): second})


def test_warnings_notes_and_the_all_clear(qtbot, window):
    view = window.train_view
    view.set_diagnostics([("step 10 · a note", False), ("step 20 · a warning", True)])
    assert lines(window) == ["step 10 · a note", "step 20 · a warning"]
    assert view.samplesTabs.tabText(1) == "Diagnostics (1)"  # the warnings are counted, not the notes
    items = [view.diagnosticsView.item(i) for i in range(2)]
    assert [it.data(Qt.ItemDataRole.UserRole) for it in items] == [False, True]
    assert not items[0].icon().isNull() and items[0].icon().cacheKey() != items[1].icon().cacheKey()
    view.set_diagnostics([("step 10 · a note", False)], "Nothing unusual at step 10: loss finite and falling.")
    assert lines(window) == ["Nothing unusual at step 10: loss finite and falling.", "step 10 · a note"]
    assert view.samplesTabs.tabText(1) == "Diagnostics"


def test_a_solved_task_lists_no_head_and_an_unsolved_one_groups_them(qtbot, window, tmp_path):
    """The same probe (8 uniform heads, step 600): with the last evaluation's accuracy at 100% the task is
    solved, no head is listed and the all-clear line says why; at 60%, one note names them all, 1-based."""
    w = window
    maps = uniform_maps()
    probe = Probe(600, str(save_probe(tmp_path, 600, maps)), None, tuple(head_findings(maps, 600)))
    w.workspace.show_rows(falling_rows(), {"grad_clip": 1.0, "warmup": 100})
    w.workspace.take(Evaluation(600, 0.3, 0.3, accuracy=1.0))  # a loss far from 0: the accuracy says solved
    w.workspace.take(probe)
    w.workspace.diagnose()
    assert len(lines(w)) == 1, lines(w)
    assert lines(w)[0].startswith("Nothing unusual at step 600: loss finite and falling (3.75 → 1.51), no spikes")
    assert lines(w)[0].endswith("task solved (accuracy 100.0%), so heads are not judged.")
    w.workspace.show_rows(falling_rows(), {"grad_clip": 1.0, "warmup": 100})
    w.workspace.take(Evaluation(600, 0.3, 0.3, accuracy=0.6))
    w.workspace.take(probe)
    w.workspace.diagnose()
    assert lines(w)[1] == ("step 600 · all 4 heads of layer 1 and heads 1 and 3 of layer 2 attend uniformly: each "
                           "query averages every position it sees (a summary of the input) and picks none out. "
                           "Normal early in training and common in a first layer; heads that stay so in every layer "
                           "may be more than the task needs.")
    assert lines(w)[0].endswith("no dead heads at step 600.")
    assert w.train_view.samplesTabs.tabText(1) == "Diagnostics"  # a note


def test_an_opened_runs_latest_probe_is_read_in_a_worker(qtbot, window, monkeypatch, tmp_path):
    """Opening a run (or a run starting) lists its probes: the latest probe's file is read in a worker
    thread, never on the GUI thread, and its heads join the list when it is read."""
    import threading

    from fatstudio.core.training import diagnostics

    read_in = []
    latest = diagnostics.latest_head_findings

    def spy(run_dir):
        read_in.append(threading.current_thread() is threading.main_thread())
        return latest(run_dir)

    monkeypatch.setattr(diagnostics, "latest_head_findings", spy)
    dead = np.zeros((6, 6))
    dead[:, 0] = 1.0
    save_probe(tmp_path, 40, AttentionMaps(list("abcdef"), None, {MapName("self", 0): dead[None]}))
    w = window
    w.workspace.show_rows(falling_rows(100), {})
    w.workspace.list_probes(str(tmp_path))
    assert not any("head" in line for line in lines(w))  # not yet: the file is being read
    qtbot.waitUntil(lambda: any(line.startswith("step 40 · head 1 of layer 1 always attends to the same key")
                                for line in lines(w)), timeout=5000)
    assert read_in and not any(read_in)  # (once more when the Attention tab is made meanwhile)
