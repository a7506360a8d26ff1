"""The attention panel: the numbers drawn are the reference's softmax(S/√d_attn) exactly, switching
kind/layer/head shows that head, clicking a query lays its row over the text, export to PNG and CSV."""
import csv

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QAbstractSlider

from fatstudio import ModelConfig, RunConfig, build_model
from fatstudio.core import inference
from fatstudio.core.config import DataConfig
from fatstudio.core.reference import ReferenceTransformer
from fatstudio.core.runs import LoadedModel
from fatstudio.core.tokenization import train_tokenizer
from fatstudio.qt.panels.attention import MEAN, AttentionPanel
from fatstudio.qt.panels.prompt import PromptPanel

CORPUS = ["the quick brown fox jumps over the lazy dog.\n", "hello world, 0123456789"]
TASKS = {"gpt": "next_token", "gopher": "next_token", "bert": "masked_lm", "edt": "seq2seq"}


def make_loaded(arch, dtype=torch.float32, l_max=16, H=3):
    tok = train_tokenizer("char", CORPUS)
    cfg = ModelConfig(arch=arch, vocab_size=tok.vocab_size, l_max=l_max, L=2, L_enc=2, L_dec=2, H=H, d_e=12,
                      d_mlp=16)
    torch.manual_seed(0)
    model = build_model(cfg).to(dtype).eval()
    with torch.no_grad():  # random parameters everywhere, large enough for sharp attention patterns
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.1 if name.endswith("gamma") else 0.5) + (1 if name.endswith("gamma") else 0))
    return LoadedModel(model, tok, RunConfig(model=cfg, data=DataConfig(task=TASKS[arch])), [], arch, 0)


@pytest.fixture
def panel(qtbot):
    p = AttentionPanel()
    qtbot.addWidget(p)
    p.resize(1100, 700)
    return p


def gpt_maps(text="the quick fox"):
    loaded = make_loaded("gpt")
    return inference.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode(text))


PROMPTS = {"gpt": "the fox", "gopher": "lazy dog", "bert": "the [MASK]ox jumps", "edt": "hello world"}


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_drawn_numbers_are_the_reference(qtbot, panel, arch):
    """Prompt a float64 model in the prompt panel; every map the attention panel draws (large view and grid)
    equals the literal reference's softmax(S/√d_attn) for the same weights and tokens within 1e-9."""
    loaded = make_loaded(arch, dtype=torch.float64)
    prompt = PromptPanel()
    qtbot.addWidget(prompt)
    prompt.attentionReady.connect(panel.show_maps)
    prompt.set_model(loaded)
    prompt.promptEdit.setPlainText(PROMPTS[arch])
    prompt.tokensSpin.setValue(6)
    with qtbot.waitSignal(prompt.attentionReady, timeout=10000):
        assert prompt.run()
    qtbot.waitUntil(lambda: not prompt.is_running(), timeout=5000)
    tok = loaded.tokenizer
    ids_of = {s: i for i, s in enumerate(tok.token_strings(range(tok.vocab_size)))}
    maps = panel.maps
    x = [ids_of[t] for t in maps.tokens]
    z = [ids_of[t] for t in maps.context_tokens] if maps.context_tokens else None
    ref = ReferenceTransformer(loaded.model.config, loaded.model.state_dict())
    _, A_ref = ref.forward(x, z)
    assert set(A_ref) == set(maps.maps)
    worst = 0.0
    for name, heads in A_ref.items():
        kind, layer = name.split("/")
        panel.set_view(kind=kind, layer=int(layer))
        for h, a in enumerate(heads):
            panel.set_view(head=h)
            drawn = panel.attentionView.image.image  # the ImageItem's array
            assert drawn.shape == tuple(a.shape)
            worst = max(worst, float(np.abs(drawn - a.numpy()).max()))
            r = panel.layers().index(int(layer))
            thumb = panel.headGrid.matrices[r][h]
            assert np.array_equal(panel.headGrid.images[r][h].image, thumb)  # short: drawn as is, not pooled
            worst = max(worst, float(np.abs(thumb - a.numpy()).max()))
        panel.set_view(head=MEAN)
        mean_ref = torch.stack(heads).mean(0).numpy()
        worst = max(worst, float(np.abs(panel.attentionView.image.image - mean_ref).max()))
    assert worst <= 1e-9, worst
    prompt.shutdown()


