"""Activations of hook points on a run's corpus, for training and measuring dictionaries: streamed from the train
split in shuffled batches (a buffer of a few forward passes, never the corpus at once), and a fixed held-out set of
validation rows (with the tokens, so that the loss with a dictionary spliced in can be measured on them)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from ...data.datasets import Dataset
from ...inference.loaded import LoadedModel
from ...model.hooks import hooked, point_names, recorded
from ..ablation import task_logits, validation_data

ROWS_PER_PASS = 32  # windows in one forward pass
BUFFER_PASSES = 8  # forward passes mixed together before their tokens are handed out in shuffled batches


def position_mask(rows: dict[str, torch.Tensor], point: str) -> torch.Tensor | None:
    """(B, T) True at the real (not padding) positions of the sequence ``point`` is on (an encoder's for ``enc``
    points), or None where the rows have no padding."""
    return rows.get("z_pad_mask" if point.startswith("enc") else "x_pad_mask")


class _Reached(Exception):
    """Raised by a hook on the last point wanted: the rest of the forward pass is not needed."""


@torch.inference_mode()
def activations(loaded: LoadedModel, rows: dict[str, torch.Tensor], points: Sequence[str]) -> list[torch.Tensor]:
    """Each point's activations on ``rows`` (one forward pass, ended at the last of them), as (N, d) float32 rows
    of its real positions."""
    order = point_names(loaded.model)
    last = max(points, key=order.index)

    def reached(x: torch.Tensor) -> None:
        raise _Reached
    with recorded(loaded.model, points, copy=False) as got:
        try:
            with hooked(loaded.model, {last: reached}):
                task_logits(loaded.model, rows, loaded.config.data.task)
        except _Reached:
            pass
    out = []
    for name in points:
        if not got[name]:
            raise ValueError(f"{name} is not reached by a forward pass of this task ({loaded.config.data.task}).")
        a = got[name][0]
        mask = position_mask(rows, name)
        out.append((a[mask] if mask is not None else a.reshape(-1, a.shape[-1])).float())
    return out


def run_data(loaded: LoadedModel) -> Dataset:
    """The run's corpus, tokenized and split as its training did."""
    return validation_data(loaded.config, loaded.tokenizer)[1]


def stream(loaded: LoadedModel, data: Dataset, points: Sequence[str], batch_tokens: int,
           generator: torch.Generator) -> Iterator[list[torch.Tensor]]:
    """Endless batches of ``batch_tokens`` rows of each point's activations (the same tokens for every point),
    drawn from the train split's random windows with ``generator`` and shuffled across `BUFFER_PASSES` passes (more
    where a batch needs them)."""
    while True:
        parts: list[list[torch.Tensor]] = []
        while len(parts) < BUFFER_PASSES or sum(len(p[0]) for p in parts) < batch_tokens:
            parts.append(activations(loaded, data.batch("train", ROWS_PER_PASS, generator), points))
        buffer = [torch.cat([p[i] for p in parts]) for i in range(len(points))]
        order = torch.randperm(len(buffer[0]), generator=generator)
        for s in range(0, len(order) - batch_tokens + 1, batch_tokens):
            at = order[s:s + batch_tokens]
            yield [b[at] for b in buffer]


@dataclass
class HeldOut:
    """Validation rows (the tokens, for the loss) and their activations at the points, for measuring quality."""

    rows: list[dict[str, torch.Tensor]]  # batches of ROWS_PER_PASS windows
    acts: list[torch.Tensor]  # each point's (N, d) activations over all the rows

    @property
    def n_tokens(self) -> int:
        return int(self.acts[0].shape[0])


def held_out(loaded: LoadedModel, data: Dataset, points: Sequence[str], tokens: int, seed: int) -> HeldOut:
    """About ``tokens`` positions of validation windows drawn with ``seed`` and the points' activations there."""
    g = torch.Generator().manual_seed(seed)
    rows, parts, n = [], [], 0
    while n < tokens:
        batch = data.batch("val", ROWS_PER_PASS, g)
        acts = activations(loaded, batch, points)
        rows.append(batch)
        parts.append(acts)
        n += len(acts[0])
    return HeldOut(rows, [torch.cat([p[i] for p in parts]) for i in range(len(points))])


__all__ = ["activations", "position_mask", "run_data", "stream", "held_out", "HeldOut"]
