"""The logit lens ends in the model's own output; direct logit attribution sums to the logit."""
import pytest
import torch
from interventions_helpers import ARCHS, inputs, tiny

from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.components import components, recorded, replaced
from fatstudio.core.inspect.lens import attribute, lens, lens_probs
from fatstudio.core.model.norm import Norm

VARIANTS = {**{name: (name, {}) for name in ARCHS},  # every architecture, pre- and post-LN
            "bert-pre": ("bert", dict(norm_position="pre")), "bert-rms": ("bert", dict(norm="rms")),
            "edt-pre-rms": ("edt", dict(norm_position="pre", norm="rms")), "gopher-post": ("gopher", dict(norm_position="post"))}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_last_row_of_the_lens_is_the_model_s_output(variant):
    arch, over = VARIANTS[variant]
    model = tiny(arch, **over)
    x, kw = inputs(model, B=1, T=8)
    probs, out = lens_probs(model, x, kw.get("context"))
    L = model.config.L_dec if model.config.arch == "edt" else model.config.L
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


@pytest.mark.parametrize("variant", ["bert", "bert-pre", "edt", "edt-pre-rms"])
def test_the_lens_of_a_text_ends_in_the_model_s_output(variant):
    """bert reads [bos] + text + [eos] with its masks, through its MLM head; edt its decoder given the source."""
    arch, over = VARIANTS[variant]
    tok = train_tokenizer("char", ["hello world"])
    model = tiny(arch, vocab_size=tok.vocab_size, l_max=16, **over)
    d = lens(model, tok, "hel[MASK]o" if arch == "bert" else "hel", source="world" if arch == "edt" else None).to_dict()
    bos, eos, mask = tok.token_strings([tok.bos_id, tok.eos_id, tok.mask_id])
    if arch == "bert":
        assert d["tokens"] == [bos, "h", "e", "l", mask, "o", eos]
        p = model(torch.tensor([[tok.bos_id, *tok.encode("hel"), tok.mask_id, *tok.encode("o"), tok.eos_id]]))
    else:
        assert d["tokens"] == [bos, "h", "e", "l"] and d["source_tokens"] == [bos, *"world", eos]
        p = model(torch.tensor([[tok.bos_id, *tok.encode("hel")]]),
                  context=torch.tensor([[tok.bos_id, *tok.encode("world"), tok.eos_id]]))
    p = p[0].softmax(-1)
    last = d["layers"][-1]
    assert len(d["layers"]) == 3 and last["top_probs"] == pytest.approx(p.max(-1).values.tolist(), abs=1e-6)
    assert last["top_tokens"] == tok.token_strings(p.argmax(-1).tolist())


ATTRIBUTED = {  # the parts each architecture's logit splits into
    "self": ["embedding", "biases", "self/0/0", "self/0/1", "mlp/0", "self/1/0", "self/1/1", "mlp/1"],
    "dec": ["embedding", "biases", "dec/0/0", "dec/0/1", "cross/0/0", "cross/0/1", "dec-mlp/0",
            "dec/1/0", "dec/1/1", "cross/1/0", "cross/1/1", "dec-mlp/1"]}


@pytest.mark.parametrize("variant", [*VARIANTS, "gpt-no-bias", "bert-pre-no-bias"])
def test_attribution_parts_sum_to_the_logit(variant):
    """Pre-LN through the final norm, post-LN through every later norm, BERT through its GELU head: frozen at
    their measured values, the parts sum to the logit in float64."""
    arch, over = VARIANTS[variant.removesuffix("-no-bias")]
    bias = not variant.endswith("no-bias")
    model = tiny(arch, bias=bias, **over)
    x, kw = inputs(model, B=1, T=8)
    for position, target in ((7, 3), (2, 0), (5, 12)):
        a = attribute(model, x, position, target, kw.get("context"))
        with torch.no_grad():
            assert a.logit == pytest.approx(float(model(x, **kw)[0, position, target]), abs=1e-12)
        assert abs(a.total - a.logit) <= 1e-4 and abs(a.logit) > 1e-2
        assert sorted(a.parts) == sorted(ATTRIBUTED["dec" if arch == "edt" else "self"])
        assert all(abs(v) > 1e-6 for v in a.parts.values())  # each part carries something
        assert a.scale > 0


def test_attribution_needs_an_encoder_decoder_s_source_and_only_its():
    x = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="encoder-decoder"):
        attribute(tiny("edt"), x, 0, 0)
    with pytest.raises(ValueError, match="no source"):
        attribute(tiny("bert"), x, 0, 0, context=x)


def _direct_effect(model, x, kw, position, target, name):
    """The logit's drop when component ``name``'s output is zeroed (an MLP's: all but its bias) while every other
    component's output, every norm's divisor and BERT's gate Φ(u) are held at their clean values (the model's
    own forward, so independent of how `attribute` carries a part along the stream)."""
    comps = components(model)
    kept: dict = {}
    divisor: dict = {}
    gate: dict = {}

    def measure(m, args):
        e = args[0]
        divisor[m] = ((e - e.mean(-1, keepdim=True)) if m.kind == "layer" else e).pow(2).mean(-1, keepdim=True).add(m.eps).sqrt()

    def frozen(m, args, _out):
        e = args[0] - args[0].mean(-1, keepdim=True) if m.kind == "layer" else args[0]
        return e / divisor[m] * m.gamma + (m.beta if m.beta is not None else 0)
    norms = [m for m in model.modules() if isinstance(m, Norm)]
    handles = [m.register_forward_pre_hook(measure) for m in norms]
    if model.config.arch == "bert":
        handles.append(model.W_f.register_forward_hook(lambda _m, _a, u: gate.update(clean=0.5 * (1 + torch.erf(u / 2 ** 0.5)))))
    with torch.no_grad(), recorded(comps, kept):
        clean = model(x, **kw)[0, position, target]
    for h in handles:
        h.remove()
    handles = [m.register_forward_hook(frozen) for m in norms]
    if model.config.arch == "bert":  # norm_f reads u·Φ(u_clean), u this run's W_f X + b_f
        handles.append(model.W_f.register_forward_hook(lambda _m, _a, u: gate.update(u=u)))
        handles.append(model.norm_f.register_forward_pre_hook(lambda _m, _a: (gate["u"] * gate["clean"],)))
    def hold(c):  # the part is an MLP's output without its bias b_mlp2
        gone = torch.zeros(()) if c.is_head or c.module.W_mlp2.bias is None else c.module.W_mlp2.bias
        return lambda a: gone.expand_as(a) if str(c.name) == name else kept[c.name][0]
    held = {c: hold(c) for c in comps}
    with torch.no_grad(), replaced(held):
        ablated = model(x, **kw)[0, position, target]
    for h in handles:
        h.remove()
    return float(clean - ablated)


@pytest.mark.parametrize("variant", ["gpt", "gpt-post-swiglu-gqa-rope", "bert", "bert-pre", "edt", "edt-pre-rms"])
def test_a_part_is_the_component_s_direct_effect_with_the_norms_frozen(variant):
    arch, over = VARIANTS[variant]
    model = tiny(arch, **over)
    x, kw = inputs(model, B=1, T=8)
    a = attribute(model, x, 5, 4, kw.get("context"))
    names = ["dec/0/1", "cross/1/0", "dec-mlp/0"] if arch == "edt" else ["self/0/1", "self/1/0", "mlp/0"]
    for name in names:
        assert _direct_effect(model, x, kw, 5, 4, name) == pytest.approx(a.parts[name], abs=1e-9)
