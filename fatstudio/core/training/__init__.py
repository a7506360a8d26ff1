"""Training (paper §8; the losses of Algorithms 11-13 and classification) as a generator of small plain events.

``train(config)`` does all the slow setup inside the generator (corpus, tokenizer, dataset, model), then steps:
minibatches, AdamW or the paper's plain SGD, linear warm-up then cosine or constant learning rate, weight decay
on ≥2-D weights only, gradient clipping, periodic evaluation with a sample, checkpoints. It honours a
`Control`'s stop / pause / single-step / learning-rate / snapshot requests between steps. A non-finite loss
ends the run as "failed" with a message; the last good checkpoint stays.

The parts: `events` (what `train` yields), `control` (`Control`), `schedule` (`lr_at`, `make_optimizer`),
`loss` (`task_loss`, `evaluate`, minibatches), `preparation` (corpus, tokenizer, dataset: `prepare`), `trainer`
(`Trainer`: the model, optimizer and steps; `train`), `recorder` (`Recorder`: the run folder's record, from the
events), `sample` (`make_sample`), `window` (an emission window's numbers), `estimate` (a run's time).
Importing this package imports none of them (nor torch): each name is imported when first used (PEP 562), so the
GUI thread can make a `Control` or read an event's type while the trainer's thread imports torch.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES = {
    "compile_problem": "..device", "Control": ".control", "Batch": ".loss", "evaluate": ".loss",
    "next_batch": ".loss", "task_loss": ".loss", "prepare": ".preparation", "Recorder": ".recorder",
    "make_sample": ".sample", "lr_at": ".schedule", "make_optimizer": ".schedule", "EMIT_INTERVAL_S": ".trainer",
    "Trainer": ".trainer", "train": ".trainer",
    **dict.fromkeys(("Checkpoint", "Evaluation", "Event", "Finished", "Note", "Paused", "Prepare", "Probe", "Resumed",
                     "Sample", "Snapshot", "Started", "Steps"), ".events"),
}
__all__ = ["Batch", "Checkpoint", "Control", "EMIT_INTERVAL_S", "Evaluation", "Event", "Finished", "Note", "Paused",
           "Prepare", "Probe", "Recorder", "Resumed", "Sample", "Snapshot", "Started", "Steps", "Trainer",
           "compile_problem", "evaluate", "lr_at", "make_optimizer", "make_sample", "next_batch", "prepare",
           "task_loss", "train"]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from ..device import compile_problem
    from .control import Control
    from .events import (
        Checkpoint,
        Evaluation,
        Event,
        Finished,
        Note,
        Paused,
        Prepare,
        Probe,
        Resumed,
        Sample,
        Snapshot,
        Started,
        Steps,
    )
    from .loss import Batch, evaluate, next_batch, task_loss
    from .preparation import prepare
    from .recorder import Recorder
    from .sample import make_sample
    from .schedule import lr_at, make_optimizer
    from .trainer import EMIT_INTERVAL_S, Trainer, train
