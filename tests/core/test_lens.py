"""The logit lens ends in the model's own output; direct logit attribution sums to the logit."""
import pytest
import torch
from interventions_helpers import ARCHS, inputs, tiny

from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.lens import attribute, lens, lens_probs


@pytest.mark.parametrize("arch", ARCHS)
def test_the_last_row_of_the_lens_is_the_model_s_output(arch):
    model = tiny(arch)
    x, kw = inputs(model, B=1, T=8)
    probs, out = lens_probs(model, x, kw.get("context"))
    L = model.config.L_dec if arch == "edt" else model.config.L
    assert probs.shape == (L + 1, 8, model.config.vocab_size)
    expected = model(x, **kw)[0].softmax(-1)
    assert (probs[-1] - expected).abs().max() <= 1e-6 and (out - expected).abs().max() <= 1e-12
    assert (probs[0] - probs[-1]).abs().max() > 1e-2  # the embedding reads otherwise
    assert torch.allclose(probs.sum(-1), torch.ones(L + 1, 8, dtype=probs.dtype))


def test_lens_names_tokens_and_predictions():
    tok = train_tokenizer("char", ["hello world"])
    model = tiny("gpt", vocab_size=tok.vocab_size)
    out = lens(model, tok, "hello")
    d = out.to_dict()
    assert d["tokens"] == list("hello") and [r["layer"] for r in d["layers"]] == [0, 1, 2]
    probs, _ = lens_probs(model, torch.tensor([tok.encode("hello")]))
    p, ids = probs.max(-1)
    for l, row in enumerate(d["layers"]):
        assert row["top_tokens"] == tok.token_strings(ids[l].tolist()) and row["top_probs"] == pytest.approx(p[l].tolist())
    edt = tiny("edt", vocab_size=tok.vocab_size)
    assert lens(edt, tok, "he", source="hello").to_dict()["source_tokens"][1:-1] == list("hello")
    with pytest.raises(ValueError, match="source"):
        lens(edt, tok, "he")


@pytest.mark.parametrize("arch,bias", [("gpt", True), ("gopher", True), ("gpt", False)])
def test_attribution_parts_sum_to_the_logit(arch, bias):
    model = tiny(arch, bias=bias)
    x, _ = inputs(model, B=1, T=8)
    for position, target in ((7, 3), (2, 0)):
        a = attribute(model, x, position, target)
        assert abs(a.total - a.logit) <= 1e-4 and abs(a.logit) > 1e-2
        assert set(a.parts) == {"embedding", "biases", "self/0/0", "self/0/1", "mlp/0", "self/1/0", "self/1/1", "mlp/1"}
        assert all(abs(v) > 1e-6 for k, v in a.parts.items() if k != "biases" or bias)


def test_attribution_refuses_post_ln_and_bert():
    x = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="post-LN"):
        attribute(tiny("gpt", norm_position="post"), x, 0, 0)
    with pytest.raises(ValueError, match="'bert'"):
        attribute(tiny("bert"), x, 0, 0)
