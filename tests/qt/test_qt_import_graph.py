"""The Qt layer's import graph, read from the source (`import_graph`: imports at module level, under
``if TYPE_CHECKING`` and inside functions all count), has no circle."""
from __future__ import annotations

from pathlib import Path

from import_graph import Package, circles

import fatstudio

QT = Package(Path(fatstudio.__file__).parent / "qt", "fatstudio.qt")
PACKAGE = Package(Path(fatstudio.__file__).parent, "fatstudio")


def test_the_qt_imports_form_no_circle():
    edges, _ = QT.graph()
    assert len(edges) > 30  # the walk found the Qt layer's modules
    found = circles(edges)
    assert not found, [sorted(c) for c in found]


def test_the_whole_package_forms_no_circle():
    """The core, the Qt layer, the command line and the app's entry points together (issue 33)."""
    edges, _ = PACKAGE.graph()
    assert {"cli", "app", "qt.main_window", "core.app.workspace"} <= set(edges)
    found = circles(edges)
    assert not found, [sorted(c) for c in found]


def test_the_check_sees_a_circle_closed_under_type_checking_or_inside_a_function(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "c.py").write_text("import pkg.a\n")
    edges, in_functions = Package(tmp_path, "pkg").graph()
    assert circles(edges) == {frozenset({"a", "b", "c"})} and in_functions == {("b", "c")}
