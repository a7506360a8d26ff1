"""AttentionMaps: map names, what there is, the numbers of a head or the mean, and the one export path
(PNG heatmaps on the fixed viridis scale, CSV tables) that the CLI and the Attention panel share."""
import csv
import io

import numpy as np
import pytest

from fatstudio.core.inference.attention_maps import MEAN_HEAD, VIRIDIS, AttentionMaps, colormap, max_pool
from fatstudio.core.names import ComponentName, MapName


def edt_maps():
    rng = np.random.default_rng(0)

    def rows(h, tq, tk):
        A = rng.random((h, tq, tk)).astype(np.float32)
        return A / A.sum(-1, keepdims=True)

    shapes = {"cross/1": (3, 5), "enc/0": (5, 5), "dec/0": (3, 3), "enc/1": (5, 5), "cross/0": (3, 5), "dec/1": (3, 3)}
    maps = {MapName.parse(name): rows(2, *shape) for name, shape in shapes.items()}
    return AttentionMaps(["<bos>", "a", " "], ["<bos>", "c", "d", "e", "<eos>"], maps)


def test_map_names():
    assert MapName.parse("cross/1") == MapName("cross", 1) and str(MapName("enc", 3)) == "enc/3"
    for bad in ("self", "self/", "/0", "self/x", "self/-1", "attn/0"):
        with pytest.raises(ValueError, match="kind/layer"):
            MapName.parse(bad)
    assert [MapName.parse(n).label for n in ("self/0", "dec/1", "cross/0")] == ["layer 1", "decoder layer 2",
                                                                                "cross-attention layer 1"]
    assert MapName("self", 0).head_label(2) == "layer 1 · head 3"
    assert MapName("enc", 1).head_label(MEAN_HEAD) == "encoder layer 2 · mean over heads"


def test_component_names():
    names = ["self/0/2", "cross/1/0", "mlp/1", "enc-mlp/0", "dec-mlp/3"]
    assert [str(ComponentName.parse(n)) for n in names] == names
    assert ComponentName.parse("dec-mlp/3") == ComponentName.mlp("dec", 3)
    assert [ComponentName.parse(n).label for n in names] == [
        "layer 1 · head 3", "cross-attention layer 2 · head 1", "layer 2 · MLP", "encoder layer 1 · MLP",
        "decoder layer 4 · MLP"]
    for bad in ("self/0", "cross-mlp/0", "mlp/x", "self/0/x", "attn/0/1"):
        with pytest.raises(ValueError, match="not the name of a component"):
            ComponentName.parse(bad)


def test_kinds_layers_heads_and_tokens():
    am = edt_maps()
    assert am.kinds() == ["enc", "dec", "cross"] and am.layers("enc") == [0, 1] and am.layers("self") == []
    assert am.n_heads(MapName("dec", 1)) == 2
    assert am.query_tokens(MapName("enc", 0)) == am.context_tokens == am.key_tokens(MapName("cross", 0))
    assert am.query_tokens(MapName("cross", 0)) == am.tokens == am.key_tokens(MapName("dec", 0))
    np.testing.assert_array_equal(am.matrix(MapName("enc", 1), 1), am.maps[MapName("enc", 1)][1])
    np.testing.assert_array_equal(am.matrix(MapName("enc", 1), MEAN_HEAD), am.maps[MapName("enc", 1)].mean(0))
    enc1 = MapName("enc", 1)
    assert am.mean_entropy(enc1) == pytest.approx(float(-(am.matrix(enc1) * np.log(am.matrix(enc1))).sum(-1).mean()))
    with pytest.raises(ValueError, match="no head 2"):
        am.matrix(MapName("enc", 1), 2)


def test_one_colour_scale():
    assert np.array_equal(colormap(np.array([0.0, 1.0, -3.0, 7.0, np.nan])),
                          VIRIDIS[[0, -1, 0, -1, 0]])
    assert colormap(np.full((2, 3), 0.5)).shape == (2, 3, 3)


