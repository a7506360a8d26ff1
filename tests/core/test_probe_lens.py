"""The logit lens and attribution saved with the probe maps at each evaluation: equal to the lens and the
attribution recomputed on that step's weights, for every architecture; older probe files still load."""
import numpy as np
import pytest
import torch
from interventions_helpers import ARCHS, inputs, tiny
from test_probes import TINY, config, text_file  # noqa: F401 (a fixture)

from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.inspect import probes
from fatstudio.core.inspect.lens import attribute, lens, lens_probs
from fatstudio.core.inspect.probe_lens import ATTRIBUTED, measure
from fatstudio.core.names import MapName
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import train


def test_the_saved_lens_is_the_lens_of_that_steps_weights(text_file, tmp_path):  # noqa: F811
    list(train(config(text_file, steps=25), run_dir=tmp_path / "run", probe="the quick brown"))
    run = Run.open(tmp_path / "run")
    saved = probes.load_probe_lens(probes.probe_path(run.path, 25))
    loaded = run.load_model()
    want = lens(loaded.model, loaded.tokenizer, "the quick brown")
    assert saved is not None and saved.tokens == want.tokens and saved.predicts_next and saved.refused is None
    assert saved.top_tokens == want.top_tokens and saved.top_ids.shape == (TINY["L"] + 1, len(want.tokens))
    np.testing.assert_allclose(saved.top_probs, want.top_probs, atol=1e-6)
    a = saved.attribution
    T = len(want.tokens)
    assert a is not None and a.positions.tolist() == list(range(T - ATTRIBUTED, T))
    ids = loaded.tokenizer.encode("the quick brown")
    assert a.targets[:-1].tolist() == ids[T - ATTRIBUTED + 1:] and a.observed.tolist() == [True] * (ATTRIBUTED - 1) + [False]
    x = torch.tensor([ids])
    assert a.targets[-1] == lens_probs(loaded.model, x)[1][-1].argmax()  # the last position: the model's own top token
    for i, t in enumerate(a.positions.tolist()):
        got = attribute(loaded.model, x, t, int(a.targets[i]))
        assert a.logits[i] == pytest.approx(got.logit, abs=1e-4)
        assert dict(zip(a.names, a.parts[i].tolist())) == pytest.approx(got.parts, abs=1e-4)
        assert a.parts[i].sum() == pytest.approx(a.logits[i], abs=1e-3)
    assert a.row(0) is None and a.row(T - 1) == ATTRIBUTED - 1
    earlier = probes.load_probe_lens(probes.probe_path(run.path, 10))
    assert earlier is not None and not np.allclose(earlier.top_probs, saved.top_probs)  # it changed over training
    assert set(run.load_probe(25).maps) == {MapName("self", 0), MapName("self", 1)}  # the lens's arrays are no maps


@pytest.mark.parametrize("arch,task,corpus", [("bert", "masked_lm", None), ("edt", "seq2seq", "copy"),
                                              ("bert", "classification", "brackets")])
def test_every_architecture_saves_its_lens_and_attribution(arch, task, corpus, text_file, tmp_path):  # noqa: F811
    list(train(config(corpus or text_file, task=task, arch=arch, steps=10), run_dir=tmp_path / "run"))
    run = Run.open(tmp_path / "run")
    saved = probes.load_probe_lens(probes.probe_path(run.path, 10))
    if task == "classification":
        assert saved is None  # a classifier's output is its classes: no lens
        return
    loaded, probe = run.load_model(), run.probe_input()
    ids, ctx = probe.encode(loaded.tokenizer, arch, task, TINY["l_max"])
    probs, _ = lens_probs(loaded.model, torch.tensor([ids]), None if ctx is None else torch.tensor([ctx]))
    L = TINY["L_dec"] if arch == "edt" else TINY["L"]
    assert saved is not None and saved.top_ids.shape == (L + 1, len(ids))
    np.testing.assert_array_equal(saved.top_ids, probs.argmax(-1).numpy())
    np.testing.assert_allclose(saved.top_probs, probs.max(-1).values.numpy(), atol=1e-6)
    assert saved.predicts_next == (arch != "bert") and (saved.source_tokens is not None) == (arch == "edt")
    a = saved.attribution  # every architecture is attributed: BERT through its frozen norms, an edt given its source
    assert a is not None and saved.refused is None
    z = None if ctx is None else torch.tensor([ctx])
    for i, t in enumerate(a.positions.tolist()):
        got = attribute(loaded.model, torch.tensor([ids]), t, int(a.targets[i]), z)
        assert a.logits[i] == pytest.approx(got.logit, abs=1e-4)
        assert a.parts[i].sum() == pytest.approx(a.logits[i], abs=1e-3)


def test_probe_files_without_a_lens_still_load(tmp_path):
    A = np.tile(np.eye(4, dtype=np.float32), (2, 1, 1))
    path = probes.save_probe(tmp_path, 5, AttentionMaps(list("abcd"), None, {MapName("self", 0): A}))
    assert probes.load_probe_lens(path) is None
    assert set(probes.load_probe_file(path).maps) == {MapName("self", 0)}


