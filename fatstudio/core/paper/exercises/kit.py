"""The exercises' reference: each algorithm with the signature its exercise asks for, built on the literal float64
reference (`paper.reference`). A learner may import these in a solution that needs the others (the decoder's
forward calls layer_norm and mh_attention), and the checker compares the learner's function with them.

Vectors are columns, matrices hold one token per column (X: d × ℓ), a Mask is a bool matrix ℓ_z × ℓ_x with
Mask[t_z, t_x] true where query t_x may attend to key t_z. Indices are 0-based: position t here is the paper's t+1.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from .. import reference as ref

Tensor = torch.Tensor
Forward = Callable[[list[int], dict[str, Any]], Tensor]  # (x, θ) -> P: N_V × ℓ


def token_embedding(v: int, W_e: Tensor) -> Tensor:
    return ref.token_embedding(v, W_e)


def positional_embedding(t: int, W_p: Tensor) -> Tensor:
    return ref.positional_embedding(t, W_p)


def embed(x: list[int], W_e: Tensor, W_p: Tensor) -> Tensor:
    return torch.stack([ref.token_embedding(v, W_e) + ref.positional_embedding(t, W_p) for t, v in enumerate(x)], 1)


def _mask_fn(Mask: Tensor) -> ref.Mask:
    return lambda t_z, t_x: bool(Mask[t_z, t_x])


def _qkv(W_q: Tensor, b_q: Tensor, W_k: Tensor, b_k: Tensor, W_v: Tensor, b_v: Tensor) -> dict[str, Any]:
    return {"W_q": W_q, "b_q": b_q, "W_k": W_k, "b_k": b_k, "W_v": W_v, "b_v": b_v}


def basic_attention(e: Tensor, Z: Tensor, W_q: Tensor, b_q: Tensor, W_k: Tensor, b_k: Tensor, W_v: Tensor,
                    b_v: Tensor) -> Tensor:
    """Algorithm 3 is Algorithm 4 for one query that sees every key."""
    ones = torch.ones(Z.shape[1], 1, dtype=torch.bool)
    return attention(e[:, None], Z, W_q, b_q, W_k, b_k, W_v, b_v, ones)[:, 0]


def attention(X: Tensor, Z: Tensor, W_q: Tensor, b_q: Tensor, W_k: Tensor, b_k: Tensor, W_v: Tensor, b_v: Tensor,
              Mask: Tensor) -> Tensor:
    """`reference.attention` in matrix form (a test holds them equal): Ṽ = V · softmax(S/√d_attn) down each column,
    S = KᵀQ with -∞ where the Mask is 0."""
    Q, K, V = W_q @ X + b_q[:, None], W_k @ Z + b_k[:, None], W_v @ Z + b_v[:, None]
    S = (K.T @ Q).masked_fill(~Mask, -math.inf)
    return V @ torch.softmax(S / math.sqrt(W_q.shape[0]), 0)


def mh_attention(X: Tensor, Z: Tensor, W_q: Tensor, b_q: Tensor, W_k: Tensor, b_k: Tensor, W_v: Tensor,
                 b_v: Tensor, W_o: Tensor, b_o: Tensor, H: int, Mask: Tensor) -> Tensor:
    d_attn, d_mid = W_q.shape[0] // H, W_v.shape[0] // H
    W = {**_qkv(W_q, b_q, W_k, b_k, W_v, b_v), "W_o": W_o, "b_o": b_o, "H": H, "H_kv": H, "d_attn": d_attn,
         "d_mid": d_mid}
    return ref.mh_attention(X, Z, W, _mask_fn(Mask), {"kind": "none"})[0]


def layer_norm(e: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """`reference.layer_norm` with torch's root, so that a gradient flows through the variance too."""
    m = e.sum() / len(e)
    v = ((e - m) ** 2).sum() / len(e)
    return (e - m) / torch.sqrt(v + eps) * gamma + beta


def unembedding(e: Tensor, W_u: Tensor) -> Tensor:
    return ref.unembedding(e, W_u)


def gelu(x: Tensor) -> Tensor:
    return ref.gelu(x)


def softmax(s: Tensor) -> Tensor:
    return ref.softmax(s)


def layer_norm_columns(X: Tensor, gamma: Tensor, beta: Tensor) -> Tensor:
    return torch.stack([layer_norm(X[:, t], gamma, beta) for t in range(X.shape[1])], 1)


def unidirectional_mask(l: int) -> Tensor:
    """Mask[t_z, t_x] = [t_z ≤ t_x]."""
    return torch.ones(l, l, dtype=torch.bool).triu()


