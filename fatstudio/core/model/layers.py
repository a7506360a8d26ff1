"""The layers of Algorithms 8-10: a position-wise MLP and a residual block of attention (+ cross-attention)
and MLP, each sublayer wrapped in a norm before it (pre-LN) or after the residual sum (post-LN)."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ResolvedModelConfig
from .attention import KVCache, KVSlot, MHAttention
from .norm import Norm

Activation = Callable[[torch.Tensor], torch.Tensor]
ACTIVATIONS: dict[str, Activation] = {  # the MLP's act; SwiGLU's is the Swish (SiLU) of its gate
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "swiglu": F.silu}
Sublayer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]  # X̃ -> (output, attention or None)


class MLP(nn.Module):
    """W_mlp2 act(W_mlp1 e + b_mlp1) + b_mlp2; SwiGLU: W_mlp2 (Swish(W_gate e) ⊙ (W_mlp1 e)) + b_mlp2."""

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__()
        self.W_mlp1 = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias)
        self.W_gate = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias) if cfg.activation == "swiglu" else None
        self.W_mlp2 = nn.Linear(cfg.d_mlp, cfg.d_e, bias=cfg.bias)
        self.act = ACTIVATIONS[cfg.activation]

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        h = self.W_mlp1(X)
        h = self.act(self.W_gate(X)) * h if self.W_gate is not None else self.act(h)
        return self.W_mlp2(h)


class Layer(nn.Module):
    """One layer l: X ← X + MHAttention(X, X | 𝒲_l, Mask) [ + MHAttention(X, Z | 𝒲_l^e/d) ] + MLP, normed.

    ``causal`` gives the unidirectional mask of Algorithm 10 (and 8's decoder); ``cross`` adds the
    encoder-decoder attention of Algorithm 8. Norm placement is ``cfg.norm_position``.
    """

    def __init__(self, cfg: ResolvedModelConfig, causal: bool, cross: bool = False) -> None:
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.attn = MHAttention(cfg, causal=causal)
        self.norm_attn = Norm(cfg.d_e, cfg.norm, cfg.norm_eps)
        self.cross = MHAttention(cfg, causal=False, cross=True) if cross else None
        self.norm_cross = Norm(cfg.d_e, cfg.norm, cfg.norm_eps) if cross else None
        self.mlp = MLP(cfg)
        self.norm_mlp = Norm(cfg.d_e, cfg.norm, cfg.norm_eps)
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout else None  # None: no call at all per sublayer

    def _residual(self, X: torch.Tensor, norm: Norm, f: Sublayer) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Pre-LN: X + f(norm(X)); post-LN: norm(X + f(X)). f returns (output, attention or None)."""
        y, A = f(norm(X) if self.pre else X)
        X = X + (self.drop(y) if self.drop is not None else y)
        return (X if self.pre else norm(X)), A

    def forward(self, X: torch.Tensor, *, mask: torch.Tensor | None = None, Z: torch.Tensor | None = None,
                z_mask: torch.Tensor | None = None, cache: KVCache | None = None,
                names: tuple[str, str] = ("self", "cross"),
                need_weights: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Returns (X, {name: attention weights}) for the self- (and cross-) attention of this layer; the
        weights only with ``need_weights``, else an empty dict."""
        def slot(name: str) -> KVSlot | None:
            return cache.slot(name) if cache is not None else None

        attn: dict[str, torch.Tensor] = {}
        X, A = self._residual(X, self.norm_attn, lambda Xn: self.attn(
            Xn, key_mask=mask, cache=slot(names[0]), need_weights=need_weights))
        if A is not None:
            attn[names[0]] = A
        cross, norm_cross = self.cross, self.norm_cross
        if cross is not None and norm_cross is not None:
            X, A = self._residual(X, norm_cross, lambda Xn: cross(
                Xn, Z, key_mask=z_mask, cache=slot(names[1]), need_weights=need_weights))
            if A is not None:
                attn[names[1]] = A
        X, _ = self._residual(X, self.norm_mlp, lambda Xn: (self.mlp(Xn), None))
        return X, attn
