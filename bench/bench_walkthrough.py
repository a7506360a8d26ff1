"""Benchmark: how long one step of the walkthrough takes to render (a benchmark, not a test).

    OMP_NUM_THREADS=1 python bench/bench_walkthrough.py [--preset gpt-char] [--rounds 3]

The preset's model (gpt-char: L = 4, ℓ_max = 64, d_e = 128), fresh, walked (`core.paper.walkthrough.walk`,
the Paper tab's worker job) on ℓ_max random tokens; then the Walkthrough view (offscreen, the size it has in the
Paper tab at 1440×900) shows every forward and every backward step, each laid out and painted (the events it
posts processed). Printed: the walk's time, the largest relative error of its gradient checks, and the steps'
median and largest render times, in wall-clock time and in this process's CPU time (which other programs on a
busy machine do not inflate).
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt-char")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from PySide6.QtWidgets import QApplication

    from fatstudio.core.app.focus import Focus
    from fatstudio.core.paper.paper_check import fresh_model
    from fatstudio.core.paper.walkthrough import walk
    from fatstudio.core.runs.presets import preset
    from fatstudio.qt.panels.walkthrough import WalkthroughView

    app = QApplication.instance() or QApplication([])
    cfg = preset(args.preset).config
    model = fresh_model(cfg.model, cfg.train.seed)
    c = model.config.resolved()
    x = [random.Random(0).randrange(c.vocab_size) for _ in range(c.l_max)]
    z = x[: c.l_max // 2] if c.arch == "edt" else None
    t0 = time.perf_counter()
    w = walk(model, x, z, initial=model)
    took = time.perf_counter() - t0
    worst = max(s.check.worst for s in w.backward if s.check is not None)
    print(f"{args.preset}: L = {c.L}, ℓ = {len(x)}, d_e = {c.d_e}; walk (forward, backward, {len(w.backward) - 1} "
          f"gradient checks) {took:.2f} s; worst relative error {worst:.1e} (model at step 0)")
    view = WalkthroughView(Focus())
    view.resize(800, 860)
    view.show()
    view.set_walk(w, None, "bench")
    for direction in (0, 1):
        view.directionCombo.setCurrentIndex(direction)
        times, cpu = [], []
        for _ in range(args.rounds):
            for i in range(len(view.steps())):
                t, c = time.perf_counter(), time.process_time()
                view.go(i)
                for _ in range(3):  # the layout and the paint the step asked for (a layout may post another)
                    app.processEvents()
                times.append((time.perf_counter() - t) * 1e3)
                cpu.append((time.process_time() - c) * 1e3)
        name = ("forward", "backward")[direction]
        n = len(view.steps())
        print(f"  {name}: {n} steps, render median {statistics.median(times):.1f} ms, largest {max(times):.1f} ms "
              f"(wall clock); CPU time median {statistics.median(cpu):.1f} ms, largest {max(cpu):.1f} ms")


if __name__ == "__main__":
    main()
