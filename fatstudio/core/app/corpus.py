"""The corpus in the application model: the one the settings name, read and its tokenizer trained as the job
"corpus" (`core.data.preview`), with what there is to say about it. It follows the settings by itself; the Corpus
panel shows it and asks for it; training and the estimate reuse what it prepared while it is current."""
from __future__ import annotations

import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from psygnal import Signal

from ..config import TASK_ARCHS, TASKS, Arch, Task, TokenizerKind
from .jobs import Cancelled, Jobs, Progress
from .settings import Change, Settings

if TYPE_CHECKING:
    from ..data.corpora import Prepared
    from ..data.preview import CorpusPreview

CORPUS = "corpus"  # the job reading the corpus and training its tokenizer
BPE_MIN_VOCAB = 260  # 256 bytes and the special tokens
SETTLE_S = 0.4  # a change of the seed or of N_V is read once no other followed it for this long


class Reading(str, Enum):
    """What a change of the settings asks of the corpus: read it again, or only train its tokenizer again; at once,
    or once a run of changes has settled (the seed or N_V typed digit by digit)."""

    RELOAD = "reload"
    RELOAD_LATER = "reload-later"
    RETOKENIZE = "retokenize"
    RETOKENIZE_LATER = "retokenize-later"


def tasks_for_arch(arch: Arch) -> list[Task]:
    """The tasks an architecture can learn (TASK_ARCHS), in TASKS order."""
    return [t for t in TASKS if arch in TASK_ARCHS[t]]


class Corpus:
    """``preview`` (a `CorpusPreview` of the corpus read; None while none is current), ``error`` (why it cannot be
    used, in words), ``loading``, and ``builtins`` / ``builtin_tasks`` (the built-in corpora and their tasks, known
    with the first corpus read). ``changed()`` when loading starts or ends or the error changes; ``progress(fraction,
    message)`` while it reads."""

    changed = Signal()
    progress = Signal(float, str)

    def __init__(self, settings: Settings, jobs: Jobs):
        self.settings, self.jobs = settings, jobs
        self.preview: CorpusPreview | None = None
        self.error: str | None = None
        self.loading = False
        self.builtins: dict[str, str] = {}
        self.builtin_tasks: dict[str, Any] = {}
        settings.changed.connect(self._follow)

    @property
    def spec(self) -> str:
        """The corpus: a path or the name of a built-in."""
        return self.settings.data.corpus

    @property
    def prepared(self) -> Prepared | None:
        """The corpus read and its tokenizer (a core ``Prepared``) while they are current, else None: training reuses
        them when its settings match."""
        return self.preview.prepared if self.preview is not None and not self.loading else None

    # ---- asking -------------------------------------------------------------------------------------------
    def use(self, spec: str) -> None:
        """Use ``spec`` (a path, or the name of a built-in); the same corpus again is read again."""
        if not self.settings.update("data", corpus=str(spec)):
            self.reload()

    def reload(self, settle: float = 0.0) -> None:
        """Read the corpus and train its tokenizer again (the job "corpus": an earlier reading's result is stale),
        after ``settle`` seconds in which no other reading was asked for."""
        from ..data import preview

        d = self.settings.data
        self._start(settle, preview.load, d.corpus, d.task, d.tokenizer, d.vocab_size, self.settings.train.seed,
                    modadd_p=d.modadd_p)

    def retokenize(self, settle: float = 0.0) -> None:
        """Train the tokenizer again on the corpus read (else read it again), after ``settle`` seconds."""
        from ..data import preview

        if self.preview is None or self.preview.corpus is None or self.loading:
            self.reload(settle)
            return
        d = self.settings.data
        self._start(settle, preview.retokenize, self.preview, d.tokenizer, d.vocab_size)

    def _follow(self, change: Change) -> None:
        if change.touches("model", "arch"):
            self.follow_arch()
        reading = self.reading_for(change)
        if reading in (Reading.RELOAD, Reading.RELOAD_LATER):
            self.reload(SETTLE_S if reading is Reading.RELOAD_LATER else 0.0)
        elif reading in (Reading.RETOKENIZE, Reading.RETOKENIZE_LATER):
            self.retokenize(SETTLE_S if reading is Reading.RETOKENIZE_LATER else 0.0)

    def reading_for(self, change: Change) -> Reading | None:
        """What ``change`` of the settings asks of the corpus (None: nothing). A corpus reads differently per task
        (pairs, labels); a synthetic built-in is generated with the training seed."""
        data = change.of("data")
        if "corpus" in data:
            self.preview = None
        if data & {"corpus", "task"} or ("modadd_p" in data and self.spec == "modadd"):
            return Reading.RELOAD
        if "tokenizer" in data:
            return Reading.RETOKENIZE
        if "vocab_size" in data and self.settings.data.tokenizer != "char":
            return Reading.RETOKENIZE_LATER
        if change.touches("train", "seed") and self.preview is not None and self.preview.seeded:
            return Reading.RELOAD_LATER
        return None

    def tokenizer_resets(self, kind: TokenizerKind) -> dict[str, int]:
        """What choosing the tokenizer ``kind`` sets with it: BPE starts from the 256 bytes, so a smaller
        vocabulary becomes 1000."""
        return {"vocab_size": 1000} if kind == "bpe" and self.settings.data.vocab_size < BPE_MIN_VOCAB else {}

    def follow_arch(self) -> list[Task]:
        """The tasks the architecture can learn; a task it cannot becomes the first it can."""
        tasks = tasks_for_arch(self.settings.model.arch)
        if tasks and self.settings.data.task not in tasks:
            self.settings.update("data", task=tasks[0])
        return tasks

    # ---- the job ------------------------------------------------------------------------------------------
    def _start(self, settle: float, func: Callable[..., CorpusPreview], *args: Any, **kwargs: Any) -> None:
        if not self.spec:
            return
        self.loading, self.error = True, None
        self.changed.emit()
        self.jobs.submit(CORPUS, _settled, settle, func, *args, progress=True, **kwargs, on_result=self._read,
                         on_error=self._failed, on_progress=self.progress.emit)

    def _read(self, preview: CorpusPreview) -> None:
        self.preview = preview
        if preview.builtins and not self.builtins:
            self.builtins, self.builtin_tasks = dict(preview.builtins), dict(preview.builtin_tasks)
        self.loading = False
        self.changed.emit()
        if preview.vocab_size:
            self.settings.update("model", vocab_size=preview.vocab_size)  # N_V is the tokenizer's
        if preview.seeded and preview.seed != self.settings.train.seed:  # the seed changed while it read
            self.reload()

    def _failed(self, message: str) -> None:
        self.preview, self.loading, self.error = None, False, message
        self.changed.emit()


def _settled(settle: float, func: Callable[..., CorpusPreview], *args: Any, progress: Progress,
             **kwargs: Any) -> CorpusPreview:
    """In the corpus job: wait ``settle`` seconds (a newer reading asked for meanwhile cancels this one, and it ends
    here), then ``func(*args, progress=progress, **kwargs)``."""
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        if progress.cancelled:
            raise Cancelled
        time.sleep(0.02)
    return func(*args, progress=progress, **kwargs)
