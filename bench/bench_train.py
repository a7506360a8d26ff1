"""Benchmark: nanoGPT's CPU recipe on tinyshakespeare through fatstudio's trainer (the same code path as
`fatstudio train`). Prints ms/step, tokens/s and the final validation loss, and the ratio against
nanoGPT's figures from benchmarks.md (measured on this kind of machine; 68.5 ms/step at 1 thread, val
loss 1.8857). Run with OMP_NUM_THREADS=1:

    OMP_NUM_THREADS=1 python bench/bench_train.py [--steps N] [--seeds 1337 1338 …]

A 20-batch validation estimate (nanoGPT's eval_iters=20) has a standard error of about 0.015, so each run
also gets a 400-batch estimate (about 0.003), and with several seeds the benchmark prints mean and spread."""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from fatstudio.core.config import RunConfig
from fatstudio.core.data import build_dataset, load_corpus
from fatstudio.core.runs import Run
from fatstudio.core.training import task_loss, train

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[1] / "shared" / "data" / "tinyshakespeare.txt"
NANOGPT_MS_PER_STEP, NANOGPT_VAL_LOSS = 68.5, 1.8857


@torch.no_grad()
def precise_val_loss(run_dir: Path, cfg: RunConfig, batches: int) -> float:
    """The trained model's mean loss over many random validation windows."""
    loaded = Run.open(run_dir).load_model()
    d = cfg.data
    ds = build_dataset(load_corpus(d.corpus, d.task), loaded.tokenizer, d.task, cfg.model.l_max, d.val_fraction)
    g = torch.Generator().manual_seed(0)
    return statistics.fmean(task_loss(loaded.model, ds.batch("val", cfg.train.batch_size, g), d.task)[0].item()
                            for _ in range(batches))


def train_once(cfg: RunConfig) -> dict:
    """One run of ``cfg``: median ms/step (evaluations excluded), the last 20-batch val loss, the 400-batch one."""
    step_ms, t0, val = [], None, None
    with tempfile.TemporaryDirectory() as tmp:
        last_t, last_step = None, None
        for ev in train(cfg, run_dir=Path(tmp) / "run"):
            if ev.kind == "started":
                t0 = time.perf_counter()
            elif ev.kind == "steps":
                now = time.perf_counter()
                if last_t is not None and ev.step > 20:  # skip warm-up steps
                    step_ms.append((now - last_t) * 1000 / (ev.step - last_step))
                last_t, last_step = now, ev.step
            elif ev.kind == "evaluation":
                val = ev.val_loss
                print(f"  step {ev.step}: train {ev.train_loss:.4f} val {ev.val_loss:.4f}", flush=True)
                last_t = None  # evaluation time is not step time
            elif ev.kind == "finished":
                total = time.perf_counter() - t0
        precise = precise_val_loss(Path(tmp) / "run", cfg, batches=400)
    return {"ms": statistics.median(step_ms), "total": total, "val": val, "val400": precise}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337])
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    if not Path(args.corpus).exists():
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    base = RunConfig.load(HERE / "shakespeare_char.toml").with_overrides(
        [f'data.corpus="{args.corpus}"', f"train.steps={args.steps}", *args.set])
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    results = []
    for seed in args.seeds:
        print(f"seed {seed}:")
        cfg = base.with_overrides([f"train.seed={seed}"])
        r = train_once(cfg)
        results.append(r)
        tokens_per_s = cfg.train.batch_size * cfg.model.l_max / r["ms"] * 1000
        print(f"  {r['ms']:.1f} ms/step (median), {tokens_per_s / 1000:.1f}k tokens/s, {r['total']:.1f} s in all; "
              f"val loss {r['val']:.4f} (eval_iters={cfg.train.eval_iters}), {r['val400']:.4f} (400 batches)")
    ms = statistics.median(r["ms"] for r in results)
    print(f"nanoGPT (benchmarks.md): {NANOGPT_MS_PER_STEP} ms/step, val loss {NANOGPT_VAL_LOSS}")
    print(f"speed ratio fatstudio/nanoGPT: {NANOGPT_MS_PER_STEP / ms:.2f}x")
    if len(results) > 1:
        for key, label in (("val", f"eval_iters={base.train.eval_iters}"), ("val400", "400 batches")):
            v = [r[key] for r in results]
            print(f"val loss ({label}) over {len(v)} seeds: mean {statistics.fmean(v):.4f}, sd {statistics.stdev(v):.4f}, "
                  f"min {min(v):.4f}, max {max(v):.4f}")
    print("val loss ≤ 1.89: " + ", ".join(f"seed {s}: {r['val'] <= 1.89}" for s, r in zip(args.seeds, results)))
    return 0

if __name__ == "__main__":
    sys.exit(main())
