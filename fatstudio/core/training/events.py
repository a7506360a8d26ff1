"""The trainer's events: small plain values (floats and strings, never tensors) that a CLI, a test or a GUI worker
thread reads as they come. Their order is described at `train`."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import ResolvedPrecision, RunConfig
from ..records import EndStatus
from .diagnostics import Finding


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
    precision: ResolvedPrecision  # what train.precision resolved to on this device ("auto" → "bf16" or "fp32")
    deterministic: bool  # whether the same seed repeats the run bit for bit (not for GPU kernels)
    config: RunConfig  # the run's settings, N_V and n_classes as the data made them
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
    train_accuracy: float | None = None  # the same on the train split
    weight_norm: float | None = None  # ‖θ‖₂ over every parameter (`grokking.weight_norm`)
    embed_fourier: tuple[float, ...] | None = None  # "modadd": W_e's energy per frequency (`grokking.fourier_energy`)


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
    status: EndStatus
    message: str
    diverged: dict | None = None  # a non-finite step: {"step", "train_loss", "grad_norm"}, the numbers as strings

    @property
    def said(self) -> str:
        """The status and the message, the status said once: "stopped at step 506, checkpoint saved" (a message
        that starts with it), "finished: trained 2000 steps"."""
        return self.message if self.message.startswith(f"{self.status} ") else f"{self.status}: {self.message}"
