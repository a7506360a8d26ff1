"""Attention over training time: the probe's maps saved at every evaluation, read back equal (within float16)
to the model's own maps, the default probe of each task, and probes on resume."""
import json

import numpy as np
import pytest

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.inference.generation import attention_maps_for_ids
from fatstudio.core.inspect import probes
from fatstudio.core.inspect.probes import ProbeInput
from fatstudio.core.names import MapName
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import Evaluation, Probe, train

TINY = dict(l_max=16, L=2, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32)


def config(corpus, task="next_token", arch="gpt", steps=20, **train_kw):
    t = dict(steps=steps, batch_size=4, eval_interval=10, eval_iters=1, checkpoint_interval=1000, warmup=2,
             sample_tokens=0, device="cpu")
    return RunConfig(ModelConfig(arch=arch, **TINY), DataConfig(corpus=str(corpus), task=task),
                     TrainConfig(**{**t, **train_kw}))


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    return p


def test_probe_maps_saved_at_every_evaluation_and_equal_to_the_final_models(text_file, tmp_path):
    events = list(train(config(text_file, steps=25), run_dir=tmp_path / "run"))
    evals = [e.step for e in events if isinstance(e, Evaluation)]
    probe_events = [e for e in events if isinstance(e, Probe)]
    assert evals == [10, 20, 25] and [e.step for e in probe_events] == evals
    run = Run.open(tmp_path / "run")
    assert run.probe_steps() == evals
    assert all(e.path == str(probes.probe_path(run.path, e.step)) for e in probe_events)
    probe = run.probe_input()
    assert probe is not None and probe.text and json.loads((run.path / "meta.json").read_text())["probe"]
    loaded = run.load_model()
    ids, ctx = probe.encode(loaded.tokenizer, "gpt", "next_token", 16)
    want = attention_maps_for_ids(loaded.model, loaded.tokenizer, ids, ctx)
    got = run.load_probe(25)
    assert got.tokens == want.tokens and set(got.maps) == {MapName("self", 0), MapName("self", 1)}
    for name, A in want.maps.items():
        assert got.maps[name].dtype == np.float32 and got.maps[name].shape == A.shape
        np.testing.assert_allclose(got.maps[name], A, atol=1e-3)
    assert not np.allclose(run.load_probe(10).maps[MapName("self", 1)], got.maps[MapName("self", 1)])  # the heads changed
    with pytest.raises(probes.MissingProbe, match="saved steps: 10, 20, 25"):
        run.load_probe(15)


def test_a_probe_text_is_used_and_kept_on_resume(text_file, tmp_path):
    list(train(config(text_file, steps=10), run_dir=tmp_path / "run", probe="the lazy dog"))
    run = Run.open(tmp_path / "run")
    assert run.probe_input() == probes.ProbeInput("the lazy dog")
    assert run.load_probe(10).tokens == list("the lazy dog")
    cfg = run.config.with_overrides(["train.steps=20"])
    list(train(cfg, run_dir=tmp_path / "run", resume=True))
    run = Run.open(tmp_path / "run")
    assert run.probe_steps() == [10, 20] and run.load_probe(20).tokens == list("the lazy dog")
    with pytest.raises(ValueError, match="probe input"):
        list(train(config(text_file, steps=10), run_dir=tmp_path / "run2", probe="ÅÅÅ unknown"))


@pytest.mark.parametrize("arch,task,corpus,kinds", [
    ("bert", "masked_lm", None, {"self"}),
    ("edt", "seq2seq", "copy", {"enc", "dec", "cross"}),
    ("bert", "classification", "brackets", {"self"}),
])
def test_default_probe_per_task(arch, task, corpus, kinds, text_file, tmp_path):
    cfg = config(corpus or text_file, task=task, arch=arch, steps=10)
    events = list(train(cfg, run_dir=tmp_path / "run"))
    assert [e.step for e in events if isinstance(e, Probe)] == [10]
    run = Run.open(tmp_path / "run")
    probe = run.probe_input()
    maps = run.load_probe(10)
    assert {k.kind for k in maps.maps} == kinds
    if task == "masked_lm":
        assert "[MASK]" in probe.text
    if task == "seq2seq":
        assert probe.source and maps.context_tokens
    if task == "classification":
        assert probe.label in Run.open(tmp_path / "run").meta["class_names"]


def test_probe_files_after_a_checkpoint_go_when_resuming(text_file, tmp_path):
    list(train(config(text_file, steps=20, checkpoint_interval=10), run_dir=tmp_path / "run"))
    run = Run.open(tmp_path / "run")
    run.truncate_after(10)
    assert run.probe_steps() == [10]


