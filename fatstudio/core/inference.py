"""Inference: DInference (Algorithm 14), EDInference (Algorithm 15), sampling with temperature, top-k and
nucleus (top-p) filtering, BERT's fill-mask, classification (paper §3) and attention maps.

Qt-free. Every function runs under ``torch.inference_mode()`` (tensors it returns are for reading, not for
autograd) and puts the model in eval mode, restoring its previous mode afterwards (for the generators: when
they finish or are closed). Token ids are the model's; texts go through a tokenizer with ``encode``,
``decode``, ``token_strings``, ``vocab_size`` and the special ids ``pad_id``, ``mask_id``, ``bos_id``,
``eos_id``. Unknown symbols raise the tokenizer's ValueError.
"""
from __future__ import annotations

import contextlib
import csv
import json
import math
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .model.attention import KVCache

MASK_MARKER = "[MASK]"  # what a user types for a masked position (the tokenizer's own mask string works too)


# --------------------------------------------------------------------------------------------- sampling
@dataclass
class SampleInfo:
    """What `sample_next` saw: the model's distribution and what the filters kept."""

    probs: torch.Tensor  # softmax(logits) at τ = 1, the model's own distribution (float32, (N_V,))
    sampling_probs: torch.Tensor  # the distribution y was drawn from: ∝ p^{1/τ}, filtered (one-hot at τ = 0)
    top_k_cutoff: float | None  # the smallest model probability top-k keeps (None when top-k is off)
    top_p_cutoff: float | None  # the smallest model probability the nucleus keeps (None when top-p is off)


@dataclass
class TokenChoice:
    """One sampled token, for streaming to a UI. Concatenating ``text`` gives the decoded continuation."""

    id: int
    text: str
    prob: float  # the model's probability of this token (τ = 1, before any filtering)
    alternatives: list[tuple[str, float]]  # the top-N tokens (readable strings) and their model probabilities
    top_k_cutoff: float | None = None  # smallest model probability kept by top-k (None: off)
    top_p_cutoff: float | None = None  # smallest model probability kept by top-p (None: off)


def _check_sampling(temperature, top_k, top_p) -> None:
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature >= 0 \
            or not math.isfinite(temperature):
        raise ValueError(f"temperature = {temperature!r} is not allowed; use a number ≥ 0 (0 = greedy, 1 = the model).")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k = {top_k!r} is not allowed; use a whole number ≥ 0 (0 = off).")
    if not isinstance(top_p, (int, float)) or isinstance(top_p, bool) or not 0 < top_p <= 1:
        raise ValueError(f"top_p = {top_p!r} is not allowed; use a number in (0, 1] (1 = off).")


class _Draw(NamedTuple):
    """One draw of `_Sampler`, still on the logits' device."""

    at: torch.Tensor  # (3,) ids: y, then the tokens at the top-k and top-p cut-offs (y where a filter is off)
    probs: torch.Tensor  # softmax(logits) at τ = 1, float32
    q: torch.Tensor | None  # the distribution y was drawn from (None when greedy)


