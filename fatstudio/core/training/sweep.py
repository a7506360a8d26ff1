"""Experiments over seeds: every combination of some config keys' values, trained for N seeds under one budget,
each run its own process (``python -m fatstudio train``), so that a run that crashes is recorded as missing and
the sweep goes on. A run's value is its final validation loss in bits per byte (`RunMeta.val_bits_per_byte`),
which tokenizers share, or in bits per token where it has no bytes to count them by (`run_value`: the modadd
corpus's answers, seq2seq targets, class labels); each variant is compared with the baseline (the first value of
every key) by Welch's t-test, as ``scipy.stats.ttest_ind(equal_var=False)`` computes it.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import re
import statistics
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..children import start
from ..config import INT64_MAX, RunConfig, parse_value
from ..config_keys import KIND_WORDS, config_key
from ..records import RunMeta
from ..runs.folder import Run, default_runs_root
from ..temporary import scratch_folder
from .estimate import estimate

BITS_PER_BYTE, BITS_PER_TOKEN = "bits/byte", "bits/token"  # a sweep's units (`run_value`)


# ---- the plan ---------------------------------------------------------------------------------------------
SEED = "train.seed"  # the sweep's own: its runs' seeds are train.seed, +1, …


def typed_value(config: RunConfig, key: str, raw: str) -> Any:
    """``raw`` as the type of the config field ``key`` (table.name): a whole number for an int field, a number
    for a float, true/false for a bool, the text for a str or a choice (quotes optional), none for an optional
    one."""
    k = config_key(config, key)
    value = parse_value(raw.strip())
    if k.optional and (value is None or str(value).lower() == "none"):
        return None
    base = k.base
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "bool": isinstance(value, bool), "str": True}[base]
    if not ok:
        raise ValueError(f"{key}: {raw.strip()!r} is not a {KIND_WORDS[base]}.")
    return float(value) if base == "float" else str(value) if base == "str" else value




def parse_vary(config: RunConfig, spec: str) -> tuple[str, list[Any]]:
    """``KEY=V1,V2,…`` as (KEY, values typed as `typed_value` does); the first value is the baseline's. Its
    messages name no command-line flag (the command line adds ``--vary``, the Experiments tab needs none)."""
    key, sep, values = spec.partition("=")
    key = key.strip()
    if not sep or not values.strip():
        raise ValueError(f"{spec!r} is not of the form KEY=V1,V2 (e.g. train.lr=1e-3,3e-3).")
    if key == SEED:
        raise ValueError(f"{SEED}: the sweep sets it (each variant runs with seeds train.seed, train.seed + 1, …); "
                         "give the number of seeds instead.")
    return key, [typed_value(config, key, v) for v in values.split(",")]


@dataclass
class Plan:
    """What a sweep trains: ``config`` with each variant's values, for seeds train.seed, train.seed+1, …"""

    config: RunConfig
    vary: list[tuple[str, list[Any]]]
    seeds: int
    budget_steps: int | None = None
    budget_seconds: float | None = None

    def __post_init__(self) -> None:
        if not self.vary:
            raise ValueError("give at least one --vary KEY=V1,V2.")
        keys = [k for k, _ in self.vary]
        if len(set(keys)) != len(keys):
            raise ValueError(f"--vary names a key twice: {', '.join(sorted({k for k in keys if keys.count(k) > 1}))}.")
        if not isinstance(self.seeds, int) or self.seeds < 1:
            raise ValueError(f"--seeds {self.seeds!r}: give a whole number ≥ 1.")
        if self.budget_steps is not None and self.budget_seconds is not None:
            raise ValueError("give --budget-steps or --budget-seconds, not both.")
        if self.budget_steps is not None and self.budget_steps < 1:
            raise ValueError(f"--budget-steps {self.budget_steps}: give a whole number ≥ 1.")
        if self.budget_seconds is not None and not (math.isfinite(self.budget_seconds) and self.budget_seconds > 0):
            raise ValueError(f"--budget-seconds {self.budget_seconds}: give a (finite) number of seconds > 0.")
        seeds = self.seed_list()
        for variant in self.variants():  # every run's settings, checked before any trains
            for seed in {seeds[0], seeds[-1]}:
                try:
                    RunConfig.from_dict(self.config_of(variant, seed, self.budget_steps)).validate()
                except ValueError as e:
                    raise ValueError(f"the run of {variant_label(variant)}, seed {seed}: {e}") from None

    def variants(self) -> list[dict[str, Any]]:
        """Every combination, the baseline (each key's first value) first."""
        keys = [k for k, _ in self.vary]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in self.vary))]

    def seed_list(self) -> list[int]:
        return [self.config.train.seed + i for i in range(self.seeds)]

    def config_of(self, variant: dict[str, Any], seed: int, steps: int | None = None) -> dict:
        """The config (as a dict, unvalidated: the run's own process says what is wrong) of one run."""
        d = self.config.to_dict()
        for key, value in variant.items():
            table, _, name = key.partition(".")
            d[table][name] = value
        d["train"]["seed"] = seed
        if steps is not None:
            d["train"]["steps"] = steps
        return d