def test_switch_layer_and_head(qtbot, panel):
    maps = gpt_maps()
    panel.show_maps(maps)
    assert panel.layerCombo.count() == 2
    assert panel.headCombo.count() == 4  # 3 heads + mean
    assert panel.headCombo.itemText(3).startswith("mean over heads")
    panel.layerCombo.setCurrentIndex(1)
    panel.headCombo.setCurrentIndex(2)
    assert panel.current_name() == "self/1" and panel.head == 2
    assert panel.attentionView.image.image is maps.maps["self/1"][2] or \
        np.array_equal(panel.attentionView.image.image, maps.maps["self/1"][2])
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps["self/1"][2])
    panel.headCombo.setCurrentIndex(3)
    np.testing.assert_allclose(panel.attentionView.matrix, maps.maps["self/1"].mean(0), rtol=0, atol=1e-12)
    # clicking a thumbnail of the grid shows that head
    panel.headGrid.headClicked.emit(0, 1)
    assert (panel.layer, panel.head) == (0, 1)
    assert panel.layerCombo.currentIndex() == 0 and panel.headCombo.currentIndex() == 1
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps["self/0"][1])
    # the axes carry the tokens, the grid titles the entropy
    assert panel.attentionView.key_axis.labels == ["t", "h", "e", "␣", "q", "u", "i", "c", "k", "␣", "f", "o", "x"]
    ent = maps.entropy("self/0")
    assert panel.headGrid.titles[0][1].text == f"h2 · {ent[1]:.2f}"


def test_thumbnails_of_long_texts_keep_sparse_patterns():
    from fatstudio.qt.widgets.heatmap import max_pool
    A = np.eye(200)[::-1]  # an anti-diagonal, like the reverse task's cross-attention
    P = max_pool(A, 64)
    assert P.shape == (50, 50) and np.array_equal(P, np.eye(50)[::-1])
    assert max_pool(A[:60, :30], 64) is not None and max_pool(A[:60, :30], 64).shape == (60, 30)


def test_new_maps_keep_the_view(panel):
    panel.show_maps(gpt_maps())
    panel.set_view(layer=1, head=1)
    panel.show_maps(gpt_maps("hello world"))
    assert (panel.layer, panel.head) == (1, 1)
    assert panel.attentionView.matrix.shape == (11, 11)


def test_hover_shows_weight_and_tokens(qtbot, panel):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.show()
    qtbot.waitExposed(panel)
    view = panel.attentionView
    view.scene().sigMouseMoved.emit(view.cell_center_scene(5, 2))
    w = maps.maps["self/0"][0][5, 2]
    text = panel.hoverLabel.text()
    assert "query 5" in text and "key 2" in text and f"{w:.4f}" in text and "<code>u</code>" in text


def test_click_query_lays_row_over_text(qtbot, panel):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.query == len(maps.tokens) - 1  # the last query by default
    strip = panel.tokenStrip
    qtbot.mouseClick(strip.viewport(), Qt.MouseButton.LeftButton, pos=strip.token_rect_center(4))
    assert panel.query == 4
    row = maps.maps["self/0"][0][4]
    alphas = [strip.color(j).alphaF() for j in range(len(row))]
    assert np.argmax(alphas) == np.argmax(row)
    assert all(alphas[j] < 1e-2 for j in range(5, len(row)))  # causal: no weight on later keys
    assert "weight" in strip.tooltip(0)
    # a click on a row of the large map
    view = panel.attentionView
    pos = view.mapFromScene(view.cell_center_scene(7, 3))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    assert panel.query == 7


def test_encoder_decoder_kinds(qtbot, panel):
    loaded = make_loaded("edt")
    tok = loaded.tokenizer
    z = [tok.bos_id] + tok.encode("hello world") + [tok.eos_id]
    maps = inference.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z)
    panel.show_maps(maps)
    assert [panel.kindCombo.itemData(i) for i in range(panel.kindCombo.count())] == ["enc", "dec", "cross"]
    assert panel.kind == "dec"
    panel.kindCombo.setCurrentIndex(2)
    assert panel.kind == "cross"
    assert panel.attentionView.matrix.shape == (4, 13)
    assert panel.attentionView.query_tokens == ["<bos>", "d", "o", "g"]
    assert panel.attentionView.key_tokens[0] == "<bos>" and panel.attentionView.key_tokens[-1] == "<eos>"
    assert panel.queryStrip.isVisibleTo(panel) and panel.tokenStrip.token_count() == 13
    panel.set_view(kind="enc", layer=1, head=2)
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps["enc/1"][2])


