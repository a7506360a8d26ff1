"""The Attention panel's logit lens (``lensView``): filled from the probe files of a tiny training run, scrubbed by
the probe slider, a column's attribution in bars, measured for the user's text in a worker, the refusal of a
model whose output cannot be split, an older run's files, and the CSV export."""
import csv
import html
import sys

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QWidget
from test_attention import make_loaded

from fatstudio import ModelConfig, RunConfig
from fatstudio.core.config import DataConfig, TrainConfig
from fatstudio.core.inference import generation
from fatstudio.core.inspect.probe_lens import ATTRIBUTED, measure
from fatstudio.core.inspect.probes import list_probes, load_probe_lens
from fatstudio.core.names import MapName
from fatstudio.qt.panels.attention.lens import NO_LENS, TEXT_ATTRIBUTED
from fatstudio.qt.panels.attention.panel import AttentionPanel
from fatstudio.qt.widgets.attribution_bars import part_label

LONG = 60_000  # ms: a worker on a slow, shared machine


@pytest.fixture(scope="module")
def lens_run(tmp_path_factory):
    """A tiny gpt run with evaluations (and so lenses) at steps 10, 20, 30."""
    from fatstudio.core.training import train

    tmp = tmp_path_factory.mktemp("lens")
    corpus = tmp / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=2, H=2, d_e=16, d_mlp=32), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=30, batch_size=4, eval_interval=10, eval_iters=1, sample_tokens=0, lr=1e-2,
                                device="cpu"))
    list(train(cfg, run_dir=tmp / "run"))
    return tmp / "run"


@pytest.fixture
def panel(qtbot, workspace):
    p = AttentionPanel(workspace)
    qtbot.addWidget(p)
    p.resize(1100, 900)
    p.show()
    qtbot.waitExposed(p)
    return p


def test_the_lens_fills_from_the_probe_files_and_the_slider_scrubs_it(qtbot, panel, lens_run, tmp_path):
    paths = list_probes(lens_run)
    panel.set_probes(paths)
    view = panel.findChild(QWidget, "lensView")
    assert view is panel.lensView and view.isVisible() and view.body.isVisible()
    saved = load_probe_lens(paths[30])
    assert view.lens is not None and view.lens.top_tokens == saved.top_tokens and "step 30" in view.captionLabel.text()
    assert view.grid.height() >= view.grid.header_height + 3 * view.grid.row_height  # L + 1 = 3 rows
    panel.probeSlider.setValue(0)  # back to the first evaluation
    first = load_probe_lens(paths[10])
    np.testing.assert_array_equal(view.lens.top_probs, first.top_probs)
    assert "step 10" in view.captionLabel.text() and not np.allclose(first.top_probs, saved.top_probs)
    # the last column's attribution is drawn; a click on another attributed column shows its parts
    T = len(first.tokens)
    assert view.position == T - 1 and view.bars.values == pytest.approx(first.attribution.parts[-1].tolist())
    r = view.grid.cell_rect(1, T - 2)
    qtbot.mouseClick(view.grid, Qt.MouseButton.LeftButton, pos=QPoint(int(r.center().x()), int(r.center().y())))
    assert view.position == T - 2 and view.bars.values == pytest.approx(first.attribution.parts[-2].tolist())
    assert [part_label(n) for n in view.bars.names] == [part_label(n) for n in first.attribution.names]
    assert {"emb", "bias", "1.1", "2.2", "MLP 2"} <= {part_label(n) for n in view.bars.names}
    view.select_position(0)  # not saved in a probe file: said so
    assert view.bars.message.startswith("No attribution at position 1") and f"last {ATTRIBUTED}" in view.bars.message
    assert "p = " in view.grid.tooltip(2, 0) and "output" in view.grid.tooltip(2, 0)
    # the CSV: a header, a row per layer, then the chosen position's parts
    view.select_position(T - 1)
    out = view.export_csv(tmp_path / "lens.csv")
    rows = list(csv.reader(out.open(encoding="utf-8")))
    assert rows[0] == ["row", *first.tokens] and [r[0] for r in rows[1:4]] == ["embedding", "after layer 1", "output"]
    assert rows[1][1] == f"{first.top_tokens[0][0]} ({float(np.float32(first.top_probs[0, 0]))!r})"
    assert rows[4] == [] and rows[5][:2] == ["position", str(T)] and rows[6] == ["part", "contribution"]
    parts = {r[0]: float(r[1]) for r in rows[7:]}
    assert set(parts) == set(first.attribution.names) and len(parts) == 2 + 2 * 2 + 2
    assert view.export_png(tmp_path / "lens.png").stat().st_size > 1000


