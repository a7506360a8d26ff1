"""Algorithms 3-5: (multi-head) attention, with the positional variations that act on the scores
(RoPE, ALiBi, Transformer-XL relative positions), grouped-query key/value heads and a KV cache."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .positions import alibi_slopes, apply_rope, relative_distances, rope_angles, scale, sinusoids


class KVCache:
    """Keys and values of the positions seen so far, one slot per attention layer (DInference with caching).

    ``length`` is the number of positions already processed; the model advances it after each call.
    """

    def __init__(self):
        self.layers: dict[str, dict[str, torch.Tensor]] = {}
        self.length = 0

    def slot(self, name: str) -> dict[str, torch.Tensor]:
        return self.layers.setdefault(name, {})


class MHAttention(nn.Module):
    """MHAttention(X, Z | 𝒲, Mask) of Algorithm 5: H heads of Algorithm 4, stacked and projected by W_o.

    The weights of all heads sit in one matrix each: W_q (H·d_attn × d_e), W_k (H_kv·d_attn × d_e),
    W_v (H_kv·d_mid × d_e), W_o (d_e × H·d_mid); head h uses key/value head ⌊h·H_kv/H⌋. ``nn.Linear``
    stores its weight as (out, in), which is the paper's column convention, so ``W_q.weight`` *is* W_q.
    """

    def __init__(self, cfg: ModelConfig, causal: bool, cross: bool = False):
        super().__init__()
        self.H, self.H_kv, self.d_attn, self.d_mid = cfg.H, cfg.H_kv, cfg.d_attn, cfg.d_mid
        self.causal, self.cross = causal, cross
        self.positions = "none" if cross else cfg.positions  # cross-attention has no positional terms
        self.base, self.dropout = cfg.position_base, cfg.dropout
        self.W_q = nn.Linear(cfg.d_e, cfg.H * cfg.d_attn, bias=cfg.bias)
        self.W_k = nn.Linear(cfg.d_e, cfg.H_kv * cfg.d_attn, bias=cfg.bias)
        self.W_v = nn.Linear(cfg.d_e, cfg.H_kv * cfg.d_mid, bias=cfg.bias)
        self.W_o = nn.Linear(cfg.H * cfg.d_mid, cfg.d_e, bias=cfg.bias)
        if self.positions == "relative":  # Transformer-XL: W_r, u, v of each layer
            self.W_r = nn.Linear(cfg.d_e, cfg.H * cfg.d_attn, bias=False)
            self.u = nn.Parameter(torch.zeros(cfg.H, cfg.d_attn))
            self.v = nn.Parameter(torch.zeros(cfg.H, cfg.d_attn))
        if self.positions == "alibi":
            self.register_buffer("slopes", alibi_slopes(cfg.H), persistent=False)

    def forward(self, X: torch.Tensor, Z: torch.Tensor | None = None, *, key_mask: torch.Tensor | None = None,
                cache: dict | None = None, need_weights: bool = False):
        """X: (B, T_x, d_e) the tokens that query; Z: (B, T_z, d_e) the tokens attended to (None: Z = X).

        key_mask: (B, T_z) bool, False at padding. cache: this layer's slot of a KVCache.
        Returns (Ṽ projected by W_o: (B, T_x, d_e), softmax(S/√d_attn) as (B, H, T_x, T_z) or None).
        """
        B, T_x, _ = X.shape
        q = self.W_q(X).view(B, T_x, self.H, self.d_attn).transpose(1, 2)  # (B, H, T_x, d_attn)
        past = cache["k"].shape[2] if cache and "k" in cache and not self.cross else 0
        pos_q = torch.arange(past, past + T_x, device=X.device)
        if self.cross and cache and "k" in cache:  # the encoder's keys/values are computed once
            k, v, key_mask = cache["k"], cache["v"], cache.get("mask")
        else:
            Z = X if Z is None else Z
            T_z = Z.shape[1]
            k = self.W_k(Z).view(B, T_z, self.H_kv, self.d_attn).transpose(1, 2)  # (B, H_kv, T_z, d_attn)
            v = self.W_v(Z).view(B, T_z, self.H_kv, self.d_mid).transpose(1, 2)  # (B, H_kv, T_z, d_mid)
            if self.positions == "rope":
                cos, sin = rope_angles(pos_q, self.d_attn, self.base)
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if cache is not None:
                if past:
                    k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
                    if key_mask is not None or "mask" in cache:
                        old = cache.get("mask", torch.ones(B, past, dtype=torch.bool, device=X.device))
                        new = key_mask if key_mask is not None else torch.ones(B, T_x, dtype=torch.bool, device=X.device)
                        key_mask = torch.cat([old, new], 1)
                cache["k"], cache["v"] = k, v
                if key_mask is not None:
                    cache["mask"] = key_mask
        pos_k = torch.arange(k.shape[2], device=X.device)
        q, bias = self._scores_bias(q, pos_q, pos_k, key_mask)
        s = scale(self.d_attn)
        p_drop = self.dropout if self.training else 0.0
        if need_weights:
            if self.H_kv != self.H:  # head h reads key/value head ⌊h·H_kv/H⌋
                k, v = k.repeat_interleave(self.H // self.H_kv, 1), v.repeat_interleave(self.H // self.H_kv, 1)
            S = (q @ k.transpose(-1, -2)) * s  # (B, H, T_x, T_z)
            if bias is not None:
                S = S + bias
            A = S.softmax(-1)  # Algorithm 4: softmax(S/√d_attn), each query's row sums to 1
            Y = F.dropout(A, p_drop, self.training) @ v  # (B, H, T_x, d_mid)
        else:
            A = None
            is_causal = self.causal and bias is None and past == 0 and T_x > 1
            Y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p_drop, is_causal=is_causal,
                                               scale=s, enable_gqa=self.H_kv != self.H)
        Y = Y.transpose(1, 2).reshape(B, T_x, self.H * self.d_mid)  # Y = [Y¹; …; Y^H]
        return self.W_o(Y), A

    def _scores_bias(self, q, pos_q, pos_k, key_mask):
        """The query actually dotted with the keys, and the additive terms of S/√d_attn (masks as -∞).

        Returns (q', bias) with bias broadcastable to (B, H, T_x, T_z), or None when nothing is added.
        """
        T_x, T_z = len(pos_q), len(pos_k)
        allowed = None
        if self.causal and not (T_x == 1 and pos_q[0] >= pos_k[-1]):
            allowed = pos_k[None, :] <= pos_q[:, None]  # Mask[t_z, t_x] = [t_z ≤ t_x]
        if key_mask is not None:
            km = key_mask[:, None, None, :]  # (B, 1, 1, T_z)
            if not self.cross:  # a padding query still sees itself, so no row is empty
                km = km | (pos_k[None, :] == pos_q[:, None])
            allowed = km if allowed is None else allowed & km
        bias = None
        if self.positions == "alibi":
            dist = relative_distances(pos_q, pos_k).abs().to(q.dtype)
            bias = -self.slopes.to(q.dtype)[:, None, None] * dist  # (H, T_x, T_z)
        elif self.positions == "relative":
            # Transformer-XL: S_ij = (q_i + u)ᵀk_j + (q_i + v)ᵀ W_r r_{i-j}
            dist = relative_distances(pos_q, pos_k)
            d_min = int(dist.min())
            r = sinusoids(torch.arange(d_min, int(dist.max()) + 1, device=q.device), self.W_r.in_features,
                          self.base).to(q.dtype)  # (n_d, d_e)
            Rk = self.W_r(r).view(-1, self.H, self.d_attn).transpose(0, 1)  # (H, n_d, d_attn)
            BD = (q + self.v[:, None, :]) @ Rk.transpose(-1, -2)  # (B, H, T_x, n_d)
            BD = BD.gather(-1, (dist - d_min).expand(*BD.shape[:2], T_x, T_z))  # (B, H, T_x, T_z)
            bias = BD * scale(self.d_attn)
            q = q + self.u[:, None, :]
        if allowed is not None:
            neg = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, float("-inf"))
            bias = neg if bias is None else bias + neg
        return q, bias