class _Sampler:
    """Algorithm 14's sampling step with fixed settings, on the device of the logits; see `sample_next`.

    Built once per generation (the -∞ added at excluded ids too). Nothing is read back to the host: y is drawn
    as argmax(q / E) with E ~ Exp(1) drawn on the CPU from ``generator`` (and sent to the device without a
    wait), which is exactly how torch.multinomial draws one sample on the CPU, so a seed gives the same tokens
    as CPU sampling wherever q is computed.
    """

    def __init__(self, n: int, device, *, temperature: float, top_k: int, top_p: float,
                 generator: torch.Generator | None, exclude: Sequence[int]):
        _check_sampling(temperature, top_k, top_p)
        self.temperature, self.top_k, self.top_p, self.generator = temperature, top_k, top_p, generator
        excluded = torch.tensor(list(exclude), dtype=torch.long, device=device)
        self.never = torch.zeros(n, dtype=torch.float32, device=device).index_fill_(0, excluded, float("-inf"))
        self.pinned = torch.device(device).type == "cuda"  # the noise goes to the GPU asynchronously

    def __call__(self, logits: torch.Tensor) -> _Draw:
        logits = logits.float()
        probs = logits.softmax(-1)  # the model's own distribution, reported as is
        logits = logits + self.never
        n = logits.numel()
        k_at = p_at = None
        if self.top_k:
            top = logits.topk(min(self.top_k, n))
            k_at = top.indices[-1]
            if self.top_k < n:  # keep the k most likely, ties at the k-th too
                logits = logits.masked_fill(logits < top.values[-1], float("-inf"))
        if self.temperature == 0:
            y, q = logits.argmax(), None  # as τ → 0 the nucleus is y alone
        else:
            q = (logits / self.temperature).softmax(-1)
            if self.top_p < 1:
                q_sorted, order = q.sort(descending=True)
                kept = ((q_sorted.cumsum(-1) - q_sorted) < self.top_p) & (q_sorted > 0)  # the first always
                p_at = order.take(kept.sum() - 1)  # the last kept, without reading the count back to the host
                q = torch.zeros_like(q).scatter_(0, order, q_sorted * kept)
                q = q / q.sum()
            noise = torch.empty(n, dtype=q.dtype, pin_memory=self.pinned).exponential_(generator=self.generator)
            y = q.div(noise.to(q.device, non_blocking=self.pinned)).argmax()
        return _Draw(torch.stack([y, y if k_at is None else k_at, y if p_at is None else p_at]), probs, q)

    def cutoffs(self, at_probs: Sequence[float]) -> tuple[float | None, float | None]:
        """(top-k, top-p cut-off) from the model probabilities of a draw's ``at`` (None where a filter is off)."""
        return at_probs[1] if self.top_k else None, at_probs[2] if self.top_p < 1 else None


@torch.inference_mode()
def sample_next(logits_row, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None, exclude: Sequence[int] = ()) -> tuple[int, SampleInfo]:
    """Draw y ∝ p^{1/τ} from one row of logits (Algorithm 14's sampling step); τ = 0 is greedy (argmax).

    Filters, in this order: top-k keeps the k most likely tokens (ties at the k-th kept), then top-p keeps the
    smallest set of most likely tokens whose tempered probability reaches p. Work is done in float32 on the
    logits' device; ``generator`` is a CPU ``torch.Generator`` (None: torch's global RNG), and a seed draws
    what torch.multinomial draws on the CPU.
    ``exclude`` lists ids never drawn (the special tokens pad, mask, bos that text never continues with).
    Returns (y, SampleInfo); ``info.probs[y]`` is the model's probability of y.
    """
    logits = torch.as_tensor(logits_row).reshape(-1)
    sampler = _Sampler(logits.numel(), logits.device, temperature=temperature, top_k=top_k, top_p=top_p,
                       generator=generator, exclude=exclude)
    draw = sampler(logits)
    q = draw.q if draw.q is not None else torch.zeros_like(draw.probs).index_fill_(0, draw.at[:1], 1.0)
    return int(draw.at[0]), SampleInfo(draw.probs, q, *sampler.cutoffs(draw.probs.index_select(0, draw.at).tolist()))


# ------------------------------------------------------------------------------------------- helpers
def _never_sampled(tokenizer) -> tuple[int, ...]:
    """pad, mask and bos: generated text never continues with them (eos may end it)."""
    return tokenizer.pad_id, tokenizer.mask_id, tokenizer.bos_id


@contextlib.contextmanager
def _eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _framed(tokenizer, text: str) -> list[int]:
    """[bos] + encode(text) + [eos]: an encoder's input (edt source, bert text)."""
    return [tokenizer.bos_id] + list(tokenizer.encode(text)) + [tokenizer.eos_id]


def _device(model) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _arch(model) -> str:
    return getattr(getattr(model, "config", None), "arch", "?")


def _require_arch(model, archs: tuple[str, ...], what: str, hint: str) -> None:
    if _arch(model) not in archs:
        raise ValueError(f"{what} needs a {' or '.join(map(repr, archs))} model, and this one is {_arch(model)!r}; "
                         f"{hint}")


def _l_max(model) -> int:
    return model.config.l_max


