"""The attention panel: the numbers drawn are the reference's softmax(S/√d_attn) exactly, switching
kind/layer/head shows that head, clicking a query lays its row over the text, export to PNG and CSV."""
import csv
import html

import numpy as np
import pytest
import torch
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QAbstractSlider, QApplication

from fatstudio import ModelConfig, RunConfig, build_model
from fatstudio.core.config import DataConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import generation
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.prompting import display_token
from fatstudio.core.names import MapName
from fatstudio.core.paper.reference import ReferenceTransformer
from fatstudio.qt.panels.attention.panel import MEAN, AttentionPanel
from fatstudio.qt.panels.prompt import PromptPanel

CORPUS = ["the quick brown fox jumps over the lazy dog.\n", "hello world, 0123456789"]
TASKS = {"gpt": "next_token", "gopher": "next_token", "bert": "masked_lm", "edt": "seq2seq"}


def make_loaded(arch, dtype=torch.float32, l_max=16, H=3, L=2):
    tok = train_tokenizer("char", CORPUS)
    cfg = ModelConfig(arch=arch, vocab_size=tok.vocab_size, l_max=l_max, L=L, L_enc=2, L_dec=2, H=H, d_e=12,
                      d_mlp=16)
    torch.manual_seed(0)
    model = build_model(cfg).to(dtype).eval()
    with torch.no_grad():  # random parameters everywhere, large enough for sharp attention patterns
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.1 if name.endswith("gamma") else 0.5) + (1 if name.endswith("gamma") else 0))
    return LoadedModel(model, tok, RunConfig(model=cfg, data=DataConfig(task=TASKS[arch])), [], arch, 0)


@pytest.fixture
def panel(qtbot, workspace):
    p = AttentionPanel(workspace)
    qtbot.addWidget(p)
    p.resize(1100, 700)
    return p


def gpt_maps(text="the quick fox"):
    loaded = make_loaded("gpt")
    return generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode(text))


PROMPTS = {"gpt": "the fox", "gopher": "lazy dog", "bert": "the [MASK]ox jumps", "edt": "hello world"}


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_drawn_numbers_are_the_reference(qtbot, panel, arch):
    """Prompt a float64 model in the prompt panel; every map the attention panel draws (large view and grid)
    equals the literal reference's softmax(S/√d_attn) for the same weights and tokens within 1e-9."""
    loaded = make_loaded(arch, dtype=torch.float64)
    prompt = PromptPanel(panel.workspace)
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
    assert set(A_ref) == set(map(str, maps.maps))
    worst = 0.0
    for key, heads in A_ref.items():
        name = MapName.parse(key)
        panel.set_view(kind=name.kind, layer=name.layer)
        for h, a in enumerate(heads):
            panel.set_view(head=h)
            drawn = panel.attentionView.image.image  # the ImageItem's array
            assert drawn.shape == tuple(a.shape)
            worst = max(worst, float(np.abs(drawn - a.numpy()).max()))
            r = panel.layers().index(name.layer)
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
    assert panel.headCombo.itemText(3).startswith("mean  (H = ")  # as the grid names its column
    panel.layerCombo.setCurrentIndex(1)
    panel.headCombo.setCurrentIndex(2)
    assert panel.current_name() == MapName("self", 1) and panel.head == 2
    assert panel.attentionView.image.image is maps.maps[MapName("self", 1)][2] or \
        np.array_equal(panel.attentionView.image.image, maps.maps[MapName("self", 1)][2])
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps[MapName("self", 1)][2])
    panel.headCombo.setCurrentIndex(3)
    np.testing.assert_allclose(panel.attentionView.matrix, maps.maps[MapName("self", 1)].mean(0), rtol=0, atol=1e-12)
    # clicking a thumbnail of the grid shows that head
    panel.headGrid.headClicked.emit(0, 1)
    assert (panel.layer, panel.head) == (0, 1)
    assert panel.layerCombo.currentIndex() == 0 and panel.headCombo.currentIndex() == 1
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps[MapName("self", 0)][1])
    # the axes carry the tokens, the grid titles the entropy
    assert panel.attentionView.key_axis.labels == ["t", "h", "e", "␣", "q", "u", "i", "c", "k", "␣", "f", "o", "x"]
    ent = maps.entropy(MapName("self", 0))
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


def one_sharp_head(sharp, L=2, H=3, T=6):
    """A bert's maps (every head uniform, the uninformative kind) but head ``sharp`` = (l, h): previous token."""
    from fatstudio.core.inference.attention_maps import AttentionMaps

    A = np.full((L, H, T, T), 1.0 / T)
    A[sharp] = np.eye(T, k=-1) + np.eye(T, k=T - 1)
    return AttentionMaps(["<bos>", *"abcd", "<eos>"][:T], None, {MapName("self", l): A[l] for l in range(L)})


