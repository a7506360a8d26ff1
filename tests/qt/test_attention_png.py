"""The labelled attention PNG (`fatstudio attention … --out maps.png`): every map × head at its place on the
fixed 0-1 scale with its exact colours, titles "layer l · head h", token labels on both axes, one colour bar;
the picture grows with the tokens, the heads and the layers."""
from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QImage

from fatstudio.core.attention_maps import MEAN_HEAD, VIRIDIS, AttentionMaps, colormap
from fatstudio.qt.widgets import attention_png
from fatstudio.qt.widgets.attention_png import render_attention_maps, save_attention_png, tile_title

WHITE = (255, 255, 255)


def rows(rng, h, tq, tk):
    A = rng.random((h, tq, tk)).astype(np.float32)
    return A / A.sum(-1, keepdims=True)


def edt_maps():
    rng = np.random.default_rng(0)
    maps = {"enc/0": rows(rng, 2, 5, 5), "dec/0": rows(rng, 2, 3, 3), "cross/0": rows(rng, 2, 3, 5),
            "cross/1": rows(rng, 2, 3, 5)}
    return AttentionMaps(["<bos>", "a", " "], ["<bos>", "c", "d", "e", "<eos>"], maps)


def gpt_maps(tokens: int = 6, heads: int = 2, layers: int = 2):
    rng = np.random.default_rng(1)
    return AttentionMaps([f"t{i}" for i in range(tokens)], None,
                         {f"self/{l}": rows(rng, heads, tokens, tokens) for l in range(layers)})


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
    assert layout.tiles["cross/0", 0].size().toTuple() == (5 * s, 3 * s)


def test_titles_token_labels_and_headings_are_drawn(qapp, monkeypatch):
    am = edt_maps()
    image, layout = render_attention_maps(am)
    px = pixels(image)
    assert tile_title("cross/1", 0) == "layer 1 · head 1" and tile_title("enc/0", MEAN_HEAD) == "layer 0 · mean over heads"
    for key, rect in layout.titles.items():
        assert inked(px, rect), key
        assert inked(px, layout.key_labels[key]), key
    for name, rect in layout.query_labels.items():
        assert inked(px, rect), name
    assert set(layout.headings) == {"enc", "dec", "cross"} and all(inked(px, r) for r in layout.headings.values())
    monkeypatch.setattr(attention_png, "tile_title", lambda name, head: "")
    untitled, same = render_attention_maps(am)
    assert same.titles == layout.titles
    assert not any(inked(pixels(untitled), r) for r in layout.titles.values())  # the ink was the titles
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
    image, layout = render_attention_maps(am, ["self/1"])
    assert layout.cell == 1 and set(layout.tiles) == {("self/1", 0)}
    assert layout.tiles["self/1", 0].size().toTuple() == (200, 200) and not image.isNull()
    with pytest.raises(ValueError, match="no attention map 'self/5'"):
        render_attention_maps(am, ["self/5"])
