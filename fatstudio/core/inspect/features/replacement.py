"""The replacement model of a prompt (Ameisen et al. 2025, "Circuit tracing"): a decoder-only pre-LN model (gpt,
gopher) on one prompt x with

- every attention pattern frozen at its value on x (each head's output is then linear in what it reads);
- every norm's scale frozen at its value on x: LayerNorm (e − m)/σ ⊙ γ + β with σ = √(v + ε) measured, RMSnorm
  e/√(mean(e²) + ε) ⊙ γ with the root measured (the centring stays, it is linear; β is a constant);
- MLP l's output replaced by its transcoder's decoding plus an error node: W_dec f + b_dec + ε_l, with f the
  transcoder's features on x and ε_l = MLP_l(x) − (W_dec f + b_dec) the part the transcoder misses.

Its sources are the token embeddings e_t (embedding plus position), the active features' activations f and the
error vectors ε; what it computes is an affine function of them, equal on x's own sources to the model itself
(float rounding aside). `Replacement.run` evaluates it for any sources (a batch of them), through the model's own
modules and hook points: the frozen pieces are hooks on ``self/l/in``, ``self/l/pattern``, ``mlp/l/in``,
``mlp/l/out`` and ``final``.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from ...inference.generation import eval_mode
from ...model.hooks import Hook, hooked, recorded
from ...model.norm import Norm
from .dictionary import Dictionary

ARCHS = ("gpt", "gopher")


def check_model(model) -> None:
    """A ValueError unless ``model`` is a decoder-only pre-LN model (gpt, gopher), the ones traced here."""
    cfg = model.config
    if cfg.arch not in ARCHS:
        raise ValueError(f"attribution graphs and feature edits are for decoder-only models (gpt, gopher); this is a "
                         f"{cfg.arch!r} model.")
    if cfg.norm_position != "pre":
        raise ValueError("attribution graphs and feature edits are for pre-LN models (each sublayer reads a normed "
                         "copy of the stream); this model is post-LN.")


def transcoders_by_layer(model, transcoders: Iterable[Dictionary]) -> list[Dictionary]:
    """One transcoder per MLP layer of ``model`` (``mlp/l/in`` → ``mlp/l/out``), in layer order; a ValueError
    naming the layers that have none, or a dictionary that does not fit the model."""
    check_model(model)
    L, d_e = model.config.L, model.config.d_e
    found: dict[int, Dictionary] = {}
    for d in transcoders:
        if d.kind != "transcoder":
            raise ValueError(f"{d.describe()} is not a transcoder; attribution graphs need MLP transcoders.")
        layer = next((l for l in range(L) if (d.point_in, d.point_out) == (f"mlp/{l}/in", f"mlp/{l}/out")), None)
        if layer is None:
            raise ValueError(f"{d.describe()} is not a transcoder of this model's MLPs (mlp/0 … mlp/{L - 1}).")
        if (d.d_in, d.d_out) != (d_e, d_e):
            raise ValueError(f"{d.describe()} reads {d.d_in} and writes {d.d_out} numbers; this model's d_e is {d_e}.")
        found[layer] = d
    missing = [f"mlp/{l}" for l in range(L) if l not in found]
    if missing:
        raise ValueError(f"no transcoder for {', '.join(missing)}: train one for every MLP layer first.")
    return [found[l] for l in range(L)]


def frozen_norm(norm: Norm, X: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``norm`` of X with its divisor ``scale`` (…, T, 1) held fixed: affine in X."""
    if norm.beta is not None:  # LayerNorm
        return (X - X.mean(-1, keepdim=True)) / scale * norm.gamma + norm.beta
    return X / scale * norm.gamma


def norm_scale(norm: Norm, X: torch.Tensor) -> torch.Tensor:
    """The divisor ``norm`` uses on X: √(v + ε) (LayerNorm) or √(mean(e²) + ε) (RMSnorm), (…, T, 1)."""
    if norm.kind == "layer":
        return torch.sqrt(X.var(-1, unbiased=False, keepdim=True) + norm.eps)
    return torch.sqrt(X.pow(2).mean(-1, keepdim=True) + norm.eps)


