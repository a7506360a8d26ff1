"""The layers of Algorithms 8-10: a position-wise MLP and a residual block of attention (+ cross-attention)
and MLP, each sublayer wrapped in a norm before it (pre-LN) or after the residual sum (post-LN)."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ResolvedModelConfig
from ..names import ComponentName, MapName, StackKind
from .attention import KVCache, MHAttention
from .hooks import HookPoint
from .norm import Norm

Activation = Callable[[torch.Tensor], torch.Tensor]
ACTIVATIONS: dict[str, Activation] = {  # the MLP's act; SwiGLU's is the Swish (SiLU) of its gate
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "swiglu": F.silu}


class MLP(nn.Module):
    """W_mlp2 act(W_mlp1 e + b_mlp1) + b_mlp2; SwiGLU: W_mlp2 (Swish(W_gate e) ⊙ (W_mlp1 e)) + b_mlp2.

    ``name`` ("mlp/0", "dec-mlp/1") names its hook points ``name/in`` and ``name/out``."""

    def __init__(self, cfg: ResolvedModelConfig, name: str) -> None:
        super().__init__()
        self.name = name
        self.W_mlp1 = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias)
        self.W_gate = nn.Linear(cfg.d_e, cfg.d_mlp, bias=cfg.bias) if cfg.activation == "swiglu" else None
        self.W_mlp2 = nn.Linear(cfg.d_mlp, cfg.d_e, bias=cfg.bias)
        self.act = ACTIVATIONS[cfg.activation]
        self.hook_in, self.hook_out = HookPoint(f"{name}/in"), HookPoint(f"{name}/out")

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        X = self.hook_in(X)
        h = self.W_mlp1(X)
        h = self.act(self.W_gate(X)) * h if self.W_gate is not None else self.act(h)
        return self.hook_out(self.W_mlp2(h))

    def hook_points(self) -> list[HookPoint]:
        return [self.hook_in, self.hook_out]



class Layer(nn.Module):
    """One layer l: X ← X + MHAttention(X, X | 𝒲_l, Mask) [ + MHAttention(X, Z | 𝒲_l^e/d) ] + MLP, normed.

    ``causal`` gives the unidirectional mask of Algorithm 10 (and 8's decoder); ``cross`` adds the
    encoder-decoder attention of Algorithm 8. Norm placement is ``cfg.norm_position``. ``kind`` ("self",
    "enc", "dec") and ``l`` name it: its attention maps and KV-cache slots "kind/l" (and "cross/l"), its hook
    points (`hooks`) "kind/l/resid_pre", …
    """

    def __init__(self, cfg: ResolvedModelConfig, kind: StackKind, l: int, causal: bool, cross: bool = False) -> None:
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.attn = MHAttention(cfg, str(MapName(kind, l)), causal=causal)
        self.norm_attn = Norm(cfg.d_e, cfg.norm, cfg.norm_eps, f"{self.attn.name}/norm-stats")
        self.cross = MHAttention(cfg, str(MapName("cross", l)), causal=False, cross=True) if cross else None
        self.norm_cross = Norm(cfg.d_e, cfg.norm, cfg.norm_eps, f"{self.cross.name}/norm-stats") \
            if self.cross is not None else None
        self.mlp = MLP(cfg, str(ComponentName.mlp(kind, l)))
        self.norm_mlp = Norm(cfg.d_e, cfg.norm, cfg.norm_eps, f"{self.mlp.name}/norm-stats")
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout else None  # None: no call at all per sublayer
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = (
            HookPoint(f"{self.attn.name}/{what}") for what in ("resid_pre", "resid_mid", "resid_post"))
        self.hook_resid_mid_cross = HookPoint(f"{self.attn.name}/resid_mid_cross") if cross else None

        def total(sub: str) -> HookPoint | None:  # post-LN: X + the sublayer's output, before the norm
            return None if self.pre else HookPoint(f"{sub}/sum")
        self.hook_attn_sum, self.hook_mlp_sum = total(self.attn.name), total(self.mlp.name)
        self.hook_cross_sum = total(self.cross.name) if self.cross is not None else None

    def _add(self, X: torch.Tensor, y: torch.Tensor, norm: Norm, total: HookPoint | None,
             after: HookPoint) -> torch.Tensor:
        """The stream after a sublayer's output y: pre-LN X + y; post-LN norm(X + y) (``total`` its hook point)."""
        X = X + (self.drop(y) if self.drop is not None else y)
        if total is not None:
            X = norm(total(X))
        return after(X)

    def forward(self, X: torch.Tensor, *, mask: torch.Tensor | None = None, Z: torch.Tensor | None = None,
                z_mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """X (B, T, d_e) -> the layer's output (B, T, d_e); Z the encoder's output for the cross-attention,
        mask and z_mask (B, T), (B, T_z) False at padding. Pre-LN: each sublayer reads norm(X), post-LN X."""
        X = self.hook_resid_pre(X)
        attn, norm = self.attn, self.norm_attn  # each module looked up once (nn.Module.__getattr__ is slow)
        y = attn(norm(X) if self.pre else X, key_mask=mask, cache=cache.slot(attn.name) if cache is not None else None)
        X = self._add(X, y, norm, self.hook_attn_sum, self.hook_resid_mid)
        cross, norm_cross, after = self.cross, self.norm_cross, self.hook_resid_mid_cross
        if cross is not None and norm_cross is not None and after is not None:
            y = cross(norm_cross(X) if self.pre else X, Z, key_mask=z_mask,
                      cache=cache.slot(cross.name) if cache is not None else None)
            X = self._add(X, y, norm_cross, self.hook_cross_sum, after)
        norm = self.norm_mlp
        return self._add(X, self.mlp(norm(X) if self.pre else X), norm, self.hook_mlp_sum, self.hook_resid_post)

    def hook_points(self) -> list[HookPoint]:
        """Its hook points in the order they run: pre-LN a sublayer's norm statistics before it, post-LN after
        its sum."""
        def sub(module: MHAttention | MLP, norm: Norm, total: HookPoint | None) -> list[HookPoint | None]:
            if self.pre:
                return [norm.hook_stats, *module.hook_points()]
            return [*module.hook_points(), total, norm.hook_stats]
        points = [self.hook_resid_pre, *sub(self.attn, self.norm_attn, self.hook_attn_sum), self.hook_resid_mid]
        if self.cross is not None and self.norm_cross is not None:
            points += [*sub(self.cross, self.norm_cross, self.hook_cross_sum), self.hook_resid_mid_cross]
        points += [*sub(self.mlp, self.norm_mlp, self.hook_mlp_sum), self.hook_resid_post]
        return [p for p in points if p is not None]