def test_a_run_without_a_saved_lens_says_so(qtbot, panel, tmp_path):
    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.probes import save_probe

    A = np.tile(np.eye(5, dtype=np.float32), (2, 1, 1))
    save_probe(tmp_path, 10, AttentionMaps(list("abcde"), None, {MapName("self", 0): A}))
    panel.set_probes(list_probes(tmp_path))
    assert panel.lensView.lens is None and panel.lensView.captionLabel.text().endswith(html.escape(NO_LENS))
    assert not panel.lensView.exportCsvButton.isEnabled()


@pytest.mark.parametrize("arch", ["gpt", "bert", "edt"])
def test_the_users_text_is_read_in_a_worker(qtbot, panel, arch):
    loaded = make_loaded(arch)
    tok = loaded.tokenizer
    if arch == "edt":
        ids, ctx = [tok.bos_id, *tok.encode("dog")], [tok.bos_id, *tok.encode("hello"), tok.eos_id]
    else:
        ids, ctx = ([tok.bos_id, *tok.encode("the fox"), tok.eos_id] if arch == "bert" else tok.encode("the fox")), None
    panel.set_model(loaded)
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, ids, ctx))
    view = panel.lensView
    qtbot.waitUntil(lambda: view.lens is not None, timeout=LONG)
    want = measure(loaded.model, tok, ids, ctx, attributed=TEXT_ATTRIBUTED)
    assert view.lens.top_tokens == want.top_tokens and "your text" in view.captionLabel.text()
    assert view.lens.n_rows == 3 and (view.lens.source_tokens is not None) == (arch == "edt")
    # every architecture is attributed (BERT through its frozen norms, an edt given its source)
    assert view.bars.values == pytest.approx(want.attribution.parts[-1].tolist())
    view.select_position(0)  # every position of a short text of the user's is attributed
    assert view.bars.values == pytest.approx(want.attribution.parts[0].tolist())


def test_the_users_text_is_read_on_the_loaded_model_itself_while_another_thread_runs_it(monkeypatch):
    """No copy of the model (0.5 s and 500 MB for a GPT-2-sized one): the lens's hooks are its thread's own, so a
    generation running the same model meanwhile changes nothing in it (nor it in the generation)."""
    import copy
    import threading

    import torch

    from fatstudio.qt.panels.attention.lens import _measure

    loaded = make_loaded("gpt")
    tok, ids = loaded.tokenizer, loaded.tokenizer.encode("the fox")
    want = measure(loaded.model, tok, ids, None, attributed=TEXT_ATTRIBUTED)
    alone = loaded.model(torch.tensor([ids]))
    monkeypatch.setattr(copy, "deepcopy", lambda *a, **kw: pytest.fail("the model was copied"))
    done, outputs = threading.Event(), []

    def other_worker():  # another job's forward passes on the same model, all along
        while not done.is_set():
            outputs.append(loaded.model(torch.tensor([ids])))
    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        key, got = _measure("key", loaded.model, tok, ids, None)
    finally:
        done.set()
        thread.join()
    assert key == "key" and got.top_tokens == want.top_tokens
    np.testing.assert_array_equal(got.attribution.parts, want.attribution.parts)
    assert outputs and all(torch.equal(out, alone) for out in outputs)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_the_lens_and_head_scores_of_a_text_yield_the_cpu_to_a_generation(monkeypatch):
    """Both run in their worker at the lowest CPU priority: the next generation, started while they measure the
    text of the one before, goes first (bench/imported_generate.py)."""
    import os
    import threading

    from fatstudio.core.inspect import probe_lens
    from fatstudio.qt.panels.attention import lens as lens_module
    from fatstudio.qt.panels.attention import scores as scores_module

    def priority(*args, **kwargs):
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    seen: list[int] = []
    monkeypatch.setattr(probe_lens, "measure", priority)
    monkeypatch.setattr(scores_module, "head_scores", priority)
    for job in (lambda: lens_module._measure("key", None, None, [1], None),
                lambda: scores_module._head_scores(None, None, None)):
        worker = threading.Thread(target=job)
        worker.start()
        worker.join()
    assert seen == [19, 19]


def test_scrubbing_back_and_forth_reads_each_steps_lens_once(qtbot, panel, lens_run, monkeypatch):
    from fatstudio.core.inspect import probes

    read: list[str] = []
    monkeypatch.setattr(probes, "load_probe_lens", lambda path: read.append(str(path)) or load_probe_lens(path))
    paths = list_probes(lens_run)
    panel.set_probes(paths)  # the last step's lens: read
    view = panel.lensView
    for i in (0, 2, 0, 1, 2, 1):
        panel.probeSlider.setValue(i)
    assert sorted(read) == sorted(str(p) for p in paths.values())  # each file once
    np.testing.assert_array_equal(view.lens.top_probs, load_probe_lens(paths[20]).top_probs)  # the kept lens shown
    assert "step 20" in view.captionLabel.text()
    panel.set_probes(paths)  # the run opened again: its files are read again
    assert read[-1] == str(paths[30]) and len(read) == 4
