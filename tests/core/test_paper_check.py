"""Check against the paper (core/paper_check.py): the fast model agrees with the literal reference to float64
precision for every architecture and variation (fresh, or with weights far from the init; a class head
too), a fault in the fast computation or a corrupted fast weight shows as a large difference, and the input
comes from the corpus as the model reads it. Also the list of deviations (core/fidelity.py)."""
import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.data.corpora import Corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.model import attention, layers
from fatstudio.core.names import MapName
from fatstudio.core.paper import fidelity
from fatstudio.core.paper.paper_check import CHECK_TOKENS, check_against_paper, compare, sample_input
from fatstudio.core.paper.reference import ReferenceTransformer

TOL = 1e-9
BASE = dict(vocab_size=23, l_max=16, L=2, L_enc=2, L_dec=2, H=4, d_e=16, d_mlp=24)
VARIATIONS = {
    "paper": {}, "rms": dict(norm="rms"), "layer": dict(norm="layer"), "pre": dict(norm_position="pre"),
    "post": dict(norm_position="post"), "relu": dict(activation="relu"), "gelu_tanh": dict(activation="gelu_tanh"),
    "swiglu": dict(activation="swiglu"), "learned": dict(positions="learned"), "sinusoidal": dict(positions="sinusoidal"),
    "rope": dict(positions="rope"), "alibi": dict(positions="alibi"), "relative": dict(positions="relative"),
    "no_positions": dict(positions="none"), "tied": dict(tie_embeddings=True), "no_bias": dict(bias=False),
    "d_attn_d_mid": dict(d_attn=6, d_mid=10, H=3), "gqa": dict(H_kv=2), "mqa": dict(H_kv=1), "dropout": dict(dropout=0.2),
}
CASES = [pytest.param(a, kw, id=f"{a}-{name}") for a in ("gpt", "gopher", "bert", "edt") for name, kw in VARIATIONS.items()]
CASES += [pytest.param("bert", dict(n_classes=3), id="bert-class_head"), pytest.param("bert", dict(d_f=10), id="bert-d_f")]


def make(arch, trained=True, **kw):
    """A float32 model of ``arch``; ``trained``: weights moved far from the init (biases, γ, β, u, v too)."""
    cfg = ModelConfig(arch=arch, **{**BASE, **kw})
    torch.manual_seed(0)
    model = build_model(cfg)
    if trained:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.4)
    return model


def sample(model, seed=1):
    return sample_input(model.config, seed=seed)


@pytest.mark.parametrize("arch,kw", CASES)
def test_agrees_with_the_paper(arch, kw):
    model = make(arch, **kw)
    s = sample(model)
    check = check_against_paper(model, s.x, s.z, s.source)
    d = check.differences
    assert d.probabilities <= TOL and d.attention_max <= TOL
    assert len(d.attention) == (2 + 2 + 2 if arch == "edt" else 2)  # every attention layer compared
    assert (d.classes is not None) == bool(kw.get("n_classes"))
    assert d.classes is None or d.classes <= TOL
    assert model.training and next(model.parameters()).dtype == torch.float32  # the model itself is untouched


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_a_fresh_model_agrees_too(arch):
    model = make(arch, trained=False)
    s = sample(model)
    check = check_against_paper(model, s.x, s.z)
    assert 0 <= check.differences.probabilities <= TOL and check.differences.attention_max <= TOL


@pytest.mark.parametrize("arch", ["gpt", "gopher", "bert", "edt"])
def test_a_wrong_scale_is_caught(arch, monkeypatch):
    """A fault in the fast attention (1/√(d_attn+1) instead of 1/√d_attn) changes P and every head."""
    monkeypatch.setattr(attention, "scale", lambda d_attn: (d_attn + 1) ** -0.5)
    model = make(arch)
    s = sample(model)
    check = check_against_paper(model, s.x, s.z)
    assert check.differences.attention_max > 1e-3 and check.differences.probabilities > 1e-4
    assert min(check.differences.attention.values()) > 1e-3


def test_a_wrong_activation_is_caught_where_it_acts(monkeypatch):
    """The tanh GELU in the fast MLP: P differs; the first layer's attention (before any MLP) does not."""
    monkeypatch.setitem(layers.ACTIVATIONS, "gelu", lambda x: torch.nn.functional.gelu(x, approximate="tanh"))
    model = make("gpt")
    s = sample(model)
    d = check_against_paper(model, s.x).differences
    assert d.probabilities > 1e-6
    assert d.attention[MapName("self", 0)] <= TOL and d.attention[MapName("self", 1)] > 1e-7


@pytest.mark.parametrize("arch", ["gpt", "bert", "edt"])
def test_a_corrupted_fast_weight_is_caught(arch):
    model = make(arch).double().eval()
    ref = ReferenceTransformer(model.config, {k: v.clone() for k, v in model.state_dict().items()})
    x = torch.tensor([[1, 5, 2, 7, 3]])
    z = torch.tensor([[4, 4, 9]]) if arch == "edt" else None
    assert compare(model, ref, x, z).worst <= TOL
    with torch.no_grad():
        model.get_submodule("decoder.0.attn.W_k" if arch == "edt" else "layers.0.attn.W_k").weight[0, 0] += 1e-4
    d = compare(model, ref, x, z)
    assert d.attention_max > 1e-7 and d.probabilities > 1e-9