# ---- head scores over training time --------------------------------------------------------------------
def test_each_evaluation_saves_that_steps_head_scores(text_file, tmp_path):
    """The scores saved with each step's maps are that step's: prev/diag/sink of its maps, induction of its
    model; the final step's equal `head_scores` of the final checkpoint's model; the event carries them."""
    from fatstudio.core.inspect.head_scores import SCORES, head_scores, text_scores

    events = list(train(config(text_file, steps=25, lr=1e-2), run_dir=tmp_path / "run"))
    probe_events = [e for e in events if isinstance(e, Probe)]
    assert [e.step for e in probe_events] == [10, 20, 25]
    for ev in probe_events:
        saved = probes.saved_scores(ev.path)
        assert saved is not None and saved.to_dict() == ev.scores
        assert saved.score_names() == list(SCORES) and saved.names() == [MapName("self", 0), MapName("self", 1)]
        for name, per in text_scores(probes.load_probe_file(ev.path)).items():  # the file's float16 maps
            for score, v in per.items():
                np.testing.assert_allclose(saved.get(name, score), v, atol=2e-3)
    run = Run.open(tmp_path / "run")
    loaded = run.load_model()
    ids, ctx = run.probe_input().encode(loaded.tokenizer, "gpt", "next_token", 16)
    want = head_scores(loaded.model, loaded.tokenizer, attention_maps_for_ids(loaded.model, loaded.tokenizer, ids, ctx))
    final, first = probes.saved_scores(probe_events[-1].path), probes.saved_scores(probe_events[0].path)
    assert final.n == want.n == 7  # (l_max - 1) // 2 random tokens, twice
    for name in want.names():
        for score in SCORES:
            np.testing.assert_allclose(final.get(name, score), want.get(name, score), atol=2e-6)
    self1 = MapName("self", 1)
    assert np.abs(first.get(self1, "induction") - final.get(self1, "induction")).max() > 1e-4  # a past model


def test_measuring_the_scores_keeps_the_model_training_and_gradient_free():
    from fatstudio.core.data.tokenization import train_tokenizer

    tok = train_tokenizer("char", ["the quick brown fox"])
    for l_max, names in ((16, ["prev", "diag", "sink", "induction"]), (2, ["prev", "diag", "sink"])):
        model = build_model(ModelConfig(vocab_size=tok.vocab_size, **{**TINY, "l_max": l_max})).train()
        maps = probes.probe_maps(model, tok, tok.encode("th"), None)
        scores = probes.measure_scores(model, tok, maps)
        assert model.training and all(p.grad is None for p in model.parameters())
        assert scores.score_names() == names  # l_max = 2 cannot read bos + r + r: no induction


def test_probe_files_without_scores_still_load_and_the_history_mixes_them(tmp_path):
    from safetensors.numpy import save

    from fatstudio.core.inference.attention_maps import AttentionMaps
    from fatstudio.core.inspect.head_scores import HeadScores

    T, self0 = 4, MapName("self", 0)
    causal = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    maps = AttentionMaps(list("abcd"), None, {self0: np.stack([causal, np.eye(T)])})
    old = probes.save_probe(tmp_path, 5, maps)  # as written before scores were saved
    saved = HeadScores({self0: {"prev": np.array([0.1, 0.2]), "induction": np.array([0.7, np.nan])}}, n=3)
    new = probes.save_probe(tmp_path, 10, maps, scores=saved)
    assert probes.saved_scores(old) is None and probes.load_probe_file(old).tokens == list("abcd")
    from_maps = probes.probe_scores(old)  # what the maps give: no induction
    assert from_maps.score_names() == ["prev", "diag", "sink"]
    np.testing.assert_allclose(from_maps.get(self0, "diag"), [np.mean(1 / np.arange(1, T + 1)), 1.0], atol=1e-3)
    got = probes.probe_scores(new)
    assert got.n == 3 and got.get(self0, "prev").tolist() == [0.1, 0.2] and got.get(self0, "diag") is None
    assert got.get(self0, "induction")[0] == 0.7 and np.isnan(got.get(self0, "induction")[1])
    history = probes.score_history(tmp_path)
    assert list(history) == [5, 10] and probes.score_history(probes.list_probes(tmp_path)).keys() == history.keys()
    steps, values = probes.score_series(history, self0, "induction")
    assert steps.tolist() == [10] and values.shape == (1, 2)
    steps, values = probes.score_series(history, self0, "prev")
    assert steps.tolist() == [5, 10] and values[1].tolist() == [0.1, 0.2]
    assert probes.score_series(history, MapName("self", 9), "prev")[0].size == 0
    # an unreadable file is left out of the history; unreadable scores are an error in words
    (tmp_path / probes.PROBES / "step-00000020.safetensors").write_bytes(b"not a probe file")
    bad = tmp_path / probes.PROBES / "step-00000030.safetensors"
    bad.write_bytes(save({"self/0": np.zeros((1, 2, 2), np.float16)}, metadata={"tokens": "[]", "scores": "{oops"}))
    assert list(probes.score_history(tmp_path)) == [5, 10]
    with pytest.raises(ValueError, match="head scores cannot be read"):
        probes.saved_scores(bad)


def test_a_probe_asked_for_in_words():
    assert ProbeInput.asked("", None, "gpt") is None and ProbeInput.asked(None, "", "edt") is None
    assert ProbeInput.asked("abc", None, "bert") == ProbeInput("abc")
    assert ProbeInput.asked("cba", "abc", "edt") == ProbeInput("cba", "abc")
    with pytest.raises(ValueError, match="both a source and a target"):
        ProbeInput.asked("cba", "", "edt")
    with pytest.raises(ValueError, match=r"encoder-decoder's \(model.arch = edt\), not a gpt model's"):
        ProbeInput.asked("abc", "x", "gpt")
