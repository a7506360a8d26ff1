"""Scoring a user's own text: the model's probability of every token of it, under the loss it was trained with.

Qt-free. A token's loss is −ln p in nats, exactly the term the training loss sums for it:

- ``next_token`` (gpt, gopher; Algorithm 13, DTraining): p(x[t] | x[:t]), each token given the tokens before
  it. The text is encoded as training encodes its corpus (a window of the token stream, no bos), so the first
  token has no prefix and is not scored. A text longer than l_max + 1 tokens is scored in windows of l_max
  tokens that overlap so that, after the first window, every token is predicted from at least ⌈l_max/2⌉
  tokens before it.
- ``masked_lm`` (bert; Algorithm 12, ETraining): the pseudo-log-likelihood. Each position is scored as if it
  were the masked one: one forward pass per position with that token replaced by mask_id (batched), reading
  every other token. Training windows carry no bos or eos, so neither does the scored text.
- ``seq2seq`` (edt; Algorithm 11, EDTraining): p(target | source), each target token given the source and the
  target before it, and last the end of the target (eos), as the training loss counts it.

A classifier (P(c | x), §3) gives no probability per token, so it has no score (`unscorable_reason`).
`prepare` encodes and checks a text (cheap, so a GUI can report bad input at once); `score` runs the model;
`score_text` does both for a `runs.LoadedModel`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..device import at_least_fp32, model_device
from .generation import eval_mode
from .prompting import Mode, check_length, framed, has_mask_marker, prompt_mode, token_labels

if TYPE_CHECKING:
    from ..config import Task
    from ..data.tokenization import TokenizerLike
    from .loaded import LoadedModel

TASK_OF_MODE: dict[Mode, Task] = {"generate": "next_token", "fill_mask": "masked_lm", "translate": "seq2seq"}
ALGORITHM: dict[Task, int] = {"next_token": 13, "masked_lm": 12, "seq2seq": 11}
LOGIT_BUDGET = 1 << 24  # the most logits (rows × positions × N_V) one forward pass of `score` holds


def unscorable_reason(mode: Mode | None) -> str | None:
    """Why a model in prompt ``mode`` (`prompting.prompt_mode`) cannot score a text, in words; None when it can."""
    if mode in TASK_OF_MODE:
        return None
    if mode == "classify":
        return ("A classifier gives one probability for the whole text, P(c | x), not one for each token, so there "
                "is no loss per token to show. Score texts with a language model (gpt, gopher, a masked-LM bert or "
                "an encoder-decoder).")
    return "There is no model to score with yet: open a run, or take a snapshot while training."


def context_kept(l_max: int) -> int:
    """The fewest tokens before it that a token is predicted from after the first window: ⌈l_max/2⌉."""
    return (l_max + 1) // 2


# ------------------------------------------------------------------------------------------------ input
@dataclass(frozen=True)
class ScoreInput:
    """A text encoded (and checked) for scoring under ``task``: ``ids`` the text's token ids (no specials);
    for seq2seq, ``text`` is the target and ``context_ids`` the encoder's z = [bos] + source + [eos]."""

    task: Task
    text: str
    ids: tuple[int, ...]
    l_max: int
    source: str | None = None
    context_ids: tuple[int, ...] | None = None

    def attention_input(self, bos_id: int) -> tuple[list[int], list[int] | None]:
        """(x, z) of one forward pass over the scored text, for its attention maps: next_token its first l_max
        tokens; masked_lm the text unmasked; seq2seq the decoder's [bos] + target and the encoder's z."""
        if self.task == "seq2seq":
            return [bos_id, *self.ids], list(self.context_ids or ())
        return list(self.ids[: self.l_max]), None

    def attention_caption(self) -> str:
        """What `attention_input` shows, in words."""
        n = len(self.ids)
        if self.task == "seq2seq":
            return (f"the source ({len(self.context_ids or ())} tokens with bos and eos) → <bos> + the scored "
                    f"target ({n} tokens)")
        if n > self.l_max:
            return f"the first {self.l_max} of the scored text's {n} tokens (l_max = {self.l_max})"
        return f"the scored text ({n} tokens{', unmasked' if self.task == 'masked_lm' else ''})"


