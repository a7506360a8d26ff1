"""Benchmark of the sparse dictionaries (a benchmark, not a test): on a trained gpt-char preset run at its last
step (default /work/bench-runs/gpt-char; ``--run`` another), a residual-stream SAE at self/1/resid_post (d_f =
8·d_e, k = 16: the stream in the middle of the 4 layers, where both attention and MLPs have written) and a TopK
transcoder for every MLP, each on ``--seeds`` (default 1 and 2: the defaults were tuned on seed 0 only), with the
time each takes (training and measuring; wall-clock seconds, and the process's CPU seconds, which on a machine
other processes share say more: with 2 threads, unshared, wall ≈ CPU / 2) and its quality on held-out validation
tokens:

    OMP_NUM_THREADS=2 python bench/bench_features.py [--run RUN_DIR] [--seeds 1 2] [--tokens N]

Goals (issue 36): each ≤ 5 min with 2 threads, explained variance ≥ 0.8, CE loss score ≥ 0.9, dead ≤ 5%.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

GOALS = dict(seconds=300.0, explained_variance=0.8, ce_loss_score=0.9, dead_fraction=0.05)


def main(argv: list[str] | None = None) -> int:
    from fatstudio.core.inspect.features.training import train_dictionary
    from fatstudio.core.runs.folder import Run, load_at_step

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="/work/bench-runs/gpt-char")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--tokens", type=int, default=None, help="training tokens (default: train_dictionary's)")
    p.add_argument("--points", nargs="+", default=None, help="default: self/1/resid_post and every MLP")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    loaded = load_at_step(Run.open(args.run), None)
    points = args.points or ["self/1/resid_post", *(f"mlp/{layer}" for layer in range(loaded.config.model.L))]
    extra = {} if args.tokens is None else {"tokens": args.tokens}
    print(f"{args.run} at step {loaded.step}, {torch.get_num_threads()} threads")
    print(f"{'dictionary':34} {'seed':>4} {'EV':>6} {'CE score':>8} {'dead':>6} {'L0':>5} {'tokens':>10} {'s':>6} {'cpu s':>6}  "
          f"misses")
    for point in points:
        for seed in args.seeds:
            t0, c0 = time.perf_counter(), time.process_time()
            *_, done = train_dictionary(loaded, point, seed=seed, **extra)
            s, cpu = time.perf_counter() - t0, time.process_time() - c0
            q, d = done.quality, done.dictionary
            assert q is not None and d is not None
            misses = [name for name, bad in (("time", s > GOALS["seconds"]),
                                             ("EV", q.explained_variance < GOALS["explained_variance"]),
                                             ("CE", not q.ce_loss_score >= GOALS["ce_loss_score"]),
                                             ("dead", q.dead_fraction > GOALS["dead_fraction"])) if bad]
            name = f"{d.kind} {point} ({d.d_f}, k {d.k})"
            print(f"{name:34} {seed:>4} {q.explained_variance:6.3f} {q.ce_loss_score:8.3f} {q.dead_fraction:6.1%} "
                  f"{q.l0:5.1f} {done.tokens:>10,} {s:6.0f} {cpu:6.0f}  {', '.join(misses) or '-'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
