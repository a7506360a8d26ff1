"""Behaviour of the fast model beyond the reference: causality, parameter counts (the paper's lists),
the attention contract, validation messages, config round trips."""
import json

import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import POSITIONS
from fatstudio.core.costs import flops_per_token, memory_estimate, parameter_counts

SMALL = dict(vocab_size=13, l_max=16, L=2, H=2, d_e=16, d_mlp=24)


@pytest.mark.parametrize("arch", ["gpt", "gopher", "edt"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_later_tokens_never_change_earlier_predictions(arch, positions):
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, positions=positions, **SMALL)).eval()
    x = torch.randint(0, 13, (1, 10))
    x2 = x.clone()
    x2[0, 6:] = (x2[0, 6:] + 1) % 13
    kw = dict(context=torch.randint(0, 13, (1, 5))) if arch == "edt" else {}
    a, b = model(x, **kw), model(x2, **kw)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-3)


def paper_parameters(cfg: ModelConfig) -> int:
    """The parameter lists of Algorithms 8, 9 and 10, counted by hand (default configs: biases, layer_norm,
    learned W_p, untied W_u, d_attn = d_mid = d_e/H)."""
    N_V, d_e, d_mlp, l_max, H = cfg.vocab_size, cfg.d_e, cfg.d_mlp, cfg.l_max, cfg.H
    d_attn = d_mid = d_e // H
    W_qkv_h = (d_attn * d_e + d_attn) * 2 + d_mid * d_e + d_mid  # W_q, b_q, W_k, b_k, W_v, b_v of one head
    mh_attention = H * W_qkv_h + d_e * H * d_mid + d_e  # + W_o, b_o
    gamma_beta = 2 * d_e
    mlp = d_mlp * d_e + d_mlp + d_e * d_mlp + d_e
    emb = d_e * N_V + d_e * l_max
    if cfg.arch == "gpt":  # Algorithm 10: per layer γ¹β¹, 𝒲_l, γ²β², mlp1, mlp2; then γ, β, W_u
        return emb + cfg.L * (mh_attention + 2 * gamma_beta + mlp) + gamma_beta + N_V * d_e
    if cfg.arch == "bert":  # Algorithm 9: + W_f, b_f, γ, β, W_u with d_f
        d_f = cfg.d_f or d_e
        return emb + cfg.L * (mh_attention + 2 * gamma_beta + mlp) + d_f * d_e + d_f + 2 * d_f + N_V * d_f
    # Algorithm 8: encoder 𝒲_enc, γ¹β¹, γ²β², mlp1-2; decoder 𝒲_dec, 𝒲_e/d, γ³…γ⁵, mlp3-4; W_u
    return (emb + cfg.L_enc * (mh_attention + 2 * gamma_beta + mlp)
            + cfg.L_dec * (2 * mh_attention + 3 * gamma_beta + mlp) + N_V * d_e)


@pytest.mark.parametrize("arch", ["gpt", "bert", "edt"])
def test_parameter_count_equals_paper_list(arch):
    cfg = ModelConfig(arch=arch, vocab_size=65, l_max=64, L=3, L_enc=2, L_dec=3, H=4, d_e=32, d_mlp=48)
    assert build_model(cfg).num_parameters() == paper_parameters(cfg)


def variants():
    for arch in ["gpt", "gopher", "bert", "edt"]:
        for kw in [{}, dict(norm="rms"), dict(positions="relative"), dict(positions="sinusoidal"),
                   dict(activation="swiglu", bias=False), dict(tie_embeddings=True), dict(H_kv=1, d_attn=5, d_mid=7),
                   dict(norm_position="pre" if arch in ("bert", "edt") else "post")]:
            yield arch, kw
    yield "bert", dict(n_classes=3, d_f=10)
    yield "bert", dict(embed_norm=True, unembed_bias=True)  # BERT as imported (import_hf)


@pytest.mark.parametrize("arch,kw", list(variants()))
def test_parameter_counts_match_built_model(arch, kw):
    cfg = ModelConfig(arch=arch, **{**SMALL, **kw})
    assert sum(parameter_counts(cfg).values()) == build_model(cfg).num_parameters()


def test_cost_estimates_scale_sensibly():
    small, big = ModelConfig(), ModelConfig(L=8)
    assert flops_per_token(big)["forward"] > 1.9 * flops_per_token(small)["forward"] * 0.9
    assert flops_per_token(small)["training"] == 3 * flops_per_token(small)["forward"]
    m = memory_estimate(small, batch_size=12)
    assert m["total"] == m["weights"] + m["gradients"] + m["optimizer"] + m["activations"]
    assert memory_estimate(small, batch_size=24)["activations"] > m["activations"]


def test_fixed_tables_are_buffers_not_parameters():
    model = build_model(ModelConfig(positions="sinusoidal", **SMALL))
    assert "embed.W_p_table" in dict(model.named_buffers())
    assert not any("W_p" in n for n, _ in model.named_parameters())


