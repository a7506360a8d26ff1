"""Inference: sampling (Algorithm 14's step), generate with and without KV cache, translate (Algorithm 15),
fill-mask, classify and attention maps, on tiny models and a tiny character tokenizer."""
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import POSITIONS
from fatstudio.core.inference.generation import (
    AttentionMaps,
    Generation,
    MaskPrediction,
    TokenChoice,
    _TextStream,
    attention_maps,
    attention_maps_for_ids,
    classify,
    fill_in,
    fill_mask,
    generate,
    sample_next,
    translate,
)
from fatstudio.core.inference.prompting import encode_prompt
from fatstudio.core.names import MapName


class CharTok:
    """A character tokenizer over a fixed alphabet with pad, mask, bos, eos as the last four ids."""

    SPECIALS = ("<pad>", "<mask>", "<bos>", "<eos>")

    def __init__(self, alphabet="abcdefghijklmno ."):
        self.chars = list(alphabet)
        self.index = {c: i for i, c in enumerate(self.chars)}
        n = len(self.chars)
        self.pad_id, self.mask_id, self.bos_id, self.eos_id = n, n + 1, n + 2, n + 3
        self.vocab_size = n + 4

    def encode(self, text):
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"unknown symbols {''.join(unknown)!r} are not in the vocabulary")
        return [self.index[c] for c in text]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids if i < len(self.chars))

    def token_strings(self, ids):
        n = len(self.chars)
        return [self.chars[i] if i < n else self.SPECIALS[i - n] for i in ids]


TOK = CharTok()
L_MAX = 16


def tiny(arch="gpt", seed=0, **kw):
    """A 2-layer, 32-wide model with weights large enough that attention and the argmax are decisive."""
    torch.manual_seed(seed)
    kw = dict(dict(vocab_size=TOK.vocab_size, l_max=L_MAX, L=2, L_enc=2, L_dec=2, H=2, d_e=32, d_mlp=64), **kw)
    model = build_model(ModelConfig(arch=arch, **kw))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3 if p.dim() >= 2 else 0.1)
    return model.eval().requires_grad_(False)


def softmax_last(model, ids, **kw):
    return model(torch.tensor([ids]), **kw)[0, -1].softmax(-1)


def force_eos_at(model, x, rows, **kw):
    """Set W_u[eos] so that eos loses at query rows[:-1] and wins at rows[-1] (greedy stops there)."""
    seen = {}
    hook = model.unembed.register_forward_hook(lambda mod, inp, out: seen.update(h=inp[0]))
    with torch.no_grad():
        logits = model(torch.tensor([x]), **kw)
        hook.remove()
        H, other = seen["h"][0, rows].double(), logits[0, rows].double()
        other[:, TOK.eos_id] = -math.inf
        target = other.max(-1).values - 1.0
        target[-1] += 2.0
        model.unembed.W_u.weight[TOK.eos_id] = (torch.linalg.pinv(H) @ target).float()


# ------------------------------------------------------------------------------------------------ sampling
def test_greedy_top_k_1_and_tiny_top_p_are_argmax():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(TOK.vocab_size, generator=g) * 2
        best = int(logits.argmax())
        y, info = sample_next(logits, temperature=0)
        assert y == best and info.sampling_probs[best] == 1 and info.top_k_cutoff is None
        assert torch.allclose(info.probs, logits.softmax(-1))
        assert sample_next(logits, top_k=1, generator=g)[0] == best
        assert sample_next(logits, top_p=1e-6, generator=g)[0] == best
        y, info = sample_next(logits, top_k=3, generator=g)
        assert info.top_k_cutoff == pytest.approx(float(logits.softmax(-1).sort(descending=True).values[2]))
        assert info.probs[y] >= info.top_k_cutoff - 1e-7


def test_top_p_keeps_the_smallest_nucleus():
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    _, info = sample_next(p.log(), top_p=0.75, generator=torch.Generator().manual_seed(1))
    assert info.top_p_cutoff == pytest.approx(0.3)
    assert torch.allclose(info.sampling_probs, torch.tensor([0.625, 0.375, 0, 0]))
    _, info = sample_next(p.log(), top_p=0.85, top_k=2, generator=torch.Generator().manual_seed(1))
    assert info.top_k_cutoff == pytest.approx(0.3) and info.top_p_cutoff == pytest.approx(0.3)


