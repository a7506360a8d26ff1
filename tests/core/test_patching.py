"""Activation patching is exact: clean into clean changes nothing, the final residual at the measured position gives
the clean logits back, each patch changes only what it names; the fractions are of the logit difference."""
import pytest
from interventions_helpers import inputs, tiny

from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.patching import Patcher, patch
from fatstudio.core.names import MapName

VARIANTS = {  # every architecture, pre- and post-LN
    "gpt": ("gpt", {}), "gopher": ("gopher", {}), "gpt-post-swiglu-gqa-rope": ("gpt-post-swiglu-gqa-rope", {}),
    "bert": ("bert", {}), "bert-pre": ("bert", dict(norm_position="pre")),
    "edt": ("edt", {}), "edt-pre-rms": ("edt", dict(norm_position="pre", norm="rms")),
}


def _prompts(variant, seed=1):
    """(model, clean ids, the decoder's prefix or None): an encoder-decoder's prompts are its sources."""
    name, over = VARIANTS[variant]
    model = tiny(name, **over)
    x, kw = inputs(model, B=1, T=9, seed=seed)
    return (model, kw["context"], x) if "context" in kw else (model, x, None)


@pytest.mark.parametrize("variant", VARIANTS)
def test_patching_clean_into_clean_changes_nothing(variant):
    model, clean, prefix = _prompts(variant)
    p = Patcher(model, clean, clean, prefix)
    assert list(p.streams) == (["enc", "dec"] if prefix is not None else ["self"])
    for stream, layers in p.streams.items():
        for layer in range(len(layers) + 1):
            assert (p.residual(layer, stream) - p.clean_logits).abs().max() <= 1e-6
    assert (p.head_outputs() - p.clean_logits).abs().max() <= 1e-6


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_final_residual_at_the_measured_position_restores_the_clean_logits(variant):
    model, clean, prefix = _prompts(variant, seed=3)
    corrupt = clean.clone()
    corrupt[0, :4] = (corrupt[0, :4] + 1) % model.config.vocab_size
    p = Patcher(model, clean, corrupt, prefix)
    unembedded = list(p.streams)[-1]  # the decoder's for an encoder-decoder
    L, T_x = len(p.streams[unembedded]), p.clean_logits.shape[1]
    final = p.residual(L, unembedded)
    for at in (T_x - 1, 2):
        assert (final[at, at] - p.clean_logits[0, at]).abs().max() <= 1e-10
        assert (p.clean_logits[0, at] - p.corrupt_logits[0, at]).abs().max() > 1e-3  # there was something to restore
        other = (at + 1) % T_x  # the final stream patched elsewhere: the readout acts on each position alone
        assert (final[other, at] - p.corrupt_logits[0, at]).abs().max() <= 1e-10
    # the embedding at a position the corruption left alone (t ≥ 4) is the same in both runs
    assert (p.residual(0)[6] - p.corrupt_logits[0]).abs().max() <= 1e-10
    assert (p.residual(0)[1] - p.corrupt_logits[0]).abs().max() > 1e-3
    heads = p.head_outputs()  # row i: head i patched; each head's own row differs from the corrupted run
    for i, c in enumerate(p.heads):
        moved = (heads[i] - p.corrupt_logits[0]).abs().max()
        if c.name.map == MapName("dec", 0):  # an encoder-decoder's first decoder layer: the same prefix in both
            assert moved <= 1e-10
        else:
            assert moved > 1e-6, c.name


