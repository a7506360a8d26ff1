"""Activation patching: run a corrupted prompt with one activation taken from a clean prompt of the same length,
and measure how much of the clean prediction that one activation brings back.

For a decoder-only model (gpt, gopher). At the last position, the logit difference d = logit(target) −
logit(foil): the target is the token to predict (by default the clean prompt's most likely next token), the
foil the corrupted prompt's most likely token other than the target. A patch restores the fraction
(d_patched − d_corrupted) / (d_clean − d_corrupted): 0 changes nothing, 1 gives the clean difference back.

Patched are
- the residual stream after layer ℓ (ℓ = 0: the embedding) at one position t: an (L+1) × T map, each layer's
  T patches run as one batch of T rows;
- each head's output Y^h (its slice of W_o's input, `components`) at every position: an L × H map.

Patching the final residual (ℓ = L) at the last position gives the clean logits there exactly, since the final
norm and the unembedding act on each position alone.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..device import model_device
from .components import Component, components, outputs_of, recorded, replaced
from .inference import eval_mode
from .prompting import encode_prompt

if TYPE_CHECKING:
    from ..data.tokenization import TokenizerLike


def check_decoder(model, what: str) -> None:
    """ValueError unless ``model`` is decoder-only (gpt, gopher): ``what`` reads next-token predictions."""
    arch = model.config.arch
    if arch not in ("gpt", "gopher"):
        raise ValueError(f"{what} reads a decoder-only model's next-token prediction at the last position; this "
                         f"is a {arch!r} model. Use a gpt or gopher run.")


class Patcher:
    """Clean and corrupted token ids (1, T) of a decoder-only ``model``; the clean run's residual stream and
    head outputs, and logits of corrupted runs with parts of them patched in (each (rows, T, N_V))."""

    @torch.inference_mode()
    def __init__(self, model, clean: torch.Tensor, corrupt: torch.Tensor):
        check_decoder(model, "activation patching")
        if clean.shape != corrupt.shape:
            raise ValueError(f"the clean and corrupted prompts must have the same number of tokens; they have "
                             f"{clean.shape[-1]} and {corrupt.shape[-1]}.")
        self.model, self.clean, self.corrupt = model, clean, corrupt
        self.points = [model.embed, *model.layers]  # the residual stream after layer ℓ is points[ℓ]'s output
        self.heads = [c for c in components(model) if c.is_head]
        kept: dict[str, list[torch.Tensor]] = {}
        with eval_mode(model), recorded(self.heads, kept), outputs_of(self.points) as resid:
            self.clean_logits = model(clean)
        self.clean_resid = resid  # (L+1) × (1, T, d_e)
        self.clean_heads = {name: parts[0] for name, parts in kept.items()}  # each head's Y^h (1, T, d_mid)
        with eval_mode(model):
            self.corrupt_logits = model(corrupt)

    @torch.inference_mode()
    def residual(self, layer: int) -> torch.Tensor:
        """Logits (T, T, N_V): row t is the corrupted run with the residual stream after ``layer`` at position t
        taken from the clean run."""
        T = self.clean.shape[1]
        rows = torch.arange(T, device=self.clean.device)
        source = self.clean_resid[layer][0]  # (T, d_e)

        def hook(_m, _a, out):
            X = out[0] if isinstance(out, tuple) else out
            X = X.clone()
            X[rows, rows] = source
            return (X, *out[1:]) if isinstance(out, tuple) else X
        handle = self.points[layer].register_forward_hook(hook)
        try:
            with eval_mode(self.model):
                return self.model(self.corrupt.expand(T, -1))
        finally:
            handle.remove()

    @torch.inference_mode()
    def head_outputs(self) -> torch.Tensor:
        """Logits (n_heads, T, N_V): row i is the corrupted run with head i's output (`heads`) at every position
        taken from the clean run."""
        def take(i: int, c: Component):
            def fn(a: torch.Tensor) -> torch.Tensor:
                a = a.clone()
                a[i] = self.clean_heads[c.name][0]
                return a
            return fn
        with eval_mode(self.model), replaced({c: take(i, c) for i, c in enumerate(self.heads)}):
            return self.model(self.corrupt.expand(len(self.heads), -1))


@dataclass
class PatchResult:
    """Fractions of the clean−corrupted logit difference restored (see the module)."""

    clean_tokens: list[str]
    corrupt_tokens: list[str]
    target: str
    foil: str
    clean_logit_diff: float
    corrupted_logit_diff: float
    residual: list[list[float]]  # [layer 0..L][position]
    heads: dict[str, list[float]]  # "self/l" -> per head

    def to_dict(self) -> dict:
        return {"clean_tokens": self.clean_tokens, "corrupt_tokens": self.corrupt_tokens, "target": self.target,
                "foil": self.foil, "clean_logit_diff": self.clean_logit_diff,
                "corrupted_logit_diff": self.corrupted_logit_diff,
                "residual": [{"layer": l, "restored": row} for l, row in enumerate(self.residual)],
                "heads": self.heads}

    def csv(self) -> str:
        """One row per patch: ``resid/l`` (the residual stream after layer l, 0: the embedding) at each position
        with its corrupted token, then each head ``self/l/h`` (patched at every position, so no position)."""
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(("patched", "position", "token", "restored"))
        for l, row in enumerate(self.residual):
            w.writerows((f"resid/{l}", t, self.corrupt_tokens[t], repr(r)) for t, r in enumerate(row))
        for name, row in self.heads.items():
            w.writerows((f"{name}/{h}", "", "", repr(r)) for h, r in enumerate(row))
        return out.getvalue()


def _single_token(tokenizer: TokenizerLike, text: str) -> int:
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise ValueError(f"--target {text!r} is {len(ids)} tokens; give one token of the model's vocabulary.")
    return ids[0]


def patch(model, tokenizer: TokenizerLike, clean: str, corrupt: str, target: str | None = None) -> PatchResult:
    """Patch every residual position and every head of ``corrupt`` from ``clean`` (see the module)."""
    check_decoder(model, "activation patching")
    l_max, dev = model.config.l_max, model_device(model)
    ids = [list(encode_prompt(tokenizer, text, "generate", l_max=l_max).ids) for text in (clean, corrupt)]
    for row, which in zip(ids, ("clean", "corrupted")):
        if not row:
            raise ValueError(f"the {which} prompt is empty; write a text.")
        if len(row) > l_max:
            raise ValueError(f"the {which} prompt is {len(row)} tokens, more than l_max = {l_max}.")
    p = Patcher(model, torch.tensor([ids[0]], device=dev), torch.tensor([ids[1]], device=dev))
    clean_last, corrupt_last = p.clean_logits[0, -1], p.corrupt_logits[0, -1]
    t = _single_token(tokenizer, target) if target is not None else int(clean_last.argmax())
    foil = int(corrupt_last.masked_fill(torch.arange(len(corrupt_last), device=dev) == t, float("-inf")).argmax())

    def diff(logits: torch.Tensor) -> torch.Tensor:  # (..., N_V) -> (...)
        return (logits[..., t] - logits[..., foil]).double()
    d_clean, d_corrupt = float(diff(clean_last)), float(diff(corrupt_last))
    if abs(d_clean - d_corrupt) < 1e-9:
        raise ValueError("the clean and corrupted prompts give the same logit difference at the last position, "
                         "so a patch has nothing to restore; change the corrupted prompt or the --target.")

    def restored(logits: torch.Tensor) -> list[float]:
        return ((diff(logits[:, -1]) - d_corrupt) / (d_clean - d_corrupt)).tolist()
    residual = [restored(p.residual(layer)) for layer in range(len(p.points))]
    by_head = restored(p.head_outputs())
    heads: dict[str, list[float]] = {}
    for c, r in zip(p.heads, by_head):
        heads.setdefault(c.name.rsplit("/", 1)[0], []).append(r)
    strings = tokenizer.token_strings(ids[0] + ids[1] + [t, foil])
    n = len(ids[0])
    return PatchResult(strings[:n], strings[n:2 * n], strings[-2], strings[-1], d_clean, d_corrupt, residual, heads)


__all__ = ["Patcher", "PatchResult", "patch", "check_decoder"]
