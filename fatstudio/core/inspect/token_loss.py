"""Where is it wrong? Every token of a run's validation split with its loss −ln p(token | context) in nats,
each scored once, under the loss its task trains with:

- ``next_token`` (gpt, gopher; Algorithm 13): the split is scored as `scoring` scores a long text, in windows
  of l_max tokens that overlap so that each target is counted once; the split is read after the last l_max
  tokens of the train split (context only, never scored), so every validation token, the first included, is
  predicted from at least ⌈l_max/2⌉ tokens.
- ``masked_lm`` (bert; Algorithm 12): windows of l_max tokens at a stride of ⌊l_max/2⌋, each scoring the
  tokens of its middle half (the first window reads the train split's tail before it, the last window ends
  at the split's end), so a token reads at least ⌊l_max/4⌋ tokens on each side where the split has them.
  Masking is validation's rule (a masked token is replaced by mask_id) at its rate: each position of the
  stream is given one of K = round(1/p_mask) passes (drawn with the run's seed), and the window's row for
  pass k masks every position of pass k, context included, and counts those in its middle half. So each
  token is masked, and scored, exactly once, with about p_mask of the window masked around it.
- ``seq2seq`` (edt; Algorithm 11): every validation pair, as a validation batch holds it: each target token
  and the eos that ends it, given the source and the target before it.

Either way the tokens' mean is the validation loss of those rows (``training.task_loss`` on them), and a diff
compares two checkpoints, or two runs whose corpora give the same validation tokens: token by token
Δ = loss − the other's, so the Δs sum to N × (the difference of the means). Classes of tokens and the worst
tokens are in `token_classes`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from ..data.builtin import text_parts
from ..data.corpora import IGNORE
from ..data.datasets import StreamDataset
from ..device import at_least_fp32, model_device
from ..files import csv_text
from ..inference.generation import eval_mode
from ..inference.scoring import window_starts
from .ablation import task_logits, validation_data

if TYPE_CHECKING:
    from ..config import RunConfig, Task
    from ..data.corpora import Corpus, Dataset
    from ..inference.loaded import LoadedModel

TASKS = ("next_token", "masked_lm", "seq2seq")
ROW_TOKENS = 4096  # positions per forward pass: small enough to stay in the CPU's caches
Progress = Callable[[float, str], None]


# ------------------------------------------------------------------------------------------- the rows
@dataclass(frozen=True)
class TaskClasses:
    """The classes of validation token that a run's task tells apart (`builtin.text_parts`): ``family`` ("copy":
    the repeat corpus's first and second copies; "part": a synthetic task's question, separator and answer), the
    classes' ``names``, and ``of``, (N,) the class of every validation token."""

    family: str
    names: tuple[str, ...]
    of: np.ndarray


def task_classes(config: RunConfig, corpus: Corpus, dataset: Dataset) -> TaskClasses | None:
    """The `TaskClasses` of a run's validation tokens, where its corpus has parts (`builtin.text_parts`) and its
    tokenizer gives one token a character (its tokens are the text's characters); else None."""
    found = text_parts(config.data.corpus, corpus.text, config.train.seed) if corpus.text else None
    if found is None or not isinstance(dataset, StreamDataset):
        return None
    family, names, part = found
    if len(dataset.stream("train")) + len(dataset.stream("val")) != len(part):
        return None  # not one token a character: a token's characters may lie in two parts
    return TaskClasses(family, names, part[dataset.positions("val", np.arange(len(dataset.stream("val"))))])


@dataclass
class ValidationSplit:
    """The validation split laid out in the rows that score it (see the module): ``rows`` x, y (and z and the
    padding masks for seq2seq), ``order`` the validation index of each counted target in row-major order (None:
    in order), ``ids`` the validation tokens scored, ``train_counts`` (N_V,) how often each token is a target of
    the train split, ``pair_starts`` and ``sources`` each seq2seq pair's first token and source text,
    ``task_classes`` the classes its task tells apart (`task_classes`)."""

    task: Task
    rows: dict[str, torch.Tensor]
    ids: np.ndarray
    train_counts: np.ndarray
    order: np.ndarray | None = None
    pair_starts: np.ndarray | None = None
    sources: list[str] | None = None
    task_classes: TaskClasses | None = None


def check_task(task: Task) -> None:
    if task not in TASKS:
        raise ValueError(f"the loss per validation token is for language models (gpt, gopher, a masked-LM bert, an "
                         f"encoder-decoder); this run's task is {task}, whose loss is not one per token.")


