"""The run folder's JSON records as types, and their conversion to and from JSON in one place: a ``metrics.jsonl``
row (`MetricsRow`, a TypedDict: the file's shape stays byte for byte) and ``meta.json`` (`RunMeta`, typed readers
over the dict the run folder keeps, tolerant of a meta.json that says anything). Plain Python: no torch."""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, get_args

from .config import one_of
from .files import ROWS_LIMIT, read_bytes

EndStatus = Literal["finished", "stopped", "failed"]  # how a run (or a generation) ends
RunStatus = Literal["created", "running", EndStatus]  # meta.json's ``status``
ENDED: tuple[EndStatus, ...] = get_args(EndStatus)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
AT_WORK: tuple[RunStatus, ...] = ("created", "running")  # written while a process holds the run's lock
INTERRUPTED: Literal["interrupted"] = "interrupted"  # read, never written: a run AT_WORK whose process is gone
ShownStatus = Literal[RunStatus, "interrupted"]  # a run's status as read (`RunMeta.status`, `runs.folder.Run.info`)


class MetricsRow(TypedDict, total=False):
    """One step of ``metrics.jsonl``. Every row has ``step``, ``train_loss``, ``lr`` and ``grad_norm`` (None, with
    ``skipped``, where loss scaling skipped the step); rows of a finished emission window have the window's
    ``tokens_per_s``, its last row ``window_end``; an evaluated step adds ``eval_train_loss``, ``val_loss`` and
    ``accuracy`` (validation), ``train_accuracy``, ``weight_norm`` (‖θ‖₂ over every parameter) and, on the
    "modadd" corpus, ``embed_fourier`` (the token embedding's energy per frequency, `inspect.grokking`)."""

    step: int
    train_loss: float
    lr: float
    grad_norm: float | None
    skipped: bool
    tokens_per_s: float
    window_end: bool
    eval_train_loss: float
    val_loss: float
    accuracy: float | None
    train_accuracy: float
    weight_norm: float
    embed_fourier: list[float]


# The keys of a metrics row, for its readers (a row read back from JSON may lack any of them).
STEP, TRAIN_LOSS, LR, GRAD_NORM, SKIPPED = "step", "train_loss", "lr", "grad_norm", "skipped"
TOKENS_PER_S, WINDOW_END = "tokens_per_s", "window_end"
EVAL_TRAIN_LOSS, VAL_LOSS, ACCURACY = "eval_train_loss", "val_loss", "accuracy"
TRAIN_ACCURACY, WEIGHT_NORM, EMBED_FOURIER = "train_accuracy", "weight_norm", "embed_fourier"
GROKKED_ACCURACY = 0.95  # validation accuracy from which a modadd run counts as generalising (`grokked_step`)


def row_step(row: Mapping[str, Any]) -> int:
    """A row's step (0 where it has none)."""
    return int(row.get(STEP, 0))


def row_number(row: Mapping[str, Any], key: str) -> float | None:
    """A row's number under ``key``, or None (missing, null, or not a number)."""
    return _number(row.get(key))


def is_evaluated(row: Mapping[str, Any]) -> bool:
    """Whether a row holds an evaluation's numbers."""
    return VAL_LOSS in row


def grokked_step(rows: Iterable[Mapping[str, Any]], threshold: float = GROKKED_ACCURACY) -> int | None:
    """The first evaluated step whose validation accuracy is at least ``threshold`` (the grokking lab's
    marker), or None."""
    for row in rows:
        acc = row_number(row, ACCURACY)
        if acc is not None and acc >= threshold:
            return row_step(row)
    return None


def eval_train_loss(row: Mapping[str, Any]) -> float | None:
    """The training loss an evaluation measured (an older row without it: the step's train_loss)."""
    return _number(row.get(EVAL_TRAIN_LOSS, row.get(TRAIN_LOSS)))


def metrics_rows(steps: Sequence[int], train_loss: Sequence[float], lr: Sequence[float],
                 grad_norm: Sequence[float | None], tokens_per_s: float | None = None) -> list[MetricsRow]:
    """The rows of one emission window's steps; with ``tokens_per_s`` (the window's throughput) on each, the last
    marked ``window_end``."""
    rows: list[MetricsRow] = []
    for step, loss, rate, norm in zip(steps, train_loss, lr, grad_norm):
        row: MetricsRow = {"step": step, "train_loss": loss, "lr": rate, "grad_norm": norm}
        if norm is None:
            row["skipped"] = True
        if tokens_per_s is not None:
            row["tokens_per_s"] = tokens_per_s
        rows.append(row)
    if rows and tokens_per_s is not None:
        rows[-1]["window_end"] = True
    return rows


def with_evaluation(row: MetricsRow, eval_train_loss: float, val_loss: float, accuracy: float | None,
                    train_accuracy: float | None = None, weight_norm: float | None = None,
                    embed_fourier: Sequence[float] | None = None) -> None:
    """Add an evaluation's numbers to the row of its step (those given: an older trainer measured fewer)."""
    row["eval_train_loss"], row["val_loss"], row["accuracy"] = eval_train_loss, val_loss, accuracy
    if train_accuracy is not None:
        row["train_accuracy"] = train_accuracy
    if weight_norm is not None:
        row["weight_norm"] = weight_norm
    if embed_fourier is not None:
        row["embed_fourier"] = list(embed_fourier)


def jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows as JSON lines, one per row."""
    return "".join(json.dumps(r) + "\n" for r in rows)


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file (a regular file, `files.read_bytes`): a torn last line (a crash mid-write, perhaps
    inside a character) and any line that is not a JSON object with a whole-number ``step`` (where it has one)
    are skipped."""
    return parse_jsonl(read_bytes(path, ROWS_LIMIT)) if path.exists() else []


def parse_jsonl(data: bytes) -> list[dict]:
    """The rows of JSON-lines bytes, as `read_jsonl` reads them."""
    rows = []
    for line in data.splitlines():
        try:
            row = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # not JSON, not UTF-8 (JSONDecodeError and UnicodeDecodeError)
            continue
        if isinstance(row, dict) and _whole_step(row.get(STEP, 0)):
            rows.append(row)
    return rows


def _whole_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def mark_window_ends(rows: list[dict]) -> None:
    """Mark the window ends of metrics rows written before the trainer marked them: it wrote each window's
    throughput onto all of the window's rows, so a window ends where the next row's value differs."""
    for row, after in zip(rows, [*rows[1:], {}]):
        if row.get(TOKENS_PER_S) is not None and row[TOKENS_PER_S] != after.get(TOKENS_PER_S):
            row[WINDOW_END] = True


def _number(value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf if value > 0 else -math.inf


def _count(value: Any, default: int = 0) -> int:
    number = _number(value)
    return int(number) if number is not None and math.isfinite(number) else default


def variant_text(variant: Mapping[str, Any]) -> str:
    """A sweep's variant as people read it: 'train.lr = 0.001, train.optimizer = "muon"'."""
    return ", ".join(f"{k} = {json.dumps(v)}" for k, v in variant.items())


@dataclass(frozen=True)
class RunMeta:
    """Typed readers over a run's ``meta.json`` (`Run.meta`): a missing or malformed value reads as its default."""

    data: Mapping[str, Any]

    @property
    def status(self) -> ShownStatus | None:
        value = self.data.get("status")
        return value if one_of(value, (*RUN_STATUSES, INTERRUPTED)) else None

    @property
    def step(self) -> int:
        return _count(self.data.get("step"))

    @property
    def checkpoint_step(self) -> int:
        """The step of the weights on disk (an older run: its last recorded step)."""
        return _count(self.data.get("checkpoint_step"), self.step)

    def total_steps(self, default: int) -> int:
        return _count(self.data.get("total_steps"), default)

    @property
    def unigram_entropy(self) -> float | None:
        return _number(self.data.get("unigram_entropy"))

    @property
    def best_val_loss(self) -> float | None:
        return _number(self.data.get("best_val_loss"))

    @property
    def val_loss(self) -> float | None:
        """The latest validation loss."""
        return _number(self.data.get("val_loss"))

    @property
    def val_bits_per_byte(self) -> float | None:
        """The latest validation loss in bits per UTF-8 byte of the validation text (nats / ln 2 / its bytes
        per token, `data.chars.val_bytes_per_token`): comparable across tokenizers. None where either is missing."""
        loss, per_token = self.val_loss, _number(self.data.get("val_bytes_per_token"))
        return loss / math.log(2) / per_token if loss is not None and per_token else None

    @property
    def sweep_variant(self) -> str | None:
        """"sweep NAME: key = value, …": the sweep that trained the run and the values it varied, or None."""
        sweep, variant = self.data.get("sweep"), self.data.get("variant")
        if not isinstance(sweep, str) or not isinstance(variant, dict):
            return None
        return f"{sweep}: {variant_text(variant)}"

    @property
    def init_from(self) -> str | None:
        """The run folder whose weights the run started from (fine-tuned, ``--init-from``), or None."""
        source = self.data.get("init_from")
        return source if isinstance(source, str) and source else None

    @property
    def imported_class(self) -> str | None:
        """The transformers class of a model imported from elsewhere (`fatstudio import`: not trained here), or None."""
        value = self.data.get("hf_class")
        return value if isinstance(value, str) and value else None

    @property
    def glass_box(self) -> str | None:
        """Which glass-box model the run is (built by hand, not trained: `runs.glass_box`), or None."""
        value = self.data.get("glass_box")
        return value if isinstance(value, str) and value else None

    @property
    def description(self) -> str | None:
        """What the run is, in words, where it says (a glass-box model's construction), or None."""
        value = self.data.get("description")
        return value if isinstance(value, str) and value else None

    @property
    def created(self) -> float | None:
        """When the run was made (seconds since the epoch)."""
        return _number(self.data.get("created"))

    @property
    def chars_per_token(self) -> dict[str, float] | None:
        """Characters per token of each split ({"train": …, "val": …}), or None."""
        value = self.data.get("chars_per_token")
        if not isinstance(value, dict):
            return None
        ratios = {k: float(v) for k, v in value.items() if _number(v) is not None}
        return ratios or None

    @property
    def diverged(self) -> dict | None:
        """The step whose numbers were not finite, as the trainer recorded it (`training.Finished.diverged`)."""
        value = self.data.get("diverged")
        return value if isinstance(value, dict) and value else None
