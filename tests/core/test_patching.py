"""Activation patching is exact: clean into clean changes nothing, the final residual at the last position gives
the clean logits back, each patch changes only what it names; the fractions are of the logit difference."""
import pytest
from interventions_helpers import inputs, tiny

from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.patching import Patcher, patch


@pytest.mark.parametrize("arch", ["gpt", "gopher", "gpt-post-swiglu-gqa-rope"])
def test_patching_clean_into_clean_changes_nothing(arch):
    model = tiny(arch)
    x, _ = inputs(model, B=1, T=9)
    p = Patcher(model, x, x)
    for layer in range(model.config.L + 1):
        assert (p.residual(layer) - p.clean_logits).abs().max() <= 1e-6
    assert (p.head_outputs() - p.clean_logits).abs().max() <= 1e-6


@pytest.mark.parametrize("arch", ["gpt", "gopher"])
def test_the_final_residual_at_the_last_position_restores_the_clean_logits(arch):
    model = tiny(arch)
    clean, _ = inputs(model, B=1, T=9, seed=3)
    corrupt = clean.clone()
    corrupt[0, :4] = (corrupt[0, :4] + 1) % model.config.vocab_size
    p = Patcher(model, clean, corrupt)
    L, T = model.config.L, clean.shape[1]
    final = p.residual(L)
    assert (final[T - 1, -1] - p.clean_logits[0, -1]).abs().max() <= 1e-10
    assert (p.clean_logits[0, -1] - p.corrupt_logits[0, -1]).abs().max() > 1e-3  # there was something to restore
    assert (final[0, -1] - p.corrupt_logits[0, -1]).abs().max() <= 1e-10  # the final stream elsewhere: not the last
    # the embedding at a position the corruption left alone (t ≥ 4) is the same in both runs
    assert (p.residual(0)[6] - p.corrupt_logits[0]).abs().max() <= 1e-10
    # head 0 of layer 0 patched: the corrupted run with that head's clean output
    heads = p.head_outputs()
    assert (heads[0] - p.corrupt_logits[0]).abs().max() > 1e-3


def test_patch_reports_fractions_of_the_logit_difference():
    text = "abcabcabcabc"
    tok = train_tokenizer("char", [text + "xyz"])
    model = tiny("gpt", vocab_size=tok.vocab_size, L=2)
    r = patch(model, tok, "abcabcabcab", "abcxyzabcab")
    L, T = 2, 11
    assert len(r.residual) == L + 1 and all(len(row) == T for row in r.residual)
    assert r.residual[L][T - 1] == pytest.approx(1.0, abs=1e-9)  # the last position's final stream: all of it
    assert r.residual[0][0] == pytest.approx(0.0, abs=1e-9)  # a position both prompts share: nothing
    assert set(r.heads) == {"self/0", "self/1"} and all(len(v) == 2 for v in r.heads.values())
    assert r.clean_tokens[3] == "a" and r.corrupt_tokens[3] == "x" and r.target != r.foil
    assert r.clean_logit_diff != r.corrupted_logit_diff
    d = r.to_dict()
    assert [row["layer"] for row in d["residual"]] == [0, 1, 2] and d["target"] == r.target
    lines = r.csv().splitlines()
    assert lines[0] == "patched,position,token,restored" and len(lines) == 1 + (L + 1) * T + 2 * 2
    assert lines[4].startswith("resid/0,3,x,") and float(lines[(L + 1) * T].split(",")[-1]) == r.residual[L][T - 1]
    assert lines[-1] == f"self/1/1,,,{r.heads['self/1'][1]!r}"
    forced = patch(model, tok, "abcabcabcab", "abcxyzabcab", target="z")
    assert forced.target == "z"
    with pytest.raises(ValueError, match="same number of tokens"):
        patch(model, tok, "abc", "abca")
    with pytest.raises(ValueError, match="2 tokens"):
        patch(model, tok, "abc", "abx", target="ab")


def test_patching_refuses_a_model_that_predicts_no_next_token():
    tok = train_tokenizer("char", ["abc"])
    with pytest.raises(ValueError, match="decoder-only.*'bert'"):
        patch(tiny("bert", vocab_size=tok.vocab_size), tok, "abc", "abd")
