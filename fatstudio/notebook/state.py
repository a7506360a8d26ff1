"""What each notebook view holds, as plain JSON, from the core's objects (no anywidget): the numbers are the
core's, untouched; the JavaScript only draws them."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.inference.attention_maps import VIRIDIS, AttentionMaps, max_pool
from ..core.inference.prompting import display_token
from ..core.inspect.ablation import KnockoutTable
from ..core.inspect.head_scores import HeadScores
from ..core.inspect.saved_lens import SavedLens
from ..core.inspect.token_loss import TokenLoss
from ..core.names import MEAN_HEAD, AttentionKind, MapName
from ..core.records import STEP, TRAIN_LOSS, VAL_LOSS, row_number

GRID_CELLS = 32  # a thumbnail's most cells a side (`max_pool`, as the app's grid keeps sharp patterns)
PALETTE = VIRIDIS.tolist()  # the app's colour scale, 0-1 (`attention_maps.colormap`), for the maps and the lens


def loss_curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[list[float]]]:
    """[step, loss] of every row's training loss and every evaluation's validation loss (metrics.jsonl's rows,
    `Run.metrics`), as the Training tab plots them."""
    def points(key: str) -> list[list[float]]:
        return [[int(r[STEP]), v] for r in rows if STEP in r and (v := row_number(r, key)) is not None]

    return {"train": points(TRAIN_LOSS), "val": points(VAL_LOSS)}


def labels(tokens: list[str]) -> list[str]:
    return [display_token(t) for t in tokens]


def attention_grid(maps: AttentionMaps, kind: AttentionKind, scores: HeadScores) -> list[dict[str, Any]]:
    """The layers × (heads + their mean) thumbnails of ``kind``: each map max-pooled to `GRID_CELLS` a side, its
    title, its entropy in nats and a head's ``scores`` (`probes.probe_scores`), as the app's grid titles them."""
    out = []
    for l in maps.layers(kind):
        name = MapName(kind, l)
        entropy = maps.entropy(name)
        for h in [*range(maps.n_heads(name)), MEAN_HEAD]:
            e = maps.mean_entropy(name) if h == MEAN_HEAD else float(entropy[h])
            found = {s: float(v[h]) for s in (scores.score_names() if h != MEAN_HEAD else ())
                     if (v := scores.get(name, s)) is not None}
            out.append({"layer": l, "head": h, "title": name.head_label(h), "entropy": e, "scores": found,
                        "cells": max_pool(maps.matrix(name, h), GRID_CELLS).tolist()})
    return out


def lens(saved: SavedLens | None) -> dict[str, Any]:
    """The logit lens saved with a probe step (`probes.load_probe_lens`): per row (embedding, each layer, the
    output) the top token and its probability at each position; empty for a run whose files have none."""
    if saved is None:
        return {"tokens": [], "rows": []}
    return {"tokens": labels(saved.tokens),
            "rows": [{"label": saved.row_label(r), "tokens": labels(saved.top_tokens[r]),
                      "probs": np.asarray(saved.top_probs[r], np.float64).tolist()} for r in range(saved.n_rows)]}


def token_loss(found: TokenLoss, limit: int) -> dict[str, Any]:
    """The first ``limit`` validation tokens with their loss in nats (`token_loss.token_losses`), the mean over
    all of them and how many there are."""
    return {"tokens": found.tokens[:limit], "loss": found.loss[:limit].tolist(), "mean": found.mean,
            "n_tokens": found.n_tokens}


def knockout(table: KnockoutTable) -> dict[str, Any]:
    """The knock-out table (`ablation.knockout_table`), its rows by the rise in validation loss, largest first, each
    with its component's label as the app shows it ("layer 2 · head 1")."""
    rows = [{**d, "label": r.component.label} for r, d in zip(table.rows, table.to_dict()["rows"])]
    return {"baseline": table.baseline_loss, "rows": sorted(rows, key=lambda r: -r["delta_loss"])}


__all__ = ["loss_curves", "attention_grid", "lens", "token_loss", "knockout", "labels", "GRID_CELLS", "PALETTE"]
