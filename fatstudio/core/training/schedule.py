"""The learning-rate schedule and the optimizer (paper §8; weight decay on ≥2-D weights only), and Muon for
the hidden weight matrices (`MuonAdamW`)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..config import TrainConfig

OUTER = ("embed", "unembed", "class_head")  # the model's modules that meet tokens or classes: never under Muon


DECAY_FRACTION = 0.2  # "wsd": the last fifth of the steps decays (Hägele et al. 2024 find it matches a cosine)


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then: "cosine" from lr down to min_lr at ``steps``; "constant" lr;
    "wsd" (warm-up, stable, decay) lr until the last DECAY_FRACTION of the steps, then a cosine down to min_lr
    at ``steps`` (a run that must end settled, but learns at full lr until then)."""
    if step < t.warmup:
        return t.lr * (step + 1) / (t.warmup + 1)
    if t.lr_schedule == "constant":
        return t.lr
    start = t.warmup
    if t.lr_schedule == "wsd":
        start = max(t.warmup, t.steps - round(DECAY_FRACTION * t.steps))
        if step < start:
            return t.lr
    progress = min(1.0, (step - start) / max(1, t.steps - start))
    return t.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


def hidden_matrices(model: torch.nn.Module) -> list[torch.Tensor]:
    """The weights of the linear maps inside the stack (W_q, W_k, W_v, W_o, W_mlp1, W_mlp2, W_r, W_f…): what Muon
    trains. Embeddings, the unembedding (tied or not), a class head, norms' γ and β, biases and 2-D biases
    such as Transformer-XL's u and v stay with AdamW."""
    outer = {id(p) for name in OUTER if isinstance(m := getattr(model, name, None), torch.nn.Module)
             for p in m.parameters()}
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)
            and m.weight.requires_grad and id(m.weight) not in outer]


def param_groups(params: Sequence[torch.Tensor], weight_decay: float) -> list[dict]:
    """Weight decay on ≥2-D weights only."""
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on ≥2-D weights only, or the paper's plain SGD θ ← θ - η∇loss (+ decay), or
    Muon for the hidden matrices with AdamW for the rest (`MuonAdamW`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if t.optimizer == "sgd":
        return torch.optim.SGD(param_groups(params, t.weight_decay), lr=t.lr)
    hidden = hidden_matrices(model) if t.optimizer == "muon" else []
    under_muon = {id(p) for p in hidden}
    rest = [p for p in params if id(p) not in under_muon]
    fused = all(p.device.type in ("cpu", "cuda", "mps") for p in params)  # one kernel for the whole update
    adamw = torch.optim.AdamW(param_groups(rest, t.weight_decay), lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)
    if not hidden:
        return adamw
    return MuonAdamW(torch.optim.Muon(hidden, lr=t.muon_lr, weight_decay=t.muon_weight_decay), adamw)


def set_lr(optimizer: torch.optim.Optimizer, lr: float, t: TrainConfig) -> None:
    """Every group at ``lr`` (the schedule's or a fixed override, on the scale of train.lr); Muon's groups at
    the same fraction of train.muon_lr."""
    muon = optimizer.muon.param_groups if isinstance(optimizer, MuonAdamW) else []
    for group in optimizer.param_groups:
        group["lr"] = lr * t.muon_lr / t.lr if any(group is g for g in muon) else lr


class MuonAdamW(torch.optim.Optimizer):
    """Muon (``torch.optim.Muon``: momentum, orthogonalised by Newton-Schulz) for the hidden matrices and AdamW
    for everything else, stepped, zeroed, saved and loaded as one optimizer. ``param_groups`` are both
    optimizers' own (Muon's first), so setting a group's lr sets it where it is used; the state dict holds
    both state dicts whole."""

    def __init__(self, muon: torch.optim.Muon, adamw: torch.optim.AdamW):
        self.muon, self.adamw = muon, adamw
        super().__init__([p for g in muon.param_groups + adamw.param_groups for p in g["params"]], {})
        self.param_groups = muon.param_groups + adamw.param_groups

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def state_dict(self) -> dict:
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        if set(state_dict) != {"muon", "adamw"}:
            raise ValueError("this optimizer state is not Muon's with AdamW's; resume with the optimizer it was saved with.")
        self.muon.load_state_dict(state_dict["muon"])
        self.adamw.load_state_dict(state_dict["adamw"])
        self.param_groups = self.muon.param_groups + self.adamw.param_groups
