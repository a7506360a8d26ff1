"""Ablation: knock a head or an MLP out (`components`) and measure the change in validation loss.

Three ways to knock a component out, each replacing its output (a head's slice of W_o's input, an MLP's output):

- ``zero``: by zeros (for a head: exactly the model with that head's columns of W_o zeroed);
- ``mean``: by its mean over the validation batch, position by position (padding not counted);
- ``resample``: by its output on another row of the validation batch (row i takes row i+1's, the last the first).

The validation batch is the one the trainer evaluates on (`training.evaluate`): ``eval_iters`` batches of
``batch_size`` rows drawn with the seed + 1, so the baseline loss is the run's recorded validation loss of the
same weights. The loss is their mean, batch by batch, as ``evaluate`` averages it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

from ..config import one_of
from ..data.builtin import repeat_lookback
from ..data.corpora import IGNORE, build_dataset, load_corpus
from ..data.datasets import StreamDataset
from ..device import at_least_fp32, model_device
from ..files import csv_text
from ..inference.generation import eval_mode
from ..inference.scoring import rows_per_pass, score_text
from ..names import ComponentName
from .components import Component, Replace, component, components, recorded, replaced

if TYPE_CHECKING:
    from ..config import RunConfig, Task
    from ..data.corpora import Corpus, Dataset
    from ..data.tokenization import Tokenizer
    from ..inference.loaded import LoadedModel

AblationKind = Literal["zero", "mean", "resample"]  # what replaces a component's output (see the module)
KINDS: tuple[AblationKind, ...] = get_args(AblationKind)


def check_kind(kind: object) -> None:
    if not one_of(kind, KINDS):
        raise ValueError(f"{kind!r} is not a kind of ablation; use one of {', '.join(KINDS)}.")


# ------------------------------------------------------------------------------------ the validation batch
def validation_dataset(config: RunConfig, tokenizer: Tokenizer) -> Dataset:
    """The run's corpus tokenized and split as its training did (its own tokenizer, l_max, val_fraction, seed)."""
    return validation_data(config, tokenizer)[1]


def validation_data(config: RunConfig, tokenizer: Tokenizer) -> tuple[Corpus, Dataset]:
    """The run's corpus, and it tokenized and split as its training did (`validation_dataset`)."""
    d, t = config.data, config.train
    corpus = load_corpus(d.corpus, d.task, None, t.seed, d.modadd_p)
    dataset = build_dataset(corpus, tokenizer, d.task, config.model.l_max, d.val_fraction, d.p_mask, t.seed, split=d.split)
    if not any(v for k, v in dataset.sizes().items() if k.startswith("val")):
        raise ValueError("this run has no validation split (data.val_fraction = 0), so there is no validation "
                         "loss to measure.")
    return corpus, dataset


@dataclass
class ValidationBatch:
    """The evaluation's validation batches as one: ``rows`` (x, y, and z, padding masks or label as the task has
    them) padded to a common length, ``batch_of`` (N,) the evaluation batch each row came from."""

    task: Task
    rows: dict[str, torch.Tensor]
    batch_of: torch.Tensor
    n_batches: int

    @property
    def n(self) -> int:
        return int(self.batch_of.shape[0])

    def chunk(self, rows: slice) -> dict[str, torch.Tensor]:
        return {k: v[rows] for k, v in self.rows.items()}

    def position_mask(self, c: Component) -> torch.Tensor | None:
        """(N, T) True at the real positions of the sequence ``c`` reads (the encoder's for enc/enc-mlp)."""
        return self.rows.get("z_pad_mask" if c.name.map.kind == "enc" else "x_pad_mask")


def _val_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed + 1)  # as `training.evaluate` draws the validation split


