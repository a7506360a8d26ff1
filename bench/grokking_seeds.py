"""The grokking preset over seeds it was not tuned on, with and without weight decay: the table in its details.

    python bench/grokking_seeds.py [--seeds 101 102 103 104 105] [--budget-s 600] [--no-wd-budget-s S]
                                   [--jobs 2] [--out grokking-seeds.json]
    python bench/grokking_seeds.py --to-end [--seeds ...] [--precision fp32 bf16] [--set KEY=VALUE ...]

Each seed trains the "grokking" preset (fatstudio.core.training.train, one CPU thread: OMP_NUM_THREADS=1 and
torch.set_num_threads(1), each run in a process of its own) until validation accuracy passes 95 % or the
budget is spent, and the same preset with train.weight_decay = 0 for its budget. Time is counted two ways: the
process's CPU time (what one uncontended thread would need, near enough, on a machine shared with other
work) and wall time. The budget is CPU time. It prints, per seed, the step and the times at which
validation accuracy passed 95 %, and for weight decay 0 the best validation accuracy within its budget and
the step it stopped at; then the per-step CPU time of each, the ratio no-WD / WD of the steps trained.

``--to-end`` trains each seed at each ``--precision`` (train.precision: "fp32", "bf16"; "auto" is bf16 on a CPU
with AVX-512 BF16 or AMX, else fp32) for the preset's own train.steps, without stopping at 95 % and without the
run without weight decay, and prints what a learner sees: the step validation passed 95 %, the lowest validation
accuracy after that (a loss spike), the validation accuracy at the last evaluation, and the weight norm there.
``--set`` overrides the preset's settings (as `fatstudio train --set`), e.g. to try a schedule before the preset
takes it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

THRESHOLD = 0.95


def run(seed: int, weight_decay: float | None, budget_s: float, log: Path | None = None, to_end: bool = False,
        precision: str | None = None, sets: tuple[str, ...] = ()) -> dict:
    """One run of the preset at ``seed`` (``weight_decay`` None: the preset's): until 95 % (with weight decay)
    or ``budget_s`` of CPU time, or with ``to_end`` for the preset's steps at ``precision``. With ``log``, each
    evaluation's numbers are appended to it as they come."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
    from fatstudio.core import training
    from fatstudio.core.runs.presets import preset

    overrides = [f"train.seed={seed}", "train.device=cpu", *sets]
    if not to_end:
        overrides += ["train.steps=1000000", "train.checkpoint_interval=1000000"]
    if precision is not None:
        overrides.append(f"train.precision={precision}")
    if weight_decay is not None:
        overrides.append(f"train.weight_decay={weight_decay}")
    cfg = preset("grokking").config.with_overrides(overrides)
    control = training.Control()
    out: dict = {"seed": seed, "weight_decay": cfg.train.weight_decay, "passed_step": None, "best_val_acc": 0.0,
                 "precision": precision, "evals": []}
    c0 = w0 = None
    with tempfile.TemporaryDirectory() as root:
        for ev in training.train(cfg, runs_root=Path(root), control=control):
            if isinstance(ev, training.Started):
                c0, w0 = time.process_time(), time.perf_counter()  # start-up (corpus, tokenizer, model) not counted
                out["precision"] = ev.precision
            elif isinstance(ev, training.Evaluation) and c0 is not None and w0 is not None:
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                out.update(step=ev.step, cpu_s=cpu, wall_s=wall, val_acc=ev.accuracy, train_acc=ev.train_accuracy,
                           weight_norm=ev.weight_norm)
                out["evals"].append((ev.step, ev.accuracy))
                out["best_val_acc"] = max(out["best_val_acc"], ev.accuracy or 0.0)
                if out["passed_step"] is None and (ev.accuracy or 0.0) >= THRESHOLD:
                    out.update(passed_step=ev.step, passed_cpu_s=cpu, passed_wall_s=wall)
                    if weight_decay is None and not to_end:
                        control.stop()
                if log is not None:
                    with log.open("a") as f:
                        f.write(json.dumps(out) + "\n")
                if cpu >= budget_s and not to_end:
                    control.stop()
    return out


def _last(path: Path) -> dict | None:
    """The latest evaluation a run logged, or None."""
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1]) if lines else None