def next_token_rows(context: np.ndarray, val: np.ndarray, l_max: int) -> dict[str, torch.Tensor]:
    """Windows x = ids[s:s+T] of ids = context + val predicting ids[s+1:s+T+1] (`scoring.window_starts`), the
    targets in the context or already counted by an earlier window IGNORE."""
    ids = np.concatenate((context, val)).astype(np.int64)
    T = min(l_max, len(ids) - 1)
    starts = np.asarray(window_starts(len(ids), l_max))
    idx = starts[:, None] + np.arange(T)  # (W, T)
    done = np.maximum(len(context) - 1, np.concatenate(([0], starts[:-1] + T)))  # targets ≤ done are counted
    y = np.where(idx + 1 > done[:, None], ids[idx + 1], IGNORE)
    return {"x": torch.from_numpy(ids[idx]), "y": torch.from_numpy(y)}


def masked_rows(context: np.ndarray, val: np.ndarray, l_max: int, p_mask: float, mask_id: int,
                seed: int) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """The masked-LM rows of the module (middle halves, K = round(1/p_mask) passes) and ``order``."""
    ids = np.concatenate((context, val)).astype(np.int64)
    c, N = len(context), len(ids)
    T = min(l_max, N)
    S = max(1, T // 2)
    q = (T - S) // 2
    first = np.arange(c, N, S)  # each window's scored region [first, first + S)
    starts = np.clip(first - q, 0, N - T)
    idx = starts[:, None] + np.arange(T)  # (W, T)
    scored = (idx >= first[:, None]) & (idx < first[:, None] + S)
    K = max(1, round(1 / p_mask))
    pass_of = np.random.default_rng(seed).integers(K, size=N)[idx]  # (W, T)
    x, y = [], []
    for k in range(K):
        masked = pass_of == k
        x.append(np.where(masked, mask_id, ids[idx]))
        y.append(np.where(masked & scored, ids[idx], IGNORE))
    xs, ys = np.stack(x, 1).reshape(-1, T), np.stack(y, 1).reshape(-1, T)  # row = window × K + pass
    keep = (ys != IGNORE).any(1)
    xs, ys = xs[keep], ys[keep]
    where = np.stack([idx] * K, 1).reshape(-1, T)[keep]
    order = where[ys != IGNORE] - c
    return {"x": torch.from_numpy(xs), "y": torch.from_numpy(ys)}, order


def validation_split(loaded: LoadedModel) -> ValidationSplit:
    """A loaded run's validation split as the rows that score it (the corpus read and tokenized as its
    training did); ValueError for a task without a loss per token or a run without a validation split."""
    config = loaded.config
    task, l_max = config.data.task, loaded.model.config.l_max
    check_task(task)
    corpus, dataset = validation_data(config, loaded.tokenizer)
    N_V = loaded.model.config.vocab_size
    if task == "seq2seq":
        examples = dataset.examples("val")  # type: ignore[attr-defined]
        rows = dataset.rows("val", np.arange(len(examples)))  # type: ignore[attr-defined]
        y = rows["y"].numpy()
        counted = (y != IGNORE).sum(1)
        return ValidationSplit(task, rows, y[y != IGNORE], dataset.target_counts("train"),  # type: ignore[attr-defined]
                               pair_starts=np.concatenate(([0], np.cumsum(counted)[:-1])),
                               sources=[s for s, _ in examples])
    if not isinstance(dataset, StreamDataset):
        raise ValueError("the loss per validation token is for a text stream; this run's corpus is prompts and "
                         "answers (modadd), scored on the answer only.")
    train, val = dataset.stream("train"), dataset.stream("val")
    context = dataset.before("val", l_max)  # the text the validation split follows
    counts = np.bincount(np.asarray(train), minlength=N_V)
    val = np.asarray(val)
    parts = task_classes(config, corpus, dataset)
    if task == "next_token":
        return ValidationSplit(task, next_token_rows(context, val, l_max), val, counts, task_classes=parts)
    rows, order = masked_rows(context, val, l_max, config.data.p_mask, loaded.tokenizer.mask_id, config.train.seed)
    return ValidationSplit(task, rows, val, counts, order=order, task_classes=parts)


# -------------------------------------------------------------------------------------------- scoring
@dataclass
class TokenLoss:
    """The validation tokens (as text) and their losses in nats, in order; ``ids`` the token ids;
    ``train_counts``, ``pair_starts``, ``sources`` and ``task_classes`` as in `ValidationSplit`."""

    tokens: list[str]
    loss: np.ndarray
    ids: np.ndarray
    label: str = ""
    task: Task = "next_token"
    step: int = 0
    train_counts: np.ndarray | None = None
    pair_starts: np.ndarray | None = None
    sources: list[str] | None = field(default=None, repr=False)
    task_classes: TaskClasses | None = field(default=None, repr=False)

    @property
    def n_tokens(self) -> int:
        return len(self.loss)

    @property
    def mean(self) -> float:
        return math.fsum(self.loss) / len(self.loss)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "n_tokens": self.n_tokens, "tokens": self.tokens, "loss": self.loss.tolist()}

    def csv(self) -> str:
        return _csv(["position", "token", "loss"],
                    [[i, t, repr(float(l))] for i, (t, l) in enumerate(zip(self.tokens, self.loss))])


