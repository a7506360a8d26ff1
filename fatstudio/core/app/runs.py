"""The rules for runs in the application model: continuing a run (resume), a new run from a run's weights
(fine-tune), and where an imported model's run goes. The window asks; the rules are here, where the command line
and the tests can read them too."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from ..runs.folder import Run, run_name
from ..runs.init_from import init_config


@dataclass(frozen=True)
class Resumption:
    """What continuing a run starts from: its config trained to the new ``config.train.steps``, and the metrics rows
    and samples up to its last checkpoint (what comes after it is trained again)."""

    config: RunConfig
    rows: list[dict]
    samples: list[dict]


def resumption(run: Run, total_steps: int) -> Resumption:
    """Continue ``run`` from its last checkpoint up to ``total_steps``; ValueError in words if it cannot."""
    problem = run.resume_problem(int(total_steps))
    if problem:
        raise ValueError(problem)
    config, upto = RunConfig.from_dict(run.config.to_dict()), run.info.checkpoint_step
    config.train.steps = int(total_steps)
    return Resumption(config, [r for r in run.metrics() if r.get("step", 0) <= upto],
                      [r for r in run.samples() if r.get("step", 0) <= upto])


def fine_tune_config(run: Run, settings: RunConfig) -> RunConfig:
    """A new run from ``run``'s weights on the current corpus and training ``settings``: its model (its dropout the
    settings'), its tokenizer and its task, whatever the settings show (the rules of ``--init-from``,
    `runs.init_from.init_config`, with nothing given; training says what comes from ``run`` in a Note).
    ValueError in words if it has no weights."""
    return fine_tune(run, settings).config


@dataclass(frozen=True)
class FineTune:
    """A new run from ``source``'s weights (`fine_tune`): its ``config`` and the name its folder will have
    (`folder.run_name`: it says what it was fine-tuned from)."""

    source: Run
    config: RunConfig
    name: str

    def question(self, root: Path) -> str:
        """What the window asks before it starts: which weights, model and tokenizer, corpus and training settings,
        and the new run's name in the runs folder ``root``."""
        src, m, d, t = self.source, self.config.model, self.config.data, self.config.train
        imported = src.info.imported_class
        weights = (f"{src.name}, imported from {src.meta.get('imported_from', 'elsewhere')} ({imported}; not trained "
                   "here)" if imported else f"{src.name} at step {src.info.checkpoint_step:,}")
        layers = f"L = {m.L_enc}+{m.L_dec}" if m.arch == "edt" else f"L = {m.L}"
        schedule = f"{t.lr_schedule} schedule, {t.warmup:,} warm-up steps"
        return "\n".join([
            f"Start a new run from the weights of {src.name}?", "",
            f"Weights: {weights}.",
            f"Model: {src.name}'s ({m.arch}, {layers}, H = {m.H}, d_e = {m.d_e}, l_max = {m.l_max}); the Model tab's "
            "settings are not used.",
            f"Tokenizer and task: {src.name}'s ({'imported' if imported else d.tokenizer}, N_V = {m.vocab_size}; {d.task}).",
            f"Corpus: {d.corpus} (the Corpus tab's).",
            f"Training: {t.steps:,} steps of batch {t.batch_size} with {t.optimizer} at η = {t.lr:g} ({schedule}), "
            f"seed {t.seed}, on {t.device} (the Train tab's)." + (f" {t.warmup_note()}" if t.warmup_note() else ""), "",
            f"The new run: {self.name}, in {root}."])


def fine_tune(run: Run, settings: RunConfig) -> FineTune:
    """A new run from ``run``'s weights on ``settings``' corpus and training settings (`fine_tune_config`), with its
    name; ValueError in words if ``run`` has no weights or the settings cannot take its model."""
    if not run.has_checkpoint:
        raise ValueError(f"{run.name} has no weights to start from; train it first.")
    config = init_config(settings, run, given=())[0]
    return FineTune(run, config, run_name(config, run.name))


def import_destination(root: Path, source: str) -> Path:
    """The run folder a model imported from ``source`` goes to: named after it, ``-2``, ``-3``… if that is taken."""
    name = Path(source).name or "imported"
    out, i = root / name, 1
    while out.exists():
        i += 1
        out = root / f"{name}-{i}"
    return out
