"""Measure the presets' reference curves ("is this normal?"; see fatstudio/core/reference_curves.py).

    OMP_NUM_THREADS=2 python bench/reference_curves.py [PRESET ...] [--seeds 2] [--steps N] [--device cpu]
                                                       [--out resources/reference-curves]

Trains each preset named (its key, its name, or its key without the number; default: every preset) once per
seed (the preset's seed, then the next ones) with fatstudio.core.training.train in a temporary runs folder,
and writes OUT/<preset key>.json: the mean train and validation curves over the seeds with their min/max
band, the settings measured, the corpus's characters per token, the machine, the threads and the fatstudio
commit. Samples and intermediate checkpoints are skipped (they do not change the curves). --steps replaces
the presets' steps, for a quick smoke run: the shipped references are measured at the presets' own steps,
on the CPU for curves that repeat bit for bit (--device cpu). Torch takes its thread count from
OMP_NUM_THREADS. Run it again after retuning a preset: a reference applies only to the settings it was
measured at.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from fatstudio.core.config import RunConfig
from fatstudio.core.runs.presets import Preset, load_presets, preset
from fatstudio.core.runs.reference_curves import ReferenceCurve, SeedCurves, save_reference

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str | None:
    """The checkout's commit, with "-dirty" when tracked files differ from it; None outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def machine(device: str, precision: str) -> dict:
    import torch

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__, "device": device, "precision": precision,
            "threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name()
    return info


def run_seed(config: RunConfig, root: Path):
    """One training run of ``config``: its curves and its Started event."""
    from fatstudio.core import training as t

    steps, losses, val_steps, val_losses, started = [], [], [], [], None
    start = time.perf_counter()
    for ev in t.train(config, runs_root=root):
        if isinstance(ev, t.Started):
            started = ev
        elif isinstance(ev, t.Steps):
            steps += ev.steps
            losses += ev.train_loss
        elif isinstance(ev, t.Evaluation):
            val_steps.append(ev.step)
            val_losses.append(ev.val_loss)
        elif isinstance(ev, t.Finished) and ev.status != "finished":
            raise RuntimeError(f"seed {config.train.seed}: {ev.message}")
    curves = SeedCurves(config.train.seed, steps, losses, val_steps, val_losses, round(time.perf_counter() - start, 1))
    return curves, started


def measure(p: Preset, seeds: int, steps: int | None, device: str | None) -> ReferenceCurve:
    config = RunConfig.from_dict(p.config.to_dict())
    t = config.train
    t.steps = steps or t.steps
    t.device = device or t.device
    t.sample_tokens, t.checkpoint_interval = 0, t.steps
    first_seed, runs, first = t.seed, [], None
    with tempfile.TemporaryDirectory(prefix="fatstudio-reference-") as tmp:
        for i in range(seeds):
            t.seed = first_seed + i
            curves, started = run_seed(config, Path(tmp))
            first = first or started
            runs.append(curves)
            print(f"  {p.key} seed {t.seed}: {curves.seconds:.1f} s, val {curves.val_loss[-1] if curves.val_loss else '-'}",
                  flush=True)
    return ReferenceCurve.measured(p.key, p.name, first.config, runs,
                                   chars_per_token=first.chars_per_token, machine=machine(first.device, first.precision),
                                   commit=commit(), created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", help="preset keys or names (default: every preset)")
    ap.add_argument("--seeds", type=int, default=2, help="runs per preset (default 2)")
    ap.add_argument("--steps", type=int, default=None, help="replace the presets' steps (a smoke run)")
    ap.add_argument("--device", default=None, help="replace the presets' device (auto, cpu, cuda, mps)")
    ap.add_argument("--out", type=Path, default=ROOT / "resources" / "reference-curves", help="where to write")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error("--seeds must be at least 1")
    chosen = [preset(name) for name in a.presets] if a.presets else load_presets()
    for p in chosen:
        print(f"{p.key}: {a.seeds} seed(s)", flush=True)
        ref = measure(p, a.seeds, a.steps, a.device)
        print(f"  wrote {save_reference(ref, a.out)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
