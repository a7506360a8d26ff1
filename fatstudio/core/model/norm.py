"""Algorithm 6: layer normalisation, and RMSnorm (Gopher)."""
import torch
import torch.nn.functional as F
from torch import nn

from ..config import NormKind


class Norm(nn.Module):
    """layer_norm(e | γ, β): ê = (e - m)/√(v + ε) ⊙ γ + β, with v the biased variance (Algorithm 6).

    ``kind="rms"`` is RMSnorm: m = β = 0, ê = e/√(mean(e²) + ε) ⊙ γ.
    """

    def __init__(self, d: int, kind: NormKind = "layer", eps: float = 1e-5) -> None:
        super().__init__()
        self.kind, self.eps = kind, eps
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d)) if kind == "layer" else None

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        if self.kind == "layer":
            return F.layer_norm(e, e.shape[-1:], self.gamma, self.beta, self.eps)
        return F.rms_norm(e, e.shape[-1:], self.gamma, self.eps)
