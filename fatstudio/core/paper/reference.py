"""The literal reference: Algorithms 1-10 (and the losses of 11-13) as the paper writes them.

float64, one sequence at a time, vectors as columns, loops where the paper loops, no batching, no fusing,
no caching. It exists to check the fast model (`fatstudio.core.model`): `ReferenceTransformer(cfg, params)`
takes the fast model's weights (``{name: tensor}``, e.g. a state dict) and turns them into the paper's
matrices (``W_e`` is d_e × N_V, etc.). Indices are 0-based; a position t here is the paper's t+1.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..config import ModelConfig
from ..names import MapName, StackKind

Tensor = torch.Tensor
F64 = torch.float64
Mask = Callable[[int, int], bool]  # Mask[t_z, t_x]: whether query t_x may attend to key t_z
Extra = TypeVar("Extra")  # what a sublayer returns besides its output (attention weights, or None)


# ---- Algorithms 1, 2, 7: embeddings --------------------------------------------------------------------
def token_embedding(v: int, W_e: Tensor) -> Tensor:
    """Algorithm 1: e = W_e[:, v]."""
    return W_e[:, v]


def positional_embedding(t: int, W_p: Tensor) -> Tensor:
    """Algorithm 2: e_p = W_p[:, t]."""
    return W_p[:, t]


def sinusoidal_W_p(l_max: int, d_e: int, b: float) -> Tensor:
    """W_p[2i-1, t] = sin(t / b^{2i/d_e}), W_p[2i, t] = cos(t / b^{2i/d_e}), 0 < i ≤ d_e/2, t = 1..ℓ_max."""
    return torch.stack([sinusoid(t, d_e, b) for t in range(1, l_max + 1)], 1)


@functools.lru_cache(maxsize=4096)
def sinusoid(t: int, d: int, b: float) -> Tensor:
    """The column r_t of the sinusoidal table for any (possibly negative) integer t (cached: Transformer-XL
    asks for r_{i-j} at every query and key; read it, never change it)."""
    r = torch.zeros(d, dtype=F64)
    for i in range(1, d // 2 + 1):
        r[2 * i - 2] = math.sin(t / b ** (2 * i / d))
        r[2 * i - 1] = math.cos(t / b ** (2 * i / d))
    return r


def softmax(s: Tensor) -> Tensor:
    """softmax of a vector, -∞ entries giving 0."""
    e = torch.exp(s - s.max())
    return e / e.sum()


def unembedding(e: Tensor, W_u: Tensor, b_u: Tensor | None = None) -> Tensor:
    """Algorithm 7: p = softmax(W_u e), or softmax(W_u e + b_u) with BERT's bias."""
    return softmax(W_u @ e if b_u is None else W_u @ e + b_u)