def test_sampling_at_temperature_1_follows_softmax():
    logits = torch.tensor([1.5, 0.2, -0.7, 0.9, 0.0, -2.0])
    p = logits.softmax(-1).numpy()
    g = torch.Generator().manual_seed(1234)
    n = 4000
    counts = np.bincount([sample_next(logits, generator=g)[0] for _ in range(n)], minlength=len(p))
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert chi2 < 25.0  # 5 degrees of freedom: P(χ² > 25) ≈ 1e-4


def test_temperature_2_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0])

    def entropy(q):
        return float(-(q * q.clamp_min(1e-30).log()).sum())

    q = {t: sample_next(logits, temperature=t, generator=torch.Generator())[1].sampling_probs for t in (0.5, 1, 2)}
    assert entropy(q[2]) > entropy(q[1]) > entropy(q[0.5])
    p = logits.softmax(-1)
    assert torch.allclose(q[2], p.sqrt() / p.sqrt().sum(), atol=1e-6)  # y ∝ p^{1/τ}


def test_sampling_arguments_are_checked():
    for kw in (dict(temperature=-1), dict(top_k=-1), dict(top_p=0), dict(top_p=1.5)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            sample_next(torch.zeros(4), **kw)


def test_a_seed_draws_what_torch_multinomial_draws():
    """y = argmax(q / E) with E ~ Exp(1) from the generator is torch.multinomial's own one-sample draw on the
    CPU, so seeds give the tokens they gave when sampling called torch.multinomial."""
    g = torch.Generator().manual_seed(5)
    for kw in (dict(), dict(temperature=0.7, top_k=6), dict(temperature=1.3, top_p=0.8)):
        for seed in range(20):
            logits = torch.randn(TOK.vocab_size, generator=g) * 2
            y, info = sample_next(logits, generator=torch.Generator().manual_seed(seed), exclude=(TOK.bos_id,), **kw)
            assert y == int(torch.multinomial(info.sampling_probs, 1, generator=torch.Generator().manual_seed(seed)))


# ------------------------------------------------------------------------------------------------ generate
@pytest.mark.parametrize("arch", ["gpt", "gopher"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_generation_equals_uncached(arch, positions):
    model = tiny(arch, positions=positions)
    runs = [list(generate(model, TOK, "abc de", tokens=2 * L_MAX + 3, temperature=0, use_cache=c))
            for c in (True, False)]
    assert len(runs[0]) == 2 * L_MAX + 3  # well past l_max: the window slides
    assert [c.id for c in runs[0]] == [c.id for c in runs[1]]
    for a, b in zip(*runs):
        assert a.prob == pytest.approx(b.prob, abs=1e-5)
        assert [s for s, _ in a.alternatives] == [s for s, _ in b.alternatives]
        assert np.allclose([q for _, q in a.alternatives], [q for _, q in b.alternatives], atol=1e-5)


SPECIALS = (TOK.pad_id, TOK.mask_id, TOK.bos_id)  # never sampled


def allowed(p):
    """p with the never-sampled special tokens at 0 (for comparisons with what generate may draw)."""
    return p.index_fill(0, torch.tensor(SPECIALS), 0.0)


def test_slide_1_is_always_the_last_l_max_tokens():
    model = tiny("gpt", positions="learned")
    prompt = "abcdefghijklmno abcde"  # longer than l_max: cropped to its last l_max tokens
    got = [c.id for c in generate(model, TOK, prompt, tokens=20, temperature=0, slide=1)]
    seq = TOK.encode(prompt)
    for _ in range(20):
        seq.append(int(allowed(softmax_last(model, seq[-L_MAX:])).argmax()))
    assert got == seq[-20:]


def test_token_choice_is_the_full_forward_probability():
    model = tiny("gopher")
    prompt = "bad cab"
    choices = list(generate(model, TOK, prompt, tokens=L_MAX - 8, seed=3, add_bos=True, top_k=10, alternatives=4))
    seq = [TOK.bos_id] + TOK.encode(prompt)
    for c in choices:
        assert isinstance(c, TokenChoice)
        p = softmax_last(model, seq)
        assert c.prob == pytest.approx(float(p[c.id]), abs=1e-5)
        top = p.topk(4)
        assert [s for s, _ in c.alternatives] == TOK.token_strings(top.indices.tolist())
        assert np.allclose([q for _, q in c.alternatives], top.values.numpy(), atol=1e-5)
        assert c.id not in SPECIALS
        assert c.top_k_cutoff == pytest.approx(float(allowed(p).sort(descending=True).values[9]), abs=1e-5)
        assert c.top_p_cutoff is None
        seq.append(c.id)
    assert "".join(c.text for c in choices) == TOK.decode(seq[len(prompt) + 1:])


class FixedLogits(torch.nn.Module):
    """A stand-in gpt that returns the same logits at every position: the loop around the model, alone."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(arch="gpt", l_max=L_MAX, vocab_size=TOK.vocab_size)
        self.logits = torch.nn.Parameter(torch.randn(TOK.vocab_size))

    def forward(self, x, cache=None):
        return self.logits.expand(*x.shape, -1)


class HostReads(TorchDispatchMode):
    """Counts the ops that read one tensor value back to the host (``.item()``, ``int(t)``, ``if t:``...)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def test_generation_copies_to_the_host_once_per_token(monkeypatch):
    """Around the model, each token reads nothing back value by value (on a GPU, each read is a sync): sampling
    stays on the logits' device, the next input is the sampled id's tensor, and everything a TokenChoice
    reports comes back in one ``tolist``."""
    copies = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: copies.append(t) or tolist(t))
    n = 2 * L_MAX + 3  # past l_max: the window slides
    for kw in (dict(temperature=0, top_k=3, top_p=0.5), dict(temperature=0.9, top_k=5, top_p=0.8, seed=1), {}):
        copies.clear()
        with HostReads() as reads:
            choices = list(generate(FixedLogits(), TOK, "ab", tokens=n, alternatives=3, **kw))
        assert len(choices) == n and reads.count == 0 and len(copies) == n


@pytest.mark.parametrize("positions", POSITIONS)
def test_a_model_that_generated_still_trains(positions):
    """Generation runs under inference_mode; nothing the model keeps from it may break a later backward."""
    model = tiny("gpt", positions=positions).train().requires_grad_(True)
    list(generate(model, TOK, "abc", tokens=L_MAX + 3, seed=0))
    model(torch.tensor([TOK.encode("abcd")])).logsumexp(-1).sum().backward()


def test_text_stream_decodes_once_per_token():
    calls = []

    class CountingTok(CharTok):
        def decode(self, ids):
            calls.append(len(ids))
            return super().decode(ids)

    tok = CountingTok()
    ids = tok.encode("abc defg hijk lmno. " * 5)
    text = tok.decode(ids[4:])
    stream = _TextStream(tok, ids[:4])
    calls.clear()
    assert "".join(stream.push(i) for i in ids[4:]) == text
    assert len(calls) <= 1.2 * len(ids[4:]) and max(calls) <= 2 * _TextStream.TAIL + 1  # was 2 per token


def test_seed_reproducibility_and_model_mode_restored():
    model = tiny("gpt").train()
    run = lambda seed: [c.id for c in generate(model, TOK, "ab", tokens=30, seed=seed, temperature=1.5)]
    assert run(7) == run(7)
    assert run(7) != run(8)
    assert model.training


def test_empty_prompt_unknown_symbols_and_wrong_arch():
    model = tiny("gpt")
    first = next(generate(model, TOK, "", tokens=1, temperature=0))
    assert first.prob == pytest.approx(float(softmax_last(model, [TOK.bos_id]).max()), abs=1e-6)
    with pytest.raises(ValueError, match="unknown symbols 'XZ'"):
        generate(model, TOK, "abXcZ")
    with pytest.raises(ValueError, match="'gpt' or 'gopher'"):
        generate(tiny("bert"), TOK, "ab")
    with pytest.raises(ValueError, match="slide"):
        generate(model, TOK, "ab", slide=L_MAX + 1)


def test_stop_at_eos():
    model = tiny("gpt")
    prompt = TOK.encode("abc")
    with torch.no_grad():
        model.unembed.W_u.weight[TOK.eos_id] = 0
    ids = [c.id for c in generate(model, TOK, "abc", tokens=6, temperature=0)]
    assert TOK.eos_id not in ids
    force_eos_at(model, prompt + ids[:3], [len(prompt) - 1 + j for j in range(4)])
    assert [c.id for c in generate(model, TOK, "abc", tokens=6, temperature=0, stop_at_eos=True)] == ids[:3]
    assert len(list(generate(model, TOK, "abc", tokens=6, temperature=0))) == 6


# ----------------------------------------------------------------------------------------------- translate
def test_translate_cached_equals_full_forward_and_length_guard():
    model = tiny("edt")
    with torch.no_grad():
        model.unembed.W_u.weight[TOK.eos_id] = 0
    out = list(translate(model, TOK, "fabled"))
    ids = [c.id for c in out]
    assert len(ids) == L_MAX - 1 and TOK.eos_id not in ids  # no eos: the max-length guard stops it
    z = torch.tensor([[TOK.bos_id] + TOK.encode("fabled") + [TOK.eos_id]])
    P = model(torch.tensor([[TOK.bos_id] + ids[:-1]]), context=z)[0].softmax(-1)
    assert P.argmax(-1).tolist() == ids
    assert np.allclose([c.prob for c in out], P.max(-1).values.numpy(), atol=1e-5)
    assert len(list(translate(model, TOK, "fabled", max_tokens=4))) == 4
    with pytest.raises(ValueError, match="l_max = 16"):
        translate(model, TOK, "a" * L_MAX)


def test_translate_stops_at_eos():
    model = tiny("edt", seed=1)
    with torch.no_grad():
        model.unembed.W_u.weight[TOK.eos_id] = 0
    ids = [c.id for c in translate(model, TOK, "abc", max_tokens=6)]
    z = [TOK.bos_id] + TOK.encode("abc") + [TOK.eos_id]
    force_eos_at(model, [TOK.bos_id] + ids[:3], [0, 1, 2, 3], context=torch.tensor([z]))
    out = list(translate(model, TOK, "abc"))
    assert [c.id for c in out] == ids[:3]
    assert "".join(c.text for c in out) == TOK.decode(ids[:3])


# ------------------------------------------------------------------------------------- fill-mask, classify
def test_fill_mask_candidates_are_the_model_softmax():
    model = tiny("bert")
    preds = fill_mask(model, TOK, "ab[MASK]cd<mask>", top=3)  # the user marker and the tokenizer's own
    x = [TOK.bos_id] + TOK.encode("ab") + [TOK.mask_id] + TOK.encode("cd") + [TOK.mask_id, TOK.eos_id]
    assert [p.position for p in preds] == [3, 6] and [p.char_offset for p in preds] == [2, 10]
    P = model(torch.tensor([x]))[0].softmax(-1)
    for pred in preds:
        top = P[pred.position].topk(3)
        assert [s for s, _ in pred.candidates] == TOK.token_strings(top.indices.tolist())
        assert np.allclose([q for _, q in pred.candidates], top.values.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        fill_mask(model, TOK, "no marker here")
    with pytest.raises(ValueError, match="l_max = 16"):
        fill_mask(model, TOK, "a" * 14 + "[MASK]")


def test_classify_sorted_probabilities():
    model = tiny("bert", n_classes=3)
    out = classify(model, TOK, "abc", ["neg", "neu", "pos"])
    p = model.classify(torch.tensor([[TOK.bos_id] + TOK.encode("abc") + [TOK.eos_id]]))[0].softmax(-1)
    assert dict(out) == pytest.approx(dict(zip(["neg", "neu", "pos"], p.tolist())), abs=1e-6)
    assert [q for _, q in out] == sorted((q for _, q in out), reverse=True)
    with pytest.raises(ValueError, match="n_classes = 3"):
        classify(model, TOK, "abc", ["a", "b"])


def count_passes(model):
    """A list that grows by one for each forward pass through the model's token embedding."""
    passes = []
    model.embed.register_forward_hook(lambda *_: passes.append(1))
    return passes


def test_fill_mask_and_classify_return_the_attention_of_their_own_pass():
    bert = tiny("bert", n_classes=3)
    passes = count_passes(bert)
    preds, maps = fill_mask(bert, TOK, "ab[MASK]cd", top=3, return_attention=True)
    assert len(passes) == 1  # one forward for the answer and its attention
    x = [TOK.bos_id] + TOK.encode("ab") + [TOK.mask_id] + TOK.encode("cd") + [TOK.eos_id]
    ref = attention_maps_for_ids(bert, TOK, x)
    assert maps.tokens == ref.tokens and set(maps.maps) == set(ref.maps)
    assert all(np.array_equal(maps.maps[k], ref.maps[k]) for k in ref.maps)
    plain = fill_mask(bert, TOK, "ab[MASK]cd", top=3)
    assert [s for s, _ in preds[0].candidates] == [s for s, _ in plain[0].candidates]
    assert np.allclose([q for _, q in preds[0].candidates], [q for _, q in plain[0].candidates], atol=1e-6)
    passes.clear()
    probs, maps = classify(bert, TOK, "abc", return_attention=True)
    assert len(passes) == 1 and [n for n, _ in probs] != [] and all(n.startswith("class ") for n, _ in probs)
    x = [TOK.bos_id] + TOK.encode("abc") + [TOK.eos_id]
    assert maps.tokens == TOK.token_strings(x)
    assert all(np.array_equal(maps.maps[k], v) for k, v in attention_maps_for_ids(bert, TOK, x).maps.items())
    assert dict(probs) == pytest.approx(dict(classify(bert, TOK, "abc", ["class 0", "class 1", "class 2"])), abs=1e-6)


def test_an_encoded_prompt_is_read_as_is():
    class CountingTok(CharTok):
        encoded = 0

        def encode(self, text):
            CountingTok.encoded += len(text)
            return super().encode(text)

    tok = CountingTok()
    gpt, bert, edt = tiny("gpt"), tiny("bert", n_classes=2), tiny("edt")
    for text, mode, call in (
            ("abc", "generate", lambda p: list(generate(gpt, tok, p, tokens=3, seed=0))),
            ("abc", "translate", lambda p: list(translate(edt, tok, p, max_tokens=3))),
            ("a[MASK]c", "fill_mask", lambda p: fill_mask(bert, tok, p, return_attention=True)),
            ("abc", "classify", lambda p: classify(bert, tok, p, return_attention=True))):
        CountingTok.encoded = 0
        prompt = encode_prompt(tok, text, mode, l_max=L_MAX)
        call(prompt)
        assert CountingTok.encoded == len(text.replace("[MASK]", ""))  # encoded once, by encode_prompt
    assert [c.id for c in generate(gpt, tok, encode_prompt(tok, "abc", "generate", l_max=L_MAX), tokens=3, seed=0)] \
        == [c.id for c in generate(gpt, tok, "abc", tokens=3, seed=0)]
    with pytest.raises(ValueError, match="encoded for classify"):
        fill_mask(bert, tok, encode_prompt(tok, "abc", "classify", l_max=L_MAX))
    with pytest.raises(ValueError, match=r"no masked position; write \[MASK\]"):
        fill_mask(bert, tok, encode_prompt(tok, "abc", "fill_mask", l_max=L_MAX))


def test_a_generation_knows_what_the_model_read():
    model = tiny("gpt")
    gen = generate(model, TOK, "abcdefghijklmno", tokens=5, temperature=0)
    assert isinstance(gen, Generation) and gen.prompt.ids == tuple(TOK.encode("abcdefghijklmno"))
    out = [c.id for c in gen]
    assert gen.output_ids == out
    x, z = gen.attention_input()
    # the user's text: the window starts where the prompt starts, whatever the output's length
    assert x == (list(gen.prompt.ids) + out)[:L_MAX] and z is None
    maps = gen.attention()
    assert maps.tokens == TOK.token_strings(x) and maps.maps[MapName("self", 0)].shape == (2, L_MAX, L_MAX)
    assert maps.caption == "the prompt (15 tokens) + the first 1 of the 5 generated tokens (l_max = 16)"
    gen = generate(model, TOK, "abcde", tokens=40, temperature=0)
    out = [c.id for c in gen]
    assert gen.attention_input()[0] == (TOK.encode("abcde") + out)[:L_MAX]
    assert gen.attention().caption == "the prompt (5 tokens) + the first 11 of the 40 generated tokens (l_max = 16)"
    gen = generate(model, TOK, "abcde" * 4, tokens=3, temperature=0)  # longer than l_max: its last l_max tokens
    list(gen)
    assert gen.attention_input()[0] == TOK.encode("abcde" * 4)[-L_MAX:]
    assert gen.attention().caption == "the last 16 of the prompt's 20 tokens; the 3 generated tokens do not fit (l_max = 16)"
    gen = generate(model, TOK, "abc", tokens=2, temperature=0)
    list(gen)
    assert gen.attention().caption == "the prompt (3 tokens) + all 2 generated tokens"
    edt = tiny("edt")
    with torch.no_grad():
        edt.unembed.W_u.weight[TOK.eos_id] = 0
    gen = translate(edt, TOK, "abc", max_tokens=4)
    out = [c.id for c in gen]
    assert gen.attention_input() == ([TOK.bos_id] + out, [TOK.bos_id] + TOK.encode("abc") + [TOK.eos_id])
    assert gen.attention().maps[MapName("cross", 0)].shape == (2, 5, 5)
    assert gen.attention().caption == "the source (5 tokens with bos and eos) → <bos> + all 4 output tokens"
    gen = generate(model, TOK, "ab", tokens=100)
    next(gen)
    gen.close()  # stops early
    assert list(gen) == [] and gen.output_ids and not model.training


def test_fill_in_puts_each_prediction_in_its_markers_place():
    text = "ab[MASK]cd<mask>"
    preds = fill_mask(tiny("bert"), TOK, text)
    assert [(p.char_offset, p.char_end) for p in preds] == [(2, 8), (10, 16)]
    assert fill_in(text, preds) == ["ab", preds[0], "cd", preds[1]]
    assert fill_in("x", [MaskPrediction(1, [])]) == ["x"]  # no place in the text: left out


# ------------------------------------------------------------------------------------------ attention maps
def test_attention_maps_are_the_model_numbers():
    model = tiny("gpt", positions="rope")
    am = attention_maps(model, TOK, "dead beef", add_bos=True)
    x = [TOK.bos_id] + TOK.encode("dead beef")
    _, attn = model(torch.tensor([x]), return_attention=True)
    assert am.tokens == TOK.token_strings(x) and am.context_tokens is None
    assert list(am.maps) == [MapName("self", 0), MapName("self", 1)]
    for k, A in am.maps.items():
        assert A.shape == (2, len(x), len(x))
        assert np.array_equal(A, attn[str(k)][0].numpy())
        assert np.allclose(A.sum(-1), 1, atol=1e-6)
        assert np.allclose(np.triu(A, 1), 0)
        assert am.entropy(k).shape == (2,) and am.mean_over_heads(k).shape == (len(x), len(x))
    with pytest.raises(ValueError, match="l_max = 16"):
        attention_maps(model, TOK, "a" * (L_MAX + 1))


def test_attention_maps_edt_and_bert():
    edt = tiny("edt")
    am = attention_maps(edt, TOK, "ab", source="cdef")
    assert am.context_tokens == ["<bos>", "c", "d", "e", "f", "<eos>"] and am.tokens == ["<bos>", "a", "b"]
    assert am.maps[MapName("enc", 1)].shape == (2, 6, 6) and am.maps[MapName("dec", 0)].shape == (2, 3, 3)
    assert am.maps[MapName("cross", 1)].shape == (2, 3, 6) and am.key_tokens(MapName("cross", 1)) == am.context_tokens
    with pytest.raises(ValueError, match="source"):
        attention_maps(edt, TOK, "ab")
    am = attention_maps(tiny("bert"), TOK, "a[MASK]b")
    assert am.tokens == ["<bos>", "a", "<mask>", "b", "<eos>"] and am.maps[MapName("self", 0)].shape == (2, 5, 5)


def test_entropy_of_uniform_rows_is_log_t_key():
    am = AttentionMaps(["a", "b", "c"], None, {MapName("self", 0): np.full((2, 3, 5), 0.2, np.float32)})
    assert np.allclose(am.entropy(MapName("self", 0)), math.log(5))
    one_hot = np.zeros((1, 3, 3), np.float32)
    one_hot[0, :, 0] = 1
    assert np.allclose(AttentionMaps(["a"] * 3, None, {MapName("self", 0): one_hot}).entropy(MapName("self", 0)), 0)


def test_attention_maps_save_and_reload(tmp_path):
    am = attention_maps(tiny("edt"), TOK, "ab", source="cdef")
    for suffix in ("json", "npz"):
        back = AttentionMaps.load(am.save(tmp_path / f"a.{suffix}"))
        assert back.tokens == am.tokens and back.context_tokens == am.context_tokens
        for k in am.maps:
            assert np.allclose(back.maps[k], am.maps[k], atol=1e-6)
    d = json.loads((tmp_path / "a.json").read_text())
    assert set(d["maps"]) == set(map(str, am.maps)) and len(d["entropy"]["enc/0"]) == 2
    with np.load(tmp_path / "a.npz") as z:
        assert np.array_equal(z["cross/0"], am.maps[MapName("cross", 0)])
    lines = am.save(tmp_path / "a.csv").read_text().splitlines()
    assert lines[0].startswith("map,head,query,key") and len(lines) == 1 + sum(a.size for a in am.maps.values())
    for name in ("a.txt", "a.png"):
        with pytest.raises(ValueError, match=r"\.json, \.npz or \.csv file \(a picture is the Qt layer's"):
            am.save(tmp_path / name)


# --------------------------------------------------------------------------------------- real tokenizer
def test_with_the_real_tokenizers():
    from fatstudio.core.data.tokenization import train_tokenizer

    text = "the cat sat on the mat.\nhéllo wörld, 日本語 🙂\n" * 3
    for kind in ("char", "word", "bpe"):
        tok = train_tokenizer(kind, [text], vocab_size=300)
        ids = tok.encode(text)
        stream = _TextStream(tok, ids[:5])  # TokenChoice.text: the pieces add up to the decoded text
        assert "".join(stream.push(i) for i in ids[5:]) == tok.decode(ids)[len(tok.decode(ids[:5])):]
        model = tiny("gpt", vocab_size=tok.vocab_size)
        choices = list(generate(model, tok, "the ca", tokens=10, seed=0))
        assert len(choices) == 10 and all(0 <= c.id < tok.vocab_size for c in choices)
        am = attention_maps(model, tok, "the cat")
        assert am.tokens == tok.token_strings(tok.encode("the cat"))
        bert = tiny("bert", vocab_size=tok.vocab_size)
        preds = fill_mask(bert, tok, "the [MASK] sat<mask>.")
        assert len(preds) == 2 and len(preds[0].candidates) == 5
    with pytest.raises(ValueError, match="☃"):
        generate(tiny("gpt", vocab_size=tok.vocab_size), train_tokenizer("char", [text]), "the cat ☃")


def test_special_tokens_are_never_sampled_but_probabilities_stay_the_models():
    logits = torch.zeros(6)
    logits[3] = 5.0  # the most likely token is excluded
    for temperature in (0.0, 1.0):
        y, info = sample_next(logits, temperature=temperature, exclude=(3, 4),
                                        generator=torch.Generator().manual_seed(0))
        assert y not in (3, 4)
        assert torch.allclose(info.probs, logits.softmax(-1))
