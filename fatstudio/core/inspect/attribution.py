"""Direct logit attribution: one position's target logit split into the embedding, each head, each MLP and the
biases, for every architecture.

Each sublayer's output is added to the residual stream (Algorithms 8-10); what makes the logit a non-linear
function of those outputs is the norms on the stream's path to the unembedding, and BERT's GELU. Both are
frozen at their measured values, which makes the path linear and the split exact:

- a norm's scale: LayerNorm subtracts the mean (linear), divides by the measured √(var + ε) and scales by γ;
  RMSnorm divides by the measured √(mean(e²) + ε) and scales by γ. Its β goes to the biases.
- BERT's head (Algorithm 9): GELU(u) = u·Φ(u) with the gate Φ(u) at its measured u = W_f X + b_f, so that
  X ↦ GELU(W_f X + b_f) is linear in X, b_f going to the biases; then its norm, frozen as above.

A part is the sublayer's output at ``position`` without its bias: a head's W_o columns times its Y^h (Algorithm
5), an MLP's output minus b_mlp2; "biases" collects every b_o, b_mlp2, β (and BERT's b_f). Each part is carried
along the stream's path alone: pre-LN (gpt, gopher) through the final norm only; post-LN (bert and edt by
default) through the norm after its own sublayer and every later one, since the stream is renormalised after
each. The parts then sum to the logit. "Direct" means the path along the stream: a part's effect through later
heads' and MLPs' inputs stays in those later parts.

An encoder-decoder is split at the decoder, which is unembedded: its embedding, self-attention heads
(``dec/L/H``), cross-attention heads (``cross/L/H``), MLPs (``dec-mlp/L``) and biases. The encoder reaches the
decoder's stream only through the cross-attention heads, so its share is in theirs.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from ..inference.generation import eval_mode
from ..model import hooks
from ..model.norm import Norm
from ..names import ComponentName
from .components import Component, components, recorded, stacks, stream_point


@dataclass
class Attribution:
    """The target's logit at one position and its parts: "embedding", each head ("self/L/H"), each MLP
    ("mlp/L") and "biases" (see the module); ``scale`` the measured divisor of the last norm on the stream
    (a pre-LN model's final norm, a post-LN model's last layer's last norm)."""

    logit: float
    parts: dict[str, float]
    scale: float

    @property
    def total(self) -> float:
        return float(sum(self.parts.values()))


def check_attributable(model, context: torch.Tensor | None = None) -> None:
    """ValueError unless ``model`` can be run as given: an encoder-decoder needs its source ``context``."""
    arch = model.config.arch
    if arch == "edt" and context is None:
        raise ValueError("an encoder-decoder's logits are its decoder's given the source: attribution needs the "
                         "source ids (context) too.")
    if arch != "edt" and context is not None:
        raise ValueError(f"a {arch!r} model reads one sequence; give no source.")


class _Stream:
    """The parts of the stream at one position (rows of one matrix), carried through frozen norms."""

    def __init__(self, e: torch.Tensor) -> None:
        self.names = ["biases", "embedding"]
        self.rows = [torch.zeros_like(e), e]
        self.scale = torch.ones((), dtype=e.dtype)

    def add(self, name: str, v: torch.Tensor) -> None:
        self.names.append(name)
        self.rows.append(v)

    def add_bias(self, b: torch.Tensor | None) -> None:
        if b is not None:
            self.rows[0] = self.rows[0] + b

    def freeze(self, norm: Norm, measured: torch.Tensor) -> None:
        """Pass every part through ``norm`` with its scale frozen at that of its measured input (see the module)."""
        P = torch.stack(self.rows)
        if norm.kind == "layer":
            self.scale = torch.sqrt(measured.var(unbiased=False) + norm.eps)
            P = P - P.mean(-1, keepdim=True)
        else:
            self.scale = torch.sqrt(measured.pow(2).mean() + norm.eps)
        self.rows = list(P / self.scale * norm.gamma)
        self.add_bias(norm.beta)

    def map(self, fn) -> None:
        self.rows = [fn(v) for v in self.rows]


def _sublayers(layer) -> list[tuple[Any, Norm, Any]]:
    """(sublayer, its norm, the hook point of the norm's input post-LN (X + the sublayer's output)) of a layer."""
    return [(sub, norm, total) for sub, norm, total in ((layer.attn, layer.norm_attn, layer.hook_attn_sum),
                                                        (layer.cross, layer.norm_cross, layer.hook_cross_sum),
                                                        (layer.mlp, layer.norm_mlp, layer.hook_mlp_sum))
            if sub is not None]


@torch.inference_mode()
def attribute(model, x: torch.Tensor, position: int, target: int, context: torch.Tensor | None = None) -> Attribution:
    """Split the logit of token ``target`` at ``position`` of x (1, T) (an encoder-decoder's decoder input, read
    given the source ``context`` (1, T_z)) (see the module)."""
    return attribute_positions(model, x, [position], [target], context)[0]


@torch.inference_mode()
def attribute_positions(model, x: torch.Tensor, positions: Sequence[int], targets: Sequence[int],
                        context: torch.Tensor | None = None) -> list[Attribution]:
    """`attribute` at each of ``positions``, of its token in ``targets``, from one forward pass: every position's
    parts are read from the same recorded activations."""
    check_attributable(model, context)
    kind, layers = stacks(model)[-1]
    comps = [c for c in components(model) if c.name.map.kind in (kind, "cross")]  # the unembedded stack's
    post = model.config.norm_position != "pre"
    bert = model.config.arch == "bert"
    # what the stream starts from, and the input of each norm on its path to the unembedding (see the module)
    embedding, last = stream_point(kind, 0, len(layers)), stream_point(kind, len(layers), len(layers))
    sums = [total.name for layer in layers for _, _, total in _sublayers(layer)] if post else []
    kept: dict[ComponentName, list[torch.Tensor]] = {}
    with eval_mode(model), recorded(comps, kept), \
            hooks.recorded(model, [embedding, last, *sums, *(["final", "proj"] if bert else [])]) as seen:
        logits = model(x, **({} if context is None else {"context": context}))
    by_module: dict[nn.Module, list[Component]] = {}
    for c in comps:
        by_module.setdefault(c.module, []).append(c)
    found = []
    for position, target in zip(positions, targets, strict=True):
        measured = {point: got[0][0, position] for point, got in seen.items()}
        s = _Stream(measured[embedding])
        for layer in layers:
            for sub, norm, total in _sublayers(layer):
                for c in by_module[getattr(sub, "W_o", sub)]:
                    _add_part(s, c, kept[c.name][0][0, position])
                s.add_bias(sub.W_o.bias if hasattr(sub, "W_o") else sub.W_mlp2.bias)
                if post:
                    s.freeze(norm, measured[total.name])
        if not post:
            s.freeze(model.norm_dec if hasattr(model, "encoder") else model.norm_final, measured[last])
        scale = float(s.scale)
        if bert:  # X ↦ Φ(u) ⊙ (W_f X + b_f), then its norm (see the module)
            u = model.W_f(seen["final"][0])[0, position]  # W_f X + b_f of the model's own X
            gate = 0.5 * (1 + torch.erf(u / math.sqrt(2)))
            s.map(lambda v, gate=gate: gate * (model.W_f.weight @ v))
            s.add_bias(gate * model.W_f.bias)
            s.freeze(model.norm_f, measured["proj"])
        w = model.unembed.W_u.weight[target]
        parts = {name: float(w @ v) for name, v in zip(s.names, s.rows)}
        found.append(Attribution(float(logits[0, position, target]), parts, scale))
    return found


def _add_part(s: _Stream, c: Component, out: torch.Tensor) -> None:
    """A head's W_o columns times its Y^h, or an MLP's output without b_mlp2."""
    module = cast(Any, c.module)
    if c.is_head:
        s.add(str(c.name), c.part(module.weight) @ out)
    else:
        b = module.W_mlp2.bias
        s.add(str(c.name), out - b if b is not None else out)


__all__ = ["Attribution", "attribute", "attribute_positions", "check_attributable"]
