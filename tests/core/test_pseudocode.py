"""The linked pseudocode (core/pseudocode.py): every line of every architecture and variation names parameters,
fields and hook points the model really has, stands for the right line of the paper, and its traced tensor is the
tensor the model computes there."""
import dataclasses

import numpy as np
import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.model.hooks import point_names
from fatstudio.core.names import MapName
from fatstudio.core.paper.pseudocode import OUTPUTS, Tap, pseudocode, tensor_stats, trace

BASE = dict(vocab_size=30, l_max=16, L=2, L_enc=2, L_dec=3, H=4, d_e=16, d_mlp=24)
CASES = [
    ("gpt", {}), ("gopher", {}), ("bert", {}), ("edt", {}),
    ("bert", dict(n_classes=3)), ("bert", dict(d_f=10, norm_position="pre")),
    ("gpt", dict(norm_position="post", activation="swiglu", bias=False)),
    ("gpt", dict(positions="sinusoidal", tie_embeddings=True)), ("gpt", dict(positions="rope", H_kv=2)),
    ("gopher", dict(positions="alibi", norm="layer")), ("edt", dict(norm_position="pre", norm="rms")),
    ("edt", dict(positions="relative", activation="gelu_tanh", dropout=0.1)),
    ("bert", dict(embed_norm=True, unembed_bias=True, tie_embeddings=True)),
    ("edt", dict(embed_norm=True, unembed_bias=True)),
]
IDS = [f"{a}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'paper'}" for a, kw in CASES]
FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}


def make(arch, **kw):
    cfg = ModelConfig(arch=arch, **{**BASE, **kw})
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():  # away from the init, so no tensor is trivially 0 or 1
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return cfg, model


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_every_line_names_what_the_model_has(arch, kw):
    cfg, model = make(arch, **kw)
    code = pseudocode(cfg)
    state = set(model.state_dict())
    points = set(point_names(model)) | set(OUTPUTS)
    used: set[str] = set()
    for line in code.lines:
        assert set(line.fields) <= FIELDS, line.text
        layers = range(code.layers[line.stack]) if line.stack else [0]
        for l in layers:
            names = line.parameters(l)
            assert set(names) <= state, (line.text, set(names) - state)
            used |= set(names)
            tap = line.tap_at(l)
            if tap is not None:
                assert tap.point in points, (line.text, tap.point)
        if line.number is not None:
            assert line.algorithm == {"edt": 8, "bert": 9}.get(arch, 10)
    assert used == state  # every parameter of the model is used by some line
    kinds = {name.split("/")[0] for name in model(torch.zeros(1, 3, dtype=torch.long), return_attention=True,
                                                    **({"context": torch.zeros(1, 2, dtype=torch.long)}
                                                       if arch == "edt" else {}))[1]}
    for kind in kinds:  # every kind of attention map comes from one MHAttention line
        assert "MHAttention" in code.lines[code.attention_line(kind)].text


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_the_paper_line_numbers(arch):
    code = pseudocode(ModelConfig(arch=arch, **BASE))
    numbered = {line.number: line.text.strip() for line in code.lines if line.number is not None}
    last = {"edt": 21, "bert": 12}.get(arch, 11)
    assert sorted(numbered) == list(range(1, last + 1))  # the paper's algorithm, every line, nothing else
    assert numbered[last] == "return P = softmax(W_u X)"
    if arch in ("gpt", "gopher"):  # Algorithm 10 with the erratum fixed: line 5 writes X̃, line 6 reads it
        norm = "layer_norm" if arch == "gpt" else "rms_norm"
        assert numbered[5].startswith(f"X̃ ← {norm}(X | γ¹_l")
        assert numbered[6].startswith("X ← X + MHAttention(X̃ | 𝒲_l, Mask[t, t′] = [[t ≤ t′]])")
        assert numbered[10].startswith(f"X ← {norm}(X | γ")
        assert "W_p" not in numbered[2] if arch == "gopher" else "+ W_p[:, t]" in numbered[2]
    if arch == "bert":  # the erratum: γ, β and W_u live in d_f
        assert numbered[10] == "X ← GELU(W_f X + b_f 1ᵀ)"
    if arch == "edt":
        assert numbered[16].startswith("X ← X + MHAttention(X, Z | 𝒲^e/d_l, Mask ≡ 1)")
        assert numbered[13] == "for l = 1, 2, …, L_dec do"


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_text_has_the_shapes(arch):
    text = pseudocode(ModelConfig(arch=arch, vocab_size=30, l_max=16, L=2, H=4, d_e=64, d_mlp=256)).text()
    assert {"edt": "Algorithm 8", "bert": "Algorithm 9", "gpt": "Algorithm 10", "gopher": "Algorithm 10"}[arch] in text
    assert "ℝ^(30×64)" in text  # W_u with N_V and d_e filled in
    assert "√16" in text  # d_attn = d_e / H
    bad = ModelConfig(arch=arch, H=3, H_kv=2)
    with pytest.raises(ValueError, match="H_kv"):
        pseudocode(bad)


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_trace_captures_what_the_model_computes(arch, kw):
    cfg, model = make(arch, **kw)
    code = pseudocode(cfg)
    x = [3, 7, 1, 4, 4, 9]
    z = [2, 5, 8, 1] if arch == "edt" else None
    tr = trace(model, code.taps(), x, z)
    assert set(tr.tensors) == set(code.taps())  # every line's tensor, in every layer
    assert not any(p.hooks for p in model.hook_points().values())  # nothing left hooked
    xt = torch.tensor([x])
    kwz = {"context": torch.tensor([z])} if z else {}
    with torch.no_grad():
        logits, attn = model(xt, return_attention=True, **kwz)
        ret = next(line for line in code.lines if line.text.startswith("return P = softmax(W_u X"))
        np.testing.assert_allclose(tr.tensors[ret.tap], logits[0].double().softmax(-1).numpy(), atol=1e-6)
        for name, a in attn.items():
            np.testing.assert_allclose(tr.attention[MapName.parse(name)], a[0].double().numpy(), atol=1e-6)
        first, prefix = ("enc", "enc-") if arch == "edt" else ("self", "")
        emb = model.embed(xt)[0] if arch != "edt" else model.embed(torch.tensor([z]))[0]
        # the normed e_t (BERT's embedding norm: the first layer's input), else e_t
        embed = Tap(f"{first}/0/resid_pre") if cfg.embed_norm else Tap(f"{prefix}embed")
        np.testing.assert_allclose(tr.tensors[embed], emb.double().numpy(), atol=1e-6)
        if arch == "edt":  # the decoder's embedding
            embed = Tap("dec/0/resid_pre") if cfg.embed_norm else Tap("dec-embed")
            np.testing.assert_allclose(tr.tensors[embed], model.embed(xt)[0].double().numpy(), atol=1e-6)
        if cfg.n_classes:
            cls = next(line for line in code.lines if line.tap == Tap("class-logits", softmax=True))
            np.testing.assert_allclose(tr.tensors[cls.tap], model.classify(xt)[0].double().softmax(-1).numpy(), atol=1e-6)