def test_export_png_and_csv(qtbot, panel, tmp_path):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.set_view(layer=1, head=0)
    png = panel.export_png(tmp_path / "view.png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert panel.export_png(tmp_path / "grid.png", what="grid").stat().st_size > 0
    out = panel.export_csv(tmp_path / "view.csv")
    rows = list(csv.reader(out.open(encoding="utf-8")))
    A = maps.maps["self/1"][0]
    assert rows[0] == ["query \\ key"] + ["t", "h", "e", "␣", "q", "u", "i", "c", "k", "␣", "f", "o", "x"]
    assert [r[0] for r in rows[1:]] == rows[0][1:]
    np.testing.assert_array_equal(np.array([[float(v) for v in r[1:]] for r in rows[1:]]), A)


def test_export_without_maps_is_an_error(panel, tmp_path):
    with pytest.raises(ValueError):
        panel.export_csv(tmp_path / "x.csv")


def test_cross_attention_query_is_marked_on_the_query_strip_while_hidden(panel):
    loaded = make_loaded("edt")  # the panel is never shown, as when maps arrive while another tab is open
    tok = loaded.tokenizer
    z = [tok.bos_id] + tok.encode("hello world") + [tok.eos_id]
    panel.show_maps(inference.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z))
    panel.set_view(kind="cross", layer=0, head=0)
    panel.select_query(3)
    assert panel.queryStrip._marked == 3  # the decoder query "g"
    assert panel.tokenStrip._marked is None  # not source token 3


def test_exports_are_the_cores(panel, tmp_path):
    """One export path for the numbers: the panel writes what the core's AttentionMaps writes (the CLI's
    writers); the "view" PNG is a picture of the large map as shown, with its token labels."""
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.set_view(layer=1, head=MEAN)
    from PySide6.QtGui import QImage
    view = QImage(str(panel.export_png(tmp_path / "v.png")))
    assert (view.width(), view.height()) == (panel.attentionView.width(), panel.attentionView.height())
    assert panel.export_csv(tmp_path / "v.csv").read_bytes().decode() == maps.head_csv("self/1", MEAN)
    from fatstudio.qt.widgets.attention_png import save_attention_png

    grid = panel.export_png(tmp_path / "g.png", what="grid").read_bytes()  # labelled, as the CLI draws it
    assert grid == save_attention_png(maps, tmp_path / "cli.png", ["self/0", "self/1"], with_mean=True).read_bytes()
    with pytest.raises(ValueError, match="'view' or 'grid'"):
        panel.export_png(tmp_path / "p.png", what="panel")


