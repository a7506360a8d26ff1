"""Attention over training time: the probe's maps saved at every evaluation, read back equal (within float16)
to the model's own maps, the default probe of each task, and probes on resume."""
import json

import numpy as np
import pytest

from fatstudio import ModelConfig
from fatstudio.core import probes
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.inference import attention_maps_for_ids
from fatstudio.core.runs import Run
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
    assert got.tokens == want.tokens and set(got.maps) == {"self/0", "self/1"}
    for name, A in want.maps.items():
        assert got.maps[name].dtype == np.float32 and got.maps[name].shape == A.shape
        np.testing.assert_allclose(got.maps[name], A, atol=1e-3)
    assert not np.allclose(run.load_probe(10).maps["self/1"], got.maps["self/1"])  # the heads changed
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
    assert {k.split("/")[0] for k in maps.maps} == kinds
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
