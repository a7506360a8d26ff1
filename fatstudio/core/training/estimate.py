"""A measured estimate of a run's time before it starts: a few real steps of the settings on their device.

`estimate` prepares the data as training would (the corpus, the tokenizer and the dataset, or the ones the
GUI's corpus preview made), builds the model and optimizer exactly as the trainer does (a `trainer.Trainer`),
then times ``WARMUP_STEPS`` untimed and ``TIMED_STEPS`` timed optimisation steps (the median, read after the
loss reached the host, so a GPU's queue is included), one evaluation (``eval_iters`` batches of each split)
and one sample. The run's time is then

    steps · step + evaluations · (evaluation + sample),

with an evaluation every ``eval_interval`` steps and at the last. Checkpoints, the probe's maps and head
scores of each evaluation (a few milliseconds) and the start-up are left out (a checkpoint writes a few
files; start-up is what the estimate itself just went through). With
``train.compile`` the steps are timed eagerly: compiling takes longer to start and its steps may be faster.
Nothing is written: no run folder, no files.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import ResolvedPrecision, RunConfig
from ..data.corpora import Prepared
from ..device import resolve_device, resolve_precision
from ..memory import check_fits
from .loss import evaluate
from .preparation import prepare
from .sample import make_sample
from .trainer import Trainer

WARMUP_STEPS = 2  # untimed: the first steps allocate and pick kernels
TIMED_STEPS = 5


@dataclass(frozen=True)
class Estimate:
    """The measured times (seconds) and what they add up to for ``steps`` steps on ``device``."""

    steps: int
    device: str
    precision: ResolvedPrecision
    step_s: float  # one optimisation step, the median of the timed ones
    evaluation_s: float  # one evaluation and its sample
    evaluations: int
    total_s: float

    def describe(self) -> str:
        """One line, e.g. "2000 steps ≈ 2 min 10 s on cpu"."""
        return f"{self.steps:,} steps ≈ {duration(self.total_s)} on {self.device}"

    def details(self) -> str:
        return (f"measured: {self.step_s * 1e3:.1f} ms a step ({self.precision}), {self.evaluation_s:.2f} s an "
                f"evaluation and its sample, {self.evaluations} evaluations; checkpoints and start-up not counted")


def duration(s: float) -> str:
    """A duration as a person says it: "45 s", "2 min 10 s", "1 h 05 min"."""
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate(config: RunConfig, prepared: Prepared | None = None,
             progress: Callable[[float, str], None] | None = None) -> Estimate:
    """Time a few real steps, an evaluation and a sample of ``config`` and estimate the whole run (see the
    module). ``progress(fraction, message)`` follows it. ValueError in words for settings that cannot train,
    `memory.DoesNotFit` before anything is built if the Model panel's estimate exceeds the memory free,
    `device.OutOfMemory` if they do not fit after all."""
    report = progress or (lambda fraction, message: None)
    config.validate()
    t = config.train
    dev = resolve_device(t.device)
    precision = resolve_precision(t.precision, dev)
    check_fits(config.model, t.batch_size, dev, optimizer=t.optimizer, precision=precision,
               what="estimating this run (it trains a few steps)")  # nothing built that cannot fit
    preparing = prepare(config, None, prepared)
    try:
        while True:
            event = next(preparing)
            report(0.6 * event.fraction, event.message)
    except StopIteration as done:
        tokenizer, dataset, config = done.value[:3]
    report(0.6, "timing steps")
    torch.manual_seed(t.seed)
    trainer = Trainer(config, tokenizer, dataset, dev, precision)
    times = []
    for i in range(WARMUP_STEPS + TIMED_STEPS):
        t0 = time.perf_counter()
        loss, _, _ = trainer.step(i + 1)
        loss.item()  # the step is done when its loss reaches the host
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[WARMUP_STEPS:])
    report(0.85, "timing an evaluation")
    t0 = time.perf_counter()
    if trainer.has_val:  # as the trainer: no validation split, no evaluation (the sample is still written)
        evaluate(trainer.model, dataset, config.data.task, t, dev, t.seed, precision)
    if t.sample_tokens:
        make_sample(trainer.model, tokenizer, dataset, config.data.task, t, t.seed, "val" if trainer.has_val else "train")
    evaluation_s = time.perf_counter() - t0
    evaluations = t.steps // t.eval_interval + (t.steps % t.eval_interval != 0)
    return Estimate(t.steps, str(dev), precision, step_s, evaluation_s, evaluations,
                    t.steps * step_s + evaluations * evaluation_s)


__all__ = ["Estimate", "estimate", "duration", "TIMED_STEPS", "WARMUP_STEPS"]