@dataclass
class TokenLossDiff:
    """Two scorings of the same validation tokens: ``delta`` = this loss − the other's, token by token."""

    this: TokenLoss
    against: TokenLoss

    @property
    def delta(self) -> np.ndarray:
        return self.this.loss - self.against.loss

    @property
    def delta_mean(self) -> float:
        return self.this.mean - self.against.mean

    def to_dict(self) -> dict:
        return {**self.this.to_dict(), "against": {"label": self.against.label, "mean": self.against.mean,
                                                    "loss": self.against.loss.tolist()},
                "delta_mean": self.delta_mean, "delta_loss": self.delta.tolist()}

    def csv(self) -> str:
        rows = zip(self.this.tokens, self.this.loss, self.against.loss, self.delta)
        return _csv(["position", "token", "loss", "against_loss", "delta_loss"],
                    [[i, t, repr(float(a)), repr(float(b)), repr(float(d))] for i, (t, a, b, d) in enumerate(rows)])


def _csv(header: list[str], rows: list[list]) -> str:
    return csv_text([header, *rows])


@torch.inference_mode()
def split_losses(model, split: ValidationSplit, progress: Progress | None = None) -> np.ndarray:
    """(N,) float64: the loss of each validation token of ``split`` (in validation order) under ``model``.
    ``progress(fraction, message)`` is called after each forward pass (it may raise to cancel)."""
    rows, dev = split.rows, model_device(model)
    n, T = rows["x"].shape
    per = max(1, ROW_TOKENS // T)
    out = []
    with eval_mode(model):
        for c in range(0, n, per):
            part = {k: v[c:c + per].to(dev) for k, v in rows.items()}
            y = part["y"]
            keep = y != IGNORE
            logits = task_logits(model, part, split.task)[keep]  # (n counted, N_V)
            out.append(F.cross_entropy(at_least_fp32(logits), y[keep], reduction="none").double().cpu().numpy())
            if progress:
                progress(min(n, c + per) / n, f"scored {min(n, c + per):,} of {n:,} windows")
    losses = np.concatenate(out) if out else np.zeros(0)
    if split.order is not None:
        ordered = np.empty_like(losses)
        ordered[split.order] = losses
        return ordered
    return losses


def token_losses(loaded: LoadedModel, split: ValidationSplit | None = None, *,
                 progress: Progress | None = None) -> TokenLoss:
    """Every validation token's loss (see the module); ``split`` from `validation_split` (read if None)."""
    split = split if split is not None else validation_split(loaded)
    losses = split_losses(loaded.model, split, progress)
    return TokenLoss(loaded.tokenizer.token_strings(split.ids.tolist()), losses, np.asarray(split.ids), loaded.label,
                     split.task, loaded.step, split.train_counts, split.pair_starts, split.sources, split.task_classes)


def diff(this: TokenLoss, against: TokenLoss) -> TokenLossDiff:
    """``this`` against ``against``; ValueError unless they scored the same tokens."""
    if not np.array_equal(this.ids, against.ids):
        raise ValueError(f"the two runs' validation splits are different tokens ({this.n_tokens} and "
                         f"{against.n_tokens}); compare runs on the same corpus, tokenizer, data.val_fraction "
                         "and data.split.")
    return TokenLossDiff(this, against)


__all__ = ["TokenLoss", "TokenLossDiff", "ValidationSplit", "TaskClasses", "task_classes",
           "token_losses", "split_losses", "validation_split",
           "next_token_rows", "masked_rows", "diff", "check_task", "TASKS", "ROW_TOKENS"]
