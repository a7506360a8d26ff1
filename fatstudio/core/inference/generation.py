"""Inference: DInference (Algorithm 14), EDInference (Algorithm 15), sampling with temperature, top-k and
nucleus (top-p) filtering, BERT's fill-mask, classification (paper §3) and attention maps.

Qt-free. Every function runs under ``torch.inference_mode()`` (tensors it returns are for reading, not for
autograd) and puts the model in eval mode, restoring its previous mode afterwards (for a `Generation`: when
it finishes or is closed). Token ids are the model's; texts go through a tokenizer with ``encode``,
``decode``, ``token_strings``, ``vocab_size`` and the special ids ``pad_id``, ``mask_id``, ``bos_id``,
``eos_id``. Unknown symbols raise the tokenizer's ValueError.

Which call fits a run, and what the model reads for a text in each (framing, mask markers), is decided in
`prompting`: every call here takes either the text or the `prompting.EncodedPrompt` made from it, so a caller
that encoded a text once (to check it) does not encode it again. `fill_mask` and `classify` can return the
attention maps of their own forward pass (``return_attention=True``); a `Generation` computes the maps of
the user's text (the prompt, then as much of the output as l_max allows), captioned (`TextAttention`).
The maps, their names, colours and files are `attention_maps.AttentionMaps`.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, overload

import torch

from ..device import at_least_fp32, model_device
from ..model.attention import KVCache
from ..names import MapName
from .attention_maps import AttentionMaps, attention_entropy, colormap
from .prompting import (
    MASK_MARKER,
    EncodedPrompt,
    Mode,
    check_length,
    default_slide,
    encode_masked,
    encode_prompt,
    framed,
    has_mask_marker,
    token_labels,
)

if TYPE_CHECKING:
    from ..data.tokenization import TokenizerLike
    from .decode_step import DecodeStep


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
def _never_sampled(tokenizer: TokenizerLike) -> tuple[int, ...]:
    """pad, mask and bos: generated text never continues with them (eos may end it, also where an imported
    tokenizer gives eos one of those roles too: GPT-2's <|endoftext|> is bos, eos and pad)."""
    return tuple(i for i in (tokenizer.pad_id, tokenizer.mask_id, tokenizer.bos_id) if i != tokenizer.eos_id)


@contextlib.contextmanager
def eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _arch(model) -> str:
    return getattr(getattr(model, "config", None), "arch", "?")


def _require_arch(model, archs: tuple[str, ...], what: str, hint: str) -> None:
    if _arch(model) not in archs:
        raise ValueError(f"{what} needs a {' or '.join(map(repr, archs))} model, and this one is {_arch(model)!r}; "
                         f"{hint}")


def _l_max(model) -> int:
    return model.config.l_max


def _alternatives(tokenizer: TokenizerLike, probs: torch.Tensor, n: int) -> list[tuple[str, float]]:
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

    def __init__(self, tokenizer: TokenizerLike, context_ids: Sequence[int]):
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


def _choice(tokenizer: TokenizerLike, sampler: _Sampler, draw: _Draw, stream: _TextStream, alternatives: int) -> TokenChoice:
    """The TokenChoice of a draw, with the ``alternatives`` most likely tokens; what it reports reaches the
    host in one copy."""
    at = draw.at
    if alternatives > 0:
        at = torch.cat([at, draw.probs.topk(min(alternatives, draw.probs.numel())).indices])
    ids, p = torch.stack([at.double(), draw.probs.index_select(0, at).double()]).tolist()
    y = int(ids[0])
    alts = list(zip(tokenizer.token_strings([int(i) for i in ids[3:]]), p[3:]))
    return TokenChoice(y, stream.push(y), p[0], alts, *sampler.cutoffs(p))


def _sampler(model, tokenizer: TokenizerLike, temperature, top_k, top_p, seed: int | None) -> _Sampler:
    """The sampling step for ``model``'s logits; it never draws the ids of `_never_sampled`."""
    generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    return _Sampler(model.config.vocab_size, model_device(model), temperature=temperature, top_k=top_k, top_p=top_p,
                    generator=generator, exclude=_never_sampled(tokenizer))


def _as_prompt(model, tokenizer: TokenizerLike, prompt: str | EncodedPrompt, mode: Mode, **kw: Any) -> EncodedPrompt:
    """``prompt`` encoded for ``mode`` (see `prompting.encode_prompt`), or checked when it already is."""
    if not isinstance(prompt, EncodedPrompt):
        return encode_prompt(tokenizer, prompt, mode, l_max=_l_max(model), **kw)
    if prompt.mode != mode or prompt.l_max != _l_max(model):
        raise ValueError(f"this prompt was encoded for {prompt.mode} with l_max = {prompt.l_max}, not for {mode} "
                         f"with this model's l_max = {_l_max(model)}; encode it again.")
    return prompt


def _maps(tokenizer: TokenizerLike, ids: Sequence[int], context_ids: Sequence[int] | None,
          attn: dict[str, torch.Tensor]) -> AttentionMaps:
    """The AttentionMaps of a forward pass's attention (batch row 0), in the model's own dtype (half precision
    is widened to float32 for numpy)."""
    maps = {MapName.parse(k): at_least_fp32(v[0]).detach().cpu().numpy() for k, v in attn.items()}
    ctx = token_labels(tokenizer, list(context_ids)) if context_ids is not None else None
    return AttentionMaps(token_labels(tokenizer, list(ids)), ctx, maps, list(ids),
                         None if context_ids is None else list(context_ids))


@dataclass
class TextAttention(AttentionMaps):
    """The `AttentionMaps` of a generation's text, with ``caption``: what of the text they show, in words
    (`Generation.attention_caption`)."""

    caption: str = ""


class Generation(Iterator[TokenChoice]):
    """The tokens of one `generate` or `translate` call: an iterator of TokenChoice that samples each token
    when it is asked for (``close()`` stops early and restores the model's mode), and what the model read.

    ``prompt`` is the `EncodedPrompt` (encoded once, when the call was made); ``output_ids`` the ids yielded
    so far. `attention` gives the attention maps of the user's text: the prompt and as much of the output as
l_max allows.
    """

    def __init__(self, steps: Iterator[TokenChoice], model, tokenizer: TokenizerLike, prompt: EncodedPrompt):
        self._steps, self._model, self._tokenizer = steps, model, tokenizer
        self.prompt = prompt
        self.output_ids: list[int] = []

    def __next__(self) -> TokenChoice:
        choice = next(self._steps)
        self.output_ids.append(choice.id)
        return choice

    def close(self) -> None:
        close = getattr(self._steps, "close", None)
        if close is not None:
            close()

    def attention_input(self) -> tuple[list[int], list[int] | None]:
        """(x, z) of the user's text as far as l_max allows: decoder-only, the window of prompt + output that
        starts where the prompt starts (a prompt longer than l_max: its last l_max tokens, which the model
        read), so the prompt stays in view however long the output; no z. Translate: [bos] + output (at most
        l_max) and the encoder's z = [bos] + source + [eos]."""
        l_max = _l_max(self._model)
        ids = [*self.prompt.ids, *self.output_ids]
        if self.prompt.context_ids is None:
            start = self.prompt.cropped
            return ids[start:start + l_max], None
        return ids[:l_max], list(self.prompt.context_ids)

    def attention_caption(self) -> str:
        """What `attention_input` shows of the text, in words: "the prompt (12 tokens) + the first 14 of the
        200 generated tokens (l_max = 26)"."""
        x, z = self.attention_input()
        n_out = len(self.output_ids)
        plural = lambda n, word: f"{n} {word}" + ("" if n == 1 else "s")
        if z is not None:
            shown = len(x) - 1  # after the decoder's bos
            out = (f"all {plural(n_out, 'output token')}" if shown == n_out else
                   f"the first {shown} of the {plural(n_out, 'output token')}")
            return f"the source ({plural(len(z), 'token')} with bos and eos) → <bos> + {out}"
        n_prompt, cut = len(self.prompt.ids), self.prompt.cropped
        shown_out = len(x) - (n_prompt - cut)
        text = (f"the last {n_prompt - cut} of the prompt's {n_prompt} tokens" if cut else
                f"the prompt ({plural(n_prompt, 'token')})")
        if n_out and shown_out == n_out:
            text += f" + all {plural(n_out, 'generated token')}"
        elif n_out and shown_out:
            text += f" + the first {shown_out} of the {plural(n_out, 'generated token')}"
        elif n_out:
            text += f"; the {plural(n_out, 'generated token')} do not fit"
        return text + (f" (l_max = {_l_max(self._model)})" if cut or shown_out < n_out else "")

    def attention(self) -> TextAttention:
        """The attention maps of one forward pass over `attention_input` (the last token sampled is read too),
        with `attention_caption`."""
        maps = attention_maps_for_ids(self._model, self._tokenizer, *self.attention_input())
        return TextAttention(maps.tokens, maps.context_tokens, maps.maps, maps.ids, maps.context_ids,
                             self.attention_caption())


# -------------------------------------------------------------------------------- Algorithm 14: generate
def generate(model, tokenizer: TokenizerLike, prompt: str | EncodedPrompt, *, tokens: int = 200, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, seed: int | None = None, use_cache: bool = True,
             alternatives: int = 5, stop_at_eos: bool = False, add_bos: bool = False,
             slide: int | None = None, decoder: DecodeStep | None = None) -> Generation:
    """DInference (Algorithm 14) with a decoder-only model ('gpt', 'gopher'): yields ``tokens`` TokenChoices.

    The prompt is ``encode(prompt)``, preceded by bos when ``add_bos`` (the paper's convention). The default
    is no bos, because next-token training on a corpus uses raw windows of the token stream without one; an
    empty prompt starts from bos either way. A prompt longer than l_max is cropped to its last l_max tokens.
    ``prompt`` may also be an `EncodedPrompt` for "generate" (``add_bos`` is then the one it was encoded with).

    With ``use_cache`` the window is prefilled once and each new token goes through ``model(x_last,
    cache=cache)``. When the context is full the window slides by ``slide`` tokens (default l_max // 8, at
    least 1) and the cache is rebuilt from the remaining tokens, so any length works; ``slide=1`` is the
    classic "always the last l_max tokens" (a full forward per token once full). ``use_cache=False``
    recomputes the same windows from scratch each step, giving the same probabilities.
    ``stop_at_eos``: stop when eos is drawn (eos is not yielded). ``seed`` makes the draws reproducible.
    ``decoder``: the model's `decode_step.DecodeStep`; once it has compiled, the forwards go through its static
    cache and compiled graphs (the same probabilities), else eagerly.
    The prompt is encoded (and the arguments checked) when ``generate`` is called, so errors raise here.
    """
    _require_arch(model, ("gpt", "gopher"), "generate", "use fill_mask for 'bert' and translate for 'edt'.")
    sampler = _sampler(model, tokenizer, temperature, top_k, top_p, seed)
    l_max = _l_max(model)
    slide = default_slide(l_max) if slide is None else slide
    if not isinstance(slide, int) or not 1 <= slide <= l_max:
        raise ValueError(f"slide = {slide!r} is not allowed; use a whole number from 1 to l_max = {l_max}.")
    if not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens = {tokens!r} is not allowed; use a whole number ≥ 0.")
    encoded = _as_prompt(model, tokenizer, prompt, "generate", add_bos=add_bos)
    steps = _generate(model, tokenizer, list(encoded.ids), tokens, sampler, use_cache, alternatives, stop_at_eos,
                      slide, decoder)
    return Generation(steps, model, tokenizer, encoded)


@torch.inference_mode()
def _generate(model, tokenizer: TokenizerLike, ids, n_tokens, sampler, use_cache, alternatives, stop_at_eos, slide,
              decoder: DecodeStep | None):
    l_max, dev = _l_max(model), model_device(model)
    seq = list(ids)
    start = max(0, len(seq) - l_max)  # the window is seq[start:], never longer than l_max
    stream = _TextStream(tokenizer, seq)
    cache = None
    session = decoder.session() if decoder is not None and use_cache else contextlib.nullcontext()
    with eval_mode(model), session as compiled:
        for _ in range(n_tokens):
            if len(seq) - start > l_max:  # full: slide the window and rebuild the cache
                start = len(seq) - (l_max + 1 - slide)
                cache = None
            if cache is None:  # (re)fill the cache from the window; without use_cache at every step
                cache = (compiled.cache.reset() if compiled else KVCache()) if use_cache else None
                x = torch.tensor([seq[start:]], device=dev)
            draw = sampler((compiled.step(x) if compiled else model(x, cache=cache))[0, -1])
            choice = _choice(tokenizer, sampler, draw, stream, alternatives)
            if stop_at_eos and choice.id == tokenizer.eos_id:
                return
            yield choice
            seq.append(choice.id)
            x = draw.at[:1].view(1, 1)  # the next input: y, already on the device


# ------------------------------------------------------------------------------- Algorithm 15: translate
def translate(model, tokenizer: TokenizerLike, source: str | EncodedPrompt, *, max_tokens: int | None = None,
              temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
              alternatives: int = 5) -> Generation:
    """EDInference (Algorithm 15) with an 'edt' model: z = [bos]+encode(source)+[eos], Z = encode(z) once,
    x̂ = [bos], then one token at a time through the decoder with a KV cache (the cross-attention keys and
    values of Z are computed on the first step and kept in the cache) until eos (not yielded) or
    ``max_tokens`` tokens (default l_max - 1; at most l_max, the decoder's positions). τ = 0 (greedy) by
    default. A source longer than l_max - 2 raises ValueError. ``source`` may also be an `EncodedPrompt` for
    "translate".
    """
    _require_arch(model, ("edt",), "translate", "use generate for 'gpt'/'gopher' and fill_mask for 'bert'.")
    sampler = _sampler(model, tokenizer, temperature, top_k, top_p, seed)
    l_max = _l_max(model)
    encoded = _as_prompt(model, tokenizer, source, "translate")
    max_tokens = l_max - 1 if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"max_tokens = {max_tokens!r} is not allowed; use a whole number ≥ 0.")
    z = list(encoded.context_ids or ())
    return Generation(_translate(model, tokenizer, z, min(max_tokens, l_max), sampler, alternatives),
                      model, tokenizer, encoded)


