"""The labelled attention PNG (`fatstudio attention … --out maps.png`): every map × head at its place on the
fixed 0-1 scale with its exact colours, titles "layer l · head h", token labels on both axes, one colour bar;
the picture grows with the tokens, the heads and the layers."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage

from fatstudio.core.inference.attention_maps import MEAN_HEAD, VIRIDIS, AttentionMaps, colormap
from fatstudio.core.names import MapName
from fatstudio.qt.widgets.attention_png import render_attention_maps, save_attention_png

WHITE = (255, 255, 255)


def rows(rng, h, tq, tk):
    A = rng.random((h, tq, tk)).astype(np.float32)
    return A / A.sum(-1, keepdims=True)


def edt_maps():
    rng = np.random.default_rng(0)
    maps = {MapName("enc", 0): rows(rng, 2, 5, 5), MapName("dec", 0): rows(rng, 2, 3, 3), MapName("cross", 0): rows(rng, 2, 3, 5),
            MapName("cross", 1): rows(rng, 2, 3, 5)}
    return AttentionMaps(["<bos>", "a", " "], ["<bos>", "c", "d", "e", "<eos>"], maps)


def gpt_maps(tokens: int = 6, heads: int = 2, layers: int = 2):
    rng = np.random.default_rng(1)
    return AttentionMaps([f"t{i}" for i in range(tokens)], None,
                         {MapName("self", l): rows(rng, heads, tokens, tokens) for l in range(layers)})


def pixels(image: QImage) -> np.ndarray:
    """(height, width, 3) uint8 RGB."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    return np.frombuffer(bytes(image.constBits()), np.uint8).reshape(h, stride)[:, :3 * w].reshape(h, w, 3)


def crop(px: np.ndarray, r: QRect) -> np.ndarray:
    return px[r.top():r.bottom() + 1, r.left():r.right() + 1]


def inked(px: np.ndarray, r: QRect) -> bool:
    """Whether anything is drawn in ``r`` (a pixel that is not the white background)."""
    return bool((crop(px, r) != WHITE).any())


def test_every_map_and_head_drawn_exactly_on_the_fixed_scale(qapp, tmp_path):
    am = edt_maps()
    path = save_attention_png(am, tmp_path / "maps.png", with_mean=True)
    image = QImage(str(path))
    assert not image.isNull()
    _, layout = render_attention_maps(am, with_mean=True)
    assert (image.width(), image.height()) == (layout.width, layout.height)
    assert set(layout.tiles) == {(n, h) for n in am.maps for h in (0, 1, MEAN_HEAD)}
    px = pixels(image)
    s = layout.cell
    for (name, head), rect in layout.tiles.items():
        want = colormap(am.matrix(name, head)).repeat(s, 0).repeat(s, 1)
        np.testing.assert_array_equal(crop(px, rect), want)
    bar = crop(px, layout.colorbar)
    assert np.abs(bar[0].astype(int) - VIRIDIS[-1]).max() <= 2 and np.abs(bar[-1].astype(int) - VIRIDIS[0]).max() <= 2
    # cross maps: decoder queries × encoder keys
    assert layout.tiles[MapName("cross", 0), 0].size().toTuple() == (5 * s, 3 * s)


def test_titles_token_labels_and_headings_are_drawn(qapp, monkeypatch):
    am = edt_maps()
    image, layout = render_attention_maps(am)
    px = pixels(image)
    for key, rect in layout.titles.items():
        assert inked(px, rect), key
        assert inked(px, layout.key_labels[key]), key
    for name, rect in layout.query_labels.items():
        assert inked(px, rect), name
    assert set(layout.headings) == {"enc", "dec", "cross"} and all(inked(px, r) for r in layout.headings.values())
    monkeypatch.setattr(MapName, "head_label", lambda name, head: "")  # the titles: "cross-attention layer 2 · head 1"
    untitled, same = render_attention_maps(am)
    assert same.titles.keys() == layout.titles.keys()
    assert not any(inked(pixels(untitled), r) for r in same.titles.values())  # the ink was the titles
    assert set(render_attention_maps(gpt_maps())[1].headings) == set()  # one kind: no headings


