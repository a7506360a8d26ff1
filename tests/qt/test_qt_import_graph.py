"""The Qt layer's import graph, read from the source (`import_graph`: imports at module level, under
``if TYPE_CHECKING`` and inside functions all count), has no circle."""
from __future__ import annotations

from pathlib import Path

from import_graph import Package, circles

import fatstudio

QT = Package(Path(fatstudio.__file__).parent / "qt", "fatstudio.qt")

# Issue 33: one circle that another branch is breaking now; it goes from here when that branch lands. A circle
# that grows, splits or changes is not this one.
KNOWN = {
    frozenset({"panels.attention", "panels.attention_ablation", "panels.attention_export",
               "panels.attention_head_ablation", "panels.attention_lens", "panels.attention_patching",
               "panels.attention_probes", "panels.attention_scores"}),
}


def test_the_qt_imports_form_no_circle_but_the_known_ones():
    edges, _ = QT.graph()
    assert len(edges) > 30  # the walk found the Qt layer's modules
    unknown = circles(edges) - KNOWN
    assert not unknown, [sorted(c) for c in unknown]


def test_the_check_sees_a_circle_closed_under_type_checking_or_inside_a_function(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "c.py").write_text("import pkg.a\n")
    edges, in_functions = Package(tmp_path, "pkg").graph()
    assert circles(edges) == {frozenset({"a", "b", "c"})} and in_functions == {("b", "c")}
