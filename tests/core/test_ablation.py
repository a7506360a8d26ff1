"""Ablation is exact: a zeroed head is that head's columns of W_o zeroed, a zeroed MLP its output weights
zeroed, in every architecture; mean and resample put the batch's mean or another row's output in its place;
the baseline is the trainer's validation loss; the knock-out table reports and can be cancelled."""
import copy

import pytest
import torch
from interventions_helpers import ARCHS, inputs, tiny

from fatstudio.core.config import TrainConfig
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.ablation import Ablator, validation_batch
from fatstudio.core.inspect.components import component, components, replaced
from fatstudio.core.names import ComponentName
from fatstudio.core.training import evaluate


def _zeroed_copy(model, name):
    """A copy of ``model`` with the weights of component ``name`` zeroed: a head's columns of W_o, or an MLP's
    W_mlp2 and b_mlp2."""
    twin = copy.deepcopy(model)
    c = component(twin, name)
    with torch.no_grad():
        if c.is_head:
            c.module.weight[:, c.head * c.width:(c.head + 1) * c.width] = 0
        else:
            c.module.W_mlp2.weight.zero_()
            if c.module.W_mlp2.bias is not None:
                c.module.W_mlp2.bias.zero_()
    return twin


@pytest.mark.parametrize("arch", ARCHS)
def test_zero_ablation_equals_the_model_with_the_component_s_weights_zeroed(arch):
    model = tiny(arch)
    x, kw = inputs(model)
    with torch.no_grad():
        clean = model(x, **kw)
        names = [c.name for c in components(model)]
        for c in components(model):
            with replaced({c: torch.zeros_like}):
                ablated = model(x, **kw)
            expected = _zeroed_copy(model, c.name)(x, **kw)
            assert (ablated - expected).abs().max() <= 1e-6, c.name
            assert (ablated - clean).abs().max() > 1e-3, c.name  # the knock-out did something
    kinds = {"gpt": {"self", "mlp"}, "gopher": {"self", "mlp"}, "bert": {"self", "mlp"},
             "edt": {"enc", "enc-mlp", "dec", "cross", "dec-mlp"}}.get(arch, {"self", "mlp"})
    assert {str(n).split("/")[0] for n in names} == kinds
    L = 2
    assert len(names) == L * (2 + 1) if arch != "edt" else len(names) == 2 * (2 + 1) + 2 * (2 + 2 + 1)


def _what_W_o_reads(model, x, kw, c, fn):
    """The input of ``c``'s W_o in a forward pass where ``c`` is replaced by ``fn``."""
    seen = []
    with torch.no_grad(), replaced({c: fn}):
        h = c.module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
        try:
            model(x, **kw)
        finally:
            h.remove()
    return c.part(seen[0])


def _val(model, seed=2):
    x, kw = inputs(model, B=5, T=7, seed=seed)
    rows = {"x": x, "y": torch.roll(x, -1, 1)}
    if kw:
        rows.update(z=kw["context"], z_pad_mask=torch.ones_like(kw["context"], dtype=torch.bool),
                    x_pad_mask=torch.ones_like(x, dtype=torch.bool))
    from fatstudio.core.inspect.ablation import ValidationBatch
    return ValidationBatch("seq2seq" if kw else "next_token", rows, torch.tensor([0, 0, 1, 1, 1]), 2), x, kw


@pytest.mark.parametrize("arch", ["gpt", "edt"])
def test_mean_and_resample_put_the_batch_mean_or_the_next_row_in_the_head_s_place(arch):
    model = tiny(arch)
    val, x, kw = _val(model)
    ablator = Ablator(model, val)
    for name in ("cross/1/1" if arch == "edt" else "self/1/0", "dec/0/1" if arch == "edt" else "self/0/1"):
        c = component(model, ComponentName.parse(name))
        clean = _what_W_o_reads(model, x, kw, c, lambda a: a)
        mean = _what_W_o_reads(model, x, kw, c, ablator.replacement(c, "mean")(slice(None)))
        assert torch.allclose(mean, clean.mean(0, keepdim=True).expand_as(clean), atol=1e-12)
        resampled = _what_W_o_reads(model, x, kw, c, ablator.replacement(c, "resample")(slice(None)))
        assert torch.equal(resampled, clean.roll(-1, 0)) and not torch.equal(resampled, clean)
        base = ablator.baseline()
        assert ablator.ablated([c], "mean") != base and ablator.ablated([c], "resample") != base


def test_mean_ablation_of_an_mlp_in_chunks_counts_only_real_positions():
    model = tiny("edt")
    val, x, kw = _val(model)
    val.rows["x_pad_mask"][0, 5:] = False  # row 0 is padded after 5 tokens
    ablator = Ablator(model, val)
    ablator.chunks = [slice(0, 2), slice(2, 5)]  # the replacement follows the rows of each chunk
    c = component(model, ComponentName.parse("dec-mlp/0"))
    ablator.baseline(record=True)
    out = ablator._outputs[c.name]
    w = val.rows["x_pad_mask"].double()
    expected = (out * w[..., None]).sum(0) / w.sum(0)[:, None]
    got = ablator.replacement(c, "mean")(slice(2, 5))(out[2:5])
    assert torch.allclose(got, expected.expand_as(got), atol=1e-12)
    assert not torch.allclose(expected[6], out[:, 6].mean(0))  # position 6's mean leaves out the padded row


