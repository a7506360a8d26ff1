"""The walkthrough (core/paper/walkthrough.py): for every shipped preset's model (at a tiny size) and imported-like
models, one step per line of the pseudocode (the lines inside ``for l`` once per layer, each MHAttention call's
parts), each tensor bitwise the forward pass's, the backward steps' gradients agreeing with central finite
differences to 1e-6, and a first backward step with the loss ≈ ln N_V of a model at step 0."""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from fatstudio import build_model
from fatstudio.core.model import hooks
from fatstudio.core.names import MapName
from fatstudio.core.paper.paper_check import fresh_model
from fatstudio.core.paper.pseudocode import pseudocode, trace
from fatstudio.core.paper.walkthrough import MHA_PARTS, plan, walk
from fatstudio.core.runs.import_hf import model_config
from fatstudio.core.runs.presets import load_presets

IMPORTED = {  # config.json of a tiny Llama-style and GPT-2 checkpoint, read as an import reads it
    "llama": {"architectures": ["LlamaForCausalLM"], "vocab_size": 37, "max_position_embeddings": 16,
              "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "hidden_act": "silu", "rope_theta": 500.0, "rms_norm_eps": 1e-6},
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "vocab_size": 37, "n_positions": 16, "n_embd": 16, "n_layer": 2,
             "n_head": 4, "activation_function": "gelu_new"},
}


def tiny(cfg):
    """``cfg`` at a tiny size, its variations kept."""
    return dataclasses.replace(cfg, vocab_size=min(cfg.vocab_size or 37, 37), l_max=16, L=min(cfg.L, 2),
                               L_enc=min(cfg.L_enc, 2), L_dec=min(cfg.L_dec, 2), d_e=16, H=2, H_kv=None, d_attn=None,
                               d_mid=None, d_mlp=24, d_f=None, dropout=0.0).validate()


CONFIGS = {p.key: tiny(p.config.model) for p in load_presets()} | {
    f"imported-{k}": model_config(hf) for k, hf in IMPORTED.items()}
CONFIGS["bert-sorted"] = CONFIGS["bert-sorted"].replace(n_classes=3)  # its task is classification: a class head


def model_of(key: str, std: float = 0.3):
    """A model of ``CONFIGS[key]`` with weights at a trained model's scale (at step 0's std 0.02 most gradients
    are far below what a float64 finite difference resolves)."""
    torch.manual_seed(0)
    model = build_model(CONFIGS[key]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std if p.dim() >= 2 else std / 2)
    return model


def inputs(key: str) -> tuple[list[int], list[int] | None]:
    x = [1, 5, 7, 3, 2, 8, 4]
    return x, ([3, 4, 5, 6, 2] if CONFIGS[key].arch == "edt" else None)


@functools.cache
def walked(key: str):
    model = model_of(key)
    x, z = inputs(key)
    return model, walk(model, x, z, query=4, head=1)


def test_every_preset_and_an_import_are_walked():
    assert {c.arch for c in CONFIGS.values()} == {"gpt", "gopher", "bert", "edt"} and len(CONFIGS) >= 9
    _, w = walked("bert-sorted")
    assert [s.name for s in w.forward[-1].shown] == ["W_c X[:, 1] + b_c", "P(c | x)"]  # the class head's line


@pytest.mark.parametrize("key", CONFIGS)
def test_one_step_per_line_of_the_pseudocode(key):
    model, w = walked(key)
    code = pseudocode(model.config)
    mha_start = next(i for i, line in enumerate(code.lines) if line.text.startswith("MHAttention("))
    want = Counter()
    attention_calls = 0
    for i, line in enumerate(code.lines[:mha_start]):
        if line.number is not None or line.tap is not None:
            n = code.layers[line.stack] if line.stack and line.number is not None else 1
            want[i] = n
            attention_calls += n if line.attention is not None else 0
    got = Counter(s.line for s in w.forward if not s.part)
    assert got == want
    parts = [s for s in w.forward if s.part]
    assert Counter(s.part for s in parts) == dict.fromkeys(MHA_PARTS, attention_calls)
    assert all(code.lines[s.line].text.startswith(("  for h", "    S", "    Y^h", "  Y ←")) for s in parts)
    for s in w.forward:  # each step names the line it highlights
        line = code.lines[s.line]
        assert s.text == line.text.strip()
        if line.number is not None:
            assert f"line {line.number}" in s.title
    assert [s.line for s in w.forward] == [p[0] for p in plan(code)]
    assert all(s.shown for s in w.forward if s.text not in ("end",) and not s.text.startswith("for l"))


