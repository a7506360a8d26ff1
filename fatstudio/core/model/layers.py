"""The layers of Algorithms 8-10: a position-wise MLP and a residual block of attention (+ cross-attention)
and MLP, each sublayer wrapped in a norm before it (pre-LN) or after the residual sum (post-LN)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .attention import MHAttention
from .norm import Norm

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class MLP(nn.Module):
    """W_mlp2 act(W_mlp1 e + b_mlp1) + b_mlp2; SwiGLU: W_mlp2 (Swish(W_gate e) ⊙ (W_mlp1 e)) + b_mlp2."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_mlp1 = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias)
        self.W_gate = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias) if cfg.activation == "swiglu" else None
        self.W_mlp2 = nn.Linear(cfg.d_mlp, cfg.d_e, bias=cfg.bias)
        self.act = ACTIVATIONS.get(cfg.activation)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        h = self.W_mlp1(X)
        h = F.silu(self.W_gate(X)) * h if self.W_gate is not None else self.act(h)
        return self.W_mlp2(h)


class Layer(nn.Module):
    """One layer l: X ← X + MHAttention(X, X | 𝒲_l, Mask) [ + MHAttention(X, Z | 𝒲_l^e/d) ] + MLP, normed.

    ``causal`` gives the unidirectional mask of Algorithm 10 (and 8's decoder); ``cross`` adds the
    encoder-decoder attention of Algorithm 8. Norm placement is ``cfg.norm_position``.
    """

    def __init__(self, cfg: ModelConfig, causal: bool, cross: bool = False):
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.attn = MHAttention(cfg, causal=causal)
        self.norm_attn = Norm(cfg.d_e, cfg.norm, cfg.norm_eps)
        self.cross = MHAttention(cfg, causal=False, cross=True) if cross else None
        self.norm_cross = Norm(cfg.d_e, cfg.norm, cfg.norm_eps) if cross else None
        self.mlp = MLP(cfg)
        self.norm_mlp = Norm(cfg.d_e, cfg.norm, cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout else None  # None: no call at all per sublayer

    def _residual(self, X, norm, f):
        """Pre-LN: X + f(norm(X)); post-LN: norm(X + f(X)). f returns (output, attention or None)."""
        y, A = f(norm(X) if self.pre else X)
        X = X + (self.drop(y) if self.drop is not None else y)
        return (X if self.pre else norm(X)), A

    def forward(self, X, *, mask=None, Z=None, z_mask=None, cache=None, names=("self", "cross"),
                need_weights=False):
        """Returns (X, {name: attention weights or None}) for the self- (and cross-) attention of this layer."""
        slot = (lambda name: cache.slot(name)) if cache is not None else (lambda name: None)
        attn = {}
        X, attn[names[0]] = self._residual(X, self.norm_attn, lambda Xn: self.attn(
            Xn, key_mask=mask, cache=slot(names[0]), need_weights=need_weights))
        if self.cross is not None:
            X, attn[names[1]] = self._residual(X, self.norm_cross, lambda Xn: self.cross(
                Xn, Z, key_mask=z_mask, cache=slot(names[1]), need_weights=need_weights))
        X, _ = self._residual(X, self.norm_mlp, lambda Xn: (self.mlp(Xn), None))
        return X, attn
