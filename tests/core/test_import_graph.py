"""The core's import graph, read from the source with `ast`: every import counts, at module level, under
``if TYPE_CHECKING`` and inside functions. It has no circle, and the imports made inside functions are only
the deliberate lazy ones: heavy modules (torch, tokenizers) that a light module leaves out of its import."""
from __future__ import annotations

from pathlib import Path

from import_graph import Package, find_cycle

import fatstudio.core

CORE = Package(Path(fatstudio.core.__file__).parent, "fatstudio.core")

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
    # the Features tab's jobs (torch) in their own threads; the graph's model check and a node's folder once a
    # model is loaded
    *(("app.features", f"inspect.features.{m}") for m in ("dashboard", "dictionary", "graph", "interventions",
                                                           "replacement", "training")),
    ("app.features", "runs.folder"), ("app.features", "runs.glass_box"),
    ("runs.glass_box", "model"),  # building a glass box's model (torch), not listing runs
}


def test_the_core_imports_form_no_circle_counting_imports_inside_functions():
    edges, _ = CORE.graph()
    assert len(edges) > 30  # the walk found the core's modules
    assert find_cycle(edges) is None, " → ".join(find_cycle(edges) or [])


def test_imports_inside_functions_are_only_the_deliberate_lazy_ones():
    _, in_functions = CORE.graph()
    assert in_functions <= LAZY, sorted(in_functions - LAZY)


def test_the_check_sees_a_circle_closed_inside_a_function():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    path = CORE.root / "training" / "diagnostics.py"
    assert ("data.stats", False) in CORE.imports("training.diagnostics", path, set(CORE.modules()))
