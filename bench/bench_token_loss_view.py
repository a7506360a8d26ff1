"""GUI benchmark (not a test): the Token loss tab's text (`LossText`) scrolled over the whole tinyshakespeare
character validation split (~111k tokens), measuring how long the GUI thread is busy per frame.

    OMP_NUM_THREADS=1 python bench/bench_token_loss_view.py [--corpus PATH] [--xcb]

The split's tokens are the corpus's last 10% of characters (the char tokenizer's tokens); the losses are random
(painting does not depend on them). Three ways to scroll, each frame a synchronous repaint of the viewport
timed on the GUI thread: the mouse wheel (3 lines a frame, top to bottom), Page Down (a new screen every frame:
every line painted afresh, the worst case) and jumps of the scroll bar's thumb to random places. Printed:
frames, median, 99th percentile and largest frame time in ms, against the 16.7 ms of a 60 Hz frame.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np


def frames(view, values) -> list[float]:
    bar, out = view.verticalScrollBar(), []
    for v in values:
        t0 = time.perf_counter()
        bar.setValue(int(v))
        view.viewport().repaint()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def report(name: str, ms: list[float]) -> None:
    ms_sorted = sorted(ms)
    p99 = ms_sorted[min(len(ms) - 1, int(0.99 * len(ms)))]
    print(f"{name:<22} {len(ms):>6} frames   median {statistics.median(ms):6.2f} ms   p99 {p99:6.2f} ms   "
          f"max {max(ms):6.2f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    near = [d / "shared/data/tinyshakespeare.txt" for d in Path(__file__).resolve().parents]
    p.add_argument("--corpus", default=str(next((f for f in near if f.exists()), near[2])))
    p.add_argument("--xcb", action="store_true", help="a real X display (DISPLAY) instead of offscreen")
    args = p.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if args.xcb else "offscreen")
    from PySide6.QtWidgets import QApplication

    from fatstudio.core.inspect.token_classes import shown, text_lines
    from fatstudio.core.inspect.token_loss import TokenLoss
    from fatstudio.qt.widgets.loss_text import LossText
    from fatstudio.qt.widgets.token_view import probability_colors

    app = QApplication.instance() or QApplication([])
    text = Path(args.corpus).read_text(encoding="utf-8")
    val = list(text[int(len(text) * 0.9):])
    loss = np.random.default_rng(0).exponential(1.5, len(val))
    result = TokenLoss(val, loss, np.zeros(len(val), np.int64))
    t0 = time.perf_counter()
    lines, drawn, colors = text_lines(result), [shown(t) for t in val], probability_colors(np.exp(-loss))
    t1 = time.perf_counter()
    view = LossText()
    view.resize(1000, 700)
    view.show()
    app.processEvents()
    view.set_text(drawn, colors, lines, lambda i: f"token {i}")
    view.viewport().repaint()
    t2 = time.perf_counter()
    print(f"{len(val):,} tokens, {view.n_lines:,} lines, {view.visible_lines()} in view; lines and colours "
          f"{(t1 - t0) * 1000:.0f} ms (worker), set_text + first paint {(t2 - t1) * 1000:.0f} ms (GUI thread)")
    top = view.verticalScrollBar().maximum()
    report("wheel (3 lines)", frames(view, range(0, top + 1, 3)))
    report("page down", frames(view, range(0, top + 1, view.visible_lines())))
    report("thumb jumps", frames(view, np.random.default_rng(1).integers(0, top + 1, 300)))
    print("(a 60 Hz frame is 16.7 ms)")


if __name__ == "__main__":
    main()
