"""The rules for runs in the application model: continuing a run (resume), a new run from a run's weights
(fine-tune), and where an imported model's run goes. The window asks; the rules are here, where the command line
and the tests can read them too."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RunConfig
from ..runs.init_from import init_config

if TYPE_CHECKING:
    from ..runs.folder import Run


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
    if not run.has_checkpoint:
        raise ValueError(f"{run.name} has no weights to start from; train it first.")
    return init_config(settings, run, given=())[0]


def import_destination(root: Path, source: str) -> Path:
    """The run folder a model imported from ``source`` goes to: named after it, ``-2``, ``-3``… if that is taken."""
    name = Path(source).name or "imported"
    out, i = root / name, 1
    while out.exists():
        i += 1
        out = root / f"{name}-{i}"
    return out