def test_description_says_what_was_compared():
    model = make("edt")
    s = sample(model)
    check = check_against_paper(model, s.x, s.z, "twelve tokens of somewhere")
    text = check.description
    for words in ("Algorithm 8", "fatstudio.core.paper.reference", "float64", "probabilities P", "softmax(S/√d_attn)",
                  "4 heads", "6 attention layers", "twelve tokens of somewhere", f"{len(s.x)} target"):
        assert words in text, words
    assert check.seconds > 0 and check.n_tokens == len(s.x)


# ---- the input ---------------------------------------------------------------------------------------------
TEXT = "the quick brown fox jumps over the lazy dog. " * 20


def test_sample_input_reads_the_corpus_as_the_model_does():
    tok = train_tokenizer("char", [TEXT])
    corpus = Corpus("fox", "text", text=TEXT)
    n_v = tok.vocab_size
    gpt = sample_input(ModelConfig(arch="gpt", vocab_size=n_v, l_max=64), tok, corpus)
    assert gpt.x == tok.encode(TEXT)[:CHECK_TOKENS] and gpt.z is None and "'fox'" in gpt.source
    bert = sample_input(ModelConfig(arch="bert", vocab_size=n_v, l_max=64), tok, corpus)
    assert bert.x == [tok.bos_id, *tok.encode(TEXT)[:CHECK_TOKENS - 2], tok.eos_id]
    short = sample_input(ModelConfig(arch="gpt", vocab_size=n_v, l_max=5), tok, corpus)
    assert len(short.x) == 5  # never longer than ℓ_max
    edt = sample_input(ModelConfig(arch="edt", vocab_size=n_v, l_max=64), tok, corpus)  # a text: z, then x
    ids = tok.encode(TEXT)
    assert edt.z == [tok.bos_id, *ids[:CHECK_TOKENS - 2], tok.eos_id]
    assert edt.x == [tok.bos_id, *ids[CHECK_TOKENS - 2:2 * CHECK_TOKENS - 3]]
    pairs = Corpus("pairs", "pairs", pairs=[("abc", "cba"), ("x", "y")])
    tok2 = train_tokenizer("char", pairs.texts())
    p = sample_input(ModelConfig(arch="edt", vocab_size=tok2.vocab_size), tok2, pairs)
    assert p.z == [tok2.bos_id, *tok2.encode("abc"), tok2.eos_id] and p.x == [tok2.bos_id, *tok2.encode("cba")]


def test_sample_input_falls_back_to_random_ids():
    tok = train_tokenizer("char", [TEXT])
    corpus = Corpus("fox", "text", text=TEXT)
    small = ModelConfig(arch="gpt", vocab_size=tok.vocab_size - 1)  # the tokenizer's ids do not fit this N_V
    s = sample_input(small, tok, corpus, seed=3)
    assert "random" in s.source and len(s.x) == CHECK_TOKENS and max(s.x) < small.vocab_size
    assert s == sample_input(small, None, None, seed=3)  # seeded
    unknown = Corpus("digits", "text", text="0123456789" * 5)  # symbols the tokenizer does not know
    assert "random" in sample_input(ModelConfig(arch="gpt", vocab_size=tok.vocab_size), tok, unknown).source
    edt = sample_input(ModelConfig(arch="edt", vocab_size=40))
    assert len(edt.x) == len(edt.z) == CHECK_TOKENS


# ---- the deviations --------------------------------------------------------------------------------------
def test_every_deviation_says_paper_ours_why():
    ds = fidelity.deviations()
    assert len({d.topic for d in ds}) == len(ds) >= 12
    for d in ds:
        assert d.paper and d.fatstudio and d.why, d.topic
    topics = " ".join(d.topic for d in ds)
    for words in ("Erratum: BERT", "Erratum: GPT-2", "GELU", "ε", "Initialisation", "Padding", "AdamW", "Gopher",
                  "Sinusoidal", "columns"):
        assert words in topics, words


@pytest.mark.parametrize("arch,first", [("gpt", "Erratum: GPT-2"), ("gopher", "Erratum: GPT-2"),
                                        ("bert", "Erratum: BERT"), ("edt", "Erratum: the decoder")])
def test_the_chosen_architectures_deviations_come_first(arch, first):
    ds = fidelity.deviations(arch)
    assert sorted(d.topic for d in ds) == sorted(d.topic for d in fidelity.deviations())  # all, reordered
    ranks = [d.rank(arch) for d in ds]
    assert ranks == sorted(ranks) and ranks[0] == 0 and ds[0].topic.startswith(first)
    own = {d.topic for d in ds if d.rank(arch) == 0}
    assert ("Gopher's positions" in own) == (arch == "gopher") and ("Classification head (§3)" in own) == (arch == "bert")
    assert all(arch not in d.archs for d in ds if d.rank(arch) == 2) and {d.rank(arch) for d in ds} == {0, 1, 2}


def test_deviations_quote_the_code_defaults():
    """The numbers quoted are the configuration's (ε, the optimizer's, the sinusoidal base)."""
    ds = {d.topic: d for d in fidelity.deviations()}
    eps = ds["ε in the norms (Algorithm 6)"]
    assert f"ε = {ModelConfig().norm_eps:g}" in eps.fatstudio and eps.setting == "model.norm_eps"
    base = ModelConfig(positions="sinusoidal", l_max=64).resolved().position_base
    sinus = ds["Sinusoidal positions' base b (Algorithm 2)"].fatstudio
    assert ("ℓ_max" in sinus) == (base == 64)
    for name in (d.setting for d in ds.values() if d.setting.startswith("model.")):
        for field in name.split(", "):
            assert hasattr(ModelConfig(), field.removeprefix("model.")), field
