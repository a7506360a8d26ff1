"""Training (paper §8; the losses of Algorithms 11-13 and classification) as a generator of small plain
events — floats and strings, never tensors — that a CLI, a test or a GUI worker thread iterates.

``train(config)`` does all the slow setup inside the generator (corpus, tokenizer, dataset, model), then
steps: minibatches, AdamW or the paper's plain SGD, linear warm-up then cosine or constant learning rate,
weight decay on ≥2-D weights only, gradient clipping, periodic evaluation with a sample, checkpoints. It
honours a `Control`'s stop / pause / snapshot requests between steps. A non-finite loss ends the run as
"failed" with a message; the last good checkpoint stays.
"""
from __future__ import annotations

import copy
import math
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F

from .config import RunConfig, TrainConfig
from .data import IGNORE, Prepared
from .runs import LoadedModel, Run

EMIT_INTERVAL_S = 0.1  # per-step numbers are batched: at most ~10 Steps events a second


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
    config: dict


@dataclass(frozen=True)
class Steps(Event):
    steps: list[int]
    train_loss: list[float]
    lr: list[float]
    grad_norm: list[float]
    tokens_per_s: float
    step: int
    total_steps: int
    elapsed_s: float
    eta_s: float


@dataclass(frozen=True)
class Evaluation(Event):
    step: int
    train_loss: float
    val_loss: float
    accuracy: float | None = None  # token (or class) accuracy on the validation split


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


@dataclass(frozen=True)
class Finished(Event):
    step: int
    status: str  # "finished" | "stopped" | "failed"
    message: str


class Control:
    """Requests from another thread, honoured by the trainer between steps."""

    def __init__(self):
        self._stop, self._run = threading.Event(), threading.Event()
        self._run.set()
        self._snapshot_wanted = threading.Event()
        self._snapshot: LoadedModel | None = None
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()  # a paused trainer wakes up to stop

    def pause(self) -> None:
        self._run.clear()

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

    def _deliver(self, snapshot: LoadedModel) -> None:
        with self._lock:
            self._snapshot = snapshot
        self._snapshot_wanted.clear()

    def take_snapshot(self) -> LoadedModel | None:
        with self._lock:
            snap, self._snapshot = self._snapshot, None
        return snap


# ---- pieces ---------------------------------------------------------------------------------------------
def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device = 'cuda' but no CUDA GPU is available; use 'auto' or 'cpu'.")
    if name == "mps" and not _mps_available():
        raise ValueError("train.device = 'mps' but Apple's MPS is not available; use 'auto' or 'cpu'.")
    return torch.device(name)


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
    fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel for the whole update
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)