def test_entropy_table_shows_head_scores_sortable(qtbot, panel):
    """With a model given, the head scores of the maps shown arrive from a worker: one table row per head
    (and per layer's mean), columns prev/diag/sink/induction equal to the core's, sortable by a header
    click; a click on a sorted row still shows that head."""
    from fatstudio.core.head_scores import SCORES, head_scores

    loaded = make_loaded("gpt")
    maps = inference.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("the quick fox"))
    panel.show_maps(maps)
    qtbot.waitUntil(lambda: panel.scores is not None, timeout=10000)
    rows = panel.score_table()
    # no model: the scores of the maps alone
    assert len(rows) == 2 * (3 + 1) and rows[0]["induction"] == "" and rows[0]["prev"] != ""
    panel.set_model(loaded)
    qtbot.waitUntil(lambda: panel.score_table()[0]["induction"] != "", timeout=10000)
    qtbot.waitUntil(lambda: panel.scores is not None, timeout=10000)
    expected = head_scores(loaded.model, loaded.tokenizer, maps)
    rows = panel.score_table()
    assert [r["head"] for r in rows[:4]] == ["1", "2", "3", "mean"]
    for r in rows:
        name = f"self/{r['layer']}"
        for score in SCORES:
            v = expected.get(name, score)
            want = v.mean() if r["head"] == "mean" else v[int(r["head"]) - 1]
            assert r[score] == f"{want:.2f}" and 0 <= float(r[score]) <= 1
    # sort by induction, descending, with a header click
    panel.show()
    qtbot.waitExposed(panel)
    panel.stack.setCurrentIndex(1)
    col = panel.TABLE_COLUMNS.index("induction")
    header = panel.entropyTable.horizontalHeader()
    at = QPoint(header.sectionViewportPosition(col) + header.sectionSize(col) // 2, header.height() // 2)
    for _ in range(2):  # ascending, then descending
        qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=at)
        values = [float(r["induction"]) for r in panel.score_table()]
        descending = header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
        assert header.sortIndicatorSection() == col and values == sorted(values, reverse=descending)
    if not descending:
        panel.entropyTable.sortItems(col, Qt.SortOrder.DescendingOrder)
    top = panel.score_table()[0]
    panel.entropyTable.cellClicked.emit(0, 0)
    assert panel.layer == int(top["layer"])
    assert panel.head == (MEAN if top["head"] == "mean" else int(top["head"]) - 1)
    # new maps: the old scores go, the new ones come
    panel.show_maps(inference.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("hello")))
    qtbot.waitUntil(lambda: panel.scores is not None and panel.score_table()[0]["prev"] != "", timeout=10000)
    assert panel.headGrid.badges and len(panel.headGrid.badges[0]) == 4


# ---- attention over training time: probeSlider ----------------------------------------------------------
@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    """A tiny gpt run with evaluations at steps 10, 20, 30, and its Probe events."""
    from fatstudio.core.config import TrainConfig
    from fatstudio.core.training import Probe, train

    tmp = tmp_path_factory.mktemp("probes")
    corpus = tmp / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=2, H=2, d_e=16, d_mlp=32), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=30, batch_size=4, eval_interval=10, eval_iters=1, sample_tokens=0,
                                lr=1e-2, device="cpu"))
    events = [e for e in train(cfg, run_dir=tmp / "run") if isinstance(e, Probe)]
    return tmp / "run", events


def test_probe_slider_follows_a_training_run_and_scrubs(qtbot, panel, probe_run):
    from fatstudio.core.runs import Run

    run_dir, events = probe_run
    assert [e.step for e in events] == [10, 20, 30]
    slider = panel.findChild(QAbstractSlider, "probeSlider")
    assert slider is panel.probeSlider and not panel.probeBar.isVisibleTo(panel)
    for ev in events:  # as the main window routes them while training
        panel.add_probe(ev.step, ev.path)
        assert panel.probe_step == ev.step  # the slider follows the newest step
    assert slider.maximum() - slider.minimum() + 1 == 3 and slider.value() == 2
    assert panel.probeBar.isVisibleTo(panel) and "step 30" in panel.probeStepLabel.text()
    run = Run.open(run_dir)
    panel.set_view(layer=1, head=0)
    last = panel.current_matrix().copy()
    np.testing.assert_array_equal(last, run.load_probe(30).maps["self/1"][0])
    slider.setValue(0)  # scrub back to the first evaluation: grid and large map follow
    assert panel.probe_step == 10 and "step 10" in panel.probeStepLabel.text()
    first = panel.current_matrix()
    np.testing.assert_array_equal(first, run.load_probe(10).maps["self/1"][0])
    assert not np.allclose(first, last)
    assert panel.headGrid.image_items() and panel.layer == 1 and panel.head == 0  # the view is kept
    panel.probeTimer.setInterval(10)
    qtbot.mouseClick(panel.probePlayButton, Qt.MouseButton.LeftButton)  # play: steps to the end, then stops
    qtbot.waitUntil(lambda: panel.probe_step == 30 and not panel.probePlayButton.isChecked(), timeout=5000)


def test_probe_slider_for_a_reopened_run_and_a_prompts_maps(qtbot, panel, probe_run):
    from fatstudio.core.probes import list_probes

    run_dir, _ = probe_run
    panel.show_maps(gpt_maps())  # a prompt's maps
    panel.set_probes(list_probes(run_dir))
    assert panel.probe_steps() == [10, 20, 30] and panel.probe_step == 30 and panel.showing_probe
    panel.show_maps(gpt_maps("the lazy dog"))
    assert not panel.showing_probe and "not shown" in panel.probeStepLabel.text()
    prompt_maps = panel.maps
    panel.add_probe(40, list_probes(run_dir)[30])  # a new step does not replace the prompt's maps
    assert panel.maps is prompt_maps and panel.probeSlider.maximum() == 3
    panel.set_probes({})
    assert not panel.probeBar.isVisibleTo(panel) and panel.maps is prompt_maps


