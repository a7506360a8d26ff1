"""Where fatstudio departs from the paper's pseudocode (Phuong & Hutter 2022), all in one place: errata it
fixes, details the paper leaves open (initialisation, ε, padding) and the practice it follows instead of the
paper's plain algorithms (minibatches, AdamW). Each `Deviation` says what the paper writes, what fatstudio
does, why, and the setting that changes it, if any, and the architectures it concerns (`Deviation.archs`).
The app lists them beside the pseudocode, the chosen architecture's first (`deviations(arch)`).

Torch-free: the defaults quoted are read from the configuration classes, so the text follows the code.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Arch, ModelConfig, TrainConfig


@dataclass(frozen=True)
class Deviation:
    topic: str
    paper: str  # what the paper writes (or leaves out)
    fatstudio: str  # what fatstudio does
    why: str
    setting: str = ""  # the setting that changes it ("" = none)
    archs: tuple[Arch, ...] = ()  # the architectures it concerns (() = every one)

    def rank(self, arch: Arch) -> int:
        """0: about ``arch`` alone (or a few, ``arch`` among them); 1: about every architecture; 2: about others."""
        return 0 if arch in self.archs else 1 if not self.archs else 2


def _sinusoidal_base() -> str:
    """The default b of the sinusoidal W_p in words, read from the configuration (ℓ_max or a number)."""
    l_max = 64
    b = ModelConfig(positions="sinusoidal", l_max=l_max).resolved().position_base
    return "ℓ_max (as Algorithm 2 writes it)" if b == l_max else f"{b:g}"


def deviations(arch: Arch | None = None) -> list[Deviation]:
    """Every deviation; with ``arch``, those about that architecture alone first, then those about every
    architecture, then those about the others (each group in its own order)."""
    every = _deviations()
    if arch is None:
        return every
    return sorted(every, key=lambda d: d.rank(arch))


def _deviations() -> list[Deviation]:
    m, t = ModelConfig(), TrainConfig()
    return [
        Deviation(
            "Erratum: BERT's final norm and W_u (Algorithm 9)",
            "γ, β ∈ ℝ^d_e and W_u ∈ ℝ^(N_V×d_e), after the projection X ← GELU(W_f X + b_f 1ᵀ) with W_f ∈ ℝ^(d_f×d_e).",
            "γ, β ∈ ℝ^d_f and W_u ∈ ℝ^(N_V×d_f).",
            "X has d_f rows after W_f, so only these shapes fit; the paper's differ unless d_f = d_e (the default).",
            "model.d_f", ("bert",)),
        Deviation(
            "BERT's embedding norm and MLM bias (imported models)",
            "X ← [W_e[:, x[t]] + W_p[:, t]] goes straight into the first layer, and P = softmax(W_u X) has no bias.",
            f"As the paper by default (embed_norm = {str(m.embed_norm).lower()}, unembed_bias = "
            f"{str(m.unembed_bias).lower()}); with them on, X ← layer_norm(X | γ_e, β_e) after the embedding and "
            "P = softmax(W_u X + b_u 1ᵀ), as a BertForMaskedLM checkpoint has (fatstudio import turns both on).",
            "So that a real BERT computes exactly in the paper's model: Devlin et al.'s BERT normalises its "
            "embedding and its MLM head has a bias, two details Algorithm 9 leaves out.",
            "model.embed_norm, model.unembed_bias", ("bert",)),
        Deviation(
            "Erratum: GPT-2's normalised copy X̃ (Algorithm 10, lines 5-8)",
            "The earlier version writes line 5 as X ← layer_norm(X), overwriting the residual stream.",
            "X̃ ← layer_norm(X | γ¹_l, β¹_l); X ← X + MHAttention(X̃ | …), as the corrected version and GPT-2 do: "
            "the residual stream itself is never normalised (pre-LN).",
            "Overwriting X would make the residual connection skip nothing: that is not GPT-2.",
            "model.norm_position", ("gpt", "gopher")),
        Deviation(
            "Erratum: the decoder's loop index (Algorithm 8, line 13)",
            "for i = 1, 2, …, L_dec, while the loop body uses the layer index l.",
            "for l = 1, 2, …, L_dec.",
            "A typo: the body's parameters 𝒲^dec_l, γ³_l, … are indexed by the loop variable.", archs=("edt",)),
        Deviation(
            "Gopher's positions",
            "Gopher \"uses different positional embeddings\" than GPT-2 (no formula).",
            "Transformer-XL's relative scheme (Dai et al. 2019), which Gopher (Rae et al. 2021) uses: the score of "
            "query i and key j is (q_i + u)ᵀk_j + (q_i + v)ᵀW_r r_{i-j}, all scaled by 1/√d_attn, with r_{i-j} "
            "the sinusoid of the distance i - j (b = 10000 by default), W_r ∈ ℝ^(H·d_attn×d_e) (no bias), and u, "
            "v per head, learned in every layer; no absolute W_p. Transformer-XL's memory of earlier segments is "
            "not used: each sequence is read on its own.",
            "The paper names no scheme; this is the one of the Gopher paper.",
            "model.positions, model.position_base", ("gopher",)),
        Deviation(
            "Sinusoidal positions' base b (Algorithm 2)",
            "W_p[2i-1, t] = sin(t/ℓ_max^{2i/d_e}), W_p[2i, t] = cos(t/ℓ_max^{2i/d_e}), t = 1…ℓ_max.",
            f"The same table, by default with b = {_sinusoidal_base()}; Vaswani et al.'s b = 10000 is a setting. "
            "Positions start at t = 1 as in the paper (Vaswani et al. start at 0).",
            "Both bases appear in the literature; the paper's is the default, the common one a click away.",
            "model.position_base"),
        Deviation(
            "GELU",
            "GELU(x) = x·Φ(x), Φ the standard normal CDF (exact).",
            "Exactly that by default. The tanh approximation that the released GPT-2 and BERT code use is the "
            "variant 'gelu_tanh'. BERT's final projection (Algorithm 9, line 10) always uses the exact GELU.",
            "The paper's definition is the exact one.",
            "model.activation", ("bert", "gpt", "gopher")),
        Deviation(
            "ε in the norms (Algorithm 6)",
            "ê = (e - m)/√v ⊙ γ + β (RMSnorm: e/√mean(e²) ⊙ γ), with no ε.",
            f"√(v + ε) and √(mean(e²) + ε) with ε = {m.norm_eps:g}.",
            "Without ε a constant vector (v = 0) divides by zero.",
            "model.norm_eps"),
        Deviation(
            "Initialisation",
            "None given: θ is an input to the training algorithms.",
            "Every matrix (W_e, W_p, W_q, W_k, W_v, W_r, W_mlp…, W_f, W_u, the class head) from N(0, 0.02²); the "
            "residual projections W_o and W_mlp2 from N(0, (0.02/√(2·layers))²) (GPT-2); Transformer-XL's u and v "
            "(H × d_attn each) from N(0, 0.02²) too; γ = 1; biases and β = 0. A tied W_u is W_e itself.",
            "GPT-2's scheme: it keeps the residual stream's variance from growing with depth. (The sinusoidal "
            "tables are fixed, not initialised.)"),
        Deviation(
            "Padding",
            "No padding token: each algorithm reads one sequence at a time.",
            "A pad token (id N_V-4, before mask, bos, eos, which take the paper's last ids) right-pads the "
            "examples of a minibatch; padded keys get -∞ scores (a padded query still sees itself, so no row is "
            "empty) and padded targets are left out of the loss.",
            "Minibatches of examples of different lengths need a common length; the reference tests prove that "
            "padding changes no probability and no attention weight of a real token."),
        Deviation(
            "Training: minibatches and AdamW (Algorithms 11-13)",
            "θ ← θ - η·∇loss(θ) for one sequence at a time, N_epochs times over the data; loss = -Σ_t log P.",
            f"Minibatches (batch size {t.batch_size}) with AdamW (β = ({t.beta1:g}, {t.beta2:g}), weight decay "
            f"{t.weight_decay:g} on matrices only), a linear warm-up of {t.warmup} steps then cosine decay to "
            f"min_lr, gradient clipping at norm {t.grad_clip:g}; the loss is the mean over the counted positions "
            "(the sum only rescales η). Plain SGD is a choice: optimizer 'sgd' with weight decay 0, grad_clip 0, "
            "warm-up 0, a constant schedule and batch size 1 is the paper's update, up to the mean."
            f" Optimizer 'muon' gives the hidden matrices (W_q, W_k, W_v, W_o, W_mlp…) Muon's update instead "
            f"(momentum orthogonalised by Newton-Schulz, η {t.muon_lr:g}, weight decay {t.muon_weight_decay:g}).",
            "What practice does (paper §8): it trains much faster and more stably.",
            "train.optimizer, train.batch_size, train.lr_schedule, train.warmup, train.weight_decay, "
            "train.grad_clip, train.muon_lr, train.muon_weight_decay"),
        Deviation(
            "Training data: windows, masking",
            "DTraining and ETraining read whole sequences x_n (framed by bos and eos); ETraining replaces each "
            "token by mask_token with probability p_mask.",
            "next-token and masked-LM training read random windows of ℓ_max tokens of the whole corpus as one "
            "token stream (nanoGPT), without bos/eos; masked LM masks with probability p_mask and, where that "
            "masks nothing in a window, masks one random position. Seq2seq and classification examples are "
            "framed as [bos] + text + [eos].",
            "Windows use every token of a long corpus for every context length; a window without a masked "
            "token would give no loss.",
            "data.p_mask"),
        Deviation(
            "Layout: columns vs rows",
            "Vectors are columns: X ∈ ℝ^(d_e×ℓ), S = KᵀQ ∈ ℝ^(ℓ_z×ℓ_x), softmax over the keys t_z (columns sum "
            "to 1); indices start at 1.",
            "Row-major batches (B, T, d_e); every weight matrix is stored as the paper writes it (out × in, "
            "W_e and W_p transposed: one row a token or position); attention maps are (B, H, T_query, T_key) "
            "with each query's row summing to 1, i.e. the paper's softmax(S/√d_attn) transposed; indices start "
            "at 0.",
            "The layout of PyTorch and of every attention plot; the reference tests check the numbers are the "
            "paper's."),
        Deviation(
            "Dropout",
            "None.",
            "Optional (off by default): on the embedding, on the attention weights and on each sublayer's output "
            "before the residual sum, while training only.",
            "Regularisation for small corpora (paper §8 lists it).",
            "model.dropout"),
        Deviation(
            "Fused attention and precision",
            "Exact real arithmetic.",
            "Without attention capture, attention runs in PyTorch's fused scaled_dot_product_attention kernel (the "
            "same function, summed in another order); training uses bf16 autocast where the device does bf16 "
            "natively ('auto'), else fp32. Shown attention maps come from the explicit softmax(S/√d_attn).",
            "Speed. In float64 both paths match the reference to ~1e-15 (Check against the paper).",
            "train.precision"),
        Deviation(
            "Classification head (§3)",
            "P(c | x) with an ETransformer, no algorithm given.",
            "A linear head W_c, b_c on the final vector of the first position (bos) of Algorithm 9's output, "
            "after W_f and the final norm.",
            "BERT's choice (its [CLS] token).",
            "data.task = classification", ("bert",)),
        Deviation(
            "Prompting (Algorithms 14 and 15)",
            "Sample y ∝ p^{1/τ} from the full distribution; the context grows without bound.",
            "pad, mask and bos are never sampled; top-k and nucleus (top-p) filters are available (off by "
            "default); τ = 0 is greedy; when x reaches ℓ_max the window slides by ℓ_max/8 tokens and the KV "
            "cache is rebuilt.",
            "Text never continues with those tokens; the model cannot read beyond ℓ_max positions.",
            "the Prompt tab's τ, top-k, top-p", ("edt", "gpt", "gopher")),
    ]
