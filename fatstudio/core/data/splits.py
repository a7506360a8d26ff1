"""Which part of a text validates (``data.split``), and how far the validation text is from the training text.

A text corpus (next_token, masked_lm) is one token stream; ``val_fraction`` of it validates. Where that part lies
is the rule ``data.split``:

- ``"blocks"`` (the default): the text is cut into k strata of equal length and each gives ``val_fraction`` of
  itself, one block, to validation, at a place within the stratum fixed once for all runs. The validation text is
  then spread over the whole corpus: every file, every language, every stretch of it gives its share, and so it
  resembles the training text. k = ``val_fraction`` · characters / `MIN_BLOCK_CHARS`, at least 1 and at most
  `MAX_BLOCKS`, so a block holds at least `MIN_BLOCK_CHARS` characters (a window of ℓ_max tokens rarely spans
  two of them). The places do not depend on the training seed or the tokenizer: every run on a corpus with one
  val_fraction validates on the same text (its fractions of the stream), so their validation losses, and their
  losses token by token, compare.
- ``"tail"``: the last ``val_fraction`` of the stream (nanoGPT's 90/10), the only rule before ``data.split``
  existed: a run recorded without the key used it (`config.RECORDED_BEFORE`). On a folder it validates on the
  last files alone (with ``de-*.txt`` then ``ru-*.txt``: Russian only).

Examples (seq2seq, classification, the "modadd" pairs) are shuffled and split whatever ``data.split`` says
(`applies`). `plan` gives a rule's validation spans as fractions of the text, `SplitPlan.ranges` as positions in
a stream of n tokens (or characters); `gap` measures how the two splits' token frequencies differ, the number
`diagnostics` warns on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import SPLITS, DataConfig, check_choice

MIN_BLOCK_CHARS = 1024  # characters a validation block holds at least…
MAX_BLOCKS = 100  # …and there are at most this many (a corpus of 1 MB at val_fraction 0.1 has 100)
_PLACES = 20240917  # the fixed seed of the blocks' places within their strata (not the run's: see the module)

Range = tuple[int, int]  # [start, stop) in a stream


def applies(data: DataConfig) -> bool:
    """Whether ``data.split`` says anything for these settings: a text stream's tasks, not examples (which are
    shuffled, whatever the rule) nor the "modadd" pairs."""
    return data.task in ("next_token", "masked_lm") and data.corpus != "modadd"


@dataclass(frozen=True)
class SplitPlan:
    """A rule applied to a text of ``chars`` characters: ``val`` the validation spans as fractions [a, b) of the
    text, in order (empty with ``val_fraction`` 0)."""

    rule: str
    val_fraction: float
    chars: int
    val: tuple[tuple[float, float], ...]

    def ranges(self, n: int) -> tuple[list[Range], list[Range]]:
        """The training and validation ranges of a stream of ``n`` tokens (or characters), in order, none empty,
        together exactly [0, n). The tail's cut is the one it always was: ``int(n * (1 - val_fraction))``."""
        if self.rule == "tail" or not self.val:
            cut = int(n * (1 - self.val_fraction))
            return _nonempty([(0, cut)]), _nonempty([(cut, n)])
        cuts = [(min(n, round(a * n)), min(n, round(b * n))) for a, b in self.val]
        train, val, at = [], [], 0
        for a, b in cuts:
            train.append((at, a))
            val.append((a, b))
            at = b
        train.append((at, n))
        return _nonempty(train), _nonempty(val)

    @property
    def blocks(self) -> int:
        return len(self.val)

    def describe(self) -> str:
        """The rule in words: "10% in 12 blocks, one in each of 12 equal stretches of the text"."""
        f = self.val_fraction
        if not f:
            return "no validation split (val_fraction = 0)"
        if self.rule == "tail":
            return f"the last {f:.0%} of the text"
        k = len(self.val)
        if k == 1:
            return f"{f:.0%} in one block (a text this short has room for no more)"
        return f"{f:.0%} in {k} blocks, one in each of {k} equal stretches of the text"


def _nonempty(ranges: list[Range]) -> list[Range]:
    return [(a, b) for a, b in ranges if b > a]


def n_blocks(chars: int, val_fraction: float) -> int:
    """How many validation blocks the "blocks" rule cuts a text of ``chars`` characters into."""
    return max(1, min(MAX_BLOCKS, math.floor(val_fraction * chars / MIN_BLOCK_CHARS)))


