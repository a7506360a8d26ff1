"""Algorithm 6: layer normalisation, and RMSnorm (Gopher)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import NormKind
from .hooks import HookPoint


class Norm(nn.Module):
    """layer_norm(e | γ, β): ê = (e - m)/√(v + ε) ⊙ γ + β, with v the biased variance (Algorithm 6).

    ``kind="rms"`` is RMSnorm: m = β = 0, ê = e/√(mean(e²) + ε) ⊙ γ. ``name``: the hook point of its statistics
    (`statistics`); a norm shared by two stacks (the embedding's) is given its caller's point at each call.
    """

    def __init__(self, d: int, kind: NormKind = "layer", eps: float = 1e-5, name: str | None = None) -> None:
        super().__init__()
        self.kind, self.eps = kind, eps
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d)) if kind == "layer" else None
        self.hook_stats = HookPoint(name) if name is not None else None

    def forward(self, e: torch.Tensor, stats: HookPoint | None = None) -> torch.Tensor:
        point = stats if stats is not None else self.hook_stats
        if point is not None and point.hooks:
            s = self.statistics(e)
            given = point(s)
            if given is not s and not torch.equal(given, s):  # replaced: Algorithm 6 with the statistics given
                e = (e - given[..., :1]) / given[..., 1:] * self.gamma
                return e + self.beta if self.beta is not None else e
        if self.kind == "layer":
            return F.layer_norm(e, e.shape[-1:], self.gamma, self.beta, self.eps)
        return F.rms_norm(e, e.shape[-1:], self.gamma, self.eps)

    def statistics(self, e: torch.Tensor) -> torch.Tensor:
        """(…, 2): the mean m and the denominator √(v + ε) of each vector, v = mean((e - m)²) (RMSnorm: m = 0,
        v = mean(e²))."""
        if self.kind == "layer":
            v, m = torch.var_mean(e, -1, correction=0, keepdim=True)
        else:
            m, v = torch.zeros_like(e[..., :1]), e.square().mean(-1, keepdim=True)
        return torch.cat([m, (v + self.eps).sqrt()], -1)