def test_new_maps_open_on_the_most_informative_head_until_the_user_chooses_one(panel, tmp_path):
    from fatstudio.core.inspect.probes import list_probes, save_probe

    panel.show_maps(one_sharp_head((1, 2)))  # not layer 1 head 1, a uniform head
    assert (panel.layer, panel.head) == (1, 2) and "layer 2 · head 3" in panel.attentionView.plot.titleLabel.text
    assert panel.headCombo.currentIndex() == 2 and panel.layerCombo.currentIndex() == 1
    panel.show_maps(one_sharp_head((0, 1)))  # another text: its own
    assert (panel.layer, panel.head) == (0, 1)
    for step, sharp in ((10, (0, 0)), (20, (1, 1))):
        save_probe(tmp_path, step, one_sharp_head(sharp))
    panel.set_probes(list_probes(tmp_path))  # a run's probes: its newest step's
    assert panel.probe_step == 20 and (panel.layer, panel.head) == (1, 1)
    panel.probeSlider.setValue(0)  # scrubbing keeps the head shown
    assert panel.probe_step == 10 and (panel.layer, panel.head) == (1, 1)
    edt = make_loaded("edt")
    tok = edt.tokenizer
    maps = generation.attention_maps_for_ids(edt.model, tok, [tok.bos_id, *tok.encode("dog")],
                                            [tok.bos_id, *tok.encode("hello"), tok.eos_id])
    panel.show_maps(maps)  # the lesson's layer, the last of the cross-attention
    assert (panel.kind, panel.layer, panel.head) == ("cross", 1, maps.focused_head("cross")[1])
    panel.kindCombo.setCurrentIndex(panel.kindCombo.findData("enc"))  # another kind: its most informative head
    assert (panel.layer, panel.head) == maps.focused_head("enc") and not panel.head_chosen
    panel.show_maps(one_sharp_head((1, 2)))
    panel.headGrid.headClicked.emit(0, 2)  # the user's choice …
    panel.show_maps(one_sharp_head((1, 0)))
    assert (panel.layer, panel.head) == (0, 2)  # … is kept
    panel.set_probes(list_probes(tmp_path))
    assert (panel.layer, panel.head) == (0, 2)
    (tmp_path / "other" / "probes").mkdir(parents=True)
    save_probe(tmp_path / "other", 10, one_sharp_head((1, 1)))
    panel.set_probes(list_probes(tmp_path / "other"))  # another run's: the choice was for the last run
    assert (panel.layer, panel.head) == (1, 1) and not panel.head_chosen


def test_hover_shows_weight_and_tokens(qtbot, panel):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.show()
    qtbot.waitExposed(panel)
    view = panel.attentionView
    view.scene().sigMouseMoved.emit(view.cell_center_scene(5, 2))
    w = maps.maps[panel.current_name()][panel.head][5, 2]  # of the head shown
    text = panel.hoverLabel.text()
    assert "query 6 " in text and "key 3 " in text and f"{w:.4f}" in text and "<code>u</code>" in text  # from 1


def test_click_query_lays_row_over_text(qtbot, panel):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.show()
    qtbot.waitExposed(panel)
    assert panel.query == len(maps.tokens) - 1  # the last query by default
    strip = panel.tokenStrip
    qtbot.mouseClick(strip.viewport(), Qt.MouseButton.LeftButton, pos=strip.token_rect_center(4))
    assert panel.query == 4
    row = maps.maps[MapName("self", 0)][0][4]
    alphas = [strip.color(j).alphaF() for j in range(len(row))]
    assert np.argmax(alphas) == np.argmax(row)
    caption = panel.strips.stripCaption.text()
    assert caption.startswith("Attention of query 5 ")  # counted from 1, as the paper does
    token = html.escape(display_token(maps.tokens[4]))
    assert f"query 5 “<b><code>{token}</code></b>” over the text" in caption  # the token quoted, not bare
    assert strip.tooltip(0).startswith("key 1 ") and strip.tooltip(4).startswith("key 5 ")
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
    maps = generation.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z)
    panel.show_maps(maps)
    assert [panel.kindCombo.itemData(i) for i in range(panel.kindCombo.count())] == ["enc", "dec", "cross"]
    # an encoder-decoder opens on its lesson: cross-attention in the last layer
    assert (panel.kind, panel.layer) == ("cross", 1) and panel.kindCombo.currentIndex() == 2
    assert panel.layerCombo.currentText() == "2"  # counted from 1, as the paper counts
    panel.kindCombo.setCurrentIndex(1)
    assert panel.kind == "dec"
    panel.kindCombo.setCurrentIndex(2)
    assert panel.kind == "cross"
    assert panel.attentionView.matrix.shape == (4, 13)
    assert panel.attentionView.query_tokens == ["<bos>", "d", "o", "g"]
    assert panel.attentionView.key_tokens[0] == "<bos>" and panel.attentionView.key_tokens[-1] == "<eos>"
    assert panel.queryStrip.isVisibleTo(panel) and panel.tokenStrip.token_count() == 13
    panel.set_view(kind="enc", layer=1, head=2)
    np.testing.assert_array_equal(panel.attentionView.matrix, maps.maps[MapName("enc", 1)][2])


