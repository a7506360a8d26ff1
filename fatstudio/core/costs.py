"""What a configuration costs, computed from the config alone (no torch): parameters per component,
FLOPs per token and a memory estimate. The model panel shows these live; tests check them against the
built model and against the paper's parameter lists."""
from __future__ import annotations

from .config import ModelConfig, Optimizer, ResolvedPrecision


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def parameter_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters per component: embedding, attention, mlp, norms, head (W_f, class head), unembedding."""
    c = cfg.resolved()
    per_width = 2 if c.norm == "layer" else 1  # γ and β, or γ alone (RMSnorm)
    norm = c.d_e * per_width
    attn = (_linear(c.d_e, c.H * c.d_attn, c.bias) + _linear(c.d_e, c.H_kv * c.d_attn, c.bias)
            + _linear(c.d_e, c.H_kv * c.d_mid, c.bias) + _linear(c.H * c.d_mid, c.d_e, c.bias))
    self_attn = attn + (c.d_e * c.H * c.d_attn + 2 * c.H * c.d_attn if c.positions == "relative" else 0)
    mlp = _linear(c.d_e, c.d_mlp, c.bias) * (2 if c.activation == "swiglu" else 1) + _linear(c.d_mlp, c.d_e, c.bias)
    final = norm if c.norm_position == "pre" else 0
    d_out = c.d_f if c.arch == "bert" else c.d_e
    counts = {"embedding": c.vocab_size * c.d_e + (c.l_max * c.d_e if c.positions == "learned" else 0)}
    if c.arch == "edt":
        counts["attention"] = c.L_enc * self_attn + c.L_dec * (self_attn + attn)
        counts["mlp"] = (c.L_enc + c.L_dec) * mlp
        counts["norms"] = c.L_enc * 2 * norm + c.L_dec * 3 * norm + 2 * final
        counts["head"] = 0
    else:
        counts["attention"] = c.L * self_attn
        counts["mlp"] = c.L * mlp
        counts["norms"] = c.L * 2 * norm + final
        counts["head"] = 0
        if c.arch == "bert":
            counts["norms"] += c.d_f * per_width
            counts["head"] = _linear(c.d_e, c.d_f, True) + (_linear(c.d_f, c.n_classes, True) if c.n_classes else 0)
    counts["norms"] += norm if c.embed_norm else 0
    counts["unembedding"] = (0 if c.tie_embeddings else c.vocab_size * d_out) + (c.vocab_size if c.unembed_bias else 0)
    return counts


def flops_per_token(cfg: ModelConfig, T: int | None = None) -> dict[str, float]:
    """Forward and training (≈ 3 × forward) FLOPs per token at context length T (default ℓ_max):
    2 per weight of every matrix applied to the token, plus the attention scores and weighted sums."""
    c = cfg.resolved()
    T = T or c.l_max
    counts = parameter_counts(cfg)
    matmul = counts["attention"] + counts["mlp"] + counts["head"] + c.vocab_size * (c.d_f if c.arch == "bert" else c.d_e)
    n_self = c.L_enc + c.L_dec if c.arch == "edt" else c.L
    n_cross = c.L_dec if c.arch == "edt" else 0
    causal_factor = 0.5 if c.causal else 1.0
    attn = 2 * c.H * (c.d_attn + c.d_mid) * T * (n_self * causal_factor + n_cross)
    forward = 2 * matmul + attn
    return {"forward": float(forward), "training": float(3 * forward)}


def memory_estimate(cfg: ModelConfig, batch_size: int = 12, optimizer: Optimizer = "adamw",
                    precision: ResolvedPrecision = "fp32") -> dict[str, int]:
    """A rough training-memory estimate in bytes: weights, gradients and optimizer state in fp32 (autocast
    keeps the master weights in fp32), and the activations the backward pass keeps, 2 bytes each under bf16
    or fp16 autocast. Attention is fused (scaled_dot_product_attention keeps no T×T matrix, only one number
    per query and head), except that Transformer-XL relative positions keep their (B, H, T, T) score terms
    and ALiBi its (H, T, T) bias."""
    c = cfg.resolved()
    counts = parameter_counts(cfg)
    n = sum(counts.values())
    layers = c.L_enc + 2 * c.L_dec if c.arch == "edt" else c.L
    T, B = c.l_max, batch_size
    scores = {"relative": B * c.H * T * T, "alibi": c.H * T * T}.get(c.positions, B * c.H * T)
    per_layer = B * T * (12 * c.d_e + 3 * c.d_mlp) + scores
    activations = (layers * per_layer + B * T * c.vocab_size * 2) * (2 if precision in ("bf16", "fp16") else 4)
    weights = n * 4
    hidden = counts["attention"] + counts["mlp"]  # Muon keeps one momentum for these (their biases counted too)
    state = {"adamw": 2 * weights, "muon": 4 * (hidden + 2 * (n - hidden))}.get(optimizer, 0)
    return {"weights": weights, "gradients": weights, "optimizer": state, "activations": activations,
            "total": 2 * weights + state + activations}
