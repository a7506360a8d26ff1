"""Where is it wrong, by kind of token: the validation tokens' losses (`token_loss`) grouped into classes, the
worst tokens with the text before them, and the split cut into lines to show.

Families of classes, each covering every token once. First, where the task has them, the classes it tells apart:

- ``copy``, for the "repeat" corpus (one token a character): a sequence's first copy, the first letter of its
  second copy, and the rest of the second copy, the letters a next-token model predicts by induction (the
  distinction that matters there: an induction head brings the rest of the second copy towards zero loss);
- ``part``, for a synthetic task's text form (``question>answer`` a line, one token a character): the question,
  the separator, the answer and the end of the line;
- ``target``, for seq2seq: each target's first token, its later tokens, and the eos that ends it.

Then, for every task:

- ``kind``, by the token's text: letters, digits, space and newline (whitespace only), punctuation (marks and
  symbols), other (mixed, such as a BPE piece ``ing,``, and the specials such as ``<eos>``). A token of letters
  after a space (a BPE ``' the'``) is letters.
- ``frequency``, by how often the token is a target in the training split: the tokens sorted from the most to
  the least frequent and cut into quarters of the training split's tokens (Q1: the few most frequent tokens
  that make up its first quarter, …, Q4: the long tail), and those the training split never holds.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import numpy as np

from .token_loss import TokenLoss, TokenLossDiff, diff

KINDS = ("letters", "digits", "space and newline", "punctuation", "other")
SPECIAL = ("<pad>", "<mask>", "<bos>", "<eos>", "<unk>")
UNSEEN = "unseen in training"
SHOWN = {"\n": "↵", "\t": "→", "\r": "␍"}  # whitespace drawn visibly where a token is shown alone


def kind_of(token: str) -> str:
    """The ``kind`` class of a token's text (see the module)."""
    if token in SPECIAL or not token:
        return "other"
    body = token.strip()
    if not body:
        return "space and newline"
    if body.isalpha():
        return "letters"
    if body.isdigit():
        return "digits"
    if all(unicodedata.category(ch)[0] in "PS" for ch in body):
        return "punctuation"
    return "other"


