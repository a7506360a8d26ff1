"""The application's model, outside any window (Qt-free, observable with psygnal signals).

A `Workspace` holds what the app works on: the `Settings` a new run starts with, the prepared corpus, the
training state (`TrainingState`), the run shown, the `Focus` (the run, weights and text every view that computes
from a model shows), the run's probe folder and its "is this normal?" diagnostics, and the job system (`jobs`)
that runs all of the app's background work. Panels subscribe to its signals and call its commands; none of them pushes
values into another.

Training runs as the job "training" (`train`): the trainer's generator in a job thread, each of its events taken
in here (`take`) on the owner's thread, and `end` once the job has ended. A `Runner` (the trainer's `Control`)
takes the commands meanwhile.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from psygnal import Signal

from ..names import MapName
from ..records import GRAD_NORM, LR, STEP, TRAIN_LOSS, EndStatus, RunMeta, row_step
from ..runs.presets import expected_findings
from ..training.control import Control
from ..training.diagnostics import Diagnosis
from ..training.events import Evaluation, Event, Finished, Paused, Probe, Resumed, Snapshot, Started, Steps
from .corpus import Corpus
from .features import Features
from .focus import Focus
from .jobs import Jobs, Mailbox
from .settings import Settings

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..data.corpora import Prepared
    from ..inference.attention_maps import AttentionMaps
    from ..inference.loaded import LoadedModel
    from ..inspect.probes import ProbeInput

TRAINING = "training"  # the training run's job

EVAL_ROW_LOOKBACK = 1000  # an evaluation's numbers join its step's row among the last this many rows


# ---- training ----------------------------------------------------------------------------------------------
Ending = Literal[EndStatus, "error"]  # how a training job ended: its run's status, or "error" (it failed outside the trainer)


class TrainingState(str, Enum):
    """Where training stands: no run (idle), one starting, running, paused, or stopping after its step."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"

    def __str__(self) -> str:
        return self.value

    @property
    def live(self) -> bool:
        """A run trains or is paused: its learning rate can be set, it can step or pause."""
        return self in (TrainingState.RUNNING, TrainingState.PAUSED)