@torch.inference_mode()
def _translate(model, tokenizer: TokenizerLike, z, max_tokens, sampler, alternatives):
    dev = model_device(model)
    stream = _TextStream(tokenizer, [])
    with eval_mode(model):
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
    (bos is 0); the marker stood at ``text[char_offset:char_end]`` in the user's text."""

    position: int
    candidates: list[tuple[str, float]]
    char_offset: int | None = None
    char_end: int | None = None


def fill_in(text: str, predictions: Sequence[MaskPrediction]) -> list[str | MaskPrediction]:
    """``text`` cut at its mask markers, in order: the plain pieces (str) and, in each marker's place, its
    MaskPrediction (those without a place in the text are left out)."""
    out: list[str | MaskPrediction] = []
    pos = 0
    placed = sorted(((p.char_offset, p.char_end, p) for p in predictions
                     if p.char_offset is not None and p.char_end is not None), key=lambda t: t[0])
    for start, end, p in placed:
        if start < pos:
            continue
        if start > pos:
            out.append(text[pos:start])
        out.append(p)
        pos = end
    if pos < len(text):
        out.append(text[pos:])
    return out


@overload
def fill_mask(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, *, mask_symbol: str = ..., top: int = ...,
              return_attention: Literal[False] = ...) -> list[MaskPrediction]: ...