def validation_batch(dataset: Dataset, task: Task, batch_size: int, eval_iters: int, seed: int,
                     pad_id: int = 0) -> ValidationBatch:
    """The ``eval_iters`` validation batches `training.evaluate` draws (generator seeded with ``seed`` + 1)."""
    g = _val_generator(seed)
    batches = [dataset.batch("val", batch_size, g) for _ in range(eval_iters)]
    pads = {"x": pad_id, "z": pad_id, "y": IGNORE, "x_pad_mask": False, "z_pad_mask": False}
    rows = {}
    for key in batches[0]:
        parts = [b[key] for b in batches]
        if parts[0].dim() == 2:
            T = max(p.shape[1] for p in parts)
            parts = [F.pad(p, (0, T - p.shape[1]), value=pads[key]) for p in parts]
        rows[key] = torch.cat(parts)
    batch_of = torch.cat([torch.full((len(b["y" if "y" in b else "label"]),), i) for i, b in enumerate(batches)])
    return ValidationBatch(task, rows, batch_of, len(batches))


def second_copy_mask(config: RunConfig, dataset: Dataset) -> torch.Tensor:
    """(N, T) True at the targets of `validation_batch` that follow by induction in the "repeat" corpus: the k-th
    token (k ≥ 1) of a second copy of r whose earlier occurrence, n = len(r) tokens back, is in the row
    (`builtin.repeat_lookback`). ValueError for another corpus, task, or a tokenizer that is not one token a
    character."""
    d, t = config.data, config.train
    if d.corpus != "repeat" or d.task != "next_token" or not isinstance(dataset, StreamDataset):
        raise ValueError(f"second copies are those of the 'repeat' corpus's next_token task, not of {d.corpus!r} "
                         f"({d.task}).")
    back = repeat_lookback(t.seed)
    if len(dataset.stream("train")) + len(dataset.stream("val")) != len(back):
        raise ValueError("this run's tokenizer does not give one token a character, so its tokens cannot be "
                         "matched to the copies; use the char tokenizer.")
    g, masks = _val_generator(t.seed), []
    for _ in range(t.eval_iters):
        starts, T = dataset.window_starts("val", t.batch_size, g)
        targets = starts[:, None] + np.arange(1, T + 1)
        at = dataset.positions("val", targets)  # each target's place in the text
        n = back[at]
        # x_t's earlier occurrence at t - n ≥ 0 in the row, n tokens back in the text too (not across two blocks)
        joined = dataset.positions("val", np.maximum(targets - n, 0)) == at - n
        masks.append(torch.from_numpy((n > 0) & (np.arange(T) >= n) & joined))
    return torch.cat(masks)


# ----------------------------------------------------------------------------------------------- losses
def task_logits(model, rows: dict[str, torch.Tensor], task: Task) -> torch.Tensor:
    """The (N, T, N_V) logits of a next_token, masked_lm or seq2seq batch's rows (`training.task_loss`'s)."""
    if task == "seq2seq":
        return model(rows["x"], context=rows["z"], mask=rows["x_pad_mask"], context_mask=rows["z_pad_mask"])
    return model(rows["x"], mask=rows.get("x_pad_mask"))


def row_losses(model, rows: dict[str, torch.Tensor], task: Task) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the summed cross-entropy of its counted targets (float64) and their number (`training.task_loss`
    per row)."""
    if task == "classification":
        logits = model.classify(rows["x"], mask=rows["x_pad_mask"])
        ce = F.cross_entropy(at_least_fp32(logits), rows["label"], reduction="none")
        return ce.double(), torch.ones_like(ce, dtype=torch.long)
    logits = task_logits(model, rows, task)
    y = rows["y"]
    ce = F.cross_entropy(at_least_fp32(logits).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="none")
    return ce.view(y.shape).double().sum(1), (y != IGNORE).sum(1)


ChunkReplacements = Callable[[slice], dict[Component, Replace]]  # the rows of a chunk -> what to replace


@dataclass
class KnockoutRow:
    component: ComponentName
    loss: float
    delta_loss: float


@dataclass
class KnockoutTable:
    """Every component's validation loss when knocked out; ``complete`` False when it was cancelled."""

    kind: AblationKind
    baseline_loss: float
    rows: list[KnockoutRow] = field(default_factory=list)
    complete: bool = True

    def to_dict(self) -> dict:
        return {"baseline_loss": self.baseline_loss,
                "rows": [{"component": str(r.component), "loss": r.loss, "delta_loss": r.delta_loss} for r in self.rows]}

    def csv(self) -> str:
        return "component,loss,delta_loss\n" + "".join(f"{r.component},{r.loss!r},{r.delta_loss!r}\n"
                                                         for r in self.rows)


