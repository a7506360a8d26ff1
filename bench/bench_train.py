"""Benchmark: nanoGPT's CPU recipe for shakespeare_char, fatstudio against nanoGPT in the same run.

    OMP_NUM_THREADS=1 python bench/bench_train.py [--steps 2000] [--seeds 1337 1338 1339 1340]

For each seed, in turn (A B A B ...), two whole processes, each timed by this parent from start to exit:
  fatstudio  `fatstudio train bench/shakespeare_char.toml --set data.corpus=... --set train.seed=S --out DIR`
  nanoGPT    `train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20
             --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
             --max_iters=N --lr_decay_iters=N --dropout=0.0 --always_save_checkpoint=True`, in a temporary copy
             of the checkout (see peers.py); train.py has no seed option, so a runner written into the copy
             shifts its torch.manual_seed(1337) to S. always_save_checkpoint keeps the final model, not the
             best of its 20-batch estimates.
Both evaluate every 250 steps (every N when N is not a multiple of 250). Then both final models are scored
on the SAME 400 validation batches: start offsets drawn once into the last 10% of the characters (both
programs' validation split), each side's windows encoded with its own vocabulary (nanoGPT's meta.pkl stoi;
fatstudio's char tokenizer, whose four specials come after the characters). Printed: per seed the
whole-process seconds, median ms/step, each program's own val estimate and the same-window loss; then
mean ± s.e. per side, the difference (parity: |diff| ≤ 0.01) and the speed ratio nanoGPT/fatstudio
(target ≥ 1.2). A benchmark, not a test: numbers vary with the machine's load.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers


def eval_interval(steps: int) -> int:
    return 250 if steps % 250 == 0 else steps


def run_fatstudio(seed: int, a, out: Path) -> dict:
    sets = [f"data.corpus={peers.toml_str(a.corpus)}", f"train.seed={seed}", f"train.steps={a.steps}",
            f"train.eval_interval={eval_interval(a.steps)}", *a.set]
    p = peers.run_timed(peers.fatstudio_train_cmd(peers.RECIPE_TOML, out, sets)).check("fatstudio train")
    from fatstudio.core.runs.folder import Run

    run = Run.open(out)
    t = run.config.train
    evals = peers.parse_evals(p.lines)
    return {"wall": p.wall_s, "ms": peers.fatstudio_ms_per_step(out, t.batch_size * run.config.model.l_max),
            "val": evals[-1][2] if evals else math.nan, "train_tokens": run.meta.get("data_sizes", {}).get("train_tokens")}


def run_nanogpt(nano: peers.NanoGPT, seed: int, a) -> dict:
    every = eval_interval(a.steps)
    out = f"out-{seed}"
    args = [*peers.NANOGPT_RECIPE, f"--out_dir={out}", f"--max_iters={a.steps}", f"--lr_decay_iters={a.steps}",
            f"--eval_interval={every}"]
    p = nano.run("train.py", args, seed=seed).check("nanoGPT train.py")
    ms = [ms for i, _, ms in peers.parse_iters(p.lines) if i >= 5 and i % every]  # no warm-up, no evaluations
    evals = peers.parse_evals(p.lines)
    return {"wall": p.wall_s, "ms": statistics.median(ms) if ms else math.nan, "val": evals[-1][2],
            "ckpt": nano.out_dir(out) / "ckpt.pt"}


def score(fat_dir: Path, nano_ckpt: Path | None, model_mod, text: str, stoi: dict | None, a) -> tuple[float, float]:
    """Both final models' loss on the same ``a.batches`` validation batches (12 windows of 64 characters)."""
    from fatstudio.core.runs.folder import Run

    loaded = Run.open(fat_dir).load_model()
    windows = peers.SameWindows.draw(text, a.batches, loaded.config.train.batch_size, loaded.config.model.l_max)
    fat = windows.fatstudio(loaded)
    if nano_ckpt is None:
        return fat, math.nan
    return fat, windows.nanogpt(peers.load_nanogpt_checkpoint(model_mod, nano_ckpt)[0], stoi)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000, help="training steps per run (default 2000)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338, 1339, 1340], help="one pair of runs each")
    ap.add_argument("--corpus", default=str(peers.CORPUS), help="tinyshakespeare (default ../shared/data/tinyshakespeare.txt)")
    ap.add_argument("--batches", type=int, default=400, help="validation batches on the same windows (default 400)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra fatstudio override")
    ap.add_argument("--fatstudio-only", action="store_true", help="skip nanoGPT")
    a = ap.parse_args(argv)
    a.corpus = str(peers.require_corpus(a.corpus))
    checkout = None if a.fatstudio_only else peers.require_nanogpt()
    peers.header("bench_train")
    print(f"recipe: {a.steps} steps, seeds {a.seeds}; nanoGPT: {peers.describe(checkout) if checkout else 'skipped'}")
    text = Path(a.corpus).read_text(encoding="utf-8")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp, \
            (peers.NanoGPT(checkout) if checkout else contextlib.nullcontext()) as nano:
        stoi = nano.prepare_shakespeare_char(Path(a.corpus))["stoi"] if checkout else None
        model_mod = peers.nanogpt_model(nano.dir) if checkout else None
        for seed in a.seeds:
            f = run_fatstudio(seed, a, Path(tmp) / f"fat-{seed}")
            if f["train_tokens"] not in (None, int(len(text) * 0.9)):
                print(f"  warning: fatstudio's train split has {f['train_tokens']} tokens, not {int(len(text) * 0.9)}")
            n = run_nanogpt(nano, seed, a) if checkout else {"wall": math.nan, "ms": math.nan, "val": math.nan, "ckpt": None}
            f["val400"], n["val400"] = score(Path(tmp) / f"fat-{seed}", n["ckpt"], model_mod, text, stoi, a)
            rows.append((f, n))
            print(f"seed {seed}: whole process fatstudio {f['wall']:.1f} s, nanoGPT {n['wall']:.1f} s "
                  f"(nanoGPT/fatstudio {peers.ratio(n['wall'], f['wall'])}); ms/step {f['ms']:.1f} vs {n['ms']:.1f}; "
                  f"own val estimate {f['val']:.4f} vs {n['val']:.4f}; {a.batches} same batches {f['val400']:.4f} vs "
                  f"{n['val400']:.4f}", flush=True)
    fat, nan = [r[0] for r in rows], [r[1] for r in rows]
    for key, label in (("val400", f"{a.batches} same batches"), ("val", "own 20-batch estimate")):
        (mf, sf), (mn, sn) = peers.mean_se(r[key] for r in fat), peers.mean_se(r[key] for r in nan)
        print(f"val loss, {label}: fatstudio {mf:.4f} ± {sf:.4f}, nanoGPT {mn:.4f} ± {sn:.4f} (mean ± s.e.)"
              + ("" if checkout is None else f"; difference {mf - mn:+.4f}"
                 + (f" → parity (|diff| ≤ 0.01): {abs(mf - mn) <= 0.01}" if key == "val400" else "")))
    wf, wn = statistics.median(r["wall"] for r in fat), statistics.median(r["wall"] for r in nan)
    mf, mn = statistics.median(r["ms"] for r in fat), statistics.median(r["ms"] for r in nan)
    print(f"whole process, median: fatstudio {wf:.1f} s, nanoGPT {wn:.1f} s → speed ratio nanoGPT/fatstudio "
          f"{peers.ratio(wn, wf)} (target ≥ 1.2)")
    print(f"ms/step, median: fatstudio {mf:.1f}, nanoGPT {mn:.1f} → {peers.ratio(mn, mf)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