@dataclass
class Active:
    """The active features of one layer, flat: feature ``index[j]`` at position ``position[j]`` (both (n,))."""

    position: torch.Tensor
    index: torch.Tensor

    @classmethod
    def of(cls, f: torch.Tensor) -> Active:
        """The non-zero entries of f (T, d_f), position by position."""
        at = f.nonzero()
        return cls(at[:, 0], at[:, 1])

    def values(self, f: torch.Tensor) -> torch.Tensor:
        """Their activations in f (T, d_f): (n,)."""
        return f[self.position, self.index]


class Replacement:
    """The replacement model of ``model`` on the prompt ``ids`` (see the module), from one clean forward pass:
    ``logits`` (T, N_V), and per layer the transcoder's input ``mlp_in`` (T, d_e), features ``f`` (T, d_f) and
    error ``error`` (T, d_e), ``embedding`` (T, d_e)."""

    def __init__(self, model, transcoders: Sequence[Dictionary], ids: Sequence[int]) -> None:
        check_model(model)
        self.model, self.L = model, model.config.L
        if not 1 <= len(ids) <= model.config.l_max:
            raise ValueError(f"the prompt is {len(ids)} tokens long; it must have 1 to l_max = "
                             f"{model.config.l_max} tokens.")
        param = next(model.parameters())
        self.transcoders = [t if (t.W_dec.dtype, t.W_dec.device) == (param.dtype, param.device)
                            else copy.deepcopy(t).to(param.device, param.dtype) for t in transcoders]
        self.x = torch.tensor([list(ids)], device=param.device)
        L = self.L
        points = ["embed", *(f"self/{l}/{w}" for l in range(L) for w in ("resid_pre", "pattern", "resid_mid")),
                  *(f"mlp/{l}/{w}" for l in range(L) for w in ("in", "out")), f"self/{L - 1}/resid_post"]
        with torch.no_grad(), eval_mode(model), recorded(model, points) as got:
            self.logits = model(self.x)[0]
        seen = {name: got[name][0] for name in points}
        layers = model.layers
        self.embedding = seen["embed"][0]
        self.patterns = [seen[f"self/{l}/pattern"] for l in range(L)]
        self.scales = {f"self/{l}/in": norm_scale(layers[l].norm_attn, seen[f"self/{l}/resid_pre"]) for l in range(L)}
        self.scales |= {f"mlp/{l}/in": norm_scale(layers[l].norm_mlp, seen[f"self/{l}/resid_mid"]) for l in range(L)}
        self.scales["final"] = norm_scale(model.norm_final, seen[f"self/{L - 1}/resid_post"])
        self.norms: dict[str, Norm] = {"final": model.norm_final}
        self.norms |= {f"self/{l}/in": layers[l].norm_attn for l in range(L)}
        self.norms |= {f"mlp/{l}/in": layers[l].norm_mlp for l in range(L)}
        with torch.no_grad():
            self.mlp_in = [seen[f"mlp/{l}/in"][0] for l in range(L)]
            self.f = [t.encode(x) for t, x in zip(self.transcoders, self.mlp_in)]
            self.error = [seen[f"mlp/{l}/out"][0] - t.decode(f) for l, (t, f) in enumerate(zip(self.transcoders, self.f))]

    def run(self, embedding: torch.Tensor, actives: Sequence[Active], values: Sequence[torch.Tensor],
            errors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The replacement model on B sets of sources: ``embedding`` (B, T, d_e), per layer the activations
        ``values`` (B, n_l) of its ``actives`` and the errors (B, T, d_e). Returns the logits (B, T, N_V) and each
        layer's transcoder input (B, T, d_e), both affine in the sources (autograd follows them)."""
        model, B, L = self.model, embedding.shape[0], self.L
        stream: dict[str, torch.Tensor] = {}
        ins: list[torch.Tensor] = []

        def keep(name: str) -> Hook:
            def fn(X: torch.Tensor) -> None:
                stream[name] = X
            return fn

        def normed(name: str, norm: Norm, read: str, into: list[torch.Tensor] | None = None) -> Hook:
            def fn(_: torch.Tensor) -> torch.Tensor:
                y = frozen_norm(norm, stream[read], self.scales[name])
                if into is not None:
                    into.append(y)
                return y
            return fn

        def pattern(l: int) -> Hook:
            return lambda A: self.patterns[l].expand_as(A)

        def mlp_out(l: int) -> Hook:
            t, a = self.transcoders[l], actives[l]
            def fn(_: torch.Tensor) -> torch.Tensor:
                writes = values[l][:, :, None] * t.W_dec.T[a.index]  # (B, n_l, d_e)
                return torch.zeros_like(errors[l]).index_add(1, a.position, writes) + t.b_dec + errors[l]
            return fn

        hooks: list[tuple[str, Hook]] = [("embed", lambda _: embedding)]
        for l, layer in enumerate(model.layers):
            hooks += [(f"self/{l}/resid_pre", keep("pre")), (f"self/{l}/in", normed(f"self/{l}/in", layer.norm_attn, "pre")),
                      (f"self/{l}/pattern", pattern(l)), (f"self/{l}/resid_mid", keep("mid")),
                      (f"mlp/{l}/in", normed(f"mlp/{l}/in", layer.norm_mlp, "mid", ins)), (f"mlp/{l}/out", mlp_out(l))]
        hooks += [(f"self/{L - 1}/resid_post", keep("post")), ("final", normed("final", model.norm_final, "post"))]
        with eval_mode(model), hooked(model, hooks):
            logits = model(self.x.expand(B, -1))
        return logits, ins

    # ---- the transposes, for the gradients of many targets at once (`graph`) ------------------------------
    def stream_grad(self, name: str, g: torch.Tensor) -> torch.Tensor:
        """The gradient by a norm's input X from g (…, T, d_e), the gradient by its output, for the norm read at
        ``name`` ("self/l/in", "mlp/l/in", "final"), its scale frozen: c − mean(c) with c = g ⊙ γ / σ
        (LayerNorm's centring is its own transpose); RMSnorm g ⊙ γ / root."""
        norm = self.norms[name]
        c = g * norm.gamma / self.scales[name]
        return c - c.mean(-1, keepdim=True) if norm.beta is not None else c

    def attention_grad(self, l: int, g: torch.Tensor) -> torch.Tensor:
        """The gradient by attention l's input X̃ from g (R, T, d_e), the gradient by its output W_o [Y¹; …] + b_o,
        the pattern frozen: Y^h = A^h (W_v^h X̃ + b_v^h), so X̃ gets W_vᵀ A^hᵀ (W_oᵀ g)^h, summed over the heads
        that share a key/value head."""
        attn = self.model.layers[l].attn
        R, T, _ = g.shape
        gz = (g @ attn.W_o.weight).view(R, T, attn.H, attn.d_mid).transpose(1, 2)  # (R, H, T, d_mid)
        gv = torch.einsum("hqk,rhqd->rhkd", self.patterns[l][0], gz)  # by each head's values, (R, H, T, d_mid)
        gv = gv.view(R, attn.H_kv, attn.H // attn.H_kv, T, attn.d_mid).sum(2)  # head h reads ⌊h·H_kv/H⌋
        return gv.transpose(1, 2).reshape(R, T, attn.H_kv * attn.d_mid) @ attn.W_v.weight

    def sources(self, B: int, f: Sequence[torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, list[Active], list[torch.Tensor], list[torch.Tensor]]:
        """The prompt's own sources, B copies (features ``f`` per layer (T, d_f) instead of its own if given):
        (embedding, actives, values, errors) for `run`."""
        f = self.f if f is None else f
        actives = [Active.of(fl) for fl in f]
        return (self.embedding.expand(B, -1, -1).clone(), actives,
                [a.values(fl).expand(B, -1).clone() for a, fl in zip(actives, f)],
                [e.expand(B, -1, -1).clone() for e in self.error])


__all__ = ["ARCHS", "Active", "Replacement", "check_model", "frozen_norm", "norm_scale", "transcoders_by_layer"]