def frequency_buckets(train_counts: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(N_V,) the bucket of every token id and the buckets' names: Q1–Q4 by training mass, then unseen."""
    order = np.argsort(-train_counts, kind="stable")
    counts = train_counts[order].astype(np.float64)
    before = np.concatenate(([0.0], np.cumsum(counts)[:-1])) / max(1.0, counts.sum())
    q = np.minimum(3, (before * 4).astype(np.int64))
    q[counts == 0] = 4
    bucket = np.empty(len(order), np.int64)
    bucket[order] = q
    names = []
    for b in range(4):
        ranks = np.nonzero(q == b)[0] + 1
        span = "" if not len(ranks) else f" (rank {ranks[0]})" if len(ranks) == 1 else f" (ranks {ranks[0]}–{ranks[-1]:,})"
        names.append(f"Q{b + 1}: {('most frequent', 'frequent', 'less frequent', 'rare')[b]}{span}")
    return bucket, [*names, UNSEEN]


@dataclass
class ClassRow:
    """One class of tokens: how many of the validation tokens it holds, their mean loss in nats and, in a diff,
    the mean of their Δ (this − the other)."""

    family: str
    name: str
    count: int
    mean_loss: float
    delta: float | None = None

    def to_dict(self) -> dict:
        out = {"family": self.family, "name": self.name, "count": self.count, "mean_loss": self.mean_loss}
        if self.delta is not None:
            out["delta_loss"] = self.delta
        return out


TARGET = ("first target token", "later target tokens", "eos (the end)")  # the ``target`` family (seq2seq)


def target_places(pair_starts: np.ndarray, n: int) -> np.ndarray:
    """(n,) the ``target`` class of each of ``n`` seq2seq validation tokens whose pairs start at ``pair_starts``: 0
    a target's first token, 1 a later one, 2 the eos ending it (a pair's last token)."""
    place = np.ones(n, np.int64)
    ends = np.concatenate((pair_starts[1:], [n])) - 1
    place[pair_starts] = 0
    place[ends] = 2  # an empty target's only token is its eos
    return place


def classes_of(result: TokenLoss) -> dict[str, tuple[np.ndarray, list[str]]]:
    """For each family, (N,) the class index of every validation token and the class names: the task's own first
    (``copy``, ``part``, ``target``), where it has them."""
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    if result.task_classes is not None:
        out[result.task_classes.family] = (result.task_classes.of.astype(np.int64), list(result.task_classes.names))
    elif result.pair_starts is not None and len(result.pair_starts):
        out["target"] = (target_places(result.pair_starts, result.n_tokens), list(TARGET))
    unique, inverse = np.unique(result.ids, return_inverse=True)
    first = np.zeros(len(unique), np.int64)
    first[inverse[::-1]] = np.arange(len(inverse))[::-1]  # a token's first position: its text
    kind = np.array([KINDS.index(kind_of(result.tokens[i])) for i in first], np.int64)
    out["kind"] = (kind[inverse], list(KINDS))
    if result.train_counts is not None:
        bucket, names = frequency_buckets(result.train_counts)
        out["frequency"] = (bucket[result.ids], names)
    return out


def breakdown(result: TokenLoss, against: TokenLoss | None = None) -> list[ClassRow]:
    """Every non-empty class of each family with its count and mean loss (and, ``against`` another scoring of the
    same tokens, the mean Δ of its tokens): within a family the counts sum to N and count × mean to the total."""
    delta = diff(result, against).delta if against is not None else None
    rows = []
    for family, (cls, names) in classes_of(result).items():
        n = np.bincount(cls, minlength=len(names))
        total = np.bincount(cls, weights=result.loss, minlength=len(names))
        moved = np.bincount(cls, weights=delta, minlength=len(names)) if delta is not None else None
        for c, name in enumerate(names):
            if n[c]:
                rows.append(ClassRow(family, name, int(n[c]), float(total[c] / n[c]),
                                     None if moved is None else float(moved[c] / n[c])))
    return rows


@dataclass
class WorstToken:
    """A validation token at ``position`` with its loss (or Δ), and the text before it (``context``)."""

    position: int
    token: str
    value: float
    context: str


def context_before(result: TokenLoss, position: int, n: int = 20) -> str:
    """The ``n`` tokens before ``position`` as text (seq2seq: of its own pair, after its source and an arrow)."""
    start = max(0, position - n)
    prefix = ""
    if result.pair_starts is not None:
        pair = int(np.searchsorted(result.pair_starts, position, side="right")) - 1
        start = max(start, int(result.pair_starts[pair]))
        prefix = f"{(result.sources or [''] * (pair + 1))[pair]} → "
    return prefix + "".join(result.tokens[start:position])


def worst(result: TokenLoss, k: int = 50, values: np.ndarray | None = None, *, context: int = 20) -> list[WorstToken]:
    """The ``k`` tokens with the largest ``values`` (default: the loss; a diff passes |Δ| ordering through its
    Δ, largest magnitude first), each with the ``context`` tokens before it."""
    v = result.loss if values is None else values
    key = v if values is None else np.abs(v)
    k = min(k, len(v))
    top = np.argpartition(-key, k - 1)[:k] if k else np.zeros(0, np.int64)
    top = top[np.argsort(-key[top], kind="stable")]
    return [WorstToken(int(i), result.tokens[i], float(v[i]), context_before(result, int(i), context)) for i in top]


def report(result: TokenLoss | TokenLossDiff) -> dict:
    """The command line's JSON: ``result.to_dict()`` and its class breakdown as ``"classes"``."""
    rows = breakdown(result.this, result.against) if isinstance(result, TokenLossDiff) else breakdown(result)
    return {**result.to_dict(), "classes": [r.to_dict() for r in rows]}


def text_lines(result: TokenLoss, width: int = 100) -> np.ndarray:
    """(lines + 1,) the first token of each line to show, then N: a line ends after a token holding a newline,
    at the end of a seq2seq pair, or before a token that would take it past ``width`` characters."""
    ends = set((result.pair_starts[1:]).tolist()) if result.pair_starts is not None else set()
    starts, col = [0], 0
    for i, t in enumerate(result.tokens):
        if col and (i in ends or col + len(t) > width):
            starts.append(i)
            col = 0
        col += len(t)
        if "\n" in t:
            starts.append(i + 1)
            col = 0
    if starts[-1] != len(result.tokens):
        starts.append(len(result.tokens))
    return np.asarray(sorted(set(starts)), np.int64)


def shown(token: str) -> str:
    """A token's text as drawn on one line: newline, tab and other control characters made visible."""
    return "".join(SHOWN.get(ch, "·" if unicodedata.category(ch) == "Cc" else ch) for ch in token)


__all__ = ["KINDS", "UNSEEN", "TARGET", "target_places",
           "ClassRow", "WorstToken", "kind_of", "frequency_buckets", "classes_of", "breakdown",
           "context_before", "worst", "report", "text_lines", "shown"]
