"""The fast model against the literal float64 reference (core/reference.py: the paper's pseudocode, literally):
every architecture × every variation, with and without padding, with caching and with attention capture."""
import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.model import KVCache
from fatstudio.core.paper.paper_check import compare
from fatstudio.core.paper.reference import ReferenceTransformer

TOL64 = 1e-9
N_V = 11
BASE = dict(vocab_size=N_V, l_max=12, L=2, L_enc=2, L_dec=2, H=2, d_e=8, d_mlp=12)
VARIATIONS = {
    "default": {},
    "rms": dict(norm="rms"), "layer": dict(norm="layer"),
    "pre": dict(norm_position="pre"), "post": dict(norm_position="post"),
    "relu": dict(activation="relu"), "gelu": dict(activation="gelu"),
    "gelu_tanh": dict(activation="gelu_tanh"), "swiglu": dict(activation="swiglu"),
    "learned": dict(positions="learned"), "sinusoidal": dict(positions="sinusoidal"),
    "sinusoidal_vaswani": dict(positions="sinusoidal", position_base=10000.0),
    "rope": dict(positions="rope"), "alibi": dict(positions="alibi"), "relative": dict(positions="relative"),
    "no_positions": dict(positions="none"),
    "tied": dict(tie_embeddings=True), "no_bias": dict(bias=False),
    "d_attn_d_mid": dict(d_attn=6, d_mid=10, H=3),
    "mqa": dict(H=4, H_kv=1), "gqa": dict(H=4, H_kv=2),
    "dropout_eval": dict(dropout=0.3),
    "bert_d_f": dict(d_f=6),
    "embed_norm_unembed_bias": dict(embed_norm=True, unembed_bias=True),  # BERT's, as imported (import_hf)
}
ARCHS = ["gpt", "gopher", "bert", "edt"]


def make(arch, dtype=torch.float64, **kw):
    cfg = ModelConfig(arch=arch, **{**BASE, **kw})
    torch.manual_seed(0)
    model = build_model(cfg).to(dtype).eval()
    with torch.no_grad():  # random parameters everywhere: biases, γ, β, u, v too
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.1 if name.endswith("gamma") else 0.4) + (1 if name.endswith("gamma") else 0))
    return cfg, model, ReferenceTransformer(cfg, model.state_dict())


def cases():
    for arch in ARCHS:
        for name, kw in VARIATIONS.items():
            if name == "bert_d_f" and arch != "bert":
                continue
            yield pytest.param(arch, kw, id=f"{arch}-{name}")


def probs(logits):
    return logits.softmax(-1)


def check_against_reference(model, ref, x, z=None, mask=None, z_mask=None, tol=TOL64):
    """Forward a (possibly padded) batch through the fast model, each real sequence through the reference
    (`paper_check.compare`, which the app's "Check against the paper" runs too)."""
    d = compare(model, ref, x, z, mask, z_mask)
    assert d.probabilities <= tol, f"probabilities differ by {d.probabilities}"
    for name, diff in d.attention.items():
        assert diff <= tol, f"attention {name} differs by {diff}"
    return d.worst


@pytest.mark.parametrize("arch,kw", list(cases()))
def test_matches_reference(arch, kw):
    cfg, model, ref = make(arch, **kw)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, N_V, (2, 7), generator=g)
    z = torch.randint(0, N_V, (2, 5), generator=g) if arch == "edt" else None
    check_against_reference(model, ref, x, z)


@pytest.mark.parametrize("arch,kw", list(cases()))
def test_matches_reference_with_padding(arch, kw):
    """Right-padded batches: padding changes no probability and no attention weight of a real token."""
    cfg, model, ref = make(arch, **kw)
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, N_V, (3, 8), generator=g)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6], dtype=torch.bool)
    x = x.masked_fill(~mask, N_V - 1)
    z = z_mask = None
    if arch == "edt":
        z = torch.randint(0, N_V, (3, 6), generator=g)
        z_mask = torch.tensor([[1] * 3 + [0] * 3, [1] * 6, [1] * 4 + [0] * 2], dtype=torch.bool)
    check_against_reference(model, ref, x, z, mask, z_mask)


@pytest.mark.parametrize("arch,kw", [c for c in cases() if c.values[0] in ("gpt", "gopher", "edt")])
def test_kv_cache_matches_reference(arch, kw):
    """Token-by-token decoding with a KV cache gives the reference's column t at step t."""
    cfg, model, ref = make(arch, **kw)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, N_V, (1, 7), generator=g)
    z = torch.randint(0, N_V, (1, 5), generator=g) if arch == "edt" else None
    P, _ = ref.forward(x[0].tolist(), None if z is None else z[0].tolist())
    cache = KVCache()
    Z = model.encode(z) if arch == "edt" else None
    steps = [x[:, :3], x[:, 3:5], x[:, 5:6], x[:, 6:7]]  # a prefill of 3, a block of 2, then one at a time
    t0 = 0
    for chunk in steps:
        logits = model.decode(chunk, Z, cache=cache) if arch == "edt" else model(chunk, cache=cache)
        d = (probs(logits[0]).T - P[:, t0:t0 + chunk.shape[1]]).abs().max().item()
        assert d <= TOL64, f"cached step at {t0} differs by {d}"
        t0 += chunk.shape[1]
    assert cache.length == 7


@pytest.mark.parametrize("arch", ARCHS)
def test_float32_within_1e5(arch):
    cfg, model, ref = make(arch, dtype=torch.float32, positions="rope" if arch == "bert" else None)
    x = torch.randint(0, N_V, (2, 9), generator=torch.Generator().manual_seed(4))
    z = torch.randint(0, N_V, (2, 4)) if arch == "edt" else None
    check_against_reference(model, ref, x, z, tol=1e-5)


def test_classification_head_matches_reference():
    cfg, model, ref = make("bert", n_classes=3)
    x = torch.randint(0, N_V, (2, 6), generator=torch.Generator().manual_seed(5))
    d = compare(model, ref, x)
    assert d.classes is not None and d.classes <= TOL64