def _check_length(n: int, l_max: int, what: str) -> None:
    if n > l_max:
        raise ValueError(f"the {what} is {n} tokens long, more than this model's l_max = {l_max}; "
                         "shorten it (or train a model with a larger l_max).")


def _alternatives(tokenizer, probs: torch.Tensor, n: int) -> list[tuple[str, float]]:
    if n <= 0:
        return []
    top = probs.topk(min(n, probs.numel()))
    return list(zip(tokenizer.token_strings(top.indices.tolist()), top.values.tolist()))


class _TextStream:
    """Incremental detokenisation: the text each new id adds to decode(ids so far).

    Decodes a short tail of ids (so the cost per token is constant; the tail's own text is kept, so that is
    one decode per token) and holds back a piece that ends in an incomplete UTF-8 character (U+FFFD) until
    the next token completes it.
    """

    TAIL = 6

    def __init__(self, tokenizer, context_ids: Sequence[int]):
        self.tok = tokenizer
        self._restart(list(context_ids))
        self.pending: list[int] = []

    def _restart(self, ids: list[int]) -> None:
        self.prefix = ids[-self.TAIL:]
        self.head = self.tok.decode(self.prefix) if self.prefix else ""  # decode(prefix)

    def push(self, token_id: int) -> str:
        self.pending.append(token_id)
        full = self.tok.decode(self.prefix + self.pending)
        if full.startswith(self.head):
            piece = full[len(self.head):]
            if piece.endswith("\ufffd") and len(self.pending) < 4:
                return ""  # wait for the rest of a multi-byte character
        else:  # the tokenizer rewrote earlier text: fall back to the readable token strings
            piece = "".join(self.tok.token_strings(self.pending))
        self.prefix += self.pending
        self.pending = []
        if len(self.prefix) > 2 * self.TAIL:
            self._restart(self.prefix)
        else:
            self.head = full
        return piece


def _choice(tokenizer, sampler: _Sampler, draw: _Draw, stream: _TextStream, alternatives: int) -> TokenChoice:
    """The TokenChoice of a draw, with the ``alternatives`` most likely tokens; what it reports reaches the
    host in one copy."""
    at = draw.at
    if alternatives > 0:
        at = torch.cat([at, draw.probs.topk(min(alternatives, draw.probs.numel())).indices])
    ids, p = torch.stack([at.double(), draw.probs.index_select(0, at).double()]).tolist()
    y = int(ids[0])
    alts = list(zip(tokenizer.token_strings([int(i) for i in ids[3:]]), p[3:]))
    return TokenChoice(y, stream.push(y), p[0], alts, *sampler.cutoffs(p))


def _sampler(model, tokenizer, temperature, top_k, top_p, seed: int | None) -> _Sampler:
    """The sampling step for ``model``'s logits; it never draws the ids of `_never_sampled`."""
    generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    return _Sampler(model.config.vocab_size, _device(model), temperature=temperature, top_k=top_k, top_p=top_p,
                    generator=generator, exclude=_never_sampled(tokenizer))