def test_export_png_and_csv(qtbot, panel, tmp_path):
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.set_view(layer=1, head=0)
    png = panel.export_png(tmp_path / "view.png")
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert panel.export_png(tmp_path / "grid.png", what="grid").stat().st_size > 0
    out = panel.export_csv(tmp_path / "view.csv")
    rows = list(csv.reader(out.open(encoding="utf-8")))
    A = maps.maps[MapName("self", 1)][0]
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
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z))
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
    assert panel.export_csv(tmp_path / "v.csv").read_bytes().decode() == maps.head_csv(MapName("self", 1), MEAN)
    from fatstudio.qt.widgets.attention_png import save_attention_png

    grid = panel.export_png(tmp_path / "g.png", what="grid").read_bytes()  # labelled, as the CLI draws it
    names = [MapName("self", 0), MapName("self", 1)]
    assert grid == save_attention_png(maps, tmp_path / "cli.png", names, with_mean=True).read_bytes()
    with pytest.raises(ValueError, match="'view' or 'grid'"):
        panel.export_png(tmp_path / "p.png", what="panel")


def test_entropy_table_shows_head_scores_sortable(qtbot, panel):
    """With a model given, the head scores of the maps shown arrive from a worker: one table row per head
    (and per layer's mean), columns prev/diag/sink/induction equal to the core's, sortable by a header
    click; a click on a sorted row still shows that head."""
    from fatstudio.core.inspect.head_scores import SCORES, head_scores

    loaded = make_loaded("gpt")
    maps = generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("the quick fox"))
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
        name = MapName("self", int(r['layer']) - 1)  # the table counts layers from 1
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
    assert panel.layer == int(top["layer"]) - 1
    assert panel.head == (MEAN if top["head"] == "mean" else int(top["head"]) - 1)
    # new maps: the old scores go, the new ones come
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("hello")))
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
    from fatstudio.core.runs.folder import Run

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
    np.testing.assert_array_equal(last, run.load_probe(30).maps[MapName("self", 1)][0])
    slider.setValue(0)  # scrub back to the first evaluation: grid and large map follow
    assert panel.probe_step == 10 and "step 10" in panel.probeStepLabel.text()
    first = panel.current_matrix()
    np.testing.assert_array_equal(first, run.load_probe(10).maps[MapName("self", 1)][0])
    assert not np.allclose(first, last)
    assert panel.headGrid.image_items() and panel.layer == 1 and panel.head == 0  # the view is kept
    panel.probeTimer.setInterval(10)
    qtbot.mouseClick(panel.probePlayButton, Qt.MouseButton.LeftButton)  # play: steps to the end, then stops
    qtbot.waitUntil(lambda: panel.probe_step == 30 and not panel.probePlayButton.isChecked(), timeout=5000)


def test_probe_slider_for_a_reopened_run_and_a_prompts_maps(qtbot, panel, probe_run):
    from fatstudio.core.inspect.probes import list_probes

    run_dir, _ = probe_run
    panel.show_maps(gpt_maps())  # a prompt's maps
    panel.set_probes(list_probes(run_dir))
    assert panel.probe_steps() == [10, 20, 30] and panel.probe_step == 30 and panel.showing_probe
    panel.show_maps(gpt_maps("the lazy dog"))
    assert not panel.showing_probe and panel.source() == "text"
    assert panel.sourceSwitch.textButton.isChecked() and not panel.sourceSwitch.probeButton.isChecked()
    assert panel.sourceSwitch.probeButton.text() == "Training probe, step 30"
    prompt_maps = panel.maps
    panel.add_probe(40, list_probes(run_dir)[30])  # a new step does not replace the prompt's maps
    assert panel.maps is prompt_maps and panel.probeSlider.maximum() == 3
    # the slider, at the end, stays at the newest step: "Training probe" offers it
    assert panel.probeSlider.value() == 3 and panel.sourceSwitch.probeButton.text() == "Training probe, step 40"
    panel.set_probes({})
    assert not panel.probeBar.isVisibleTo(panel) and panel.maps is prompt_maps


def test_main_window_routes_probe_events_and_lists_reopened_runs(qtbot, probe_run, tmp_path, monkeypatch):
    from fatstudio.core.runs.folder import Run
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
        w.workspace.take(Probe(ev.step, ev.path))
    w.viewTabs.setCurrentWidget(w._attention_host)  # a hidden Attention tab gets the steps when shown
    assert slider.maximum() == 2 and w.attention_panel.probe_step == 30


