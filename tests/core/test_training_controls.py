"""Hands-on controls of a run (issue 11 item 5): one step at a time while paused (`Control.step_once`) and a
learning rate changed while training (`Control.set_lr`), recorded in metrics.jsonl."""
from __future__ import annotations

import threading

import pytest
from training_helpers import tiny_config

from fatstudio.core.runs.folder import Run
from fatstudio.core.training import Control, lr_at, train


def config(corpus, steps=40, **train_kw):
    return tiny_config(corpus, steps, **{**dict(eval_interval=1000, checkpoint_interval=1000, sample_tokens=0,
                                               lr=1e-3, min_lr=1e-4, lr_schedule="cosine"), **train_kw})


def test_step_once_runs_exactly_one_step_while_paused(text_file, tmp_path):
    control = Control()
    control.step_once()  # not paused: nothing to do
    assert not control.step_requested()
    events, paused_at, done_steps = [], [], []
    for e in train(config(text_file, steps=40), run_dir=tmp_path / "run", control=control):
        events.append(e)
        if e.kind == "steps":
            done_steps.extend(e.steps)
        if e.kind == "started":
            control.pause()  # before the first step
        elif e.kind == "paused":
            paused_at.append(e.step)
            # every step done so far was announced before Paused, and the metrics are on disk
            assert done_steps == list(range(1, e.step + 1))
            assert [r["step"] for r in Run.open(tmp_path / "run").metrics() if "train_loss" in r] == done_steps
            if len(paused_at) <= 3:
                control.step_once()
            else:
                control.resume()
    assert paused_at == [0, 1, 2, 3]
    kinds = [e.kind for e in events]
    first_resumed = kinds.index("resumed")
    between = events[kinds.index("paused"):first_resumed]
    # Paused, then per single step exactly one Steps event with one step, then Paused again — no Resumed
    assert [e.kind for e in between] == ["paused", "steps", "paused", "steps", "paused", "steps", "paused"]
    assert [e.steps for e in between if e.kind == "steps"] == [[1], [2], [3]]
    assert kinds.count("resumed") == 1 and kinds[-1] == "finished" and events[-1].step == 40
    assert done_steps == list(range(1, 41))


def test_step_once_on_a_pause_mid_run_and_resume_during_the_step(text_file, tmp_path):
    control = Control()
    kinds, paused_at = [], []
    for e in train(config(text_file, steps=200), run_dir=tmp_path / "run", control=control):
        kinds.append(e.kind)
        if e.kind == "steps" and e.step >= 5 and not paused_at:
            control.pause()
        elif e.kind == "paused":
            paused_at.append(e.step)
            if len(paused_at) == 1:
                control.step_once()
                control.resume()  # before the step is taken: resuming wins, the pause is over
            elif len(paused_at) == 2:
                control.stop()
    # whether or not the step was taken, every Paused is followed by a Resumed and the run stopped
    assert kinds.count("paused") == kinds.count("resumed") >= 1
    assert kinds[-1] == "finished"


def test_set_lr_overrides_the_schedule_and_none_returns_to_it(text_file, tmp_path):
    cfg = config(text_file, steps=60)
    control = Control()
    with pytest.raises(ValueError):
        control.set_lr(-1.0)
    with pytest.raises(ValueError):
        control.set_lr(float("nan"))
    marks: dict[str, int] = {}
    for e in train(cfg, run_dir=tmp_path / "run", control=control):
        if e.kind == "started":
            control.pause()
        elif e.kind == "paused":
            if "set" not in marks and e.step >= 10:
                control.set_lr(0.0123)  # while paused: from the next step on
                marks["set"] = e.step
            elif "set" in marks and "cleared" not in marks and e.step >= marks["set"] + 10:
                control.set_lr(None)
                marks["cleared"] = e.step
            if e.step < 30:
                control.step_once()
            else:
                control.resume()
    rows = {r["step"]: r for r in Run.open(tmp_path / "run").metrics() if "train_loss" in r}
    assert sorted(rows) == list(range(1, 61))
    s, c = marks["set"], marks["cleared"]
    for step, row in rows.items():  # row "step" k is the update at schedule index k - 1
        want = 0.0123 if s < step <= c else lr_at(step - 1, cfg.train)
        assert row["lr"] == pytest.approx(want), step


def test_set_lr_while_running_takes_effect_at_a_following_step(text_file, tmp_path):
    control = Control()
    seen: list[float] = []
    for e in train(config(text_file, steps=3000), run_dir=tmp_path / "run", control=control):
        if e.kind == "steps":
            seen.extend(e.lr)
            if e.step >= 20 and control.lr_override is None and 5e-5 not in seen:
                threading.Timer(0.0, control.set_lr, args=(5e-5,)).start()  # from another thread, as the GUI
            if 5e-5 in seen and e.lr[-1] == 5e-5:
                control.stop()
    rows = [r for r in Run.open(tmp_path / "run").metrics() if "train_loss" in r]
    lrs = [r["lr"] for r in rows]
    first = lrs.index(5e-5)
    assert first >= 20 and all(lr == 5e-5 for lr in lrs[first:])
    assert all(lr != 5e-5 for lr in lrs[:first])
