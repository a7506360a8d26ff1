"""Benchmark: how close the Model panel's estimate (estimateButton) comes to the run it estimates.

    OMP_NUM_THREADS=1 python bench/bench_estimate.py [PRESET ...] [--steps N]

For each preset (default: all), `fatstudio.core.training.estimate.estimate` on its settings (with --steps, if given),
then the run itself through `fatstudio.core.training.train` in a temporary folder, timed from its Started
event to the end (start-up, which the estimate does not count, is printed apart). Prints both and their
ratio (target: within ±20%).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from fatstudio.core import training
    from fatstudio.core.runs.presets import key_of, load_presets
    from fatstudio.core.training.estimate import duration, estimate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", help="preset keys (default: all)")
    ap.add_argument("--steps", type=int, help="override train.steps")
    args = ap.parse_args(argv)
    chosen = [p for p in load_presets() if not args.presets or p.key in {key_of(k) for k in args.presets}]
    print(f"{'preset':20s} {'estimate':>12s} {'run':>12s} {'run/est':>8s} {'start-up':>9s}")
    for p in chosen:
        cfg = p.config if args.steps is None else p.config.with_overrides([f"train.steps={args.steps}"])
        t0 = time.perf_counter()
        e = estimate(cfg)
        t_est = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            t0 = started = time.perf_counter()
            for ev in training.train(cfg, run_dir=Path(tmp) / "run"):
                if isinstance(ev, training.Started):
                    started = time.perf_counter()  # data, model and run folder ready: the steps begin
            run_s = time.perf_counter() - started
        print(f"{p.key:20s} {duration(e.total_s):>12s} {duration(run_s):>12s} {run_s / e.total_s:8.2f} "
              f"{started - t0:8.1f}s   (the estimate took {t_est:.1f} s; {e.details()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