def test_the_picture_grows_with_tokens_heads_and_layers(qapp):
    def size(**kw):
        _, layout = render_attention_maps(gpt_maps(**kw))
        return layout.width, layout.height

    w, h = size()
    more_heads, more_layers, more_tokens = size(heads=4), size(layers=3), size(tokens=12)
    assert more_heads[0] > w and more_heads[1] == h
    assert more_layers[1] > h and more_layers[0] == w
    assert more_tokens[0] > w and more_tokens[1] > h


def test_long_inputs_and_chosen_maps(qapp):
    am = gpt_maps(tokens=200, heads=1, layers=2)
    image, layout = render_attention_maps(am, [MapName("self", 1)])
    assert layout.cell == 1 and set(layout.tiles) == {(MapName("self", 1), 0)}
    assert layout.tiles[MapName("self", 1), 0].size().toTuple() == (200, 200) and not image.isNull()
    with pytest.raises(ValueError, match="no attention map 'self/5'"):
        render_attention_maps(am, [MapName("self", 5)])


def names(text: str) -> list[MapName]:
    return [MapName.parse(name) for name in text.split()]


def edt_maps_as_the_model_gives_them():
    """An edt's maps in the model's order: the encoder's, then each decoder layer's self- and cross-attention."""
    rng = np.random.default_rng(2)
    shapes = {"enc/0": (5, 5), "enc/1": (5, 5), "dec/0": (3, 3), "cross/0": (3, 5), "dec/1": (3, 3), "cross/1": (3, 5)}
    maps = {MapName.parse(name): rows(rng, 2, *shape) for name, shape in shapes.items()}
    return AttentionMaps(["<bos>", "a", "b"], ["<bos>", "c", "d", "e", "<eos>"], maps)


def test_edt_maps_are_grouped_by_kind_under_their_own_heading(qapp):
    """Each row sits under the heading of its own kind: the model's interleaved order (dec/0, cross/0, dec/1,
    cross/1) put the decoder's and cross-attention's first layers under the encoder's heading."""
    am = edt_maps_as_the_model_gives_them()
    _, layout = render_attention_maps(am)
    assert layout.rows == names("enc/0 enc/1 dec/0 dec/1 cross/0 cross/1")
    for name in am.maps:
        top = layout.tiles[name, 0].top()
        above = max((r.top(), kind) for kind, r in layout.headings.items() if r.top() < top)
        assert above[1] == name.kind, (name, above)
    tops = [layout.tiles[n, 0].top() for n in layout.rows]
    assert tops == sorted(tops)
    # chosen maps are grouped too
    assert render_attention_maps(am, names("cross/0 dec/1 dec/0"))[1].rows == names("dec/1 dec/0 cross/0")


@pytest.mark.parametrize("tokens", [26, 64])
def test_every_token_is_labelled_up_to_64(qapp, tokens):
    """Up to l_max = 64 every query and key token has its label: ink in each token's slot beside and under a map."""
    am = gpt_maps(tokens=tokens, heads=1, layers=1)
    image, layout = render_attention_maps(am)
    px = pixels(image)
    s = layout.cell
    assert layout.label_step == 1 and s >= QFontMetrics_height(layout.label_px)
    q, k = layout.query_labels[MapName("self", 0)], layout.key_labels[MapName("self", 0), 0]
    for i in range(tokens):
        assert inked(px, QRect(q.x(), q.y() + i * s, q.width(), s)), f"query {i}"
        assert inked(px, QRect(k.x() + i * s, k.y(), s, k.height())), f"key {i}"
    long = render_attention_maps(gpt_maps(tokens=200, heads=1, layers=1))[1]
    assert long.label_step > 1  # longer inputs: every n-th label


def QFontMetrics_height(px: int) -> int:
    from PySide6.QtGui import QFont, QFontMetrics

    font = QFont()
    font.setPixelSize(px)
    return QFontMetrics(font).height()
