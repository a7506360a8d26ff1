"""Head scores: what each attention head does, measured as interpretability work measures it.

Every number here is a mean of attention weights, the entries of softmax(S/√d_attn) of the paper's
Algorithm 4 (per head of Algorithm 5's MHAttention), so each lies in [0, 1]:

- ``prev``: previous-token score, the mean over queries i ≥ 1 of the weight from query i to key i-1;
- ``diag``: diagonal score, the mean over queries i of the weight from query i to key i (itself);
- ``sink``: first-token ("attention sink") score, the mean over queries i of the weight on key 0;
- ``induction``: as TransformerLens measures it. The model reads ``first + r + r``: a first token (the bos
  token) then r, n random ordinary tokens (no pad, mask, bos, eos or unknown; seeded), twice. A head that
  does induction ("after A came B before, so look at that B") attends from the token at position p of the
  second copy to key p - n + 1, the token right after that token's earlier occurrence. The score is the mean
  of that weight over every query of the second copy (p = n+1 … 2n). (TransformerLens takes the whole
  diagonal at offset 1-n, which also counts the last two queries of the first copy; we count exactly the
  second copy.)

``prev``, ``diag`` and ``sink`` come from the `AttentionMaps` of any text (`text_scores`); ``induction``
needs the model (`induction_maps` runs it on the repeated sequence, `induction_scores` reads the maps).

Which maps get scores: self-attention maps only, "self/l" (gpt, gopher, bert), "enc/l" and "dec/l" (edt).
Cross-attention ("cross/l") relates two different sequences, so "previous token", "itself" and "the next
token after the earlier occurrence" mean nothing there: it gets no scores. Bidirectional self-attention
(bert, an edt's encoder) gets the same four scores, defined the same way: a query may also attend to later
keys, which the scores simply do not count. For an edt, `induction_maps` gives the repeated sequence to the
encoder and to the decoder alike, so "enc/l" and "dec/l" both get an induction score.

Torch- and tokenizers-free at import (the Attention panel imports the names; they come when a model runs).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..inference.attention_maps import AttentionMaps
from ..names import MapName

if TYPE_CHECKING:
    import torch

    from ..data.tokenization import TokenizerLike

SCORES = ("prev", "diag", "sink", "induction")  # in the order they are shown
SCORE_TITLES = {
    "prev": "previous token",
    "diag": "itself (diagonal)",
    "sink": "first token (sink)",
    "induction": "induction",
}
MAX_INDUCTION_LENGTH = 50  # n at most (TransformerLens' usual length); n = min(this, (l_max - 1) // 2)


# ------------------------------------------------------------------------------------------ from maps
def _check(A: np.ndarray, name: str) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"map {name!r} has shape {A.shape}; a self-attention map is (H, T, T).")
    return A


def previous_token_score(A: np.ndarray) -> np.ndarray:
    """(H,): the mean over queries i ≥ 1 of A[h, i, i-1], for a map (H, T, T); NaN when T < 2."""
    A = _check(A, "map")
    if A.shape[1] < 2:
        return np.full(A.shape[0], np.nan)
    return np.diagonal(A, offset=-1, axis1=1, axis2=2).mean(-1)


def diagonal_score(A: np.ndarray) -> np.ndarray:
    """(H,): the mean over queries i of A[h, i, i], for a map (H, T, T)."""
    return np.diagonal(_check(A, "map"), axis1=1, axis2=2).mean(-1)


def sink_score(A: np.ndarray) -> np.ndarray:
    """(H,): the mean over queries i of A[h, i, 0] (the weight on the first token), for a map (H, T, T)."""
    return _check(A, "map")[:, :, 0].mean(-1)


def induction_score(A: np.ndarray, n: int) -> np.ndarray:
    """(H,): for a map (H, 2n+1, 2n+1) of ``first + r + r`` (``len(r) == n``), the mean over the queries
    p = n+1 … 2n of the second copy of A[h, p, p-n+1], the token right after the earlier occurrence."""
    A = _check(A, "map")
    if n < 1 or A.shape[1] < 2 * n + 1:
        raise ValueError(f"an induction map of n = {n} repeated tokens is at least {2 * n + 1} long; "
                         f"this one is {A.shape[1]}.")
    p = np.arange(n + 1, 2 * n + 1)
    return A[:, p, p - n + 1].mean(-1)


def text_scores(maps: AttentionMaps | Mapping[MapName, np.ndarray]) -> dict[MapName, dict[str, np.ndarray]]:
    """{map name: {"prev", "diag", "sink": (H,)}} for every self-attention map of ``maps`` (any text)."""
    arrays = maps.maps if isinstance(maps, AttentionMaps) else maps
    return {name: {"prev": previous_token_score(A), "diag": diagonal_score(A), "sink": sink_score(A)}
            for name, A in arrays.items() if name.self_attention}


def induction_scores(maps: AttentionMaps | Mapping[MapName, np.ndarray], n: int) -> dict[MapName, np.ndarray]:
    """{map name: induction score (H,)} for every self-attention map of ``maps``, the maps of
    ``first + r + r`` with ``len(r) == n`` (`induction_maps`)."""
    arrays = maps.maps if isinstance(maps, AttentionMaps) else maps
    return {name: induction_score(A, n) for name, A in arrays.items() if name.self_attention}


# ---------------------------------------------------------------------------------------- from a model
def ordinary_ids(tokenizer: TokenizerLike) -> np.ndarray:
    """The token ids that are not pad, mask, bos, eos or the unknown token, ascending."""
    from ..data.tokenization import SPECIALS, UNK

    special = {tokenizer.pad_id, tokenizer.mask_id, tokenizer.bos_id, tokenizer.eos_id}
    names = tokenizer.token_strings(range(tokenizer.vocab_size))
    ids = [i for i, s in enumerate(names) if i not in special and s not in SPECIALS and s != UNK]
    if not ids:
        raise ValueError("the tokenizer has no ordinary tokens to draw a random sequence from.")
    return np.asarray(ids, dtype=np.int64)


def induction_length(l_max: int) -> int:
    """n, the length of the repeated random sequence: min(`MAX_INDUCTION_LENGTH`, (l_max - 1) // 2)."""
    return min(MAX_INDUCTION_LENGTH, (int(l_max) - 1) // 2)


def repeated_tokens(tokenizer: TokenizerLike, n: int, seed: int = 0) -> list[int]:
    """``[bos] + r + r``: r is n ordinary token ids drawn uniformly with replacement by a generator seeded
    with ``seed`` (the same ids every time for the same seed and tokenizer)."""
    if n < 1:
        raise ValueError(f"the repeated sequence needs n ≥ 1 tokens (n = {n}).")
    r = np.random.default_rng(seed).choice(ordinary_ids(tokenizer), size=n).tolist()
    return [int(tokenizer.bos_id), *r, *r]


def induction_maps(model: torch.nn.Module, tokenizer: TokenizerLike, n: int | None = None,
                   seed: int = 0) -> tuple[AttentionMaps, int]:
    """The model's attention maps on `repeated_tokens` (for an edt, the same sequence is the encoder's
    context and the decoder's input), and n. n defaults to `induction_length` of the model's l_max."""
    l_max = int(getattr(getattr(model, "config", None), "l_max", 2 * MAX_INDUCTION_LENGTH + 1))
    n = induction_length(l_max) if n is None else int(n)
    if n < 1 or 2 * n + 1 > l_max:
        raise ValueError(f"a model of context length l_max = {l_max} cannot read a first token and "
                         f"{n} random tokens twice; induction scores need l_max ≥ 3.")
    import torch

    from ..inference.generation import attention_maps_for_ids

    ids = repeated_tokens(tokenizer, n, seed)
    arch = getattr(getattr(model, "config", None), "arch", "")
    with torch.no_grad():
        maps = attention_maps_for_ids(model, tokenizer, ids, ids if arch == "edt" else None)
    return maps, n


@dataclass
class HeadScores:
    """``scores[map name][score]`` is an array (H,) for each self-attention map; the scores are `SCORES`
    ("induction" is absent when it was not measured). ``n`` and ``seed`` describe the induction sequence."""

    scores: dict[MapName, dict[str, np.ndarray]] = field(default_factory=dict)
    n: int | None = None
    seed: int = 0

    def names(self) -> list[MapName]:
        return list(self.scores)

    def get(self, name: MapName, score: str) -> np.ndarray | None:
        """(H,) or None when map ``name`` has no such score."""
        return self.scores.get(name, {}).get(score)

    def score_names(self) -> list[str]:
        """The scores present, in the order of `SCORES`."""
        found = {s for d in self.scores.values() for s in d}
        return [s for s in SCORES if s in found]

    def table(self) -> str:
        """A short text table: a header, then one line per head of each map, named as a person reads it
        (`MapName.head_label`: "decoder layer 1 · head 2", counted from 1), then its scores."""
        cols = self.score_names()
        rows = [(name.head_label(h), per, h) for name, per in self.scores.items()
                for h in range(len(next(iter(per.values()), [])))]
        width = max((len(label) for label, _, _ in rows), default=4)
        lines = [f"{'head':<{width}} " + " ".join(f"{c:>9}" for c in cols)]
        for label, per, h in rows:
            cells = " ".join(f"{per[c][h]:9.3f}" if c in per else f"{'':>9}" for c in cols)
            lines.append(f"{label:<{width}} {cells}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain JSON: {"maps": {map name: {score: [H numbers, 6 decimals; None for NaN]}}, "n", "seed"}."""
        def number(v: float) -> float | None:
            return round(float(v), 6) if np.isfinite(v) else None

        return {"maps": {str(name): {sc: [number(v) for v in arr] for sc, arr in d.items()}
                         for name, d in self.scores.items()}, "n": self.n, "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict) -> HeadScores:
        """The inverse of `to_dict` (None → NaN); ValueError in words for anything else."""
        try:
            scores = {MapName.parse(name): {str(sc): np.array([np.nan if v is None else float(v) for v in values])
                                            for sc, values in per.items() if sc in SCORES}
                      for name, per in d["maps"].items()}
            n = None if d.get("n") is None else int(d["n"])
            return cls(scores, n, int(d.get("seed", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"these are not head scores of fatstudio ({type(e).__name__}: {e}).") from None


def head_scores(model: torch.nn.Module, tokenizer: TokenizerLike, maps: AttentionMaps | None = None,
                seed: int = 0, n: int | None = None) -> HeadScores:
    """Every self-attention head's prev, diag and sink scores on ``maps`` (the attention of some text; None:
    on the repeated random sequence) and its induction score on the repeated random sequence
    (`induction_maps`, ``seed``, ``n``), all from the model's own softmax(S/√d_attn) (Algorithm 4)."""
    rep, n = induction_maps(model, tokenizer, n, seed)
    out = text_scores(maps if maps is not None else rep)
    for name, s in induction_scores(rep, n).items():
        out.setdefault(name, {})["induction"] = s
    return HeadScores(out, n, seed)


def score_movement(history: Mapping[int, HeadScores], names: list[MapName], score: str, rise: bool = False) -> float:
    """How far ``score`` moves over the steps of ``history`` (step → the scores saved then): the largest
    (max - min) over the steps of any head of the maps ``names``; 0 with fewer than two steps or no score.
    ``rise``: the largest increase instead (a later step's value minus an earlier one's): a head forming."""
    moves = [0.0]
    for name in names:
        rows = [v for step in sorted(history) if (v := history[step].get(name, score)) is not None]
        if len(rows) > 1 and len({len(r) for r in rows}) == 1:
            for column in np.array(rows, dtype=np.float64).T:  # one head over the steps
                known = column[np.isfinite(column)]
                if known.size:
                    low = np.minimum.accumulate(known) if rise else known.min()
                    moves.append(float((known - low).max()))
    return max(moves)


def map_scores(maps: AttentionMaps) -> HeadScores:
    """The scores that need no model: prev, diag and sink of every self-attention map of ``maps``
    (e.g. maps saved during training, whose model is gone)."""
    return HeadScores(text_scores(maps))


__all__ = ["map_scores", "score_movement",
           "SCORES", "SCORE_TITLES", "MAX_INDUCTION_LENGTH", "HeadScores", "head_scores", "previous_token_score",
           "diagonal_score", "sink_score", "induction_score", "text_scores", "induction_scores", "ordinary_ids",
           "induction_length", "repeated_tokens", "induction_maps"]
