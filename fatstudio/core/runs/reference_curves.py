"""Reference curves ("is this normal?"): a preset's loss curves as this project measured them at the preset's
settings, over a few seeds, to draw faintly behind a run of the same settings. `bench/reference_curves.py`
measures them; they ship as ``resources/reference-curves/<preset key>.json``:

    {"format": "fatstudio-reference-curve", "version": 1,
     "preset": "edt-reverse", "name": "Encoder-decoder · reverse (seq2seq)",
     "config": {...},            # the RunConfig measured (the first seed's; model.vocab_size is the tokenizer's)
     "seeds": [1337, 1338],
     "loss_unit": "nats/token",
     "chars_per_token": {"train": 1.0, "val": 1.0} or null,   # see `training.chars_per_token`
     "train": {"step": [...], "mean": [...], "min": [...], "max": [...]},
     "val": {"step": [...], "mean": [...], "min": [...], "max": [...]},
     "machine": {...}, "commit": "0123abc" or null, "created": "2025-01-01T00:00:00Z", "seconds": [...]}

A preset's reference measured before ``data.split`` existed validated on the text's tail; its config has no
``split`` and reads as "tail" (`RunConfig.from_record`). Those of the text presets stay, as
``<preset key>-tail.json``, for the runs made then; ``<preset key>.json`` is measured at the preset's settings of
now ("blocks").

"train" is each seed's per-step train loss averaged over windows of steps (at most `POINTS` windows), "val"
the validation loss at each evaluation; "mean", "min" and "max" are taken over the seeds. A reference
applies to a run whose model, data and optimisation settings are the ones measured (`same_settings`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..data import splits
from ..files import atomic_write
from ..resources import resource_path

FORMAT, VERSION = "fatstudio-reference-curve", 1
POINTS = 200  # the most points of a reference's train curve
# Settings that say how long, where and how often a run is measured, not what it learns: a reference
# applies whatever they are. (The model's N_V and class count follow from the data.)
IGNORED = {"model": {"vocab_size", "n_classes"},
           "train": {"steps", "seed", "eval_interval", "eval_iters", "checkpoint_interval", "sample_tokens", "device",
                     "precision", "compile", "tensorboard", "keep_weights"}}



def bits_per_char(nats_per_token: float, chars_per_token: float) -> float:
    """A loss in nats per token as bits per character: ℓ / ln 2 / (characters per token)."""
    return nats_per_token / math.log(2) / chars_per_token

@dataclass(frozen=True)
class Band:
    """A curve over seeds: at each step their mean, least and greatest loss (nats per token)."""

    step: list[float]
    mean: list[float]
    min: list[float]
    max: list[float]

    @classmethod
    def over_seeds(cls, steps: Sequence[float], losses: list[list[float]]) -> Band:
        """The band of ``losses`` (one list per seed, each over ``steps``), to 5 decimals."""
        columns = list(zip(*losses))
        return cls([round(s, 1) for s in steps], [round(math.fsum(c) / len(c), 5) for c in columns],
                   [round(min(c), 5) for c in columns], [round(max(c), 5) for c in columns])


@dataclass(frozen=True)
class SeedCurves:
    """One seed's measured run: the train loss of every step, the validation loss of every evaluation."""

    seed: int
    steps: list[int]
    train_loss: list[float]
    val_steps: list[int]
    val_loss: list[float]
    seconds: float = 0.0