def prepare(tokenizer: TokenizerLike, text: str, mode: Mode | None, *, l_max: int, source: str | None = None) -> ScoreInput:
    """``text`` encoded for scoring by a model in prompt ``mode``; ValueError in words when it cannot be scored
    (the mode has no score, unknown symbols, too short, too long, a seq2seq score without a source)."""
    reason = unscorable_reason(mode)
    if reason is not None:
        raise ValueError(reason[:1].lower() + reason[1:])
    assert mode is not None
    task = TASK_OF_MODE[mode]
    if task == "seq2seq":
        if not source or not source.strip():
            raise ValueError("an encoder-decoder scores a target given its source: write the source text too.")
        if not text:
            raise ValueError("there is nothing to score: write the target, the text scored given the source.")
        z = framed(tokenizer, source)
        check_length(len(z), l_max, "source with bos and eos")
        ids = tuple(tokenizer.encode(text))
        check_length(len(ids) + 1, l_max, "target with bos")
        return ScoreInput(task, text, ids, l_max, source, tuple(z))
    if task == "masked_lm" and has_mask_marker(tokenizer, text):
        raise ValueError("scoring masks each position itself; write the text without mask markers.")
    ids = tuple(tokenizer.encode(text))
    if task == "next_token" and len(ids) < 2:
        raise ValueError(f"there is nothing to score: the text is {len(ids)} token{'s' if len(ids) != 1 else ''} "
                         "long, and each token is scored given the ones before it (the first has none); write "
                         "at least two tokens.")
    if task == "masked_lm":
        if not ids:
            raise ValueError("there is nothing to score: write a text.")
        check_length(len(ids), l_max, "text")
    return ScoreInput(task, text, ids, l_max)


# ----------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class ScoredToken:
    """One token of a scored text: its ``loss`` −ln p in nats (None: not scored, context only), the most
    likely tokens at its place with their probabilities, and how many tokens the model read to predict it."""

    id: int
    text: str
    loss: float | None
    alternatives: tuple[tuple[str, float], ...] = ()
    context: int = 0

    @property
    def prob(self) -> float | None:
        """p(token | context) = e^(−loss)."""
        return None if self.loss is None else math.exp(-self.loss)


@dataclass(frozen=True)
class TextScore:
    """Every token of a text with its loss (see the module): ``tokens`` in order (seq2seq ends with eos),
    ``windows`` the forward windows a next-token score used (1: the text fit), ``chars`` the characters the
    scored tokens cover."""

    task: Task
    text: str
    tokens: tuple[ScoredToken, ...]
    l_max: int
    windows: int = 1
    chars: int = 0
    source: str | None = None

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def scored(self) -> list[ScoredToken]:
        return [t for t in self.tokens if t.loss is not None]

    @property
    def losses(self) -> list[float]:
        """The scored tokens' losses in nats, in order."""
        return [t.loss for t in self.tokens if t.loss is not None]

    @property
    def mean_loss(self) -> float:
        """Mean loss in nats per scored token: the training loss of this text."""
        losses = self.losses
        return math.fsum(losses) / len(losses)

    @property
    def bits_per_char(self) -> float | None:
        """The summed loss in bits over the characters the scored tokens cover (None: no characters)."""
        return math.fsum(self.losses) / math.log(2) / self.chars if self.chars else None

    @property
    def windowed(self) -> bool:
        return self.windows > 1

    @property
    def algorithm(self) -> int:
        """The paper's algorithm whose loss this is."""
        return ALGORITHM[self.task]


# ---------------------------------------------------------------------------------------------- scoring
def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax over the vocabulary in at least fp32 (as the training loss is computed)."""
    return at_least_fp32(logits).log_softmax(-1)


def rows_per_pass(T: int, vocab_size: int) -> int:
    """How many rows of T positions one forward pass may hold within `LOGIT_BUDGET` logits."""
    return max(1, LOGIT_BUDGET // max(1, T * vocab_size))


class _Picker:
    """Collects, for each scored token, its loss and the top alternatives at its place from rows of log p."""

    def __init__(self, tokenizer: TokenizerLike, alternatives: int):
        self.tok, self.n = tokenizer, alternatives
        self.losses: dict[int, float] = {}
        self.alternatives: dict[int, tuple[tuple[str, float], ...]] = {}
        self.context: dict[int, int] = {}

    def add(self, where: Sequence[int], logp: torch.Tensor, targets: Sequence[int], context: Sequence[int]) -> None:
        """``logp`` (n, N_V) are the log-probabilities at the places of tokens ``where`` (their ids ``targets``)."""
        y = torch.tensor(list(targets), device=logp.device)
        losses = (-logp.gather(1, y[:, None])[:, 0]).double().tolist()
        if self.n > 0:
            top = logp.topk(min(self.n, logp.shape[-1]), dim=-1)
            p, ids = top.values.double().exp().tolist(), top.indices.tolist()
            strings = self.tok.token_strings([i for row in ids for i in row])
            k = len(ids[0])
            alts = [tuple(zip(strings[r * k:(r + 1) * k], p[r])) for r in range(len(ids))]
        else:
            alts = [()] * len(losses)
        for t, loss, a, c in zip(where, losses, alts, context):
            self.losses[t], self.alternatives[t], self.context[t] = loss, a, c

    def tokens(self, ids: Sequence[int]) -> tuple[ScoredToken, ...]:
        texts = token_labels(self.tok, list(ids))
        return tuple(ScoredToken(i, s, self.losses.get(t), self.alternatives.get(t, ()), self.context.get(t, 0))
                     for t, (i, s) in enumerate(zip(ids, texts)))


def window_starts(n: int, l_max: int) -> list[int]:
    """Starts of the windows x = ids[s:s + l_max] that score tokens 1 … n-1: a stride of l_max + 1 - ⌈l_max/2⌉,
    the last window ending at the text's end."""
    last = max(0, n - 1 - l_max)
    stride = l_max + 1 - context_kept(l_max)
    return [*range(0, last, stride), last]


