"""The exercises: for each algorithm a stub in the paper's notation (its docstring from the pseudocode), hints that
unfold one at a time and a solution. What it is checked on is `cases` (the function of its name), what against is
`kit` (likewise); both import torch, this module does not, so the app lists the exercises without it."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Exercise:
    """``name`` is the function the learner writes; ``output`` and ``shape`` name its result in messages
    (``"Ṽ"``, ``"d_mid × ℓ_x"``); ``trains``: how Train with my code swaps it into the model (`training.SWAPS`), or ""."""

    name: str
    title: str
    algorithm: str
    stub: str
    hints: tuple[str, ...]
    solution: str
    output: str
    shape: str
    trains: str = ""

    @property
    def reference(self) -> Callable[..., Any]:
        """The float64 reference (`kit`)."""
        return getattr(importlib.import_module(f"{__package__}.kit"), self.name)

    @property
    def cases(self) -> Callable[..., Any]:
        """``cases(generator, weights or None) -> [Case]`` (`cases`)."""
        return getattr(importlib.import_module(f"{__package__}.cases"), self.name)


def _exercise(name: str, title: str, algorithm: str, signature: str, doc: str, hints: tuple[str, ...], body: str,
              output: str, shape: str, trains: str = "") -> Exercise:
    head = f"import torch\n\n\ndef {name}({signature}):\n    \"\"\"{doc}\"\"\"\n"
    return Exercise(name, title, algorithm, head + "    raise NotImplementedError\n", hints, head + body, output,
                    shape, trains)


MASK = "\n        Mask[t_z, t_x] is True where query t_x may attend to key t_z (ℓ_z × ℓ_x, bool)."
EXERCISES: tuple[Exercise, ...] = (
    _exercise("token_embedding", "Token embedding", "Algorithm 1", "v, W_e",
              "Algorithm 1. Token embedding.\n\n    Input: v ∈ V ≅ [N_V], a token ID (0-based here).\n"
              "    Parameters: W_e ∈ ℝ^{d_e×N_V}, the token embedding matrix.\n"
              "    Output: e ∈ ℝ^{d_e}, the vector representation of the token.\n\n    1  return e = W_e[:, v]\n    ",
              ("W_e has one column per token: d_e rows, N_V columns.", "Index the column, not the row: W_e[:, v]."),
              "    return W_e[:, v]\n", "e", "d_e", "the embedding (hook point embed)"),
    _exercise("positional_embedding", "Positional embedding", "Algorithm 2", "t, W_p",
              "Algorithm 2. Positional embedding.\n\n    Input: t ∈ [ℓ_max], the position of a token (0-based here).\n"
              "    Parameters: W_p ∈ ℝ^{d_e×ℓ_max}, the positional embedding matrix.\n"
              "    Output: e_p ∈ ℝ^{d_e}, the vector representation of the position.\n\n    1  return e_p = W_p[:, t]\n    ",
              ("Like Algorithm 1 with positions instead of tokens.", "Column t of W_p: W_p[:, t]."),
              "    return W_p[:, t]\n", "e_p", "d_e", "the embedding (hook point embed)"),
    _exercise("embed", "The embedding of a sequence", "Eq. 1", "x, W_e, W_p",
              "The first lines of Algorithms 8-10: the embedding of a token sequence (eq. 1).\n\n"
              "    Input: x ∈ V^ℓ, a sequence of token IDs.\n    Parameters: W_e ∈ ℝ^{d_e×N_V}, W_p ∈ ℝ^{d_e×ℓ_max}.\n"
              "    Output: X ∈ ℝ^{d_e×ℓ}, one column per token.\n\n"
              "    1  for t ∈ [ℓ]: e_t ← W_e[:, x[t]] + W_p[:, t]\n    2  X ← [e_1, e_2, …, e_ℓ]\n    ",
              ("One column per position t: token embedding plus positional embedding.",
               "torch.stack(columns, 1) puts vectors side by side as columns.",
               "W_e[:, x] picks all the token columns at once; W_p[:, :len(x)] the positions."),
              "    return W_e[:, x] + W_p[:, :len(x)]\n", "X", "d_e × ℓ",
              "the embedding (hook point embed)"),
    _exercise("basic_attention", "Basic single-query attention", "Algorithm 3", "e, Z, W_q, b_q, W_k, b_k, W_v, b_v",
              "Algorithm 3. Basic single-query attention.\n\n"
              "    Input: e ∈ ℝ^{d_in}, the current token; Z = [e_1, …, e_ℓ_z] ∈ ℝ^{d_in×ℓ_z}, the context tokens.\n"
              "    Parameters: W_q, W_k ∈ ℝ^{d_attn×d_in}, b_q, b_k ∈ ℝ^{d_attn}; W_v ∈ ℝ^{d_out×d_in}, b_v ∈ ℝ^{d_out}.\n"
              "    Output: ṽ ∈ ℝ^{d_out}.\n\n    1  q ← W_q e + b_q\n    2  ∀t: k_t ← W_k e_t + b_k\n"
              "    3  ∀t: v_t ← W_v e_t + b_v\n    4  ∀t: α_t = exp(qᵀk_t/√d_attn) / Σ_u exp(qᵀk_u/√d_attn)\n"
              "    5  return ṽ = Σ_t α_t v_t\n    ",
              ("All keys at once: K = W_k Z + b_k[:, None] is d_attn × ℓ_z, one column per context token.",
               "The scores are Kᵀq (one per key), divided by √d_attn — d_attn is the number of rows of W_q.",
               "α = torch.softmax(scores, 0); then ṽ = V α."),
              "    q = W_q @ e + b_q\n    K = W_k @ Z + b_k[:, None]\n    V = W_v @ Z + b_v[:, None]\n"
              "    alpha = torch.softmax(K.T @ q / W_q.shape[0] ** 0.5, 0)\n    return V @ alpha\n",
              "ṽ", "d_out"),
    _exercise("attention", "Attention with a mask", "Algorithm 4", "X, Z, W_q, b_q, W_k, b_k, W_v, b_v, Mask",
              "Algorithm 4. Ṽ ← Attention(X, Z | W_qkv, Mask).\n\n"
              "    Input: X ∈ ℝ^{d_x×ℓ_x}, Z ∈ ℝ^{d_z×ℓ_z}, vector representations of\n"
              "        primary and context sequence.\n"
              f"    Parameters: W_q ∈ ℝ^{{d_attn×d_x}}, b_q; W_k ∈ ℝ^{{d_attn×d_z}}, b_k; W_v ∈ ℝ^{{d_out×d_z}}, b_v.\n"
              f"    Hyperparameters: Mask ∈ {{0,1}}^{{ℓ_z×ℓ_x}}:{MASK}\n    Output: Ṽ ∈ ℝ^{{d_out×ℓ_x}}.\n\n"
              "    1  Q ← W_q X + b_q 1ᵀ\n    2  K ← W_k Z + b_k 1ᵀ\n    3  V ← W_v Z + b_v 1ᵀ\n    4  S ← KᵀQ\n"
              "    5  ∀t_z, t_x: if ¬Mask[t_z, t_x] then S[t_z, t_x] ← -∞\n"
              "    6  return Ṽ = V · softmax(S/√d_attn)   (softmax over t_z: each column sums to 1)\n    ",
              ("b_q 1ᵀ is b_q[:, None]: the bias added to every column.",
               "S = KᵀQ is ℓ_z × ℓ_x: rows are keys, columns queries. Hide masked entries with "
               "S.masked_fill(~Mask, float('-inf')).",
               "The softmax runs down each column (dim 0), after dividing by √d_attn = W_q.shape[0] ** 0.5."),
              "    Q = W_q @ X + b_q[:, None]\n    K = W_k @ Z + b_k[:, None]\n    V = W_v @ Z + b_v[:, None]\n"
              "    S = (K.T @ Q).masked_fill(~Mask, float('-inf'))\n"
              "    return V @ torch.softmax(S / W_q.shape[0] ** 0.5, 0)\n",
              "Ṽ", "d_out × ℓ_x", "each head's Y^h (hook point self/l/z)"),
    _exercise("mh_attention", "Multi-head attention", "Algorithm 5",
              "X, Z, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, H, Mask",
              "Algorithm 5. Ṽ ← MHAttention(X, Z | 𝒲, Mask).\n\n"
              "    Input: X ∈ ℝ^{d_x×ℓ_x}, Z ∈ ℝ^{d_z×ℓ_z}.\n"
              "    Parameters: the H heads' W_q, W_k (H·d_attn rows), b_q, b_k; W_v (H·d_mid rows), b_v, head h\n"
              "    in rows h·d_attn … (h+1)·d_attn-1 (h·d_mid … for W_v); W_o ∈ ℝ^{d_out×H·d_mid}, b_o ∈ ℝ^{d_out}.\n"
              f"    Hyperparameters: H, the number of heads; Mask ∈ {{0,1}}^{{ℓ_z×ℓ_x}}:{MASK}\n"
              "    Output: Ṽ ∈ ℝ^{d_out×ℓ_x}.\n\n"
              "    1  for h ∈ [H]: Y^h ← Attention(X, Z | W_qkv^h, Mask)\n    2  Y ← [Y¹; Y²; …; Y^H]\n"
              "    3  return Ṽ = W_o Y + b_o 1ᵀ\n    "
              "\n    You may use `from fatstudio.core.paper.exercises.kit import attention` (Algorithm 4).",
              ("d_attn = W_q.shape[0] // H and d_mid = W_v.shape[0] // H: head h's rows are a slice.",
               "Stack the heads' outputs on top of each other: torch.cat(Ys, 0) is (H·d_mid) × ℓ_x.",
               "Each head scales by its own √d_attn, not by √(H·d_attn)."),
              "    from fatstudio.core.paper.exercises.kit import attention\n"
              "    a, m = W_q.shape[0] // H, W_v.shape[0] // H\n"
              "    Y = torch.cat([attention(X, Z, W_q[h*a:(h+1)*a], b_q[h*a:(h+1)*a], W_k[h*a:(h+1)*a], "
              "b_k[h*a:(h+1)*a],\n                             W_v[h*m:(h+1)*m], b_v[h*m:(h+1)*m], Mask) "
              "for h in range(H)], 0)\n    return W_o @ Y + b_o[:, None]\n",
              "Ṽ", "d_out × ℓ_x", "the attention sublayer (hook point self/l/out)"),
    _exercise("layer_norm", "Layer normalisation", "Algorithm 6", "e, gamma, beta, eps=1e-5",
              "Algorithm 6. ê ← layer_norm(e | γ, β).\n\n    Input: e ∈ ℝ^{d_e}.\n"
              "    Parameters: γ, β ∈ ℝ^{d_e}, element-wise scale and offset.\n    Output: ê ∈ ℝ^{d_e}.\n\n"
              "    1  m ← Σ_i e[i] / d_e\n    2  v ← Σ_i (e[i] - m)² / d_e\n"
              "    3  return ê = (e - m)/√(v + ε) ⊙ γ + β   (ε under the root keeps it finite)\n    ",
              ("v is the biased variance: divide by d_e, not d_e - 1 (torch.var needs unbiased=False).",
               "ε goes under the square root: √(v + ε), not √v + ε.",
               "⊙ is the element-wise product: (e - m) / (v + eps) ** 0.5 * gamma + beta."),
              "    m = e.mean()\n    v = ((e - m) ** 2).mean()\n    return (e - m) / (v + eps) ** 0.5 * gamma + beta\n",
              "ê", "d_e", "every layer norm (hook points self/l/in, mlp/l/in, final)"),
    _exercise("unembedding", "Unembedding", "Algorithm 7", "e, W_u",
              "Algorithm 7. Unembedding.\n\n    Input: e ∈ ℝ^{d_e}, a token encoding.\n"
              "    Parameters: W_u ∈ ℝ^{N_V×d_e}, the unembedding matrix.\n"
              "    Output: p ∈ Δ(V), a probability distribution over the vocabulary.\n\n"
              "    1  return p = softmax(W_u e)\n    ",
              ("W_u e is a vector of N_V logits.",
               "softmax(s) = exp(s - max s) / Σ exp(s - max s): subtracting the max changes nothing but overflow."),
              "    s = W_u @ e\n    s = torch.exp(s - s.max())\n    return s / s.sum()\n",
              "p", "N_V", "the output distribution (read at hook point final)"),
    _exercise("etransformer", "The encoder's forward pass", "Algorithm 9", "x, theta",
              "Algorithm 9. P ← ETransformer(x | θ), post-LN with GELU (BERT).\n\n"
              "    Input: x ∈ V^ℓ. Output: P ∈ (0,1)^{N_V×ℓ}, P[:, t] the distribution of the (masked) token at t.\n"
              "    θ: W_e, W_p, W_u, W_f, b_f, gamma, beta (the norm after W_f), H, and layers, a list of dicts with\n"
              "    W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, gamma1, beta1, gamma2, beta2, W_mlp1, b_mlp1, W_mlp2, b_mlp2.\n\n"
              "    1  ℓ ← length(x)\n    2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]] + W_p[:, t]\n    3  X ← [e_1, …, e_ℓ]\n"
              "    4  for l = 1, …, L:\n    5      X ← X + MHAttention(X | W_l, Mask ≡ 1)\n"
              "    6      for t ∈ [ℓ]: X[:, t] ← layer_norm(X[:, t] | γ_l1, β_l1)\n"
              "    7      X ← X + W_mlp2,l GELU(W_mlp1,l X + b_mlp1,l 1ᵀ) + b_mlp2,l 1ᵀ\n"
              "    8      for t ∈ [ℓ]: X[:, t] ← layer_norm(X[:, t] | γ_l2, β_l2)\n"
              "    9  X ← GELU(W_f X + b_f 1ᵀ)\n   10  for t ∈ [ℓ]: X[:, t] ← layer_norm(X[:, t] | γ, β)\n"
              "   11  return P = softmax(W_u X)\n    "
              "\n    You may use `from fatstudio.core.paper.exercises.kit import layer_norm_columns, mh_attention, gelu`.",
              ("Bidirectional: the Mask is all ones, torch.ones(ℓ, ℓ, dtype=torch.bool).",
               "Post-LN: the norm comes after the residual add, X ← layer_norm(X + sublayer(X)), and the sublayer "
               "reads the un-normed X.",
               "After the layers: GELU of the projection W_f X + b_f, then the last norm, then the unembedding."),
              "    from fatstudio.core.paper.exercises.kit import gelu, layer_norm_columns, mh_attention\n"
              "    X = theta['W_e'][:, x] + theta['W_p'][:, :len(x)]\n"
              "    Mask = torch.ones(len(x), len(x), dtype=torch.bool)\n"
              "    for w in theta['layers']:\n"
              "        X = layer_norm_columns(X + mh_attention(X, X, w['W_q'], w['b_q'], w['W_k'], w['b_k'], w['W_v'],\n"
              "                                                w['b_v'], w['W_o'], w['b_o'], theta['H'], Mask),\n"
              "                               w['gamma1'], w['beta1'])\n"
              "        X = layer_norm_columns(X + w['W_mlp2'] @ gelu(w['W_mlp1'] @ X + w['b_mlp1'][:, None])\n"
              "                               + w['b_mlp2'][:, None], w['gamma2'], w['beta2'])\n"
              "    X = layer_norm_columns(gelu(theta['W_f'] @ X + theta['b_f'][:, None]), theta['gamma'], theta['beta'])\n"
              "    return torch.softmax(theta['W_u'] @ X, 0)\n",
              "P", "N_V × ℓ"),
    _exercise("dtransformer", "The decoder's forward pass", "Algorithm 10", "x, theta",
              "Algorithm 10. P ← DTransformer(x | θ), pre-LN with GELU (GPT-2).\n\n"
              "    Input: x ∈ V^ℓ. Output: P ∈ (0,1)^{N_V×ℓ}, P[:, t] the distribution of the token after x[t].\n"
              "    θ: W_e, W_p, W_u, gamma, beta (final norm), H, and layers, a list of dicts with W_q, b_q, W_k, b_k,\n"
              "    W_v, b_v, W_o, b_o, gamma1, beta1, gamma2, beta2, W_mlp1, b_mlp1, W_mlp2, b_mlp2.\n\n"
              "    1  ℓ ← length(x)\n    2  for t ∈ [ℓ]: e_t ← W_e[:, x[t]] + W_p[:, t]\n    3  X ← [e_1, …, e_ℓ]\n"
              "    4  for l = 1, …, L:\n    5      for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l1, β_l1)\n"
              "    6      X ← X + MHAttention(X̃ | W_l, Mask[t, t'] = [t ≤ t'])\n"
              "    7      for t ∈ [ℓ]: X̃[:, t] ← layer_norm(X[:, t] | γ_l2, β_l2)\n"
              "    8      X ← X + W_mlp2,l GELU(W_mlp1,l X̃ + b_mlp1,l 1ᵀ) + b_mlp2,l 1ᵀ\n"
              "    9  for t ∈ [ℓ]: X[:, t] ← layer_norm(X[:, t] | γ, β)\n   10  return P = softmax(W_u X)\n    "
              "\n    You may use `from fatstudio.core.paper.exercises.kit import layer_norm_columns, mh_attention, gelu,\n"
              "    unidirectional_mask`.",
              ("Use the kit: layer_norm_columns(X, gamma, beta) norms every column; unidirectional_mask(ℓ) is the Mask.",
               "Pre-LN: the sublayer reads the normed X̃ but adds its output to the un-normed X.",
               "softmax(W_u X) runs down each column: torch.softmax(W_u @ X, 0)."),
              "    from fatstudio.core.paper.exercises.kit import gelu, layer_norm_columns, mh_attention, "
              "unidirectional_mask\n"
              "    X = theta['W_e'][:, x] + theta['W_p'][:, :len(x)]\n    Mask = unidirectional_mask(len(x))\n"
              "    for w in theta['layers']:\n        Xn = layer_norm_columns(X, w['gamma1'], w['beta1'])\n"
              "        X = X + mh_attention(Xn, Xn, w['W_q'], w['b_q'], w['W_k'], w['b_k'], w['W_v'], w['b_v'],\n"
              "                             w['W_o'], w['b_o'], theta['H'], Mask)\n"
              "        Xn = layer_norm_columns(X, w['gamma2'], w['beta2'])\n"
              "        X = X + w['W_mlp2'] @ gelu(w['W_mlp1'] @ Xn + w['b_mlp1'][:, None]) + w['b_mlp2'][:, None]\n"
              "    X = layer_norm_columns(X, theta['gamma'], theta['beta'])\n    return torch.softmax(theta['W_u'] @ X, 0)\n",
              "P", "N_V × ℓ"),
    _exercise("e_loss", "The masked-language-model loss", "Algorithm 12, line 6", "x, P, masked",
              "Algorithm 12, line 6: BERT's loss of one sequence, P = ETransformer(x̃ | θ) of the masked x̃.\n\n"
              "    Input: x ∈ V^ℓ, the original tokens; P ∈ (0,1)^{N_V×ℓ}; masked = T̃, the masked positions.\n"
              "    Output: loss(θ) = -Σ_{t∈T̃} log P[x[t], t]  (a 0-d tensor)\n    ",
              ("Column t predicts the original token at the same position t (not the next one).",
               "Only the masked positions count; an empty T̃ gives 0."),
              "    return -sum((torch.log(P[x[t], t]) for t in masked), torch.tensor(0.0, dtype=P.dtype))\n",
              "loss", "a number"),
    _exercise("d_loss", "The decoder's loss", "Algorithm 13, line 4", "x, P",
              "Algorithm 13, line 4: the loss of one sequence under P = DTransformer(x | θ).\n\n"
              "    Input: x ∈ V^ℓ; P ∈ (0,1)^{N_V×ℓ}, P[:, t] the predicted distribution of x[t+1].\n"
              "    Output: loss(θ) = -Σ_{t=1}^{ℓ-1} log P[x[t+1], t]  (a 0-d tensor; 0-based: t = 0 … ℓ-2)\n    ",
              ("Column t predicts the *next* token, x[t+1]; the last column predicts nothing we know.",
               "A sum, not a mean, and a minus sign: the loss is a negative log-likelihood.",
               "Index one entry per column: P[x[t+1], t]."),
              "    return -sum(torch.log(P[x[t + 1], t]) for t in range(len(x) - 1))\n",
              "loss", "a number", "the training loss"),
    _exercise("training_step", "One training step", "Algorithm 13, lines 3-5", "theta, x, eta, forward",
              "Algorithm 13, lines 3-5: one step of gradient descent on one sequence.\n\n"
              "    Input: θ, a dict {name: tensor}; x ∈ V^ℓ; η, the learning rate;\n"
              "    forward(x, θ) -> P ∈ (0,1)^{N_V×ℓ}, the decoder (differentiable).\n"
              "    Output: the updated θ (a new dict, same names).\n\n"
              "    3  P(θ) ← DTransformer(x | θ)\n    4  loss(θ) = -Σ_{t=1}^{ℓ-1} log P(θ)[x[t+1], t]\n"
              "    5  θ ← θ - η · ∇loss(θ)\n    ",
              ("Make leaf tensors that track gradients: {k: v.detach().clone().requires_grad_() …}.",
               "loss.backward() fills each tensor's .grad.",
               "Return detached tensors: {k: (v - eta * v.grad).detach() …}. Descent: minus the gradient."),
              "    theta = {k: v.detach().clone().requires_grad_() for k, v in theta.items()}\n"
              "    P = forward(x, theta)\n    loss = -sum(torch.log(P[x[t + 1], t]) for t in range(len(x) - 1))\n"
              "    loss.backward()\n    return {k: (v - eta * v.grad).detach() for k, v in theta.items()}\n",
              "θ", "θ's shapes"),
    _exercise("sampling_distribution", "Sampling with temperature and top-k", "Algorithm 14, line 5", "p, tau, k",
              "Algorithm 14, line 5: the distribution a token is sampled from, with temperature τ and top-k.\n\n"
              "    Input: p ∈ Δ(V), the predicted distribution; τ > 0, the temperature; k ≥ 1.\n"
              "    Output: q ∈ Δ(V) with q ∝ p^{1/τ} on the k most probable tokens of p, q = 0 elsewhere.\n"
              "    (Sampling is then y ~ q; τ < 1 sharpens, τ > 1 flattens, k = 1 is greedy.)\n    ",
              ("p ** (1 / tau), not p / tau: the temperature divides the logits, log p.",
               "torch.topk(p, k).indices are the tokens to keep; zero the others.",
               "Renormalise at the end: q / q.sum()."),
              "    q = torch.zeros_like(p)\n    keep = torch.topk(p, k).indices\n    q[keep] = p[keep] ** (1 / tau)\n"
              "    return q / q.sum()\n",
              "q", "N_V"),
    _exercise("dinference", "Generating text", "Algorithm 14", "x, forward, l_gen, sample",
              "Algorithm 14. y ← DInference(x, θ̂): prompting a trained decoder.\n\n"
              "    Input: x ∈ V^*, the prompt; forward(x) -> P ∈ (0,1)^{N_V×length(x)}, the decoder;\n"
              "    l_gen, the number of tokens to generate; sample(p) -> y, a token drawn from p.\n"
              "    Output: y ∈ V^{l_gen}, the generated continuation (a list of ints).\n\n"
              "    1  ℓ ← length(x)\n    2  for i ∈ [ℓ_gen]:\n    3      P ← DTransformer(x | θ̂)\n"
              "    4      p ← P[:, ℓ + i - 1]\n    5      sample a token y from q ∝ p^{1/τ}  (here: y ← sample(p))\n"
              "    6      x ← [x, y]\n    7  return y = x[ℓ+1 : ℓ+ℓ_gen]\n    ",
              ("The distribution of the next token is the last column of P.",
               "Append each sampled token to x before the next forward pass.",
               "Return only the generated tokens, not the prompt."),
              "    x = list(x)\n    for _ in range(l_gen):\n        x.append(int(sample(forward(x)[:, -1])))\n"
              "    return x[len(x) - l_gen:]\n",
              "y", "ℓ_gen"),
    _exercise("bpe_merges", "Byte-pair encoding merges", "Section 3", "text, n",
              "Byte-pair encoding (Section 3): learning a tokenizer's merges.\n\n"
              "    Input: text, words separated by spaces; n, the number of merges.\n"
              "    Output: the merges, a list of pairs (a, b) of symbols, in the order made.\n\n"
              "    1  each word ← its list of characters\n    2  repeat n times (or until no word has two symbols):\n"
              "    3      (a, b) ← the most frequent adjacent pair over all words (ties: the pair seen first)\n"
              "    4      in every word, replace each adjacent a, b (left to right) by the symbol a+b\n    ",
              ("collections.Counter counts pairs; it remembers the order pairs were first seen.",
               "Ties: among the most frequent pairs take the first seen, e.g. max over counts then the first match.",
               "Merge left to right and skip past a merged symbol: 'aaa' with (a, a) becomes ['aa', 'a']."),
              "    from collections import Counter\n    words = [list(w) for w in text.split()]\n    merges = []\n"
              "    for _ in range(n):\n        counts = Counter((a, b) for w in words for a, b in zip(w, w[1:]))\n"
              "        if not counts:\n            break\n        best = max(counts.values())\n"
              "        pair = next(p for p in counts if counts[p] == best)\n        merges.append(pair)\n"
              "        for w in words:\n            i = 0\n            while i < len(w) - 1:\n"
              "                if (w[i], w[i + 1]) == pair:\n                    w[i:i + 2] = [w[i] + w[i + 1]]\n"
              "                i += 1\n    return merges\n",
              "merges", "n pairs"),
)
BY_NAME = {e.name: e for e in EXERCISES}