# ---- head scores over training time: headScoresPlot -------------------------------------------------------
def test_head_scores_plot_grows_with_probe_events_and_its_marker_follows_the_slider(qtbot, panel, probe_run):
    """One line per head (L = 2, H = 2: four), each the saved score against the step, growing with each Probe
    event; the chosen score (headScoreCombo) is drawn; the dashed marker stands at the slider's step."""
    import pyqtgraph as pg

    from fatstudio.core.inspect.head_scores import HeadScores
    from fatstudio.core.inspect.probes import score_series

    run_dir, events = probe_run
    plot = panel.findChild(pg.PlotWidget, "headScoresPlot")
    combo = panel.findChild(type(panel.kindCombo), "headScoreCombo")
    assert plot is panel.headScoresPlot and combo.currentData() == "induction"
    assert not panel.scoreHistory.isVisibleTo(panel)
    for k, ev in enumerate(events, 1):
        assert ev.scores is not None  # the trainer sends the step's scores: no file read while training
        panel.add_probe(ev.step, ev.path, ev.scores)
        curves = panel.score_curves()
        assert sorted(curves) == ["L1 H1", "L1 H2", "L2 H1", "L2 H2"]  # counted from 1, as the legend
        assert all(len(x) == k for x, _ in curves.values()) and panel.score_marker_step() == ev.step
    assert panel.scoreHistory.isVisibleTo(panel) and len(plot.getPlotItem().listDataItems()) == 4
    history = {ev.step: HeadScores.from_dict(ev.scores) for ev in events}
    for score in ("induction", "prev"):
        combo.setCurrentIndex(combo.findData(score))
        for layer in (0, 1):
            steps, values = score_series(history, MapName("self", layer), score)
            for h in (0, 1):
                x, y = panel.score_curves()[f"L{layer + 1} H{h + 1}"]
                assert x.tolist() == steps.tolist() == [10, 20, 30]
                np.testing.assert_array_equal(y, values[:, h])
                assert ((y >= 0) & (y <= 1)).all()
    assert not np.allclose(panel.score_curves()["L2 H1"][1], panel.score_curves()["L2 H2"][1])  # per head
    panel.probeSlider.setValue(0)
    assert panel.score_marker_step() == 10 and panel.probe_step == 10
    panel.probeSlider.setValue(1)
    assert panel.score_marker_step() == 20
    panel.set_view(layer=1, head=1)  # the head shown large is drawn bold
    curves = panel.scoreHistory._score_curves
    widths = {label: curves[MapName("self", int(label[1]) - 1), int(label[-1]) - 1].opts["pen"].widthF()
              for label in panel.score_curves()}
    assert widths["L2 H2"] > widths["L2 H1"] == widths["L1 H2"]
    panel.set_probes({})
    assert panel.score_curves() == {} and not panel.scoreHistory.isVisibleTo(panel)


def test_grid_scores_are_each_probe_steps_saved_scores(qtbot, panel, probe_run):
    """Scrubbing the slider shows each step's saved scores, induction included (that step's model, not the
    model loaded), with no worker measuring them; a prompt's maps get measured ones again."""
    from fatstudio.core.inspect.probes import list_probes, saved_scores

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
                want = saved.get(MapName("self", int(r['layer']) - 1), score)[int(r["head"]) - 1]
                assert r[score] == f"{want:.2f}"
        tables[step] = {(r["layer"], r["head"]): float(r["induction"]) for r in rows}
    assert tables[10] != tables[30]  # the scores change with the slider
    panel.show_maps(gpt_maps())  # a prompt's maps: measured with the loaded model in a worker
    qtbot.waitUntil(lambda: panel.scores is not None and panel.scores is not panel.score_history.get(30), timeout=10000)


def test_an_older_runs_probe_files_without_scores(qtbot, panel, tmp_path):
    """Probe files written before scores were saved: prev/diag/sink from their maps, no induction line."""
    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.probes import list_probes, save_probe

    rng = np.random.default_rng(0)
    for step in (10, 20):
        A = np.tril(rng.random((2, 5, 5)))
        save_probe(tmp_path, step, AttentionMaps(list("abcde"), None, {MapName("self", 0): A / A.sum(-1, keepdims=True)}))
    panel.set_probes(list_probes(tmp_path))
    assert panel.headScoreCombo.currentData() != "induction"  # opens on a score the files have
    assert sorted(panel.score_curves()) == ["L1 H1", "L1 H2"]
    assert all(r["induction"] == "" and r["prev"] != "" for r in panel.score_table())
    panel.headScoreCombo.setCurrentIndex(panel.headScoreCombo.findData("induction"))
    assert panel.score_curves() == {} and "not saved" in panel.headScoresPlot.getPlotItem().titleLabel.text
    panel.headScoreCombo.setCurrentIndex(panel.headScoreCombo.findData("sink"))
    assert sorted(panel.score_curves()) == ["L1 H1", "L1 H2"]