def test_head_exports(tmp_path):
    am = edt_maps()
    rows = list(csv.reader(am.save_head(tmp_path / "x.csv", MapName("cross", 0), MEAN_HEAD).open(encoding="utf-8")))
    assert rows[0] == ["query \\ key", "<bos>", "c", "d", "e", "<eos>"]
    assert [r[0] for r in rows[1:]] == ["<bos>", "a", "␣"]  # whitespace shown
    np.testing.assert_array_equal(np.array([[float(v) for v in r[1:]] for r in rows[1:]]),
                                  am.maps[MapName("cross", 0)].mean(0))  # exact
    assert am.head_csv(MapName("cross", 0), MEAN_HEAD) == (tmp_path / "x.csv").read_bytes().decode("utf-8")
    for name in ("x.json", "x.png"):  # numbers only: a picture is the Qt layer's
        with pytest.raises(ValueError, match=r"use a \.csv file \(a picture is the Qt layer's"):
            am.save_head(tmp_path / name, MapName("cross", 0))
    with pytest.raises(ValueError, match="no attention map 'self/0'"):
        am.save_head(tmp_path / "y.csv", MapName("self", 0))
    assert not (tmp_path / "y.csv").exists()


def test_chosen_maps(tmp_path):
    am = edt_maps()
    names = [MapName("enc", 0), MapName("enc", 1)]
    back = AttentionMaps.load(am.save(tmp_path / "g.npz", names))
    assert list(back.maps) == names and back.context_tokens == am.context_tokens
    lines = list(csv.reader(io.StringIO(am.to_csv(names))))
    assert len(lines) == 1 + sum(am.maps[n].size for n in names)


def test_max_pool_keeps_sparse_patterns():
    A = np.eye(200)[::-1]
    assert np.array_equal(max_pool(A, 64), np.eye(50)[::-1])
    assert max_pool(A[:60, :30], 64) is A[:60, :30] or max_pool(A[:60, :30], 64).shape == (60, 30)


def focused_maps(sharp: tuple[int, int], L=2, H=3, T=6) -> AttentionMaps:
    """Self-attention over ``L`` layers of ``H`` heads, every head uniform but head ``sharp`` = (l, h), which
    attends to the previous token."""
    A = np.full((L, H, T, T), 1.0 / T)
    A[sharp] = np.eye(T, k=-1) + np.eye(T, k=T - 1)  # each query to the one before (the first to the last)
    return AttentionMaps(list("abcdef"[:T]), None, {MapName("self", l): A[l] for l in range(L)})


def test_the_view_opens_on_the_lesson_kind_and_its_most_informative_head():
    assert focused_maps((1, 2)).focused_head("self") == (1, 2)  # the one not uniform, whatever its layer
    assert focused_maps((0, 1)).focused_head("self") == (0, 1)
    maps, first = focused_maps((1, 2)), np.eye(6)[[0] * 6]
    self0, self1 = MapName("self", 0), MapName("self", 1)
    maps.maps[self0][0] = first  # a sink: every query on the first key, as sharp as (1, 2) and before it
    assert maps.entropy(self0)[0] <= maps.entropy(self1)[2] and list(maps.sinks(self0)) == [True, False, False]
    assert maps.focused_head("self") == (1, 2)  # passed over while another head is not one
    only_sinks = AttentionMaps(list("abcdef"), None, {MapName("self", 0): np.stack([0.8 * first + 0.2 / 6, first])})
    assert only_sinks.focused_head("self") == (0, 1)  # only sinks: the sharpest
    maps = edt_maps()
    assert maps.lesson_kind() == "cross"
    maps.maps[MapName("cross", 0)][1] = np.eye(3, 5)  # sharper than any head of the last layer, but not the lesson's
    l, h = maps.focused_head("cross")
    assert l == 1 and h == int(np.argmin(maps.entropy(MapName("cross", 1))))
    entropies = {(l, h): e for l in (0, 1) for h, e in enumerate(maps.entropy(MapName("enc", l)))}
    assert maps.focused_head("enc") == min(entropies, key=entropies.__getitem__)  # of all the encoder's layers
    del maps.maps[MapName("cross", 0)], maps.maps[MapName("cross", 1)]
    assert maps.lesson_kind() == "dec"
    with pytest.raises(ValueError, match="no 'cross' attention"):
        maps.focused_head("cross")
