"""Prompting, the text side: which inference call fits a model, and what the model reads for a user's text.

Qt-free and torch-free, shared by `inference`, the command line and the Prompt panel, so that each decides
nothing of this on its own:

- `prompt_mode`: the inference call that fits a run: ``generate`` (gpt, gopher: next-token), ``fill_mask``
  (bert: masked LM), ``translate`` (edt: seq2seq), ``classify`` (bert with a class head: classification).
- `encode_prompt`: a text encoded once, as the model reads it in one mode: the ``[bos] + text + [eos]``
  framing of an encoder's input, mask markers turned into ``mask_id``, the length checked against l_max.
  The result (`EncodedPrompt`) can be handed to the inference call instead of the text.
- `display_token`: a token as a short visible label (whitespace as ␣ ↵ ⇥), for tooltips, axes and CSV.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from ..config import ModelConfig, ResolvedModelConfig, Task
    from ..data.tokenization import TokenizerLike
    from .loaded import LoadedModel

Mode = Literal["generate", "fill_mask", "translate", "classify"]  # a prompt mode: the inference call that fits a model
MODES: tuple[Mode, ...] = get_args(Mode)
MASK_MARKER = "[MASK]"  # what a user types for a masked position (the tokenizer's own mask string works too)


# ------------------------------------------------------------------------------------------------ modes
def prompt_mode(loaded: LoadedModel | None) -> Mode | None:
    """The inference call that fits a loaded run, one of `MODES` (None for no model): from the model's
    architecture, refined by the run's task: a bert with a class head prompts as ``classify`` unless the run
    trained it on masked LM."""
    if loaded is None:
        return None
    cfg = getattr(loaded.model, "config", None) or loaded.config.model
    return model_mode(cfg, getattr(getattr(loaded.config, "data", None), "task", None))


def model_mode(cfg: ModelConfig | ResolvedModelConfig, task: Task | None = None) -> Mode | None:
    """The inference call that fits a model of ``cfg`` trained on ``task`` (None: not known), one of `MODES`."""
    if cfg.arch in ("gpt", "gopher"):
        return "generate"
    if cfg.arch == "edt":
        return "translate"
    if cfg.arch == "bert":
        n_classes = getattr(cfg, "n_classes", 0) or 0
        return "classify" if n_classes > 0 and task in ("classification", None) else "fill_mask"
    return None


# ------------------------------------------------------------------------------------------- encoding
def framed(tokenizer: TokenizerLike, text: str) -> list[int]:
    """[bos] + encode(text) + [eos]: an encoder's input (an edt's source, a bert's text)."""
    return [tokenizer.bos_id, *tokenizer.encode(text), tokenizer.eos_id]