def test_diagnostics_list_the_dead_heads_of_the_latest_probe_step(qtbot, probe_run, tmp_path, monkeypatch):
    """A reopened run: the dead head of its latest probe file (made by hand) is listed with its advice; live,
    a Probe event's findings replace it."""
    import shutil

    from PySide6.QtWidgets import QListWidget

    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.probes import save_probe
    from fatstudio.core.runs.folder import Run
    from fatstudio.core.training import Probe
    from fatstudio.core.training.diagnostics import head_findings
    from fatstudio.qt.main_window import MainWindow

    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path))
    run_dir = tmp_path / "run"
    shutil.copytree(probe_run[0], run_dir)
    T = 6
    looking = np.tril(np.random.default_rng(0).random((T, T)) ** 4)
    looking /= looking.sum(-1, keepdims=True)
    dead = np.zeros((T, T))
    dead[:, 0] = 1.0
    maps = AttentionMaps(list("abcdef"), None, {MapName("self", 0): np.stack([looking, looking]),
                                                MapName("self", 1): np.stack([looking, dead])})
    save_probe(run_dir, 40, maps)
    w = MainWindow(runs_root=tmp_path)
    qtbot.addWidget(w)
    view = w.findChild(QListWidget, "diagnosticsView")

    def lines():
        return [view.item(i).text() for i in range(view.count())]

    w.open_run(Run.open(run_dir))  # the probe file is read in a worker
    dead = [line for line in lines() if not line.startswith("Nothing unusual")]
    qtbot.waitUntil(lambda: [line for line in lines() if line.startswith("step 40 ")] == [
        "step 40 · head 2 of layer 2 always attends to the same key (a position sink): it may be dead; more "
        "training or a lower learning rate may help."], timeout=5000)
    assert dead == []
    w.workspace.take(Probe(50, str(save_probe(run_dir, 50, maps)), None, tuple(head_findings(maps, 50))))
    qtbot.waitUntil(lambda: any(line.startswith("step 50 · head 2 of layer 2") for line in lines()), timeout=5000)
    healthy = AttentionMaps(maps.tokens, None, {MapName("self", 0): maps.maps[MapName("self", 0)]})
    w.workspace.take(Probe(60, str(save_probe(run_dir, 60, healthy)), None, tuple(head_findings(healthy, 60))))
    qtbot.waitUntil(lambda: not any("head" in line.split(":")[0] for line in lines()), timeout=5000)


# ---- issue 21: the large map after a second run, the user's text, the lesson, one way to count -------------
def test_no_pyqtgraph_subclass_defines_a_name_the_layout_shadows():
    """GraphicsLayoutWidget and PlotWidget set `clear`, `addItem`, … on each instance, bound to their layout or
    plot item: a method of that name in a subclass never runs (HeatmapView.clear was one, and calling it removed
    the plot from the large map for good). No subclass in the app defines one."""
    import inspect

    import pyqtgraph as pg

    import fatstudio.qt.widgets.heatmap as heatmap

    shadowing = ("nextRow", "nextCol", "nextColumn", "addPlot", "addViewBox", "addItem", "getItem", "addLayout",
                 "addLabel", "removeItem", "itemIndex", "clear", "autoRange", "setAxisItems", "setXRange",
                 "setYRange", "setRange", "setAspectLocked", "setMouseEnabled", "setXLink", "setYLink",
                 "enableAutoRange", "disableAutoRange", "setLimits", "register", "unregister", "viewRect")
    assert set(heatmap.SHADOWED) <= set(shadowing)
    classes = [c for _, c in inspect.getmembers(heatmap, inspect.isclass)
               if issubclass(c, (pg.GraphicsLayoutWidget, pg.PlotWidget)) and c.__module__ == heatmap.__name__]
    assert {c.__name__ for c in classes} == {"HeatmapView", "HeadGrid"}
    for cls in classes:
        assert not set(vars(cls)) & set(shadowing), cls


def test_large_map_keeps_its_plot_when_emptied(qtbot):
    from fatstudio.qt.widgets.heatmap import HeatmapView

    view = HeatmapView()
    qtbot.addWidget(view)
    A = np.full((3, 3), 1 / 3)
    view.set_matrix(A, list("abc"), list("abc"))
    view.clear_matrix()
    assert view.matrix is None and view.image.image is None
    view.set_matrix(A, list("abc"), list("xyz"), title="again")
    assert view.plot in view.ci.items and view.colorbar in view.ci.items
    assert view.image.image is not None and view.key_axis.labels == list("xyz")


