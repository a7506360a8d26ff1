"""The app's runs list with run folders that disagree with themselves or hold files that are not files (issue
26, items 3 and 6): the other runs list and open; opening the damaged one says why inline, naming both files,
and nothing crashes."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from test_reliability import LONG, headless_run


def listed(qtbot, w) -> list[str]:
    w.refresh_runs()
    qtbot.waitUntil(lambda: not w.runs_loading, timeout=LONG)
    return sorted(r.path.name for r in w.train_view.runs.runs)


@pytest.mark.parametrize("damage", ["meta of another run", "tokenizer of another run"])
def test_a_run_whose_files_disagree_is_listed_and_opening_it_says_why(qtbot, window, runs_root, damage):
    from fatstudio.core.runs.folder import Run

    w = window
    good, bad = Path(headless_run(runs_root)), Path(headless_run(runs_root))
    if damage == "meta of another run":
        shutil.copy(good / "meta.json", bad / "meta.json")
        names = ("model.safetensors", "meta.json")
    else:
        text = (bad / "tokenizer.json").read_text().replace('"a":', '"\\u00e9":', 1)  # another alphabet
        (bad / "tokenizer.json").write_text(text)
        names = ("tokenizer.json", "meta.json")
    assert listed(qtbot, w) == sorted([good.name, bad.name])
    w.open_run(Run.open(bad))
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=LONG)
    assert "disagree" in w.last_error and all(n in w.last_error for n in names), w.last_error
    assert w.loaded_model is None
    assert w.train_view.errorLabel.isVisibleTo(w) and "disagree" in w.train_view.errorLabel.text()
    w.open_run(Run.open(good))  # the others still open
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)


def test_a_run_file_that_is_a_fifo_leaves_the_run_out_and_the_others_listed(qtbot, window, runs_root):
    w = window
    good, bad = Path(headless_run(runs_root)), Path(headless_run(runs_root))
    (bad / "metrics.jsonl").unlink()
    os.mkfifo(bad / "metrics.jsonl")
    assert listed(qtbot, w) == [good.name]  # never read (it would block the reading worker)


def test_the_curves_are_exported_beside_the_run_never_into_it(qtbot, window, runs_root):
    from fatstudio.core.runs.folder import Run

    w = window
    run = Path(headless_run(runs_root))
    w.open_run(Run.open(run))
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    plots = w.plots
    assert Path(plots.export_stem).parent == run.parent  # the dialog proposes a file beside the run
    before = sorted(p.name for p in run.iterdir())
    said = []
    plots.exported.connect(said.append)
    plots.ask_save_path = lambda kind: str(run / "metrics.csv")
    plots.curvesCsvButton.click()
    assert "inside the run folder" in said[-1] and sorted(p.name for p in run.iterdir()) == before
    plots.ask_save_path = lambda kind: f"{plots.export_stem}.csv"
    plots.curvesCsvButton.click()
    assert Path(f"{plots.export_stem}.csv").exists() and "saved" in said[-1]
