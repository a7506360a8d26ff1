"""The core's import graph, read from the source with `ast`: every import counts, at module level, under
``if TYPE_CHECKING`` and inside functions. It has no circle, and the imports made inside functions are only
the deliberate lazy ones: heavy modules (torch, tokenizers) that a light module leaves out of its import."""
from __future__ import annotations

import ast
from pathlib import Path

import fatstudio.core

CORE = Path(fatstudio.core.__file__).parent
PACKAGE = "fatstudio.core"

# (importer, imported) pairs imported inside a function on purpose: the importer stays importable without
# torch or tokenizers (the window opens without them; the preview and the probe files are read without them).
LAZY = {
    ("data.preview", "data.corpora"), ("data.preview", "data.tokenization"),
    ("runs.tokenizer_lab", "data.chars"),
    ("inspect.head_scores", "inference.generation"), ("inspect.head_scores", "data.tokenization"),
    ("inspect.probes", "inference.generation"),
    ("runs.folder", "runs.tensorboard_log"), ("runs.folder", "inspect.probes"), ("runs.weights", "device"),
    ("runs.weights", "model"), ("runs.folder", "data.tokenization"),
    ("runs.export_hf", "model.positions"), ("runs.export_hf", "data.tokenization"), ("runs.export_hf", "runs.folder"),
    ("runs.export_hf", "runs.targets"),
    ("runs.tokenizer_lab", "data.corpora"), ("runs.tokenizer_lab", "runs.folder"),
    ("paper.pseudocode", "device"), ("paper.pseudocode", "model"), ("paper.pseudocode", "model.hooks"),
    ("training.estimate", "training.trainer"),
    ("app.workspace", "training.trainer"),  # the training job imports the trainer (torch) in its own thread
    ("app.workspace", "runs.folder"),  # the default runs folder (platformdirs), read when first asked for
    ("app.corpus", "data.preview"),  # the corpus job reads the corpus and trains its tokenizer (tokenizers)
}


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in CORE.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """(imported core module, inside a function) for every import of a core module in ``path``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    found: list[tuple[str, bool]] = []

    def resolve(node: ast.ImportFrom) -> list[str]:
        if node.level:
            base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.startswith(PACKAGE + "."):
            target = node.module[len(PACKAGE) + 1:]
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
                found.extend((a.name[len(PACKAGE) + 1:], inside) for a in child.names
                             if a.name.startswith(PACKAGE + ".") and a.name[len(PACKAGE) + 1:] in known)
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def graph() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    mods = modules()
    known = set(mods)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    in_functions = set()
    for name, path in mods.items():
        for target, inside in imports(name, path, known):
            if target != name:
                edges[name].add(target)
                if inside:
                    in_functions.add((name, target))
    return edges, in_functions


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


def test_the_core_imports_form_no_circle_counting_imports_inside_functions():
    edges, _ = graph()
    assert len(edges) > 30  # the walk found the core's modules
    assert find_cycle(edges) is None, " → ".join(find_cycle(edges) or [])


def test_imports_inside_functions_are_only_the_deliberate_lazy_ones():
    _, in_functions = graph()
    assert in_functions <= LAZY, sorted(in_functions - LAZY)


def test_the_check_sees_a_circle_closed_inside_a_function():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    path = CORE / "training" / "diagnostics.py"
    assert ("data.stats", False) in imports("training.diagnostics", path, set(modules()))