def dtransformer(x: list[int], theta: dict[str, Any]) -> Tensor:
    """Algorithm 10 with pre-LN layer norms, GELU and learned positions (GPT-2's choices)."""
    X = embed(x, theta["W_e"], theta["W_p"])
    Mask = unidirectional_mask(len(x))
    for layer in theta["layers"]:
        Xn = layer_norm_columns(X, layer["gamma1"], layer["beta1"])
        X = X + mh_attention(Xn, Xn, layer["W_q"], layer["b_q"], layer["W_k"], layer["b_k"], layer["W_v"],
                             layer["b_v"], layer["W_o"], layer["b_o"], theta["H"], Mask)
        Xn = layer_norm_columns(X, layer["gamma2"], layer["beta2"])
        X = X + layer["W_mlp2"] @ gelu(layer["W_mlp1"] @ Xn + layer["b_mlp1"][:, None]) + layer["b_mlp2"][:, None]
    X = layer_norm_columns(X, theta["gamma"], theta["beta"])
    return torch.stack([unembedding(X[:, t], theta["W_u"]) for t in range(X.shape[1])], 1)


def etransformer(x: list[int], theta: dict[str, Any]) -> Tensor:
    """Algorithm 9 with post-LN layer norms, GELU and learned positions (BERT's choices)."""
    X = embed(x, theta["W_e"], theta["W_p"])
    Mask = torch.ones(len(x), len(x), dtype=torch.bool)
    for layer in theta["layers"]:
        X = layer_norm_columns(X + mh_attention(X, X, layer["W_q"], layer["b_q"], layer["W_k"], layer["b_k"],
                                                layer["W_v"], layer["b_v"], layer["W_o"], layer["b_o"], theta["H"],
                                                Mask), layer["gamma1"], layer["beta1"])
        X = layer_norm_columns(X + layer["W_mlp2"] @ gelu(layer["W_mlp1"] @ X + layer["b_mlp1"][:, None])
                               + layer["b_mlp2"][:, None], layer["gamma2"], layer["beta2"])
    X = layer_norm_columns(gelu(theta["W_f"] @ X + theta["b_f"][:, None]), theta["gamma"], theta["beta"])
    return torch.stack([unembedding(X[:, t], theta["W_u"]) for t in range(X.shape[1])], 1)


def d_loss(x: list[int], P: Tensor) -> Tensor:
    """Algorithm 13's loss: -Σ_{t=1}^{ℓ-1} log P[x[t+1], t]."""
    return -sum((torch.log(P[x[t + 1], t]) for t in range(len(x) - 1)), torch.zeros((), dtype=P.dtype))


def e_loss(x: list[int], P: Tensor, masked: list[int]) -> Tensor:
    """Algorithm 12's loss: -Σ_{t ∈ T̃} log P[x[t], t]."""
    return -sum((torch.log(P[x[t], t]) for t in masked), torch.zeros((), dtype=P.dtype))


def training_step(theta: dict[str, Tensor], x: list[int], eta: float, forward: Forward) -> dict[str, Tensor]:
    """One step of Algorithm 13: θ ← θ - η·∇loss(θ)."""
    theta = {k: v.detach().clone().requires_grad_() for k, v in theta.items()}
    d_loss(x, forward(x, theta)).backward()
    return {k: (v - eta * v.grad).detach() for k, v in theta.items() if v.grad is not None}


def sampling_distribution(p: Tensor, tau: float, k: int) -> Tensor:
    """Algorithm 14's y ~ p^{1/τ}, restricted to the k most probable tokens: q ∝ p^{1/τ} on them, 0 elsewhere."""
    q = p ** (1 / tau)
    q[torch.argsort(p, descending=True, stable=True)[k:]] = 0
    return q / q.sum()


def dinference(x: list[int], forward: Callable[[list[int]], Tensor], l_gen: int,
               sample: Callable[[Tensor], int]) -> list[int]:
    """Algorithm 14: for i = 1..ℓ_gen: P ← DTransformer(x); p ← P[:, ℓ]; y ~ p; x ← [x, y]. Returns y = x[ℓ+1:]."""
    x = list(x)
    l = len(x)
    for _ in range(l_gen):
        x.append(int(sample(forward(x)[:, -1])))
    return x[l:]


def bpe_merges(text: str, n: int) -> list[tuple[str, str]]:
    """Byte-pair encoding's training: start from the characters of each word (split on spaces); n times merge the
    most frequent adjacent pair (ties: the pair seen first). Returns the merges in order."""
    words = [list(w) for w in text.split()]
    merges: list[tuple[str, str]] = []
    for _ in range(n):
        counts = Counter((a, b) for w in words for a, b in zip(w, w[1:]))
        if not counts:
            break
        best = max(counts.values())
        pair = next(p for p in counts if counts[p] == best)  # a Counter keeps the order pairs were first seen
        merges.append(pair)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == pair:
                    w[i:i + 2] = [w[i] + w[i + 1]]
                i += 1
    return merges