def _tiny_settings(w, steps=20):
    """A tiny model and a short run with two evaluations, set through the controls a user touches."""
    for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
        w.model_panel.fields[name].setValue(value)
    for name, value in (("steps", steps), ("batch_size", 4), ("eval_interval", 10), ("eval_iters", 1),
                        ("warmup", 2), ("sample_tokens", 0)):
        w.train_panel.fields[name].setValue(value)


def test_large_map_draws_after_a_second_training_run(qtbot, window):
    """The blocker: a second run left the large map white (no image, axes or colour bar) until a restart."""
    LONG = 60_000  # ms: a slow, shared machine
    w = window
    panel = w.attention_panel
    _tiny_settings(w)
    qtbot.waitUntil(lambda: w.train_view.trainButton.isEnabled() and not w.corpus_panel.loading, timeout=LONG)
    for run in (1, 2):
        w.train_view.trainButton.click()
        qtbot.waitUntil(lambda: w.state == "idle" and w.job is None, timeout=LONG)
        assert w.last_status == "finished", w.last_error
        w.viewTabs.setCurrentWidget(w._attention_host)  # a hidden Attention tab gets the probes when shown
        assert panel.probe_steps() == [10, 20], run
        w.viewTabs.setCurrentWidget(w.train_view)
    w.viewTabs.setCurrentWidget(w._attention_host)
    view = panel.attentionView
    view.grab()  # paint it
    assert panel.showing_probe and panel.probe_step == 20
    assert view.plot in view.ci.items and view.plot.scene() is view.scene()
    assert view.colorbar in view.ci.items
    assert view.image.image is not None and view.image.image.shape == (16, 16)
    assert len(view.key_axis.drawn) == 16 and len(view.query_axis.drawn) == 16
    assert "layer 1" in view.plot.titleLabel.text


def test_the_users_text_and_the_training_probe_are_both_reachable(qtbot, panel, probe_run):
    """"Your text" / "Training probe, step N": moving the slider shows the probe, the prompt's maps are kept and
    come back with "Your text"; the caption says what is shown."""
    from fatstudio.core.inspect.probes import list_probes

    run_dir, _ = probe_run
    switch = panel.sourceSwitch
    mine = gpt_maps("the lazy dog")
    panel.set_probes(list_probes(run_dir))
    assert panel.source() == "probe" and not switch.textButton.isEnabled()
    assert switch.probeButton.isChecked() and "Training probe, step 30" in switch.caption.text()
    panel.show_maps(mine)
    assert panel.source() == "text" and switch.textButton.isChecked() and panel.maps is mine
    assert "Your text" in switch.caption.text() and switch.probeButton.text() == "Training probe, step 30"
    panel.probeSlider.setValue(0)  # the slider: the probe at step 10
    assert panel.source() == "probe" and panel.probe_step == 10 and switch.probeButton.isChecked()
    assert switch.probeButton.text() == "Training probe, step 10" and "step 10" in switch.caption.text()
    assert panel.text_maps is mine  # kept
    switch.textButton.click()
    assert panel.maps is mine and panel.source() == "text" and switch.textButton.isChecked()
    switch.probeButton.click()
    assert panel.source() == "probe" and panel.probe_step == 10
    panel.set_probes({})  # no probes (a new run): the user's text again
    assert panel.maps is mine and not switch.probeButton.isEnabled()


def test_after_generate_the_view_shows_the_prompt_and_says_so(qtbot, panel):
    """l_max = 16 and 40 generated tokens: the maps start at the prompt (the last l_max tokens lost it)."""
    loaded = make_loaded("gpt")
    prompt = PromptPanel(panel.workspace)
    qtbot.addWidget(prompt)
    prompt.attentionReady.connect(panel.show_maps)
    prompt.set_model(loaded)
    prompt.promptEdit.setPlainText("the fox")
    prompt.tokensSpin.setValue(40)
    with qtbot.waitSignal(prompt.attentionReady, timeout=10000):
        assert prompt.run()
    qtbot.waitUntil(lambda: not prompt.is_running(), timeout=5000)
    assert len(panel.maps.tokens) == 16 and "".join(panel.maps.tokens[:7]) == "the fox"
    assert panel.attentionView.query_tokens[:7] == list("the fox")
    caption = panel.sourceSwitch.caption.text()
    assert "Your text" in caption and "the prompt (7 tokens) + the first 9 of the 40 generated tokens" in caption
    assert "l_max = 16" in caption
    prompt.shutdown()


