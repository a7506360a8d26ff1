"""The Attention tab's import graph (`import_graph`: imports at module level, under ``if TYPE_CHECKING`` and inside
functions all count): the panel puts its parts together and no part imports it back. (That the whole package has no
circle, and that widgets import no panel, is `test_qt_import_graph.py`'s and import-linter's.)"""
from __future__ import annotations

from pathlib import Path

from import_graph import Package

import fatstudio

TAB = Package(Path(fatstudio.__file__).parent / "qt" / "panels" / "attention", "fatstudio.qt.panels.attention")


def test_the_panel_puts_its_parts_together_and_no_part_imports_it():
    edges, _ = TAB.graph()
    parts = set(edges) - {"panel", ""}
    assert {"ablation", "export", "head_ablation", "lens", "patching", "probes", "scores"} <= parts
    assert edges["panel"] >= parts  # the panel imports every part
    assert [m for m in parts if "panel" in edges[m]] == []
