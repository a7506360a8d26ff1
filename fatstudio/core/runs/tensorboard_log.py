"""TensorBoard event files for a run (``train.tensorboard = true``), for people who watch their runs in
TensorBoard: ``tensorboard --logdir RUNS_DIR`` shows every run that has them.

`TensorBoardLog` writes into ``RUN_DIR/tensorboard/`` what the run writes into ``metrics.jsonl`` and
``samples.jsonl``, at the run's global steps, through `torch.utils.tensorboard.SummaryWriter` (the optional
``tensorboard`` package, imported only when a run asks for it). The scalars (`SCALAR_TAGS`): per step the
training loss, the learning rate and the gradient norm (none on a step that loss scaling skipped); the
throughput once per emission window (at the rows marked ``window_end``, the throughput curve of
`runs`); at each evaluation the losses on both splits and the accuracy. Each evaluation's sample text is
``sample`` on the Text tab, indented so that TensorBoard's Markdown shows it verbatim.

`runs.Run` owns one: it opens the writer at the first row it writes, flushes it after every batch of rows
(a TensorBoard watching the folder sees them at once) and closes it when the run ends. Each session of a
run (a resumed run is a new one) writes its own event file, which begins with a session start at its first
step: TensorBoard then drops what earlier sessions wrote from that step on (the steps that a stop or crash
outran the last checkpoint by, which the resumed run trains again), so every step shows once.
"""
from __future__ import annotations

import textwrap
import weakref
from pathlib import Path
from typing import Any

from ..config import TENSORBOARD_MISSING
from ..records import ACCURACY, EVAL_TRAIN_LOSS, GRAD_NORM, LR, TOKENS_PER_S, TRAIN_LOSS, VAL_LOSS, WINDOW_END, row_step

TENSORBOARD_DIR = "tensorboard"
SCALAR_TAGS = {  # metrics.jsonl key -> TensorBoard tag (the part before "/" is TensorBoard's section)
    TRAIN_LOSS: "loss/train",
    EVAL_TRAIN_LOSS: "loss/eval_train",
    VAL_LOSS: "loss/val",
    ACCURACY: "eval/accuracy",
    LR: "optim/lr",
    GRAD_NORM: "optim/grad_norm",
    TOKENS_PER_S: "speed/tokens_per_s",
}
SAMPLE_TAG = "sample"
QUEUE = 1024  # events the writer thread may have pending (see `_open`)
WINDOWED = (TOKENS_PER_S,)  # measured once per emission window: written at the window's last row only


def summary_writer_class() -> Any:
    """`torch.utils.tensorboard.SummaryWriter`; ValueError in one line if the ``tensorboard`` package is
    missing or cannot be imported."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "tensorboard":
            raise ValueError(TENSORBOARD_MISSING) from None
        raise ValueError(f"{TENSORBOARD_MISSING} (the installed one fails to import: {e})") from None
    return SummaryWriter


def _markdown_verbatim(text: str) -> str:
    """``text`` as a Markdown code block (every line indented by four spaces): TensorBoard renders text
    summaries as Markdown, which would join the lines and read ``#``, ``*`` and ``_`` as formatting."""
    return textwrap.indent(text, "    ", lambda _line: True)


class TensorBoardLog:
    """The event files of one run folder (``folder`` = ``RUN_DIR/tensorboard``). The writer opens on the first
    write and is closed by `close`, or when this object is collected, or at exit, whichever comes first."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._writer: Any = None
        self._closer: weakref.finalize | None = None

    def _open(self, first_step: int) -> Any:
        if self._writer is None:
            writer_class = summary_writer_class()
            # purge_step: the file starts with a session start at its first step. TensorBoard takes the first
            # one it reads as the run's start and each later one as a restart that hides what the earlier
            # sessions wrote from that step on (the steps a resumed run trains again).
            # max_queue: room for a whole emission window. With the default of 10 every event past the tenth
            # waits for the writer thread, which doubles the cost; `add_rows` flushes each window anyway.
            self._writer = writer_class(str(self.folder), purge_step=first_step, max_queue=QUEUE)
            self._closer = weakref.finalize(self, self._writer.close)  # no open file left behind
        return self._writer

    def add_rows(self, rows: list[dict]) -> None:
        """metrics.jsonl rows as scalars at their steps (None, i.e. not measured, is left out), then flush."""
        if not rows:
            return
        writer = self._open(row_step(rows[0]))
        for row in rows:
            step = row_step(row)
            for key, tag in SCALAR_TAGS.items():
                value = row.get(key)
                if key in WINDOWED and not row.get(WINDOW_END):
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    writer.add_scalar(tag, float(value), step)
        writer.flush()

    def add_sample(self, step: int, text: str) -> None:
        writer = self._open(step)
        writer.add_text(SAMPLE_TAG, _markdown_verbatim(text), step)
        writer.flush()

    def close(self) -> None:
        """Flush and close the event file (a later write opens a new one)."""
        if self._closer is not None:
            self._closer()  # calls the writer's close once
        self._writer = self._closer = None
