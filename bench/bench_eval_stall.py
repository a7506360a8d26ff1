"""How long the GUI thread stops at an evaluation: the default preset trained in the real MainWindow.

    OMP_NUM_THREADS=1 python bench/bench_eval_stall.py [--steps 600] [--every 100] [--tab training|attention]
                                                       [--profile 25]

The first preset trains (its settings, but ``--steps`` steps with an evaluation every ``--every``) in the
MainWindow, offscreen unless QT_QPA_PLATFORM says otherwise, with the ``--tab`` view shown. A 5 ms QTimer
on the GUI thread records its ticks; a gap is the time between two ticks, and a gap "at an evaluation" is
one that ends within a second after an Evaluation, Sample or Probe event reached the GUI thread. Printed:
each evaluation's largest gap, the largest gap elsewhere, how long each trainer-event handler ran (the
most per call), and with ``--profile N`` the N functions of most cumulative time on the GUI thread over
the whole run (cProfile; its overhead inflates the gaps, so time without it). With the Training tab shown,
the time the Attention tab then takes to show (the steps it gets at once) is printed last. Goal: no gap
over 100 ms.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path

NEAR_S = 1.0  # a gap ending this soon after an evaluation's event counts as the evaluation's


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--every", type=int, default=100, help="steps between evaluations")
    ap.add_argument("--tab", choices=["training", "attention"], default="training",
                    help="the view shown while training (the Attention tab draws each probe's maps)")
    ap.add_argument("--profile", type=int, default=0, help="print the N costliest GUI-thread functions")
    ap.add_argument("--panel", nargs="*", default=["add_probe", "set_probes", "_draw_grid", "_draw_large",
                                                   "_draw_score_plot", "_fill_entropy_table"],
                    help="Attention panel methods to time as well (those it has)")
    a = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("FATSTUDIO_RUNS", tempfile.mkdtemp(prefix="fatstudio-stall-"))
    os.environ.setdefault("FATSTUDIO_STATE", str(Path(tempfile.mkdtemp(prefix="fatstudio-stall-state-")) / "s.ini"))
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from fatstudio.core.runs.presets import load_presets
    from fatstudio.qt.gc import MainThreadCollector
    from fatstudio.qt.main_window import MainWindow

    MainThreadCollector(app)  # as the app does (app.main)
    w = MainWindow()
    w.confirm_close = lambda: True
    w.resize(1440, 900)
    w.show()
    cfg = load_presets()[0].config
    w.train_panel.set_config(cfg.train.replace(steps=a.steps, eval_interval=a.every, checkpoint_interval=a.steps))
    deadline = time.monotonic() + 180
    while (w.corpus_panel.loading or w.corpus_panel.info is None
           or not w.workspace.jobs.idle) and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    if a.tab == "attention":
        w.viewTabs.setCurrentWidget(w._attention_host)
        assert w.attention_panel is not None  # made now, as a click on the tab makes it
        for _ in range(50):
            app.processEvents()
            time.sleep(0.01)

    spent: dict[str, list[float]] = defaultdict(list)  # handler → seconds of each call

    def timed(name, handler):
        def run(ev):
            t = time.perf_counter()
            handler(ev)
            spent[name].append(time.perf_counter() - t)
        return run

    for owner, prefix, names in ((w.training, "", ("_on_steps", "_on_evaluation", "_on_started")),
                                 (w.workspace, "workspace.", ("_on_probe", "_on_steps", "_on_evaluation"))):
        handlers = owner._handlers  # each event type's handler, as dispatched
        for kind, handler in handlers.items():
            if getattr(handler, "__name__", "") in names:
                handlers[kind] = timed(prefix + handler.__name__, handler)
    update = w.workspace.diagnose
    w.training.diag_timer.timeout.disconnect()
    w.training.diag_timer.timeout.connect(lambda: timed("diagnose", lambda _: update())(None))

    if w._attention_panel is not None:  # called through self.<name>: an instance attribute wraps them
        for name in a.panel:
            if hasattr(w._attention_panel, name):
                method = getattr(w._attention_panel, name)
                setattr(w._attention_panel, name,
                        lambda *args, _n=name, _m=method: timed(f"panel.{_n}", lambda _: _m(*args))(None))
    ticks: list[float] = []
    marks: list[tuple[float, str, int]] = []  # (time, event kind, step) of the evaluation's events
    timer = QTimer(interval=5, timeout=lambda: ticks.append(time.perf_counter()))
    timer.start()
    profile = cProfile.Profile() if a.profile else None
    loop = QEventLoop()
    w.trainingFinished.connect(lambda status: loop.quit())
    if profile:
        profile.enable()
    w.train_view.trainButton.click()
    events: list[tuple[float, str]] = []  # (time, kind) of every trainer event, to say what a gap followed
    w.job.event.connect(lambda ev: (events.append((time.perf_counter(), ev.kind)),
                                    marks.append((time.perf_counter(), ev.kind, getattr(ev, "step", 0)))
                                    if ev.kind in ("evaluation", "sample", "probe") else None))
    loop.exec()
    if profile:
        profile.disable()
    timer.stop()
    gaps = [(b, 1000 * (b - a)) for a, b in zip(ticks, ticks[1:])]
    at_eval: dict[int, float] = defaultdict(float)
    elsewhere: list[tuple[float, float]] = []  # (ms, end) of the gaps away from evaluations
    for end, ms in gaps:
        near = [step for t, _, step in marks if t - 0.05 <= end <= t + NEAR_S + ms / 1000]
        if near:
            at_eval[near[0]] = max(at_eval[near[0]], ms)
        else:
            elsewhere.append((ms, end))
    t0 = events[0][0] if events else ticks[0]

    def after(end: float) -> str:
        last = [kind for t, kind in events if t <= end]
        return f"{end - t0:.1f} s after the first event, after a {last[-1] if last else 'nothing'} event"
    print(f"first preset, {a.steps} steps, an evaluation every {a.every}, {a.tab} tab shown, "
          f"QT_QPA_PLATFORM={os.environ['QT_QPA_PLATFORM']}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print("largest GUI-thread gap at each evaluation (ms): " +
          ", ".join(f"step {s}: {ms:.0f}" for s, ms in sorted(at_eval.items())))
    print(f"max gap at an evaluation: {max(at_eval.values(), default=0):.0f} ms (goal: ≤ 100 ms)")
    print("largest gaps elsewhere: " + "; ".join(f"{ms:.0f} ms, {after(end)}" for ms, end in sorted(elsewhere)[-3:]))
    for name, secs in sorted(spent.items()):
        print(f"  {name}: {len(secs)} calls, max {1000 * max(secs):.1f} ms, total {1000 * sum(secs):.0f} ms")
    if a.tab == "training":  # the steps that arrived meanwhile are drawn when the Attention tab is shown
        t = time.perf_counter()
        w.viewTabs.setCurrentWidget(w._attention_host)
        app.processEvents()
        print(f"showing the Attention tab after the run: {1000 * (time.perf_counter() - t):.0f} ms "
              f"({len(w.attention_panel.probe_steps())} probe steps)")
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(a.profile)
    w.close()


if __name__ == "__main__":
    main()