@pytest.mark.parametrize("key", CONFIGS)
def test_every_tensor_is_bitwise_the_forward_pass_s(key):
    model, w = walked(key)
    x, z = inputs(key)
    code = pseudocode(model.config)
    traced = trace(model, code.taps(), x, z)  # the Paper tab's forward pass
    names = hooks.point_names(model)
    with torch.inference_mode(), hooks.recorded(model, names) as seen:
        logits = model(torch.tensor([x]), **({"context": torch.tensor([z])} if z else {}), return_attention=True)[0]
    compared = 0
    for step in w.forward:
        line = code.lines[step.line]
        tap = line.tap_at(step.layer or 0)
        for s in step.shown:
            src = s.source
            if src.kind == "point":
                want = src.layout(seen[src.name][0][0].double())
                if src.name == getattr(tap, "point", None) and not src.key:
                    assert np.array_equal(s.values.T, traced.tensors[tap]), (key, step.title, s.name)
                if src.name.endswith("/pattern"):
                    assert np.array_equal(s.values.T, traced.attention[MapName.parse(src.name[:-8])][w.head])
            elif src.kind == "logits":
                want = src.layout(logits[0].double())
            elif src.kind == "class-logits":
                if s.name == "P(c | x)":
                    assert np.array_equal(s.values[:, 0], traced.tensors[tap])
                    compared += 1
                continue
            elif src.kind == "param":
                want = src.layout(dict(model.named_parameters()) .get(src.name, getattr(model.embed, "W_p_table",
                                                                                          None)).double())
            else:
                continue
            assert np.array_equal(s.values, want), (key, step.title, s.name)
            compared += 1
    assert compared > len(w.forward)


@pytest.mark.parametrize("key", CONFIGS)
def test_the_gradients_agree_with_central_differences(key):
    _, w = walked(key)
    checks = [s.check for s in w.backward if s.check is not None]
    assert len(checks) == len(w.backward) - 1 and all(len(c.entries) == 3 for c in checks)
    worst = max(c.worst for c in checks)
    assert worst <= 1e-6, worst
    assert w.backward[1].shown[0].name.startswith("∂loss/∂")
    assert "P[:, t] − the one-hot" in w.backward[1].words  # the unembedding's gradient, said in words
    words = {s.part: s.words for s in w.backward if s.part}
    assert "∂S = A ⊙" in words["scores"] and "∂Q^h = K^h ∂S" in words["qkv"]
    assert w.backward[-1].line <= min(s.line for s in w.backward[1:])  # back to the embeddings


def test_a_wrong_gradient_is_caught():
    """The check compares with the loss itself: a gradient off by a factor shows a large relative error."""
    import fatstudio.core.paper.walkthrough as wt

    model = model_of("gpt-char")
    real = wt.loss_of
    try:
        wt.loss_of = lambda m, logits, x, q: real(m, logits, x, q) * (1.0 if torch.is_grad_enabled() else 1.5)
        w = walk(model, [1, 5, 7, 3, 2], query=2)
    finally:
        wt.loss_of = real
    assert min(s.check.worst for s in w.backward if s.check) > 0.3


@pytest.mark.parametrize("key", ["gpt-char", "bert-mlm", "edt-reverse"])
def test_the_first_backward_step_is_the_loss_near_ln_N_V_at_step_0(key):
    cfg = CONFIGS[key]
    initial = fresh_model(cfg, 7)
    x, z = inputs(key)
    w = walk(initial, x, z, query=4, initial=initial)
    first = w.backward[0]
    assert first.title.startswith("The loss (Algorithm") and first.check is None
    n = 1 if cfg.arch == "bert" else len(x) - 1
    assert w.initial_loss == pytest.approx(w.loss)
    assert abs(w.initial_loss / n - math.log(cfg.vocab_size)) < (0.1 if n > 1 else 0.3)  # one token varies more
    assert f"ln {cfg.vocab_size} = {math.log(cfg.vocab_size):.4f}" in first.words
    assert f"{w.initial_loss / n:.4f} per token" in first.words


def test_an_edt_s_query_past_its_source_s_length_frames_only_x():
    model, _ = walked("edt-reverse")
    w = walk(model, [1, 5, 7, 3, 2, 8, 4], [3, 4], query=5)  # ℓ_z = 2 < the query's position
    framed = [(s.title, x.name) for s in w.forward for x in s.shown if x.query is not None]
    assert framed and all(x.query == 5 for s in w.forward for x in s.shown if x.query is not None)
    encoder = [s for s in w.forward if "ℓ_z" in s.text or s.text.startswith("Z")]
    assert encoder and not any(x.query is not None for s in encoder for x in s.shown)
    assert [x.name for x in encoder[1].shown][-1] == "e_2"  # the source's last token, not position 6


def test_bad_input_is_a_clear_message():
    model = model_of("gpt-char")
    with pytest.raises(ValueError, match="query token is position 9"):
        walk(model, [1, 2, 3], query=8)
    with pytest.raises(ValueError, match="at least two tokens"):
        walk(model, [1])
    with pytest.raises(ValueError, match="source sequence"):
        walk(model_of("edt-reverse"), [1, 2, 3])
