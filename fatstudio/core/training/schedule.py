"""The learning-rate schedule and the optimizer (paper §8; weight decay on ≥2-D weights only)."""
from __future__ import annotations

import math

import torch

from ..config import TrainConfig


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from lr down to min_lr at ``steps`` (or constant)."""
    if step < t.warmup:
        return t.lr * (step + 1) / (t.warmup + 1)
    if t.lr_schedule == "constant":
        return t.lr
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


def make_optimizer(model: torch.nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on ≥2-D weights only, or the paper's plain SGD θ ← θ - η∇loss (+ decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr)
    fused = all(p.device.type in ("cpu", "cuda", "mps") for p in params)  # one kernel for the whole update
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)
