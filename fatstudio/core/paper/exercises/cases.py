"""The cases each exercise is checked on, one function per exercise named as it: random inputs, the mask cases,
and the model in focus's own weights where they fit the exercise (`Weights`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...config import ResolvedModelConfig
from . import kit

Tensor = torch.Tensor
F64 = torch.float64


@dataclass(frozen=True)
class Weights:
    """The model in focus: its configuration and its parameters in float64 (``{name: tensor}``, a state dict)."""

    cfg: ResolvedModelConfig
    p: dict[str, Tensor]

    def like(self, arch: str) -> bool:
        """Whether it is the exercises' `kit.dtransformer` (``arch`` "gpt": GPT-2's choices) or `kit.etransformer`
        ("bert": BERT's), every layer here (`sandbox.save_weights`)."""
        c = self.cfg
        return (c.arch == arch and c.norm == "layer" and c.norm_position == ("pre" if arch == "gpt" else "post")
                and c.activation == "gelu" and c.positions == "learned" and c.H_kv == c.H and not c.embed_norm
                and not c.unembed_bias and f"layers.{c.L - 1}.norm_mlp.gamma" in self.p)

    def get(self, name: str, size: int) -> Tensor:
        return self.p[name] if name in self.p else torch.zeros(size, dtype=F64)

    def attn(self, l: int) -> dict[str, Tensor]:
        """Layer l's self-attention weights W_q, b_q, … W_o, b_o (all heads stacked)."""
        c, pre = self.cfg, f"layers.{l}.attn"
        sizes = {"q": c.H * c.d_attn, "k": c.H_kv * c.d_attn, "v": c.H_kv * c.d_mid, "o": c.d_e}
        return {k: v for n, size in sizes.items() for k, v in
                ((f"W_{n}", self.p[f"{pre}.W_{n}.weight"]), (f"b_{n}", self.get(f"{pre}.W_{n}.bias", size)))}

    def theta(self) -> dict[str, Any]:
        """θ of `kit.dtransformer` or `kit.etransformer` (a model `like` either)."""
        c, p = self.cfg, self.p
        layers = []
        for l in range(c.L):
            pre = f"layers.{l}"
            layers.append({**self.attn(l), "gamma1": p[f"{pre}.norm_attn.gamma"], "beta1": p[f"{pre}.norm_attn.beta"],
                           "gamma2": p[f"{pre}.norm_mlp.gamma"], "beta2": p[f"{pre}.norm_mlp.beta"],
                           "W_mlp1": p[f"{pre}.mlp.W_mlp1.weight"], "b_mlp1": self.get(f"{pre}.mlp.W_mlp1.bias", c.d_mlp),
                           "W_mlp2": p[f"{pre}.mlp.W_mlp2.weight"], "b_mlp2": self.get(f"{pre}.mlp.W_mlp2.bias", c.d_e)})
        final = "norm_f" if c.arch == "bert" else "norm_final"
        theta = {"W_e": p["embed.W_e.weight"].T, "W_p": p["embed.W_p.weight"].T, "W_u": p["unembed.W_u.weight"],
                 "gamma": p[f"{final}.gamma"], "beta": p[f"{final}.beta"], "H": c.H, "layers": layers}
        return theta | ({"W_f": p["W_f.weight"], "b_f": p["W_f.bias"]} if c.arch == "bert" else {})

    def X(self) -> Tensor:
        """The first ℓ ≤ 6 embeddings of a token sequence, d_e × ℓ: an input with the model's own statistics."""
        x = [(7 * t + 1) % self.cfg.vocab_size for t in range(min(6, self.cfg.l_max))]
        X = self.p["embed.W_e.weight"][x].T
        return X + self.p["embed.W_p.weight"][:len(x)].T if "embed.W_p.weight" in self.p else X


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: what it is (``label``) and its arguments."""

    label: str
    args: tuple[Any, ...]


def _rand(g: torch.Generator, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=g, dtype=F64)


def _ids(g: torch.Generator, n: int, N_V: int) -> list[int]:
    return torch.randint(0, N_V, (n,), generator=g).tolist()


def _random_model(g: torch.Generator, *, L: int = 2, d_e: int = 8, H: int = 2, N_V: int = 11) -> dict[str, Any]:
    """θ of a small random `kit.dtransformer`."""
    d_mlp = 2 * d_e
    layers = [{"W_q": _rand(g, d_e, d_e), "b_q": _rand(g, d_e), "W_k": _rand(g, d_e, d_e), "b_k": _rand(g, d_e),
               "W_v": _rand(g, d_e, d_e), "b_v": _rand(g, d_e), "W_o": _rand(g, d_e, d_e) / 3, "b_o": _rand(g, d_e),
               "gamma1": 1 + _rand(g, d_e) / 5, "beta1": _rand(g, d_e) / 5, "gamma2": 1 + _rand(g, d_e) / 5,
               "beta2": _rand(g, d_e) / 5, "W_mlp1": _rand(g, d_mlp, d_e) / 3, "b_mlp1": _rand(g, d_mlp),
               "W_mlp2": _rand(g, d_e, d_mlp) / 3, "b_mlp2": _rand(g, d_e)} for _ in range(L)]
    return {"W_e": _rand(g, d_e, N_V), "W_p": _rand(g, d_e, 8), "W_u": _rand(g, N_V, d_e), "gamma": 1 + _rand(g, d_e) / 5,
            "beta": _rand(g, d_e) / 5, "H": H, "layers": layers}


def _masks(l_z: int, l_x: int) -> list[tuple[str, Tensor]]:
    """The mask cases: bidirectional, unidirectional (square) and one that hides different keys per query."""
    out = [("bidirectional Mask (every entry 1)", torch.ones(l_z, l_x, dtype=torch.bool))]
    if l_z == l_x:
        out.append(("unidirectional Mask (Mask[t_z, t_x] = [t_z ≤ t_x])", kit.unidirectional_mask(l_x)))
    ragged = torch.ones(l_z, l_x, dtype=torch.bool)
    for t_x in range(l_x):
        ragged[:t_x % l_z, t_x] = False  # query t_x sees keys t_x mod ℓ_z … ℓ_z-1: a different count each
    out.append(("a Mask that hides the first t_x keys from query t_x", ragged))
    return out


# ---- Algorithms 1, 2 and eq. 1 ---------------------------------------------------------------------------------
def token_embedding(g: torch.Generator, w: Weights | None) -> list[Case]:
    W_e = _rand(g, 5, 9)
    out = [Case(f"random W_e (5 × 9), v = {v}", (v, W_e)) for v in (0, 4, 8)]
    if w is not None:
        out.append(Case("the model in focus's W_e, v = 1", (1, w.p["embed.W_e.weight"].T)))
    return out


def positional_embedding(g: torch.Generator, w: Weights | None) -> list[Case]:
    W_p = _rand(g, 4, 7)
    out = [Case(f"random W_p (4 × 7), t = {t}", (t, W_p)) for t in (0, 3, 6)]
    if w is not None and "embed.W_p.weight" in w.p:
        out.append(Case("the model in focus's W_p, t = 2", (2, w.p["embed.W_p.weight"].T)))
    return out


def embed(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case("random W_e (6 × 10), W_p (6 × 8), ℓ = 5", (_ids(g, 5, 10), _rand(g, 6, 10), _rand(g, 6, 8)))]
    if w is not None and "embed.W_p.weight" in w.p:
        out.append(Case("the model in focus's W_e and W_p", (_ids(g, 4, w.cfg.vocab_size), w.p["embed.W_e.weight"].T,
                                                              w.p["embed.W_p.weight"].T)))
    return out


# ---- Algorithms 3-5 ----------------------------------------------------------------------------------------
def _head(g: torch.Generator, d_x: int, d_z: int, d_attn: int, d_out: int) -> tuple[Tensor, ...]:
    return (_rand(g, d_attn, d_x), _rand(g, d_attn), _rand(g, d_attn, d_z), _rand(g, d_attn), _rand(g, d_out, d_z),
            _rand(g, d_out))


def _focus_head(w: Weights) -> tuple[Tensor, Tensor, tuple[Tensor, ...]] | None:
    """The model in focus's first layer, head 0, and its embeddings X (None: its attention has positional terms)."""
    if w.cfg.positions not in ("learned", "sinusoidal", "none") or "layers.0.attn.W_q.weight" not in w.p:
        return None
    a, c = w.attn(0), w.cfg
    head = (a["W_q"][:c.d_attn], a["b_q"][:c.d_attn], a["W_k"][:c.d_attn], a["b_k"][:c.d_attn], a["W_v"][:c.d_mid],
            a["b_v"][:c.d_mid])
    return w.X(), w.X(), head


def basic_attention(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case("random e (5), Z (5 × 6), d_attn = 3", (_rand(g, 5), _rand(g, 5, 6), *_head(g, 5, 5, 3, 2))),
           Case("random e (4), Z (4 × 1): a single key", (_rand(g, 4), _rand(g, 4, 1), *_head(g, 4, 4, 16, 3)))]
    if w is not None and (f := _focus_head(w)) is not None:
        out.append(Case("the model in focus's layer 0, head 0", (f[0][:, -1], f[1], *f[2])))
    return out


def attention(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = []
    for l_z, l_x in ((5, 5), (3, 4)):
        X, Z, head = _rand(g, 6, l_x), _rand(g, 6, l_z) if l_z != l_x else None, _head(g, 6, 6, 4, 3)
        for label, Mask in _masks(l_z, l_x):
            kind = "self-attention" if Z is None else "cross-attention ℓ_z ≠ ℓ_x"
            out.append(Case(f"random {kind}, {label}", (X, X if Z is None else Z, *head, Mask)))
    if w is not None and (f := _focus_head(w)) is not None:
        Mask = kit.unidirectional_mask(f[0].shape[1])
        out.append(Case("the model in focus's layer 0, head 0, unidirectional Mask", (f[0], f[1], *f[2], Mask)))
    return out


def mh_attention(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = []
    for l_z, l_x in ((5, 5), (3, 4)):
        X = _rand(g, 8, l_x)
        Z = X if l_z == l_x else _rand(g, 8, l_z)
        W: tuple[Tensor, ...] = (_rand(g, 6, 8), _rand(g, 6), _rand(g, 6, 8), _rand(g, 6), _rand(g, 4, 8), _rand(g, 4),
                                 _rand(g, 8, 4), _rand(g, 8))
        for label, Mask in _masks(l_z, l_x):
            out.append(Case(f"random, H = 2, d_attn = 3, d_mid = 2, {label}", (X, Z, *W, 2, Mask)))
    if w is not None and _focus_head(w) is not None and w.cfg.H_kv == w.cfg.H:
        a, X = w.attn(0), w.X()
        W = tuple(a[k] for k in ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o"))
        out.append(Case("the model in focus's layer 0, unidirectional Mask",
                        (X, X, *W, w.cfg.H, kit.unidirectional_mask(X.shape[1]))))
    return out


# ---- Algorithms 6, 7 -------------------------------------------------------------------------------------
def layer_norm(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case("random e (7), γ, β", (_rand(g, 7) * 3 + 2, _rand(g, 7), _rand(g, 7), 1e-5)),
           Case("e with every entry equal (variance 0: ε keeps it finite)", (torch.full((5,), 2.0, dtype=F64),
                                                                              _rand(g, 5), _rand(g, 5), 1e-5)),
           Case("random e (4), ε = 0.5", (_rand(g, 4) / 4, _rand(g, 4), _rand(g, 4), 0.5))]
    if w is not None and "layers.0.norm_attn.beta" in w.p:
        out.append(Case("the model in focus's first norm and embedding",
                        (w.X()[:, 0], w.p["layers.0.norm_attn.gamma"], w.p["layers.0.norm_attn.beta"],
                         w.cfg.norm_eps)))
    return out


def _large_logits(g: torch.Generator) -> tuple[Tensor, Tensor]:
    """e and W_u whose largest logit is 1000, where exp overflows."""
    e, W_u = _rand(g, 3), _rand(g, 6, 3)
    s = W_u @ e
    return e * 1000 / float(s[s.abs().argmax()]), W_u


def unembedding(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case("random e (5), W_u (9 × 5)", (_rand(g, 5), _rand(g, 9, 5))),
           Case("large logits (max W_u e = 1000: subtract the max before exp)", _large_logits(g))]
    if w is not None:
        W_u = w.p["unembed.W_u.weight"]
        out.append(Case("the model in focus's W_u", (_rand(g, W_u.shape[1]), W_u)))
    return out


# ---- Algorithms 10, 12, 13 ---------------------------------------------------------------------------------
def dtransformer(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case("a random 2-layer decoder (d_e = 8, H = 2, N_V = 11), ℓ = 5", (_ids(g, 5, 11), _random_model(g)))]
    if w is not None and w.like("gpt"):
        out.append(Case("the model in focus", (_ids(g, min(5, w.cfg.l_max), w.cfg.vocab_size), w.theta())))
    return out


def etransformer(g: torch.Generator, w: Weights | None) -> list[Case]:
    theta = _random_model(g)
    theta |= {"W_f": _rand(g, 8, 8) / 3, "b_f": _rand(g, 8)}
    out = [Case("a random 2-layer encoder (d_e = d_f = 8, H = 2, N_V = 11), ℓ = 5", (_ids(g, 5, 11), theta))]
    if w is not None and w.like("bert"):
        out.append(Case("the model in focus", (_ids(g, min(5, w.cfg.l_max), w.cfg.vocab_size), w.theta())))
    return out


def _probabilities(g: torch.Generator, N_V: int, l: int) -> Tensor:
    return torch.softmax(_rand(g, N_V, l) * 2, 0)


def _model_P(w: Weights, x: list[int]) -> Tensor | None:
    return kit.dtransformer(x, w.theta()) if w.like("gpt") else None


def d_loss(g: torch.Generator, w: Weights | None) -> list[Case]:
    out = [Case(f"random P ({n} × {l})", (_ids(g, l, n), _probabilities(g, n, l))) for n, l in ((7, 6), (4, 2))]
    if w is not None and (P := _model_P(w, x := _ids(g, 5, w.cfg.vocab_size))) is not None:
        out.append(Case("P of the model in focus", (x, P)))
    return out


def e_loss(g: torch.Generator, w: Weights | None) -> list[Case]:
    return [Case("random P (7 × 6), T̃ = [1, 4]", (_ids(g, 6, 7), _probabilities(g, 7, 6), [1, 4])),
            Case("random P (5 × 4), T̃ = [0, 3]", (_ids(g, 4, 5), _probabilities(g, 5, 4), [0, 3])),
            Case("random P (5 × 3), T̃ empty", (_ids(g, 3, 5), _probabilities(g, 5, 3), []))]


def training_step(g: torch.Generator, w: Weights | None) -> list[Case]:
    theta = _random_model(g, L=1, d_e=4, H=1, N_V=6)
    flat = {"W_e": theta["W_e"], "W_p": theta["W_p"], "W_u": theta["W_u"]}

    def forward(x: list[int], th: dict[str, Tensor]) -> Tensor:  # a small decoder of the flat θ
        return kit.dtransformer(x, {**theta, **th})
    return [Case("a random 1-layer decoder, η = 0.1, θ = {W_e, W_p, W_u}", (flat, _ids(g, 5, 6), 0.1, forward)),
            Case("the same, η = 0.5", (flat, _ids(g, 4, 6), 0.5, forward))]


# ---- Algorithm 14 and BPE ----------------------------------------------------------------------------------
def sampling_distribution(g: torch.Generator, w: Weights | None) -> list[Case]:
    p = _probabilities(g, 8, 1)[:, 0]
    out = [Case(f"random p (8), τ = {tau}, k = {k}", (p, tau, k)) for tau, k in ((1.0, 8), (0.5, 3), (2.0, 1))]
    if w is not None:
        W_u = w.p["unembed.W_u.weight"]
        out.append(Case("p of the model in focus, τ = 0.7, k = 5", (kit.unembedding(_rand(g, W_u.shape[1]), W_u), 0.7,
                                                                  min(5, W_u.shape[0]))))
    return out


def dinference(g: torch.Generator, w: Weights | None) -> list[Case]:
    theta = _random_model(g, L=1, N_V=9)

    def forward(x: list[int]) -> Tensor:
        return kit.dtransformer(x[-8:], theta)

    def greedy(p: Tensor) -> int:
        return int(p.argmax())

    def second(p: Tensor) -> int:
        return int(p.argsort(descending=True)[1])
    out = [Case("a random decoder, greedy sample, ℓ_gen = 4", ([1, 2], forward, 4, greedy)),
           Case("a random decoder, second most probable, ℓ_gen = 3", ([5], forward, 3, second))]
    if w is not None and w.like("gpt"):
        th = w.theta()
        out.append(Case("the model in focus, greedy, ℓ_gen = 3", ([1], lambda x: kit.dtransformer(x, th), 3, greedy)))
    return out


def bpe_merges(g: torch.Generator, w: Weights | None) -> list[Case]:
    return [Case("'low lower lowest newer newest', 6 merges", ("low lower lowest newer newest", 6)),
            Case("'aaaa aa', 3 merges (overlapping pairs)", ("aaaa aa", 3)),
            Case("'abc', 5 merges (runs out of pairs)", ("abc", 5))]
