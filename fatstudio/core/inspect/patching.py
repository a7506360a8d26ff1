"""Activation patching: run a corrupted prompt with one activation taken from a clean prompt of the same length,
and measure how much of the clean prediction that one activation brings back.

The clean and corrupted prompts are the sequences that differ; the prediction is read at one ``position``:

- gpt, gopher: the texts; position t (default the last) predicts the token after it.
- bert: the texts, framed [bos] + text + [eos] with each [MASK] a mask token; position t (0 is bos; default the
  clean text's first [MASK], else its last token) predicts the token at t.
- an encoder-decoder: the *sources* (the encoder's input, framed). The decoder reads the same target prefix
  [bos] + prefix in both runs; position t of the decoder (default the last) predicts the next target token.

There, the logit difference d = logit(target) − logit(foil): the target is the token to predict (by default the
clean run's most likely token), the foil the corrupted run's most likely token other than the target. A patch
restores the fraction (d_patched − d_corrupted) / (d_clean − d_corrupted): 0 changes nothing, 1 gives the clean
difference back.

Patched are
- the residual stream before layer ℓ (ℓ = 0: the embedding; ℓ = L: after the last layer) at one position t:
  an (L+1) × T map, each layer's T patches run as one batch of T rows. It is the stream of the prompts'
  sequence: an encoder-decoder's encoder over the source, and, beside it, its decoder over the prefix;
- each head's output Y^h (its slice of W_o's input, `components`) at every position: self/L/H, or enc/L/H,
  dec/L/H and cross/L/H.

Patching the final residual of the unembedded stream (an encoder-decoder's decoder) at the measured position
gives the clean logits there exactly, since what follows the last layer acts on each position alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..device import model_device
from ..files import csv_text
from ..inference.generation import eval_mode
from ..model import hooks
from ..names import ComponentName, MapName, StackKind
from .components import Component, components, recorded, replaced, stacks, stream_point
from .lens import encode

if TYPE_CHECKING:
    from ..data.tokenization import TokenizerLike

class Patcher:
    """Clean and corrupted token ids (1, T) (an encoder-decoder's sources, its decoder reading ``prefix`` (1,
    T_x)); the clean run's residual streams and head outputs, and logits of corrupted runs with parts of them
    patched in (each (rows, T_x, N_V))."""

    @torch.inference_mode()
    def __init__(self, model, clean: torch.Tensor, corrupt: torch.Tensor, prefix: torch.Tensor | None = None):
        if (prefix is None) == (model.config.arch == "edt"):
            raise ValueError("an encoder-decoder's patching needs the decoder's prefix; other models have none.")
        if clean.shape != corrupt.shape:
            raise ValueError(f"the clean and corrupted prompts must have the same number of tokens; they have "
                             f"{clean.shape[-1]} and {corrupt.shape[-1]}.")
        self.model, self.clean, self.corrupt, self.prefix = model, clean, corrupt, prefix
        self.streams = {kind: list(layers) for kind, layers in stacks(model)}  # "self", or "enc" and "dec"
        self.patched = next(iter(self.streams))  # the stream of the prompts' sequence
        self.heads = [c for c in components(model) if c.is_head]
        kept: dict[ComponentName, list[torch.Tensor]] = {}
        points = {k: [self.point(k, l) for l in range(len(layers) + 1)] for k, layers in self.streams.items()}
        with eval_mode(model), recorded(self.heads, kept), \
                hooks.recorded(model, [p for ps in points.values() for p in ps]) as streams:
            self.clean_logits = self.run(clean)
        self.clean_resid = {k: [streams[p][0][0] for p in ps] for k, ps in points.items()}  # (L+1) × (T, d_e)
        self.clean_heads = {name: parts[0] for name, parts in kept.items()}  # each head's Y^h (1, T, d_mid)
        with eval_mode(model):
            self.corrupt_logits = self.run(corrupt)

    def point(self, stream: StackKind, layer: int) -> str:
        """The hook point of ``stream``'s residual before ``layer`` (its number of layers: after the last)."""
        return stream_point(stream, layer, len(self.streams[stream]))

    def run(self, ids: torch.Tensor, rows: int = 1) -> torch.Tensor:
        """The logits of ``rows`` copies of the prompt ``ids`` (an encoder-decoder: the source, with the prefix)."""
        if self.prefix is None:
            return self.model(ids.expand(rows, -1))
        return self.model(self.prefix.expand(rows, -1), context=ids.expand(rows, -1))

    @torch.inference_mode()
    def residual(self, layer: int, stream: StackKind | None = None) -> torch.Tensor:
        """Logits (T, T_x, N_V): row t is the corrupted run with ``stream``'s residual (default: the prompts'
        sequence's; "dec" an encoder-decoder's decoder's) before ``layer`` at position t taken from the clean run."""
        stream = stream or self.patched
        source = self.clean_resid[stream][layer]  # (T, d_e)
        T = source.shape[0]
        rows = torch.arange(T, device=source.device)

        def fn(X: torch.Tensor) -> torch.Tensor:
            X = X.clone()
            X[rows, rows] = source
            return X
        with eval_mode(self.model), hooks.hooked(self.model, {self.point(stream, layer): fn}):
            return self.run(self.corrupt, T)

    @torch.inference_mode()
    def head_outputs(self) -> torch.Tensor:
        """Logits (n_heads, T_x, N_V): row i is the corrupted run with head i's output (`heads`) at every position
        taken from the clean run."""
        def take(i: int, c: Component):
            def fn(a: torch.Tensor) -> torch.Tensor:
                a = a.clone()
                a[i] = self.clean_heads[c.name][0]
                return a
            return fn
        with eval_mode(self.model), replaced({c: take(i, c) for i, c in enumerate(self.heads)}):
            return self.run(self.corrupt, len(self.heads))


