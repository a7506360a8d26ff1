"""GUI benchmark: training throughput from the GUI vs headless, GUI-thread responsiveness while training,
and the time from process start to the window shown.

    python bench/bench_gui.py [--steps 200] [--repeats 3]

Every measurement runs in a fresh subprocess with OMP_NUM_THREADS=1 (see docs/benchmarks.md); headless and
GUI runs are interleaved (A B A B ...) and medians are quoted. Both sides train the same config (the first
preset, the nanoGPT-sized char model, evaluation and checkpoint only at the end, no samples) for the same
number of steps; tokens/s is (B·ℓ_max)·Δstep/Δelapsed between the first and the last Steps event, from the
trainer's own clock, so the first (warm-up) batch of steps is skipped. The GUI run drives the real
MainWindow (offscreen unless --xcb): the settings are set through its controls and Train is clicked, while
a 10 ms QTimer on the GUI thread records the gaps between its ticks.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _overrides(steps: int) -> list[str]:
    return [f"train.steps={steps}", f"train.eval_interval={steps}", "train.eval_iters=2",
            f"train.checkpoint_interval={steps}", "train.sample_tokens=0", "train.device=cpu"]


def _throughput(points: list[tuple[int, float]], tokens_per_step: int) -> float:
    """tokens/s between the first and the last Steps event (skipping the first batch: warm-up)."""
    (s0, t0), (s1, t1) = points[0], points[-1]
    return tokens_per_step * (s1 - s0) / (t1 - t0)


# ---- children ---------------------------------------------------------------------------------------------
def child_headless(steps: int) -> dict:
    from fatstudio.core import training
    from fatstudio.core.runs.presets import load_presets

    cfg = load_presets()[0].config.with_overrides(_overrides(steps))
    points = []
    with tempfile.TemporaryDirectory() as root:
        for ev in training.train(cfg, runs_root=Path(root)):
            if ev.kind == "steps":
                points.append((ev.step, ev.elapsed_s))
    tps = _throughput(points, cfg.train.batch_size * cfg.model.l_max)
    return {"tokens_per_s": tps, "events": len(points)}


def child_gui(steps: int) -> dict:
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from fatstudio.core.runs.presets import load_presets
    from fatstudio.qt.main_window import MainWindow

    cfg = load_presets()[0].config.with_overrides(_overrides(steps))
    w = MainWindow()
    w.confirm_close = lambda: True
    w.show()
    w.train_panel.set_config(cfg.train)  # the same settings, through the panel
    points: list[tuple[int, float]] = []
    ticks: list[float] = []
    state = {"training": False}

    def on_event(ev):
        if ev.kind == "started":
            state["training"] = True
            state["cpu0"], state["wall0"] = time.thread_time(), time.perf_counter()
        elif ev.kind == "steps":
            points.append((ev.step, ev.elapsed_s))
        elif ev.kind == "finished":
            state["training"] = False
            state["cpu"], state["wall"] = time.thread_time() - state["cpu0"], time.perf_counter() - state["wall0"]

    def tick():
        if state["training"]:
            ticks.append(time.perf_counter())

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    deadline = time.monotonic() + 120  # let the startup work (corpus preview, panel imports) finish first
    while (w.corpus_panel.loading or w.corpus_panel.info is None or not w.workspace.jobs.idle)\
            and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    assert w.train_view.trainButton.isEnabled(), w.validation_error
    done: list[str] = []
    loop = QEventLoop()
    w.trainingFinished.connect(lambda status: (done.append(status), loop.quit()))
    w.train_view.trainButton.click()
    w.job.event.connect(on_event)
    loop.exec()
    timer.stop()
    gaps = [1000 * (b - a) for a, b in zip(ticks, ticks[1:])]
    tps = _throughput(points, cfg.train.batch_size * cfg.model.l_max)
    w.close()
    return {"tokens_per_s": tps, "events": len(points), "gaps_ms": gaps, "status": done[0],
            "gui_cpu_fraction": state.get("cpu", 0.0) / max(state.get("wall", 1.0), 1e-9)}


def child_startup() -> dict:
    """Time from process start (the parent's clock just before spawning) to the first paint of the window."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    app = QApplication([])

    class FirstPaint(QObject):
        def eventFilter(self, obj, ev):
            if ev.type() == QEvent.Type.Paint and hasattr(obj, "window") and \
                    type(obj.window()).__name__ == "MainWindow":
                print(json.dumps({"shown_at": time.time()}), flush=True)
                os._exit(0)
            return False

    f = FirstPaint()
    app.installEventFilter(f)
    from fatstudio.cli import main  # what the `fatstudio` command runs
    return {"rc": main([])}


# ---- parent -----------------------------------------------------------------------------------------------
def _spawn(args: list[str], env_extra: dict | None = None, timeout: float = 900) -> tuple[dict, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env_extra or {})}
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["FATSTUDIO_RUNS"] = tempfile.mkdtemp(prefix="fatstudio-bench-")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    t0 = time.time()
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"child {args} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1]), t0


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--startups", type=int, default=5)
    ap.add_argument("--xcb", action="store_true", help="use the X11 platform (DISPLAY must be set) for GUI runs")
    ap.add_argument("--child", choices=["headless", "gui", "startup"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        out = {"headless": lambda: child_headless(a.steps), "gui": lambda: child_gui(a.steps),
               "startup": child_startup}[a.child]()
        print(json.dumps(out), flush=True)
        return

    gui_env = {"QT_QPA_PLATFORM": "xcb"} if a.xcb else {}
    print(f"fatstudio GUI benchmark: first preset, {a.steps} steps, OMP_NUM_THREADS=1, "
          f"{a.repeats}× interleaved (headless, GUI); platform {'xcb' if a.xcb else 'offscreen'}")
    head, gui, gaps = [], [], []
    for i in range(a.repeats):
        h, _ = _spawn(["--child", "headless", "--steps", str(a.steps)])
        g, _ = _spawn(["--child", "gui", "--steps", str(a.steps)], gui_env)
        head.append(h["tokens_per_s"])
        gui.append(g["tokens_per_s"])
        gaps.extend(g["gaps_ms"])
        print(f"  round {i + 1}: headless {h['tokens_per_s']:,.0f} tokens/s, GUI {g['tokens_per_s']:,.0f} tokens/s "
              f"({g['status']}; GUI thread busy {100 * g['gui_cpu_fraction']:.1f}% of the time; {len(g['gaps_ms'])} timer "
              f"gaps, p99 {_pct(g['gaps_ms'], 0.99):.1f} ms)", flush=True)
    mh, mg = statistics.median(head), statistics.median(gui)
    print(f"training throughput: headless {mh:,.0f} tokens/s, GUI {mg:,.0f} tokens/s (median); "
          f"GUI/headless = {mg / mh:.3f} (goal ≥ 0.95)")
    print(f"10 ms QTimer on the GUI thread while training: {len(gaps)} gaps, median {statistics.median(gaps):.1f} ms, "
          f"p99 {_pct(gaps, 0.99):.1f} ms, max {max(gaps):.1f} ms (goal: p99 ≤ 50 ms)")
    starts = []
    for _ in range(a.startups):
        s, t0 = _spawn(["--child", "startup"], gui_env, timeout=120)
        starts.append(s["shown_at"] - t0)
    print(f"process start → window shown: median {statistics.median(starts):.2f} s "
          f"(runs: {', '.join(f'{x:.2f}' for x in starts)}; goal ≤ 2 s)")


if __name__ == "__main__":
    main()
