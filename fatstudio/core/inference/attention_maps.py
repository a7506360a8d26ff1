"""Attention maps of one forward pass, and the one way they are named, measured, coloured and exported.

Qt-free (numpy only). `inference` fills an `AttentionMaps` from ``model(x, return_attention=True)``; the
command line saves it, the Attention panel draws it with the same colour scale (`VIRIDIS`, fixed 0-1) and
exports through the same writers (`AttentionMaps.save`, `AttentionMaps.save_head`): numbers only. Pictures are
the Qt layer's (`fatstudio.qt.widgets.attention_png`: titles, token axes, a colour bar, on `colormap`'s scale),
written for the panel's grid export and the command line's ``--out maps.png``.

Maps are named by `names.MapName` (``kind/l`` as the model returns them: "self/l" (gpt, gopher, bert), "enc/l",
"dec/l", "cross/l" (edt)); the files hold the names as strings.
"""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..files import atomic_write, regular_file
from ..names import ATTENTION_KINDS, MEAN_HEAD, AttentionKind, MapName
from .prompting import display_token

# -------------------------------------------------------------------------------------------------- names
KIND_TITLES: dict[AttentionKind, str] = {  # in the order the kinds are listed
    "self": "Self-attention",
    "enc": "Encoder self-attention",
    "dec": "Decoder self-attention (causal)",
    "cross": "Cross-attention (decoder → encoder)",
}
SINK = 0.5  # a head whose queries put more than this on the first key, on average, is a sink (`AttentionMaps.sinks`)
SAVE_SUFFIXES = (".json", ".npz", ".csv")  # the files `AttentionMaps.save` writes (pictures: the Qt layer's)
PICTURES = ("a picture is the Qt layer's: fatstudio.qt.widgets.attention_png.save_attention_png, or "
            "'fatstudio attention … --out maps.png'")


# -------------------------------------------------------------------------------------------- measures
def attention_entropy(A: np.ndarray) -> np.ndarray:
    """The mean over queries of each attention row's entropy in nats (0 log 0 = 0), for (..., T_q, T_k)."""
    A = np.asarray(A, dtype=np.float64)
    return -(A * np.log(np.where(A > 0, A, 1.0))).sum(-1).mean(-1)


def max_pool(A: np.ndarray, max_cells: int) -> np.ndarray:
    """``A`` reduced to at most ``max_cells`` per side by taking the largest weight of each block, so that a
    thumbnail keeps the sharp, sparse patterns (a diagonal, an induction stripe) that averaging or skipping
    pixels would lose. Unchanged when it is small enough."""
    tq, tk = A.shape
    bq, bk = math.ceil(tq / max_cells), math.ceil(tk / max_cells)
    if bq == 1 and bk == 1:
        return A
    nq, nk = math.ceil(tq / bq), math.ceil(tk / bk)
    if (nq * bq, nk * bk) != (tq, tk):
        padded = np.zeros((nq * bq, nk * bk), dtype=A.dtype)
        padded[:tq, :tk] = A
        A = padded
    # elementwise maxima of strided slices: ~10x faster than ndarray.max over the small block axes
    cols = A.reshape(nq * bq, nk, bk)
    out = cols[:, :, 0].copy()
    for i in range(1, bk):
        np.maximum(out, cols[:, :, i], out=out)
    rows = out.reshape(nq, bq, nk)
    pooled = rows[:, 0].copy()
    for i in range(1, bq):
        np.maximum(pooled, rows[:, i], out=pooled)
    return pooled


# ------------------------------------------------------------------------------------------------ colour
LEVELS = (0.0, 1.0)  # every map is drawn on this fixed scale, so a weight reads the same everywhere
# viridis at 33 evenly spaced points (linearly interpolated, within 2/255 of the 256-colour table)
VIRIDIS = np.array([
    (68, 1, 84), (70, 12, 95), (72, 23, 105), (72, 34, 115), (71, 44, 122), (69, 54, 129),
    (66, 63, 133), (62, 72, 137), (59, 81, 139), (55, 90, 140), (51, 98, 141), (47, 106, 142),
    (44, 113, 142), (41, 121, 142), (38, 129, 142), (35, 136, 142), (33, 144, 140), (31, 151, 139),
    (31, 159, 136), (33, 166, 133), (39, 173, 128), (49, 181, 122), (61, 188, 115), (76, 194, 107),
    (92, 200, 98), (110, 206, 87), (129, 211, 76), (149, 216, 63), (170, 220, 49), (192, 223, 36),
    (213, 226, 25), (234, 229, 26), (253, 231, 37),
], dtype=np.uint8)
VIRIDIS_POSITIONS = np.linspace(0.0, 1.0, len(VIRIDIS))


def colormap(values: np.ndarray) -> np.ndarray:
    """Map values in [0, 1] to RGB uint8 (..., 3) on the viridis scale (dark purple → teal → yellow)."""
    v = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), *LEVELS)
    anchors = VIRIDIS.astype(np.float64)
    return np.stack([np.interp(v, VIRIDIS_POSITIONS, anchors[:, c]) for c in range(3)], -1).round().astype(np.uint8)