def test_main_window_routes_probe_events_and_lists_reopened_runs(qtbot, probe_run, tmp_path, monkeypatch):
    from fatstudio.core.runs import Run
    from fatstudio.core.training import Probe
    from fatstudio.qt.main_window import MainWindow

    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path))
    run_dir, events = probe_run
    w = MainWindow(runs_root=tmp_path)
    qtbot.addWidget(w)
    w.open_run(Run.open(run_dir))
    slider = w.attention_panel.probeSlider
    assert slider.maximum() == 2 and w.attention_panel.probe_step == 30
    w.attention_panel.set_probes({})
    for ev in events:
        w._on_event(Probe(ev.step, ev.path))
    assert slider.maximum() == 2 and w.attention_panel.probe_step == 30


# ---- head scores over training time: headScoresPlot -------------------------------------------------------
def test_head_scores_plot_grows_with_probe_events_and_its_marker_follows_the_slider(qtbot, panel, probe_run):
    """One line per head (L = 2, H = 2: four), each the saved score against the step, growing with each Probe
    event; the chosen score (headScoreCombo) is drawn; the dashed marker stands at the slider's step."""
    import pyqtgraph as pg

    from fatstudio.core.head_scores import HeadScores
    from fatstudio.core.probes import score_series

    run_dir, events = probe_run
    plot = panel.findChild(pg.PlotWidget, "headScoresPlot")
    combo = panel.findChild(type(panel.kindCombo), "headScoreCombo")
    assert plot is panel.headScoresPlot and combo.currentData() == "induction"
    assert not panel.scoreHistory.isVisibleTo(panel)
    for k, ev in enumerate(events, 1):
        assert ev.scores is not None  # the trainer sends the step's scores: no file read while training
        panel.add_probe(ev.step, ev.path, ev.scores)
        curves = panel.score_curves()
        assert sorted(curves) == ["L0 H1", "L0 H2", "L1 H1", "L1 H2"]
        assert all(len(x) == k for x, _ in curves.values()) and panel.score_marker_step() == ev.step
    assert panel.scoreHistory.isVisibleTo(panel) and len(plot.getPlotItem().listDataItems()) == 4
    history = {ev.step: HeadScores.from_dict(ev.scores) for ev in events}
    for score in ("induction", "prev"):
        combo.setCurrentIndex(combo.findData(score))
        for layer in (0, 1):
            steps, values = score_series(history, f"self/{layer}", score)
            for h in (0, 1):
                x, y = panel.score_curves()[f"L{layer} H{h + 1}"]
                assert x.tolist() == steps.tolist() == [10, 20, 30]
                np.testing.assert_array_equal(y, values[:, h])
                assert ((y >= 0) & (y <= 1)).all()
    assert not np.allclose(panel.score_curves()["L1 H1"][1], panel.score_curves()["L1 H2"][1])  # per head
    panel.probeSlider.setValue(0)
    assert panel.score_marker_step() == 10 and panel.probe_step == 10
    panel.probeSlider.setValue(1)
    assert panel.score_marker_step() == 20
    panel.set_view(layer=1, head=1)  # the head shown large is drawn bold
    widths = {label: panel._score_curves[(f"self/{label[1]}", int(label[-1]) - 1)].opts["pen"].widthF()
              for label in panel.score_curves()}
    assert widths["L1 H2"] > widths["L1 H1"] == widths["L0 H2"]
    panel.set_probes({})
    assert panel.score_curves() == {} and not panel.scoreHistory.isVisibleTo(panel)


