"""The pseudocode of the chosen architecture (Algorithms 8-10 of Phuong & Hutter) with the configuration's
shapes filled in and its variations (norm, its position, activation, positions, H_kv, biases, tying)
written into the lines. Plain text for a monospace view; Qt-free."""
from __future__ import annotations

from fatstudio.core.config import ModelConfig

_ACT = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU_tanh", "swiglu": "SwiGLU"}
_POS_NOTE = {
    "learned": "learned position embedding W_p",
    "sinusoidal": "fixed sinusoidal W_p (b = {b:g}), a buffer, not trained",
    "rope": "rotary positions: q and k are rotated inside attention (no W_p)",
    "alibi": "ALiBi: a per-head linear distance bias is added to the scores (no W_p)",
    "relative": "Transformer-XL relative positions inside the scores (no W_p)",
    "none": "no position information at all",
}


def _mat(r, c) -> str:
    return f"ℝ^({r}×{c})"


def pseudocode(cfg: ModelConfig) -> str:
    try:
        c = cfg.resolved()
    except Exception:
        return "(fix the configuration to see the pseudocode)"
    n_v, d_e, d_mlp = c.vocab_size, c.d_e, c.d_mlp
    norm = "layer_norm" if c.norm == "layer" else "rms_norm"
    sup = "⁰¹²³⁴⁵⁶⁷⁸⁹"
    gb = lambda i, l="l": f"γ{sup[i]}_{l}, β{sup[i]}_{l}" if c.norm == "layer" else f"γ{sup[i]}_{l}"
    act = _ACT.get(c.activation, c.activation)
    bias = c.bias
    b = lambda name: f" + b_{name} 1ᵀ" if bias else ""
    if c.activation == "swiglu":
        mlp = f"W_mlp2 (SiLU(W_gate @{b('gate')}) ⊙ (W_mlp1 @{b('mlp1')})){b('mlp2')}"
    else:
        mlp = f"W_mlp2 {act}(W_mlp1 @{b('mlp1')}){b('mlp2')}"  # @: the sublayer's input (X̃ or X)
    learned_pos = c.positions in ("learned", "sinusoidal")
    pos = " + W_p[:, t]" if learned_pos else ""
    heads = f"H = {c.H} heads" + (f", H_kv = {c.H_kv} key/value heads" if c.H_kv != c.H else "")
    heads += f"; d_attn = {c.d_attn}, d_mid = {c.d_mid}"
    out: list[str] = []
    w = out.append

    def params(extra: list[str]) -> None:
        w("Parameters:")
        w(f"  W_e ∈ {_mat(d_e, n_v)}" + (f",  W_p ∈ {_mat(d_e, c.l_max)}" if c.positions == "learned" else ""))
        w(f"  per attention: W_q ∈ {_mat(c.H * c.d_attn, d_e)}, W_k ∈ {_mat(c.H_kv * c.d_attn, d_e)},")
        w(f"                 W_v ∈ {_mat(c.H_kv * c.d_mid, d_e)}, W_o ∈ {_mat(d_e, c.H * c.d_mid)}"
          + ("  (+ biases)" if bias else "  (no biases)"))
        w(f"  per MLP: W_mlp1 ∈ {_mat(d_mlp, d_e)}" + (f", W_gate ∈ {_mat(d_mlp, d_e)}" if c.activation == "swiglu" else "")
          + f", W_mlp2 ∈ {_mat(d_e, d_mlp)}")
        for e in extra:
            w("  " + e)
        d_out = c.d_f if c.arch == "bert" else d_e
        w(f"  W_u ∈ {_mat(n_v, d_out)}" + ("  = W_eᵀ (tied)" if c.tie_embeddings else ""))
        w(f"Positions: {_POS_NOTE.get(c.positions, c.positions).format(b=c.position_base)}")
        w(f"Attention: {heads}")
        w("")

    def embed(seq: str, big: str, n: str) -> None:
        w(f"{n} ← length({seq})")
        w(f"for t ∈ [{n}]: e_t ← W_e[:, {seq}[t]]{pos}          e_t ∈ ℝ^{d_e}")
        w(f"{big} ← [e_1, e_2, …, e_{n}]                       {big} ∈ ℝ^({d_e}×{n})")

    def sublayer(x: str, call: str, i: int, ind: str, lyr: str = "l") -> None:
        if c.norm_position == "pre":
            w(f"{ind}X̃ ← {norm}({x} | {gb(i, lyr)})")
            w(f"{ind}{x} ← {x} + {call.replace('@', 'X̃')}")
        else:
            w(f"{ind}{x} ← {x} + {call.replace('@', x)}")
            w(f"{ind}{x} ← {norm}({x} | {gb(i, lyr)})")

    if c.arch == "edt":
        w(f"Algorithm 8  P ← EDTransformer(z, x | θ)      (L_enc = {c.L_enc}, L_dec = {c.L_dec}, ℓ_max = {c.l_max})")
        w("Input: z, x ∈ V*: the source and the target token IDs")
        w(f"Output: P ∈ (0, 1)^({n_v}×ℓ_x), P[:, t] = P̂(x[t+1] | x[:t], z)")
        params([])
        w("/* encoder */")
        embed("z", "Z", "ℓ_z")
        w(f"for l = 1, 2, …, {c.L_enc}:")
        sublayer("Z", "MHAttention(@ | W^enc_l, Mask ≡ 1)", 1, "    ")
        sublayer("Z", mlp, 2, "    ")
        if c.norm_position == "pre":
            w(f"Z ← {norm}(Z | γ_enc)")
        w("/* decoder */")
        embed("x", "X", "ℓ_x")
        w(f"for l = 1, 2, …, {c.L_dec}:")
        sublayer("X", "MHAttention(@ | W^dec_l, Mask[t, t′] = [[t ≤ t′]])", 3, "    ")
        sublayer("X", "MHAttention(@, Z | W^e/d_l, Mask ≡ 1)", 4, "    ")
        sublayer("X", mlp, 5, "    ")
        if c.norm_position == "pre":
            w(f"X ← {norm}(X | γ_dec)")
        w(f"return P = softmax(W_u X)                        P ∈ ℝ^({n_v}×ℓ_x)")
    elif c.arch == "bert":
        w(f"Algorithm 9  P ← ETransformer(x | θ)      (L = {c.L}, ℓ_max = {c.l_max})")
        w("Input: x ∈ V*, token IDs (some replaced by mask_token)")
        w(f"Output: P ∈ (0, 1)^({n_v}×ℓ), P[:, t] = P̂(x[t] | x)")
        params([f"W_f ∈ {_mat(c.d_f, d_e)}, b_f ∈ ℝ^{c.d_f}  (final projection, d_f = {c.d_f})"]
               + ([f"class head ∈ {_mat(c.n_classes, c.d_f)}"] if c.n_classes else []))
        embed("x", "X", "ℓ")
        w(f"for l = 1, 2, …, {c.L}:")
        sublayer("X", "MHAttention(@ | W_l, Mask ≡ 1)", 1, "    ")
        sublayer("X", mlp, 2, "    ")
        w("X ← GELU(W_f X + b_f 1ᵀ)" + f"                           X ∈ ℝ^({c.d_f}×ℓ)")
        w(f"X ← {norm}(X | γ, β)" if c.norm == "layer" else f"X ← {norm}(X | γ)")
        w(f"return P = softmax(W_u X)                        P ∈ ℝ^({n_v}×ℓ)")
    else:
        title = "DTransformer" if c.arch == "gpt" else "DTransformer (Gopher variant)"
        w(f"Algorithm 10  P ← {title}(x | θ)      (L = {c.L}, ℓ_max = {c.l_max})")
        w("Input: x ∈ V*, token IDs")
        w(f"Output: P ∈ (0, 1)^({n_v}×ℓ), P[:, t] = P̂(x[t+1] | x[:t])")
        params([])
        embed("x", "X", "ℓ")
        w(f"for l = 1, 2, …, {c.L}:")
        sublayer("X", "MHAttention(@ | W_l, Mask[t, t′] = [[t ≤ t′]])", 1, "    ")
        sublayer("X", mlp, 2, "    ")
        if c.norm_position == "pre":
            w(f"X ← {norm}(X | γ, β)" if c.norm == "layer" else f"X ← {norm}(X | γ)")
        w(f"return P = softmax(W_u X)                        P ∈ ℝ^({n_v}×ℓ)")
    w("")
    w(f"MHAttention: for each head h, S = K_hᵀQ_h / √{c.d_attn}, A = softmax(S + mask), V_h A; concatenate, W_o.")
    if c.dropout:
        w(f"Dropout p = {c.dropout:g} after attention and MLP while training.")
    return "\n".join(out)