@overload
def fill_mask(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, *, mask_symbol: str = ..., top: int = ...,
              return_attention: Literal[True]) -> tuple[list[MaskPrediction], AttentionMaps]: ...
@torch.inference_mode()
def fill_mask(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, *, mask_symbol: str = MASK_MARKER, top: int = 5,
              return_attention: bool = False) -> list[MaskPrediction] | tuple[list[MaskPrediction], AttentionMaps]:
    """BERT's masked-token prediction (the task of Algorithm 12): the ``top`` candidates at each marker.

    Mark a position with ``mask_symbol`` ("[MASK]") or the tokenizer's own mask token string; the text
    between markers is encoded as usual (or pass the `EncodedPrompt` for "fill_mask"). The input is
    [bos] + ids + [eos]; one forward pass of Algorithm 9, whose attention maps come back too with
    ``return_attention=True``: (predictions, AttentionMaps).
    """
    _require_arch(model, ("bert",), "fill_mask", "use generate for 'gpt'/'gopher' and translate for 'edt'.")
    unmarked = ValueError(f"the text has no masked position; write {mask_symbol} where a token should be "
                          f"predicted, e.g. 'the {mask_symbol} sat on the mat'.")
    if isinstance(text, str) and not has_mask_marker(tokenizer, text, mask_symbol):
        raise unmarked  # before encoding: words about the marker, not about the rest of the text
    prompt = _as_prompt(model, tokenizer, text, "fill_mask", mask_symbol=mask_symbol)
    if not prompt.masks:
        raise unmarked
    with eval_mode(model):
        out = model(torch.tensor([prompt.ids], device=model_device(model)), return_attention=return_attention)
    logits, attn = out if return_attention else (out, None)
    probs = logits[0].float().softmax(-1).cpu()
    preds = [MaskPrediction(m.position, _alternatives(tokenizer, probs[m.position], top), m.start, m.end)
             for m in prompt.masks]
    return (preds, _maps(tokenizer, prompt.ids, None, attn)) if attn is not None else preds