def test_sinusoidal_base_is_l_max_as_algorithm_2_writes_it_unless_set():
    """W_p[2i-1, t] = sin(t / b^(2i/d_e)), W_p[2i, t] = cos(…), b = ℓ_max by default (paper), 10000 if set."""
    t, i = torch.arange(1, 17, dtype=torch.float64)[:, None], torch.arange(1, 9, dtype=torch.float64)
    for base, want_b in ((None, 16.0), (10000.0, 10000.0)):
        cfg = ModelConfig(positions="sinusoidal", position_base=base, **SMALL)
        assert cfg.resolved().position_base == want_b
        W_p = build_model(cfg).double().embed.W_p_table  # ℓ_max × d_e, row t-1 = e_p of position t
        angle = t / want_b ** (2 * i / 16)
        torch.testing.assert_close(W_p[:, 0::2], torch.sin(angle), rtol=0, atol=1e-12)
        torch.testing.assert_close(W_p[:, 1::2], torch.cos(angle), rtol=0, atol=1e-12)
    for positions in ("rope", "relative"):  # their own papers' base
        assert ModelConfig(positions=positions, **SMALL).resolved().position_base == 10000.0


def test_tied_unembedding_shares_W_e():
    model = build_model(ModelConfig(tie_embeddings=True, **SMALL))
    assert model.unembed.W_u.weight is model.embed.W_e.weight


def test_attention_contract_shapes_and_rows():
    model = build_model(ModelConfig(arch="edt", **SMALL)).eval()
    x, z = torch.randint(0, 13, (2, 7)), torch.randint(0, 13, (2, 5))
    logits, attn = model(x, context=z, return_attention=True)
    assert logits.shape == (2, 7, 13)
    assert sorted(attn) == ["cross/0", "cross/1", "dec/0", "dec/1", "enc/0", "enc/1"]
    assert attn["enc/0"].shape == (2, 2, 5, 5) and attn["dec/1"].shape == (2, 2, 7, 7)
    assert attn["cross/0"].shape == (2, 2, 7, 5)
    for a in attn.values():
        assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-6)
    assert torch.all(attn["dec/0"].triu(1) == 0)  # causal


def test_dropout_is_active_only_in_training():
    model = build_model(ModelConfig(dropout=0.5, **SMALL))
    x = torch.randint(0, 13, (2, 8))
    model.train()
    assert not torch.allclose(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_context_errors_and_l_max():
    gpt = build_model(ModelConfig(**SMALL))
    with pytest.raises(ValueError, match="takes no context"):
        gpt(torch.zeros(1, 3, dtype=torch.long), context=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="l_max = 16"):
        gpt(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="context=z"):
        build_model(ModelConfig(arch="edt", **SMALL))(torch.zeros(1, 3, dtype=torch.long))


@pytest.mark.parametrize("field,value,words", [
    ("arch", "rnn", "arch = 'rnn'"), ("norm", "batch", "norm = 'batch'"), ("norm_position", "mid", "norm_position"),
    ("activation", "tanh", "activation = 'tanh'"), ("positions", "xpos", "positions = 'xpos'"),
    ("vocab_size", 0, "vocab_size = 0"), ("l_max", 0, "l_max = 0"), ("L", -1, "L = -1"), ("H", 0, "H = 0"),
    ("d_e", 0, "d_e = 0"), ("d_mlp", 0, "d_mlp"), ("d_attn", 0, "d_attn"), ("d_mid", -2, "d_mid"),
    ("L_enc", 0, "L_enc"), ("L_dec", 0, "L_dec"), ("H_kv", 3, "H_kv = 3"), ("dropout", 1.0, "dropout = 1.0"),
    ("dropout", -0.1, "dropout"), ("tie_embeddings", "yes", "tie_embeddings"), ("bias", 1, "bias"),
    ("n_classes", 2, "n_classes"), ("position_base", 0, "position_base"), ("d_e", 2.5, "d_e = 2.5"),
])
def test_validate_names_the_field(field, value, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        build_model(ModelConfig(**{field: value}))


@pytest.mark.parametrize("positions", ["sinusoidal", "rope", "relative"])
def test_odd_d_e_rejected_for_sinusoidal_tables(positions):
    with pytest.raises(ValueError, match="d_e = 33"):
        ModelConfig(d_e=33, H=3, d_attn=4, positions=positions).validate()


def test_config_round_trips_through_json():
    cfg = ModelConfig(arch="gopher", H_kv=2, d_attn=16, dropout=0.1, tie_embeddings=True)
    again = ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    with pytest.raises(ValueError, match="unknown ModelConfig field"):
        ModelConfig.from_dict({"layers": 3})


def test_paper_defaults_per_architecture():
    r = {a: ModelConfig(arch=a).resolved() for a in ("edt", "bert", "gpt", "gopher")}
    assert (r["edt"].norm_position, r["edt"].activation, r["edt"].positions) == ("post", "relu", "learned")
    assert (r["bert"].norm_position, r["bert"].activation) == ("post", "gelu")
    assert (r["gpt"].norm_position, r["gpt"].norm, r["gpt"].activation) == ("pre", "layer", "gelu")
    assert (r["gopher"].norm, r["gopher"].positions) == ("rms", "relative")


def test_a_preset_file_loads_as_a_config_file():
    from fatstudio.core.config import RunConfig
    from fatstudio.core.resources import resource_path
    from fatstudio.core.runs.presets import key_of, load_presets, preset

    paths, presets = sorted(resource_path("presets").glob("*.toml")), load_presets()
    assert [p.key for p in presets] == [key_of(path.stem) for path in paths]  # in the files' order
    for path, p in zip(paths, presets):
        assert RunConfig.load(path) == p.config
    assert {"gpt-char", "gpt-induction", "grokking"} <= {p.key for p in presets}  # the keys api.md names, exactly
    assert preset("7-grokking").key == preset("grokking").key == "grokking"  # the file stem, an older key
