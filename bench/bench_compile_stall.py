"""How late the GUI thread runs while the Prompt panel's decode step compiles in the background.

    OMP_NUM_THREADS=1 python bench/bench_compile_stall.py [--control-s 30] [--timeout-s 300]

A recipe-size model (4 layers, 4 heads, d_e 128, ℓ_max 64, a char tokenizer of tinyshakespeare; random weights,
which do not change the timings) is given to a PromptPanel, offscreen unless QT_QPA_PLATFORM says otherwise.
A 10 ms QTimer on the GUI thread records how late each tick comes. First ``--control-s`` seconds of generating
without compiling (FATSTUDIO_COMPILE_DECODE's switch, read per generation), then generating with compiling on
until the decode step is ready (`decode_step.DecodeStep`, compiled once, with empty caches): the
median, 99th percentile and largest lateness of each, and how long compiling took.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"


def lateness(ms: list[float]) -> str:
    ms = sorted(ms)
    return (f"{len(ms)} ticks: median {statistics.median(ms):.1f} ms, 99th percentile "
            f"{ms[int(0.99 * (len(ms) - 1))]:.1f} ms, largest {ms[-1]:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--control-s", type=float, default=30.0, help="seconds of generating without compiling")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="the longest to wait for the compile")
    a = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()  # a first compile, as on a new machine
    os.environ["FATSTUDIO_CACHE"] = tempfile.mkdtemp()
    from PySide6.QtCore import QCoreApplication, QTimer
    from PySide6.QtWidgets import QApplication

    from fatstudio import ModelConfig, RunConfig, build_model
    from fatstudio.core.app.workspace import Workspace
    from fatstudio.core.config import DataConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.decode_step import decode_step_of
    from fatstudio.core.inference.loaded import LoadedModel
    from fatstudio.qt.jobs import new_jobs
    from fatstudio.qt.panels.prompt import PromptPanel

    app = QApplication(["bench_compile_stall"])
    tok = train_tokenizer("char", [CORPUS.read_text(encoding="utf-8")[:200_000]])
    cfg = RunConfig(ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=64, L=4, H=4, d_e=128, d_mlp=512,
                                bias=False), DataConfig())
    loaded = LoadedModel(build_model(cfg.model).eval(), tok, cfg)
    panel = PromptPanel(Workspace(jobs=new_jobs()))
    panel.resize(900, 700)
    panel.show()
    panel.set_model(loaded)
    panel.promptEdit.setPlainText("ROMEO:")
    panel.tokensSpin.setValue(300)
    late: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        late.append((now - last[0]) * 1000 - 10)
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(10)

    def generate_until(done, limit_s: float) -> tuple[float, float]:
        """Seconds, and tokens/s of the generations that ended meanwhile."""
        start, tokens = time.perf_counter(), 0
        while not done() and time.perf_counter() - start < limit_s:
            if not panel.is_running():
                tokens += len(panel.generated)
                panel.run()
            QCoreApplication.processEvents()
            time.sleep(0.001)
        took = time.perf_counter() - start
        return took, tokens / took

    os.environ["FATSTUDIO_COMPILE_DECODE"] = "0"
    _, rate = generate_until(lambda: False, a.control_s)
    print(f"generating, not compiling ({a.control_s:.0f} s, {rate:.0f} tokens/s): {lateness(late)}", flush=True)
    late.clear()
    os.environ["FATSTUDIO_COMPILE_DECODE"] = "1"
    step = decode_step_of(loaded)
    took, rate = generate_until(lambda: step.compile_s is not None or (step.done and not step.ready), a.timeout_s)
    print(f"generating while the decode step compiles ({took:.1f} s, {rate:.0f} tokens/s, ready: {step.ready}): "
          f"{lateness(late)}")
    app.quit()


if __name__ == "__main__":
    main()