# -------------------------------------------------------------------------------- Algorithm 14: generate
def generate(model, tokenizer, prompt: str, *, tokens: int = 200, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, seed: int | None = None, use_cache: bool = True, alternatives: int = 5,
             stop_at_eos: bool = False, add_bos: bool = False, slide: int | None = None) -> Iterator[TokenChoice]:
    """DInference (Algorithm 14) with a decoder-only model ('gpt', 'gopher'): yields ``tokens`` TokenChoices.

    The prompt is ``encode(prompt)``, preceded by bos when ``add_bos`` (the paper's convention). The default
    is no bos, because next-token training on a corpus uses raw windows of the token stream without one; an
    empty prompt starts from bos either way. A prompt longer than l_max is cropped to its last l_max tokens.

    With ``use_cache`` the window is prefilled once and each new token goes through ``model(x_last,
    cache=cache)``. When the context is full the window slides by ``slide`` tokens (default l_max // 8, at
    least 1) and the cache is rebuilt from the remaining tokens, so any length works; ``slide=1`` is the
    classic "always the last l_max tokens" (a full forward per token once full). ``use_cache=False``
    recomputes the same windows from scratch each step, giving the same probabilities.
    ``stop_at_eos``: stop when eos is drawn (eos is not yielded). ``seed`` makes the draws reproducible.
    The prompt is encoded (and the arguments checked) when ``generate`` is called, so errors raise here.
    """
    _require_arch(model, ("gpt", "gopher"), "generate", "use fill_mask for 'bert' and translate for 'edt'.")
    sampler = _sampler(model, tokenizer, temperature, top_k, top_p, seed)
    l_max = _l_max(model)
    slide = max(1, l_max // 8) if slide is None else slide
    if not isinstance(slide, int) or not 1 <= slide <= l_max:
        raise ValueError(f"slide = {slide!r} is not allowed; use a whole number from 1 to l_max = {l_max}.")
    if not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens = {tokens!r} is not allowed; use a whole number ≥ 0.")
    ids = ([tokenizer.bos_id] if add_bos else []) + list(tokenizer.encode(prompt))
    ids = ids or [tokenizer.bos_id]
    return _generate(model, tokenizer, ids, tokens, sampler, use_cache, alternatives, stop_at_eos, slide)


@torch.inference_mode()
def _generate(model, tokenizer, ids, n_tokens, sampler, use_cache, alternatives, stop_at_eos, slide):
    l_max, dev = _l_max(model), _device(model)
    seq = list(ids)
    start = max(0, len(seq) - l_max)  # the window is seq[start:], never longer than l_max
    stream = _TextStream(tokenizer, seq)
    cache = None
    with _eval_mode(model):
        for _ in range(n_tokens):
            if len(seq) - start > l_max:  # full: slide the window and rebuild the cache
                start = len(seq) - (l_max + 1 - slide)
                cache = None
            if cache is None:
                cache = KVCache() if use_cache else None
                x = torch.tensor([seq[start:]], device=dev)
            draw = sampler(model(x, cache=cache)[0, -1])
            choice = _choice(tokenizer, sampler, draw, stream, alternatives)
            if stop_at_eos and choice.id == tokenizer.eos_id:
                return
            yield choice
            seq.append(choice.id)
            x = draw.at[:1].view(1, 1)  # the next input: y, already on the device


# ------------------------------------------------------------------------------- Algorithm 15: translate
def translate(model, tokenizer, source: str, *, max_tokens: int | None = None, temperature: float = 0.0,
              top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
              alternatives: int = 5) -> Iterator[TokenChoice]:
    """EDInference (Algorithm 15) with an 'edt' model: z = [bos]+encode(source)+[eos], Z = encode(z) once,
    x̂ = [bos], then one token at a time through the decoder with a KV cache (the cross-attention keys and
    values of Z are computed on the first step and kept in the cache) until eos (not yielded) or
    ``max_tokens`` tokens (default l_max - 1; at most l_max, the decoder's positions). τ = 0 (greedy) by
    default. A source longer than l_max - 2 raises ValueError.
    """
    _require_arch(model, ("edt",), "translate", "use generate for 'gpt'/'gopher' and fill_mask for 'bert'.")
    sampler = _sampler(model, tokenizer, temperature, top_k, top_p, seed)
    l_max = _l_max(model)
    z = _framed(tokenizer, source)
    _check_length(len(z), l_max, "source with bos and eos")
    max_tokens = l_max - 1 if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"max_tokens = {max_tokens!r} is not allowed; use a whole number ≥ 0.")
    return _translate(model, tokenizer, z, min(max_tokens, l_max), sampler, alternatives)


@torch.inference_mode()
def _translate(model, tokenizer, z, max_tokens, sampler, alternatives):
    dev = _device(model)
    stream = _TextStream(tokenizer, [])
    with _eval_mode(model):
        Z = model.encode(torch.tensor([z], device=dev))
        cache, x = KVCache(), torch.tensor([[tokenizer.bos_id]], device=dev)
        for _ in range(max_tokens):
            draw = sampler(model.decode(x, Z, cache=cache)[0, -1])
            choice = _choice(tokenizer, sampler, draw, stream, alternatives)
            if choice.id == tokenizer.eos_id:
                return
            yield choice
            x = draw.at[:1].view(1, 1)