def test_measuring_every_position_of_a_text():
    from fatstudio import ModelConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.model import build_model

    tok = train_tokenizer("char", ["hello world"])
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="gpt", vocab_size=tok.vocab_size, **{k: v for k, v in TINY.items()
                                                                             if k not in ("L_enc", "L_dec")}))
    full = measure(model, tok, tok.encode("hello world"), attributed=None)
    assert full.attribution is not None and full.attribution.positions.tolist() == list(range(11))
    rows = full.csv_rows()
    assert rows[0] == ["row", *"hello world"] and [r[0] for r in rows[1:]] == ["embedding", "after layer 1", "output"]


@pytest.mark.parametrize("name", list(ARCHS))
def test_the_attribution_of_every_position_takes_one_forward_pass_and_gives_each_ones_own(name):
    """A text's lens attributes its last 64 positions (the Attention panel's): one forward pass for them all (the lens's
    own and the attribution's: 2, not one per position, which took 7 s for 18 tokens of a GPT-2-sized model), the
    same numbers as attributing each position alone."""
    model = tiny(name)
    x, kw = inputs(model, B=1, T=6)
    ctx = kw["context"][0].tolist() if "context" in kw else None
    forwards = []
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    saved = measure(model, _Strings(), x[0].tolist(), ctx, attributed=None)
    handle.remove()
    a = saved.attribution
    assert len(forwards) == 2 and a is not None and a.positions.tolist() == list(range(6))
    for row, (t, target) in enumerate(zip(a.positions.tolist(), a.targets.tolist())):
        alone = attribute(model, x, t, target, kw.get("context"))
        assert a.logits[row] == alone.logit and a.parts[row].tolist() == [alone.parts[n] for n in a.names]


@pytest.mark.parametrize("name", [*ARCHS, "gpt-swiglu-gqa-rope"])
def test_measure_reads_every_architecture(name):
    """The last row is the model's own top token; the attribution sums to the logit."""
    over = dict(activation="swiglu", H_kv=1, positions="rope") if name == "gpt-swiglu-gqa-rope" else {}
    model = tiny("gpt" if over else name, **over)
    x, kw = inputs(model, B=1, T=6)
    ctx = kw["context"][0].tolist() if "context" in kw else None
    saved = measure(model, _Strings(), x[0].tolist(), ctx, attributed=3)
    out = model(x, **kw)[0]
    np.testing.assert_array_equal(saved.top_ids[-1], out.argmax(-1).numpy())
    a = saved.attribution
    assert a is not None and saved.refused is None  # every architecture is attributed
    shift = 0 if name == "bert" else 1  # BERT's row t reads the token at t, the others' the token after it
    expected = [x[0, t + shift].item() for t in (3, 4, 5) if t + shift < 6]
    assert a.positions.tolist() == [3, 4, 5] and a.targets[:len(expected)].tolist() == expected
    np.testing.assert_allclose(a.parts.sum(1), a.logits, atol=1e-4)
    np.testing.assert_allclose(a.logits[-1], out[5, a.targets[-1]].item(), atol=1e-9)


class _Strings:
    """A tokenizer's token_strings, for ids without a tokenizer."""

    def token_strings(self, ids):
        return [f"t{i}" for i in ids]


def _with_lens_header(path, change):
    """``path`` rewritten with ``change(name, entry)`` applied to each ``lens:`` tensor's header entry."""
    import json
    import struct

    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    for name, entry in header.items():
        if name.startswith("lens:"):
            change(name, entry)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def _retype_logits(name, entry):
    if name == "lens:logits":  # float32 read as bfloat16: the same bytes, a type numpy has not
        entry.update(dtype="BF16", shape=[2 * entry["shape"][0]])


def _flatten_top_ids(name, entry):
    if name == "lens:top_ids":  # the same bytes, another shape
        entry["shape"] = [entry["shape"][0] * entry["shape"][1]]


@pytest.mark.parametrize("damage, words", [
    (lambda p: p.write_bytes(p.read_bytes()[:-7]), "is damaged or not a probe file of fatstudio"),
    (lambda p: _with_lens_header(p, _retype_logits), "is damaged or not a probe file of fatstudio"),
    (lambda p: _with_lens_header(p, _flatten_top_ids), "its logit lens is damaged: lens:top_ids is 33, not 3×11"),
])
def test_a_damaged_lens_is_refused_in_one_line_naming_the_file(tmp_path, damage, words):
    from fatstudio import ModelConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.model import build_model

    tok = train_tokenizer("char", ["hello world"])
    model = build_model(ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=16, L=2, H=2, d_e=16, d_mlp=32))
    saved = measure(model, tok, tok.encode("hello world"), attributed=3)
    A = np.tile(np.eye(11, dtype=np.float32), (2, 1, 1))
    path = probes.save_probe(tmp_path, 5, AttentionMaps(list("hello world"), None, {MapName("self", 0): A}), lens=saved)
    assert probes.load_probe_lens(path).top_tokens == saved.top_tokens
    damage(path)
    with pytest.raises(ValueError) as e:
        probes.load_probe_lens(path)
    message = str(e.value)
    assert message.startswith(str(path)) and words in message and "\n" not in message, message
