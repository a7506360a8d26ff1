"""The logit lens and the direct logit attribution of one text, in small arrays: what a probe file keeps of
them at each evaluation (`probe_lens.measure`) and what the Attention panel's lens view draws. Torch-free.

- the lens: the top token id and its probability at each (row, position), row 0 the embedding, row ℓ the
  stream after layer ℓ, the last row the model's output (`lens.lens_probs`); the tokens' strings beside them;
- the attribution (`lens.attribute`) at some positions (a probe file: the last `probe_lens.ATTRIBUTED`, to keep
  an evaluation's cost low; the panel's text: all): the target is the text's next token (bert: the token at
  the position), else, at the last position, the model's own top token; the target's logit and its parts, one
  column per part name ("embedding", "self/L/H", "mlp/L", "biases"). A model whose output cannot be split
  keeps the reason instead (``refused``).

In a probe file (safetensors) the arrays are tensors named ``lens:…`` (no map name has a colon) and the
strings are JSON under the metadata key ``"lens"``; a file written before the lens was saved has neither.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

PREFIX = "lens:"  # the probe file's tensor names of the lens (maps are named kind/l)
META_KEY = "lens"


@dataclass
class SavedAttribution:
    """At each of ``positions`` (row i: position ``positions[i]``): ``targets[i]`` (its string
    ``target_tokens[i]``; ``observed[i]``: the text's own token, else the model's top one), the target's
    ``logits[i]`` and its ``parts[i]``, one column per ``names``."""

    positions: np.ndarray  # (P,) int64, ascending
    targets: np.ndarray  # (P,) int64
    target_tokens: list[str]
    observed: np.ndarray  # (P,) bool
    logits: np.ndarray  # (P,) float64
    names: list[str]
    parts: np.ndarray  # (P, n_parts) float64

    def row(self, position: int) -> int | None:
        """The row of ``position``; None when it was not attributed."""
        found = np.flatnonzero(self.positions == position)
        return int(found[0]) if len(found) else None


@dataclass
class SavedLens:
    """The lens of ``tokens`` (an edt's decoder tokens, ``source_tokens`` its encoder's): ``top_ids`` and
    ``top_probs`` (L+1, T), ``top_tokens`` their strings; ``predicts_next``: position t predicts token t+1
    (bert: the token at t). ``attribution`` or, when the model's output cannot be split, ``refused``."""

    tokens: list[str]
    top_ids: np.ndarray  # (L+1, T) int64
    top_probs: np.ndarray  # (L+1, T) float64
    top_tokens: list[list[str]]
    predicts_next: bool = True
    source_tokens: list[str] | None = None
    attribution: SavedAttribution | None = None
    refused: str | None = None

    @property
    def n_rows(self) -> int:
        return int(self.top_ids.shape[0])

    def row_label(self, row: int) -> str:
        """"embedding", "after layer ℓ" (counted from 1), or "output" for the last row."""
        if row == 0:
            return "embedding"
        return "output" if row == self.n_rows - 1 else f"after layer {row}"

    def csv_rows(self) -> list[list[str]]:
        """The lens as a table: a header ("row", then the tokens), then one row per layer of "token (p)" cells
        with the probability in full."""
        rows = [["row", *self.tokens]]
        for r in range(self.n_rows):
            rows.append([self.row_label(r), *(f"{tok} ({float(p)!r})" for tok, p in zip(self.top_tokens[r],
                                                                                       self.top_probs[r]))])
        return rows

    # ---- in a probe file ----
    def tensors(self) -> dict[str, np.ndarray]:
        """The arrays, named for a probe file."""
        out = {PREFIX + "top_ids": self.top_ids.astype(np.int32), PREFIX + "top_probs": self.top_probs.astype(np.float32)}
        a = self.attribution
        if a is not None:
            out.update({PREFIX + "positions": a.positions.astype(np.int32), PREFIX + "targets": a.targets.astype(np.int32),
                        PREFIX + "observed": a.observed.astype(np.uint8), PREFIX + "logits": a.logits.astype(np.float32),
                        PREFIX + "parts": a.parts.astype(np.float32)})
        return out

    def metadata(self) -> str:
        """The strings, as JSON for the probe file's metadata."""
        a = self.attribution
        return json.dumps({"tokens": self.tokens, "top_tokens": self.top_tokens, "predicts_next": self.predicts_next,
                           "source_tokens": self.source_tokens, "refused": self.refused,
                           "names": a.names if a else None, "target_tokens": a.target_tokens if a else None})

    @classmethod
    def from_file(cls, meta: dict[str, str], tensors: dict[str, np.ndarray]) -> SavedLens | None:
        """The lens of a probe file's metadata and ``lens:`` tensors; None when it has none (an older file).
        ValueError when they cannot be read or their shapes disagree (`mismatch`)."""
        if META_KEY not in meta:
            return None
        try:
            d = json.loads(meta[META_KEY])
            attribution = None
            if d.get("names") is not None:
                attribution = SavedAttribution(tensors[PREFIX + "positions"].astype(np.int64),
                                               tensors[PREFIX + "targets"].astype(np.int64), list(d["target_tokens"]),
                                               tensors[PREFIX + "observed"].astype(bool),
                                               tensors[PREFIX + "logits"].astype(np.float64), list(d["names"]),
                                               tensors[PREFIX + "parts"].astype(np.float64))
            lens = cls(list(d["tokens"]), tensors[PREFIX + "top_ids"].astype(np.int64),
                       tensors[PREFIX + "top_probs"].astype(np.float64), [list(r) for r in d["top_tokens"]],
                       bool(d.get("predicts_next", True)), d.get("source_tokens"), attribution, d.get("refused"))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"its logit lens cannot be read: {e}") from None
        mismatch = lens.mismatch()
        if mismatch:
            raise ValueError(f"its logit lens is damaged: {mismatch}.")
        return lens

    def mismatch(self) -> str | None:
        """How the arrays' shapes differ from what the strings make them (a damaged file), or None."""
        rows, T = len(self.top_tokens), len(self.tokens)
        want: dict[str, tuple[np.ndarray, tuple[int, ...]]] = {"top_ids": (self.top_ids, (rows, T)),
                                                               "top_probs": (self.top_probs, (rows, T))}
        a = self.attribution
        if a is not None:
            P = len(a.target_tokens)
            want.update({"positions": (a.positions, (P,)), "targets": (a.targets, (P,)), "observed": (a.observed, (P,)),
                         "logits": (a.logits, (P,)), "parts": (a.parts, (P, len(a.names)))})
        for name, (array, shape) in want.items():
            if array.shape != shape:
                return f"{PREFIX}{name} is {'×'.join(map(str, array.shape))}, not {'×'.join(map(str, shape))}"
        if any(len(r) != T for r in self.top_tokens):
            return f"a row of its top tokens is not {T} long"
        if a is not None and len(a.positions) and not 0 <= a.positions.min() <= a.positions.max() < T:
            return f"its attributed positions are not within its {T} tokens"
        return None


__all__ = ["SavedLens", "SavedAttribution", "PREFIX", "META_KEY"]