def plan(chars: int, val_fraction: float, rule: str = "blocks") -> SplitPlan:
    """Where ``rule`` puts the validation part of a text of ``chars`` characters (see the module)."""
    check_choice("data.split", rule, SPLITS)
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction = {val_fraction!r} is not allowed; it must be in [0, 1).")
    if not val_fraction:
        return SplitPlan(rule, val_fraction, chars, ())
    if rule == "tail":
        return SplitPlan(rule, val_fraction, chars, ((1 - val_fraction, 1.0),))
    k = n_blocks(chars, val_fraction)
    places = np.random.default_rng(_PLACES).random(MAX_BLOCKS)[:k]  # the same first places whatever k
    stratum, size = 1 / k, val_fraction / k
    val = tuple((i * stratum + u * (stratum - size), i * stratum + u * (stratum - size) + size)
                for i, u in enumerate(places.tolist()))
    return SplitPlan(rule, val_fraction, chars, val)


def take(ranges: list[Range], items: str) -> str:
    """The parts of a text (or any sliceable) that ``ranges`` cover, joined."""
    return "".join(items[a:b] for a, b in ranges)


# ---- how far the splits' texts are from each other ------------------------------------------------------------
GAP_TV = 0.15  # a total variation from here on (and well above chance) is a marked difference…
GAP_CHANCE = 3.0  # …at least this many times what two samples of one text of these sizes show


@dataclass(frozen=True)
class SplitGap:
    """How the token frequencies of the validation split differ from the training split's.

    ``tv``: their total-variation distance ½ Σ |p_val − p_train|, the share of validation tokens that would have
    to change for the two to match (0 alike … 1 no token in common). ``chance``: about what ``tv`` is for two
    random samples of one text of these sizes (½ Σ √(2/π · p(1−p) · (1/n_train + 1/n_val)), p the pooled
    frequencies), the noise floor. ``kl``: KL(val ‖ train) in nats, the training frequencies smoothed by add-½:
    how much more a model of the training text's token frequencies loses per validation token than one of the
    validation text's own, a loss gap that no overfitting causes."""

    tv: float
    chance: float
    kl: float
    n_train: int
    n_val: int

    @property
    def marked(self) -> bool:
        """Whether the validation text differs markedly from the training text (`GAP_TV`, `GAP_CHANCE`)."""
        return self.tv >= GAP_TV and self.tv >= GAP_CHANCE * self.chance

    def to_dict(self) -> dict[str, float | int]:
        return {"tv": round(self.tv, 4), "chance": round(self.chance, 4), "kl": round(self.kl, 4),
                "n_train": self.n_train, "n_val": self.n_val}

    @classmethod
    def from_dict(cls, d: object) -> SplitGap | None:
        """The gap a run's meta.json records, None if it records none (or something else)."""
        if not isinstance(d, dict):
            return None
        try:
            return cls(float(d["tv"]), float(d["chance"]), float(d["kl"]), int(d["n_train"]), int(d["n_val"]))
        except (KeyError, TypeError, ValueError):
            return None


def gap(train_counts: np.ndarray, val_counts: np.ndarray) -> SplitGap | None:
    """The `SplitGap` of two splits' token counts (bincounts, any lengths); None when either split is empty."""
    n = max(len(train_counts), len(val_counts))
    a = np.zeros(n, np.float64)
    b = np.zeros(n, np.float64)
    a[:len(train_counts)] = train_counts
    b[:len(val_counts)] = val_counts
    n_a, n_b = a.sum(), b.sum()
    if not n_a or not n_b:
        return None
    p, q = a / n_a, b / n_b
    tv = 0.5 * float(np.abs(p - q).sum())
    pooled = (a + b) / (n_a + n_b)
    chance = 0.5 * float(np.sqrt(2 / math.pi * pooled * (1 - pooled) * (1 / n_a + 1 / n_b)).sum())
    seen = (a + b) > 0
    smoothed = (a[seen] + 0.5) / (n_a + 0.5 * seen.sum())
    qs = q[seen]
    kl = float((qs[qs > 0] * np.log(qs[qs > 0] / smoothed[qs > 0])).sum())
    return SplitGap(tv, chance, kl, int(n_a), int(n_b))