# ------------------------------------------------------------------------------- BERT: fill-mask, classify
@dataclass
class MaskPrediction:
    """The top candidates for one masked position. ``position`` indexes the model input [bos]+ids+[eos]
    (bos is 0); ``char_offset`` is where the marker starts in the user's text."""

    position: int
    candidates: list[tuple[str, float]]
    char_offset: int | None = None


def _mask_markers(tokenizer, mask_symbol: str) -> list[str]:
    own = tokenizer.token_strings([tokenizer.mask_id])[0]
    return sorted({m for m in (mask_symbol, own) if m}, key=len, reverse=True)


def encode_masked(tokenizer, text: str, mask_symbol: str) -> tuple[list[int], list[int], list[int]]:
    """[bos] + ids + [eos] with mask_id wherever a marker stands; returns (x, mask positions, char offsets)."""
    pattern = "|".join(map(re.escape, _mask_markers(tokenizer, mask_symbol)))
    x, positions, offsets, pos = [tokenizer.bos_id], [], [], 0
    for m in re.finditer(pattern, text):
        if m.start() > pos:
            x += tokenizer.encode(text[pos:m.start()])
        positions.append(len(x))
        offsets.append(m.start())
        x.append(tokenizer.mask_id)
        pos = m.end()
    if pos < len(text):
        x += tokenizer.encode(text[pos:])
    return x + [tokenizer.eos_id], positions, offsets


@torch.inference_mode()
def fill_mask(model, tokenizer, text: str, *, mask_symbol: str = MASK_MARKER, top: int = 5) -> list[MaskPrediction]:
    """BERT's masked-token prediction (the task of Algorithm 12): the ``top`` candidates at each marker.

    Mark a position with ``mask_symbol`` ("[MASK]") or the tokenizer's own mask token string; the text
    between markers is encoded as usual. The input is [bos] + ids + [eos]; one forward pass of Algorithm 9.
    """
    _require_arch(model, ("bert",), "fill_mask", "use generate for 'gpt'/'gopher' and translate for 'edt'.")
    if not any(m in text for m in _mask_markers(tokenizer, mask_symbol)):
        raise ValueError(f"the text has no masked position; write {mask_symbol} where a token should be "
                         f"predicted, e.g. 'the {mask_symbol} sat on the mat'.")
    x, positions, offsets = encode_masked(tokenizer, text, mask_symbol)
    _check_length(len(x), _l_max(model), "text with bos and eos")
    with _eval_mode(model):
        probs = model(torch.tensor([x], device=_device(model)))[0].float().softmax(-1).cpu()
    return [MaskPrediction(t, _alternatives(tokenizer, probs[t], top), o) for t, o in zip(positions, offsets)]


@torch.inference_mode()
def classify(model, tokenizer, text: str, class_names: Sequence[str]) -> list[tuple[str, float]]:
    """P(c | x) (paper §3) of a 'bert' model with a class head on [bos]+encode(text)+[eos], most likely first."""
    _require_arch(model, ("bert",), "classify", "classification uses a 'bert' model with n_classes > 0.")
    n = model.config.n_classes
    if len(class_names) != n:
        raise ValueError(f"{len(class_names)} class names were given, but the model has n_classes = {n}.")
    x = _framed(tokenizer, text)
    _check_length(len(x), _l_max(model), "text with bos and eos")
    with _eval_mode(model):
        p = model.classify(torch.tensor([x], device=_device(model)))[0].float().softmax(-1).cpu().tolist()
    return sorted(zip(class_names, p), key=lambda c: -c[1])


# ---------------------------------------------------------------------------------------- attention maps
# A viridis-like colormap: a few anchor colours, linearly interpolated.
_ANCHORS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], float)


def colormap(values: np.ndarray) -> np.ndarray:
    """Map values in [0, 1] to RGB uint8 (..., 3) on a dark-purple → teal → yellow scale."""
    v = np.clip(np.nan_to_num(values), 0.0, 1.0)
    xs = np.linspace(0.0, 1.0, len(_ANCHORS))
    return np.stack([np.interp(v, xs, _ANCHORS[:, c]) for c in range(3)], -1).round().astype(np.uint8)