def test_patch_reports_fractions_of_the_logit_difference():
    text = "abcabcabcabc"
    tok = train_tokenizer("char", [text + "xyz"])
    model = tiny("gpt", vocab_size=tok.vocab_size, L=2)
    r = patch(model, tok, "abcabcabcab", "abcxyzabcab")
    L, T = 2, 11
    assert len(r.residual) == L + 1 and all(len(row) == T for row in r.residual)
    assert r.residual[L][T - 1] == pytest.approx(1.0, abs=1e-9)  # the last position's final stream: all of it
    assert r.residual[0][0] == pytest.approx(0.0, abs=1e-9)  # a position both prompts share: nothing
    assert set(r.heads) == {MapName("self", 0), MapName("self", 1)} and all(len(v) == 2 for v in r.heads.values())
    assert r.clean_tokens[3] == "a" and r.corrupt_tokens[3] == "x" and r.target != r.foil
    assert r.clean_logit_diff != r.corrupted_logit_diff
    d = r.to_dict()
    assert [row["layer"] for row in d["residual"]] == [0, 1, 2] and d["target"] == r.target
    assert d["heads"] == {"self/0": r.heads[MapName("self", 0)], "self/1": r.heads[MapName("self", 1)]}
    lines = r.csv().splitlines()
    assert lines[0] == "patched,position,token,restored" and len(lines) == 1 + (L + 1) * T + 2 * 2
    assert lines[4].startswith("resid/0,3,x,") and float(lines[(L + 1) * T].split(",")[-1]) == r.residual[L][T - 1]
    assert lines[-1] == f"self/1/1,,,{r.heads[MapName('self', 1)][1]!r}"
    forced = patch(model, tok, "abcabcabcab", "abcxyzabcab", target="z")
    assert forced.target == "z"
    with pytest.raises(ValueError, match="same number of tokens"):
        patch(model, tok, "abc", "abca")
    with pytest.raises(ValueError, match="2 tokens"):
        patch(model, tok, "abc", "abx", target="ab")


def test_patch_reads_bert_at_its_mask_and_an_encoder_decoder_over_its_sources():
    tok = train_tokenizer("char", ["abcdefghxyz"])
    bert = tiny("bert", vocab_size=tok.vocab_size, l_max=16)
    r = patch(bert, tok, "abc[MASK]efgh", "xyc[MASK]efgh")
    T = 10  # [bos] + 8 + [eos]
    assert r.position == 4 and r.clean_tokens[4] == r.corrupt_tokens[4] == tok.token_strings([tok.mask_id])[0]
    assert len(r.residual) == 3 and all(len(row) == T for row in r.residual)
    assert r.residual[2][4] == pytest.approx(1.0, abs=1e-9) and r.residual[0][5] == pytest.approx(0.0, abs=1e-9)
    assert set(r.heads) == {MapName("self", 0), MapName("self", 1)} and "decoder_residual" not in r.to_dict()
    assert patch(bert, tok, "abcdefgh", "xycdefgh").position == 8  # no mask: the last token, before [eos]
    at = patch(bert, tok, "abc[MASK]efgh", "xyc[MASK]efgh", position=-3)
    assert at.position == 7 and at.residual[2][7] == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError, match="--position 10"):
        patch(bert, tok, "abc[MASK]efgh", "xyc[MASK]efgh", position=10)
    with pytest.raises(ValueError, match="target prefix"):
        patch(bert, tok, "abc", "xyc", prefix="a")

    edt = tiny("edt", vocab_size=tok.vocab_size, l_max=16)
    r = patch(edt, tok, "abcdef", "xycdef", prefix="fed")
    assert r.prefix_tokens == [tok.token_strings([tok.bos_id])[0], "f", "e", "d"] and r.position == 3
    assert r.clean_tokens[1:-1] == list("abcdef") and r.corrupt_tokens[1] == "x"
    assert len(r.residual) == 3 and all(len(row) == 8 for row in r.residual)  # the encoder's, over the source
    assert r.residual[0][5] == pytest.approx(0.0, abs=1e-9)  # a source position both share
    assert r.decoder_residual is not None and [len(row) for row in r.decoder_residual] == [4, 4, 4]
    assert r.decoder_residual[2][3] == pytest.approx(1.0, abs=1e-9)  # the final decoder stream where it is read
    assert r.decoder_residual[0] == pytest.approx([0.0] * 4, abs=1e-9)  # the prefix's embedding: the same in both
    assert set(r.heads) == {MapName(kind, l) for kind in ("enc", "dec", "cross") for l in (0, 1)}
    d = r.to_dict()
    assert [row["layer"] for row in d["decoder_residual"]] == [0, 1, 2] and d["prefix_tokens"] == r.prefix_tokens
    assert patch(edt, tok, "abcdef", "xycdef").prefix_tokens == [tok.token_strings([tok.bos_id])[0]]
    with pytest.raises(ValueError, match="same number of tokens"):
        patch(edt, tok, "abcdef", "xyef", prefix="fed")
