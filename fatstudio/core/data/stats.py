"""The unigram entropy of a token stream: a statistic of the data that the diagnostics compare losses with.
numpy only at import."""
from __future__ import annotations

import numpy as np


def unigram_entropy(ids: np.ndarray) -> float:
    """H = -Σ p(v) log p(v) in nats over the token frequencies of ``ids`` (any shape of integer ids ≥ 0):
    the loss of a model that predicts only how often each token occurs. ValueError for no tokens."""
    ids = np.asarray(ids).ravel()
    if ids.size == 0:
        raise ValueError("the unigram entropy of no tokens is undefined.")
    counts = np.bincount(ids.astype(np.int64, copy=False))
    p = counts[counts > 0] / ids.size
    return float(-(p * np.log(p)).sum())
