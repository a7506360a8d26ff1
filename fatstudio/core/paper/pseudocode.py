"""The pseudocode of the chosen architecture, Algorithm 8, 9 or 10 of Phuong & Hutter (Gopher: Algorithm 10 with
its changes), as structured lines with the configuration's shapes and variations written in.

Each `Line` knows the paper's algorithm and line number it stands for, the ModelConfig fields (the Model
panel's rows) and the parameters (state-dict names) it uses, the attention kind of the MHAttention it calls,
and a `Tap`: where the tensor it produces shows in the fast model (a hook point, `model.hooks`). A line
inside ``for l`` writes ``{l}`` for the layer in its parameter names and tap; `Line.parameters` and
`Line.tap_at` fill it in. `trace` runs one forward pass of a copy of the model reading exactly the tapped hook
points and returns each tapped tensor (`tensor_stats` sums one up).

Torch-free at import (the GUI builds the lines on its own thread; torch comes with `trace`).
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import ModelConfig, ResolvedModelConfig
from ..names import AttentionKind, MapName, StackKind, of_stack

if TYPE_CHECKING:
    import torch

ALGORITHMS = {"edt": 8, "bert": 9, "gpt": 10, "gopher": 10}
_ACT = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU_tanh", "swiglu": "SwiGLU"}
_SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹"
_SHAPE_COLUMN = 62  # where a line's shape note starts


@dataclass(frozen=True)
class Tap:
    """Where a line's tensor shows in the fast model: the hook point named ``point`` (``{l}`` for the layer), or
    the model's output, ``"logits"`` (W_u X) or ``"class-logits"`` (a bert's class head). ``softmax``: the
    line's P is the softmax of that output over the vocabulary (or the classes)."""

    point: str
    softmax: bool = False

    def at(self, l: int) -> Tap:
        return replace(self, point=self.point.format(l=l))


OUTPUTS = ("logits", "class-logits")  # the taps that are the model's outputs, not hook points
_KINDS: dict[str, StackKind] = {"layers": "self", "encoder": "enc", "decoder": "dec"}  # a stack's self-attention kind


def _of_stack(stack: str, what: str) -> str:
    """The point ``what`` ("embed", "final", "mlp") of a stack's (`names.of_stack`)."""
    return of_stack(_KINDS[stack], what)


@dataclass(frozen=True)
class Line:
    """One line of the pseudocode. ``algorithm``/``number``: the paper's line it stands for (None: a heading
    or a note). ``fields``: the ModelConfig fields its shapes and choices come from. ``params``: the state-dict
    names of the parameters it uses, ``{l}`` for the layer when ``stack`` ("layers", "encoder", "decoder")
    loops over layers. ``tap``: the tensor it produces. ``attention``: the kind of the attention maps its
    MHAttention call makes."""

    text: str
    algorithm: int | None = None
    number: int | None = None
    fields: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    tap: Tap | None = None
    stack: str | None = None
    attention: AttentionKind | None = None
    shape: str = ""

    def parameters(self, l: int) -> list[str]:
        """The state-dict names of the parameters this line uses in layer ``l``."""
        return [p.format(l=l) for p in self.params]

    def tap_at(self, l: int) -> Tap | None:
        return self.tap.at(l) if self.tap is not None else None

    def where(self) -> str:
        """"Algorithm 10, line 6"; "Algorithm 10" for its header; "" for a note beside it."""
        if self.algorithm is None:
            return ""
        return f"Algorithm {self.algorithm}" + (f", line {self.number}" if self.number is not None else "")


@dataclass
class Pseudocode:
    """The lines of one configuration's algorithm; ``layers`` gives each stack's number of layers."""

    config: ResolvedModelConfig
    lines: list[Line]
    layers: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        """The lines for a monospace view, one a row, the paper's line number in a left column."""
        return "\n".join(_render(line) for line in self.lines)

    def attention_line(self, kind: AttentionKind) -> int:
        """The index of the line whose MHAttention call makes the attention maps of ``kind``."""
        for i, line in enumerate(self.lines):
            if line.attention == kind:
                return i
        raise ValueError(f"this {self.config.arch} model has no {kind!r} attention.")

    def taps(self) -> list[Tap]:
        """Every line's tap in every layer of its stack, once each."""
        out: dict[Tap, None] = {}
        for line in self.lines:
            if line.tap is not None:
                for l in range(self.layers.get(line.stack, 1) if line.stack else 1):
                    out[line.tap.at(l)] = None
        return list(out)


