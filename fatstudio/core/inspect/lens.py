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

**Direct logit attribution** (`attribution`, re-exported here): the logit at one position split into the
embedding, each head, each MLP and the biases, with the norms on the stream's path frozen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..device import model_device
from ..inference.generation import eval_mode
from ..inference.prompting import check_length, encode_prompt
from ..model import hooks
from .attribution import Attribution, attribute, check_attributable
from .components import stacks, stream_point

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
    kind, layers = stacks(model)[-1]  # the stack whose stream is unembedded (an edt's decoder)
    readout = _readout(model)
    kw = {"context": context} if context is not None else {}
    points = [stream_point(kind, l, len(layers)) for l in range(len(layers) + 1)]  # the embedding, each layer's output
    with eval_mode(model), hooks.recorded(model, points) as streams:
        logits = model(x, **kw)
    rows = torch.stack([readout(streams[p][0])[0] for p in points])
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


__all__ = ["Lens", "Attribution", "lens", "lens_probs", "attribute", "check_attributable", "encode"]