# ---- the result ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    """One variant: its value per seed (None: the run crashed or ended early, `errors` says why)."""

    variant: dict[str, Any]
    values: list[float | None] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)  # the seed of each value
    runs: list[str] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # seed → why its value is missing
    steps: int | None = None  # the steps a --budget-seconds gave it

    @property
    def present(self) -> list[float]:
        return [v for v in self.values if v is not None]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.present) if self.present else None

    @property
    def sd(self) -> float | None:
        """The sample standard deviation (n − 1), None under two values."""
        return statistics.stdev(self.present) if len(self.present) > 1 else None


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Welch's two-sided t-test p-value of ``a`` against ``b`` (scipy.stats.ttest_ind, equal_var=False); None
    where it is undefined (under two values on a side, or no spread on either)."""
    from scipy.stats import ttest_ind

    if len(a) < 2 or len(b) < 2:
        return None
    with warnings.catch_warnings():  # identical values: scipy warns, and says nan
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


FEW_DF = 4.0  # Welch's degrees of freedom under which a p-value rests on too few seeds to mean much


def welch_df(a: list[float], b: list[float]) -> float | None:
    """The degrees of freedom of Welch's t-test of ``a`` against ``b`` (Welch–Satterthwaite): between
    min(n_a, n_b) − 1 and n_a + n_b − 2, so ≈ 1–2 with two values a side. None where the test is undefined."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return None
    return (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))


def few_seeds(df: float | None) -> str | None:
    """What a reader should know of a p-value with Welch's ``df``: a sentence where it rests on too few seeds to
    mean much (df < `FEW_DF`), else None."""
    if df is None or df >= FEW_DF:
        return None
    return (f"Welch's df ≈ {df:.1f}: too few seeds for this p-value to mean much (a t-test on so few values can "
            "land anywhere); run more seeds, 5 or more a side, before reading it.")