def layer_steps(layer, X, Z=None):
    """Layer l by hand, in the order of the pseudocode's lines: pre-LN [X̃, X, …], post-LN [X + f(X), X, …]."""
    calls = [(layer.norm_attn, layer.attn)]
    if layer.cross is not None:
        calls.append((layer.norm_cross, lambda Xn: layer.cross(Xn, Z)))
    calls.append((layer.norm_mlp, layer.mlp))
    out = []
    for norm, f in calls:
        if layer.pre:
            Xn = norm(X)
            X = X + f(Xn)
            out += [Xn, X]
        else:
            S = X + f(X)
            X = norm(S)
            out += [S, X]
    return out


@pytest.mark.parametrize("arch,kw", CASES, ids=IDS)
def test_each_sublayer_line_taps_its_step(arch, kw):
    cfg, model = make(arch, **kw)
    code = pseudocode(cfg)
    x, z = [3, 7, 1, 4, 4, 9], [2, 5, 8, 1]
    tr = trace(model, code.taps(), x, z if arch == "edt" else None)
    with torch.no_grad():
        if arch == "edt":
            Z = model.encode(torch.tensor([z]))
            stacks = {"encoder": (model.embed(torch.tensor([z])), None), "decoder": (model.embed(torch.tensor([x])), Z)}
        else:
            stacks = {"layers": (model.embed(torch.tensor([x])), None)}
        for stack, (X, Zs) in stacks.items():
            lines = [line for line in code.lines if line.stack == stack and line.tap is not None]
            for l, layer in enumerate(getattr(model, stack)):
                steps = layer_steps(layer, X, Zs)
                assert len(steps) == len(lines)
                for line, want in zip(lines, steps):
                    np.testing.assert_allclose(tr.tensors[line.tap_at(l)], want[0].double().numpy(), atol=1e-5,
                                               err_msg=f"{stack} layer {l}: {line.text}")
                X = steps[-1]


def test_tensor_stats():
    a = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.5]])
    s = tensor_stats(a, bins=5)
    assert s.shape == (2, 3)
    assert s.mean == pytest.approx(a.mean()) and s.std == pytest.approx(a.std())
    assert s.norm == pytest.approx(np.linalg.norm(a)) and (s.min, s.max) == (-2.0, 3.0)
    assert sum(s.counts) == 6 and len(s.edges) == 6 and s.edges[0] == -2.0 and s.edges[-1] == 3.0