class Ablator:
    """Validation losses of ``model`` with components knocked out, on one `ValidationBatch`.

    The first loss (`baseline`) also records every component's output when the mean or resample statistics
    are needed (`ablated`). Runs in inference mode, the model in eval mode."""

    def __init__(self, model, val: ValidationBatch):
        self.model, self.val = model, val
        self.dev = model_device(model)
        first = next(iter(val.rows.values()))
        per = rows_per_pass(int(first.shape[1]) if first.dim() == 2 else 1, model.config.vocab_size)
        self.chunks = [slice(s, min(val.n, s + per)) for s in range(0, val.n, per)]
        self._baseline: float | None = None
        self._outputs: dict[ComponentName, torch.Tensor] = {}

    @torch.inference_mode()
    def loss(self, replace: ChunkReplacements | None = None) -> float:
        """The validation loss (the mean over evaluation batches of each batch's mean loss)."""
        sums = torch.zeros(self.val.n_batches, dtype=torch.float64)
        counts = torch.zeros(self.val.n_batches, dtype=torch.float64)
        with eval_mode(self.model):
            for rows in self.chunks:
                chunk = {k: v.to(self.dev) for k, v in self.val.chunk(rows).items()}
                with replaced(replace(rows) if replace else {}):
                    s, n = row_losses(self.model, chunk, self.val.task)
                which = self.val.batch_of[rows]
                sums.index_add_(0, which, s.cpu())
                counts.index_add_(0, which, n.cpu().double())
        return float((sums / counts.clamp(min=1)).mean())

    def baseline(self, record: bool = False) -> float:
        """The loss with nothing knocked out; ``record``: keep every component's output for mean/resample."""
        if self._baseline is None or (record and not self._outputs):
            kept: dict[ComponentName, list[torch.Tensor]] = {}
            comps = components(self.model) if record else []
            with recorded(comps, kept):
                self._baseline = self.loss()
            self._outputs = {name: torch.cat(parts) for name, parts in kept.items()}
        return self._baseline

    def replacement(self, c: Component, kind: AblationKind) -> Callable[[slice], Replace]:
        """For the rows of a chunk, the function that knocks ``c`` out by ``kind``."""
        check_kind(kind)
        if kind == "zero":
            return lambda rows: torch.zeros_like
        self.baseline(record=True)
        out = self._outputs[c.name]  # (N, T, d)
        if kind == "mean":
            mask = self.val.position_mask(c)
            w = torch.ones(out.shape[:2], dtype=out.dtype, device=out.device) if mask is None else \
                mask.to(out.device, out.dtype)
            mean = (out * w[..., None]).sum(0) / w.sum(0).clamp(min=1)[:, None]  # (T, d)
            return lambda rows: (lambda a: mean[:a.shape[1]].expand_as(a))
        other = out.roll(-1, 0)  # row i takes row i+1's output
        return lambda rows: (lambda a: other[rows, :a.shape[1]])

    def ablated(self, comps: Sequence[Component], kind: AblationKind = "zero") -> float:
        """The validation loss with every component of ``comps`` knocked out by ``kind``."""
        fns = [(c, self.replacement(c, kind)) for c in comps]
        return self.loss(lambda rows: {c: fn(rows) for c, fn in fns})

    def table(self, kind: AblationKind = "zero", progress: Callable[[int, int, ComponentName], None] | None = None,
              cancelled: Callable[[], bool] | None = None,
              on_row: Callable[[KnockoutRow], None] | None = None) -> KnockoutTable:
        """Every head and MLP knocked out alone. ``on_row(row)`` and ``progress(done, total, name)`` after each;
        ``cancelled()`` asked before each: True stops, returning the rows so far with ``complete`` False."""
        check_kind(kind)
        comps = components(self.model)
        out = KnockoutTable(kind, self.baseline(record=kind != "zero"))
        for i, c in enumerate(comps):
            if cancelled is not None and cancelled():
                out.complete = False
                break
            loss = self.ablated([c], kind)
            out.rows.append(KnockoutRow(c.name, loss, loss - out.baseline_loss))
            if on_row is not None:
                on_row(out.rows[-1])
            if progress is not None:
                progress(i + 1, len(comps), c.name)
        return out