def _render(line: Line) -> str:
    number = f"{line.number:>3}" if line.number is not None else "   "
    text = f"{number}  {line.text}"
    return f"{text:<{_SHAPE_COLUMN}}  {line.shape}" if line.shape else text


def _mat(r: int | str, c: int | str) -> str:
    return f"ℝ^({r}×{c})"


class _Builder:
    """Writes the lines of one resolved configuration (`pseudocode`)."""

    def __init__(self, c: ResolvedModelConfig) -> None:
        self.c = c
        self.alg = ALGORITHMS[c.arch]
        self.lines: list[Line] = []
        self.pre = c.norm_position == "pre"
        self.norm = "layer_norm" if c.norm == "layer" else "rms_norm"

    # -- writing -----------------------------------------------------------------------------------------
    def w(self, text: str, number: int | None = None, **kw: Any) -> None:
        self.lines.append(Line(text, self.alg, number, **kw))

    def note(self, text: str, **kw: Any) -> None:
        self.lines.append(Line(text, **kw))

    # -- pieces -------------------------------------------------------------------------------------------
    def gb(self, mark: str) -> str:
        """γ{mark}, β{mark} (layer_norm) or γ{mark} (RMSnorm: no β), e.g. mark = "¹_l"."""
        return f"γ{mark}, β{mark}" if self.c.norm == "layer" else f"γ{mark}"

    def norm_params(self, module: str) -> tuple[str, ...]:
        return (f"{module}.gamma",) + ((f"{module}.beta",) if self.c.norm == "layer" else ())

    def linear(self, module: str) -> tuple[str, ...]:
        return (f"{module}.weight",) + ((f"{module}.bias",) if self.c.bias else ())

    def attn_params(self, module: str, cross: bool) -> tuple[str, ...]:
        out = tuple(p for n in "qkvo" for p in self.linear(f"{module}.W_{n}"))
        if self.c.positions == "relative" and not cross:
            out += (f"{module}.W_r.weight", f"{module}.u", f"{module}.v")
        return out

    def attn_fields(self, cross: bool) -> tuple[str, ...]:
        out: tuple[str, ...] = ("H", "H_kv", "d_attn", "d_mid", "d_e", "bias")
        if not cross and self.c.positions in ("rope", "alibi", "relative"):
            out += ("positions",) + (("position_base",) if self.c.positions != "alibi" else ())
        return out

    def mlp_params(self, module: str) -> tuple[str, ...]:
        gate = self.linear(f"{module}.W_gate") if self.c.activation == "swiglu" else ()
        return self.linear(f"{module}.W_mlp1") + gate + self.linear(f"{module}.W_mlp2")

    def mlp(self, i: int, j: int) -> str:
        """W_mlp{j} act(W_mlp{i} @ + b 1ᵀ) + b 1ᵀ; @ stands for the sublayer's input."""
        c = self.c
        b = lambda name: f" + b_{name}^l 1ᵀ" if c.bias else ""
        if c.activation == "swiglu":
            return f"W_mlp{j}^l (Swish(W_gate^l @{b('gate')}) ⊙ (W_mlp{i}^l @{b(f'mlp{i}')})){b(f'mlp{j}')}"
        return f"W_mlp{j}^l {_ACT[c.activation]}(W_mlp{i}^l @{b(f'mlp{i}')}){b(f'mlp{j}')}"

    # -- sections -------------------------------------------------------------------------------------------
    def header(self, title: str, inputs: str, output: str, hyper: str, extra_hyper: tuple[str, ...] = ()) -> None:
        c = self.c
        self.w(f"Algorithm {self.alg}: {title}", fields=("arch",))
        self.w(f"Input: {inputs}")
        self.w(f"Output: {output}", fields=("vocab_size",))
        kv = f", H_kv = {c.H_kv}" if c.H_kv != c.H else ""
        self.w(f"Hyperparameters: ℓ_max = {c.l_max}, {hyper}, H = {c.H}{kv}, d_e = {c.d_e}, d_mlp = {c.d_mlp}, "
               f"d_attn = {c.d_attn}, d_mid = {c.d_mid}",
               fields=("l_max", *extra_hyper, "H", "H_kv", "d_e", "d_mlp", "d_attn", "d_mid"))
        self.w("Parameters: θ includes all of the following parameters:")
        learned = c.positions == "learned"
        self.w(f"  W_e ∈ {_mat(c.d_e, c.vocab_size)}" + (f", W_p ∈ {_mat(c.d_e, c.l_max)}" if learned else "")
               + ", the token" + (" and positional embedding matrices" if learned else " embedding matrix"),
               fields=("vocab_size", "d_e") + (("l_max", "positions") if learned else ()),
               params=("embed.W_e.weight",) + (("embed.W_p.weight",) if learned else ()))
        if c.embed_norm:
            self.w(f"  {self.gb('_e')} ∈ ℝ^{c.d_e}, the embedding's {self.norm} parameters (BERT's)",
                   fields=("embed_norm", "norm", "d_e"), params=self.norm_params("embed.norm"))

    def layer_params(self, stack: str, L: str, kinds: tuple[tuple[str, str, bool], ...], norms: tuple[int, ...],
                     mlp: tuple[int, int]) -> None:
        """The paper's "For l ∈ [L]:" block: attention parameters, norm parameters, MLP parameters."""
        c = self.c
        p = f"{stack}.{{l}}"
        self.w(f"  For l ∈ [{L}]:", fields=(L,))
        for name, module, cross in kinds:
            rel = ", W_r, u, v (relative positions)" if c.positions == "relative" and not cross else ""
            self.w(f"  | {name}: W_q ∈ {_mat(c.H * c.d_attn, c.d_e)}, W_k ∈ {_mat(c.H_kv * c.d_attn, c.d_e)}, "
                   f"W_v ∈ {_mat(c.H_kv * c.d_mid, c.d_e)}, W_o ∈ {_mat(c.d_e, c.H * c.d_mid)}"
                   + (", b_q, b_k, b_v, b_o" if c.bias else " (no biases)") + rel,
                   fields=self.attn_fields(cross), params=self.attn_params(f"{p}.{module}", cross), stack=stack)
        names = {1: "norm_attn", 2: "norm_mlp", 3: "norm_attn", 4: "norm_cross", 5: "norm_mlp"}
        gbs = ", ".join(self.gb(f"{_SUP[i]}_l") for i in norms)
        self.w(f"  | {gbs} ∈ ℝ^{c.d_e}, {len(norms)} sets of {self.norm} parameters",
               fields=("norm", "d_e"), params=tuple(q for i in norms for q in self.norm_params(f"{p}.{names[i]}")),
               stack=stack)
        i, j = mlp
        gate = f", W_gate^l ∈ {_mat(c.d_mlp, c.d_e)}" if c.activation == "swiglu" else ""
        self.w(f"  | W_mlp{i}^l ∈ {_mat(c.d_mlp, c.d_e)}{gate}, W_mlp{j}^l ∈ {_mat(c.d_e, c.d_mlp)}"
               + (f", b_mlp{i}^l ∈ ℝ^{c.d_mlp}, b_mlp{j}^l ∈ ℝ^{c.d_e}" if c.bias else "") + ", MLP parameters",
               fields=("d_mlp", "d_e", "activation", "bias"), params=self.mlp_params(f"{p}.mlp"), stack=stack)

    def unembedding_params(self, d: int, d_name: str) -> None:
        c = self.c
        self.w(f"  W_u ∈ {_mat(c.vocab_size, d)}, the unembedding matrix" + (" (= W_eᵀ, tied)" if c.tie_embeddings else "")
               + (f", b_u ∈ ℝ^{c.vocab_size}, its bias" if c.unembed_bias else ""),
               fields=("vocab_size", d_name, "tie_embeddings", "unembed_bias"), params=self.unembed_params())

    def unembed_params(self) -> tuple[str, ...]:
        return ("unembed.W_u.weight",) + (("unembed.b_u",) if self.c.unembed_bias else ())

    def positions_note(self) -> None:
        c = self.c
        notes = {
            "learned": "learned W_p (Algorithm 2)",
            "sinusoidal": f"fixed sinusoidal W_p with b = {c.position_base:g} (Algorithm 2), a table, not trained",
            "rope": f"rotary (RoPE, b = {c.position_base:g}): Q and K rotated inside MHAttention, no W_p",
            "alibi": "ALiBi: a per-head distance penalty m_h·|t - t′| on the scores, no W_p",
            "relative": f"Transformer-XL relative positions inside the scores (r sinusoidal in t - t′, "
                        f"b = {c.position_base:g}), no W_p",
            "none": "none: the model sees no positions",
        }
        self.note(f"Positions: {notes[c.positions]}", fields=("positions", "position_base"))

    def embed(self, stack: str, seq: str, big: str, n: str, first: int) -> None:
        """Lines first..first+2: ℓ ← length(x); e_t ← W_e[:, x[t]] + W_p[:, t]; X ← [e_1, …, e_ℓ]."""
        c = self.c
        learned = c.positions in ("learned", "sinusoidal")
        pos = " + W_p[:, t]" if learned else ""
        fields = ("vocab_size", "d_e", "positions") + (("position_base",) if c.positions == "sinusoidal" else ())
        params = ("embed.W_e.weight",) + (("embed.W_p.weight",) if c.positions == "learned" else ())
        tap = Tap(_of_stack(stack, "embed"))  # e_t, before BERT's embedding norm
        self.w(f"{n} ← length({seq})", first, fields=("l_max",))
        self.w(f"for t ∈ [{n}]: e_t ← W_e[:, {seq}[t]]{pos}", first + 1, fields=fields, params=params, tap=tap,
               shape=f"e_t ∈ ℝ^{c.d_e}")
        self.w(f"{big} ← [e_1, e_2, …, e_{n}]", first + 2, fields=fields, params=params, tap=tap,
               shape=f"{big} ∈ {_mat(c.d_e, n)}")
        if c.embed_norm:
            self.w(f"{big} ← {self.norm}({big} | {self.gb('_e')})", fields=("embed_norm", "norm", "norm_eps"),
                   params=self.norm_params("embed.norm"), tap=Tap(f"{_KINDS[stack]}/0/resid_pre"),
                   shape=f"{big} ∈ {_mat(c.d_e, n)}")

    def sublayers(self, stack: str, big: str, n: str,
                  steps: list[tuple[int, int, str, int, str, AttentionKind | None]]) -> None:
        """The body of ``for l``: each step (residual line number, norm line number, the call with @ for its
        input, norm superscript, module, attention kind or None) written pre-LN or post-LN, with its taps."""
        c = self.c
        p = f"{stack}.{{l}}"
        norm_of = {"attn": "norm_attn", "cross": "norm_cross", "mlp": "norm_mlp"}
        # each sublayer's hook points, and the stream's after it (`core.model.hooks`)
        stream = _KINDS[stack]
        points = {"attn": f"{stream}/{{l}}", "cross": "cross/{l}", "mlp": f"{_of_stack(stack, 'mlp')}/{{l}}"}
        after = {"attn": "resid_mid", "cross": "resid_mid_cross", "mlp": "resid_post"}
        shape = f"{big} ∈ {_mat(c.d_e, n)}"
        for res_no, norm_no, call, sup, module, kind in steps:
            norm_mod = f"{p}.{norm_of[module]}"
            point, resid = points[module], Tap(f"{stream}/{{l}}/{after[module]}")
            normed = f"{big}̃ ∈ {_mat(c.d_e, n)}" if self.pre else shape
            norm_line: dict[str, Any] = dict(fields=("norm", "norm_position", "norm_eps"),
                                             params=self.norm_params(norm_mod), stack=stack, shape=normed)
            sub: dict[str, Any]
            if module == "mlp":
                sub = dict(fields=("d_mlp", "activation", "bias"), params=self.mlp_params(f"{p}.mlp"))
            else:
                cross = module == "cross"
                sub = dict(fields=self.attn_fields(cross), params=self.attn_params(f"{p}.{module}", cross),
                           attention=kind)
            if self.pre:
                self.w(f"    {big}̃ ← {self.norm}({big} | {self.gb(f'{_SUP[sup]}_l')})", norm_no,
                       tap=Tap(f"{point}/in"), **norm_line)
                self.w(f"    {big} ← {big} + {call.replace('@', big + '̃')}", res_no, tap=resid, stack=stack,
                       shape=shape, **sub)
            else:
                self.w(f"    {big} ← {big} + {call.replace('@', big)}", res_no, tap=Tap(f"{point}/sum"), stack=stack,
                       shape=shape, **sub)
                self.w(f"    {big} ← {self.norm}({big} | {self.gb(f'{_SUP[sup]}_l')})", norm_no, tap=resid, **norm_line)

    def final_norm(self, stack: str, module: str, big: str, n: str, mark: str) -> None:
        """Pre-LN stacks end with a norm (Algorithm 10 line 10; a variation elsewhere)."""
        if self.pre:
            self.w(f"{big} ← {self.norm}({big} | {self.gb(mark)})", 10 if self.alg == 10 else None,
                   fields=("norm", "norm_position", "norm_eps"), params=self.norm_params(module),
                   tap=Tap(_of_stack(stack, "final")), shape=f"{big} ∈ {_mat(self.c.d_e, n)}")

    def ret(self, number: int, n: str, d_name: str) -> None:
        c = self.c
        self.w("return P = softmax(W_u X" + (" + b_u 1ᵀ)" if c.unembed_bias else ")"), number,
               fields=("vocab_size", d_name, "tie_embeddings", "unembed_bias"), params=self.unembed_params(),
               tap=Tap("logits", softmax=True), shape=f"P ∈ {_mat(c.vocab_size, n)}")

    def mh_attention_note(self) -> None:
        c = self.c
        heads = f"h ∈ [{c.H}]" + (f", head h reading key/value head ⌊h·{c.H_kv}/{c.H}⌋" if c.H_kv != c.H else "")
        pos = {"rope": " (Q, K rotated)", "alibi": " - m_h·|t - t′|", "relative": " + Transformer-XL terms"}
        self.note("")
        self.note("MHAttention(X, Z | 𝒲, Mask), Algorithms 4 and 5:", fields=("H", "d_attn", "d_mid"))
        self.note(f"  for {heads}: Q^h ← W_q^h X, K^h ← W_k^h Z, V^h ← W_v^h Z" + (" (+ biases)" if c.bias else ""),
                  fields=self.attn_fields(False))
        self.note(f"    S ← K^hᵀQ^h / √{c.d_attn}{pos.get(c.positions, '')};  S[t_z, t_x] ← -∞ where Mask[t_z, t_x] = 0",
                  fields=("d_attn", "positions"))
        self.note("    Y^h ← V^h · softmax(S)     softmax over the keys t_z: each column sums to 1",
                  fields=("d_mid",))
        self.note(f"  Y ← [Y¹; …; Y^{c.H}];  return W_o Y" + (" + b_o 1ᵀ" if c.bias else ""),
                  fields=("H", "d_mid", "d_e", "bias"))
        if c.dropout:
            self.note(f"Dropout p = {c.dropout:g} on the embedding, the attention weights and each sublayer's "
                      "output while training.", fields=("dropout",))

    # -- the algorithms -------------------------------------------------------------------------------------
    def algorithm_8(self) -> None:
        c = self.c
        self.header("P ← EDTransformer(z, x | θ)", "z, x ∈ V*, two sequences of token IDs",
                    f"P ∈ (0, 1)^({c.vocab_size}×ℓ_x), P[:, t] = P̂(x[t+1] | x[1:t], z)",
                    f"L_enc = {c.L_enc}, L_dec = {c.L_dec}", ("L_enc", "L_dec"))
        self.layer_params("encoder", "L_enc", (("𝒲^enc_l", "attn", False),), (1, 2), (1, 2))
        self.layer_params("decoder", "L_dec", (("𝒲^dec_l", "attn", False), ("𝒲^e/d_l", "cross", True)), (3, 4, 5),
                          (3, 4))
        if self.pre:
            self.w(f"  {self.gb('_enc')}, {self.gb('_dec')} ∈ ℝ^{c.d_e}, final norms "
                   "(pre-LN variation)", fields=("norm", "norm_position"),
                   params=self.norm_params("norm_enc") + self.norm_params("norm_dec"))
        self.unembedding_params(c.d_e, "d_e")
        self.positions_note()
        self.note("/* Encode the context sequence: */")
        self.embed("encoder", "z", "Z", "ℓ_z", 1)
        self.w("for l = 1, 2, …, L_enc do", 4, fields=("L_enc",), shape=f"L_enc = {c.L_enc}")
        self.sublayers("encoder", "Z", "ℓ_z", [
            (5, 6, "MHAttention(@ | 𝒲^enc_l, Mask ≡ 1)", 1, "attn", "enc"),
            (7, 8, self.mlp(1, 2), 2, "mlp", None)])
        self.w("end", 9)
        self.final_norm("encoder", "norm_enc", "Z", "ℓ_z", "_enc")
        self.note("/* Decode the primary sequence, conditioning on the context: */")
        self.embed("decoder", "x", "X", "ℓ_x", 10)
        self.w("for l = 1, 2, …, L_dec do", 13, fields=("L_dec",), shape=f"L_dec = {c.L_dec}")
        self.sublayers("decoder", "X", "ℓ_x", [
            (14, 15, "MHAttention(@ | 𝒲^dec_l, Mask[t, t′] = [[t ≤ t′]])", 3, "attn", "dec"),
            (16, 17, "MHAttention(@, Z | 𝒲^e/d_l, Mask ≡ 1)", 4, "cross", "cross"),
            (18, 19, self.mlp(3, 4), 5, "mlp", None)])
        self.w("end", 20)
        self.final_norm("decoder", "norm_dec", "X", "ℓ_x", "_dec")
        self.ret(21, "ℓ_x", "d_e")

    def algorithm_9(self) -> None:
        c = self.c
        self.header("P ← ETransformer(x | θ)", "x ∈ V*, a sequence of token IDs (some replaced by mask_token)",
                    f"P ∈ (0, 1)^({c.vocab_size}×ℓ), P[:, t] = P̂(x[t] | x)", f"L = {c.L}, d_f = {c.d_f}", ("L", "d_f"))
        self.layer_params("layers", "L", (("𝒲_l", "attn", False),), (1, 2), (1, 2))
        if self.pre:
            self.w(f"  {self.gb('_final')} ∈ ℝ^{c.d_e}, the final norm of the stack (pre-LN variation)",
                   fields=("norm", "norm_position"), params=self.norm_params("norm_final"))
        self.w(f"  W_f ∈ {_mat(c.d_f, c.d_e)}, b_f ∈ ℝ^{c.d_f}, γ, β ∈ ℝ^{c.d_f}, the final linear projection and "
               f"{self.norm} parameters (erratum: the paper writes γ, β ∈ ℝ^d_e)", fields=("d_f", "d_e", "norm"),
               params=("W_f.weight", "W_f.bias", *self.norm_params("norm_f")))
        self.unembedding_params(c.d_f, "d_f")
        if c.n_classes:
            self.w(f"  W_c ∈ {_mat(c.n_classes, c.d_f)}, b_c ∈ ℝ^{c.n_classes}, the class head (§3 classification)",
                   fields=("n_classes", "d_f"), params=("class_head.weight", "class_head.bias"))
        self.positions_note()
        self.embed("layers", "x", "X", "ℓ", 1)
        self.w("for l = 1, 2, …, L do", 4, fields=("L",), shape=f"L = {c.L}")
        self.sublayers("layers", "X", "ℓ", [
            (5, 6, "MHAttention(@ | 𝒲_l, Mask ≡ 1)", 1, "attn", "self"),
            (7, 8, self.mlp(1, 2), 2, "mlp", None)])
        self.w("end", 9)
        self.final_norm("layers", "norm_final", "X", "ℓ", "_final")
        self.w("X ← GELU(W_f X + b_f 1ᵀ)", 10, fields=("d_f",), params=("W_f.weight", "W_f.bias"),
               tap=Tap("proj"), shape=f"X ∈ {_mat(c.d_f, 'ℓ')}")
        self.w(f"X ← {self.norm}(X | {self.gb('')})", 11,
               fields=("d_f", "norm", "norm_eps"), params=self.norm_params("norm_f"), tap=Tap("proj-norm"),
               shape=f"X ∈ {_mat(c.d_f, 'ℓ')}")
        self.ret(12, "ℓ", "d_f")
        if c.n_classes:
            self.note("return P(c | x) = softmax(W_c X[:, 1] + b_c)   (§3: the class head reads the bos position)",
                      fields=("n_classes", "d_f"), params=("class_head.weight", "class_head.bias"),
                      tap=Tap("class-logits", softmax=True), shape=f"P ∈ (0, 1)^{c.n_classes}")

    def algorithm_10(self) -> None:
        c = self.c
        title = "P ← DTransformer(x | θ)" + ("   (Gopher: RMSnorm, relative positions)" if c.arch == "gopher" else "")
        self.header(title, "x ∈ V*, a sequence of token IDs",
                    f"P ∈ (0, 1)^({c.vocab_size}×ℓ), P[:, t] = P̂(x[t+1] | x[1:t])", f"L = {c.L}", ("L",))
        self.layer_params("layers", "L", (("𝒲_l", "attn", False),), (1, 2), (1, 2))
        if self.pre:
            self.w(f"  {self.gb('')} ∈ ℝ^{c.d_e}, final {self.norm} parameters",
                   fields=("norm", "norm_position"), params=self.norm_params("norm_final"))
        self.unembedding_params(c.d_e, "d_e")
        self.positions_note()
        self.embed("layers", "x", "X", "ℓ", 1)
        self.w("for l = 1, 2, …, L do", 4, fields=("L",), shape=f"L = {c.L}")
        self.sublayers("layers", "X", "ℓ", [
            (6, 5, "MHAttention(@ | 𝒲_l, Mask[t, t′] = [[t ≤ t′]])", 1, "attn", "self"),
            (8, 7, self.mlp(1, 2), 2, "mlp", None)])
        self.w("end", 9)
        self.final_norm("layers", "norm_final", "X", "ℓ", "")
        self.ret(11, "ℓ", "d_e")