def default_slide(l_max: int) -> int:
    """How far `inference.generate`'s window slides when the context is full, unless told: l_max // 8, at least 1."""
    return max(1, l_max // 8)


def check_length(n: int, l_max: int, what: str) -> None:
    """ValueError, in words, when a sequence of ``n`` tokens does not fit a model's l_max."""
    if n > l_max:
        raise ValueError(f"the {what} is {n} tokens long, more than this model's l_max = {l_max}; "
                         "shorten it (or train a model with a larger l_max).")


def mask_markers(tokenizer: TokenizerLike, mask_symbol: str = MASK_MARKER) -> list[str]:
    """The strings that mark a masked position: ``mask_symbol`` and the tokenizer's own mask token string,
    longest first (so that one containing the other is matched whole)."""
    own = tokenizer.token_strings([tokenizer.mask_id])[0]
    return sorted({m for m in (mask_symbol, own) if m}, key=len, reverse=True)


def has_mask_marker(tokenizer: TokenizerLike, text: str, mask_symbol: str = MASK_MARKER) -> bool:
    return any(m in text for m in mask_markers(tokenizer, mask_symbol))


@dataclass(frozen=True)
class MaskSpan:
    """One masked position: ``position`` in the model input (bos is 0), the marker at text[start:end]."""

    position: int
    start: int
    end: int


def _encode_masked(tokenizer: TokenizerLike, text: str, mask_symbol: str) -> tuple[list[int], list[MaskSpan]]:
    """[bos] + ids + [eos] with mask_id at each marker, and the markers' spans."""
    pattern = "|".join(map(re.escape, mask_markers(tokenizer, mask_symbol)))
    x, spans, pos = [tokenizer.bos_id], [], 0
    for m in re.finditer(pattern, text):
        if m.start() > pos:
            x += tokenizer.encode(text[pos:m.start()])
        spans.append(MaskSpan(len(x), m.start(), m.end()))
        x.append(tokenizer.mask_id)
        pos = m.end()
    if pos < len(text):
        x += tokenizer.encode(text[pos:])
    return [*x, tokenizer.eos_id], spans


def encode_masked(tokenizer: TokenizerLike, text: str, mask_symbol: str = MASK_MARKER) -> tuple[list[int], list[int], list[int]]:
    """[bos] + ids + [eos] with mask_id wherever a marker stands; returns (x, mask positions, char offsets)."""
    x, spans = _encode_masked(tokenizer, text, mask_symbol)
    return x, [s.position for s in spans], [s.start for s in spans]


@dataclass(frozen=True)
class EncodedPrompt:
    """A user's text as the model reads it in one prompt ``mode``, encoded (and checked) once by
    `encode_prompt`; the inference calls take it in place of the text.

    ``ids`` is the model's input x: generate: [bos if add_bos] + encode(text) (an empty text: [bos]), which
    may be longer than ``l_max`` (the model then sees its last l_max tokens); fill_mask: [bos] + ids + [eos]
    with mask_id at each marker (``masks``); classify: [bos] + encode(text) + [eos]; translate: the decoder's
    start [bos], with the encoder's input z = [bos] + encode(text) + [eos] in ``context_ids``.
    """

    mode: Mode
    text: str
    ids: tuple[int, ...]
    l_max: int
    context_ids: tuple[int, ...] | None = None
    masks: tuple[MaskSpan, ...] = ()

    @property
    def cropped(self) -> int:
        """How many of the prompt's first tokens the model does not see (generate: those before its last l_max)."""
        return max(0, len(self.ids) - self.l_max)


def encode_prompt(tokenizer: TokenizerLike, text: str, mode: Mode | None, *, l_max: int, add_bos: bool = False,
                  mask_symbol: str = MASK_MARKER) -> EncodedPrompt:
    """Encode ``text`` for prompt ``mode`` (see `EncodedPrompt`). Raises ValueError in words: unknown symbols
    (the tokenizer's error), or an encoder input (translate's source, fill_mask's and classify's text, each
    with bos and eos) longer than ``l_max``. ``add_bos`` (generate only) starts the prompt with bos, the
    paper's convention; ``mask_symbol`` (fill_mask) is the marker typed for a masked position."""
    if mode not in MODES:
        raise ValueError("this model's architecture has no prompt mode." if mode is None else
                         f"prompt mode {mode!r} is not one of {', '.join(MODES)}.")
    context: tuple[int, ...] | None = None
    masks: tuple[MaskSpan, ...] = ()
    if mode == "generate":
        ids = ([tokenizer.bos_id] if add_bos else []) + list(tokenizer.encode(text))
        ids = ids or [tokenizer.bos_id]
    elif mode == "translate":
        context = tuple(framed(tokenizer, text))
        check_length(len(context), l_max, "source with bos and eos")
        ids = [tokenizer.bos_id]
    elif mode == "fill_mask":
        ids, spans = _encode_masked(tokenizer, text, mask_symbol)
        masks = tuple(spans)
        check_length(len(ids), l_max, "text with bos and eos")
    else:
        ids = framed(tokenizer, text)
        check_length(len(ids), l_max, "text with bos and eos")
    return EncodedPrompt(mode, text, tuple(ids), l_max, context, masks)


def unknown_words(tokenizer: TokenizerLike, prompt: EncodedPrompt | str) -> list[str]:
    """The symbols of a prompt's text (or of a plain text) that a word tokenizer reads as <unk>, in order of
    appearance (mask markers aside). Empty for other tokenizers: char tokenizers refuse unknown symbols, BPE
    has none."""
    unknown_symbols = getattr(tokenizer, "unknown_symbols", None)
    if getattr(tokenizer, "kind", None) != "word" or unknown_symbols is None:
        return []
    if isinstance(prompt, str):
        return list(dict.fromkeys(unknown_symbols(prompt)))
    text, cuts = prompt.text, [(m.start, m.end) for m in prompt.masks]
    pieces = [text[a:b] for a, b in zip([0] + [e for _, e in cuts], [s for s, _ in cuts] + [len(text)])]
    return list(dict.fromkeys(s for p in pieces for s in unknown_symbols(p)))


# --------------------------------------------------------------------------------------------- labels
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def token_labels(tokenizer: TokenizerLike, ids: Sequence[int]) -> list[str]:
    """The tokens of one text as a reader reads them (`Tokenizer.token_labels`: a byte-level piece of a multi-byte
    character shows that character and which of its bytes it holds, ``П‹1/2›``); a stand-in tokenizer without
    them gives its `token_strings`."""
    labels = getattr(tokenizer, "token_labels", None)
    return list(labels(ids)) if labels is not None else tokenizer.token_strings(ids)


def display_token(token: str, max_chars: int = 14) -> str:
    """A token as a short, visible label: whitespace as ␣ ↵ ⇥, other control characters escaped,
    long tokens cut with an ellipsis."""
    if token == "":
        return "∅"
    out = []
    for c in token:
        if c in _VISIBLE:
            out.append(_VISIBLE[c])
        elif not c.isprintable():
            out.append(c.encode("unicode_escape").decode("ascii"))
        else:
            out.append(c)
    s = "".join(out)
    return s if len(s) <= max_chars else s[: max_chars - 1] + "…"


__all__ = ["Mode", "MODES", "MASK_MARKER", "EncodedPrompt", "MaskSpan", "prompt_mode", "model_mode", "encode_prompt",
           "unknown_words", "framed", "encode_masked", "mask_markers", "has_mask_marker", "check_length", "display_token",
           "token_labels"]
