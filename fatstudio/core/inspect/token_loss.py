"""Where is it wrong? Every token of a run's validation split with its loss −ln p(token | context) in nats.

For a next-token run (gpt, gopher; Algorithm 13). The split is scored as `scoring` scores a long text, in
overlapping windows of l_max tokens, each token once; the split is read after the last l_max tokens of the train
split (they are context only, never scored), so every validation token, the first included, is predicted from
at least ⌈l_max/2⌉ tokens. The mean is the validation loss on those windows.

A diff compares two checkpoints, or two runs whose corpora give the same validation tokens: token by token
Δ = loss − the other's, so the Δs sum to N × (the difference of the means).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..data.datasets import StreamDataset
from .ablation import validation_dataset
from .scoring import ScoreInput, score

if TYPE_CHECKING:
    from .loaded import LoadedModel


@dataclass
class TokenLoss:
    """The validation tokens (as text) and their losses in nats, in order; ``ids`` the token ids."""

    tokens: list[str]
    loss: list[float]
    ids: np.ndarray
    label: str = ""

    @property
    def n_tokens(self) -> int:
        return len(self.loss)

    @property
    def mean(self) -> float:
        return math.fsum(self.loss) / len(self.loss)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "n_tokens": self.n_tokens, "tokens": self.tokens, "loss": self.loss}

    def csv(self) -> str:
        return _csv(["position", "token", "loss"], [[i, t, repr(l)] for i, (t, l) in enumerate(zip(self.tokens, self.loss))])


@dataclass
class TokenLossDiff:
    """Two scorings of the same validation tokens: ``delta`` = this loss − the other's, token by token."""

    this: TokenLoss
    against: TokenLoss

    @property
    def delta(self) -> list[float]:
        return [a - b for a, b in zip(self.this.loss, self.against.loss)]

    def to_dict(self) -> dict:
        return {**self.this.to_dict(), "against": {"label": self.against.label, "mean": self.against.mean,
                                                    "loss": self.against.loss},
                "delta_mean": self.this.mean - self.against.mean, "delta_loss": self.delta}

    def csv(self) -> str:
        rows = zip(self.this.tokens, self.this.loss, self.against.loss, self.delta)
        return _csv(["position", "token", "loss", "against_loss", "delta_loss"],
                    [[i, t, repr(a), repr(b), repr(d)] for i, (t, a, b, d) in enumerate(rows)])


def _csv(header: list[str], rows: list[list]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return out.getvalue()


def check_next_token(task: str) -> None:
    if task != "next_token":
        raise ValueError(f"the loss per validation token is for next-token runs (gpt, gopher); this run's task is "
                         f"{task}.")


def validation_stream(loaded: LoadedModel) -> tuple[np.ndarray, np.ndarray]:
    """(the last l_max tokens of the train split, the validation split's tokens) of a next-token run."""
    check_next_token(loaded.config.data.task)
    dataset = validation_dataset(loaded.config, loaded.tokenizer)
    if not isinstance(dataset, StreamDataset):
        raise ValueError("the loss per validation token is for a text stream; this run's corpus is prompts and "
                         "answers (modadd), scored on the answer only.")
    return dataset.stream("train")[-loaded.model.config.l_max:], dataset.stream("val")


def token_losses(loaded: LoadedModel, stream: tuple[np.ndarray, np.ndarray] | None = None) -> TokenLoss:
    """Every validation token's loss (see the module); ``stream`` from `validation_stream` (read if None)."""
    context, val = stream if stream is not None else validation_stream(loaded)
    ids = [*context.tolist(), *val.tolist()]
    l_max = loaded.model.config.l_max
    tok = loaded.tokenizer
    scored = score(loaded.model, tok, ScoreInput("next_token", "", tuple(ids), l_max), alternatives=0)
    mine = scored.tokens[len(context):]
    return TokenLoss([t.text for t in mine], [float(t.loss) for t in mine if t.loss is not None],
                     np.asarray(val), loaded.label)


def diff(this: TokenLoss, against: TokenLoss) -> TokenLossDiff:
    """``this`` against ``against``; ValueError unless they scored the same tokens."""
    if not np.array_equal(this.ids, against.ids):
        raise ValueError(f"the two runs' validation splits are different tokens ({this.n_tokens} and "
                         f"{against.n_tokens}); compare runs on the same corpus, tokenizer and data.val_fraction.")
    return TokenLossDiff(this, against)


__all__ = ["TokenLoss", "TokenLossDiff", "token_losses", "validation_stream", "diff", "check_next_token"]
