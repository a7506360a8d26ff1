"""The Attention tab's import graph, read from the source with `ast`: every import counts, at module level, under
``if TYPE_CHECKING`` and inside functions. The panel imports its parts and no part imports the panel, the parts form
no circle, and no widget imports a panel."""
from __future__ import annotations

import ast
from pathlib import Path

import fatstudio.qt

QT = Path(fatstudio.qt.__file__).parent
PANEL = "fatstudio.qt.panels.attention"


def module_name(path: Path) -> str:
    return ".".join(("fatstudio", *path.relative_to(QT.parent).with_suffix("").parts))


def imports(path: Path, name: str | None = None) -> set[str]:
    """Every name ``path`` (the module ``name``, else as its path names it) imports, as dotted paths (``from a
    import b`` gives a and a.b), relative ones resolved."""
    package = (name or module_name(path)).split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # every node: functions, TYPE_CHECKING too
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def attention_family() -> dict[str, set[str]]:
    """The Attention tab's modules and, for each, the others of them it imports."""
    paths = {module_name(p): p for p in (QT / "panels").glob("attention*.py")}
    return {m: imports(p) & set(paths) - {m} for m, p in paths.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (cycle := walk(n)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (cycle := walk(m)):
            return cycle
    return None


def test_the_attention_family_forms_no_circle_and_no_part_imports_the_panel():
    edges = attention_family()
    assert len(edges) >= 8 and PANEL in edges  # the panel and its parts were found
    assert find_cycle(edges) is None, " → ".join(find_cycle(edges) or [])
    assert [m for m, imported in edges.items() if PANEL in imported] == []
    assert edges[PANEL] == set(edges) - {PANEL}  # the panel puts every part together


def test_no_widget_imports_a_panel():
    widgets = {module_name(p): imports(p) for p in (QT / "widgets").glob("*.py")}
    assert len(widgets) > 10
    assert {m: sorted(i for i in imported if i.startswith("fatstudio.qt.panels")) for m, imported in widgets.items()
            if any(i.startswith("fatstudio.qt.panels") for i in imported)} == {}


def test_the_check_sees_imports_under_type_checking_and_inside_functions(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    part = tmp_path / "attention_part.py"
    part.write_text("from typing import TYPE_CHECKING\n\nfrom ..widgets.heatmap import HeatmapView\n\n"
                    "if TYPE_CHECKING:\n    from .attention import AttentionPanel\n\n\n"
                    "def f():\n    from . import attention_lens\n", encoding="utf-8")
    found = imports(part, "fatstudio.qt.panels.attention_part")
    assert {PANEL, "fatstudio.qt.panels.attention_lens", "fatstudio.qt.widgets.heatmap"} <= found
