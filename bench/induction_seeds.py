"""Does the gpt-induction preset form its induction head at every seed, with one thread and with two?

    python bench/induction_seeds.py [--seeds 100-109] [--threads 1 2] [--jobs 2] [--steps N] [--set KEY=VALUE ...]

Trains the preset (`training.train`, the trainer the app runs, on the CPU) once per seed and thread count, each
run in its own process with ``torch.set_num_threads(threads)`` (the app leaves torch its default: one thread a
core), ``--jobs`` runs side by side. For each final model it prints the best induction score
(`head_scores.head_scores`) and its head, the validation loss, and the lesson of the preset's walkthrough:
the loss on the second copies' tokens (`ablation.second_copy_mask`) with the top induction head mean-ablated
(`ablation.Ablator`, the mean over the validation batch), its rise Δ top, the largest rise of any other head
(Δ other), and the top head's rise of the whole validation loss (Δ all: what the app's knock-out table shows);
then the circuit's other half, the head with the best previous-token score (prev), its rise Δ prev, and the
largest rise of any head outside the two (Δ rest).
A seed "forms" when the best score is ≥ 0.5. Times are the training's wall seconds, its CPU seconds (all its
threads) and tokens/s; on a shared machine the wall time is longer than alone (say how loaded it was), while one
thread's CPU seconds stay near its time alone. ``--set`` overrides the preset's settings
(as the CLI's ``--set``), for tuning: tune on other seeds than those the evaluation reports.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PRESET = "gpt-induction"
FORMED = 0.5


def seeds(spec: str) -> list[int]:
    """"100-109" → 100…109; "1,5,7" → those."""
    if "-" in spec:
        lo, hi = spec.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in spec.split(",")]


def one(seed: int, threads: int, steps: int | None, sets: list[str]) -> dict:
    """Train one seed with ``threads`` threads (in this process) and measure it."""
    import torch
    torch.set_num_threads(threads)
    from fatstudio.core import training
    from fatstudio.core.inspect.ablation import ablator_for
    from fatstudio.core.inspect.head_scores import head_scores
    from fatstudio.core.names import ComponentName
    from fatstudio.core.runs.folder import Run
    from fatstudio.core.runs.presets import preset

    over = ["train.device=cpu", f"train.seed={seed}", *sets]
    cfg = preset(PRESET).config.with_overrides(over + ([f"train.steps={steps}"] if steps else []))
    with tempfile.TemporaryDirectory() as root:
        run_dir, trajectory, val = "", [], float("nan")
        start, cpu = time.perf_counter(), time.process_time()
        for ev in training.train(cfg, runs_root=Path(root)):
            if isinstance(ev, training.Started):
                run_dir = ev.run_dir
            elif isinstance(ev, training.Evaluation):
                val = ev.val_loss
            elif isinstance(ev, training.Probe) and ev.scores:
                best = max((v for d in ev.scores["maps"].values() for v in d.get("induction", []) if v is not None),
                           default=0.0)
                trajectory.append((ev.step, round(best, 2)))
            elif isinstance(ev, training.Finished) and ev.status != "finished":
                raise RuntimeError(f"seed {seed}: {ev.message}")
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        loaded = Run.open(run_dir).load_model()
        scores = head_scores(loaded.model, loaded.tokenizer)
        name, h, best = max(((n, int(i), float(v)) for n, per in scores.scores.items()
                             for i, v in enumerate(per["induction"])), key=lambda r: r[2])
        table = ablator_for(loaded, second_copy=True).table("mean")
        whole = ablator_for(loaded).table("mean")  # what the app's knock-out table shows: every target
    top = ComponentName(name, h)
    deltas = {r.component: r.delta_loss for r in table.rows if r.component.head is not None}  # heads only
    prev = max(((ComponentName(n, i), float(v)) for n, per in scores.scores.items() for i, v in enumerate(per["prev"])
                if ComponentName(n, i) != top), key=lambda r: r[1])[0]  # the circuit's other half: the previous-token head
    t = cfg.train
    return {"seed": seed, "threads": threads, "best": best, "head": str(top), "val_loss": val,
            "second_copy_loss": table.baseline_loss, "delta_top": deltas[top],
            "delta_top_all": next(r.delta_loss for r in whole.rows if r.component == top),
            "delta_other": max(v for k, v in deltas.items() if k != top), "prev_head": str(prev),
            "delta_prev": deltas[prev], "delta_rest": max(v for k, v in deltas.items() if k not in (top, prev)),
            "seconds": seconds, "cpu_seconds": cpu,
            "tokens_per_s": t.steps * t.batch_size * cfg.model.l_max / seconds, "trajectory": trajectory}


def row(r: dict) -> str:
    steps = " ".join(f"{s}:{v}" for s, v in r["trajectory"])
    return (f"{r['seed']:>5} {r['threads']:>3} {r['best']:>6.2f} {r['head']:>9} {r['val_loss']:>6.3f} "
            f"{r['second_copy_loss']:>7.3f} {r['delta_top']:>+7.3f} {r['delta_other']:>+7.3f} {r['delta_top_all']:>+7.3f} "
            f"{r['prev_head']:>9} {r['delta_prev']:>+7.3f} {r['delta_rest']:>+7.3f} "
            f"{r['seconds']:>6.0f} {r['cpu_seconds']:>6.0f} {r['tokens_per_s']:>8,.0f}  {steps}")


def formed_at(r: dict) -> int | None:
    """The first evaluation's step at which the best induction score was ≥ FORMED (None: never)."""
    return next((step for step, best in r["trajectory"] if best >= FORMED), None)