def ablator_for(loaded: LoadedModel, second_copy: bool = False) -> Ablator:
    """An `Ablator` of a loaded run's model on its validation batch; ``second_copy``: its loss counts only the
    targets that follow by induction (`second_copy_mask`), while a mean is still over every position."""
    cfg = loaded.config
    dataset = validation_dataset(cfg, loaded.tokenizer)
    val = validation_batch(dataset, cfg.data.task, cfg.train.batch_size, cfg.train.eval_iters, cfg.train.seed,
                           loaded.tokenizer.pad_id)
    if second_copy:
        val.rows["y"] = torch.where(second_copy_mask(cfg, dataset), val.rows["y"], IGNORE)
    return Ablator(loaded.model, val)


def knockout_table(loaded: LoadedModel, kind: AblationKind = "zero",
                   progress: Callable[[int, int, ComponentName], None] | None = None,
                   cancelled: Callable[[], bool] | None = None,
                   on_row: Callable[[KnockoutRow], None] | None = None) -> KnockoutTable:
    """`Ablator.table` for a loaded run's model on its validation batch."""
    check_kind(kind)
    return ablator_for(loaded).table(kind, progress, cancelled, on_row)


# ------------------------------------------------------------------------------- one component, one text
TEXT_KINDS: tuple[AblationKind, ...] = ("zero", "mean")  # resample needs another row of a batch: not for one text


@dataclass
class TokenChange:
    """Each token of a text with its probability given what the model reads (`scoring.score_text`), ``before``
    as the model is and ``after`` with something changed in it (a head knocked out: `TextAblation`; a feature
    edited: `features.interventions`); None for a token that is context only (a next-token text's first)."""

    tokens: list[str]
    before: list[float | None]
    after: list[float | None]

    @property
    def delta(self) -> list[float | None]:
        """p after − p before, per token."""
        return [None if b is None or a is None else a - b for b, a in zip(self.before, self.after)]

    def csv(self) -> str:
        """One row per token: position, token (quoted as CSV quotes), p before and after, Δp (empty: not scored)."""
        cell = lambda v: "" if v is None else repr(v)
        rows = enumerate(zip(self.tokens, self.before, self.after, self.delta))
        return csv_text([("position", "token", "p_before", "p_after", "delta_p"),
                         *((i, t, cell(b), cell(a), cell(d)) for i, (t, b, a, d) in rows)])


@dataclass
class TextAblation(TokenChange):
    """A `TokenChange` with ``component`` knocked out by ``kind``."""

    component: ComponentName
    kind: AblationKind


def text_ablation(loaded: LoadedModel, name: ComponentName, text: str, kind: AblationKind = "zero",
                  source: str | None = None, ablator: Ablator | None = None) -> TextAblation:
    """Score ``text`` (an edt: the target, given ``source``) with the model as it is and with component ``name``
    knocked out by ``kind``: "zero", or "mean" (its mean over the validation batch, position by position, from
    ``ablator``, by default `ablator_for` ``loaded``)."""
    if kind not in TEXT_KINDS:
        raise ValueError(f"{kind!r} cannot knock a component out on one text; use one of {', '.join(TEXT_KINDS)}.")
    c = component(loaded.model, name)
    fn = torch.zeros_like if kind == "zero" else (ablator or ablator_for(loaded)).replacement(c, "mean")(slice(None))
    before = score_text(loaded, text, source, alternatives=0)
    with replaced({c: fn}):
        after = score_text(loaded, text, source, alternatives=0)
    return TextAblation([t.text for t in before.tokens], [t.prob for t in before.tokens], [t.prob for t in after.tokens],
                        name, kind)


__all__ = ["AblationKind", "KINDS", "TEXT_KINDS", "TokenChange", "TextAblation", "text_ablation", "Ablator", "check_kind",
           "KnockoutRow",
           "KnockoutTable", "ValidationBatch", "ablator_for", "knockout_table", "row_losses", "second_copy_mask", "task_logits",
           "validation_batch",
           "validation_dataset", "validation_data"]