def _next_token(model, picker: _Picker, ids: Sequence[int], l_max: int) -> int:
    """Algorithm 13's terms: window x = ids[s:s+T] predicts ids[s+1:s+T+1]; each window counts the targets the
    windows before it did not. Returns the number of windows."""
    n, dev = len(ids), model_device(model)
    T = min(l_max, n - 1)
    starts = window_starts(n, l_max)
    done = 0  # targets 1 … done are scored
    per = rows_per_pass(T, model.config.vocab_size)
    for c in range(0, len(starts), per):
        chunk = starts[c:c + per]
        x = torch.tensor([list(ids[s:s + T]) for s in chunk], device=dev)
        logp = _log_probs(model(x))  # (B, T, N_V)
        for b, s in enumerate(chunk):
            first = done + 1  # the first target this window adds
            where = range(first, s + T + 1)
            picker.add(where, logp[b, first - s - 1:], [ids[t] for t in where], [t - s for t in where])
            done = s + T
    return len(starts)


def _masked(model, tokenizer: TokenizerLike, picker: _Picker, ids: Sequence[int]) -> None:
    """Algorithm 12's term at every position: row i is the text with token i replaced by mask_id."""
    n, dev = len(ids), model_device(model)
    x = torch.tensor(list(ids), device=dev)
    per = rows_per_pass(n, model.config.vocab_size)
    for c in range(0, n, per):
        where = torch.arange(c, min(n, c + per), device=dev)
        rows = x.repeat(len(where), 1)
        rows[torch.arange(len(where), device=dev), where] = tokenizer.mask_id
        logp = _log_probs(model(rows))[torch.arange(len(where), device=dev), where]  # (B, N_V)
        positions = where.tolist()
        picker.add(positions, logp, [ids[t] for t in positions], [n - 1] * len(positions))


def _seq2seq(model, tokenizer: TokenizerLike, picker: _Picker, ids: Sequence[int], z: Sequence[int]) -> None:
    """Algorithm 11's terms: x = [bos] + target predicts y = target + [eos], reading z = [bos] + source + [eos]."""
    dev = model_device(model)
    x = torch.tensor([[tokenizer.bos_id, *ids]], device=dev)
    logp = _log_probs(model(x, context=torch.tensor([list(z)], device=dev)))[0]  # (T, N_V)
    y = [*ids, tokenizer.eos_id]
    picker.add(range(len(y)), logp, y, range(1, len(y) + 1))


@torch.inference_mode()
def score(model, tokenizer: TokenizerLike, inp: ScoreInput, *, alternatives: int = 8) -> TextScore:
    """Score ``inp`` (from `prepare`) with ``model``: every token's loss −ln p in nats, exactly the term of the
    training loss of its task (Algorithm 13 next_token, 12 masked_lm, 11 seq2seq; see the module), and the
    ``alternatives`` most likely tokens at its place."""
    if inp.l_max != model.config.l_max:
        raise ValueError(f"this text was prepared for l_max = {inp.l_max}, not this model's l_max = "
                         f"{model.config.l_max}; prepare it again.")
    picker = _Picker(tokenizer, alternatives)
    windows, ids = 1, list(inp.ids)
    with eval_mode(model):
        if inp.task == "next_token":
            windows = _next_token(model, picker, ids, inp.l_max)
        elif inp.task == "masked_lm":
            _masked(model, tokenizer, picker, ids)
        else:
            _seq2seq(model, tokenizer, picker, ids, inp.context_ids or ())
            ids.append(tokenizer.eos_id)
    chars = len(inp.text)
    if inp.task == "next_token":  # the first token is context only
        chars = max(0, chars - len(tokenizer.decode(ids[:1])))
    return TextScore(inp.task, inp.text, picker.tokens(ids), inp.l_max, windows, chars, inp.source)


def score_text(loaded: LoadedModel, text: str, source: str | None = None, *, alternatives: int = 8) -> TextScore:
    """Score ``text`` with a loaded run's model (an edt: ``text`` is the target, scored given ``source``)."""
    inp = prepare(loaded.tokenizer, text, prompt_mode(loaded), l_max=loaded.model.config.l_max, source=source)
    return score(loaded.model, loaded.tokenizer, inp, alternatives=alternatives)


__all__ = ["ScoreInput", "ScoredToken", "TextScore", "prepare", "rows_per_pass", "score", "score_text", "unscorable_reason",
           "context_kept", "window_starts", "TASK_OF_MODE", "ALGORITHM"]