def test_layers_and_heads_are_counted_from_1_everywhere(qtbot, panel):
    """The grid, the combo, the large map's title, the table and the hover line count as the paper does and
    never show a map name such as self/0."""
    maps = gpt_maps()
    panel.show_maps(maps)
    panel.set_view(layer=1, head=0)
    assert [panel.layerCombo.itemText(i) for i in range(panel.layerCombo.count())] == ["1", "2"]
    assert [label.text for label in panel.headGrid.row_labels] == ["layer 1", "layer 2"]
    title = panel.attentionView.plot.titleLabel.text
    assert "layer 2 · head 1" in title
    assert panel.hoverLabel.text().startswith("layer 2 · head 1")
    assert [r["layer"] for r in panel.score_table()] == ["1"] * 4 + ["2"] * 4
    texts = [title, panel.hoverLabel.text(), *(label.text for label in panel.headGrid.row_labels),
             panel.sourceSwitch.caption.text(), panel.entropyTable.item(0, 2).toolTip()]
    assert not any("self/" in t for t in texts), texts
    loaded = make_loaded("edt")
    tok = loaded.tokenizer
    z = [tok.bos_id] + tok.encode("hello") + [tok.eos_id]
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z))
    assert [label.text for label in panel.headGrid.row_labels] == ["cross-attention<br>layer 1",
                                                                    "cross-attention<br>layer 2"]
    assert "cross-attention layer 2 · head" in panel.attentionView.plot.titleLabel.text


def _probe_files(tmp_path, prev_by_step: dict[int, float]):
    """Probe files of a 1-layer, 2-head model whose head 0 puts ``prev`` on the previous token at each step."""
    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.probes import list_probes, save_probe

    T = 6
    tmp_path.mkdir(parents=True, exist_ok=True)
    for step, prev in prev_by_step.items():
        A = np.zeros((2, T, T))
        A[:, 0, 0] = 1.0
        for i in range(1, T):
            A[0, i, i - 1], A[0, i, :i - 1], A[0, i, i] = prev, 0, 1 - prev  # head 1: prev-token as it trains
            A[1, i, : i + 1] = 1 / (i + 1)  # head 2: uniform, flat
        save_probe(tmp_path, step, AttentionMaps(list("abcdef"), None, {MapName("self", 0): A}))
    return list_probes(tmp_path)


def test_head_scores_plot_opens_on_the_score_that_moves_and_folds_when_flat(qtbot, panel, tmp_path):
    panel.show()
    qtbot.waitExposed(panel)
    panel.set_probes(_probe_files(tmp_path / "a", {10: 0.1, 20: 0.5, 30: 0.9}))
    assert panel.headScoreCombo.currentData() == "prev"  # moves 0.8; the others less
    assert panel.score_moves()["prev"] > 0.75 and not panel.score_plot_folded()
    assert panel.headScoresPlot.isVisible() and not panel.headScoresNote.isVisible()
    panel.headScoreCombo.setCurrentIndex(panel.headScoreCombo.findData("sink"))
    panel.headScoreCombo.activated.emit(panel.headScoreCombo.currentIndex())  # the user's pick stays …
    panel.add_probe(40, _probe_files(tmp_path / "a", {40: 0.95})[40])
    assert panel.headScoreCombo.currentData() == "sink"
    panel.set_probes(_probe_files(tmp_path / "b", {10: 0.5, 20: 0.51, 30: 0.5}))  # … until another run
    assert panel.score_plot_folded() and panel.headScoresNote.isVisible()
    assert "flat" in panel.headScoresNote.text() and "3 evaluations" in panel.headScoresNote.text()
    assert panel.scoreHistory.maximumHeight() < 60  # one line
    panel.headScoresToggle.click()  # shown anyway on request
    assert not panel.score_plot_folded() and panel.headScoresPlot.isVisible()
    assert panel.scoreHistory.maximumHeight() == panel.SCORE_PLOT_MAX


def test_head_scores_plot_opens_on_the_score_that_rises_not_one_that_only_falls(qtbot, panel, tmp_path):
    """As in the default preset's run: a previous-token head forms (0.1 → 0.5) while another head's
    first-token weight falls further (0.9 → 0.2); the plot opens on the head forming."""
    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.probes import list_probes, save_probe

    T = 6
    for step, (prev, sink) in {10: (0.1, 0.9), 20: (0.3, 0.5), 30: (0.5, 0.2)}.items():
        A = np.zeros((2, T, T))
        A[:, 0, 0] = 1.0
        for i in range(1, T):
            A[0, i, i - 1], A[0, i, i] = prev, 1 - prev
            A[1, i, 0], A[1, i, 1:i + 1] = sink, (1 - sink) / i
        save_probe(tmp_path, step, AttentionMaps(list("abcdef"), None, {MapName("self", 0): A}))
    panel.show()
    qtbot.waitExposed(panel)
    panel.set_probes(list_probes(tmp_path))
    assert panel.score_moves()["sink"] > panel.score_moves()["prev"]  # the fall is the larger movement …
    assert panel.headScoreCombo.currentData() == "prev"  # … the rise is what the plot opens on