@dataclass(frozen=True)
class ReferenceCurve:
    """One preset's reference: its curves over seeds and what they were measured at (see the module)."""

    preset: str  # the preset's key, e.g. "edt-reverse"
    name: str  # what a person reads
    config: RunConfig
    seeds: list[int]
    train: Band
    val: Band
    chars_per_token: dict[str, float] | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    commit: str | None = None
    created: str = ""
    seconds: list[float] = field(default_factory=list)  # each seed's run, start to end

    def applies_to(self, config: RunConfig) -> bool:
        return same_settings(self.config, config)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "preset": self.preset, "name": self.name,
                "config": self.config.to_dict(), "seeds": self.seeds, "loss_unit": "nats/token",
                "chars_per_token": self.chars_per_token, "train": asdict(self.train), "val": asdict(self.val),
                "machine": self.machine, "commit": self.commit, "created": self.created, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReferenceCurve:
        """ValueError if ``d`` is not a reference curve of this version or is malformed."""
        if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} of version {VERSION}")
        try:
            train, val = (Band(**{k: [float(v) for v in d[part][k]] for k in ("step", "mean", "min", "max")})
                          for part in ("train", "val"))
            return cls(str(d["preset"]), str(d["name"]), RunConfig.from_record(d["config"]), list(d["seeds"]), train, val,
                       chars_per_token=d.get("chars_per_token"), machine=d.get("machine") or {},
                       commit=d.get("commit"), created=str(d.get("created", "")), seconds=list(d.get("seconds", [])))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed reference curve ({type(e).__name__}: {e})") from None

    @classmethod
    def measured(cls, preset: str, name: str, config: RunConfig, runs: list[SeedCurves], **info: Any) -> ReferenceCurve:
        """The reference of ``runs`` (the same settings, one per seed, over the same steps and evaluations):
        the train loss averaged over windows of steps (at most `POINTS`), each window's mean, least and
        greatest over the seeds, and the same for the validation loss at each evaluation."""
        n = min(len(r.steps) for r in runs)
        size = max(1, math.ceil(n / POINTS))
        windows = [range(i, min(i + size, n)) for i in range(0, n, size)]
        steps = [math.fsum(runs[0].steps[j] for j in w) / len(w) for w in windows]
        train = Band.over_seeds(steps, [[math.fsum(r.train_loss[j] for j in w) / len(w) for w in windows] for r in runs])
        m = min(len(r.val_steps) for r in runs)
        val = Band.over_seeds(runs[0].val_steps[:m], [r.val_loss[:m] for r in runs])
        return cls(preset, name, config, [r.seed for r in runs], train, val,
                   seconds=[r.seconds for r in runs], **info)


def same_settings(a: RunConfig, b: RunConfig) -> bool:
    """Whether runs of ``a`` and ``b`` learn the same way: the same model (paper defaults filled in), data and
    optimisation; the `IGNORED` settings (steps, seed, device, …) may differ, and so may data.vocab_size
    for a char tokenizer (it takes every character whatever the cap) and data.split where it says nothing
    (`splits.applies`: examples)."""
    def key(c: RunConfig) -> dict[str, Any]:
        d = {"model": asdict(c.model.resolved()), "data": c.data.to_dict(), "train": c.train.to_dict()}
        for table, names in IGNORED.items():
            for name in names:
                d[table].pop(name)
        if c.data.tokenizer == "char":
            d["data"].pop("vocab_size")
        if not splits.applies(c.data):  # examples are shuffled whatever data.split says
            d["data"].pop("split")
        return d
    try:
        return key(a) == key(b)
    except ValueError:  # a model config that cannot be resolved matches nothing
        return False


def reference_dir() -> Path:
    """The shipped references: resources/reference-curves."""
    return resource_path("reference-curves")


def load_reference(path: str | Path) -> ReferenceCurve:
    """The reference curve in ``path``; ValueError naming the file if it cannot be read."""
    path = Path(path)
    try:
        return ReferenceCurve.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as e:
        raise ValueError(f"{path} is not a readable reference curve: {e}") from None


def find_reference(config: RunConfig, folder: str | Path | None = None) -> ReferenceCurve | None:
    """The first reference in ``folder`` (default `reference_dir`) that applies to ``config``, or None.
    Unreadable files are skipped."""
    folder = Path(folder) if folder is not None else reference_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            ref = load_reference(path)
        except ValueError:
            continue
        if ref.applies_to(config):
            return ref
    return None


def save_reference(ref: ReferenceCurve, folder: str | Path) -> Path:
    """Write ``ref`` to ``folder``/<preset key>.json (the folder is made if missing), one line per key."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ref.preset}.json"
    lines = (f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in ref.to_dict().items())
    atomic_write(path, "{\n" + ",\n".join(lines) + "\n}\n")
    return path
