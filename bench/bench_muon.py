"""Benchmark: Muon against AdamW on nanoGPT's CPU recipe for shakespeare_char (bench/shakespeare_char.toml).

    OMP_NUM_THREADS=1 python bench/bench_muon.py [--adamw-steps 2000] [--muon-steps 1200] [--seeds 1337 1338 1339 1340]

For each seed, in turn: `fatstudio train` the recipe with AdamW for --adamw-steps, then with train.optimizer =
"muon" for --muon-steps (--set adds overrides to the Muon runs only, e.g. train.muon_lr=0.03), each a whole
process timed from the parent. Both final models are scored on the SAME validation batches (bench_train's:
--batches batches of 12 windows of 64 characters, start offsets drawn once into the last 10% of the text).
Printed: per seed each side's whole-process seconds and same-window loss; then mean ± s.e. per side, the
difference and whether Muon reached AdamW's loss (target: Muon ≤ AdamW on the mean, and per seed), and the
wall-time ratio. A benchmark, not a test: numbers vary with the machine's load.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_train
import peers


def run(seed: int, steps: int, sets: list[str], a, out: Path) -> dict:
    sets = [f"data.corpus={peers.toml_str(a.corpus)}", f"train.seed={seed}", f"train.steps={steps}",
            f"train.eval_interval={bench_train.eval_interval(steps)}", *sets]
    p = peers.run_timed(peers.fatstudio_train_cmd(peers.RECIPE_TOML, out, sets)).check("fatstudio train")
    val, _ = bench_train.score(out, None, None, a.text, None, a)
    return {"wall": p.wall_s, "val": val}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adamw-steps", type=int, default=2000)
    ap.add_argument("--muon-steps", type=int, default=1200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338, 1339, 1340])
    ap.add_argument("--corpus", default=str(peers.CORPUS), help="tinyshakespeare (default ../shared/data/tinyshakespeare.txt)")
    ap.add_argument("--batches", type=int, default=400, help="validation batches on the same windows (default 400)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for the Muon runs")
    ap.add_argument("--muon-only", action="store_true", help="skip AdamW (for probing Muon's settings)")
    a = ap.parse_args(argv)
    a.corpus = str(peers.require_corpus(a.corpus))
    a.text = Path(a.corpus).read_text(encoding="utf-8")
    peers.header("bench_muon")
    print(f"AdamW {a.adamw_steps} steps against Muon {a.muon_steps} steps {a.set}, seeds {a.seeds}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-muon-") as tmp:
        for seed in a.seeds:
            adamw = {"wall": float("nan"), "val": float("nan")} if a.muon_only else \
                run(seed, a.adamw_steps, [], a, Path(tmp) / f"adamw-{seed}")
            muon = run(seed, a.muon_steps, ["train.optimizer=\"muon\"", *a.set], a, Path(tmp) / f"muon-{seed}")
            rows.append((adamw, muon))
            print(f"seed {seed}: AdamW {a.adamw_steps} steps {adamw['val']:.4f} in {adamw['wall']:.1f} s; "
                  f"Muon {a.muon_steps} steps {muon['val']:.4f} in {muon['wall']:.1f} s "
                  f"(Muon ≤ AdamW: {muon['val'] <= adamw['val']})", flush=True)
    (ma, sa), (mm, sm) = (peers.mean_se(r[i]["val"] for r in rows) for i in (0, 1))
    print(f"val loss, {a.batches} same batches: AdamW {ma:.4f} ± {sa:.4f}, Muon {mm:.4f} ± {sm:.4f} (mean ± s.e.); "
          f"difference {mm - ma:+.4f} → Muon reaches AdamW's loss: {mm <= ma} "
          f"({sum(r[1]['val'] <= r[0]['val'] for r in rows)}/{len(rows)} seeds)")
    wa, wm = (statistics.median(r[i]["wall"] for r in rows) for i in (0, 1))
    print(f"whole process, median: AdamW {wa:.1f} s, Muon {wm:.1f} s → AdamW/Muon {peers.ratio(wa, wm)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