def test_64_tokens_get_64_labels_on_each_axis_at_the_default_window_size(qtbot, window):
    w = window
    panel = w.attention_panel
    loaded = make_loaded("gpt", l_max=64, H=4)
    text = ("the quick brown fox jumps over the lazy dog. " * 2)[:64]
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode(text)))
    w.viewTabs.setCurrentWidget(w._attention_host)
    qtbot.waitExposed(panel)
    view = panel.attentionView
    view.grab()
    assert view.key_axis.drawn == [*map(display_token, text)]
    assert view.query_axis.drawn == [*map(display_token, text)]
    assert view.key_axis.rotated or view.key_axis.font_px >= 8


def test_the_text_strip_shows_four_lines_of_a_long_text_beside_the_map_and_the_lens_at_1440x900(qtbot, window,
                                                                                                   tmp_path):
    """A run's text (its head scores over training above, the lens of a 4-layer model under it): a text of six
    lines gets four without scrolling (it got two), the map and the lens keep their room, and a one-line
    text gives the height back to the map."""
    w = window
    w.resize(1440, 900)
    qtbot.waitUntil(lambda: w.width() == 1440 and w.height() == 900, timeout=5000)
    panel = w.attention_panel
    loaded = make_loaded("gpt", l_max=64, H=4, L=4)
    tok = loaded.tokenizer
    panel.set_model(loaded)
    panel.set_probes(_probe_files(tmp_path, {10: 0.1, 20: 0.9}))  # the score plot unfolds
    lens, strip = panel.lensView, panel.tokenStrip
    line = strip.fontMetrics().lineSpacing()

    def show(text: str) -> None:  # generated in the Prompt tab, then looked at
        w.viewTabs.setCurrentWidget(w._prompt_host)
        panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, tok.encode(text)))
        w.viewTabs.setCurrentWidget(w._attention_host)
        qtbot.waitExposed(panel)
        qtbot.waitUntil(lambda: lens.lens is not None and lens.lens.tokens == list(text) and not lens.folded(),
                        timeout=60_000)
        qtbot.wait(300)  # laid out again once the lens and the strips have asked for their heights

    show("the fox\nthe dog\nhello\nworld\n0123\nlazy\n")
    assert strip.height() >= 4 * line + 2 * strip.document().documentMargin()
    caption = panel.strips.stripCaption
    assert caption.height() >= caption.heightForWidth(caption.width())  # whole
    assert lens.height() >= lens.gridScroll.height() + lens.captionLabel.height()  # its grid whole
    tall = panel.attentionView.height()
    assert tall >= 200
    show("the fox")
    assert strip.height() < 3 * line and panel.attentionView.height() > tall


@pytest.mark.parametrize("size", [(1366, 740), (1440, 900)], ids=["1366x740", "1440x900"])
def test_the_head_combo_is_not_cut_beside_the_kind_combo(qtbot, window, size):
    """An encoder-decoder's bar holds the kind combo too; the head combo ("1  (H = 0.54 nats)") kept its text."""
    w = window
    w.resize(*size)
    qtbot.waitUntil(lambda: w.width() == size[0], timeout=5000)
    loaded = make_loaded("edt", H=4)
    tok = loaded.tokenizer
    z = [tok.bos_id] + tok.encode("hello") + [tok.eos_id]
    panel = w.attention_panel
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z))
    w.viewTabs.setCurrentWidget(w._attention_host)
    qtbot.waitExposed(panel)
    QApplication.processEvents()
    qtbot.wait(300)  # the bar is laid out again once the maps are drawn
    assert panel.kindCombo.isVisible() and w.width() == size[0]
    for combo in (panel.headCombo, panel.kindCombo, panel.layerCombo):
        widest = max(combo.fontMetrics().horizontalAdvance(combo.itemText(i)) for i in range(combo.count()))
        assert combo.width() >= widest + 20, (combo.objectName(), combo.width(), widest)


def test_nothing_is_cut_colour_bar_kind_combo_and_table_headers(qtbot, panel):
    loaded = make_loaded("edt")
    tok = loaded.tokenizer
    z = [tok.bos_id] + tok.encode("hello") + [tok.eos_id]
    panel.show_maps(generation.attention_maps_for_ids(loaded.model, tok, [tok.bos_id] + tok.encode("dog"), z))
    panel.resize(700, 500)  # narrow
    panel.show()
    qtbot.waitExposed(panel)
    bar = panel.attentionView.colorbar.axis
    fm = QFontMetricsF(bar.style["tickFont"] or bar.font())
    assert bar.width() >= fm.horizontalAdvance("0.8") + bar.style["tickLength"] + bar.style["tickTextOffset"][0]
    combo = panel.kindCombo
    widest = max(combo.fontMetrics().horizontalAdvance(combo.itemText(i)) for i in range(combo.count()))
    assert combo.width() >= widest + 20
    header = panel.entropyTable.horizontalHeader()
    for c in range(header.count()):
        text = panel.entropyTable.horizontalHeaderItem(c).text()
        assert header.sectionSize(c) >= header.fontMetrics().horizontalAdvance(text), text
