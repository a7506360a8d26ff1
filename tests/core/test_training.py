"""The trainer: schedule, optimizer groups, the losses against the reference (Algorithms 11-13), the event
stream, stop/pause/snapshot, a diverging loss, checkpoints and resume, and that each task learns."""
import json
import math
import threading
from dataclasses import replace

import pytest
import torch
from training_helpers import TINY
from training_helpers import tiny_config as config

from fatstudio import ModelConfig, build_model
from fatstudio.core import training
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.paper.reference import ReferenceTransformer, d_loss, e_loss, ed_loss
from fatstudio.core.runs.folder import Run, list_runs
from fatstudio.core.training import Control, lr_at, make_optimizer, task_loss, train


def run_all(cfg, **kw):
    return list(train(cfg, **kw))


def test_a_warm_up_as_long_as_the_run_is_said_and_the_schedule_never_reaches_lr():
    t = TrainConfig(steps=100, warmup=100, lr=1e-3)
    assert max(lr_at(s, t) for s in range(t.steps)) < t.lr
    assert t.warmup_note() == ("The warm-up (100 steps) is as long as training (100 steps): η rises every step and "
                               "never reaches 0.001.")
    assert TrainConfig(steps=101, warmup=100).warmup_note() == ""


def test_lr_schedule_warms_up_then_decays_to_min_lr():
    t = TrainConfig(steps=1000, warmup=100, lr=1e-3, min_lr=1e-4)
    lrs = [lr_at(s, t) for s in range(1001)]
    assert all(a < b for a, b in zip(lrs[:100], lrs[1:101]))  # warm-up rises
    assert lrs[100] == pytest.approx(1e-3)
    assert lrs[1000] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[100:], lrs[101:]))  # cosine falls
    assert lr_at(500, TrainConfig(steps=1000, warmup=100, lr_schedule="constant")) == pytest.approx(1e-3)


def test_wsd_holds_lr_then_settles_over_the_last_fifth():
    """"wsd": warm-up, η until the last 20% of the steps, then a cosine down to min_lr at the last step."""
    t = TrainConfig(steps=1000, warmup=50, lr=2e-3, min_lr=1e-4, lr_schedule="wsd")
    lrs = [lr_at(s, t) for s in range(1001)]
    assert lrs[:50] == [lr_at(s, replace(t, lr_schedule="constant")) for s in range(50)]  # the same warm-up
    assert all(lr == pytest.approx(2e-3) for lr in lrs[50:801])
    assert all(a > b for a, b in zip(lrs[800:], lrs[801:]))  # then falls every step
    assert lrs[900] == pytest.approx((2e-3 + 1e-4) / 2) and lrs[1000] == pytest.approx(1e-4)


def test_weight_decay_only_on_matrices_and_sgd_is_plain():
    model = build_model(ModelConfig(**TINY, vocab_size=10))
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and all(p.dim() >= 2 for p in decayed["params"])
    assert plain["weight_decay"] == 0.0 and all(p.dim() < 2 for p in plain["params"])
    sgd = make_optimizer(model, TrainConfig(optimizer="sgd", weight_decay=0.0, lr=0.5))
    p = next(model.parameters())
    before = p.detach().clone()
    p.grad = torch.ones_like(p)
    sgd.step()
    assert torch.allclose(p.detach(), before - 0.5)  # θ ← θ - η∇loss


def _random(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1 if p.dim() == 1 else 0))


@pytest.mark.parametrize("task", ["next_token", "masked_lm", "seq2seq"])
def test_losses_equal_reference(task):
    """The trainer's mean cross-entropy × counted positions = the paper's summed loss (Alg 11, 12, 13)."""
    arch = {"next_token": "gpt", "masked_lm": "bert", "seq2seq": "edt"}[task]
    cfg = ModelConfig(arch=arch, vocab_size=9, **TINY)
    torch.manual_seed(0)
    model = build_model(cfg).double().eval()
    _random(model)
    ref = ReferenceTransformer(cfg, model.state_dict())
    x = torch.randint(0, 9, (1, 8))
    if task == "next_token":
        loss, _, _ = task_loss(model, {"x": x[:, :-1], "y": x[:, 1:]}, task)
        expected, n = d_loss(ref, x[0].tolist()), 7
    elif task == "masked_lm":
        masked = [1, 4, 6]
        xm = x.clone()
        xm[0, masked] = 6  # the mask token
        y = torch.full_like(x, -100)
        y[0, masked] = x[0, masked]
        loss, _, _ = task_loss(model, {"x": xm, "y": y, "x_pad_mask": torch.ones_like(x, dtype=torch.bool)}, task)
        expected, n = e_loss(ref, xm[0].tolist(), x[0].tolist(), masked), 3
    else:
        z = torch.randint(0, 9, (1, 5))
        ones = lambda t: torch.ones_like(t, dtype=torch.bool)
        loss, _, _ = task_loss(model, {"z": z, "z_pad_mask": ones(z), "x": x[:, :-1], "x_pad_mask": ones(x[:, :-1]),
                                       "y": x[:, 1:]}, task)
        expected, n = ed_loss(ref, z[0].tolist(), x[0].tolist()), 7
    assert loss.item() * n == pytest.approx(expected, abs=1e-9)


