"""Head scores: hand-built attention maps whose previous-token, diagonal, sink and induction scores are known
exactly; a hand-made "model" whose head attends by the induction rule scores 1; real tiny models give one
score in [0, 1] per head of every self-attention map and none for cross-attention."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.inspect import head_scores as hs
from fatstudio.core.names import MapName

CORPUS = ["the quick brown fox jumps over the lazy dog.\n", "hello world, 0123456789"]


def shift(T: int, k: int) -> np.ndarray:
    """(T, T): query i attends wholly to key i-k (to key 0 where i-k < 0)."""
    A = np.zeros((T, T))
    for i in range(T):
        A[i, max(i - k, 0)] = 1.0
    return A


def test_previous_token_head_scores_exactly():
    T = 7
    A = np.stack([shift(T, 1), shift(T, 0), np.tile(np.eye(T)[0], (T, 1)), np.tril(np.ones((T, T)))])
    A[3] /= A[3].sum(-1, keepdims=True)  # causal uniform
    s = hs.text_scores({MapName("self", 0): A})[MapName("self", 0)]
    assert s["prev"][0] == 1 and s["diag"][0] == pytest.approx(1 / T) and s["sink"][0] == pytest.approx(2 / T)
    assert s["prev"][1] == 0 and s["diag"][1] == 1 and s["sink"][1] == pytest.approx(1 / T)
    assert s["prev"][2] == pytest.approx(1 / (T - 1)) and s["diag"][2] == pytest.approx(1 / T) and s["sink"][2] == 1
    # causal uniform: query i gives 1/(i+1) to each of its keys
    w = 1 / np.arange(1, T + 1)
    assert s["diag"][3] == pytest.approx(w.mean())
    assert s["sink"][3] == pytest.approx(w.mean())
    assert s["prev"][3] == pytest.approx(w[1:].mean())


def test_only_self_attention_maps_get_scores():
    rng = np.random.default_rng(0)
    sq = rng.random((2, 4, 4))
    maps = AttentionMaps(list("abcd"), list("vwxyz"), {MapName("enc", 0): rng.random((2, 5, 5)), MapName("dec", 0): sq,
                                                       MapName("cross", 0): rng.random((2, 4, 5))})
    assert set(hs.text_scores(maps)) == {MapName("enc", 0), MapName("dec", 0)}
    assert hs.text_scores(maps)[MapName("dec", 0)]["prev"].shape == (2,)
    no_model = hs.map_scores(maps)  # no model: prev, diag, sink only
    assert no_model.score_names() == ["prev", "diag", "sink"] and no_model.get(MapName("dec", 0), "induction") is None


def induction_map(n: int) -> np.ndarray:
    """(2n+1, 2n+1): from query p ≥ n-1, all attention on key p-n+1; earlier queries on key 0."""
    T = 2 * n + 1
    A = np.zeros((T, T))
    for p in range(T):
        A[p, p - n + 1 if p >= n - 1 else 0] = 1.0
    return A


def test_induction_score_of_the_exact_pattern_is_one():
    n = 6
    A = np.stack([induction_map(n), shift(2 * n + 1, 1), shift(2 * n + 1, n)])
    s = hs.induction_score(A, n)
    assert s[0] == 1.0
    assert s[1] == 0.0  # previous token
    assert s[2] == 0.0  # the earlier occurrence itself, not the token after it
    with pytest.raises(ValueError):
        hs.induction_score(A, n + 1)


class InductionModel(torch.nn.Module):
    """Not a transformer: returns head 0 = the induction pattern of n (read off the input's length),
    head 1 = the previous-token shift, for a forward pass with ``return_attention=True``."""

    def __init__(self, l_max: int, arch: str = "gpt"):
        super().__init__()
        self.config = SimpleNamespace(l_max=l_max, arch=arch)
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[int]] = []

    def forward(self, x, return_attention=False, context=None):
        T = x.shape[1]
        self.seen.append(x[0].tolist())
        A = torch.tensor(np.stack([induction_map((T - 1) // 2), shift(T, 1)]))[None]
        attn = {"self/0": A} if context is None else {"dec/0": A, "enc/0": A, "cross/0": A}
        return None, attn


def test_head_scores_of_a_hand_made_induction_model():
    tok = train_tokenizer("char", CORPUS)
    model = InductionModel(l_max=16)
    out = hs.head_scores(model, tok, seed=3)
    n = hs.induction_length(16)
    assert out.n == n == 7
    assert out.score_names() == ["prev", "diag", "sink", "induction"]
    np.testing.assert_array_equal(out.get(MapName("self", 0), "induction"), [1.0, 0.0])
    assert out.get(MapName("self", 0), "prev")[1] == 1.0  # maps=None: prev/diag/sink from the repeated sequence
    ids = model.seen[0]
    assert len(ids) == 2 * n + 1 and ids[0] == tok.bos_id and ids[1:n + 1] == ids[n + 1:]
    specials = {tok.pad_id, tok.mask_id, tok.bos_id, tok.eos_id}
    assert not specials & set(ids[1:])
    assert hs.repeated_tokens(tok, n, seed=3) == ids  # seeded: the same sequence again
    assert hs.repeated_tokens(tok, n, seed=4) != ids

    edt = InductionModel(l_max=16, arch="edt")
    out = hs.head_scores(edt, tok)
    assert set(out.names()) == {MapName("enc", 0), MapName("dec", 0)}  # cross-attention gets no scores
    np.testing.assert_array_equal(out.get(MapName("enc", 0), "induction"), [1.0, 0.0])


def test_too_short_a_context_is_an_error_in_words():
    tok = train_tokenizer("char", CORPUS)
    with pytest.raises(ValueError, match="l_max"):
        hs.head_scores(InductionModel(l_max=2), tok)


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_real_tiny_models_give_scores_in_0_1(arch):
    tok = train_tokenizer("char", CORPUS)
    cfg = ModelConfig(arch=arch, vocab_size=tok.vocab_size, l_max=12, L=2, L_enc=1, L_dec=2, H=3, d_e=12,
                      d_mlp=16)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    from fatstudio.core.inference import generation

    ids = tok.encode("the fox")
    maps = generation.attention_maps_for_ids(model, tok, ids, ids if arch == "edt" else None)
    out = hs.head_scores(model, tok, maps)
    expected = {n for n in maps.maps if n.kind != "cross"}
    assert set(out.names()) == expected and out.n == 5
    for name in expected:
        for score in hs.SCORES:
            s = out.get(name, score)
            assert s.shape == (3,) and np.all((s >= 0) & (s <= 1 + 1e-6)), (name, score, s)
        # prev/diag/sink are the text's
        np.testing.assert_allclose(out.get(name, "diag"), np.diagonal(maps.maps[name], axis1=1, axis2=2).mean(-1),
                                   rtol=1e-6)


def test_scores_round_trip_through_plain_json_and_print_as_a_table():
    import json

    s = hs.HeadScores({MapName("self", 0): {"prev": np.array([0.25, np.nan]), "induction": np.array([0.1234567, 1.0])},
                       MapName("dec", 1): {"sink": np.array([0.5, 0.0])}}, n=7, seed=3)
    d = json.loads(json.dumps(s.to_dict(), allow_nan=False))  # standard JSON: NaN is written null
    assert list(d["maps"]) == ["self/0", "dec/1"]  # the maps named as the files name them
    back = hs.HeadScores.from_dict(d)
    assert back.n == 7 and back.seed == 3 and back.names() == [MapName("self", 0), MapName("dec", 1)]
    assert back.get(MapName("self", 0), "induction").tolist() == [0.123457, 1.0]  # 6 decimals
    assert back.get(MapName("self", 0), "prev")[0] == 0.25 and np.isnan(back.get(MapName("self", 0), "prev")[1])
    assert back.get(MapName("dec", 1), "sink").tolist() == [0.5, 0.0] and back.get(MapName("dec", 1), "prev") is None
    for bad in ({}, {"maps": {"self/0": {"prev": ["x"]}}}, {"maps": [1]}, "text"):
        with pytest.raises(ValueError, match="not head scores"):
            hs.HeadScores.from_dict(bad)
    lines = back.table().splitlines()
    assert lines[0].split() == ["head", "prev", "sink", "induction"] and len(lines) == 5
    # named as a person reads them, from 1 with the kind in words: no map names such as self/0
    assert lines[1].split() == ["layer", "1", "·", "head", "1", "0.250", "0.123"]
    assert lines[4].split() == ["decoder", "layer", "2", "·", "head", "2", "0.000"]
    assert "/" not in back.table()
