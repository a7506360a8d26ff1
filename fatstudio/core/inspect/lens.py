"""The logit lens and direct logit attribution.

**Lens.** For a text, the residual stream after every layer read through what the model puts after its last
layer: an (L+1) × T grid of the most likely token and its probability. Row 0 is the embedding, row ℓ the stream
after layer ℓ, and the last row is the model's own output distribution (the same operations on the same
numbers). What "read through" means per architecture:

- gpt, gopher (pre-LN): the final norm, then the unembedding W_u; position t predicts token t+1.
- an encoder-decoder: the decoder's stream, through its final norm (pre-LN) and W_u; t predicts t+1.
- bert: the final norm, BERT's head layer_norm(GELU(W_f X + b_f)) and W_u; position t predicts the token at t.
- post-LN models (bert and edt by default): there is no final norm, since every layer ends with a norm; so each
  layer's output is already normed as the last one is, and is read exactly as the last is. Row 0, the
  embedding, is read unnormed.

**Direct logit attribution.** In a pre-LN decoder-only model (gpt, gopher) the final stream at a position is a
sum: the embedding (token and position), each head's W_o-projected output, each MLP's output, and the biases
(every b_o and b_mlp2). With the final norm's scale frozen at its measured value (LayerNorm: subtract the mean,
divide by the measured √(var + ε), scale by γ; RMSnorm: divide by the measured RMS, scale by γ), the norm is
linear, so the target's logit W_u[target]·norm(x) splits into one term per part, β going to the biases. A
post-LN model renormalises after every sublayer, so its stream is no such sum: it is refused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from ..device import model_device
from .components import components, outputs_of, recorded, stacks
from .inference import eval_mode
from .prompting import check_length, encode_prompt

if TYPE_CHECKING:
    from ..data.tokenization import TokenizerLike


def _readout(model):
    """What follows the last layer, as a function of a stream (..., d_e) -> logits (..., N_V)."""
    arch = model.config.arch
    if arch == "bert":
        return lambda X: model.unembed(model.norm_f(F.gelu(model.W_f(model.norm_final(X)))))
    if arch == "edt":
        return lambda X: model.unembed(model.norm_dec(X))
    return lambda X: model.unembed(model.norm_final(X))


def encode(model, tokenizer: TokenizerLike, text: str, source: str | None = None
           ) -> tuple[list[int], list[int] | None]:
    """The ids the lens reads (x, and an encoder-decoder's z), as the Prompt tab encodes them: gpt/gopher the
    text; bert [bos] + text + [eos] with mask markers; edt the decoder's [bos] + text, the source framed."""
    arch, l_max = model.config.arch, model.config.l_max
    if arch == "edt":
        if not source:
            raise ValueError("this is an encoder-decoder: give the source text too (--source).")
        z = list(encode_prompt(tokenizer, source, "translate", l_max=l_max).context_ids or ())
        x = [tokenizer.bos_id, *tokenizer.encode(text)]
        check_length(len(x), l_max, "text")
        return x, z
    if source:
        raise ValueError(f"a {arch!r} model reads one text; give no source.")
    if arch == "bert":
        return list(encode_prompt(tokenizer, text, "fill_mask", l_max=l_max).ids), None
    x = list(encode_prompt(tokenizer, text, "generate", l_max=l_max).ids)
    if not x:
        raise ValueError("there is nothing to read: write a text.")
    check_length(len(x), l_max, "text")
    return x, None


@torch.inference_mode()
def lens_probs(model, x: torch.Tensor, context: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities (L+1, T, N_V) of x (1, T) read after each layer, the model's own output probabilities
    (T, N_V))."""
    kind, _, layers = stacks(model)[-1]  # the stack whose stream is unembedded (an edt's decoder)
    readout = _readout(model)
    kw = {"context": context} if context is not None else {}
    with eval_mode(model), outputs_of(list(layers)) as streams:
        logits = model(x, **kw)
        embedded = model.embed(x)
    rows = torch.stack([readout(X)[0] for X in (embedded, *streams[-len(layers):])])
    return rows.double().softmax(-1), logits[0].double().softmax(-1)


@dataclass
class Lens:
    """The top token and its probability after each layer (row 0: the embedding) at each position."""

    tokens: list[str]
    top_tokens: list[list[str]]
    top_probs: list[list[float]]
    source_tokens: list[str] | None = None

    def to_dict(self) -> dict:
        out: dict = {"tokens": self.tokens,
                     "layers": [{"layer": l, "top_tokens": t, "top_probs": p}
                                for l, (t, p) in enumerate(zip(self.top_tokens, self.top_probs))]}
        if self.source_tokens is not None:
            out["source_tokens"] = self.source_tokens
        return out


def lens(model, tokenizer: TokenizerLike, text: str, source: str | None = None) -> Lens:
    """The logit lens of ``text`` (an encoder-decoder's target, read given ``source``)."""
    x, z = encode(model, tokenizer, text, source)
    dev = model_device(model)
    probs, _ = lens_probs(model, torch.tensor([x], device=dev), None if z is None else torch.tensor([z], device=dev))
    p, ids = probs.max(-1)  # (L+1, T)
    flat = tokenizer.token_strings(ids.flatten().tolist())
    T = len(x)
    return Lens(tokenizer.token_strings(x), [flat[r * T:(r + 1) * T] for r in range(len(ids))], p.tolist(),
                None if z is None else tokenizer.token_strings(z))


# ------------------------------------------------------------------------------------ logit attribution
@dataclass
class Attribution:
    """The target's logit at one position and its parts: "embedding", each head ("self/L/H"), each MLP
    ("mlp/L") and "biases" (see the module); ``scale`` the final norm's measured divisor."""

    logit: float
    parts: dict[str, float]
    scale: float

    @property
    def total(self) -> float:
        return float(sum(self.parts.values()))


def check_attributable(model) -> None:
    arch = model.config.arch
    if arch not in ("gpt", "gopher"):
        raise ValueError(f"direct logit attribution splits a decoder-only model's final stream into its parts; "
                         f"this is a {arch!r} model, whose output head is "
                         + ("not linear (GELU(W_f X))." if arch == "bert" else "read from an encoder too."))
    if model.config.norm_position != "pre":
        raise ValueError("direct logit attribution needs a pre-LN model: a post-LN model renormalises its stream "
                         "after every sublayer, so the stream is no sum of the heads' and MLPs' outputs.")


@torch.inference_mode()
def attribute(model, x: torch.Tensor, position: int, target: int) -> Attribution:
    """Split the logit of token ``target`` at ``position`` of x (1, T) (see the module)."""
    check_attributable(model)
    comps = components(model)
    kept: dict[str, list[torch.Tensor]] = {}
    with eval_mode(model), recorded(comps, kept), outputs_of(list(model.layers)) as streams:
        logits = model(x)
        e = model.embed(x)[0, position]
    final = streams[-1][0, position]  # x_L (d_e)
    norm, w = model.norm_final, model.unembed.W_u.weight[target]
    if norm.kind == "layer":
        scale = torch.sqrt(final.var(unbiased=False) + norm.eps)
        linear = lambda v: (v - v.mean()) / scale * norm.gamma  # the frozen norm, without β
        parts = {"biases": w @ norm.beta}
    else:
        scale = torch.sqrt(final.pow(2).mean() + norm.eps)
        linear = lambda v: v / scale * norm.gamma
        parts = {"biases": w.new_zeros(())}
    parts["embedding"] = w @ linear(e)
    for c in comps:
        out, module = kept[c.name][0][0, position], cast(Any, c.module)
        if c.is_head:
            parts[c.name] = w @ linear(c.part(module.weight) @ out)  # W_o's columns of the head
            if c.head == 0 and module.bias is not None:
                parts["biases"] = parts["biases"] + w @ linear(module.bias)
        else:
            b = module.W_mlp2.bias
            parts[c.name] = w @ linear(out - b if b is not None else out)
            if b is not None:
                parts["biases"] = parts["biases"] + w @ linear(b)
    return Attribution(float(logits[0, position, target]), {k: float(v) for k, v in parts.items()}, float(scale))


__all__ = ["Lens", "Attribution", "lens", "lens_probs", "attribute", "check_attributable", "encode"]