def test_event_stream_and_run_folder(text_file, tmp_path):
    events = run_all(config(text_file), run_dir=tmp_path / "run")
    kinds = [e.kind for e in events]
    assert kinds[0] == "prepare" and "started" in kinds and kinds[-1] == "finished"
    assert events[-1].status == "finished"
    steps = [s for e in events if e.kind == "steps" for s in e.steps]
    assert steps == list(range(1, 31))  # every step reported exactly once, in batches
    for e in events:  # plain events: numbers and strings, never tensors
        for v in vars(e).values():
            assert not isinstance(v, torch.Tensor)
    evals = [e for e in events if e.kind == "evaluation"]
    assert [e.step for e in evals] == [10, 20, 30]
    assert sum(e.kind == "sample" for e in events) == 3
    run = Run.open(tmp_path / "run")
    rows = run.metrics()
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert all({"train_loss", "lr", "tokens_per_s", "grad_norm"} <= set(r) for r in rows)
    assert [r["step"] for r in rows if "val_loss" in r] == [10, 20, 30]
    assert [r["eval_train_loss"] for r in rows if "val_loss" in r] == [e.eval_train_loss for e in evals]
    windows = [e for e in events if e.kind == "steps"]  # each one emission window, its throughput measured once
    assert [r["step"] for r in rows if r.get("window_end")] == [e.steps[-1] for e in windows]
    assert [r["tokens_per_s"] for r in rows] == [e.tokens_per_s for e in windows for _ in e.steps]
    assert run.meta["status"] == "finished" and run.meta["step"] == 30
    for f in ("config.json", "meta.json", "tokenizer.json", "metrics.jsonl", "samples.jsonl", "model.safetensors"):
        assert (run.path / f).exists(), f
    assert not list(run.path.glob("*.tmp"))  # no half-written files left behind
    assert json.loads((run.path / "config.json").read_text())["model"]["vocab_size"] > 4
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]


def test_metrics_written_before_window_ends_were_marked_read_the_same(text_file, tmp_path):
    """Runs of the previous format gave every row its window's tokens_per_s and marked no window ends."""
    run_all(config(text_file, steps=20), run_dir=tmp_path / "run")
    path = tmp_path / "run"
    rows = Run.open(path).metrics()
    assert sum(bool(r.get("window_end")) for r in rows) >= 2
    old = [{k: v for k, v in r.items() if k != "window_end"} for r in rows]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    meta = json.loads((path / "meta.json").read_text())
    del meta["metrics_window_ends"]
    (path / "meta.json").write_text(json.dumps(meta))
    assert Run.open(path).metrics() == rows


def test_stop_checkpoints_and_marks_stopped(text_file, tmp_path):
    control = Control()
    events = []
    for e in train(config(text_file, steps=1000), run_dir=tmp_path / "run", control=control):
        events.append(e)
        if e.kind == "steps" and e.step >= 3:
            control.stop()
    assert events[-1].status == "stopped"
    run = Run.open(tmp_path / "run")
    assert run.meta["status"] == "stopped" and run.has_checkpoint
    assert run.meta["checkpoint_step"] == events[-1].step < 1000


def test_pause_and_resume_between_steps(text_file, tmp_path):
    control = Control()
    kinds = []
    for e in train(config(text_file, steps=20), run_dir=tmp_path / "run", control=control):
        kinds.append(e.kind)
        if e.kind == "started":
            control.pause()
            threading.Timer(0.3, control.resume).start()
    assert kinds.index("paused") < kinds.index("resumed") < kinds.index("finished")


def test_snapshot_is_a_copy_on_cpu(text_file, tmp_path):
    control = Control()
    snap = None
    for e in train(config(text_file, steps=20), run_dir=tmp_path / "run", control=control):
        if e.kind == "steps" and snap is None:
            control.request_snapshot()
            snap = False
        if e.kind == "snapshot":
            snap = control.take_snapshot()
            assert snap.step == e.step and not snap.model.training
    assert snap and snap.tokenizer.vocab_size == snap.model.config.vocab_size


def test_non_finite_loss_stops_and_keeps_last_checkpoint(text_file, tmp_path, monkeypatch):
    real = training.task_loss
    calls = {"n": 0}

    def exploding(model, batch, task):
        loss, logits, y = real(model, batch, task)
        calls["n"] += model.training
        return (loss * math.nan if model.training and calls["n"] >= 14 else loss), logits, y

    monkeypatch.setattr(training.loss, "task_loss", exploding)
    events = run_all(config(text_file, steps=30), run_dir=tmp_path / "run")
    end = events[-1]
    assert end.status == "failed" and "nan" in end.message and "step 10" in end.message
    run = Run.open(tmp_path / "run")
    assert run.meta["status"] == "failed" and run.meta["checkpoint_step"] == 10
    loaded = run.load_model()
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())


