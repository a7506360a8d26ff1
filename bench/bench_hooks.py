"""Benchmark: what the hook points cost with nothing attached, against the code before them (a benchmark, not a
test).

    OMP_NUM_THREADS=1 python bench/bench_hooks.py [--base REV] [--rounds 40]

The code before is a detached worktree of ``--base`` (default: the parent of the commit that added
core/model/hooks.py), made in a temporary folder and removed at the end, imported in this same process as the
package ``fatstudio_before`` (the package imports itself relatively), so that both sides share the machine's
moment: each round runs one unit of each, in alternating order, and the ratio now/before is taken per round.
Both sides build the recipe-size model (4 layers, 4 heads, d_e 128, l_max 64, no biases, tied, random init, the
same weights). The units:

- training: 3 steps of forward, cross-entropy, backward and AdamW on random (12, 64) tokens, ms/step;
- a cached decode step: greedy, a token at a time (``model(x, cache=cache)``), 63 tokens, µs/token;
- ``generation.generate``: eager (no compiled step), greedy, no alternatives, 100 tokens, µs/token.

Printed: each side's median and the median of the per-round ratios now/before (1.00x: the same; above: slower).
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class Side:
    """One version of fatstudio (``package`` its import name) with the recipe model and what each unit needs."""

    def __init__(self, package: str) -> None:
        import torch

        pkg = importlib.import_module(package)
        model_mod = importlib.import_module(f"{package}.core.model")
        self.KVCache = model_mod.KVCache
        self.generate = importlib.import_module(f"{package}.core.inference.generation").generate
        tokenization = importlib.import_module(f"{package}.core.data.tokenization")
        self.tok = tokenization.train_tokenizer("char", ["".join(chr(c) for c in range(32, 32 + 61))])
        torch.manual_seed(0)
        cfg = pkg.ModelConfig(arch="gpt", vocab_size=65, l_max=64, L=4, H=4, d_e=128, d_mlp=512,
                              tie_embeddings=True, bias=False, dropout=0.0)
        self.model = model_mod.build_model(cfg)
        self.eval_model = model_mod.build_model(cfg).eval()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1)
        self.g = torch.Generator().manual_seed(1)

    def train_ms(self, steps: int = 3) -> float:
        import torch
        import torch.nn.functional as F

        t0 = time.perf_counter()
        for _ in range(steps):
            x = torch.randint(65, (12, 64), generator=self.g)
            F.cross_entropy(self.model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) / steps * 1e3

    def decode_us(self, n: int = 63) -> float:
        import torch

        with torch.inference_mode():
            cache, x = self.KVCache(), torch.zeros((1, 1), dtype=torch.long)
            t0 = time.perf_counter()
            for _ in range(n):
                x = self.eval_model(x, cache=cache)[:, -1:].argmax(-1)
            return (time.perf_counter() - t0) / n * 1e6

    def generate_us(self, n: int = 100) -> float:
        t0 = time.perf_counter()
        got = sum(1 for _ in self.generate(self.eval_model, self.tok, "A", tokens=n, temperature=0, alternatives=0,
                                           decoder=None))
        return (time.perf_counter() - t0) / got * 1e6


UNITS = {"train_ms": "training, ms/step", "decode_us": "cached decode step, µs/token",
         "generate_us": "generate (eager), µs/token"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", help="the revision before (default: the parent of the commit that added hooks.py)")
    ap.add_argument("--rounds", type=int, default=40, help="rounds, each one unit of each side (default 40)")
    a = ap.parse_args(argv)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()
    base = a.base or git("log", "--diff-filter=A", "--format=%H", "--", "fatstudio/core/model/hooks.py").split()[-1] + "~1"
    import torch

    changed = "yes" if git("status", "--porcelain", "--untracked-files=no") else "no"
    print(f"bench_hooks: python {sys.version.split()[0]}, torch {torch.__version__}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}; now {git('rev-parse', '--short', 'HEAD')} (uncommitted "
          f"changes: {changed}), before {git('rev-parse', '--short', base)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-hooks-") as tmp:
        before = Path(tmp) / "before"
        git("worktree", "add", "--detach", str(before), base)
        try:
            (Path(tmp) / "fatstudio_before").symlink_to(before / "fatstudio")
            sys.path.insert(0, tmp)
            sides = {"before": Side("fatstudio_before"), "now": Side("fatstudio")}
            for side in sides.values():  # warm-up
                side.train_ms(), side.decode_us(), side.generate_us(20)
            got: dict[str, dict[str, list[float]]] = {n: {k: [] for k in UNITS} for n in sides}
            for r in range(a.rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for key in UNITS:
                    for name in order:
                        got[name][key].append(getattr(sides[name], key)())
        finally:
            git("worktree", "remove", "--force", str(before))
    print(f"{a.rounds} rounds:                     median before  median now   now/before (median of the rounds' ratios)")
    for key, what in UNITS.items():
        b, n = got["before"][key], got["now"][key]
        ratio = statistics.median(y / x for x, y in zip(b, n))
        print(f"  {what:30s} {statistics.median(b):10.1f} {statistics.median(n):11.1f}   {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
