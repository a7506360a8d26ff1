"""Training (paper §8; the losses of Algorithms 11-13 and classification) as a generator of small plain
events — floats and strings, never tensors — that a CLI, a test or a GUI worker thread iterates.

``train(config)`` does all the slow setup inside the generator (corpus, tokenizer, dataset, model), then
steps: minibatches, AdamW or the paper's plain SGD, linear warm-up then cosine or constant learning rate,
weight decay on ≥2-D weights only, gradient clipping, periodic evaluation with a sample, checkpoints. It
honours a `Control`'s stop / pause / single-step / learning-rate / snapshot requests between steps. A
non-finite loss ends the run as "failed" with a message; the last good checkpoint stays.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .config import RunConfig, TrainConfig
from .data import IGNORE, Corpus, Dataset, Prepared
from .device import (
    OutOfMemory,
    autocast,
    configure_matmul,
    deterministic,
    free_memory,
    is_out_of_memory,
    model_device,
    oom_message,
    pin,
    resolve_device,
    resolve_precision,
    rng_state,
    set_rng_state,
    to_device,
)
from .diagnostics import Finding
from .distributed import World
from .probes import ProbeInput
from .runs import LoadedModel, Run
from .tokenization import Tokenizer

EMIT_INTERVAL_S = 0.1  # per-step numbers are batched: at most ~10 Steps events a second

Batch = dict[str, torch.Tensor]  # see `data.Dataset.batch` for each task's keys


# ---- events --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True)
class Prepare(Event):
    message: str
    fraction: float


@dataclass(frozen=True)
class Started(Event):
    run_dir: str
    start_step: int
    total_steps: int
    n_parameters: int
    device: str
    precision: str  # what train.precision resolved to on this device ("auto" → "bf16" or "fp32")
    deterministic: bool  # whether the same seed repeats the run bit for bit (not for GPU kernels)
    config: dict
    unigram_entropy: float | None = None  # of the train split's tokens, nats (next_token, masked_lm); see `diagnostics`
    chars_per_token: dict[str, float] | None = None  # per split (next_token, masked_lm); see `chars_per_token`


@dataclass(frozen=True)
class Steps(Event):
    """The steps since the last Steps event (one emission window), each with its own numbers."""

    steps: list[int]
    train_loss: list[float]  # each step's minibatch loss
    lr: list[float]
    grad_norm: list[float | None]  # before clipping; None where loss scaling skipped the step
    tokens_per_s: float  # the window's throughput
    step: int
    total_steps: int
    elapsed_s: float
    eta_s: float


@dataclass(frozen=True)
class Evaluation(Event):
    step: int
    eval_train_loss: float  # mean loss over eval_iters batches of the train split (not one step's loss)
    val_loss: float
    accuracy: float | None = None  # token (or class) accuracy on the validation split


@dataclass(frozen=True)
class Probe(Event):
    """Every head's attention map for the run's probe input at an evaluation step is saved at ``path``
    (``probes/step-NNNNNNNN.safetensors``; read it with `Run.load_probe` or `probes.load_probe_file`), with the
    step's head scores: ``scores`` as saved there (`head_scores.HeadScores.to_dict`, plain JSON), and
    ``findings``, the dead (or, late, uniform) heads of those maps (`diagnostics.head_findings`)."""

    step: int
    path: str
    scores: dict | None = None
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Sample(Event):
    step: int
    text: str


@dataclass(frozen=True)
class Checkpoint(Event):
    step: int
    path: str


@dataclass(frozen=True)
class Paused(Event):
    step: int


@dataclass(frozen=True)
class Resumed(Event):
    step: int


@dataclass(frozen=True)
class Snapshot(Event):
    step: int
    message: str = ""  # why no snapshot was made (then the Control holds none)


@dataclass(frozen=True)
class Note(Event):
    message: str  # something a person should know about the run, e.g. that torch.compile was not used


@dataclass(frozen=True)
class Finished(Event):
    step: int
    status: str  # "finished" | "stopped" | "failed"
    message: str
    diverged: dict | None = None  # a non-finite step: {"step", "train_loss", "grad_norm"}, the numbers as strings


class Control:
    """Requests from another thread, honoured by the trainer between steps.

    Besides stop / pause / resume / snapshot: ``step_once()`` (while paused) runs exactly one step, with its
    usual events, and pauses again; ``set_lr(η)`` replaces the learning-rate schedule by the fixed value η
    from the next step on (what metrics.jsonl records as ``lr``), ``set_lr(None)`` returns to the schedule
    at the step it has reached. The override belongs to this Control: a resumed run follows its schedule."""

    def __init__(self):
        self._stop, self._run = threading.Event(), threading.Event()
        self._run.set()
        self._snapshot_wanted = threading.Event()
        self._step_wanted = threading.Event()
        self._snapshot: LoadedModel | None = None
        self._lr: float | None = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()  # a paused trainer wakes up to stop

    def pause(self) -> None:
        self._step_wanted.clear()  # a step asked for before this pause is not taken after it
        self._run.clear()

    def step_once(self) -> None:
        """While paused: run one step (its events as usual), then pause again. Not paused: nothing."""
        if self.paused and not self.stopping:
            self._step_wanted.set()

    def _take_step(self) -> bool:
        """Whether one step was asked for (and no longer is)."""
        wanted = self._step_wanted.is_set()
        self._step_wanted.clear()
        return wanted

    def set_lr(self, lr: float | None) -> None:
        """Train at the fixed learning rate ``lr`` from the next step on, instead of the schedule; None: back
        to the schedule. ValueError for a negative or non-finite value."""
        if lr is not None:
            lr = float(lr)
            if not math.isfinite(lr) or lr < 0:
                raise ValueError(f"the learning rate must be a finite number ≥ 0, not {lr}.")
        with self._lock:
            self._lr = lr

    @property
    def lr_override(self) -> float | None:
        """The fixed learning rate set by `set_lr`, or None (the schedule)."""
        with self._lock:
            return self._lr

    def resume(self) -> None:
        self._run.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def paused(self) -> bool:
        return not self._run.is_set()

    def wait_while_paused(self, timeout: float) -> None:
        self._run.wait(timeout)

    def request_snapshot(self) -> None:
        self._snapshot_wanted.set()

    @property
    def snapshot_wanted(self) -> bool:
        return self._snapshot_wanted.is_set()

    def _deliver(self, snapshot: LoadedModel | None) -> None:
        with self._lock:
            self._snapshot = snapshot
        self._snapshot_wanted.clear()

    def take_snapshot(self) -> LoadedModel | None:
        with self._lock:
            snap, self._snapshot = self._snapshot, None
        return snap


# ---- pieces ---------------------------------------------------------------------------------------------
def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from lr down to min_lr at ``steps`` (or constant)."""
    if step < t.warmup:
        return t.lr * (step + 1) / (t.warmup + 1)
    if t.lr_schedule == "constant":
        return t.lr
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