def test_resume_continues_from_the_checkpoint(text_file, tmp_path):
    first = run_all(config(text_file, steps=20), run_dir=tmp_path / "run")
    assert first[-1].step == 20
    run = Run.open(tmp_path / "run")
    again = run_all(run.config.with_overrides(["train.steps=35"]), run_dir=run.path, resume=True)
    started = next(e for e in again if e.kind == "started")
    assert started.start_step == 20 and again[-1].step == 35
    assert [r["step"] for r in Run.open(run.path).metrics()] == list(range(1, 36))


def test_bad_inputs_raise_clear_errors(tmp_path, text_file):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        run_all(config(empty))
    with pytest.raises(ValueError, match="fp16"):
        run_all(config(text_file, precision="fp16"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        run_all(config(text_file), run_dir=tmp_path / "taken")
    with pytest.raises(ValueError, match="not a fatstudio run"):
        run_all(config(text_file), run_dir=tmp_path / "nothing", resume=True)


def test_list_runs_skips_foreign_folders(text_file, tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path / "runs"))
    run_all(config(text_file, steps=10))
    (tmp_path / "runs" / "junk").mkdir()
    (tmp_path / "runs" / "junk" / "config.json").write_text("{not json")
    runs = list_runs()
    assert len(runs) == 1 and runs[0].meta["status"] == "finished"


def test_bf16_autocast_trains_on_cpu(text_file, tmp_path):
    events = run_all(config(text_file, steps=6, precision="bf16", eval_interval=6), run_dir=tmp_path / "run")
    assert events[-1].status == "finished"
    assert all(math.isfinite(l) for e in events if e.kind == "steps" for l in e.train_loss)


def test_no_validation_split_trains_and_samples_without_evaluations(text_file, tmp_path):
    cfg = config(text_file, steps=10).with_overrides(["data.val_fraction=0"])
    events = run_all(cfg, run_dir=tmp_path / "run")
    assert events[-1].status == "finished"
    assert not any(e.kind == "evaluation" for e in events) and any(e.kind == "sample" for e in events)


def test_unexpected_error_marks_the_run_failed(text_file, tmp_path, monkeypatch):
    def broken(model, batch, task):
        raise RuntimeError("boom")

    monkeypatch.setattr(training.loss, "task_loss", broken)
    with pytest.raises(RuntimeError, match="boom"):
        run_all(config(text_file), run_dir=tmp_path / "run")
    assert Run.open(tmp_path / "run").meta["status"] == "failed"


def test_snapshot_while_paused(text_file, tmp_path):
    control = Control()
    kinds = []
    for e in train(config(text_file, steps=10), run_dir=tmp_path / "run", control=control):
        kinds.append(e.kind)
        if e.kind == "started":
            control.pause()
            control.request_snapshot()
        if e.kind == "snapshot":
            assert control.take_snapshot() is not None
            control.resume()
    assert kinds.index("paused") < kinds.index("snapshot") < kinds.index("resumed")


def test_prepared_corpus_and_tokenizer_are_reused_only_for_the_same_settings(text_file, tmp_path, monkeypatch):
    from fatstudio.core.data import corpora as data
    from fatstudio.core.data import tokenization

    cfg = config(text_file, steps=4)
    d = cfg.data
    corpus = data.load_corpus(d.corpus, d.task)
    tok = tokenization.train_tokenizer(d.tokenizer, corpus.texts(), d.vocab_size)
    prepared = data.Prepared(d.corpus, d.task, d.tokenizer, d.vocab_size, 0, corpus, tok)

    calls = []
    monkeypatch.setattr(data, "load_corpus", lambda *a, **k: calls.append("load") or corpus)
    monkeypatch.setattr(tokenization, "train_tokenizer", lambda *a, **k: calls.append("tokenizer") or tok)
    run_all(cfg, run_dir=tmp_path / "reused", prepared=prepared)
    assert calls == []  # a file corpus does not depend on the seed: 0 serves train.seed = 1337
    assert Run.open(tmp_path / "reused").load_tokenizer().vocab_size == tok.vocab_size

    other = RunConfig(cfg.model, DataConfig(corpus=str(text_file), tokenizer="word"), cfg.train)
    run_all(other, run_dir=tmp_path / "other", prepared=prepared)
    assert calls == ["load", "tokenizer"]  # made for other settings: ignored


def test_prepared_synthetic_builtin_must_match_the_seed():
    from fatstudio.core.data import corpora as data

    corpus = data.load_corpus("reverse", "next_token", seed=0)
    prepared = data.Prepared("reverse", "next_token", "char", 256, 0, corpus, None)
    assert prepared.serves("reverse", "next_token", "char", 256, seed=0)
    assert not prepared.serves("reverse", "next_token", "char", 256, seed=1)  # other examples
    assert not prepared.serves("reverse", "seq2seq", "char", 256, seed=0)
    assert data.load_corpus("reverse", "next_token", seed=1).text != corpus.text