@overload
def classify(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, class_names: Sequence[str] | None = ..., *,
             return_attention: Literal[False] = ...) -> list[tuple[str, float]]: ...
@overload
def classify(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, class_names: Sequence[str] | None = ..., *,
             return_attention: Literal[True]) -> tuple[list[tuple[str, float]], AttentionMaps]: ...
@torch.inference_mode()
def classify(model, tokenizer: TokenizerLike, text: str | EncodedPrompt, class_names: Sequence[str] | None = None, *,
             return_attention: bool = False) -> list[tuple[str, float]] | tuple[list[tuple[str, float]], AttentionMaps]:
    """P(c | x) (paper §3) of a 'bert' model with a class head on [bos]+encode(text)+[eos] (or the
    `EncodedPrompt` for "classify"), most likely first. ``class_names`` default to "class 0", "class 1", ….
    With ``return_attention=True``: (probabilities, the AttentionMaps of the same forward pass)."""
    _require_arch(model, ("bert",), "classify", "classification uses a 'bert' model with n_classes > 0.")
    n = model.config.n_classes
    names = [f"class {i}" for i in range(n)] if class_names is None else list(class_names)
    if len(names) != n:
        raise ValueError(f"{len(names)} class names were given, but the model has n_classes = {n}.")
    prompt = _as_prompt(model, tokenizer, text, "classify")
    with eval_mode(model):
        out = model.classify(torch.tensor([prompt.ids], device=model_device(model)), return_attention=return_attention)
    logits, attn = out if return_attention else (out, None)
    p = logits[0].float().softmax(-1).cpu().tolist()
    ranked = sorted(zip(names, p), key=lambda c: -c[1])
    return (ranked, _maps(tokenizer, prompt.ids, None, attn)) if attn is not None else ranked


