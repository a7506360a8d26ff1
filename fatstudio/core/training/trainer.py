"""The trainer: `Trainer` (one run's model, optimizer and steps, announcing them as events) and `train`, which
prepares the data, opens the run folder and drives a Trainer (see the package's docstring).
"""
from __future__ import annotations

import contextlib
import math
import shutil
import time
from collections.abc import Collection, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch

from .. import model as models  # models.build_model looked up per call (tests substitute it)
from ..config import ResolvedPrecision, RunConfig
from ..data.chars import val_bytes_per_token
from ..data.corpora import Dataset, Prepared, short_splits_note, split_record
from ..data.tokenization import Tokenizer
from ..device import (
    OutOfMemory,
    autocast,
    compile_problem,
    configure_matmul,
    deterministic,
    free_memory,
    is_out_of_memory,
    oom_message,
    resolve_device,
    resolve_precision,
    rng_state,
    set_rng_state,
)
from ..distributed import World
from ..inference.loaded import LoadedModel
from ..inspect import grokking, probe_lens, probes
from ..inspect.probes import ProbeInput
from ..memory import check_fits
from ..records import EndStatus
from ..runs import snapshots
from ..runs.folder import Run
from ..runs.init_from import init_config
from ..runs.weights import OPTIMIZER
from .control import Control
from .diagnostics import head_findings, split_mismatch
from .events import (
    Checkpoint,
    Evaluation,
    Event,
    Finished,
    Note,
    Paused,
    Prepare,
    Probe,
    Resumed,
    Sample,
    Snapshot,
    Started,
    Steps,
)
from .loss import LossFunction, TaskLoss, evaluate, loss_function, next_batch, tokens_in
from .preparation import prepare
from .recorder import Recorder
from .sample import make_sample
from .schedule import lr_at, make_optimizer, set_lr
from .window import Numbers, Window

EMIT_INTERVAL_S = 0.1  # per-step numbers are batched: at most ~10 Steps events a second
E = TypeVar("E", bound=Event)


def _snapshot(model, tokenizer, config: RunConfig, class_names, run: Run, step: int) -> LoadedModel:
    """A float32 CPU copy of the weights for prompting while training goes on, made from the state dict so
    nothing new is allocated on the GPU (``model`` is never the compiled one)."""
    m = models.build_model(config.model)
    m.load_state_dict({k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()})
    return LoadedModel(m.eval(), tokenizer, config, list(class_names), f"{run.name} · snapshot at step {step}", step)


# ---- the loop -------------------------------------------------------------------------------------------
def train(config: RunConfig, *, run_dir: str | Path | None = None, resume: bool = False,
          control: Control | None = None, runs_root: Path | None = None,
          prepared: Prepared | None = None, probe: ProbeInput | str | None = None,
          init_from: str | Path | None = None, given: Collection[str] | None = None) -> Iterator[Event]:
    """Train per ``config``; yield events. ``init_from``: a new run that starts from that run's weights and
    tokenizer (an imported or an earlier run), its model settings and task (`init_config`: a key of them that the
    config sets, ``given``, to another value is refused naming it; a Note says what comes from it), at step 0.
    ``probe`` is the input whose attention maps are saved at every evaluation (`probes`; a text alone for
    gpt/gopher/bert; default: the run's own when resuming, else one from the validation split). ``resume=True``
    continues the run at ``run_dir`` from its last checkpoint (``config.train.steps`` may be raised). ``prepared``
    (a corpus and tokenizer made for the same data settings, e.g. by the GUI's corpus preview) is used instead of
    loading and training them again; one made for other settings is ignored. Bad input raises ValueError while
    iterating; running out of memory while setting up raises `device.OutOfMemory` (a ValueError), and in the loop
    ends the run as failed.

    Under torchrun (`distributed`) every process calls this; rank 0 alone opens or writes the run and
    yields events past Prepare (the others yield Finished at the end)."""
    control = control or Control()
    init = Run.open(init_from) if init_from is not None else None
    if init is not None:
        if resume:
            raise ValueError("--init-from starts a new run; --resume continues one. Give one of them.")
        if not init.has_checkpoint:
            raise ValueError(f"{init.path} has no weights to start from (model.safetensors).")
        config, said = init_config(config, init, given)
    config.validate()
    t = config.train
    world = World.from_env()
    dev = resolve_device(t.device)
    locked: list[Run] = []  # the run this process trains holds its lock (`Run.lock`) until training ends
    try:
        if init is not None and world.is_main:
            yield Note(said)
        if world.distributed:
            dev = world.start(dev, t.batch_size)
        yield from _train(config, world, dev, run_dir, resume, control, runs_root, prepared, probe, locked, init)
    finally:
        for run in locked:
            run.unlock()
        world.end()