@dataclass
class PatchResult:
    """Fractions of the clean−corrupted logit difference restored (see the module). ``position`` is the measured
    one (of the tokens an encoder-decoder's decoder reads, ``prefix_tokens``; -1: the last); an encoder-decoder's
    ``residual`` is its encoder's, over the source, and ``decoder_residual`` its decoder's."""

    clean_tokens: list[str]
    corrupt_tokens: list[str]
    target: str
    foil: str
    clean_logit_diff: float
    corrupted_logit_diff: float
    residual: list[list[float]]  # [layer 0..L][position]
    heads: dict[MapName, list[float]]  # each map's heads, in order
    position: int = -1
    prefix_tokens: list[str] | None = None
    decoder_residual: list[list[float]] | None = None  # [layer 0..L_dec][decoder position]

    def to_dict(self) -> dict:
        def rows(m: list[list[float]]) -> list[dict]:
            return [{"layer": l, "restored": row} for l, row in enumerate(m)]
        out = {"clean_tokens": self.clean_tokens, "corrupt_tokens": self.corrupt_tokens, "target": self.target,
               "foil": self.foil, "clean_logit_diff": self.clean_logit_diff,
               "corrupted_logit_diff": self.corrupted_logit_diff, "position": self.position,
               "residual": rows(self.residual), "heads": {str(name): row for name, row in self.heads.items()}}
        if self.decoder_residual is not None:
            out |= {"prefix_tokens": self.prefix_tokens, "decoder_residual": rows(self.decoder_residual)}
        return out

    def csv(self) -> str:
        """One row per patch: ``resid/l`` (the residual stream after layer l, 0: the embedding) at each position
        with its corrupted token, then each head ``self/l/h`` (patched at every position, so no position)."""
        rows: list[tuple] = [("patched", "position", "token", "restored")]
        for l, row in enumerate(self.residual):
            rows += ((f"resid/{l}", t, self.corrupt_tokens[t], repr(r)) for t, r in enumerate(row))
        for l, row in enumerate(self.decoder_residual or []):
            rows += ((f"dec-resid/{l}", t, (self.prefix_tokens or [])[t], repr(r)) for t, r in enumerate(row))
        for name, row in self.heads.items():
            rows += ((str(ComponentName(name, h)), "", "", repr(r)) for h, r in enumerate(row))
        return csv_text(rows)


def _single_token(tokenizer: TokenizerLike, text: str) -> int:
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise ValueError(f"--target {text!r} is {len(ids)} tokens; give one token of the model's vocabulary.")
    return ids[0]


