"""The attention panel: the numbers drawn are the reference's softmax(S/√d_attn) exactly, switching
kind/layer/head shows that head, clicking a query lays its row over the text, export to PNG and CSV."""
import csv

import numpy as np
import pytest
import torch
from PySide6.QtCore import Qt

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
    grid = panel.export_png(tmp_path / "g.png", what="grid").read_bytes()
    assert grid == maps.to_png(["self/0", "self/1"], with_mean=True)
    with pytest.raises(ValueError, match="'view' or 'grid'"):
        panel.export_png(tmp_path / "p.png", what="panel")
