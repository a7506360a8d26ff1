"""Benchmark: what a learner waits for in the Exercises tab (a benchmark, not a test).

    OMP_NUM_THREADS=1 python bench/bench_exercises.py [--rounds 3]

- each exercise's check in this process (the solution, every case; the model in focus a small GPT): ms;
- a check in its child process, end to end (start, torch's import, the weights' file, the check): s;
- Train with my code in this process, 30 steps of the model's own function and 30 with the solution swapped in: s,
  for every exercise that trains.

Printed: the median of the rounds for each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    from fatstudio.core.config import ModelConfig
    from fatstudio.core.model.transformers import build_model
    from fatstudio.core.paper.exercises import sandbox
    from fatstudio.core.paper.exercises.cases import Weights
    from fatstudio.core.paper.exercises.catalog import EXERCISES
    from fatstudio.core.paper.exercises.checking import check
    from fatstudio.core.paper.exercises.training import SWAPS, train_with

    torch.manual_seed(0)
    cfg = ModelConfig(arch="gpt", vocab_size=65, l_max=64, L=4, H=4, d_e=128, d_mlp=512)
    state = build_model(cfg).state_dict()
    w = Weights(cfg.resolved(), {k: v.double() for k, v in state.items()})
    print(f"check in this process (the solution; the model in focus: {cfg.L} layers, d_e {cfg.d_e}):")
    for e in EXERCISES:
        assert check(e, e.solution, w).passed, e.name
        print(f"  {e.name:<22} {median_time(lambda e=e: check(e, e.solution, w), args.rounds) * 1e3:8.1f} ms")
    e = EXERCISES[4]
    print(f"check in a child process, end to end ({e.name}, with the model's weights): "
          f"{median_time(lambda: sandbox.check(e.name, e.solution, cfg, state), args.rounds):.2f} s")
    print("Train with my code in this process (30 + 30 steps):")
    for e in EXERCISES:
        if e.name in SWAPS:
            print(f"  {e.name:<22} {median_time(lambda e=e: train_with(e, e.solution, 30), args.rounds):8.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
