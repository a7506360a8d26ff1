"""A prompt's results as typed events, one protocol for the command line and the Prompt panel.

`prompt_events` runs the inference call of a prompt's mode (`prompting.prompt_mode`) and yields what it gives,
in order: `Tokens` (generate, translate: the sampled tokens, in batches), `MaskPredictions` (fill_mask) or
`ClassProbabilities` (classify); then, when asked for, the attention maps of the text (`Attention`, or
`AttentionFailed` with the reason they could not be drawn); last `Finished`. `score_events` does the same for
scoring a text (`Scored`). The call's arguments are checked when it is made (a ValueError in words); the model
work runs as the events are read, and an error there is raised to the reader.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..records import EndStatus
from . import generation, scoring
from .attention_maps import AttentionMaps
from .decode_step import decode_step_of
from .generation import Generation, MaskPrediction, TokenChoice
from .prompting import EncodedPrompt
from .scoring import ScoreInput, TextScore

if TYPE_CHECKING:
    from .loaded import LoadedModel


@dataclass(frozen=True)
class Tokens:
    """Tokens sampled since the last `Tokens` (generate, translate)."""

    choices: Sequence[TokenChoice]


@dataclass(frozen=True)
class MaskPredictions:
    """The top predictions at each mask of a fill_mask prompt."""

    predictions: Sequence[MaskPrediction]


@dataclass(frozen=True)
class ClassProbabilities:
    """P(c | x) of each class, most likely first (classify)."""

    probabilities: Sequence[tuple[str, float]]


@dataclass(frozen=True)
class Scored:
    """A scored text (`scoring.score`)."""

    score: TextScore


@dataclass(frozen=True)
class Attention:
    """The attention maps of the prompt's text (and output)."""

    maps: AttentionMaps


@dataclass(frozen=True)
class AttentionFailed:
    """The attention maps could not be computed; the results before stand."""

    error: Exception


@dataclass(frozen=True)
class Finished:
    """The last event: ``status`` is "finished", "stopped" (asked to stop early) or "failed"."""

    status: EndStatus


PromptEvent = Tokens | MaskPredictions | ClassProbabilities | Scored | Attention | AttentionFailed | Finished


def prompt_events(loaded: LoadedModel, prompt: EncodedPrompt, *, tokens: int = 200, top: int = 5,
                  temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                  alternatives: int = 5, stop: threading.Event | None = None, batch_s: float = 0.0,
                  attention: bool = True, compiled: bool = False) -> Iterator[PromptEvent]:
    """The events of ``prompt``'s mode: generate (ℓ_gen = ``tokens``) and translate (at most ``tokens``) sample
    with τ, top-k, top-p and ``seed`` and list ``alternatives`` per token; fill_mask lists the ``top``
    predictions per mask. ``stop``, ``batch_s``: see `generation_events`; ``attention``: end with the text's
    attention maps; ``compiled``: generate through the model's compiled decode step once it is ready
    (`decode_step.decode_step_of`; for a long-lived process)."""
    model, tok = loaded.model, loaded.tokenizer
    if prompt.mode == "fill_mask":
        return _fill_mask_events(loaded, prompt, top, attention)
    if prompt.mode == "classify":
        return _classify_events(loaded, prompt, attention)
    if prompt.mode == "generate":
        running = generation.generate(model, tok, prompt, tokens=tokens, temperature=temperature, top_k=top_k,
                                     top_p=top_p, seed=seed, alternatives=alternatives,
                                     decoder=decode_step_of(loaded) if compiled else None)
    else:
        running = generation.translate(model, tok, prompt, max_tokens=tokens, temperature=temperature, top_k=top_k,
                                      top_p=top_p, seed=seed, alternatives=alternatives)
    return generation_events(running, stop=stop, batch_s=batch_s, attention=attention)


def generation_events(generation: Generation, *, stop: threading.Event | None = None, batch_s: float = 0.0,
                      attention: bool = True) -> Iterator[PromptEvent]:
    """`Tokens` as ``generation`` samples them, at most one event per ``batch_s`` seconds (the first at once;
    0: one per token), ending "stopped" after the token being sampled when ``stop`` is set. Tokens sampled
    before an error are yielded before it is raised."""
    buf: list[TokenChoice] = []
    last = -math.inf
    status: EndStatus = "finished"
    try:
        for ch in generation:
            buf.append(ch)
            now = time.perf_counter()
            if now - last >= batch_s:
                yield Tokens(buf)
                buf, last = [], now
            if stop is not None and stop.is_set():
                status = "stopped"
                break
    except Exception:
        if buf:
            yield Tokens(buf)
        raise
    finally:
        generation.close()
    if buf:
        yield Tokens(buf)
    if attention:
        yield _attention(generation.attention)
    yield Finished(status)


def _attention(compute) -> Attention | AttentionFailed:
    try:
        return Attention(compute())
    except Exception as e:
        return AttentionFailed(e)


def _fill_mask_events(loaded: LoadedModel, prompt: EncodedPrompt, top: int, attention: bool) -> Iterator[PromptEvent]:
    preds, maps = generation.fill_mask(loaded.model, loaded.tokenizer, prompt, top=top, return_attention=True)
    yield MaskPredictions(preds)
    if attention:
        yield Attention(maps)
    yield Finished("finished")


def _classify_events(loaded: LoadedModel, prompt: EncodedPrompt, attention: bool) -> Iterator[PromptEvent]:
    probs, maps = generation.classify(loaded.model, loaded.tokenizer, prompt, loaded.class_names or None,
                                     return_attention=True)
    yield ClassProbabilities(probs)
    if attention:
        yield Attention(maps)
    yield Finished("finished")


def score_events(loaded: LoadedModel, inp: ScoreInput, *, alternatives: int = 5) -> Iterator[PromptEvent]:
    """`Scored` (every token of ``inp`` by the model's probability of it), the attention maps of the scored
    text with their caption, `Finished`."""
    yield Scored(scoring.score(loaded.model, loaded.tokenizer, inp, alternatives=alternatives))

    def maps() -> generation.TextAttention:
        m = generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, *inp.attention_input(loaded.tokenizer.bos_id))
        return generation.TextAttention(m.tokens, m.context_tokens, m.maps, m.ids, m.context_ids, inp.attention_caption())

    yield _attention(maps)
    yield Finished("finished")


__all__ = ["Tokens", "MaskPredictions", "ClassProbabilities", "Scored", "Attention", "AttentionFailed",
           "Finished", "PromptEvent", "prompt_events", "generation_events", "score_events"]