def pseudocode(cfg: ModelConfig) -> Pseudocode:
    """The lines of ``cfg``'s algorithm with its shapes (a ValueError, in words, for an invalid ``cfg``)."""
    c = cfg.validate().resolved()
    b = _Builder(c)
    {8: b.algorithm_8, 9: b.algorithm_9, 10: b.algorithm_10}[b.alg]()
    b.mh_attention_note()
    layers = {"encoder": c.L_enc, "decoder": c.L_dec} if c.arch == "edt" else {"layers": c.L}
    return Pseudocode(c, b.lines, layers)


# ------------------------------------------------------------------------------------------------ tracing
@dataclass(frozen=True)
class TensorStats:
    """What the details pane shows of a tensor: shape, mean, std, Frobenius norm, range, a histogram
    (``counts`` over the bins ``edges``)."""

    shape: tuple[int, ...]
    mean: float
    std: float
    norm: float
    min: float
    max: float
    counts: tuple[int, ...]
    edges: tuple[float, ...]


def tensor_stats(a: Any, bins: int = 24) -> TensorStats:
    """`TensorStats` of an array-like (a CPU tensor or numpy array); std is the population std."""
    x = np.asarray(a, dtype=np.float64)
    flat = x.reshape(-1)
    finite = flat[np.isfinite(flat)]
    counts, edges = np.histogram(finite, bins=bins) if finite.size else (np.zeros(bins, int), np.zeros(bins + 1))
    return TensorStats(tuple(x.shape), float(flat.mean()), float(flat.std()), float(np.sqrt((flat ** 2).sum())),
                       float(flat.min()), float(flat.max()), tuple(int(n) for n in counts),
                       tuple(float(e) for e in edges))


