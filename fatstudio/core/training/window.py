"""An emission window: the steps since the trainer last announced its numbers, kept on the device until read."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..records import MetricsRow, metrics_rows


@dataclass
class Numbers:
    """One emission window's per-step numbers as Python values (``grad_norm`` as the device computed it:
    possibly inf or NaN)."""

    steps: list[int]
    lr: list[float]
    train_loss: list[float]
    grad_norm: list[float]

    def first_non_finite(self, loss_scaling: bool) -> int | None:
        """The index of the first step whose loss is not finite, or whose gradient norm is not, unless loss
        scaling is on (it skips such steps and lowers its scale); None if every step is fine."""
        for i, (loss, norm) in enumerate(zip(self.train_loss, self.grad_norm)):
            if not math.isfinite(loss) or (not loss_scaling and not math.isfinite(norm)):
                return i
        return None

    def head(self, n: int) -> Numbers:
        return Numbers(self.steps[:n], self.lr[:n], self.train_loss[:n], self.grad_norm[:n])

    def finite_grad_norms(self) -> list[float | None]:
        """The gradient norms with None for the steps loss scaling skipped (their gradient overflowed), so
        metrics.jsonl stays strict JSON and the plots see no inf/NaN."""
        return [g if math.isfinite(g) else None for g in self.grad_norm]

    def rows(self, tokens_per_s: float | None = None) -> list[MetricsRow]:
        """metrics.jsonl rows, one per step (see `runs`); with ``tokens_per_s`` (the window's throughput) on
        each, the last marked ``window_end``."""
        return metrics_rows(self.steps, self.train_loss, self.lr, self.finite_grad_norms(), tokens_per_s)


@dataclass
class Window:
    """The steps since the last emission. Their losses and gradient norms wait on the device until `read`;
    ``tokens`` counts what was trained on since ``since``, the start of the window's timing."""

    since: float = 0.0
    tokens: int = 0
    steps: list[int] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)  # (loss, grad_norm) per step, on the device

    def add(self, step: int, lr: float, loss: torch.Tensor, grad_norm: torch.Tensor, tokens: int) -> None:
        self.steps.append(step)
        self.lr.append(lr)
        self.values.append(torch.stack([loss.float(), grad_norm.float()]))
        self.tokens += tokens

    def restart_clock(self) -> None:
        """Time from now on (after start-up, a pause or an emission's evaluation, sample and checkpoint)."""
        self.since, self.tokens = time.perf_counter(), 0

    def tokens_per_s(self, now: float) -> float:
        return self.tokens / max(now - self.since, 1e-9)

    def read(self, mean: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Numbers:
        """The pending steps' numbers, read from the device at once (averaged over the processes by ``mean``
        under torchrun); the window keeps no steps after it."""
        values = torch.stack(self.values)
        pairs = (mean(values) if mean else values).tolist()
        numbers = Numbers(self.steps, self.lr, [loss for loss, _ in pairs], [norm for _, norm in pairs])
        self.steps, self.lr, self.values = [], [], []
        return numbers
