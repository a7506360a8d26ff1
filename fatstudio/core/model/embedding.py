"""Algorithms 1, 2 and 7: token embedding, positional embedding (eq. 1: e_t = W_e[:, x[t]] + W_p[:, t])
and the unembedding p = softmax(W_u e)."""
from __future__ import annotations

import torch
from torch import nn

from ..config import ResolvedModelConfig
from .hooks import HookPoint
from .norm import Norm
from .positions import CPU, FixedTables, rows, sinusoids


class Embedding(FixedTables):
    """e_t = W_e[:, x[t]] + W_p[:, t]. ``W_e.weight`` is W_eᵀ (N_V × d_e); learned ``W_p.weight`` is W_pᵀ.

    Sinusoidal W_p is a fixed buffer; rotary, ALiBi and relative positions act inside attention instead.
    With ``embed_norm`` e_t is normed (``norm``), as BERT's embedding layer does.
    """

    W_p_table: torch.Tensor  # the sinusoidal W_pᵀ (ℓ_max × d_e), a fixed table

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__()
        self.l_max, self.positions = cfg.l_max, cfg.positions
        self.W_e = nn.Embedding(cfg.vocab_size, cfg.d_e)
        if cfg.positions == "learned":
            self.W_p = nn.Embedding(cfg.l_max, cfg.d_e)
        elif cfg.positions == "sinusoidal":  # paper positions t = 1..ℓ_max
            self.register_table("W_p_table", sinusoids(torch.arange(1, cfg.l_max + 1, device=CPU), cfg.d_e, cfg.position_base))
        self.norm = Norm(cfg.d_e, cfg.norm, cfg.norm_eps) if cfg.embed_norm else None
        self.drop = nn.Dropout(cfg.dropout) if cfg.dropout else None  # None: no call at all

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0, hook: HookPoint | None = None,
                stats: HookPoint | None = None) -> torch.Tensor:
        """x: (B, T) token ids at positions offset..offset+T-1 -> (B, T, d_e). A tensor ``offset`` (a static
        decode step's) is not checked against l_max: its caller keeps it in range. ``hook``: the caller's hook
        point of e_t (before the embedding norm), the embedding being shared by an edt's encoder and decoder; ``stats``
        the caller's point of the embedding norm's statistics."""
        T = x.shape[1]
        if isinstance(offset, int) and offset + T > self.l_max:
            raise ValueError(f"the sequence is {offset + T} tokens long, more than l_max = {self.l_max}; "
                             "shorten it or train a model with a larger l_max.")
        e = self.W_e(x)
        if self.positions == "learned":
            e = e + rows(self.W_p.weight, offset, T)
        elif self.positions == "sinusoidal":
            e = e + rows(self.W_p_table, offset, T)
        if hook is not None:
            e = hook(e)
        if self.norm is not None:
            e = self.norm(e, stats)
        return self.drop(e) if self.drop is not None else e


class Unembedding(nn.Module):
    """Algorithm 7: logits W_u e (softmax is applied by the loss or the sampler). W_u: N_V × d. With ``bias``,
    W_u e + b_u (BERT's MLM head has one)."""

    def __init__(self, d: int, vocab_size: int, bias: bool = False) -> None:
        super().__init__()
        self.W_u = nn.Linear(d, vocab_size, bias=False)
        self.b_u = nn.Parameter(torch.zeros(vocab_size)) if bias else None

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return self.W_u(e) if self.b_u is None else self.W_u(e) + self.b_u
