"""The record of a run in its folder, written from the trainer's events: ``metrics.jsonl`` (a row per step,
`records.MetricsRow`), ``samples.jsonl``, and meta.json's latest step, validation losses and divergence.

The trainer hands each event to `Recorder.record` before it announces it, so what an event announces is on
disk when a consumer sees it. A window's rows wait for its evaluation (which joins the last row) and are
written by `flush`, which the trainer calls once the window's evaluation is known. The trainer itself keeps
the folder's life: creating or resuming it, its status, the checkpoint and probe files."""
from __future__ import annotations

import math

from ..records import MetricsRow, metrics_rows, with_evaluation
from ..runs.folder import Run
from .events import Checkpoint, Evaluation, Event, Sample, Steps


class Recorder:
    """Writes ``run``'s record from the events `record` is given (see the module)."""

    def __init__(self, run: Run):
        self.run = run
        self.pending: list[MetricsRow] = []  # the rows of the window announced last, until `flush`

    def record(self, event: Event) -> None:
        if isinstance(event, Steps):
            self.pending = metrics_rows(event.steps, event.train_loss, event.lr, event.grad_norm, event.tokens_per_s)
        elif isinstance(event, Evaluation):
            best = min(event.val_loss, self.run.meta.get("best_val_loss", math.inf))
            self.run.write_meta(step=event.step, best_val_loss=best, val_loss=event.val_loss)
            if self.pending:
                with_evaluation(self.pending[-1], event.eval_train_loss, event.val_loss, event.accuracy,
                                event.train_accuracy, event.weight_norm, event.embed_fourier)
        elif isinstance(event, Sample):
            self.run.append_sample(event.step, event.text)
        elif isinstance(event, Checkpoint):
            self.run.write_meta(step=event.step)

    def flush(self) -> None:
        """Write the window's rows (with its evaluation, if any) to metrics.jsonl."""
        rows, self.pending = self.pending, []
        self.run.append_metrics(rows)

    def diverged(self, rows: list[MetricsRow], diverged: dict) -> None:
        """A window that ended at a non-finite step: its good steps' ``rows`` and the bad step in meta.json."""
        self.run.append_metrics(rows)
        self.run.write_meta(diverged=diverged)