def make_optimizer(model: torch.nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on ≥2-D weights only, or the paper's plain SGD θ ← θ - η∇loss (+ decay)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr)
    fused = all(p.device.type in ("cpu", "cuda", "mps") for p in params)  # one kernel for the whole update
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)


def task_loss(model, batch: Batch, task: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over the counted positions (Algorithms 11, 12, 13; classification), with the
    logits and targets it was computed from. The paper sums over positions; the mean only rescales η.
    ``batch`` is on the model's device (see `device.to_device`); its ``*_pad_mask`` are padding masks,
    passed as the model's ``mask`` / ``context_mask``."""
    if task == "classification":
        logits = model.classify(batch["x"], mask=batch["x_pad_mask"])
        return F.cross_entropy(_at_least_fp32(logits), batch["label"]), logits, batch["label"]
    if task == "seq2seq":  # Algorithm 11: P = EDTransformer(z, x)
        logits = model(batch["x"], context=batch["z"], mask=batch["x_pad_mask"], context_mask=batch["z_pad_mask"])
    else:  # Algorithm 12 (only masked positions count) and Algorithm 13; a window without padding has no padding mask
        logits = model(batch["x"], mask=batch.get("x_pad_mask"))
    y = batch["y"]
    return F.cross_entropy(_at_least_fp32(logits.flatten(0, 1)), y.flatten(), ignore_index=IGNORE), logits, y


def _at_least_fp32(logits: torch.Tensor) -> torch.Tensor:
    """The loss is computed in fp32 (or the model's float64) even when autocast made the logits half."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def _tokens_in(batch: Batch) -> int:
    return int(batch["x"].numel() + (batch["z"].numel() if "z" in batch else 0))


def next_batch(dataset, split: str, batch_size: int, generator: torch.Generator, dev: torch.device,
               world: World | None = None) -> Batch:
    """A minibatch drawn on the CPU (so the data order does not depend on the device) and moved to ``dev``,
    through pinned memory on CUDA so the copy does not stall the GPU; under torchrun (``world``) this
    process's rows of it (`distributed`)."""
    batch = dataset.batch(split, batch_size, generator)
    if world is not None and world.distributed:
        batch = world.shard(batch)
    return to_device(pin(batch, dev), dev)


@torch.no_grad()
def evaluate(model, dataset, task: str, t: TrainConfig, dev: torch.device, seed: int,
             precision: str = "fp32") -> tuple[float, float, float]:
    """Mean loss on ``eval_iters`` batches of each split (the same batches every time), and val accuracy.
    The numbers stay on the device until the one read at the end."""
    was_training = model.training
    model.eval()
    sums = []
    correct = torch.zeros((), dtype=torch.long, device=dev)
    counted = torch.zeros((), dtype=torch.long, device=dev)
    for split in ("train", "val"):
        g = torch.Generator().manual_seed(seed + (1 if split == "val" else 0))
        total = torch.zeros((), device=dev)
        for _ in range(t.eval_iters):
            with autocast(dev, precision):
                loss, logits, y = task_loss(model, next_batch(dataset, split, t.batch_size, g, dev), task)
            total += loss.float()
            if split == "val":
                keep = y != IGNORE
                correct += (logits.argmax(-1) == y)[keep].sum()
                counted += keep.sum()
        sums.append(total)
    model.train(was_training)
    tr, va, c, n = torch.stack([*sums, correct.float(), counted.float()]).tolist()
    return tr / t.eval_iters, va / t.eval_iters, c / max(1.0, n)


def _snapshot(model, tokenizer, config: RunConfig, class_names, run: Run, step: int) -> LoadedModel:
    """A float32 CPU copy of the weights for prompting while training goes on, made from the state dict so
    nothing new is allocated on the GPU (``model`` is never the compiled one)."""
    from .model import build_model

    m = build_model(config.model)
    m.load_state_dict({k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()})
    return LoadedModel(m.eval(), tokenizer, config, list(class_names), f"{run.name} · snapshot at step {step}", step)


def make_sample(model, tokenizer, dataset, task: str, t: TrainConfig, seed: int, split: str = "val") -> str:
    """A human-readable sample of what the model does now, for each task type, from an example of ``split``."""
    from . import inference

    g = torch.Generator().manual_seed(seed)
    batch = dataset.batch(split, 1, g)
    if task == "next_token":
        prompt = tokenizer.decode(batch["x"][0, :8].tolist())
        text = "".join(c.text for c in inference.generate(model, tokenizer, prompt, tokens=t.sample_tokens,
                                                          temperature=0.8, seed=seed))
        return prompt + text
    if task == "seq2seq":
        source = tokenizer.decode(batch["z"][0].tolist())
        target = tokenizer.decode(batch["y"][0][batch["y"][0] != IGNORE].tolist())
        out = "".join(c.text for c in inference.translate(model, tokenizer, source))
        return f"{source} → {out}   (target: {target})"
    if task == "classification":
        text = tokenizer.decode(batch["x"][0][batch["x_pad_mask"][0]].tolist())
        probs = inference.classify(model, tokenizer, text, dataset.class_names)
        truth = dataset.class_names[int(batch["label"][0])]
        return f"{text} → {probs[0][0]} ({probs[0][1]:.0%})   (true: {truth})"
    x = batch["x"][0]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        pred = model(**to_device({"x": x[None]}, model_device(model)))[0].argmax(-1).cpu()
    model.train(was_training)
    filled = torch.where(x == tokenizer.mask_id, pred, x)
    return f"{tokenizer.decode(x.tolist())}\n→ {tokenizer.decode(filled.tolist())}"


def compile_problem(dev: torch.device) -> str | None:
    """Why torch.compile cannot work here, or None: no Dynamo for this Python, no Triton for the GPU (e.g. on
    Windows), no C++ compiler for the CPU."""
    import shutil

    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python"
    if dev.type == "cuda":
        from torch.utils._triton import has_triton
        if not has_triton():
            return "torch.compile needs Triton for the GPU, and it is not installed"
    if dev.type == "cpu" and not any(shutil.which(c) for c in ("c++", "g++", "clang++", "cl")):
        return "torch.compile needs a C++ compiler for the CPU, and none was found"
    return None


LossFunction = Callable[[Batch], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class _TaskLoss(torch.nn.Module):
    """task_loss on ``model`` as a module's forward: what DistributedDataParallel wraps (it synchronises
    the gradients of what its forward computed, so classification's ``model.classify`` must run inside)."""

    def __init__(self, model: torch.nn.Module, task: str):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return task_loss(self.model, batch, self.task)


def _loss_function(eager: LossFunction, compiled: bool) -> LossFunction:
    """What each training step calls: the task's loss (`task_loss`, or the DDP module computing it), compiled
    as a whole (so classification's ``model.classify`` is compiled too, not only ``forward``) or eager.
    Compiling starts from a clean slate: what an earlier run in this process compiled is dropped
    (torch._dynamo.reset)."""
    if not compiled:
        return eager
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(eager)


# ---- the loop -------------------------------------------------------------------------------------------
def train(config: RunConfig, *, run_dir: str | Path | None = None, resume: bool = False,
          control: Control | None = None, runs_root: Path | None = None,
          prepared: Prepared | None = None, probe: ProbeInput | str | None = None) -> Iterator[Event]:
    """Train per ``config``; yield events. ``probe`` is the input whose attention maps are saved at every
    evaluation (`probes`; a text alone for gpt/gopher/bert; default: the run's own when resuming, else one
    from the validation split). ``resume=True`` continues the run at ``run_dir`` from its last
    checkpoint (``config.train.steps`` may be raised). ``prepared`` (a corpus and tokenizer made for the same
    data settings, e.g. by the GUI's corpus preview) is used instead of loading and training them again; one
    made for other settings is ignored. Bad input raises ValueError while iterating; running out of memory
    while setting up raises `device.OutOfMemory` (a ValueError), and in the loop ends the run as failed.

    Under torchrun (`distributed`) every process calls this; rank 0 alone opens or writes the run and
    yields events past Prepare (the others yield Finished at the end)."""
    control = control or Control()
    config.validate()
    t = config.train
    world = World.from_env()
    dev = resolve_device(t.device)
    locked: list[Run] = []  # the run this process trains holds its lock (`Run.lock`) until training ends
    try:
        if world.distributed:
            dev = world.start(dev, t.batch_size)
        yield from _train(config, world, dev, run_dir, resume, control, runs_root, prepared, probe, locked)
    finally:
        for run in locked:
            run.unlock()
        world.end()


def _train(config: RunConfig, world: World, dev: torch.device, run_dir: str | Path | None, resume: bool,
           control: Control, runs_root: Path | None, prepared: Prepared | None, probe: ProbeInput | str | None,
           locked: list[Run]) -> Iterator[Event]:
    t = config.train
    precision = resolve_precision(t.precision, dev)
    torch.manual_seed(t.seed)
    run = None
    if resume and world.is_main:
        if run_dir is None:
            raise ValueError("resuming needs the folder of the run to continue.")
        run = Run.open(run_dir)
        run.lock()  # a second process training it is refused here, before anything is read or written
        locked.append(run)
        if not run.has_checkpoint:
            raise ValueError(f"{run.path} has no checkpoint to resume from; start a new run instead.")
    elif run_dir is not None and world.is_main:
        Run.check_new(run_dir)  # never over an earlier run; said before the corpus is prepared
    tokenizer, dataset, config, chars = yield from _prepare_data(config, run, prepared, world)
    yield Prepare("building the model", 0.9)
    loop = _Loop(config, dev, precision, tokenizer, dataset, control, world)
    loop.locked = locked
    loop.probe_input = ProbeInput(probe) if isinstance(probe, str) else probe
    try:
        start = loop.open(run, run_dir, runs_root)
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        del loop  # drop the model and optimizer state before freeing the device's cache
        free_memory(dev)
        raise OutOfMemory(oom_message("building the model and its optimizer state", dev)) from None
    if t.compile:
        problem = compile_problem(dev)
        if problem:
            yield Note(f"{problem}; training without compiling.")
        loop.compiled = not problem
        loop.loss = _loss_function(loop.eager_loss, compiled=loop.compiled)
    if not world.is_main:
        yield from loop.run_steps(start)
        return
    loop.run.write_meta(chars_per_token=chars)
    yield Started(str(loop.run.path), start, t.steps, loop.model.num_parameters(), str(dev), precision,
                  deterministic(dev), config.to_dict(), loop.run.meta.get("unigram_entropy"), chars)
    yield from loop.run_steps(start)


def _prepare_data(config: RunConfig, run: Run | None, prepared: Prepared | None, world: World | None = None
                  ) -> Generator[Prepare, None, tuple[Tokenizer, Dataset, RunConfig, dict[str, float] | None]]:
    """Corpus, tokenizer (the run's own when resuming) and dataset, as Prepare events while they load;
    returns them with the config whose N_V (model.vocab_size) and n_classes come from them, and the
    corpus's characters per token (`chars_per_token`). Under torchrun (``world``) rank 0 makes the
    tokenizer and the other processes take a copy of it."""
    from .data import build_dataset, load_corpus  # looked up per call (tests substitute them)
    from .tokenization import train_tokenizer

    t, d = config.train, config.data
    vocab_cap = d.vocab_size  # data.vocab_size: the most tokens the tokenizer may have (word, bpe)
    if prepared is not None and not prepared.serves(d.corpus, d.task, d.tokenizer, vocab_cap, t.seed):
        prepared = None
    if prepared:
        corpus = prepared.corpus
        yield Prepare(f"using corpus {d.corpus} as loaded", 0.2)
    else:
        yield Prepare(f"loading corpus {d.corpus}", 0.0)
        corpus = yield from _with_progress(lambda progress: load_corpus(d.corpus, d.task, progress, t.seed), 0.0, 0.2)
        for note in corpus.notes:
            yield Prepare(note, 0.2)
    world = world or World()
    tokenizer: Tokenizer | None = None
    if run:
        tokenizer = run.load_tokenizer()
    elif prepared:
        tokenizer = prepared.tokenizer
    elif world.is_main:
        yield Prepare(f"training the {d.tokenizer} tokenizer", 0.2)
        tokenizer = yield from _with_progress(
            lambda progress: train_tokenizer(d.tokenizer, corpus.texts(), vocab_cap, progress), 0.2, 0.4)
    if world.distributed:
        tokenizer = Tokenizer.from_json(world.share(tokenizer.to_json() if tokenizer else None))
    assert tokenizer is not None
    yield Prepare("tokenizing the corpus", 0.4)
    dataset = yield from _with_progress(lambda progress: build_dataset(
        corpus, tokenizer, d.task, config.model.l_max, d.val_fraction, d.p_mask, t.seed, progress), 0.4, 0.9)
    mcfg = config.model.replace(vocab_size=tokenizer.vocab_size,  # N_V: the tokenizer's actual size
                                n_classes=dataset.n_classes if d.task == "classification" else 0)
    return tokenizer, dataset, RunConfig(mcfg, d, t).validate(), chars_per_token(corpus, tokenizer, dataset)


def chars_per_token(corpus: Corpus, tokenizer: Tokenizer, dataset: Dataset) -> dict[str, float] | None:
    """Characters per token of each split of a text stream (next_token, masked_lm), ``{"train": …, "val": …}``
    ("val" only where there is a validation split): a split's loss of ℓ nats per token is ℓ / ln 2 / its
    ratio bits per character. Each split has its own (a BPE's differ by 10 % on python-stdlib). None for
    paired or labelled corpora (seq2seq, classification), whose loss is not over one text."""
    sizes = dataset.sizes()
    if corpus.kind != "text" or not sizes.get("train_tokens"):
        return None
    counted = dataset.split_chars()  # a streamed corpus's, counted as it was encoded (it holds no text)
    if counted is not None:
        return {split: n / sizes[f"{split}_tokens"] for split, n in counted.items()}
    if not corpus.text:
        return None
    n_val = sizes.get("val_tokens", 0)
    val_chars = _tail_chars(corpus.text, tokenizer, n_val)
    ratios = {"train": (len(corpus.text) - val_chars) / sizes["train_tokens"]}
    if n_val:
        ratios["val"] = val_chars / n_val
    return ratios


def _tail_chars(text: str, tokenizer: Tokenizer, n: int) -> int:
    """The characters that the last ``n`` tokens of ``text``'s token stream cover: the pieces `encode_corpus`
    encodes (cut where no token spans) encoded again from the end, the split found by the tokens' offsets."""
    from itertools import accumulate

    from .tokenization import split_text

    covered = 0  # characters of the pieces wholly in the tail
    ends = [0, *accumulate(len(piece) for piece in split_text(text))]
    for lo, hi in reversed(list(zip(ends, ends[1:]))):
        if n <= 0:
            break
        offsets = tokenizer.backend.encode_batch([text[lo:hi]], add_special_tokens=False)[0].offsets  # GIL released
        if len(offsets) >= n:
            return covered + (hi - lo) - offsets[-n][0]
        n -= len(offsets)
        covered += hi - lo
    return covered


@dataclass
class _Numbers:
    """One emission window's per-step numbers as Python values (``grad_norm`` as the device computed it:
    possibly inf or NaN)."""

    steps: list[int]
    lr: list[float]
    train_loss: list[float]
    grad_norm: list[float]

    def first_non_finite(self, loss_scaling: bool) -> int | None:
        """The index of the first step whose loss is not finite, or whose gradient norm is not, unless loss
        scaling is on (it skips such steps and lowers its scale); None if every step is fine."""
        for i, (loss, norm) in enumerate(zip(self.train_loss, self.grad_norm)):
            if not math.isfinite(loss) or (not loss_scaling and not math.isfinite(norm)):
                return i
        return None

    def head(self, n: int) -> _Numbers:
        return _Numbers(self.steps[:n], self.lr[:n], self.train_loss[:n], self.grad_norm[:n])

    def finite_grad_norms(self) -> list[float | None]:
        """The gradient norms with None for the steps loss scaling skipped (their gradient overflowed), so
        metrics.jsonl stays strict JSON and the plots see no inf/NaN."""
        return [g if math.isfinite(g) else None for g in self.grad_norm]

    def rows(self, tokens_per_s: float | None = None) -> list[dict]:
        """metrics.jsonl rows, one per step (see `runs`); with ``tokens_per_s`` (the window's throughput) on
        each, the last marked ``window_end``."""
        rows = []
        for step, lr, loss, norm in zip(self.steps, self.lr, self.train_loss, self.finite_grad_norms()):
            row: dict = {"step": step, "train_loss": loss, "lr": lr, "grad_norm": norm}
            if norm is None:
                row["skipped"] = True
            if tokens_per_s is not None:
                row["tokens_per_s"] = tokens_per_s
            rows.append(row)
        if rows and tokens_per_s is not None:
            rows[-1]["window_end"] = True
        return rows


@dataclass
class _Window:
    """The steps since the last emission. Their losses and gradient norms wait on the device until `read`;
    ``tokens`` counts what was trained on since ``since``, the start of the window's timing."""

    since: float = 0.0
    tokens: int = 0
    steps: list[int] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)  # (loss, grad_norm) per step, on the device

    def add(self, step: int, lr: float, loss: torch.Tensor, grad_norm: torch.Tensor, tokens: int) -> None:
        self.steps.append(step)
        self.lr.append(lr)
        self.values.append(torch.stack([loss.float(), grad_norm.float()]))
        self.tokens += tokens

    def restart_clock(self) -> None:
        """Time from now on (after start-up, a pause or an emission's evaluation, sample and checkpoint)."""
        self.since, self.tokens = time.perf_counter(), 0

    def tokens_per_s(self, now: float) -> float:
        return self.tokens / max(now - self.since, 1e-9)

    def read(self, mean: Callable[[torch.Tensor], torch.Tensor] | None = None) -> _Numbers:
        """The pending steps' numbers, read from the device at once (averaged over the processes by ``mean``
        under torchrun); the window keeps no steps after it."""
        values = torch.stack(self.values)
        pairs = (mean(values) if mean else values).tolist()
        numbers = _Numbers(self.steps, self.lr, [loss for loss, _ in pairs], [norm for _, norm in pairs])
        self.steps, self.lr, self.values = [], [], []
        return numbers


class _Loop:
    """One run's model, optimizer and run folder, and the steps between checkpoints. Losses and gradient
    norms stay on the device and are read once per emission (about ten times a second), where the
    non-finite check runs too; a checkpoint always comes after such a check."""

    probe_input: ProbeInput | None = None  # the probe asked for (see `_open_probe`)
    probe: ProbeInput | None = None  # the run's probe, and the ids the model reads for it
    probe_ids: tuple[list[int], list[int] | None] | None = None
    diverged: dict | None = None  # the step whose numbers were not finite (see `Finished`)
    locked: list[Run] | None = None  # where a run this loop creates and locks goes (`train` unlocks them)

    def __init__(self, config: RunConfig, dev: torch.device, precision: str, tokenizer: Tokenizer, dataset: Dataset,
                 control: Control, world: World | None = None):
        self.config, self.dev, self.precision = config, dev, precision
        self.tokenizer, self.dataset, self.control = tokenizer, dataset, control
        self.world = world or World()
        self.agreed_stop = False  # under torchrun: a stop every process agreed on (`World.agree`)
        self.t, self.task = config.train, config.data.task
        self.data_gen = torch.Generator().manual_seed(self.t.seed)
        self.has_val = any(v for k, v in dataset.sizes().items() if k.startswith("val"))  # val_fraction = 0: none
        self.window = _Window()
        self.lr = 0.0  # the learning rate of the latest step (the schedule's or the Control's override)
        self.start = 0
        self.t_start: float | None = None  # when the step after the first began: start-up is not step time

    def build(self) -> None:
        """The model, optimizer, loss scaler and loss function on the device (eager, not compiled)."""
        from .model import build_model

        configure_matmul(self.dev, self.precision)
        self.model = build_model(self.config.model).to(self.dev)
        self.optimizer = make_optimizer(self.model, self.t)
        self.scaler = torch.amp.GradScaler(self.dev.type, enabled=self.precision == "fp16")
        self.compiled = False
        self.eager_loss: torch.nn.Module = _TaskLoss(self.model, self.task)  # under torchrun, its DDP wrapper
        self.loss: LossFunction = self.eager_loss

    def open(self, run: Run | None, run_dir: str | Path | None, runs_root: Path | None) -> int:
        """`build`, then resume or create the run folder; the start step. Under torchrun rank 0 does the
        folder's work and hands the start step and the optimizer and random states to the others; the
        model goes under DistributedDataParallel, which copies rank 0's weights to them."""
        self.build()
        start, state = 0, None
        if self.world.is_main:
            start, state = self._open_run(run, run_dir, runs_root)
        if self.world.distributed:
            start, state = self.world.share((start, state))
            self.eager_loss = self.loss = self.world.wrap(self.eager_loss, self.dev, self.task == "classification")
        if state:
            self.optimizer.load_state_dict(state["optimizer"])
            self.data_gen.set_state(state["data_rng"])
            set_rng_state(state, self.dev)
        return start

    def _open_run(self, run: Run | None, run_dir: str | Path | None, runs_root: Path | None) -> tuple[int, dict | None]:
        """Resume (the weights loaded; the start step and the training state saved with them, if it matches)
        or create the run folder."""
        t, start, state = self.t, 0, None
        if run:
            start = run.load_weights(self.model)
            state = run.load_training_state()
            if not (state and state.get("step") == start):
                state = None
            run.truncate_after(start)
            run.write_config(self.config)
        else:
            out = Path(run_dir) if run_dir else None
            run = Run.create(self.config, out.parent if out else runs_root, out.name if out else None,
                             lock=self.locked is not None)
            if self.locked is not None:
                self.locked.append(run)
            run.save_tokenizer(self.tokenizer)
        self.run = run
        run.write_meta(status="running", total_steps=t.steps, device=str(self.dev), precision=self.precision,
                       n_parameters=self.model.num_parameters(), class_names=self.dataset.class_names, seed=t.seed,
                       data_sizes=self.dataset.sizes(), unigram_entropy=self.dataset.unigram_entropy(),
                       processes=self.world.size)
        self._open_probe()
        return start, state

    # -- one step ---------------------------------------------------------------------------------------------
    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One minibatch update at learning rate lr_at(step), or the Control's fixed override (kept as
        ``self.lr``, what the step's row records); the loss and gradient norm as device scalars."""
        override = self.control.lr_override
        t, lr = self.t, lr_at(step, self.t) if override is None else override
        self.lr = lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = next_batch(self.dataset, "train", t.batch_size, self.data_gen, self.dev, self.world)
        with autocast(self.dev, self.precision):
            loss, _, _ = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach(), grad_norm, _tokens_in(batch) * self.world.size

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
    def run_steps(self, start: int) -> Iterator[Event]:
        """Step from ``start`` to train.steps, honouring the Control between steps, emitting (see `_emit`)
        about ten times a second and at every evaluation and checkpoint; then checkpoint and finish.
        Whatever happens, the run folder is not left "running". Pausing or stopping first announces the
        steps done so far (their rows are on disk before the last checkpoint); a step asked for while
        paused (`Control.step_once`) is announced at once, then Paused again."""
        t, control = self.t, self.control
        self.start, step = start, start
        self.model.train()
        status, message = "finished", f"trained {t.steps} steps"
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
                    self.run.try_write_meta(status="failed", step=step)  # a full disk: the error is told
                raise
            self.optimizer.zero_grad(set_to_none=True)
            free_memory(self.dev)
            status = "failed"
            message = oom_message(f"training at step {step + 1}", self.dev) + " The last checkpoint is kept."
        except BaseException as e:  # the consumer closing us (GeneratorExit), Ctrl-C: never leave the run "running"
            if self.world.is_main:
                self.run.try_write_meta(status="failed" if not isinstance(e, GeneratorExit) else "stopped", step=step)
            raise
        if self.world.is_main:  # saved and marked before they are announced: a consumer may close us there
            try:
                checkpoint = self.checkpoint(step) if status != "failed" else None
            except Exception:  # a full disk: the previous checkpoint stays, the run is not left "running"
                self.run.try_write_meta(status="failed", step=step)
                raise
            self.run.write_meta(status=status, step=step)
            if checkpoint:
                yield checkpoint
        yield Finished(step, status, message, self.diverged)

    def _pause(self, step: int) -> Generator[Event, None, bool]:
        """Wait while paused (or until stopped), making the snapshots asked for meanwhile. True when one step
        was asked for (`Control.step_once`): the caller takes it still paused, with no Resumed."""
        control = self.control
        yield Paused(step)
        while control.paused and not control.stopping:
            if control._take_step():
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
            self.run.append_metrics(numbers.head(bad).rows())
            self.diverged = {"step": numbers.steps[bad], "train_loss": str(numbers.train_loss[bad]),
                             "grad_norm": str(numbers.grad_norm[bad])}
            self.run.write_meta(diverged=self.diverged)
            return self._diverged(numbers, bad), numbers.steps[bad] - 1
        tokens_per_s = self.window.tokens_per_s(now)
        yield self._steps_event(numbers, tokens_per_s, step, now)
        rows = numbers.rows(tokens_per_s)
        evaluating = self._evaluation_due(step)
        evaluation = self._evaluate(step) if evaluating and self.has_val else None
        if evaluation:
            rows[-1].update(eval_train_loss=evaluation.eval_train_loss, val_loss=evaluation.val_loss,
                            accuracy=evaluation.accuracy)
        self.run.append_metrics(rows)  # on disk before the events that announce it
        if evaluation:
            yield evaluation
        if evaluating and self.probe_ids is not None:
            yield self._probe(step)
        if evaluating and self.t.sample_tokens:
            yield self._sample(step)
        if self._checkpoint_due(step):
            yield self.checkpoint(step)
            self.run.write_meta(step=step)
        self.window.restart_clock()
        return None

    def _steps_event(self, numbers: _Numbers, tokens_per_s: float, step: int, now: float) -> Steps:
        """Steps with the elapsed time and the time to go, both from step time only (no start-up)."""
        assert self.t_start is not None  # set by the first step, before any emission
        t, elapsed = self.t, now - self.t_start
        eta = elapsed / max(1, step - self.start - 1) * (t.steps - step)
        return Steps(numbers.steps, numbers.train_loss, numbers.lr, numbers.finite_grad_norms(), tokens_per_s,
                     step, t.steps, elapsed, eta)

    def _evaluate(self, step: int) -> Evaluation:
        """Evaluate both splits (`evaluate`) and record the validation loss in meta.json."""
        tr, va, acc = evaluate(self.model, self.dataset, self.task, self.t, self.dev, self.t.seed, self.precision)
        self.run.write_meta(step=step, best_val_loss=min(va, self.run.meta.get("best_val_loss", math.inf)), val_loss=va)
        return Evaluation(step, tr, va, acc)

    def _open_probe(self) -> None:
        """The run's probe input: the one asked for, else the run's own (resuming), else the task's default
        (`probes.default_probe`); recorded in meta.json and encoded once. A probe asked for that the model
        cannot read raises ValueError; a default that cannot be made leaves the run without probe maps."""
        from . import probes

        mcfg, asked = self.config.model, self.probe_input
        probe = asked or self.run.probe_input()
        try:
            if probe is None:
                probe = probes.default_probe(self.dataset, self.tokenizer, self.task, mcfg.l_max, self.t.seed)
            self.probe_ids = probe.encode(self.tokenizer, mcfg.arch, self.task, mcfg.l_max)
        except ValueError as e:
            if asked is not None:
                raise ValueError(f"the probe input {asked.describe()} cannot be used: {e}") from None
            return
        self.probe = probe
        self.run.write_meta(**{probes.META_KEY: probe.to_dict()})

    def _probe(self, step: int) -> Probe:
        """Save every head's attention map for the probe at ``step`` (one forward pass, float16 on disk) and
        the step's head scores (`probes.measure_scores`: one more small forward pass for induction)."""
        from .diagnostics import head_findings
        from .probes import measure_scores, probe_maps, save_probe

        assert self.probe_ids is not None
        ids, context = self.probe_ids
        maps = probe_maps(self.model, self.tokenizer, ids, context)
        scores = measure_scores(self.model, self.tokenizer, maps)
        path = save_probe(self.run.path, step, maps, self.probe, scores)
        return Probe(step, str(path), scores.to_dict(), tuple(head_findings(maps, step)))

    def _sample(self, step: int) -> Sample:
        text = make_sample(self.model, self.tokenizer, self.dataset, self.task, self.t, self.t.seed + step,
                           "val" if self.has_val else "train")
        self.run.append_sample(step, text)
        return Sample(step, text)

    def _diverged(self, numbers: _Numbers, i: int) -> str:
        last = self.run.meta.get("checkpoint_step")
        loss, norm, step = numbers.train_loss[i], numbers.grad_norm[i], numbers.steps[i]
        what = f"the loss became {loss}" if not math.isfinite(loss) else f"the gradient norm became {norm}"
        return (f"{what} at step {step}; training stopped. "
                + (f"The last good checkpoint (step {last}) is kept. " if last else "")
                + "Try a lower learning rate or gradient clipping.")

    def checkpoint(self, step: int) -> Checkpoint:
        self.run.save_checkpoint(self.model, self.optimizer, step,
                                 {"data_rng": self.data_gen.get_state(), **rng_state(self.dev)})
        return Checkpoint(step, str(self.run.path / "model.safetensors"))

    def snapshot(self, step: int) -> Snapshot:
        """Hand the Control a CPU copy of the weights; running out of memory for it is told, not fatal."""
        try:
            snap = _snapshot(self.model, self.tokenizer, self.config, self.dataset.class_names, self.run, step)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            free_memory(self.dev)
            self.control._deliver(None)
            return Snapshot(step, oom_message("copying the weights for prompting", "cpu"))
        self.control._deliver(snap)
        return Snapshot(step)


def _with_progress(fn, lo: float, hi: float):
    """Run ``fn(progress)`` in a helper thread, yielding its (fraction, message) reports as Prepare events
    while it works; return its result (``result = yield from _with_progress(...)``), re-raising its error."""
    reports: list[tuple[float, str]] = []
    result: dict = {}

    def target():
        try:
            result["value"] = fn(lambda fraction, message: reports.append((fraction, message)))
        except BaseException as e:  # re-raised in the generator's thread below
            result["error"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
        if reports:
            fraction, message = reports[-1]
            reports.clear()
            yield Prepare(message, lo + (hi - lo) * min(max(fraction, 0.0), 1.0))
    if "error" in result:
        raise result["error"]
    return result["value"]