def _train(config: RunConfig, world: World, dev: torch.device, run_dir: str | Path | None, resume: bool,
           control: Control, runs_root: Path | None, prepared: Prepared | None, probe: ProbeInput | str | None,
           locked: list[Run], init: Run | None) -> Iterator[Event]:
    t = config.train
    precision = resolve_precision(t.precision, dev)
    check_fits(config.model, t.batch_size, dev, optimizer=t.optimizer, precision=precision)  # before the corpus
    torch.manual_seed(t.seed)
    run = None
    if resume and world.is_main:
        if run_dir is None:
            raise ValueError("resuming needs the folder of the run to continue.")
        run = Run.open(run_dir)
        run.lock()  # a second process training it is refused here, before anything is read or written
        locked.append(run)
        if why := run.resume_problem():
            raise ValueError(why)
        run.check_agreement()  # files of another run are refused before the corpus is read
    elif run_dir is not None and world.is_main:
        Run.check_new(run_dir)  # never over an earlier run; said before the corpus is prepared
    tokenizer, dataset, config, chars = yield from prepare(config, run or init, prepared, world)
    if init is not None and config.model.n_classes != init.config.model.n_classes:  # a class head of another size
        raise ValueError(f"--init-from {init.path}: its class head has {init.config.model.n_classes} classes, the "
                         f"corpus {config.model.n_classes}; a classifier starts from one of as many classes.")
    short = short_splits_note(dataset, config.model.l_max)
    if short and world.is_main:
        yield Note(short)
    for unlike in split_mismatch(split_record(config.data, dataset)) if world.is_main else ():
        yield Note(unlike.advice)  # the terminal's line; the Diagnostics tab lists it too
    yield Prepare("building the model", 0.9)
    problem = compile_problem(dev) if t.compile else None
    existed = run_dir is not None and Path(run_dir).is_dir()
    trainer = events = None
    try:  # a new run interrupted (Ctrl-C, SIGTERM, the generator closed) before its first step leaves no folder
        try:
            trainer = Trainer(config, tokenizer, dataset, dev, precision, control, world,
                              compiled=t.compile and not problem,
                              probe=ProbeInput(probe) if isinstance(probe, str) else probe, locked=locked)
            start = trainer.open(run, run_dir, runs_root, init)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            trainer = None  # drop the model and optimizer state before freeing the device's cache
            free_memory(dev)
            raise OutOfMemory(oom_message("building the model and its optimizer state", dev)) from None
        if problem:
            yield Note(f"{problem}; training without compiling.")
        for note in trainer.notes:
            yield Note(note)
        events = trainer.run(start)
        if world.is_main:
            trainer.folder.write_meta(chars_per_token=chars,
                                      val_bytes_per_token=val_bytes_per_token(tokenizer, trainer.dataset))
            yield Started(str(trainer.folder.path), start, t.steps, trainer.model.num_parameters(), str(dev),
                          precision, deterministic(dev), config, trainer.folder.meta.get("unigram_entropy"), chars,
                          trainer.folder.meta.get("split_gap"))
        for ev in events:
            yield ev
            if isinstance(ev, Steps):
                break
    except BaseException as e:
        if events is not None:
            events.close()
        if run is None and world.is_main and locked and not isinstance(e, Exception):  # errors keep a failed run
            _discard(locked[-1], existed)
        raise
    yield from events


