"""Algorithms 3-5: (multi-head) attention, with the positional variations that act on the scores
(RoPE, ALiBi, Transformer-XL relative positions), grouped-query key/value heads and a KV cache."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ResolvedModelConfig
from .hooks import HookPoint
from .positions import CPU, FixedTables, alibi_slopes, apply_rope, rope_angles, rows, scale, sinusoids


def _fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, p_drop: float,
                     is_causal: bool, scale: float, gqa: bool) -> torch.Tensor:
    """softmax(S/√d_attn + bias) V by the fused kernel. On the CPU half-precision inputs run in fp32: its
    kernel is several times slower in bf16 (forward and backward) than in fp32, while the matrix products
    around it are twice as fast in bf16."""
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", enabled=False):
            Y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bias if bias is None
                                               else bias.float(), dropout_p=p_drop, is_causal=is_causal,
                                               scale=scale, enable_gqa=gqa)
        return Y.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p_drop, is_causal=is_causal,
                                          scale=scale, enable_gqa=gqa)


class KVSlot:
    """One attention layer's cached keys and values (B, H_kv, n, d) and key mask (B, n), None until first use.

    Self-attention appends (`append`): the first call allocates room for l_max positions, each call writes
    its positions into it and ``n`` counts those filled. Cross-attention keeps the encoder's k, v and mask.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.n: int | torch.Tensor = 0

    def append(self, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None,
               l_max: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write the new positions' k, v (B, H_kv, T, d) and key_mask (B, T) or None; return those of all
        positions so far (views of the preallocated tensors)."""
        B, H_kv, T, _ = k.shape
        if self.k is None or self.v is None:
            self.k = k.new_empty(B, H_kv, l_max, k.shape[-1])
            self.v = v.new_empty(B, H_kv, l_max, v.shape[-1])
        start, self.n = self.n, self.n + T
        self.k[:, :, start:self.n], self.v[:, :, start:self.n] = k, v
        if key_mask is not None:
            if self.mask is None:
                self.mask = key_mask.new_ones(B, l_max)  # positions that came without a mask are real
            self.mask[:, start:self.n] = key_mask
        return self.k[:, :, :self.n], self.v[:, :, :self.n], None if self.mask is None else self.mask[:, :self.n]


class StaticKVSlot(KVSlot):
    """A self-attention `KVSlot` with static shapes: keys and values always (B, H_kv, l_max, d), zeros where
    nothing was written yet, and ``n`` the position as a 0-d tensor (its `StaticKVCache`'s ``length``)."""

    def __init__(self, position: torch.Tensor) -> None:
        super().__init__()
        self.n = position

    def append(self, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None,
               l_max: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write k, v (B, H_kv, T, d) at positions n..n+T-1; return all l_max slots and the key mask
        (B, l_max) that hides those past n+T-1."""
        if key_mask is not None:
            raise ValueError("a static KV cache is for generation and takes no padding mask.")
        B, H_kv, T, _ = k.shape
        if self.k is None or self.v is None:  # zeros: the masked slots are multiplied by 0, never NaN
            self.k = k.new_zeros(B, H_kv, l_max, k.shape[-1])
            self.v = v.new_zeros(B, H_kv, l_max, v.shape[-1])
        at = self.n + torch.arange(T, device=k.device)
        self.k.index_copy_(2, at, k)
        self.v.index_copy_(2, at, v)
        filled = torch.arange(l_max, device=k.device) < self.n + T
        return self.k, self.v, filled.expand(B, l_max)


class KVCache:
    """Keys and values of the positions seen so far, one `KVSlot` per attention layer (DInference with
    caching). ``length`` is the number of positions already processed; the model advances it after each call.
    Meant for inference: slots are written in place, which autograd cannot follow from one step to the next.
    """

    def __init__(self) -> None:
        self.layers: dict[str, KVSlot] = {}
        self.length: int | torch.Tensor = 0

    def slot(self, name: str) -> KVSlot:
        if name not in self.layers:
            self.layers[name] = self._new_slot()
        return self.layers[name]

    def _new_slot(self) -> KVSlot:
        return KVSlot()


class StaticKVCache(KVCache):
    """A KVCache with static shapes, for a compiled decode step (Algorithm 14): each self-attention layer
    keeps l_max slots (`StaticKVSlot`), allocated at its first use, and ``length`` is a 0-d tensor that the
    model advances in place. New positions are written at it and a key mask hides the slots after it, so one
    graph of a one-token step serves every position. For decoder-only models without padding."""

    def __init__(self, device: torch.device, position: torch.Tensor | None = None) -> None:
        super().__init__()
        self.length = self.position = torch.zeros((), dtype=torch.long, device=device) if position is None else position

    @classmethod
    def over(cls, position: torch.Tensor, kv: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> StaticKVCache:
        """A cache over tensors that exist: the 0-d ``position`` and each layer's (k, v) slots, written in place."""
        cache = cls(position.device, position)
        for name, (k, v) in kv.items():
            slot = cache.slot(name)
            slot.k, slot.v = k, v
        return cache

    def tensors(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's allocated (k, v) slots, in the order the layers first used them."""
        return {name: (slot.k, slot.v) for name, slot in self.layers.items() if slot.k is not None and slot.v is not None}

    def _new_slot(self) -> KVSlot:
        return StaticKVSlot(self.position)

    def reset(self) -> StaticKVCache:
        """Start again at position 0 (what the slots hold after it is masked until written again)."""
        self.position.zero_()
        return self


class MHAttention(FixedTables):
    """MHAttention(X, Z | 𝒲, Mask) of Algorithm 5: H heads of Algorithm 4, stacked and projected by W_o.

    The weights of all heads sit in one matrix each: W_q (H·d_attn × d_e), W_k (H_kv·d_attn × d_e),
    W_v (H_kv·d_mid × d_e), W_o (d_e × H·d_mid); head h uses key/value head ⌊h·H_kv/H⌋. ``nn.Linear``
    stores its weight as (out, in), which is the paper's column convention, so ``W_q.weight`` *is* W_q.

    ``name`` is its attention maps' ("self/0", "cross/1"); its hook points (`hooks`) are ``name/in`` (X),
    ``name/pattern`` (softmax(S/√d_attn), computed explicitly only while a hook watches it; otherwise the fused
    kernel), ``name/z`` (each head's Y^h, before W_o) and ``name/out``.
    """

    # the fixed tables of the positional variations (`FixedTables`), each registered only where it is used
    r: torch.Tensor  # relative: the sinusoids r_d of the distances d = 1-ℓ_max..ℓ_max-1, (2ℓ_max-1, d_e)
    slopes: torch.Tensor  # alibi: the head slopes m_h, (H,)
    rope_cos: torch.Tensor  # rope: cos and sin of the rotary angles of positions 0..ℓ_max-1, (ℓ_max, d_attn/2)
    rope_sin: torch.Tensor

    def __init__(self, cfg: ResolvedModelConfig, name: str, causal: bool, cross: bool = False) -> None:
        super().__init__()
        self.name = name
        (self.hook_in, self.hook_q, self.hook_k, self.hook_v, self.hook_scores, self.hook_mask, self.hook_pattern,
         self.hook_z, self.hook_out) = (HookPoint(f"{name}/{what}") for what in
                                        ("in", "q", "k", "v", "scores", "mask", "pattern", "z", "out"))
        self.H, self.H_kv, self.d_attn, self.d_mid, self.l_max = cfg.H, cfg.H_kv, cfg.d_attn, cfg.d_mid, cfg.l_max
        self.causal, self.cross = causal, cross
        self.positions = "none" if cross else cfg.positions  # cross-attention has no positional terms
        self.dropout, self.scale = cfg.dropout, scale(cfg.d_attn)
        self.W_q = nn.Linear(cfg.d_e, cfg.H * cfg.d_attn, bias=cfg.bias)
        self.W_k = nn.Linear(cfg.d_e, cfg.H_kv * cfg.d_attn, bias=cfg.bias)
        self.W_v = nn.Linear(cfg.d_e, cfg.H_kv * cfg.d_mid, bias=cfg.bias)
        self.W_o = nn.Linear(cfg.H * cfg.d_mid, cfg.d_e, bias=cfg.bias)
        if self.positions == "relative":  # Transformer-XL: W_r, u, v of each layer, r_d for d = 1-ℓ_max..ℓ_max-1
            self.W_r = nn.Linear(cfg.d_e, cfg.H * cfg.d_attn, bias=False)
            self.u = nn.Parameter(torch.zeros(cfg.H, cfg.d_attn))
            self.v = nn.Parameter(torch.zeros(cfg.H, cfg.d_attn))
            self.register_table("r", sinusoids(torch.arange(1 - cfg.l_max, cfg.l_max, device=CPU), cfg.d_e, cfg.position_base))
        elif self.positions == "alibi":
            self.register_table("slopes", alibi_slopes(cfg.H))
        elif self.positions == "rope":  # the rotary angles of positions 0..ℓ_max-1
            cos, sin = rope_angles(cfg.l_max, cfg.d_attn, cfg.position_base)
            self.register_table("rope_cos", cos)
            self.register_table("rope_sin", sin)

    def forward(self, X: torch.Tensor, Z: torch.Tensor | None = None, *, key_mask: torch.Tensor | None = None,
                cache: KVSlot | None = None) -> torch.Tensor:
        """X: (B, T_x, d_e) the tokens that query; Z: (B, T_z, d_e) the tokens attended to (None: Z = X).

        key_mask: (B, T_z) bool, False at padding. cache: this layer's slot of a KVCache.
        Returns Ṽ projected by W_o: (B, T_x, d_e).
        """
        X = self.hook_in(X)
        B, T_x, _ = X.shape
        past = cache.n if cache is not None else 0  # positions already cached (always 0 for cross-attention)
        if self.cross and cache is not None and cache.k is not None and cache.v is not None:
            # the encoder's keys and values, computed at the first call and kept
            q, k, v, key_mask = self.hook_q(self._heads(self.W_q(X), self.H)), cache.k, cache.v, cache.mask
        else:
            q, k, v = self._qkv(X, Z)
            q, k, v = self._heads(q, self.H), self._heads(k, self.H_kv), self._heads(v, self.H_kv)
            if self.positions == "rope":  # self-attention: Z = X at positions past..past+T_x-1
                cos, sin = rows(self.rope_cos, past, T_x), rows(self.rope_sin, past, T_x)
                q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
            if cache is not None and self.cross:
                cache.k, cache.v, cache.mask = k, v, key_mask
            elif cache is not None:
                k, v, key_mask = cache.append(k, v, key_mask, self.l_max)
        p_drop = self.dropout if self.training else 0.0
        explicit = bool(self.hook_pattern.hooks) and self.hook_pattern.watched()
        S = None
        scored = (bool(self.hook_scores.hooks) and self.hook_scores.watched()) or (
            bool(self.hook_mask.hooks) and self.hook_mask.watched())
        if explicit or scored:
            S = self._scores(q, k, past, key_mask, read_only=not explicit)
        if S is not None:
            A = self.hook_pattern(S.softmax(-1))  # Algorithm 4: softmax(S/√d_attn), each query's row sums to 1
            Y = F.dropout(A, p_drop, self.training) @ self._repeat(v)  # (B, H, T_x, d_mid)
        else:
            q, pos, allowed, is_causal = self._scores_bias(q, past, k.shape[2], key_mask, False)
            bias = _bias(pos, allowed, q)
            if bias is not None:  # SDPA's enable_gqa with a mask is its slow kernel
                k, v = self._repeat(k), self._repeat(v)
            Y = _fused_attention(q, k, v, bias, p_drop, is_causal, self.scale, k.shape[1] != self.H)
        Y = self.hook_z(Y.transpose(1, 2))  # (B, T_x, H, d_mid)
        return self.hook_out(self.W_o(Y.reshape(B, T_x, self.H * self.d_mid)))  # W_o [Y¹; …; Y^H] + b_o

    def hook_points(self) -> list[HookPoint]:
        """Its hook points in the order they run."""
        return [self.hook_in, self.hook_q, self.hook_k, self.hook_v, self.hook_scores, self.hook_mask,
                self.hook_pattern, self.hook_z, self.hook_out]

    def _qkv(self, X: torch.Tensor, Z: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of Algorithm 4, each (B, T, heads·d). Training self-attention (Z = X) does one product
        [W_q; W_k; W_v] X; without autograd (decoding a token at a time) three small products cost less than
        concatenating the weights on every call."""
        if Z is not None or not torch.is_grad_enabled():
            Z = X if Z is None else Z
            return self.W_q(X), self.W_k(Z), self.W_v(Z)
        Ws = (self.W_q, self.W_k, self.W_v)
        b = None if self.W_q.bias is None else torch.cat([W.bias for W in Ws])
        q, k, v = F.linear(X, torch.cat([W.weight for W in Ws]), b).split([W.out_features for W in Ws], -1)
        return q, k, v

    def _scores(self, q: torch.Tensor, k: torch.Tensor, past: int | torch.Tensor, key_mask: torch.Tensor | None,
                read_only: bool) -> torch.Tensor | None:
        """S/√d_attn with its positional terms (the ``scores`` point) plus the Mask's term (the ``mask`` point),
        (B, H, T_x, T_z); ``read_only``: None when the hooks replaced neither (the fused kernel then runs)."""
        q, pos, allowed, _ = self._scores_bias(q, past, k.shape[2], key_mask, True)
        S, M = (q @ self._repeat(k).transpose(-1, -2)) * self.scale, self._mask_term(q, k.shape[2], allowed)
        if pos is not None:
            S = S + pos
        S_given, M_given = self.hook_scores(S), self.hook_mask(M)
        if read_only and (S_given is S or torch.equal(S_given, S)) and (M_given is M or torch.equal(M_given, M)):
            return None
        return S_given + M_given

    def _repeat(self, t: torch.Tensor) -> torch.Tensor:
        """Grouped-query keys or values (B, H_kv, T, d) for each of the H query heads: head h reads ⌊h·H_kv/H⌋."""
        group = self.H // self.H_kv
        return t.repeat_interleave(group, 1) if group > 1 else t

    @staticmethod
    def _heads(t: torch.Tensor, n: int) -> torch.Tensor:
        """(B, T, n·d) -> (B, n, T, d): one slice per head."""
        return t.view(t.shape[0], t.shape[1], n, -1).transpose(1, 2)

    def _scores_bias(self, q: torch.Tensor, past: int | torch.Tensor, T_z: int, key_mask: torch.Tensor | None,
                     explicit: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, bool]:
        """The query actually dotted with the keys, the positional terms added to S/√d_attn, the Mask (True where
        query t_x may attend to key t_z), and whether the Mask is SDPA's own ``is_causal`` instead (no mask
        tensor, so CUDA can use FlashAttention).

        Queries are positions past..past+T_x-1, keys 0..T_z-1; ``past`` is a Python int, or a 0-d tensor (a
        `StaticKVCache`'s, which always brings a key mask), so nothing waits for the device.
        Returns (q', terms and Mask broadcastable to (B, H, T_x, T_z) or None, is_causal).
        """
        T_x = q.shape[2]
        causal = self.causal and T_x > 1  # Mask[t_z, t_x] = [t_z ≤ t_x] hides a key (a last query sees all)
        # is_causal aligns the mask top-left, which is the paper's Mask only without a cache (past = 0)
        if key_mask is None and self.positions not in ("alibi", "relative") and not (causal and (past or explicit)):
            return q, None, None, causal
        pos_q = past + torch.arange(T_x, device=q.device)[:, None]  # (T_x, 1)
        pos_k = torch.arange(T_z, device=q.device)  # (T_z,)
        bias: torch.Tensor | None = None
        if self.positions == "alibi":
            bias = -self.slopes.to(q.dtype)[:, None, None] * (pos_q - pos_k).abs().to(q.dtype)  # (H, T_x, T_z)
        elif self.positions == "relative":
            # Transformer-XL: S_ij = (q_i + u)ᵀk_j + (q_i + v)ᵀ W_r r_{i-j}, i - j from d_min to past+T_x-1
            d_min = past + 1 - T_z
            r = self.r[d_min + self.l_max - 1:past + T_x + self.l_max - 1]  # r_{d_min}, …: (n_d, d_e)
            Rk = self.W_r(r).view(-1, self.H, self.d_attn).transpose(0, 1)  # (H, n_d, d_attn)
            BD = (q + self.v.to(q.dtype)[:, None, :]) @ Rk.transpose(-1, -2)  # (B, H, T_x, n_d)
            BD = BD.gather(-1, (pos_q - pos_k - d_min).expand(*BD.shape[:2], T_x, T_z))  # (B, H, T_x, T_z)
            bias = BD * self.scale
            q = q + self.u.to(q.dtype)[:, None, :]
        allowed = pos_k <= pos_q if causal else None
        if key_mask is not None:
            km = key_mask[:, None, None, :]  # (B, 1, 1, T_z)
            if not self.cross:  # a padding query still sees itself, so no row is empty
                km = km | (pos_k == pos_q)
            allowed = km if allowed is None else allowed & km
        return q, bias, allowed, False

    def _mask_term(self, q: torch.Tensor, T_z: int, allowed: torch.Tensor | None) -> torch.Tensor:
        """The Mask as the term added to the scores, (B, 1, T_x, T_z): 0 where allowed, -∞ where not."""
        M = q.new_zeros(q.shape[0], 1, q.shape[2], T_z)
        return M if allowed is None else M.masked_fill(~allowed, float("-inf"))


def _bias(pos: torch.Tensor | None, allowed: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor | None:
    """The additive terms of S/√d_attn for the fused kernel: the positional terms, the Mask as -∞."""
    if allowed is None:
        return pos
    neg = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, float("-inf"))
    return neg if pos is None else pos + neg
