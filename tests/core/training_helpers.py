"""A tiny model and run configuration that the trainer's tests share, and the check that resuming repeats a run."""
from collections.abc import Callable
from pathlib import Path

import torch

from fatstudio import ModelConfig
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import Control, train

TINY = dict(l_max=16, L=1, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32)


def tiny_config(corpus, steps=30, **train_kw) -> RunConfig:
    """A run of the TINY model on ``corpus`` for ``steps`` steps, evaluating and checkpointing every 10."""
    t = dict(steps=steps, batch_size=4, eval_interval=10, eval_iters=2, checkpoint_interval=10, warmup=2,
             sample_tokens=8, device="cpu")
    return RunConfig(ModelConfig(**TINY), DataConfig(corpus=str(corpus)), TrainConfig(**{**t, **train_kw}))


def trained_run(tmp_path_factory, steps: int) -> Path:
    """A finished run of `tiny_config` for ``steps`` steps on a line of English written 200 times (for a module's
    fixture)."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 200, encoding="utf-8")
    run = tmp_path_factory.mktemp("trained") / "run"
    assert list(train(tiny_config(corpus, steps=steps), run_dir=run))[-1].status == "finished"
    return run


def assert_resuming_repeats(cfg: RunConfig, tmp: Path, stopped: Callable[[Run], object] = lambda run: None) -> dict:
    """Train ``cfg`` whole (``tmp/whole``), and stopped at its step-10 checkpoint then resumed (``tmp/split``;
    ``stopped`` looks at the run in between); assert the two give the same losses, gradient norms, learning rates,
    evaluations and final weights, bit for bit. Returns the final weights."""
    whole = list(train(cfg, run_dir=tmp / "whole"))
    assert whole[-1].status == "finished"
    control = Control()
    for e in train(cfg, run_dir=tmp / "split", control=control):
        if e.kind == "checkpoint" and e.step == 10:
            control.stop()
    assert Run.open(tmp / "split").meta["checkpoint_step"] == 10
    stopped(Run.open(tmp / "split"))
    resumed = list(train(cfg, run_dir=tmp / "split", resume=True))
    assert next(e for e in resumed if e.kind == "started").start_step == 10 and resumed[-1].status == "finished"
    rows = {name: Run.open(tmp / name).metrics() for name in ("whole", "split")}
    for key in ("train_loss", "grad_norm", "lr"):
        assert [r[key] for r in rows["split"]] == [r[key] for r in rows["whole"]], key
    assert [(r["step"], r["val_loss"]) for r in rows["split"] if "val_loss" in r] == \
        [(r["step"], r["val_loss"]) for r in rows["whole"] if "val_loss" in r]
    a = Run.open(tmp / "whole").load_model().model.state_dict()
    b = Run.open(tmp / "split").load_model().model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    return a
