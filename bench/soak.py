"""Soak: a long training run in the GUI (offscreen) with a prompt and an attention capture every minute.

    python bench/soak.py [--minutes 30] [--every 60] [--preset N]

The real MainWindow trains the default preset (its size; steps unbounded) from a Train click. Every
``--every`` seconds the soak takes a snapshot of the weights (the Train view's snapshot button, as a user
prompting mid-run does), generates 100 tokens from the Prompt tab (which draws their attention maps into
the Attention tab), and records the process's resident memory (VmRSS; with glibc also the C heap's bytes in use
and free, and Python's allocated blocks) and the GUI thread's gaps: a 10 ms
QTimer on the GUI thread logs the time between its ticks. At the end the run is stopped (checkpointed).

Printed: memory per minute, its spread after warm-up (the first ``--warmup`` minutes; goal: within 3% of
the first reading after warm-up, minute 4), and the p50/p99/max GUI-thread gap per minute and overall (goal:
p99 ≤ 20 ms). Run it with OMP_NUM_THREADS=1 on a machine doing nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # no /proc: the peak instead


def c_heap_mb() -> tuple[float, float] | None:
    """The C heap (glibc's mallinfo2, over all arenas): MB in use (mmapped blocks included) and MB free inside
    the heaps; None without glibc. RSS growing while "in use" stays flat is the allocator holding freed memory."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = MallInfo2
    m = f()
    return round((m.uordblks + m.hblkhd) / 2**20, 1), round(m.fordblks / 2**20, 1)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")


def soak(minutes: float, every: float, preset_index: int) -> list[dict]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("FATSTUDIO_RUNS", tempfile.mkdtemp(prefix="fatstudio-soak-"))
    os.environ.setdefault("FATSTUDIO_STATE", str(Path(tempfile.mkdtemp(prefix="fatstudio-soak-state-")) / "s.ini"))
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QPushButton

    app = QApplication.instance() or QApplication([])
    from fatstudio.core.runs.presets import load_presets
    from fatstudio.qt.gc import MainThreadCollector
    from fatstudio.qt.main_window import MainWindow

    if app.findChild(MainThreadCollector) is None:  # as the app does (app.main): collection, heap trimming
        MainThreadCollector(app)
    w = MainWindow()
    w.confirm_close = lambda: True
    w.show()
    cfg = load_presets()[preset_index].config
    w.train_panel.set_config(cfg.train.replace(steps=10_000_000, checkpoint_interval=2000))

    def pump(until, limit_s: float) -> bool:
        deadline = time.monotonic() + limit_s
        while not until() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.005)
        return until()

    pump(lambda: not w.corpus_panel.loading and w.corpus_panel.info is not None
         and w.workspace.jobs.idle, 180)
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    w.train_view.trainButton.click()
    if not pump(lambda: w.state == "running" and w.plots.n_points() > 0, 300):
        raise SystemExit(f"training did not start: {w.last_error or w.validation_error}")
    timer.start()
    snapshot = w.findChild(QPushButton, "snapshotButton")
    prompt = w.prompt_panel
    rows: list[dict] = []
    t0 = time.monotonic()
    for minute in range(1, int(minutes * 60 / every) + 1):
        pump(lambda m=minute: time.monotonic() - t0 >= m * every, every + 5)
        first_tick = len(ticks)
        before = w.loaded_model
        snapshot.click()
        took_snapshot = pump(lambda b=before: w.loaded_model is not None and w.loaded_model is not b, 60)
        prompt.promptEdit.setPlainText("def ")
        prompt.tokensSpin.setValue(100)
        maps: list = []
        prompt.attentionReady.connect(maps.append)
        finished: list[str] = []
        prompt.runFinished.connect(finished.append)
        prompt.generateButton.click()
        pump(lambda f=finished: bool(f), 60)
        prompt.attentionReady.disconnect(maps.append)
        prompt.runFinished.disconnect(finished.append)
        gaps = [1000 * (b - a) for a, b in zip(ticks[max(0, first_tick - 1):], ticks[first_tick:])]
        all_gaps = [1000 * (b - a) for a, b in zip(ticks, ticks[1:])]
        rows.append({"minute": round((time.monotonic() - t0) / 60, 2), "step": int(w.plots.train.x[-1]),
                     "rss_mb": round(rss_mb(), 1), "c_heap_mb": c_heap_mb(), "py_blocks": sys.getallocatedblocks(),
                     "snapshot": took_snapshot, "generated": finished[:1],
                     "attention": bool(maps), "window_gaps": len(all_gaps),
                     "p50_ms": round(pct(all_gaps, 0.5), 1), "p99_ms": round(pct(all_gaps, 0.99), 1),
                     "max_ms": round(max(all_gaps, default=0.0), 1), "prompt_gap_max_ms": round(max(gaps, default=0.0), 1)})
        print(json.dumps(rows[-1]), flush=True)
        del ticks[:-1]  # each row's gaps are its own minute's
    w.stop_training()
    pump(lambda: w.job is None, 120)
    timer.stop()
    w.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--every", type=float, default=60, help="seconds between prompts (and readings)")
    ap.add_argument("--warmup", type=int, default=3, help="readings left out of the memory goal")
    ap.add_argument("--preset", type=int, default=0, help="index into the presets (0: the default)")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print(f"soak: {a.minutes:g} min, a prompt every {a.every:g} s, preset #{a.preset}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}", flush=True)
    rows = soak(a.minutes, a.every, a.preset)
    steady = [r["rss_mb"] for r in rows[a.warmup:]] or [r["rss_mb"] for r in rows]
    base = steady[0]
    drift = max(abs(x - base) for x in steady) / base
    p99s = [r["p99_ms"] for r in rows]
    print(f"memory after warm-up: {min(steady):.0f}–{max(steady):.0f} MB, at most {100 * drift:.1f}% from "
          f"{base:.0f} MB (goal ≤ 3%); steps {rows[0]['step']}→{rows[-1]['step']}")
    print(f"GUI-thread gaps: p99 per minute median {statistics.median(p99s):.1f} ms, worst {max(p99s):.1f} ms, "
          f"max gap {max(r['max_ms'] for r in rows):.1f} ms (goal p99 ≤ 20 ms); every prompt generated: "
          f"{all(r['generated'] == ['finished'] for r in rows)}, attention drawn: {all(r['attention'] for r in rows)}")


if __name__ == "__main__":
    main()