# ---------------------------------------------------------------------------------------- attention maps
@torch.inference_mode()
def attention_maps(model, tokenizer: TokenizerLike, text: str, *, source: str | None = None, add_bos: bool = False,
                   mask_symbol: str = MASK_MARKER) -> AttentionMaps:
    """The attention weights of one forward pass with ``return_attention=True`` (exactly the model's numbers).

    gpt/gopher: x = [bos if add_bos] + encode(text) (an empty text is [bos]); bert: [bos] + ids + [eos] with
    mask markers allowed as in `fill_mask`; edt: the encoder reads [bos] + encode(source) + [eos] and the
    decoder x = [bos] + encode(text). A sequence longer than l_max raises ValueError.
    """
    arch, l_max = _arch(model), _l_max(model)
    z = None
    if arch == "bert":
        x = list(encode_prompt(tokenizer, text, "fill_mask", l_max=l_max, mask_symbol=mask_symbol).ids)
    elif arch == "edt":
        if source is None:
            raise ValueError("an 'edt' model attends to a source text: pass source=... (the text to translate).")
        z = list(encode_prompt(tokenizer, source, "translate", l_max=l_max).context_ids or ())
        x = [tokenizer.bos_id, *tokenizer.encode(text)]
        check_length(len(x), l_max, "text")
    else:
        x = list(encode_prompt(tokenizer, text, "generate", l_max=l_max, add_bos=add_bos).ids)
        check_length(len(x), l_max, "text")
    return attention_maps_for_ids(model, tokenizer, x, z)


@torch.inference_mode()
def attention_maps_for_ids(model, tokenizer: TokenizerLike, ids: Sequence[int],
                           context_ids: Sequence[int] | None = None) -> AttentionMaps:
    """One forward pass with ``return_attention=True`` on exactly these token ids (and, for an edt, the
    encoder's ``context_ids``): every head's softmax(S/√d_attn) of Algorithm 4 in the model's own dtype
    (half precision is widened to float32 for numpy)."""
    dev = model_device(model)
    with eval_mode(model):
        kw = {"context": torch.tensor([list(context_ids)], device=dev)} if context_ids is not None else {}
        _, attn = model(torch.tensor([list(ids)], device=dev), return_attention=True, **kw)
    return _maps(tokenizer, ids, context_ids, attn)


__all__ = ["SampleInfo", "TokenChoice", "MaskPrediction", "Generation", "AttentionMaps", "TextAttention", "EncodedPrompt",
           "MASK_MARKER", "sample_next", "generate", "translate", "fill_mask", "fill_in", "classify",
           "attention_maps", "attention_maps_for_ids", "attention_entropy", "encode_masked", "framed", "colormap"]