def png_bytes(rgb: np.ndarray) -> bytes:
    """A PNG file (8-bit RGB, no filtering) of an (height, width, 3) uint8 image."""
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), np.ascontiguousarray(rgb, np.uint8).reshape(h, 3 * w)], 1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b""))


def attention_entropy(A: np.ndarray) -> np.ndarray:
    """The mean over queries of each attention row's entropy in nats (0 log 0 = 0), for (..., T_q, T_k)."""
    A = np.asarray(A, dtype=np.float64)
    return -(A * np.log(np.where(A > 0, A, 1.0))).sum(-1).mean(-1)


@dataclass
class AttentionMaps:
    """Every head's softmax(S/√d_attn) (Algorithm 4) from one forward pass, as numpy arrays.

    ``maps[name]`` is (H, T_query, T_key); names as the model's: "self/l" (gpt, gopher, bert), "enc/l",
    "dec/l", "cross/l" (edt). ``tokens`` label the queries (the decoder side for edt); ``context_tokens``
    label the encoder side of an edt (enc keys and queries, cross keys), else None.
    """

    tokens: list[str]
    context_tokens: list[str] | None
    maps: dict[str, np.ndarray] = field(default_factory=dict)

    def entropy(self, name: str) -> np.ndarray:
        """(H,): the mean over queries of each attention row's entropy, in nats (0 log 0 = 0)."""
        return attention_entropy(self.maps[name])

    def mean_over_heads(self, name: str) -> np.ndarray:
        """(T_query, T_key): the heads' average."""
        return self.maps[name].mean(0)

    def key_tokens(self, name: str) -> list[str]:
        """The labels of the keys of map ``name``."""
        return self.context_tokens if name.startswith(("enc", "cross")) and self.context_tokens else self.tokens

    def query_tokens(self, name: str) -> list[str]:
        return self.context_tokens if name.startswith("enc") and self.context_tokens else self.tokens

    def to_json_dict(self) -> dict:
        """Plain JSON: tokens, context_tokens, maps as nested lists (rounded to 1e-7), per-head entropy."""
        return {"tokens": list(self.tokens), "context_tokens": self.context_tokens,
                "maps": {k: np.round(v.astype(np.float64), 7).tolist() for k, v in self.maps.items()},
                "entropy": {k: self.entropy(k).tolist() for k in self.maps}}

    @classmethod
    def from_json_dict(cls, d: dict) -> AttentionMaps:
        return cls(list(d["tokens"]), d.get("context_tokens"),
                   {k: np.asarray(v, np.float32) for k, v in d["maps"].items()})

    def to_png(self) -> bytes:
        """A grid of heatmaps on a fixed 0-1 scale: one row per attention layer, one column per head."""
        if not self.maps:
            raise ValueError("there are no attention maps to draw.")
        names = list(self.maps)
        t = max(max(a.shape[1:]) for a in self.maps.values())
        s = max(1, min(16, 160 // t))  # pixels per attention weight
        gap = 4
        cell_h = max(a.shape[1] for a in self.maps.values()) * s
        cell_w = max(a.shape[2] for a in self.maps.values()) * s
        heads = max(a.shape[0] for a in self.maps.values())
        img = np.full((gap + len(names) * (cell_h + gap), gap + heads * (cell_w + gap), 3), 255, np.uint8)
        for r, name in enumerate(names):
            for h, A in enumerate(self.maps[name]):
                tile = colormap(A).repeat(s, 0).repeat(s, 1)
                y, x = gap + r * (cell_h + gap), gap + h * (cell_w + gap)
                img[y:y + tile.shape[0], x:x + tile.shape[1]] = tile
        return png_bytes(img)

    def save(self, path) -> Path:
        """Write .json (to_json_dict), .npz (exact float32 arrays named as ``maps``, plus "tokens" and
        "context_tokens"), .png (a heatmap grid, see to_png) or .csv (map, head, query, key, tokens, weight)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".json":
            path.write_text(json.dumps(self.to_json_dict()), encoding="utf-8")
        elif suffix == ".npz":
            extra = {"tokens": np.array(self.tokens, dtype=str)}
            if self.context_tokens is not None:
                extra["context_tokens"] = np.array(self.context_tokens, dtype=str)
            with open(path, "wb") as f:
                np.savez(f, **self.maps, **extra)
        elif suffix == ".png":
            path.write_bytes(self.to_png())
        elif suffix == ".csv":
            with open(path, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(["map", "head", "query", "key", "query_token", "key_token", "weight"])
                for name, A in self.maps.items():
                    qt, kt = self.query_tokens(name), self.key_tokens(name)
                    for h, i, j in np.ndindex(*A.shape):
                        w.writerow([name, h, i, j, qt[i], kt[j], f"{A[h, i, j]:.7g}"])
        else:
            raise ValueError(f"cannot save attention maps as {path.name!r}; use a .json, .npz, .png or .csv file.")
        return path

    @classmethod
    def load(cls, path) -> AttentionMaps:
        """Read a .json or .npz file written by `save`."""
        path = Path(path)
        if path.suffix.lower() == ".json":
            return cls.from_json_dict(json.loads(path.read_text(encoding="utf-8")))
        with np.load(path, allow_pickle=False) as d:
            ctx = d["context_tokens"].tolist() if "context_tokens" in d.files else None
            return cls(d["tokens"].tolist(), ctx,
                       {k: d[k] for k in d.files if k not in ("tokens", "context_tokens")})


@torch.inference_mode()
def attention_maps(model, tokenizer, text: str, *, source: str | None = None, add_bos: bool = False,
                   mask_symbol: str = MASK_MARKER) -> AttentionMaps:
    """The attention weights of one forward pass with ``return_attention=True`` (exactly the model's numbers).

    gpt/gopher: x = [bos if add_bos] + encode(text) (an empty text is [bos]); bert: [bos] + ids + [eos] with
    mask markers allowed as in `fill_mask`; edt: the encoder reads [bos] + encode(source) + [eos] and the
    decoder x = [bos] + encode(text). A sequence longer than l_max raises ValueError.
    """
    arch, l_max = _arch(model), _l_max(model)
    z = None
    if arch == "bert":
        x = encode_masked(tokenizer, text, mask_symbol)[0]
    elif arch == "edt":
        if source is None:
            raise ValueError("an 'edt' model attends to a source text: pass source=... (the text to translate).")
        z = _framed(tokenizer, source)
        _check_length(len(z), l_max, "source with bos and eos")
        x = [tokenizer.bos_id] + list(tokenizer.encode(text))
    else:
        x = ([tokenizer.bos_id] if add_bos else []) + list(tokenizer.encode(text)) or [tokenizer.bos_id]
    _check_length(len(x), l_max, "text" + (" with bos and eos" if arch == "bert" else ""))
    return attention_maps_for_ids(model, tokenizer, x, z)


@torch.inference_mode()
def attention_maps_for_ids(model, tokenizer, ids: Sequence[int], context_ids: Sequence[int] | None = None) -> AttentionMaps:
    """One forward pass with ``return_attention=True`` on exactly these token ids (and, for an edt, the
    encoder's ``context_ids``): every head's softmax(S/√d_attn) of Algorithm 4 in the model's own dtype
    (half precision is widened to float32 for numpy)."""
    dev = _device(model)
    with _eval_mode(model):
        kw = {"context": torch.tensor([list(context_ids)], device=dev)} if context_ids is not None else {}
        _, attn = model(torch.tensor([list(ids)], device=dev), return_attention=True, **kw)
    wide = lambda v: v.float() if v.dtype in (torch.float16, torch.bfloat16) else v
    maps = {k: wide(v[0]).detach().cpu().numpy() for k, v in attn.items()}
    ctx = tokenizer.token_strings(list(context_ids)) if context_ids is not None else None
    return AttentionMaps(tokenizer.token_strings(list(ids)), ctx, maps)


__all__ = ["SampleInfo", "TokenChoice", "MaskPrediction", "AttentionMaps", "MASK_MARKER", "sample_next",
           "generate", "translate", "fill_mask", "classify", "attention_maps", "attention_maps_for_ids",
           "attention_entropy", "encode_masked", "colormap", "png_bytes"]