def _discard(folder: Run, keep_empty: bool) -> None:
    """Remove a run folder this training made before it took a step (an --out folder that was there before,
    empty, stays, emptied)."""
    folder.close()
    folder.unlock()
    shutil.rmtree(folder.path, ignore_errors=True)
    if keep_empty:
        with contextlib.suppress(OSError):
            folder.path.mkdir()


class Trainer:
    """One run's model, optimizer and loss on a device, and the steps between checkpoints. Losses and
    gradient norms stay on the device and are read once per emission (about ten times a second), where the
    non-finite check runs too; a checkpoint always comes after such a check.

    Its life: ``Trainer(...)`` builds the model, optimizer, loss scaler and loss function on ``dev`` (eager);
    `step` takes one optimisation step and writes nothing (what `estimate` times); `open` resumes or creates
    the run folder (``folder``), sets up its `Recorder` and returns the step to start from (under torchrun
    it wraps the loss in DistributedDataParallel, and with ``compiled`` compiles it); `run` then yields the
    events of the steps from there to train.steps. ``probe`` is the probe input asked for (see `_choose_probe`);
    ``locked`` collects a run folder this trainer creates and locks (`train` unlocks it)."""

    def __init__(self, config: RunConfig, tokenizer: Tokenizer, dataset: Dataset, dev: torch.device, precision: ResolvedPrecision,
                 control: Control | None = None, world: World | None = None, *, compiled: bool = False,
                 probe: ProbeInput | None = None, locked: list[Run] | None = None):
        self.config, self.dev, self.precision = config, dev, precision
        self.tokenizer, self.dataset, self.control = tokenizer, dataset, control or Control()
        self.world = world or World()
        self.compile_asked, self.probe_input, self.locked = compiled, probe, locked
        self.probe: ProbeInput | None = None  # the run's probe, and the ids the model reads for it (`open`)
        self.probe_ids: tuple[list[int], list[int] | None] | None = None
        self.diverged: dict | None = None  # the step whose numbers were not finite (see `Finished`)
        self.agreed_stop = False  # under torchrun: a stop every process agreed on (`World.agree`)
        self.t, self.task = config.train, config.data.task
        self.data_gen = torch.Generator().manual_seed(self.t.seed)
        self.has_val = any(v for k, v in dataset.sizes().items() if k.startswith("val"))  # val_fraction = 0: none
        self.window = Window()
        self.lr = 0.0  # the learning rate of the latest step (the schedule's or the Control's override)
        self.start = 0
        self.t_start: float | None = None  # when the step after the first began: start-up is not step time
        configure_matmul(self.dev, self.precision)
        check_fits(config.model, self.t.batch_size, dev, optimizer=self.t.optimizer, precision=precision)  # N_V known
        self.model = models.build_model(self.config.model).to(self.dev)
        self.optimizer = make_optimizer(self.model, self.t)
        self.scaler = torch.amp.GradScaler(self.dev.type, enabled=self.precision == "fp16")
        self.compiled = False
        self.eager_loss: torch.nn.Module = TaskLoss(self.model, self.task)  # under torchrun, its DDP wrapper
        self.loss: LossFunction = self.eager_loss
        self.folder: Run  # the run folder, from `open`
        self.notes: list[str] = []  # what `open` found that the run should say (`Note`s): optimizer state not restored
        self.snapshot_every = 0  # every how many evaluations the weights are saved (`snapshots.stride`; 0 never)
        self.recorder: Recorder

    def open(self, run: Run | None, run_dir: str | Path | None, runs_root: Path | None, init: Run | None = None) -> int:
        """Resume ``run`` or create the run folder (at ``run_dir``, else under ``runs_root``); the start step.
        Under torchrun rank 0 does the folder's work and hands the start step and the optimizer and random
        states to the others; the model goes under DistributedDataParallel, which copies rank 0's weights to
        them. Then the loss function is compiled, if asked. ``init``: a new run starts from that run's weights."""
        start, state = 0, None
        if self.world.is_main:
            start, state = self._open_run(run, run_dir, runs_root, init)
        if self.world.distributed:
            start, state = self.world.share((start, state))
            self.eager_loss = self.loss = self.world.wrap(self.eager_loss, self.dev, self.task == "classification")
        if state:
            self.optimizer.load_state_dict(state["optimizer"])
            self.data_gen.set_state(state["data_rng"])
            set_rng_state(state, self.dev)
        self.compiled = self.compile_asked
        self.loss = loss_function(self.eager_loss, compiled=self.compiled)
        return start

    def _open_run(self, run: Run | None, run_dir: str | Path | None, runs_root: Path | None,
                  init: Run | None) -> tuple[int, dict | None]:
        """Resume (the weights loaded; the start step and the training state saved with them, if it matches)
        or create the run folder (its weights ``init``'s, if given)."""
        t, start, state = self.t, 0, None
        self._choose_probe(run)  # a probe asked for that cannot be used is refused before any folder is made
        if run:
            start = run.load_weights(self.model)
            state = run.load_training_state(self.model.num_parameters())
            if not (state and state.get("step") == start):  # none, or another step's (a crash between the two files)
                kept = f"of step {state.get('step')}" if state else "missing"
                self.notes.append(f"{run.path / OPTIMIZER} is {kept}, the weights of step {start}: the optimizer "
                                  f"starts afresh at step {start} (its moments and the random state are not restored).")
                state = None
            run.truncate_after(start)
            run.write_config(self.config)
        else:
            out = Path(run_dir) if run_dir else None
            run = Run.create(self.config, out.parent if out else runs_root, out.name if out else None,
                             lock=self.locked is not None, tuned_from=init.name if init is not None else None)
            if self.locked is not None:
                self.locked.append(run)
            run.save_tokenizer(self.tokenizer)
            if init is not None:
                init.load_weights(self.model)
                run.write_meta(init_from=str(init.path))
        if unverified := (init or run).unverified():
            self.notes.append(unverified)
        self.folder, self.recorder = run, Recorder(run)
        if t.keep_weights == "evaluations":
            self.snapshot_every = snapshots.stride(snapshots.snapshot_bytes(self.model), t.steps, t.eval_interval)
        run.write_meta(status="running", total_steps=t.steps, device=str(self.dev), precision=self.precision,
                       n_parameters=self.model.num_parameters(), class_names=self.dataset.class_names, seed=t.seed,
                       data_sizes=self.dataset.sizes(), unigram_entropy=self.dataset.unigram_entropy(),
                       split_gap=split_record(self.config.data, self.dataset), processes=self.world.size)
        if self.probe is not None:
            saved: dict[str, Any] = {probes.META_KEY: self.probe.to_dict()}
            run.write_meta(**saved)
        return start, state

    # -- one step ---------------------------------------------------------------------------------------------
    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One minibatch update at learning rate lr_at(step), or the Control's fixed override (kept as
        ``self.lr``, what the step's row records); the loss and gradient norm as device scalars."""
        override = self.control.lr_override
        t, lr = self.t, lr_at(step, self.t) if override is None else override
        self.lr = lr
        set_lr(self.optimizer, lr, t)
        batch = next_batch(self.dataset, "train", t.batch_size, self.data_gen, self.dev, self.world)
        with autocast(self.dev, self.precision):
            loss, _, _ = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach(), grad_norm, tokens_in(batch) * self.world.size

    def _first_step(self, step: int) -> tuple[tuple[torch.Tensor, torch.Tensor, int], Note | None]:
        """The first step, where torch.compile compiles; if compiling fails the step runs again eagerly."""
        try:
            return self.step(step), None
        except Exception as e:
            if is_out_of_memory(e) or not self.compiled:
                raise
            self.compiled = False
            self.loss = self.eager_loss
            self.optimizer.zero_grad(set_to_none=True)
            reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            return self.step(step), Note(f"torch.compile failed ({reason}); training without compiling.")

    def _timed_step(self, step: int) -> Note | None:
        """Step ``step`` into the window. The first step (start-up, compiling) is left out of the timing:
        the clocks start once the device has finished it."""
        if self.t_start is not None:
            (loss, grad_norm, tokens), note = self.step(step), None
        else:
            (loss, grad_norm, tokens), note = self._first_step(step)
        self.window.add(step + 1, self.lr, loss, grad_norm, tokens)
        if self.t_start is None:
            loss.item()  # wait for the device: what follows is step time
            self.window.restart_clock()
            self.t_start = self.window.since
        return note

    # -- the steps ---------------------------------------------------------------------------------------------
    def run(self, start: int) -> Generator[Event, None, None]:
        """Step from ``start`` to train.steps, honouring the Control between steps, emitting (see `_emit`)
        about ten times a second and at every evaluation and checkpoint; then checkpoint and finish.
        Whatever happens, the run folder is not left "running". Pausing or stopping first announces the
        steps done so far (their rows are on disk before the last checkpoint); a step asked for while
        paused (`Control.step_once`) is announced at once, then Paused again."""
        t, control = self.t, self.control
        self.start, step = start, start
        self.model.train()
        status: EndStatus = "finished"
        message = f"trained {t.steps} steps"
        single = False  # the coming step is one asked for while paused
        try:
            while step < t.steps:
                stopping = self.agreed_stop if self.world.distributed else control.stopping
                if (control.paused or stopping) and self.window.steps:  # first announce the steps done so far
                    diverged = yield from self._emit(step)
                    if diverged:
                        message, step = diverged
                        status = "failed"
                        break
                if control.paused and not stopping:
                    single = yield from self._pause(step)
                    stopping = control.stopping
                elif single:  # resumed or stopped while the single step ran: the pause is over
                    single = False
                    yield Resumed(step)
                    self.window.restart_clock()
                if stopping:
                    status, message = "stopped", f"stopped at step {step}, checkpoint saved"
                    break
                if control.snapshot_wanted:
                    yield self.snapshot(step)
                note = self._timed_step(step)
                if note:
                    yield note
                step += 1
                due = single or self._emission_due(step)
                if self.world.distributed:  # the same steps in every process (`World.agree`)
                    due, self.agreed_stop = self.world.agree(due, control.stopping)
                if due:
                    diverged = yield from self._emit(step)
                    if diverged:
                        message, step = diverged
                        status = "failed"
                        break
        except Exception as e:
            if not is_out_of_memory(e):
                if self.world.is_main:
                    self.folder.try_write_meta(status="failed", step=step)  # a full disk: the error is told
                raise
            self.optimizer.zero_grad(set_to_none=True)
            free_memory(self.dev)
            status = "failed"
            message = oom_message(f"training at step {step + 1}", self.dev) + " The last checkpoint is kept."
        except BaseException as e:  # the consumer closing us (GeneratorExit), Ctrl-C: never leave the run "running"
            if self.world.is_main:
                self.folder.try_write_meta(status="failed" if not isinstance(e, GeneratorExit) else "stopped", step=step)
            raise
        if self.world.is_main:  # saved and marked before they are announced: a consumer may close us there
            try:
                checkpoint = self.checkpoint(step) if status != "failed" else None
            except Exception:  # a full disk: the previous checkpoint stays, the run is not left "running"
                self.folder.try_write_meta(status="failed", step=step)
                raise
            self.folder.write_meta(status=status, step=step)
            if checkpoint:
                yield checkpoint
        yield Finished(step, status, message, self.diverged)

    def _pause(self, step: int) -> Generator[Event, None, bool]:
        """Wait while paused (or until stopped), making the snapshots asked for meanwhile. True when one step
        was asked for (`Control.step_once`): the caller takes it still paused, with no Resumed."""
        control = self.control
        yield Paused(step)
        while control.paused and not control.stopping:
            if control.step_requested():
                self.window.restart_clock()
                return True
            control.wait_while_paused(0.05)
            if control.snapshot_wanted:
                yield self.snapshot(step)
        yield Resumed(step)
        self.window.restart_clock()
        return False

    def _evaluation_due(self, step: int) -> bool:
        return step % self.t.eval_interval == 0 or step == self.t.steps

    def _checkpoint_due(self, step: int) -> bool:
        return step % self.t.checkpoint_interval == 0 and step < self.t.steps

    def _emission_due(self, step: int) -> bool:
        return (time.perf_counter() - self.window.since >= EMIT_INTERVAL_S or self._evaluation_due(step)
                or self._checkpoint_due(step) or step == self.t.steps)

    def _emit(self, step: int) -> Generator[Event, None, tuple[str, int] | None]:
        """Announce the window's steps, all done up to ``step``: read their numbers from the device once, check
        them, yield Steps, write them to metrics.jsonl, then the evaluation, sample and checkpoint due now.
        A non-finite number ends it early: the steps before it are written (with no throughput: the window
        did not finish) and (the message, the last good step) returned."""
        numbers = self.window.read(self.world.mean if self.world.distributed else None)
        now = time.perf_counter()
        bad = numbers.first_non_finite(loss_scaling=self.scaler.is_enabled())
        if not self.world.is_main:  # rank 0 writes and reports; the others stop where it stops
            self.window.restart_clock()
            return None if bad is None else ("", numbers.steps[bad] - 1)
        if bad is not None:
            self.diverged = {"step": numbers.steps[bad], "train_loss": str(numbers.train_loss[bad]),
                             "grad_norm": str(numbers.grad_norm[bad])}
            self.recorder.diverged(numbers.head(bad).rows(), self.diverged)
            return self._diverged(numbers, bad), numbers.steps[bad] - 1
        tokens_per_s = self.window.tokens_per_s(now)
        yield self._recorded(self._steps_event(numbers, tokens_per_s, step, now))
        evaluating = self._evaluation_due(step)
        evaluation = self._recorded(self._evaluate(step)) if evaluating and self.has_val else None
        self.recorder.flush()  # on disk before the events that announce it
        if evaluating and snapshots.due(step, self.t.eval_interval, self.snapshot_every):
            # the weights of the evaluated model
            snapshots.save_snapshot(self.folder.path, self.model, step, self.folder.meta.get("run_id"))
        if evaluation:
            yield evaluation
        if evaluating and self.probe_ids is not None:
            yield self._probe(step)
        if evaluating and self.t.sample_tokens:
            yield self._recorded(self._sample(step))
        if self._checkpoint_due(step):
            yield self._recorded(self.checkpoint(step))
        self.window.restart_clock()
        return None

    def _recorded(self, event: E) -> E:
        """``event``, written to the run folder by the recorder before it is announced."""
        self.recorder.record(event)
        return event

    def _steps_event(self, numbers: Numbers, tokens_per_s: float, step: int, now: float) -> Steps:
        """Steps with the elapsed time and the time to go, both from step time only (no start-up)."""
        assert self.t_start is not None  # set by the first step, before any emission
        t, elapsed = self.t, now - self.t_start
        eta = elapsed / max(1, step - self.start - 1) * (t.steps - step)
        return Steps(numbers.steps, numbers.train_loss, numbers.lr, numbers.finite_grad_norms(), tokens_per_s,
                     step, t.steps, elapsed, eta)

    def _evaluate(self, step: int) -> Evaluation:
        """Evaluate both splits (`evaluate`), measure the weights' norm and, on "modadd", the embedding's
        Fourier energy (`grokking`)."""
        tr, va, acc, train_acc = evaluate(self.model, self.dataset, self.task, self.t, self.dev, self.t.seed,
                                          self.precision)
        p = self.config.data.modadd_p if self.config.data.corpus == "modadd" else None
        fourier = tuple(grokking.fourier_energy(grokking.number_embedding(self.model, self.tokenizer, p))) if p else None
        return Evaluation(step, tr, va, acc, train_acc, grokking.weight_norm(self.model), fourier)

    def _choose_probe(self, run: Run | None) -> None:
        """The run's probe input: the one asked for, else ``run``'s own (resuming), else the task's default
        (`probes.default_probe`), encoded once (`_open_run` records it in meta.json). A probe asked for that the
        model cannot read raises ValueError; a default that cannot be made leaves the run without probe maps."""
        mcfg, asked = self.config.model, self.probe_input
        probe = asked or (run.probe_input() if run else None)
        try:
            if probe is None:
                probe = probes.default_probe(self.dataset, self.tokenizer, self.task, mcfg.l_max, self.t.seed)
            self.probe_ids = probe.encode(self.tokenizer, mcfg.arch, self.task, mcfg.l_max)
        except ValueError as e:
            if asked is not None:
                raise ValueError(f"the probe input {asked.describe()} cannot be used: {e}") from None
            return
        self.probe = probe

    def _probe(self, step: int) -> Probe:
        """Save every head's attention map for the probe at ``step`` (one forward pass, float16 on disk), the
        step's head scores (`probes.measure_scores`: one more small forward pass for induction) and, but for a
        classifier, its logit lens and attribution (`probe_lens.measure`: one pass, one per attributed position)."""
        assert self.probe_ids is not None
        ids, context = self.probe_ids
        maps = probes.probe_maps(self.model, self.tokenizer, ids, context)
        scores = probes.measure_scores(self.model, self.tokenizer, maps)
        lens = None if self.task == "classification" else probe_lens.measure(self.model, self.tokenizer, ids, context)
        path = probes.save_probe(self.folder.path, step, maps, self.probe, scores, lens)
        return Probe(step, str(path), scores.to_dict(), tuple(head_findings(maps, step)))

    def _sample(self, step: int) -> Sample:
        text = make_sample(self.model, self.tokenizer, self.dataset, self.task, self.t, self.t.seed + step,
                           "val" if self.has_val else "train")
        return Sample(step, text)

    def _diverged(self, numbers: Numbers, i: int) -> str:
        last = self.folder.meta.get("checkpoint_step")
        loss, norm, step = numbers.train_loss[i], numbers.grad_norm[i], numbers.steps[i]
        what = f"the loss became {loss}" if not math.isfinite(loss) else f"the gradient norm became {norm}"
        return (f"{what} at step {step}; training stopped. "
                + (f"The last good checkpoint (step {last}) is kept. " if last else "")
                + "Try a lower learning rate or gradient clipping.")

    def checkpoint(self, step: int) -> Checkpoint:
        self.folder.save_checkpoint(self.model, self.optimizer, step,
                                 {"data_rng": self.data_gen.get_state(), **rng_state(self.dev)})
        return Checkpoint(step, str(self.folder.path / "model.safetensors"))

    def snapshot(self, step: int) -> Snapshot:
        """Hand the Control a CPU copy of the weights; running out of memory for it is told, not fatal."""
        try:
            snap = _snapshot(self.model, self.tokenizer, self.config, self.dataset.class_names, self.folder, step)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            free_memory(self.dev)
            self.control.deliver(None)
            return Snapshot(step, oom_message("copying the weights for prompting", "cpu"))
        self.control.deliver(snap)
        return Snapshot(step)