def to_end(a: argparse.Namespace) -> int:
    """Each seed at each precision for the preset's steps: where validation passed 95 %, and how it ended."""
    runs = [(s, p) for s in a.seeds for p in a.precision]
    with ProcessPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(run, s, None, 0.0, None, True, p, tuple(a.set)) for s, p in runs]
        rows = [f.result() for f in futures]
    print(f"grokking preset{' with ' + ' '.join(a.set) if a.set else ''}, to its last step, one CPU thread per run")
    print(f"{'seed':>6} {'precision':>9} {'95% at':>7} {'lowest after':>13} {'last':>6} {'best':>6} {'‖θ‖ last':>9} "
          f"{'CPU s':>6}   validation accuracy at each evaluation")
    for r in rows:
        after = [acc for step, acc in r["evals"] if r["passed_step"] is not None and step >= r["passed_step"]]
        print(f"{r['seed']:>6} {r['precision']:>9} {r['passed_step'] or '–':>7} "
              f"{min(after) if after else float('nan'):>13.3f} {r['val_acc']:>6.3f} {r['best_val_acc']:>6.3f} "
              f"{r['weight_norm']:>9.1f} {r['cpu_s']:>6.0f}   " + " ".join(f"{acc:.2f}" for _, acc in r["evals"]))
    passed = [r["passed_step"] for r in rows if r["passed_step"] is not None]
    if passed:
        print(f"passed 95%: {len(passed)} of {len(rows)} runs, at steps {min(passed)}–{max(passed)} (median "
              f"{statistics.median(passed):.0f}); last evaluation ≥ 95% in {sum(r['val_acc'] >= THRESHOLD for r in rows)} "
              f"of {len(rows)}, lowest last {min(r['val_acc'] for r in rows):.3f}")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
        print(f"wrote {a.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103, 104, 105])
    ap.add_argument("--budget-s", type=float, default=600.0, help="CPU seconds each run may take (default 600)")
    ap.add_argument("--no-wd-budget-s", type=float, default=None, help="CPU seconds of a run without weight decay "
                    "(default: --budget-s)")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side, each on one thread")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument("--log", type=Path, default=None, help="a folder: each run appends its evaluations to "
                    "SEED-wd.jsonl or SEED-nowd.jsonl there")
    ap.add_argument("--report", type=Path, default=None, help="only print the table of the runs logged in this "
                    "folder so far (their latest evaluations)")
    ap.add_argument("--to-end", action="store_true", help="train the preset's steps at each --precision (see above)")
    ap.add_argument("--precision", nargs="+", default=["fp32", "bf16"], help="with --to-end (default: fp32 bf16)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a preset setting")
    a = ap.parse_args(argv)
    if a.to_end:
        return to_end(a)
    no_wd_budget = a.no_wd_budget_s if a.no_wd_budget_s is not None else a.budget_s
    if a.report:
        rows = tuple([_last(a.report / f"{s}-{kind}.jsonl") for s in a.seeds] for kind in ("wd", "nowd"))
    else:
        if a.log:
            a.log.mkdir(parents=True, exist_ok=True)
        logs = {kind: [a.log / f"{s}-{kind}.jsonl" if a.log else None for s in a.seeds] for kind in ("wd", "nowd")}
        with ProcessPoolExecutor(a.jobs) as pool:
            wd = [pool.submit(run, s, None, a.budget_s, p) for s, p in zip(a.seeds, logs["wd"])]
            no_wd = [pool.submit(run, s, 0.0, no_wd_budget, p) for s, p in zip(a.seeds, logs["nowd"])]
            rows = [f.result() for f in wd], [f.result() for f in no_wd]
    print(f"grokking preset, {len(a.seeds)} seeds, one CPU thread per run; budget {a.budget_s:.0f} CPU s "
          f"(no weight decay: {no_wd_budget:.0f})" + (f"; the runs logged in {a.report} so far" if a.report else ""))
    print(f"{'seed':>6} {'WD: 95% at step':>16} {'CPU s':>7} {'wall s':>7} {'ms/step':>8}   "
          f"{'no WD: best val acc':>19} {'by step':>8} {'CPU s':>7} {'ms/step':>8}")
    for seed, w, n in zip(a.seeds, *rows):
        left = right = ""
        if w:
            done = w["passed_step"] is not None
            left = (f"{w['passed_step'] if done else 'not by ' + str(w['step']):>16} "
                    f"{w['passed_cpu_s' if done else 'cpu_s']:>7.0f} {w['passed_wall_s' if done else 'wall_s']:>7.0f} "
                    f"{1000 * w['cpu_s'] / w['step']:>8.1f}")
        if n:
            right = f"{n['best_val_acc']:>19.1%} {n['step']:>8,} {n['cpu_s']:>7.0f} {1000 * n['cpu_s'] / n['step']:>8.1f}"
        print(f"{seed:>6} {left:>41}   {right}")
    passed = [w for w in rows[0] if w and w["passed_step"]]
    no_wd_rows = [n for n in rows[1] if n]
    if passed and no_wd_rows:
        step = statistics.median(w["passed_step"] for w in passed)
        print(f"passed 95%: {len(passed)} of {len(a.seeds)}; median step {step:,.0f}, median CPU "
              f"{statistics.median(w['passed_cpu_s'] for w in passed):.0f} s; without weight decay the best validation "
              f"accuracy of any seed was {max(n['best_val_acc'] for n in no_wd_rows):.1%} (steps trained no-WD / "
              f"median step of WD to 95%: {statistics.median(n['step'] for n in no_wd_rows) / step:.1f}×)")
    if a.out:
        a.out.write_text(json.dumps({"weight_decay": rows[0], "no_weight_decay": rows[1]}, indent=1))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