def test_grid_scores_are_each_probe_steps_saved_scores(qtbot, panel, probe_run):
    """Scrubbing the slider shows each step's saved scores, induction included (that step's model, not the
    model loaded), with no worker measuring them; a prompt's maps get measured ones again."""
    from fatstudio.core.probes import list_probes, saved_scores

    run_dir, _ = probe_run
    panel.set_model(make_loaded("gpt"))  # another model: its induction must not stand for a past step's
    panel.set_probes(list_probes(run_dir))
    tables = {}
    for i, step in enumerate(panel.probe_steps()):
        panel.probeSlider.setValue(i)
        saved = saved_scores(list_probes(run_dir)[step])
        assert panel.scores is panel.score_history[step] and not panel.scores_pending()
        assert panel.scores.to_dict() == saved.to_dict()
        panel.set_view(layer=1)
        rows = [r for r in panel.score_table() if r["head"] != "mean"]
        for r in rows:
            for score in ("prev", "induction"):
                want = saved.get("self/" + r["layer"], score)[int(r["head"]) - 1]
                assert r[score] == f"{want:.2f}"
        tables[step] = {(r["layer"], r["head"]): float(r["induction"]) for r in rows}
    assert tables[10] != tables[30]  # the scores change with the slider
    panel.show_maps(gpt_maps())  # a prompt's maps: measured with the loaded model in a worker
    qtbot.waitUntil(lambda: panel.scores is not None and panel.scores is not panel.score_history.get(30), timeout=10000)


def test_an_older_runs_probe_files_without_scores(qtbot, panel, tmp_path):
    """Probe files written before scores were saved: prev/diag/sink from their maps, no induction line."""
    from fatstudio.core.attention_maps import AttentionMaps
    from fatstudio.core.probes import list_probes, save_probe

    rng = np.random.default_rng(0)
    for step in (10, 20):
        A = np.tril(rng.random((2, 5, 5)))
        save_probe(tmp_path, step, AttentionMaps(list("abcde"), None, {"self/0": A / A.sum(-1, keepdims=True)}))
    panel.set_probes(list_probes(tmp_path))
    assert panel.score_curves() == {} and "not saved" in panel.headScoresPlot.getPlotItem().titleLabel.text
    assert all(r["induction"] == "" and r["prev"] != "" for r in panel.score_table())
    panel.headScoreCombo.setCurrentIndex(panel.headScoreCombo.findData("sink"))
    assert sorted(panel.score_curves()) == ["L0 H1", "L0 H2"]


def test_diagnostics_list_the_dead_heads_of_the_latest_probe_step(qtbot, probe_run, tmp_path, monkeypatch):
    """A reopened run: the dead head of its latest probe file (made by hand) is listed with its advice; live,
    a Probe event's findings replace it."""
    import shutil

    from PySide6.QtWidgets import QListWidget

    from fatstudio.core.attention_maps import AttentionMaps
    from fatstudio.core.diagnostics import head_findings
    from fatstudio.core.probes import save_probe
    from fatstudio.core.runs import Run
    from fatstudio.core.training import Probe
    from fatstudio.qt.main_window import MainWindow

    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path))
    run_dir = tmp_path / "run"
    shutil.copytree(probe_run[0], run_dir)
    T = 6
    looking = np.tril(np.random.default_rng(0).random((T, T)) ** 4)
    looking /= looking.sum(-1, keepdims=True)
    dead = np.zeros((T, T))
    dead[:, 0] = 1.0
    maps = AttentionMaps(list("abcdef"), None, {"self/0": np.stack([looking, looking]),
                                                "self/1": np.stack([looking, dead])})
    save_probe(run_dir, 40, maps)
    w = MainWindow(runs_root=tmp_path)
    qtbot.addWidget(w)
    view = w.findChild(QListWidget, "diagnosticsView")

    def lines():
        return [view.item(i).text() for i in range(view.count())]

    w.open_run(Run.open(run_dir))
    assert lines() == ["step 40 · head 2 of self/1 always attends to one key: it may be dead (a position sink); "
                       "more training or a lower learning rate may help."]
    w._on_event(Probe(50, str(save_probe(run_dir, 50, maps)), None, tuple(head_findings(maps, 50))))
    qtbot.waitUntil(lambda: [line[:8] for line in lines()] == ["step 50 "], timeout=5000)
    healthy = AttentionMaps(maps.tokens, None, {"self/0": maps.maps["self/0"]})
    w._on_event(Probe(60, str(save_probe(run_dir, 60, healthy)), None, tuple(head_findings(healthy, 60))))
    qtbot.waitUntil(lambda: lines() == [], timeout=5000)