def summary(threads: int, mine: list[dict]) -> str:
    """What the walkthrough says, over the seeds run with ``threads`` threads: how many formed the head (best ≥
    FORMED) and by which step, and the ranges of the numbers it quotes (the validation loss, the top head's score,
    its knock-out rise on the whole validation loss, Δ all, as the knock-out table shows it)."""
    formed = [r for r in mine if r["best"] >= FORMED]
    steps = [s for r in formed if (s := formed_at(r)) is not None]
    span = lambda key, f: f"{f.format(min(r[key] for r in mine))} to {f.format(max(r[key] for r in mine))}"
    return (f"{threads} thread(s): formed (best ≥ {FORMED}) in {len(formed)}/{len(mine)}"
            + (f", first ≥ {FORMED} at steps {min(steps)}-{max(steps)}" if steps else "")
            + f"; best {span('best', '{:.2f}')}, validation loss {span('val_loss', '{:.3f}')}, Δ all of the top head "
            f"{span('delta_top_all', '{:+.3f}')}, Δ top {span('delta_top', '{:+.3f}')}, Δ prev "
            f"{span('delta_prev', '{:+.3f}')}; median {statistics.median(r['seconds'] for r in mine):.0f} s "
            f"({statistics.median(r['cpu_seconds'] for r in mine):.0f} s of CPU), "
            f"{statistics.median(r['tokens_per_s'] for r in mine):,.0f} tokens/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100-109", help="seeds: 100-109 or 1,5,7 (default 100-109)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side (default 1: timings of one alone)")
    ap.add_argument("--steps", type=int, default=None, help="replace the preset's steps")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting of the preset (repeatable)")
    ap.add_argument("--one", nargs=2, type=int, metavar=("SEED", "THREADS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one(*a.one, a.steps, a.sets)), flush=True)
        return 0
    runs = [(s, n) for n in a.threads for s in seeds(a.seeds)]
    print(f"{PRESET} {' '.join(a.sets)}: {len(runs)} runs, {a.jobs} at a time", flush=True)
    print(f"{'seed':>5} {'thr':>3} {'best':>6} {'head':>9} {'val':>6} {'2nd':>7} {'Δ top':>7} {'Δ other':>7} {'Δ all':>7} "
          f"{'prev':>9} {'Δ prev':>7} {'Δ rest':>7} {'s':>6} {'cpu s':>6} {'tok/s':>8}  best induction score by step",
          flush=True)

    def launch(run: tuple[int, int]) -> dict:
        extra = [f"--steps={a.steps}"] if a.steps else []
        out = subprocess.run([sys.executable, __file__, "--one", str(run[0]), str(run[1]), *extra,
                              *(f"--set={s}" for s in a.sets)], capture_output=True, text=True, check=False)
        if out.returncode:
            raise RuntimeError(f"seed {run[0]}, {run[1]} thread(s): {out.stderr.strip().splitlines()[-1:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(row(r), flush=True)
        return r

    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(launch, runs))
    for n in a.threads:
        mine = [r for r in results if r["threads"] == n]
        print(summary(n, mine), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
