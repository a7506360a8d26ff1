"""An evaluation does not stop the GUI thread for the Attention tab while that tab is hidden: its probe maps
are handed over, and drawn, when the tab is shown (bench/bench_eval_stall.py measures the gaps)."""
from __future__ import annotations

import numpy as np

from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.inspect.probes import save_probe
from fatstudio.core.names import MapName
from fatstudio.core.training import Probe


def test_probes_wait_for_the_attention_tab_and_go_at_once(qtbot, window, tmp_path, monkeypatch):
    w = window
    panel = w.attention_panel  # made, as when the tab was shown once
    calls: list[tuple] = []
    monkeypatch.setattr(panel, "add_probe", lambda step, path, scores=None: calls.append(("add", step)))
    monkeypatch.setattr(panel, "set_probes", lambda paths: calls.append(("set", sorted(paths))))
    w.viewTabs.setCurrentWidget(w.train_view)
    w.workspace.list_probes(str(tmp_path))  # the run that trains: no probes yet
    calls.clear()
    T = 5
    maps = AttentionMaps(list("abcde"), None, {MapName("self", 0): np.tile(np.eye(T), (2, 1, 1))})
    for step in (100, 200, 300):
        w.workspace.take(Probe(step, str(save_probe(tmp_path, step, maps)), None, ()))
    assert calls == []  # hidden: nothing drawn at the evaluations
    w.viewTabs.setCurrentWidget(w._attention_host)
    assert calls == [("set", [100, 200, 300])]  # shown: every step at once, one drawing
    calls.clear()
    w.workspace.take(Probe(400, str(save_probe(tmp_path, 400, maps)), None, ()))
    assert calls == [("add", 400)]  # shown: at once
    w.viewTabs.setCurrentWidget(w.train_view)
    w.viewTabs.setCurrentWidget(w._attention_host)
    assert calls == [("add", 400)]  # nothing more to hand over