def _measured_position(model, ids: list[int], mask_id: int, position: int | None) -> int:
    """The position read (see the module) in ``ids``, the sequence that is unembedded; ``position`` may count
    from the end (-1: the last)."""
    T = len(ids)
    if position is None:
        if model.config.arch != "bert":
            return T - 1
        masked = [t for t, i in enumerate(ids) if i == mask_id]
        return masked[0] if masked else T - 2  # before eos
    if not -T <= position < T:
        raise ValueError(f"--position {position} is not one of the {T} positions the prediction is read at "
                         f"(0 to {T - 1}, or -1 to {-T} from the end).")
    return position % T


def _encode(model, tokenizer: TokenizerLike, texts: tuple[str, str], prefix: str | None
            ) -> tuple[list[list[int]], list[int] | None]:
    """The two prompts' ids (an encoder-decoder's sources) and an encoder-decoder's decoder ids."""
    arch = model.config.arch
    if prefix is not None and arch != "edt":
        raise ValueError(f"a prefix is an encoder-decoder's target prefix; a {arch!r} model reads one text.")
    ids: list[list[int]] = []
    x: list[int] | None = None
    for text, which in zip(texts, ("clean", "corrupted")):
        if not text:
            raise ValueError(f"the {which} prompt is empty; write a text.")
        if arch == "edt":
            x, z = encode(model, tokenizer, prefix or "", text)
            ids.append(list(z or ()))
        else:
            ids.append(encode(model, tokenizer, text)[0])
    return ids, x


def patch(model, tokenizer: TokenizerLike, clean: str, corrupt: str, target: str | None = None, *,
          position: int | None = None, prefix: str | None = None) -> PatchResult:
    """Patch every residual position and every head of ``corrupt`` from ``clean`` and read the logit difference at
    ``position`` (an encoder-decoder: ``clean`` and ``corrupt`` are sources, its decoder reading ``prefix``; see
    the module)."""
    dev = model_device(model)
    ids, x = _encode(model, tokenizer, (clean, corrupt), prefix)
    p = Patcher(model, torch.tensor([ids[0]], device=dev), torch.tensor([ids[1]], device=dev),
                None if x is None else torch.tensor([x], device=dev))
    at = _measured_position(model, ids[0] if x is None else x, tokenizer.mask_id, position)
    clean_at, corrupt_at = p.clean_logits[0, at], p.corrupt_logits[0, at]
    t = _single_token(tokenizer, target) if target is not None else int(clean_at.argmax())
    foil = int(corrupt_at.masked_fill(torch.arange(len(corrupt_at), device=dev) == t, float("-inf")).argmax())

    def diff(logits: torch.Tensor) -> torch.Tensor:  # (..., N_V) -> (...)
        return (logits[..., t] - logits[..., foil]).double()
    d_clean, d_corrupt = float(diff(clean_at)), float(diff(corrupt_at))
    if abs(d_clean - d_corrupt) < 1e-9:
        raise ValueError("the clean and corrupted prompts give the same logit difference at the measured position, "
                         "so a patch has nothing to restore; change the corrupted prompt, the --target or the "
                         "--position.")

    def restored(logits: torch.Tensor) -> list[float]:
        return ((diff(logits[:, at]) - d_corrupt) / (d_clean - d_corrupt)).tolist()

    def stream_map(stream: StackKind) -> list[list[float]]:
        return [restored(p.residual(layer, stream)) for layer in range(len(p.streams[stream]) + 1)]
    heads: dict[MapName, list[float]] = {}
    for c, r in zip(p.heads, restored(p.head_outputs())):
        heads.setdefault(c.name.map, []).append(r)
    strings = tokenizer.token_strings(ids[0] + ids[1] + [t, foil])
    n = len(ids[0])
    result = PatchResult(strings[:n], strings[n:2 * n], strings[-2], strings[-1], d_clean, d_corrupt,
                         stream_map(p.patched), heads, at)
    if x is not None:
        result.prefix_tokens, result.decoder_residual = tokenizer.token_strings(x), stream_map("dec")
    return result


__all__ = ["Patcher", "PatchResult", "patch"]