# ---- Algorithm 6 and RMSnorm ---------------------------------------------------------------------------
def layer_norm(e: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
    """Algorithm 6: m = mean(e), v = mean((e-m)²), ê = (e-m)/√(v+ε) ⊙ γ + β."""
    m = e.sum() / len(e)
    v = ((e - m) ** 2).sum() / len(e)
    return (e - m) / math.sqrt(v + eps) * gamma + beta


def rms_norm(e: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """RMSnorm: ê = e/√(mean(e²)+ε) ⊙ γ."""
    return e / math.sqrt((e ** 2).sum() / len(e) + eps) * gamma


# ---- activations -----------------------------------------------------------------------------------------
def relu(x: Tensor) -> Tensor:
    return torch.where(x > 0, x, torch.zeros_like(x))


def gelu(x: Tensor) -> Tensor:
    """GELU(x) = x·Φ(x), Φ the standard normal CDF."""
    return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def gelu_tanh(x: Tensor) -> Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def swish(x: Tensor) -> Tensor:
    return x / (1 + torch.exp(-x))


# ---- Algorithms 3-5: attention ---------------------------------------------------------------------------
def rotate(x: Tensor, t: int, b: float) -> Tensor:
    """RoPE: rotate each pair (x_{2i}, x_{2i+1}) of a column by the angle t·b^{-2i/d}."""
    y = x.clone()
    for i in range(len(x) // 2):
        a = t * b ** (-2 * i / len(x))
        y[2 * i] = math.cos(a) * x[2 * i] - math.sin(a) * x[2 * i + 1]
        y[2 * i + 1] = math.sin(a) * x[2 * i] + math.cos(a) * x[2 * i + 1]
    return y


def attention(X: Tensor, Z: Tensor, W: dict[str, Any], mask: Mask, pos: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """Algorithm 4: Ṽ = V · softmax(S/√d_attn) with S = KᵀQ and S[t_z, t_x] = -∞ where Mask[t_z, t_x] = 0.

    X: d_x × ℓ_x, Z: d_z × ℓ_z. Returns (Ṽ: d_mid × ℓ_x, A = softmax(S/√d_attn): ℓ_z × ℓ_x, columns sum to 1).
    ``pos`` names the positional variation acting on the scores: rope, alibi (slope m) or relative (W_r, u, v).
    """
    l_x, l_z = X.shape[1], Z.shape[1]
    Q = W["W_q"] @ X + W["b_q"][:, None]
    K = W["W_k"] @ Z + W["b_k"][:, None]
    V = W["W_v"] @ Z + W["b_v"][:, None]
    d_attn = Q.shape[0]
    if pos["kind"] == "rope":
        Q = torch.stack([rotate(Q[:, t], t, pos["b"]) for t in range(l_x)], 1)
        K = torch.stack([rotate(K[:, t], t, pos["b"]) for t in range(l_z)], 1)
    S = torch.zeros(l_z, l_x, dtype=F64)
    for t_z in range(l_z):
        for t_x in range(l_x):
            S[t_z, t_x] = Q[:, t_x] @ K[:, t_z]
            if pos["kind"] == "relative":  # Transformer-XL: (q+u)ᵀk + (q+v)ᵀ W_r r_{i-j}
                r = W["W_r"] @ sinusoid(t_x - t_z, W["W_r"].shape[1], pos["b"])
                S[t_z, t_x] += W["u"] @ K[:, t_z] + (Q[:, t_x] + W["v"]) @ r
    S = S / math.sqrt(d_attn)
    if pos["kind"] == "alibi":
        for t_z in range(l_z):
            for t_x in range(l_x):
                S[t_z, t_x] -= pos["m"] * abs(t_x - t_z)
    for t_z in range(l_z):
        for t_x in range(l_x):
            if not mask(t_z, t_x):
                S[t_z, t_x] = -math.inf
    A = torch.stack([softmax(S[:, t_x]) for t_x in range(l_x)], 1)  # softmax over t_z, column by column
    return V @ A, A


def mh_attention(X: Tensor, Z: Tensor, W: dict[str, Any], mask: Mask, pos: dict[str, Any]) -> tuple[Tensor, list[Tensor]]:
    """Algorithm 5: Y^h = Attention(X, Z | W_qkv^h, Mask) for h ∈ [H]; return W_o [Y¹; …; Y^H] + b_o 1ᵀ."""
    H, H_kv, d_attn, d_mid = W["H"], W["H_kv"], W["d_attn"], W["d_mid"]
    Ys, As = [], []
    for h in range(H):
        g = h * H_kv // H  # the key/value head that query head h shares
        Wh = {"W_q": W["W_q"][h * d_attn:(h + 1) * d_attn], "b_q": W["b_q"][h * d_attn:(h + 1) * d_attn],
              "W_k": W["W_k"][g * d_attn:(g + 1) * d_attn], "b_k": W["b_k"][g * d_attn:(g + 1) * d_attn],
              "W_v": W["W_v"][g * d_mid:(g + 1) * d_mid], "b_v": W["b_v"][g * d_mid:(g + 1) * d_mid]}
        pos_h = dict(pos)
        if pos["kind"] == "relative":
            Wh.update(W_r=W["W_r"][h * d_attn:(h + 1) * d_attn], u=W["u"][h], v=W["v"][h])
        if pos["kind"] == "alibi":
            pos_h["m"] = 2.0 ** (-8.0 * (h + 1) / H)
        Y_h, A_h = attention(X, Z, Wh, mask, pos_h)
        Ys.append(Y_h)
        As.append(A_h)
    Y = torch.cat(Ys, 0)  # (H·d_mid) × ℓ_x
    return W["W_o"] @ Y + W["b_o"][:, None], As


def bidirectional(t_z: int, t_x: int) -> bool:
    return True


def unidirectional(t_z: int, t_x: int) -> bool:
    return t_z <= t_x


# ---- Algorithms 8-10 -------------------------------------------------------------------------------------
class ReferenceTransformer:
    """EDTransformer / ETransformer / DTransformer (Algorithms 8, 9, 10) over the paper's matrices.

    ``forward`` returns (P: N_V × ℓ_x with P[:, t] the distribution predicted at t, attention dict with
    the same keys as the fast model, each a list over heads of ℓ_x × ℓ_z row-major matrices).
    """

    def __init__(self, cfg: ModelConfig, params: dict[str, Tensor]) -> None:
        self.cfg = cfg.resolved()
        self.p = {k: v.detach().to("cpu", F64) for k, v in params.items()}
        c = self.cfg
        self.W_e = self.p["embed.W_e.weight"].T  # d_e × N_V
        self.W_p: Tensor | None
        if c.positions == "learned":
            self.W_p = self.p["embed.W_p.weight"].T  # d_e × ℓ_max
        elif c.positions == "sinusoidal":
            self.W_p = sinusoidal_W_p(c.l_max, c.d_e, c.position_base)
        else:
            self.W_p = None

    def _get(self, name: str, size: int) -> Tensor:
        """A parameter by name; an absent bias is a zero vector (bias=False)."""
        if name in self.p:
            return self.p[name]
        return torch.zeros(size, dtype=F64)

    def _norm(self, prefix: str, e: Tensor) -> Tensor:
        if self.cfg.norm == "layer":
            return layer_norm(e, self.p[f"{prefix}.gamma"], self.p[f"{prefix}.beta"], self.cfg.norm_eps)
        return rms_norm(e, self.p[f"{prefix}.gamma"], self.cfg.norm_eps)

    def _norm_columns(self, prefix: str, X: Tensor) -> Tensor:
        return torch.stack([self._norm(prefix, X[:, t]) for t in range(X.shape[1])], 1)

    def _attn_weights(self, prefix: str, cross: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        c = self.cfg
        W: dict[str, Any] = {"H": c.H, "H_kv": c.H_kv, "d_attn": c.d_attn, "d_mid": c.d_mid}
        for n, size in (("q", c.H * c.d_attn), ("k", c.H_kv * c.d_attn), ("v", c.H_kv * c.d_mid), ("o", c.d_e)):
            W[f"W_{n}"] = self.p[f"{prefix}.W_{n}.weight"]
            W[f"b_{n}"] = self._get(f"{prefix}.W_{n}.bias", size)
        kind = "none" if cross else c.positions
        if kind == "relative":
            W.update(W_r=self.p[f"{prefix}.W_r.weight"], u=self.p[f"{prefix}.u"], v=self.p[f"{prefix}.v"])
        return W, {"kind": kind, "b": c.position_base}

    def _mlp(self, prefix: str, e: Tensor) -> Tensor:
        c = self.cfg
        h = self.p[f"{prefix}.W_mlp1.weight"] @ e + self._get(f"{prefix}.W_mlp1.bias", c.d_mlp)
        if c.activation == "swiglu":
            g = self.p[f"{prefix}.W_gate.weight"] @ e + self._get(f"{prefix}.W_gate.bias", c.d_mlp)
            h = swish(g) * h
        else:
            h = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}[c.activation](h)
        return self.p[f"{prefix}.W_mlp2.weight"] @ h + self._get(f"{prefix}.W_mlp2.bias", c.d_e)

    def _sublayer(self, X: Tensor, norm: str, f: Callable[[Tensor], tuple[Tensor, Extra]]) -> tuple[Tensor, Extra]:
        """Pre-LN: X̃ ← norm(X); X ← X + f(X̃). Post-LN: X ← norm(X + f(X))."""
        if self.cfg.norm_position == "pre":
            Y, A = f(self._norm_columns(norm, X))
            return X + Y, A
        Y, A = f(X)
        return self._norm_columns(norm, X + Y), A

    def _layer(self, prefix: str, X: Tensor, mask: Mask,
               Z: Tensor | None = None) -> tuple[Tensor, list[Tensor], list[Tensor] | None]:
        """One layer l of Algorithms 8-10."""
        W, pos = self._attn_weights(f"{prefix}.attn", cross=False)
        X, A_self = self._sublayer(X, f"{prefix}.norm_attn", lambda Xn: mh_attention(Xn, Xn, W, mask, pos))
        A_cross: list[Tensor] | None = None
        if Z is not None:
            Wc, posc = self._attn_weights(f"{prefix}.cross", cross=True)
            X, A_cross = self._sublayer(X, f"{prefix}.norm_cross",
                                        lambda Xn: mh_attention(Xn, Z, Wc, bidirectional, posc))
        X, _ = self._sublayer(X, f"{prefix}.norm_mlp", lambda Xn: (
            torch.stack([self._mlp(f"{prefix}.mlp", Xn[:, t]) for t in range(Xn.shape[1])], 1), None))
        return X, A_self, A_cross

    def _embed(self, x: list[int]) -> Tensor:
        """Equation 1: e_t = W_e[:, x[t]] + W_p[:, t]."""
        cols = []
        for t, v in enumerate(x):
            e = token_embedding(v, self.W_e)
            if self.W_p is not None:
                e = e + positional_embedding(t, self.W_p)
            if self.cfg.embed_norm:  # BERT's norm of the initial embedding
                e = self._norm("embed.norm", e)
            cols.append(e)
        return torch.stack(cols, 1)

    def _stack(self, prefix: str, kind: StackKind, n: int, X: Tensor, mask: Mask, attn: dict[str, list[Tensor]],
               Z: Tensor | None = None) -> Tensor:
        for l in range(n):
            X, A, Ac = self._layer(f"{prefix}.{l}", X, mask, Z)
            attn[str(MapName(kind, l))] = [a.T for a in A]
            if Ac is not None:
                attn[str(MapName("cross", l))] = [a.T for a in Ac]
        return X

    def _final(self, name: str, X: Tensor) -> Tensor:
        return self._norm_columns(name, X) if self.cfg.norm_position == "pre" else X

    def _probabilities(self, X: Tensor, W_u: Tensor) -> Tensor:
        b_u = self.p.get("unembed.b_u")
        return torch.stack([unembedding(X[:, t], W_u, b_u) for t in range(X.shape[1])], 1)

    def forward(self, x: list[int], z: list[int] | None = None) -> tuple[Tensor, dict[str, list[Tensor]]]:
        c = self.cfg
        attn: dict[str, list[Tensor]] = {}
        W_u = self.p["unembed.W_u.weight"]
        if c.arch in ("gpt", "gopher"):  # Algorithm 10
            X = self._stack("layers", "self", c.L, self._embed(x), unidirectional, attn)
            return self._probabilities(self._final("norm_final", X), W_u), attn
        if c.arch == "bert":  # Algorithm 9
            X = self._final("norm_final", self._stack("layers", "self", c.L, self._embed(x), bidirectional, attn))
            X = self.features(X)
            return self._probabilities(X, W_u), attn
        # Algorithm 8
        if z is None:
            raise ValueError("an 'edt' model needs the source sequence z.")
        Z = self._final("norm_enc", self._stack("encoder", "enc", c.L_enc, self._embed(z), bidirectional, attn))
        X = self._stack("decoder", "dec", c.L_dec, self._embed(x), unidirectional, attn, Z=Z)
        return self._probabilities(self._final("norm_dec", X), W_u), attn

    def features(self, X: Tensor) -> Tensor:
        """Algorithm 9's last lines: X ← GELU(W_f X + b_f 1ᵀ); X ← layer_norm(X | γ, β)."""
        X = gelu(self.p["W_f.weight"] @ X + self.p["W_f.bias"][:, None])
        return self._norm_columns("norm_f", X)

    def class_probabilities(self, x: list[int]) -> Tensor:
        """P(c | x) from the first position's final vector (the class head of paper §3)."""
        c = self.cfg
        attn: dict[str, list[Tensor]] = {}
        X = self._final("norm_final", self._stack("layers", "self", c.L, self._embed(x), bidirectional, attn))
        e = self.features(X)[:, 0]
        return softmax(self.p["class_head.weight"] @ e + self.p["class_head.bias"])


# ---- the losses of Algorithms 11-13 ----------------------------------------------------------------------
def d_loss(ref: ReferenceTransformer, x: list[int]) -> float:
    """Algorithm 13: loss = -Σ_{t=1}^{ℓ-1} log P[x[t+1], t]."""
    P, _ = ref.forward(x)
    return -sum(math.log(P[x[t + 1], t]) for t in range(len(x) - 1))


def ed_loss(ref: ReferenceTransformer, z: list[int], x: list[int]) -> float:
    """Algorithm 11: loss = -Σ_{t=1}^{ℓ-1} log P[x[t+1], t] with P = EDTransformer(z, x)."""
    P, _ = ref.forward(x, z)
    return -sum(math.log(P[x[t + 1], t]) for t in range(len(x) - 1))


def e_loss(ref: ReferenceTransformer, x_masked: list[int], x: list[int], masked: list[int]) -> float:
    """Algorithm 12: loss = -Σ_{t∈T̃} log P[x[t], t] with P = ETransformer(x̃)."""
    P, _ = ref.forward(x_masked)
    return -sum(math.log(P[x[t], t]) for t in masked)