@dataclass
class Trace:
    """The tensors of one forward pass: each tap's tensor (batch row 0, float64 numpy, as the fast model lays
    it out: positions first) and the attention maps (H, T_query, T_key) by name."""

    tensors: dict[Tap, np.ndarray]
    attention: dict[MapName, np.ndarray]
    x: list[int]
    z: list[int] | None = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # every parameter's (state-dict name)


def trace(model: torch.nn.Module, taps: Sequence[Tap], x: Sequence[int], z: Sequence[int] | None = None) -> Trace:
    """One forward pass of a copy of ``model`` (eval mode, on its device) on the ids ``x`` (and an edt's source
    ``z``) reading the hook points of ``taps`` only: their tensors and every head's attention weights. A bert with
    a class head also runs ``classify`` for its class head's tap. The copy keeps eval mode away from a model
    another thread may be running."""
    import torch

    from ..device import model_device
    from ..model import ETransformer, Transformer, hooks

    m = copy.deepcopy(model).eval()
    assert isinstance(m, Transformer)
    dev = model_device(m)
    with torch.inference_mode(), hooks.recorded(m, {t.point for t in taps} - set(OUTPUTS)) as seen:
        xt = torch.tensor([list(x)], device=dev)
        kw = {"context": torch.tensor([list(z)], device=dev)} if z is not None else {}
        logits, attn = m(xt, return_attention=True, **kw)
        outputs = {"logits": logits}
        if isinstance(m, ETransformer) and m.class_head is not None:
            outputs["class-logits"] = m.classify(xt)
    tensors = {}
    for t in taps:
        v = (outputs[t.point] if t.point in OUTPUTS else seen[t.point][0])[0].double()  # the forward pass's, row 0
        tensors[t] = (v.softmax(-1) if t.softmax else v).cpu().numpy()
    maps = {MapName.parse(k): v[0].double().cpu().numpy() for k, v in attn.items()}
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    return Trace(tensors, maps, list(x), list(z) if z is not None else None, shapes)
