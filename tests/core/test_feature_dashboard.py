"""Feature dashboards: a hand-set dictionary whose feature fires exactly on one token has those tokens as its top
contexts, the right counts, histogram and label, and promotes what W_u (γ ⊙ (d − mean d)) says; a random
dictionary's cached activations are its `encode` on each window read from its own start."""
import numpy as np
import pytest
import torch
from interventions_helpers import tiny

from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.prompting import display_token
from fatstudio.core.inspect.ablation import validation_dataset
from fatstudio.core.inspect.features.dashboard import (
    feature_activations,
    logit_effects,
    point_activations,
    text_activations,
)
from fatstudio.core.inspect.features.dictionary import Dictionary

TEXT = "".join(f"line {i}: the fox {'x' * (i % 3)} jumps over {i * 7 % 13}.\n" for i in range(80))
L_MAX = 12


def make_loaded(tmp_path, arch="gpt", task="next_token", l_max=L_MAX):
    p = tmp_path / "c.txt"
    p.write_text(TEXT, encoding="utf-8")
    tok = train_tokenizer("char", [TEXT])
    model = tiny(arch, vocab_size=tok.vocab_size, l_max=l_max).float()
    data = DataConfig(corpus=str(p), val_fraction=0.2, task=task, split="tail")
    return LoadedModel(model, tok, RunConfig(model.config, data, TrainConfig(seed=3)))


@pytest.fixture
def loaded(tmp_path):
    """A gpt whose embedding's first coordinate is 10 on the token "x" and 0 on the others, plus 0.1 t at
    position t: e_t[0] = 10·[x_t = x] + 0.1 t."""
    run = make_loaded(tmp_path)
    x = run.tokenizer.encode("x")[0]
    with torch.no_grad():
        run.model.embed.W_e.weight[:, 0] = 0.0
        run.model.embed.W_e.weight[x, 0] = 10.0
        run.model.embed.W_p.weight[:, 0] = 0.1 * torch.arange(L_MAX)
    return run


def x_detector(d_e=8, d_f=4, u=None):
    """An SAE on ``embed`` whose feature 0 is e[0] − 2 (ReLU'd): 8 + 0.1 t on an "x" at position t, else
    negative; the other features never fire (b_enc = −5); k = 1. Feature 0 writes ``u``."""
    sae = Dictionary("sae", "embed", "embed", d_e, d_e, d_f, 1)
    with torch.no_grad():
        sae.W_enc[0, 0] = 1.0
        sae.b_enc[:] = -5.0
        sae.b_enc[0] = -2.0
        sae.W_dec.copy_(torch.randn(d_e, d_f, generator=torch.Generator().manual_seed(0)))
        if u is not None:
            sae.W_dec[:, 0] = u
        sae.normalize_decoder()
    return sae.requires_grad_(False)


def val_ids(run):
    return np.asarray(validation_dataset(run.config, run.tokenizer).stream("val")).astype(np.int64)