def task_loss(model, batch: dict, task: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over the counted positions (Algorithms 11, 12, 13; classification), with the
    logits and targets it was computed from. The paper sums over positions; the mean only rescales η."""
    if task == "classification":
        logits = model.classify(batch["x"], mask=batch["mask"])
        return F.cross_entropy(logits, batch["label"]), logits, batch["label"]
    if task == "seq2seq":  # Algorithm 11: P = EDTransformer(z, x)
        logits = model(batch["x"], context=batch["z"], mask=batch["x_mask"], context_mask=batch["z_mask"])
    elif task == "masked_lm":  # Algorithm 12: only masked positions count
        logits = model(batch["x"], mask=batch["mask"])
    else:  # Algorithm 13
        logits = model(batch["x"])
    y = batch["y"]
    flat = logits.flatten(0, 1)
    flat = flat.float() if flat.dtype in (torch.float16, torch.bfloat16) else flat  # the loss in ≥ fp32
    return F.cross_entropy(flat, y.flatten(), ignore_index=IGNORE), logits, y


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    keep = y != IGNORE
    return int((logits.argmax(-1)[keep] == y[keep]).sum()), int(keep.sum())


def _autocast(device: torch.device, precision: str):
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _tokens_in(batch: dict) -> int:
    return int(batch["x"].numel() + (batch["z"].numel() if "z" in batch else 0))


@torch.no_grad()
def evaluate(model, dataset, task: str, t: TrainConfig, device, seed: int) -> tuple[float, float, float]:
    """Mean loss on ``eval_iters`` batches of each split (the same batches every time), and val accuracy."""
    was_training = model.training
    model.eval()
    out = []
    correct = counted = 0
    for split in ("train", "val"):
        g = torch.Generator().manual_seed(seed + (1 if split == "val" else 0))
        losses = []
        for _ in range(t.eval_iters):
            with _autocast(device, t.precision):
                loss, logits, y = task_loss(model, _to(dataset.batch(split, t.batch_size, g), device), task)
            losses.append(loss.item())
            if split == "val":
                c, n = _accuracy(logits, y)
                correct, counted = correct + c, counted + n
        out.append(sum(losses) / len(losses))
    model.train(was_training)
    return out[0], out[1], correct / max(1, counted)


def _snapshot(model, tokenizer, config: RunConfig, class_names, run: Run, step: int) -> LoadedModel:
    """A CPU copy of the weights for prompting while training goes on (``model`` is never the compiled one)."""
    m = copy.deepcopy(model).to("cpu").float().eval()
    return LoadedModel(m, tokenizer, config, list(class_names), f"{run.name} · snapshot at step {step}", step)


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
        text = tokenizer.decode(batch["x"][0][batch["mask"][0]].tolist())
        probs = inference.classify(model, tokenizer, text, dataset.class_names)
        truth = dataset.class_names[int(batch["label"][0])]
        return f"{text} → {probs[0][0]} ({probs[0][1]:.0%})   (true: {truth})"
    x = batch["x"][0][batch["mask"][0]]
    with torch.no_grad():
        pred = model(x[None]).argmax(-1)[0]
    filled = torch.where(x == tokenizer.mask_id, pred, x)
    return f"{tokenizer.decode(x.tolist())}\n→ {tokenizer.decode(filled.tolist())}"


# ---- the loop -------------------------------------------------------------------------------------------
def train(config: RunConfig, *, run_dir: str | Path | None = None, resume: bool = False,
          control: Control | None = None, runs_root: Path | None = None,
          prepared: Prepared | None = None) -> Iterator[Event]:
    """Train per ``config``; yield events. ``resume=True`` continues the run at ``run_dir`` from its last
    checkpoint (``config.train.steps`` may be raised). ``prepared`` (a corpus and tokenizer made for the same
    data settings, e.g. by the GUI's preview) is used instead of loading and training them again; one made
    for other settings is ignored. Bad input raises ValueError while iterating."""
    from .data import build_dataset, load_corpus  # looked up per call (tests substitute them)
    from .model import build_model
    from .tokenization import train_tokenizer

    control = control or Control()
    config.validate()
    t, d = config.train, config.data
    device = resolve_device(t.device)
    if t.precision == "fp16" and device.type == "cpu":
        raise ValueError("train.precision = 'fp16' needs a GPU; on the CPU use 'bf16' or 'fp32'.")
    torch.manual_seed(t.seed)

    run = Run.open(run_dir) if resume else None
    if resume and not run.has_checkpoint:
        raise ValueError(f"{run.path} has no checkpoint to resume from; start a new run instead.")
    if prepared is not None and not prepared.serves(d.corpus, d.task, d.tokenizer, d.vocab_size, t.seed):
        prepared = None
    if prepared:
        corpus = prepared.corpus
        yield Prepare(f"using corpus {d.corpus} as loaded", 0.2)
    else:
        yield Prepare(f"loading corpus {d.corpus}", 0.0)
        corpus = yield from _with_progress(lambda progress: load_corpus(d.corpus, d.task, progress, t.seed), 0.0, 0.2)
        for note in corpus.notes:
            yield Prepare(note, 0.1)
    if run:
        tokenizer = run.load_tokenizer()
    elif prepared:
        tokenizer = prepared.tokenizer
    else:
        yield Prepare(f"training the {d.tokenizer} tokenizer", 0.2)
        tokenizer = yield from _with_progress(
            lambda progress: train_tokenizer(d.tokenizer, corpus.texts(), d.vocab_size, progress), 0.2, 0.4)
    yield Prepare("tokenizing the corpus", 0.4)
    dataset = yield from _with_progress(lambda progress: build_dataset(
        corpus, tokenizer, d.task, config.model.l_max, d.val_fraction, d.p_mask, t.seed, progress), 0.4, 0.9)
    mcfg = config.model.replace(vocab_size=tokenizer.vocab_size,
                                n_classes=dataset.n_classes if d.task == "classification" else 0)
    config = RunConfig(mcfg, d, t).validate()
    yield Prepare("building the model", 0.9)
    model = build_model(mcfg).to(device)
    optimizer = make_optimizer(model, t)
    data_gen = torch.Generator().manual_seed(t.seed)
    start = 0
    if run:
        start = run.load_weights(model)
        state = run.load_training_state()
        if state and state.get("step") == start:
            optimizer.load_state_dict(state["optimizer"])
            data_gen.set_state(state["data_rng"])
            torch.set_rng_state(state["torch_rng"])
        run.truncate_after(start)
        run.write_config(config)
    else:
        out = Path(run_dir) if run_dir else None
        run = Run.create(config, out.parent if out else runs_root, out.name if out else None)
        run.save_tokenizer(tokenizer)
    run.write_meta(status="running", total_steps=t.steps, device=str(device), n_parameters=model.num_parameters(),
                   class_names=dataset.class_names, seed=t.seed, data_sizes=dataset.sizes())
    has_val = any(v for k, v in dataset.sizes().items() if k.startswith("val"))  # val_fraction = 0: none
    step_model = torch.compile(model) if t.compile else model
    scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16")
    yield Started(str(run.path), start, t.steps, model.num_parameters(), str(device), config.to_dict())

    def snapshot(step: int) -> Snapshot:
        control._deliver(_snapshot(model, tokenizer, config, dataset.class_names, run, step))
        return Snapshot(step)

    def checkpoint(step: int) -> Checkpoint:
        run.save_checkpoint(model, optimizer, step, {"data_rng": data_gen.get_state(), "torch_rng": torch.get_rng_state()})
        return Checkpoint(step, str(run.path / "model.safetensors"))

    pending: list[dict] = []
    t_start = t_emit = time.perf_counter()
    tokens_window = 0
    step = start
    model.train()
    status, message = "finished", f"trained {t.steps} steps"
    try:
        while step < t.steps:
            if control.paused and not control.stopping:
                yield Paused(step)
                while control.paused and not control.stopping:
                    control.wait_while_paused(0.1)
                    if control.snapshot_wanted:
                        yield snapshot(step)
                yield Resumed(step)
                t_emit = time.perf_counter()
            if control.stopping:
                status, message = "stopped", f"stopped at step {step}"
                break
            if control.snapshot_wanted:
                yield snapshot(step)
            lr = lr_at(step, t)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = _to(dataset.batch("train", t.batch_size, data_gen), device)
            with _autocast(device, t.precision):
                loss, _, _ = task_loss(step_model, batch, d.task)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip if t.grad_clip > 0 else math.inf)
            scaler.step(optimizer)
            scaler.update()
            loss_value = loss.item()
            step += 1
            if not math.isfinite(loss_value):
                status = "failed"
                last = run.meta.get("checkpoint_step")
                message = (f"the loss became {loss_value} at step {step}; training stopped. "
                           + (f"The last good checkpoint (step {last}) is kept. " if last else "")
                           + "Try a lower learning rate or gradient clipping.")
                break
            tokens_window += _tokens_in(batch)
            pending.append({"step": step, "train_loss": loss_value, "lr": lr, "grad_norm": float(grad_norm)})
            evaluating = step % t.eval_interval == 0 or step == t.steps
            now = time.perf_counter()
            if now - t_emit >= EMIT_INTERVAL_S or evaluating or step == t.steps:
                tps = tokens_window / max(now - t_emit, 1e-9)
                for row in pending:
                    row["tokens_per_s"] = tps
                elapsed = now - t_start
                eta = elapsed / max(1, step - start) * (t.steps - step)
                yield Steps([r["step"] for r in pending], [r["train_loss"] for r in pending], [r["lr"] for r in pending],
                            [r["grad_norm"] for r in pending], tps, step, t.steps, elapsed, eta)
                evaluation = None
                if evaluating and has_val:
                    tr, va, acc = evaluate(model, dataset, d.task, t, device, t.seed)
                    pending[-1].update(eval_train_loss=tr, val_loss=va, accuracy=acc)
                    run.write_meta(step=step, best_val_loss=min(va, run.meta.get("best_val_loss", math.inf)), val_loss=va)
                    evaluation = Evaluation(step, tr, va, acc)
                run.append_metrics(pending)  # on disk before the events that announce it
                pending = []
                if evaluation:
                    yield evaluation
                if evaluating and t.sample_tokens:
                    text = make_sample(model, tokenizer, dataset, d.task, t, t.seed + step, "val" if has_val else "train")
                    run.append_sample(step, text)
                    yield Sample(step, text)
                t_emit, tokens_window = time.perf_counter(), 0
            if step % t.checkpoint_interval == 0 and step < t.steps:
                yield checkpoint(step)
                run.write_meta(step=step)
    except torch.OutOfMemoryError:
        status, message = "failed", (f"out of GPU memory at step {step + 1}; lower batch_size, l_max or d_e. "
                                     "The last checkpoint is kept.")
    except BaseException as e:  # anything else (or the consumer closing us): never leave the run "running"
        run.append_metrics(pending)
        run.write_meta(status="failed" if not isinstance(e, GeneratorExit) else "stopped", step=step)
        raise
    run.append_metrics(pending)
    if status != "failed":
        yield checkpoint(step)
    run.write_meta(status=status, step=step)
    yield Finished(step, status, message)


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