@dataclass
class Sweep:
    """The rows, the baseline first, as they fill; ``unit`` that of their values (None until one has come)."""

    rows: list[Row]
    unit: str | None = None

    def take(self, scored: tuple[float, str] | None, why: str | None) -> tuple[float | None, str | None]:
        """A run's value and why it has none, from `_train_one`: the first value sets `unit`; a value in another
        unit is missing (the runs are not comparable)."""
        if scored is None:
            return None, why
        value, unit = scored
        self.unit = self.unit or unit
        if unit != self.unit:
            return None, f"its value is in {unit}, the sweep's others in {self.unit}: they do not compare"
        return value, None

    def p_value(self, i: int) -> float | None:
        return None if i == 0 else welch_p(self.rows[i].present, self.rows[0].present)

    def df(self, i: int) -> float | None:
        """Welch's degrees of freedom of row ``i``'s p-value (None where it has none)."""
        return None if i == 0 or self.p_value(i) is None else welch_df(self.rows[i].present, self.rows[0].present)

    def to_dict(self) -> dict:
        return {"unit": self.unit, "rows": [{"variant": r.variant, "values": r.values, "mean": r.mean, "sd": r.sd,
                          "p_value": self.p_value(i), "df": self.df(i), "p_note": few_seeds(self.df(i)),
                          "runs": r.runs, "seeds": r.seeds,
                          "errors": {str(s): e for s, e in r.errors.items()},
                          **({"steps": r.steps} if r.steps is not None else {})}
                         for i, r in enumerate(self.rows)]}

    def csv(self) -> str:
        """One line per variant: its keys, mean, sd, p_value and its Welch's df, the value of each seed, the run
        folders, why values are missing, and the values' unit."""
        keys = list(self.rows[0].variant) if self.rows else []
        n = max((len(r.values) for r in self.rows), default=0)
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow([*keys, "mean", "sd", "p_value", "df", *(f"value_{i + 1}" for i in range(n)), "runs", "errors",
                    "unit"])
        for i, r in enumerate(self.rows):
            w.writerow([*(r.variant[k] for k in keys), _cell(r.mean), _cell(r.sd), _cell(self.p_value(i)), _cell(self.df(i)),
                        *(_cell(v) for v in r.values), ";".join(r.runs), "; ".join(r.errors.values()), self.unit or ""])
        return out.getvalue()

    def missing(self) -> list[str]:
        """A line per missing value: the variant, the seed and why."""
        return [f"{variant_label(r.variant)}, seed {s}: {e}" for r in self.rows for s, e in r.errors.items()]


def _cell(v: float | None) -> str:
    return "" if v is None else repr(v)


def variant_label(variant: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in variant.items())


VARIANT_CHARS = 60  # the most of a sweep run's name that its variant takes


def run_folder_name(sweep: str, variant: dict[str, Any], seed: int, varied: Collection[str] | None = None) -> str:
    """A sweep run's folder: the values of the keys its sweep varies (``varied``, those given more than one value;
    None or none: every key of ``variant``), the seed, then the sweep: ``lr=0.003-s1338-sweep-20261127-101010``.
    A narrow runs list (it elides the middle of a name) shows the variant at the start and the sweep at the end. A
    key is named by its last part unless two keys share it; values too long for `VARIANT_CHARS` are cut and end in a
    digest of the whole."""
    shown = {k: v for k, v in variant.items() if not varied or k in varied}
    short = [k.partition(".")[2] or k for k in shown]
    names = [s if short.count(s) == 1 else k for s, k in zip(short, shown)]
    values = [("none" if v is None else json.dumps(v) if isinstance(v, bool) else v if isinstance(v, str) else f"{v:g}"
               if isinstance(v, float) else str(v)) for v in shown.values()]
    text = "+".join(f"{n}={_FILE_UNSAFE.sub('_', v)}" for n, v in zip(names, values))
    if len(text) > VARIANT_CHARS:  # cut, and told apart by a digest of the whole
        text = f"{text[:VARIANT_CHARS - 7]}~{hashlib.sha256(variant_label(shown).encode()).hexdigest()[:6]}"
    return f"{text}-s{seed}-{sweep}"


_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # what a value in a folder name keeps


# ---- running it -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunDone:
    """A run finished (or crashed): row ``row``, seed ``seed``, its value or the reason it has none."""

    row: int
    seed: int
    value: float | None
    error: str | None
    run_dir: str