def test_a_feature_that_fires_on_one_token_has_those_tokens_as_its_top_contexts(loaded):
    acts = feature_activations(loaded, x_detector())
    ids = val_ids(loaded)
    x = loaded.tokenizer.encode("x")[0]
    at = np.flatnonzero(ids == x)  # every "x" of the validation split
    expected = 8.0 + 0.1 * (at % L_MAX)  # each window of L_MAX tokens read from its own start
    assert acts.n_tokens == len(ids) and len(at) > 20
    d = acts.dashboard(0, top=10, before=5, after=2)
    order = np.argsort(-expected, kind="stable")[:10]
    assert [c.position for c in d.contexts] == at[order].tolist()
    for c in d.contexts:
        assert c.tokens[c.marked] == "x" and c.activation == pytest.approx(8.0 + 0.1 * (c.position % L_MAX), abs=1e-5)
        begin = max(c.position - 5, c.position // L_MAX * L_MAX)  # what the model read, from its window's start
        shown = ids[begin:c.position + 3]
        assert c.tokens == loaded.tokenizer.token_strings(shown.tolist()) and c.marked == c.position - begin
        assert c.acts == pytest.approx(np.where(shown == x, 8.0 + 0.1 * (np.arange(begin, begin + len(shown)) % L_MAX),
                                                0.0).tolist(), abs=1e-5)
    stats = acts.stats()
    assert [s.index for s in stats] == [0, 1, 2, 3]
    assert stats[0].frequency == pytest.approx(len(at) / len(ids)) and stats[0].mean_act == pytest.approx(expected.mean())
    assert stats[0].label == "x" and d.stats == stats[0]
    assert [(s.frequency, s.mean_act, s.label) for s in stats[1:]] == [(0.0, 0.0, "")] * 3


def test_the_histogram_counts_every_nonzero_activation(loaded):
    acts = feature_activations(loaded, x_detector())
    ids = val_ids(loaded)
    values = 8.0 + 0.1 * (np.flatnonzero(ids == loaded.tokenizer.encode("x")[0]) % L_MAX)
    h = acts.dashboard(0, bins=7).histogram
    counts, edges = np.histogram(values, bins=7, range=(0.0, values.max()))
    assert h.counts == counts.tolist() and h.edges == pytest.approx(edges.tolist(), abs=1e-5)
    assert sum(h.counts) == len(values) and h.inactive == len(ids) - len(values)
    empty = acts.dashboard(2)
    assert empty.contexts == [] and sum(empty.histogram.counts) == 0 and empty.histogram.inactive == len(ids)


def test_promoted_and_suppressed_tokens_are_the_direction_through_the_final_norm_and_unembedding(loaded):
    u = torch.randn(8, generator=torch.Generator().manual_seed(5))
    sae = x_detector(u=u)
    u = u / u.norm()
    model = loaded.model
    by_hand = model.unembed.W_u.weight.detach() @ ((u - u.mean()) * model.norm_final.gamma.detach())
    e = logit_effects(loaded, sae, 0, n=4)
    labels = [display_token(t) for t in loaded.tokenizer.token_strings(range(len(by_hand)))]  # ␣ ↵ visible
    up, down = by_hand.sort(descending=True).indices[:4].tolist(), by_hand.sort().indices[:4].tolist()
    assert [t for t, _ in e.promoted] == [labels[i] for i in up]
    assert [v for _, v in e.promoted] == pytest.approx(by_hand[up].tolist(), abs=1e-5)
    assert [t for t, _ in e.suppressed] == [labels[i] for i in down]
    assert [v for _, v in e.suppressed] == pytest.approx(by_hand[down].tolist(), abs=1e-5)
    assert "γ" in e.note
    # a dashboard ranks the tokens of the training split: not the specials, whose rows of W_u were never trained
    seen = np.unique(np.asarray(validation_dataset(loaded.config, loaded.tokenizer).stream("train")))
    specials = [loaded.tokenizer.bos_id, loaded.tokenizer.eos_id, loaded.tokenizer.pad_id, loaded.tokenizer.mask_id]
    assert not set(specials) & set(seen.tolist())
    shown = feature_activations(loaded, sae).dashboard(0).effects
    kept = by_hand[seen]
    assert [v for _, v in shown.promoted] == pytest.approx(kept.sort(descending=True).values[:10].tolist(), abs=1e-5)
    assert [t for t, _ in shown.promoted] == [labels[i] for i in seen[kept.sort(descending=True).indices[:10]]]
    assert [v for _, v in shown.suppressed] == pytest.approx(kept.sort().values[:10].tolist(), abs=1e-5)
    assert "training split" in shown.note
    # a transcoder writes an MLP's output into the stream: the same reading of its column
    tc = Dictionary("transcoder", "mlp/0/in", "mlp/0/out", 8, 8, 4, 1)
    with torch.no_grad():
        tc.W_dec[:, 0] = u
    assert logit_effects(loaded, tc, 0, n=4) == e


def test_no_logit_effects_where_the_direction_is_not_written_into_the_stream(loaded, tmp_path):
    e = logit_effects(loaded, Dictionary("sae", "self/0/in", "self/0/in", 8, 8, 4, 1), 0)
    assert e.promoted == e.suppressed == [] and "self/0/in" in e.note
    bert = make_loaded(tmp_path, "bert", "masked_lm")
    e = logit_effects(bert, Dictionary("sae", "self/0/resid_post", "self/0/resid_post", 8, 8, 4, 1), 0)
    assert e.promoted == [] and "bert" in e.note


def test_the_activations_on_a_text_are_the_dictionary_s_encoding_there(loaded):
    sae = x_detector()
    t = text_activations(loaded, sae, "oxfxx")
    assert t.tokens == list("oxfxx") and t.acts.shape == (5, 4)
    assert t.of(0) == pytest.approx([0.0, 8.1, 0.0, 8.3, 8.4], abs=1e-5) and t.of(1) == [0.0] * 5


def test_the_cache_holds_the_encoding_of_every_window_read_from_its_start(tmp_path):
    """A random dictionary on a layer's output (k = 3 of 16): the cached activations are `Dictionary.encode` of
    the point on each window of l_max tokens, the last one shorter."""
    run = make_loaded(tmp_path)
    sae = Dictionary("sae", "self/0/resid_post", "self/0/resid_post", 8, 8, 16, 3)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in (sae.W_enc, sae.b_enc, sae.W_dec, sae.mean_in):
            p.copy_(torch.randn(p.shape, generator=g))
    acts = feature_activations(run, sae)
    ids = val_ids(run)
    assert len(ids) % L_MAX  # a last, shorter window
    sae.requires_grad_(False)
    dense = torch.cat([sae.encode(point_activations(run.model, "self/0/resid_post", torch.from_numpy(ids[None, a:a + L_MAX])))[0]
                       for a in range(0, len(ids), L_MAX)])
    positions = np.arange(len(ids))
    got = np.stack([acts.activations_at(i, positions) for i in range(16)], 1)
    assert np.allclose(got, dense.numpy(), atol=1e-5) and (got > 0).sum() == (dense > 0).sum()
    assert [s.frequency for s in acts.stats()] == pytest.approx(((dense > 0).float().mean(0)).tolist())


def test_bad_input_is_a_clear_message(loaded, tmp_path):
    with pytest.raises(ValueError, match="does not have"):
        feature_activations(loaded, Dictionary("sae", "self/7/resid_post", "self/7/resid_post", 8, 8, 4, 1))
    with pytest.raises(ValueError, match="vectors of 16 numbers"):
        feature_activations(loaded, Dictionary("sae", "embed", "embed", 16, 16, 4, 1))
    with pytest.raises(ValueError, match="no feature 5: this dictionary has 4"):
        feature_activations(loaded, x_detector()).dashboard(4)
    pairs = make_loaded(tmp_path, "edt", "seq2seq")
    with pytest.raises(ValueError, match="one stream of tokens"):
        feature_activations(pairs, x_detector())