@pytest.fixture(scope="module")
def char_data(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "c.txt"
    p.write_text("the quick brown fox jumps over the lazy dog. " * 60, encoding="utf-8")
    corpus = load_corpus(str(p))
    return corpus, train_tokenizer("char", corpus.texts())


@pytest.mark.parametrize("task", ["next_token", "masked_lm", "seq2seq"])
def test_the_baseline_is_the_trainer_s_validation_loss(task, char_data):
    corpus, tok = char_data
    if task == "seq2seq":
        corpus = load_corpus("reverse", "seq2seq", None, 0)
        tok = train_tokenizer("char", corpus.texts())
    data = build_dataset(corpus, tok, task, 12, 0.2, 0.15, 0)
    arch = {"next_token": "gpt", "masked_lm": "bert", "seq2seq": "edt"}[task]
    model = tiny(arch, vocab_size=tok.vocab_size).float()
    t = TrainConfig(batch_size=4, eval_iters=3, seed=5)
    _, val_loss, _, _ = evaluate(model, data, task, t, torch.device("cpu"), t.seed)
    ablator = Ablator(model, validation_batch(data, task, t.batch_size, t.eval_iters, t.seed, tok.pad_id))
    assert abs(ablator.baseline() - val_loss) <= 1e-5


def test_the_table_lists_every_component_reports_progress_and_stops_when_cancelled():
    model = tiny("gpt")
    val, _, _ = _val(model)
    ablator = Ablator(model, val)
    seen = []
    table = ablator.table("zero", progress=lambda done, total, name: seen.append((done, total, name)))
    names = [c.name for c in components(model)]
    assert [r.component for r in table.rows] == names
    assert list(map(str, names)) == ["self/0/0", "self/0/1", "mlp/0", "self/1/0", "self/1/1", "mlp/1"]
    assert seen == [(i + 1, len(names), n) for i, n in enumerate(names)] and table.complete
    for r in table.rows:
        assert r.loss == pytest.approx(ablator.ablated([component(model, r.component)]))
        assert r.delta_loss == pytest.approx(r.loss - table.baseline_loss)
    cut = ablator.table("mean", cancelled=lambda: len(seen) >= 8, progress=lambda *a: seen.append(a))
    assert not cut.complete and len(cut.rows) == 2
    with pytest.raises(ValueError, match="zero, mean, resample"):
        ablator.table("half")


def _next_token_probs(model, ids):
    """p(ids[t] | ids[:t]) for t = 1 … n-1, from one forward pass of the whole text."""
    with torch.no_grad():
        p = model(torch.tensor([ids[:-1]])).double().softmax(-1)[0]
    return [float(p[t - 1, ids[t]]) for t in range(1, len(ids))]


def test_a_component_knocked_out_on_a_text_changes_each_token_s_probability_as_computed_by_hand(char_data):
    from fatstudio.core.config import RunConfig
    from fatstudio.core.inference.loaded import LoadedModel
    from fatstudio.core.inspect.ablation import text_ablation

    corpus, tok = char_data
    model = tiny("gpt", vocab_size=tok.vocab_size)
    loaded = LoadedModel(model, tok, RunConfig())
    text = "the lazy fox"
    ids = tok.encode(text)
    got = text_ablation(loaded, ComponentName.parse("self/1/0"), text)
    assert got.tokens == tok.token_strings(ids) and got.before[0] is None and got.after[0] is None
    assert got.before[1:] == pytest.approx(_next_token_probs(model, ids), abs=1e-9)
    assert got.after[1:] == pytest.approx(_next_token_probs(_zeroed_copy(model, got.component), ids), abs=1e-9)
    assert max(abs(d) for d in got.delta[1:]) > 1e-3 and got.delta[0] is None
    assert got.csv().splitlines()[0] == "position,token,p_before,p_after,delta_p"
    assert got.csv().splitlines()[2].startswith("1,h,")

    data = build_dataset(corpus, tok, "next_token", 12, 0.2, 0.15, 0)
    ablator = Ablator(model, validation_batch(data, "next_token", 4, 2, 0, tok.pad_id))
    c = component(model, ComponentName.parse("mlp/0"))
    ablator.baseline(record=True)
    mean = ablator._outputs[c.name].mean(0)  # (T, d_e): no padding in next-token rows
    with replaced({c: lambda a: mean[:a.shape[1]].expand_as(a)}):
        by_hand = _next_token_probs(model, ids)
    got = text_ablation(loaded, ComponentName.parse("mlp/0"), text, "mean", ablator=ablator)
    assert got.after[1:] == pytest.approx(by_hand, abs=1e-9) and got.kind == "mean"
    with pytest.raises(ValueError, match="zero, mean"):
        text_ablation(loaded, ComponentName.parse("mlp/0"), text, "resample")
    with pytest.raises(ValueError, match="no component"):
        text_ablation(loaded, ComponentName.parse("self/5/0"), text)