class Runner(Protocol):
    """What runs a training run (on whatever thread): the commands the trainer's control takes."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def step_once(self) -> None: ...
    def set_lr(self, lr: float | None) -> None: ...
    def stop(self) -> None: ...
    def request_snapshot(self) -> None: ...
    def take_snapshot(self) -> LoadedModel | None: ...


def diverged_row(diverged: Mapping[str, Any]) -> dict:
    """A metrics-like row for the step whose numbers were not finite (`training.Finished.diverged`)."""
    def number(value: Any) -> float | None:
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    return {STEP: row_step(diverged), TRAIN_LOSS: number(diverged.get(TRAIN_LOSS)),
            GRAD_NORM: number(diverged.get(GRAD_NORM))}


class RunDiagnostics:
    """The "is this normal?" rules (`diagnostics.Diagnosis`) over the shown run: its metrics rows, its train
    settings, what its preset expects (``expected``: `presets.expected_findings`) and the head findings of its
    latest probe step. Each `diagnose` reads the rows added since the last one."""

    def __init__(self) -> None:
        self.reset([], {})

    def reset(self, rows: list[dict], train: Mapping[str, Any], meta: Mapping[str, Any] | None = None,
              expected: Mapping[str, str] | None = None) -> None:
        """Start over with these rows (a reopened or resumed run's, or none); ``meta`` its meta.json (the
        unigram entropy, a non-finite step)."""
        meta = meta or {}
        self.new: list[dict] = []  # rows the diagnosis has not read yet
        self.recent: deque[dict] = deque(maxlen=EVAL_ROW_LOOKBACK)  # the last rows (evaluations join them)
        self.heads: tuple[int, list] | None = None  # the latest probe step and its head findings
        self.add_rows(list(rows))
        info = RunMeta(meta)
        if info.diverged and info.status == "failed":
            self.add_rows([diverged_row(info.diverged)])
        self.diagnosis = self._configure(Diagnosis(), train, meta.get("unigram_entropy"), meta.get("split_gap"),
                                         expected)

    @staticmethod
    def _configure(d: Diagnosis, train: Mapping[str, Any], unigram: float | None, split: Any = None,
                   expected: Mapping[str, str] | None = None) -> Diagnosis:
        d.grad_clip, d.unigram = float(train.get("grad_clip", 0.0) or 0.0), unigram
        d.warmup = int(train.get("warmup", 0) or 0)
        d.split = split if isinstance(split, dict) else None  # meta.json's split_gap
        d.expected = dict(expected or {})
        return d

    def configure(self, train: Mapping[str, Any], unigram: float | None, split: Any = None,
                  expected: Mapping[str, str] | None = None) -> None:
        """A run started with these train settings (the rows of a resumed run already read stay read), its
        train split's unigram entropy, how its validation text differs (``split_gap``) and what its preset
        expects."""
        self._configure(self.diagnosis, train, unigram, split, expected)

    def add_rows(self, rows: list[dict]) -> None:
        self.new.extend(rows)
        self.recent.extend(rows)

    def add_evaluation(self, step: int, **numbers: Any) -> None:
        """An evaluation's numbers join its step's row (a row of its own if that is gone)."""
        row = next((r for r in reversed(self.recent) if r.get(STEP) == step), None)
        if row is None:
            row = {STEP: step}
            self.add_rows([row])
        row.update(numbers)

    def set_heads(self, heads: tuple[int, list] | None) -> bool:
        """The head findings of a probe step, unless those of a later step are known; whether they were taken."""
        if heads is None or (self.heads is not None and self.heads[0] >= heads[0]):
            return False
        self.heads = heads
        return True

    def diagnose(self) -> tuple[list[tuple[str, bool]], str]:
        """The findings so far (line, whether a warning), and the summary line."""
        new, self.new = self.new, []
        found = self.diagnosis(new, self.heads)
        return [(f.line, f.warning) for f in found], self.diagnosis.summary(found)


class Workspace:
    """What the app works on, and the commands that change it; each change is announced by a signal.

    ``jobs`` (the job system: the caller's, else one posting to ``mailbox``, which the caller drains), ``state``
    (a `TrainingState`), ``run_dir`` (the run shown or training), ``last_status`` (the last run's Finished
    status, "error" when its job failed), ``focus`` (`Focus`: the run, weights and text the views show; ``loaded``
    its weights and ``loaded_dir`` its run folder when they are not a snapshot), ``corpus`` (`Corpus`: the corpus the
    settings name, read as a job) and ``prepared`` (its `data.Prepared` while current, or None), ``prompt_text`` (the
    focus's text, the Prompt tab's), ``probe_dir`` (the run whose probe maps the Attention tab lists),
    ``diagnostics`` (`RunDiagnostics`), ``features`` (`Features`: the Features tab's dictionaries, following the
    focus).
    """

    state_changed = Signal(object)  # the new TrainingState
    event = Signal(object)  # a trainer event, once the workspace has taken it in
    ended = Signal(str)  # the runner has ended: the last status (an `Ending`)
    failed = Signal(str)  # the training job failed outside the trainer: what went wrong, in words
    run_changed = Signal(object)  # the run shown (its folder; None: none)
    probes_listed = Signal(str)  # a run folder whose saved probe maps are now the ones to show
    probe_added = Signal(int, str, object)  # a training run's probe: step, its file, its head scores
    text_maps_changed = Signal(object)  # the attention of the text in focus (None: none)
    head_chosen = Signal(object, int)  # the head in question: (its MapName, head; -1 the mean over heads)
    diagnostics_due = Signal()  # rows or head findings arrived: `diagnose` when convenient
    diagnosed = Signal(list, str)  # the findings (line, warning) and the summary

    def __init__(self, settings: Settings | None = None, jobs: Jobs | None = None, runs_root: Path | None = None):
        self.settings = settings if settings is not None else Settings()
        self._runs_root = runs_root
        self.mailbox: Mailbox | None = None
        if jobs is None:
            self.mailbox = Mailbox()
            jobs = Jobs(self.mailbox.post)
        self.jobs = jobs
        self.state = TrainingState.IDLE
        self.runner: Runner | None = None
        self.run_dir: str | None = None
        self.last_status: Ending | None = None
        self.last_evaluation = ""  # the training run's last evaluation, in words
        self.focus = Focus()
        self.focus.changed.connect(self._focus_changed)
        self.corpus = Corpus(self.settings, jobs)
        self.features = Features(self.focus, jobs)
        self.text_maps: AttentionMaps | None = None
        self._maps_of: LoadedModel | None = None  # the weights that made text_maps
        self.probe_dir: str | None = None
        self.diagnostics = RunDiagnostics()
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            Started: self._on_started, Steps: self._on_steps, Evaluation: self._on_evaluation, Paused: self._on_paused,
            Resumed: self._on_resumed, Probe: self._on_probe, Snapshot: self._on_snapshot, Finished: self._on_finished}

    # ---- state ----------------------------------------------------------------------------------------
    def _set_state(self, state: TrainingState) -> None:
        if state is not self.state:
            self.state = state
            self.state_changed.emit(state)

    @property
    def busy(self) -> bool:
        return self.state is not TrainingState.IDLE

    @property
    def loaded(self) -> LoadedModel | None:
        """The weights in focus (a run's, a snapshot's, or None)."""
        return self.focus.loaded

    @property
    def loaded_dir(self) -> str | None:
        """The run folder of the weights in focus, unless they are a snapshot of a run training (or none)."""
        return self.focus.run if self.focus.loaded is not None and not self.focus.live else None

    @property
    def prompt_text(self) -> str:
        return self.focus.text

    @property
    def runs_root(self) -> Path:
        """The runs folder: the one given, else ``$FATSTUDIO_RUNS`` or the user's data folder's."""
        if self._runs_root is not None:
            return self._runs_root
        from ..runs.folder import default_runs_root
        return default_runs_root()

    def problem(self) -> str | None:
        """What keeps a new run from starting, in words (None: nothing): the settings', else the corpus's."""
        if self.settings.error is not None:
            return self.settings.error
        corpus = self.corpus
        return f"Corpus: {corpus.error}" if corpus.error and not corpus.loading else None

    def show_text_maps(self, maps: AttentionMaps | None) -> None:
        """The attention of the text in focus (the Prompt tab's last forward pass, with the weights in focus)."""
        self.text_maps, self._maps_of = maps, self.focus.loaded
        self.text_maps_changed.emit(maps)

    def choose_head(self, name: MapName, head: int) -> None:
        """The head in question (the Paper tab shows the line that made it)."""
        self.head_chosen.emit(name, head)

    def _focus_changed(self, focus: Focus) -> None:
        if self.text_maps is not None and focus.loaded is not self._maps_of:  # another model's maps: they go
            self.show_text_maps(None)

    def set_model(self, loaded: LoadedModel | None, run_dir: str | None = None, *, imported: bool = False) -> None:
        """Focus on ``loaded``, the weights of the run folder ``run_dir`` (None with ``loaded`` None: nothing)."""
        self.focus.show(loaded, run_dir, imported=imported)

    @property
    def prepared(self) -> Prepared | None:
        """The corpus read and its tokenizer, while they are the settings' (a run or an estimate reuses them)."""
        return self.corpus.prepared

    def set_prompt_text(self, text: str) -> None:
        self.focus.set_text(text)

    def list_probes(self, run_dir: str) -> None:
        """The run whose probe maps are shown (its head findings come with `set_heads`)."""
        self.probe_dir = run_dir
        self.probes_listed.emit(run_dir)

    def show_run(self, run_dir: str | None, rows: list[dict], train: Mapping[str, Any],
                 meta: Mapping[str, Any] | None = None, config: RunConfig | None = None) -> None:
        """Show a run (None: none) with these metrics rows, train settings and meta.json: diagnosed now, with what
        the preset of its ``config`` (its settings) expects."""
        self.run_dir = run_dir
        self.show_rows(rows, train, meta, config)
        self.run_changed.emit(run_dir)

    def show_rows(self, rows: list[dict], train: Mapping[str, Any], meta: Mapping[str, Any] | None = None,
                  config: RunConfig | None = None) -> None:
        """Diagnose these metrics rows now (a reopened or resumed run's, or none)."""
        self.diagnostics.reset(rows, train, meta, expected_findings(config))
        self.diagnose()

    def set_heads(self, run_dir: str, heads: tuple[int, list] | None) -> None:
        """The head findings of ``run_dir``'s latest saved probe, read in a worker: taken unless a newer probe
        arrived or another run is shown meanwhile."""
        if self.probe_dir == run_dir and self.diagnostics.set_heads(heads):
            self.diagnose()

    def diagnose(self) -> None:
        self.diagnosed.emit(*self.diagnostics.diagnose())

    # ---- training commands -------------------------------------------------------------------------------
    def train(self, config: RunConfig, run_dir: str | None = None, resume: bool = False, probe: ProbeInput | None = None,
              init_from: str | None = None) -> bool:
        """Start a run of ``config`` (a RunConfig) as the job "training", with the corpus prepared (if it is the
        settings'); ``resume``: continue ``run_dir``, else a new run there (None: a new name in the runs folder);
        ``init_from``: a new run from that run's weights. False if a run is already under way."""
        control = Control()
        if not self.start(control, run_dir if resume else None):  # a new run's folder is said when it is made
            return False
        self.jobs.submit(TRAINING, _train, config, run_dir, resume, self.prepared, probe, init_from, control,
                         on_item=self.take, on_error=self.fail, on_end=lambda _status: self.end(), stop=control.stop)
        return True

    def start(self, runner: Runner, run_dir: str | None = None) -> bool:
        """A run starts behind ``runner`` (``run_dir``: the folder a resumed run continues)."""
        if self.busy:
            return False
        self.runner, self.run_dir = runner, run_dir
        self.last_status, self.last_evaluation = None, ""
        self._set_state(TrainingState.STARTING)
        return True

    def toggle_pause(self) -> bool:
        """Pause a running run after its step, or resume a paused one; False if neither."""
        if self.runner is None or not self.state.live:
            return False
        self.runner.pause() if self.state is TrainingState.RUNNING else self.runner.resume()
        return True

    def step_once(self) -> bool:
        """While paused: train one step, then pause again."""
        if self.runner is None or self.state is not TrainingState.PAUSED:
            return False
        self.runner.step_once()
        return True

    def set_lr(self, lr: float | None) -> bool:
        """Train at the fixed learning rate ``lr`` from the next step on, or follow the schedule (None)."""
        if self.runner is None or not self.state.live:
            return False
        self.runner.set_lr(lr)
        return True

    def stop(self) -> bool:
        """Stop after the current step (the run is saved)."""
        if self.runner is None or self.state in (TrainingState.IDLE, TrainingState.STOPPING):
            return False
        self.runner.stop()
        self._set_state(TrainingState.STOPPING)
        return True

    def request_snapshot(self) -> bool:
        """Copy the weights between two steps, for prompting (`Snapshot` brings them)."""
        if self.runner is None or self.state is not TrainingState.RUNNING:
            return False
        self.runner.request_snapshot()
        return True

    def fail(self, message: str) -> None:
        """The runner failed outside the trainer (``failed`` tells whoever shows errors)."""
        self.last_status = "error"
        self.failed.emit(message)

    def end(self) -> None:
        """The runner has ended (after its last event): idle again."""
        self.runner = None
        self.focus.trained()
        self._set_state(TrainingState.IDLE)
        self.ended.emit(self.last_status or "error")

    # ---- the trainer's events ------------------------------------------------------------------------------
    def take(self, ev: Event) -> None:
        """Take in one of the trainer's events (by type), then announce it with ``event``."""
        handler = self._handlers.get(type(ev))
        if handler is not None:
            handler(ev)
        self.event.emit(ev)

    def _on_started(self, ev: Started) -> None:
        self.run_dir = ev.run_dir
        self.focus.train(ev.run_dir)  # the views follow the run that trains
        self.diagnostics.configure(ev.config.train.to_dict(), ev.unigram_entropy, ev.split_gap,  # rows read stay read
                                   expected_findings(ev.config))
        if self.state is TrainingState.STARTING:
            self._set_state(TrainingState.RUNNING)

    def _on_steps(self, ev: Steps) -> None:
        self.diagnostics.add_rows([{STEP: s, TRAIN_LOSS: loss, LR: lr, GRAD_NORM: g}
                                   for s, loss, lr, g in zip(ev.steps, ev.train_loss, ev.lr, ev.grad_norm)])
        self.diagnostics_due.emit()

    def _on_evaluation(self, ev: Evaluation) -> None:
        self.diagnostics.add_evaluation(ev.step, eval_train_loss=ev.eval_train_loss, val_loss=ev.val_loss,
                                        accuracy=ev.accuracy)
        self.diagnostics_due.emit()
        acc = f", accuracy {ev.accuracy:.1%}" if ev.accuracy is not None else ""
        self.last_evaluation = f"step {ev.step:,}: train loss {ev.eval_train_loss:.4f}, validation loss {ev.val_loss:.4f}{acc}"

    def _on_paused(self, ev: Paused) -> None:
        if self.state is not TrainingState.STOPPING:
            self._set_state(TrainingState.PAUSED)

    def _on_resumed(self, ev: Resumed) -> None:
        if self.state is not TrainingState.STOPPING:
            self._set_state(TrainingState.RUNNING)

    def _on_probe(self, ev: Probe) -> None:
        self.diagnostics.heads = (ev.step, list(ev.findings))
        self.diagnostics_due.emit()
        self.probe_added.emit(ev.step, ev.path, ev.scores)

    def _on_snapshot(self, ev: Snapshot) -> None:
        loaded = self.runner.take_snapshot() if self.runner is not None else None
        if not ev.message and loaded is not None:
            self.focus.show(loaded, self.run_dir, live=True)

    def _on_finished(self, ev: Finished) -> None:
        self.last_status = ev.status
        if ev.diverged:
            self.diagnostics.add_rows([diverged_row(ev.diverged)])
        self.diagnose()


def _train(config: RunConfig, run_dir: str | None, resume: bool, prepared: Prepared | None, probe: ProbeInput | None,
           init_from: str | None, control: Control) -> Iterator[Event]:
    """In the training job's thread: the trainer's generator (importing it imports torch, there and not in the
    owner's thread)."""
    from ..training.trainer import train

    return train(config, run_dir=run_dir, resume=resume, control=control, prepared=prepared, probe=probe,
                 init_from=init_from)
