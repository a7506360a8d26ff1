"""A package's import graph, read from the source with `ast`: every import counts, at module level, under
``if TYPE_CHECKING`` and inside functions (for `tests/core/test_import_graph.py` and
`tests/qt/test_qt_import_graph.py`)."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Package:
    """A package's folder and dotted name; its modules are named relative to it ("training.trainer")."""

    root: Path
    name: str

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def modules(self) -> dict[str, Path]:
        return {self.module_name(p): p for p in self.root.rglob("*.py")}

    def imports(self, module: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
        """(imported module of the package, inside a function) for every such import in ``path``."""
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = [p for p in package if p]
        found: list[tuple[str, bool]] = []

        def resolve(node: ast.ImportFrom) -> list[str]:
            if node.level:
                if node.level - 1 > len(package):
                    return []  # above the package
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module == self.name:
                target = ""
            elif node.module and node.module.startswith(self.name + "."):
                target = node.module[len(self.name) + 1:]
            else:
                return []
            subs = [f"{target}.{a.name}".lstrip(".") for a in node.names if f"{target}.{a.name}".lstrip(".") in known]
            return subs or ([target] if target in known else [])

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, ast.ImportFrom):
                    found.extend((t, inside) for t in resolve(child))
                elif isinstance(child, ast.Import):
                    found.extend((a.name[len(self.name) + 1:], inside) for a in child.names
                                 if a.name.startswith(self.name + ".") and a.name[len(self.name) + 1:] in known)
                visit(child, inside)

        visit(ast.parse(path.read_text(encoding="utf-8")), False)
        return found

    def graph(self) -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
        """Each module's imports of the package's modules, and the (importer, imported) pairs imported inside a
        function."""
        mods = self.modules()
        known = set(mods)
        edges: dict[str, set[str]] = {m: set() for m in mods}
        in_functions = set()
        for name, path in mods.items():
            for target, inside in self.imports(name, path, known):
                if target != name:
                    edges[name].add(target)
                    if inside:
                        in_functions.add((name, target))
        return edges, in_functions


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports (its first module again at the end), or None."""
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


def circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """The modules that import one another, round a circle, each group as a whole (a strongly connected
    component of more than one module)."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for n in edges[todo.pop()] - seen:
                seen.add(n)
                todo.append(n)
        return seen

    reach = {m: reachable(m) for m in edges}
    return {frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in edges if m in reach[m]}