# -------------------------------------------------------------------------------------------------- maps
@dataclass
class AttentionMaps:
    """Every head's softmax(S/√d_attn) (Algorithm 4) from one forward pass, as numpy arrays.

    ``maps[name]`` is (H, T_query, T_key), for each `MapName`. ``tokens`` label the queries
    (the decoder side for edt); ``context_tokens`` label the encoder side of an edt (enc keys and queries,
    cross keys), else None. ``ids`` and ``context_ids``: the token ids the model read, where known (a forward
    pass's maps; not a probe file's).
    """

    tokens: list[str]
    context_tokens: list[str] | None
    maps: dict[MapName, np.ndarray] = field(default_factory=dict)
    ids: list[int] | None = None
    context_ids: list[int] | None = None
    _entropies: dict[MapName, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)  # `entropy`s

    # ---- what there is ----
    def kinds(self) -> list[AttentionKind]:
        """The kinds of attention present: self, enc, dec, cross in that order."""
        found = {n.kind for n in self.maps}
        return [k for k in ATTENTION_KINDS if k in found]

    def layers(self, kind: AttentionKind) -> list[int]:
        """The layers l with a map ``kind/l``, ascending."""
        return sorted(n.layer for n in self.maps if n.kind == kind)

    def n_heads(self, name: MapName) -> int:
        return self.maps[name].shape[0]

    def key_tokens(self, name: MapName) -> list[str]:
        """The labels of the keys of map ``name``."""
        encoder_keys = name.kind in ("enc", "cross")
        return self.context_tokens if encoder_keys and self.context_tokens else self.tokens

    def query_tokens(self, name: MapName) -> list[str]:
        """The labels of the queries of map ``name``."""
        return self.context_tokens if name.kind == "enc" and self.context_tokens else self.tokens

    # ---- numbers ----
    def matrix(self, name: MapName, head: int = MEAN_HEAD) -> np.ndarray:
        """(T_query, T_key): head ``head`` (0-based) of map ``name``, or the mean over heads for `MEAN_HEAD`."""
        A = self.maps[name]
        if head == MEAN_HEAD:
            return A.mean(0)
        if not 0 <= head < A.shape[0]:
            raise ValueError(f"there is no head {head} of '{name}' (heads 0-{A.shape[0] - 1}, or "
                             f"{MEAN_HEAD} for the mean).")
        return A[head]

    def entropy(self, name: MapName) -> np.ndarray:
        """(H,): the mean over queries of each attention row's entropy, in nats (0 log 0 = 0). Computed once per
        map (the grid, the view and `focused_head` each ask)."""
        if name not in self._entropies:
            self._entropies[name] = attention_entropy(self.maps[name])
        return self._entropies[name]

    def mean_entropy(self, name: MapName) -> float:
        """The entropy (as in `entropy`) of the mean over heads of map ``name``."""
        return float(attention_entropy(self.mean_over_heads(name)))

    def mean_over_heads(self, name: MapName) -> np.ndarray:
        """(T_query, T_key): the heads' average."""
        return self.maps[name].mean(0)

    # ---- the head a view opens on ----
    def lesson_kind(self) -> AttentionKind:
        """The kind shown first: an edt's cross-attention (its lesson), else the decoder's, else the only kind."""
        kinds = self.kinds()
        return next(k for k in ("cross", "dec", *kinds) if k in kinds)

    def focused_head(self, kind: AttentionKind) -> tuple[int, int]:
        """(l, h): the most informative head of ``kind`` to show first, the one with the lowest `entropy` (a
        uniform head has the highest, log T_key) of all its layers, or of the last for cross-attention (an
        edt's lesson: the head reading the source in order or reversed). Sinks (`sinks`: as sharp, and
        showing nothing) are passed over while another head is not one."""
        layers = self.layers(kind)
        if not layers:
            raise ValueError(f"these maps have no {kind!r} attention; they have {', '.join(self.kinds())}.")
        heads = [(bool(sink), float(e), l, h) for l in (layers[-1:] if kind == "cross" else layers)
                 for h, (e, sink) in enumerate(zip(self.entropy(MapName(kind, l)), self.sinks(MapName(kind, l))))]
        _, _, l, h = min(heads)
        return l, h

    def sinks(self, name: MapName) -> np.ndarray:
        """(H,): whether each head of map ``name`` is an attention sink: its queries (after the first, which has
        only the first key in a causal map) put more than `SINK` of their weight, on average, on the first key."""
        a = self.maps[name]
        return a[:, 1:, 0].mean(1) > SINK if a.shape[1] > 1 else a[:, 0, 0] > SINK

    # ---- JSON ----
    def to_json_dict(self) -> dict[str, Any]:
        """Plain JSON: tokens, context_tokens, maps as nested lists (rounded to 1e-7), per-head entropy."""
        return {"tokens": list(self.tokens), "context_tokens": self.context_tokens,
                "maps": {str(k): np.round(v.astype(np.float64), 7).tolist() for k, v in self.maps.items()},
                "entropy": {str(k): self.entropy(k).tolist() for k in self.maps}}

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> AttentionMaps:
        return cls(list(d["tokens"]), d.get("context_tokens"),
                   {MapName.parse(k): np.asarray(v, np.float32) for k, v in d["maps"].items()})

    # ---- export: images and tables ----
    def _names(self, names: Sequence[MapName] | None) -> list[MapName]:
        names = list(self.maps) if names is None else list(names)
        missing = [n for n in names if n not in self.maps]
        if missing:
            raise ValueError(f"there is no attention map '{missing[0]}'; there are {', '.join(map(str, self.maps))}.")
        if not names:
            raise ValueError("there are no attention maps to export.")
        return names

    def to_csv(self, names: Sequence[MapName] | None = None) -> str:
        """A long table: map, head, query, key, query_token, key_token, weight (7 significant digits)."""
        f = io.StringIO(newline="")
        self._write_csv(f, self._names(names))
        return f.getvalue()

    def _write_csv(self, f: IO[str], names: list[MapName]) -> None:
        w = csv.writer(f)
        w.writerow(["map", "head", "query", "key", "query_token", "key_token", "weight"])
        for name in names:
            A = self.maps[name]
            qt, kt = self.query_tokens(name), self.key_tokens(name)
            for h, i, j in np.ndindex(*A.shape):
                w.writerow([str(name), h, i, j, qt[i], kt[j], f"{A[h, i, j]:.7g}"])

    def head_csv(self, name: MapName, head: int = MEAN_HEAD) -> str:
        """One matrix as a table: a header "query \\ key" + the key tokens, then one row per query: its token
        and its weights (written with full precision, so they read back exactly). Tokens as `display_token`
        shows them (whitespace visible), never cut."""
        f = io.StringIO(newline="")
        self._write_head_csv(f, name, head)
        return f.getvalue()

    def _write_head_csv(self, f: IO[str], name: MapName, head: int) -> None:
        A = self.matrix(self._names([name])[0], head)
        w = csv.writer(f)
        w.writerow(["query \\ key"] + [display_token(t, 10 ** 6) for t in self.key_tokens(name)])
        for t, row in zip(self.query_tokens(name), A):
            w.writerow([display_token(t, 10 ** 6)] + [repr(float(x)) for x in row])

    # ---- files ----
    def save(self, path: str | Path, names: Sequence[MapName] | None = None) -> Path:
        """Write the maps (all, or ``names``): .json (to_json_dict), .npz (exact arrays named as ``maps``, plus
        "tokens" and "context_tokens") or .csv (to_csv), whole or not at all (`files.atomic_write`). Returns the
        path."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in SAVE_SUFFIXES:
            raise ValueError(f"cannot save attention maps as {path.name!r}; use a .json, .npz or .csv file ({PICTURES}).")
        chosen = self._names(names)
        data: str | bytes
        if suffix == ".csv":
            data = self.to_csv(chosen)
        else:
            part = AttentionMaps(self.tokens, self.context_tokens, {n: self.maps[n] for n in chosen})
            if suffix == ".json":
                data = json.dumps(part.to_json_dict())
            else:
                arrays: dict[str, Any] = {str(n): A for n, A in part.maps.items()}
                arrays["tokens"] = np.array(self.tokens, dtype=str)
                if self.context_tokens is not None:
                    arrays["context_tokens"] = np.array(self.context_tokens, dtype=str)
                f = io.BytesIO()
                np.savez(f, **arrays)
                data = f.getvalue()
        atomic_write(path, data)
        return path

    def save_head(self, path: str | Path, name: MapName, head: int = MEAN_HEAD) -> Path:
        """Write one matrix, head ``head`` of map ``name`` (`MEAN_HEAD`: the mean), as a .csv file (head_csv), whole
        or not at all. Returns the path."""
        path = Path(path)
        if path.suffix.lower() != ".csv":
            raise ValueError(f"cannot save one attention matrix as {path.name!r}; use a .csv file ({PICTURES}).")
        self._names([name])
        atomic_write(path, self.head_csv(name, head))
        return path

    @classmethod
    def load(cls, path: str | Path) -> AttentionMaps:
        """Read a .json or .npz file written by `save` (a regular file: `files.regular_file`)."""
        path = Path(path)
        regular_file(path)
        if path.suffix.lower() == ".json":
            return cls.from_json_dict(json.loads(path.read_text(encoding="utf-8")))
        with np.load(path, allow_pickle=False) as d:
            ctx = d["context_tokens"].tolist() if "context_tokens" in d.files else None
            return cls(d["tokens"].tolist(), ctx,
                       {MapName.parse(k): d[k] for k in d.files if k not in ("tokens", "context_tokens")})


__all__ = ["AttentionMaps", "KIND_TITLES", "MEAN_HEAD", "SAVE_SUFFIXES", "LEVELS", "VIRIDIS",
           "VIRIDIS_POSITIONS", "attention_entropy", "max_pool", "colormap"]