def run_sweep(plan: Plan, runs_dir: Path | None = None, name: str | None = None,
              progress: Callable[[Sweep, RunDone], None] | None = None,
              stop: threading.Event | None = None) -> Sweep:
    """Train every variant of ``plan`` for every seed, one process after another, the run folders named after the
    sweep, the variant and the seed (`run_folder_name`) in ``runs_dir`` (default: the runs folder); ``progress(sweep,
    done)`` after each run;
    ``stop`` set ends the running process and leaves the rest out (their values None)."""
    root = Path(runs_dir) if runs_dir else default_runs_root()
    name = name or time.strftime("sweep-%Y%m%d-%H%M%S")
    sweep = Sweep([Row(v) for v in plan.variants()])
    varied = [key for key, values in plan.vary if len(values) > 1]  # what tells the runs apart
    with scratch_folder("sweep") as tmp:  # removed by the next sweep if this process is killed
        for i, row in enumerate(sweep.rows):
            steps, error = plan.budget_steps, None
            if plan.budget_seconds is not None and not (stop and stop.is_set()):
                steps, error = _steps_in(plan, row.variant, plan.budget_seconds)
                row.steps = steps
            for seed in plan.seed_list():
                run_dir = root / run_folder_name(name, row.variant, seed, varied)
                value: float | None
                why: str | None
                if stop and stop.is_set():
                    value, why = None, "the sweep was stopped"
                elif error:
                    value, why = None, error
                else:
                    cfg = Path(tmp) / f"v{i + 1}-s{seed}.json"
                    cfg.write_text(json.dumps(plan.config_of(row.variant, seed, steps)), encoding="utf-8")
                    value, why = sweep.take(*_train_one(cfg, run_dir, stop))
                    _mark(run_dir, name, row.variant)
                row.values.append(value)
                row.seeds.append(seed)
                row.runs.append(str(run_dir))
                if why:
                    row.errors[seed] = why
                if progress:
                    progress(sweep, RunDone(i, seed, value, why, str(run_dir)))
    return sweep


def _mark(run_dir: Path, sweep: str, variant: dict[str, Any]) -> None:
    """Record in the run's meta.json the sweep and the variant it ran (the runs list says so)."""
    with contextlib.suppress(ValueError, OSError):  # a run refused before it began has no folder
        Run.open(run_dir).write_meta(sweep=sweep, variant=variant)


def _train_one(config_file: Path, run_dir: Path,
               stop: threading.Event | None) -> tuple[tuple[float, str] | None, str | None]:
    """``fatstudio train CONFIG --out RUN_DIR`` in its own process; its value and unit (`run_value`), or why none."""
    args = ["fatstudio", "train", str(config_file), "--out", str(run_dir), "--quiet"]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        with start(args, stdout=subprocess.DEVNULL, stderr=err) as p:  # it dies with this process (`children`)
            while p.poll() is None:
                if stop is None:
                    p.wait()
                elif stop.wait(0.2):
                    p.terminate()  # the child stops at its next step (SIGTERM), checkpoints and exits
                    p.wait()
                    return None, "the sweep was stopped"
        err.seek(0)
        said = [line.strip() for line in err.read().splitlines() if line.strip()]
    if p.returncode != 0:
        why = (said[-1] if said else "").removeprefix("fatstudio train: ").removeprefix("error: ")
        why = why.removeprefix(f"{config_file}: ")  # the sweep's own file of the run's config, not the user's
        return None, f"the run exited with code {p.returncode}" + (f": {why}" if why else "")
    try:
        info = Run.open(run_dir).info
    except ValueError as e:
        return None, str(e)
    if info.status != "finished":
        return None, f"the run ended {info.status or 'without a status'}"
    scored = run_value(info)
    return (scored, None) if scored is not None else (None, "the run has no validation loss")


def run_value(info: RunMeta) -> tuple[float, str] | None:
    """A run's value and its unit: its final validation loss in bits per byte (`BITS_PER_BYTE`), else, where it has
    no bytes per token (paired or labelled data: the modadd corpus, seq2seq, classification), in bits per token
    (`BITS_PER_TOKEN`: nats / ln 2); None without a validation loss."""
    if info.val_bits_per_byte is not None:
        return info.val_bits_per_byte, BITS_PER_BYTE
    return (info.val_loss / math.log(2), BITS_PER_TOKEN) if info.val_loss is not None else None


def _steps_in(plan: Plan, variant: dict[str, Any], seconds: float) -> tuple[int | None, str | None]:
    """The steps of ``variant`` that fit in ``seconds`` here, by `estimate` (its steps and evaluations timed)."""
    try:
        config = RunConfig.from_dict(plan.config_of(variant, plan.config.train.seed))
        e = estimate(config)
    except Exception as ex:  # bad settings: every run of the variant is missing, with the reason
        return None, f"cannot time the variant: {ex}"
    per_step = e.step_s + e.evaluation_s / config.train.eval_interval
    return max(1, min(INT64_MAX, int(seconds / max(per_step, 1e-9)))), None

