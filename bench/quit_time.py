"""Benchmark: how long the app takes to quit after a user's short session.

    OMP_NUM_THREADS=1 python bench/quit_time.py [--repeats 3] [--xcb]

Each repeat starts the app (`fatstudio.cli.main([])`, what the ``fatstudio`` command runs) in a fresh process with
an empty runs folder and drives it as a user would: it trains the first preset for --train-s seconds and presses
Stop, prompts the run it loaded ("ROMEO:", 40 tokens), opens the Attention tab, waits --idle-s seconds, then
closes the window (what Ctrl+Q does). The child prints the wall-clock time of the close request; the parent takes
the time its process exits. Prints each repeat and the median, in seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(train_s: float, idle_s: float) -> None:
    """Runs the app; a timer drives it through the session and closes it."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    QApplication([sys.argv[0]])  # the app's `main` takes it over; timers need it first

    def window():
        return next((w for w in QApplication.topLevelWidgets() if type(w).__name__ == "MainWindow"), None)

    def script():
        w = None
        while (w := window()) is None or w.corpus_panel.info is None or not w.train_view.trainButton.isEnabled():
            yield 0.1
        w.train_view.trainButton.click()
        t0 = time.monotonic()
        while w.job is None or time.monotonic() - t0 < train_s:
            yield 0.1
        w.stop_training()
        while w.job is not None or w.loaded_model is None:
            yield 0.1
        panel = w.prompt_panel
        w.viewTabs.setCurrentWidget(w._prompt_host)
        panel.promptEdit.setPlainText("ROMEO:")
        panel.tokensSpin.setValue(40)
        panel.generateButton.click()
        while panel.is_running():
            yield 0.1
        w.viewTabs.setCurrentWidget(w._attention_host)
        yield idle_s
        print(json.dumps({"close_at": time.time()}), flush=True)
        w.close()

    steps = script()

    def advance():
        with contextlib.suppress(StopIteration):
            QTimer.singleShot(int(1000 * next(steps)), advance)

    QTimer.singleShot(500, advance)
    from fatstudio.cli import main

    sys.argv[1:] = []
    main()  # as the ``fatstudio`` command calls it


def measure(train_s: float, idle_s: float, xcb: bool) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "FATSTUDIO_RUNS": tempfile.mkdtemp(prefix="fatstudio-quit-"),
           "FATSTUDIO_CACHE": tempfile.mkdtemp(prefix="fatstudio-quit-cache-"),  # a decode step compiles afresh
           "FATSTUDIO_STATE": str(Path(tempfile.mkdtemp(prefix="fatstudio-quit-state-")) / "state.ini"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["QT_QPA_PLATFORM"] = "xcb" if xcb else env.get("QT_QPA_PLATFORM", "offscreen")
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(train_s), str(idle_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=900)
    exited = time.time()
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{"close_at"')]
    if not lines:
        raise SystemExit(f"the app never closed (rc {proc.returncode}):\n{err[-3000:]}")
    return {"quit_s": exited - lines[0]["close_at"], "rc": proc.returncode}


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--child"]:
        child(float(sys.argv[2]), float(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-s", type=float, default=4.0, help="seconds of training before Stop (default 4)")
    ap.add_argument("--idle-s", type=float, default=1.0, help="seconds on the Attention tab before closing")
    ap.add_argument("--xcb", action="store_true", help="a real display ($DISPLAY) instead of offscreen")
    a = ap.parse_args(argv)
    times = []
    for i in range(a.repeats):
        r = measure(a.train_s, a.idle_s, a.xcb)
        times.append(r["quit_s"])
        print(f"repeat {i + 1}: close to exit {r['quit_s']:.2f} s (rc {r['rc']})", flush=True)
    print(f"median close to exit: {statistics.median(times):.2f} s over {len(times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
