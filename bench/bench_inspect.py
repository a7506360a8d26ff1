"""Benchmark of prompting and inspecting (a benchmark, not a test). Run with one CPU thread for stable numbers:

    OMP_NUM_THREADS=1 QT_QPA_PLATFORM=offscreen python bench/bench_inspect.py

Measures, for a GPT-style model with L = 6 layers of H = 6 heads at ℓ_max = 256 (d_e = 384):

1. the cost of capturing attention for a 256-token prompt against a plain forward pass (goal ≤ 1.3×):
   ``model(x, return_attention=True)``, and the whole capture the prompt panel does (that forward, the maps as
   numpy arrays, the token strings);
2. the redraw time of the attention panel's 6 × 6 head grid at 256 tokens (goal ≤ 100 ms): new maps handed
   to the grid and the grid painted (``grab()`` forces the paint);
3. that generation streams without freezing the window: the longest gap between ticks of a 10 ms QTimer while
   the prompt panel generates in its worker thread (and the throughput).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch


def build(l_max: int, L: int, H: int, d_e: int):
    from fatstudio import ModelConfig, RunConfig, build_model
    from fatstudio.core.config import DataConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.loaded import LoadedModel

    text = "".join(chr(c) for c in range(32, 127)) + "\n"
    tok = train_tokenizer("char", [text])
    cfg = ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=l_max, L=L, H=H, d_e=d_e, d_mlp=4 * d_e)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    return LoadedModel(model, tok, RunConfig(model=cfg, data=DataConfig(task="next_token")), [], "bench", 0)


def timeit(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_capture(loaded, T: int, repeat: int) -> dict:
    from fatstudio.core.inference import generation
    from fatstudio.core.inference.generation import attention_maps_for_ids as capture_attention

    model, tok = loaded.model, loaded.tokenizer
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, tok.vocab_size - 4, (T,), generator=g).tolist()
    x = torch.tensor([ids])
    text = tok.decode(ids)
    with torch.no_grad():
        plain = timeit(lambda: model(x), repeat)
        attn = timeit(lambda: model(x, return_attention=True), repeat)
    panel = timeit(lambda: capture_attention(model, tok, ids), repeat)
    core = timeit(lambda: generation.attention_maps(model, tok, text), repeat)
    return {"plain_forward_ms": plain * 1e3, "forward_with_attention_ms": attn * 1e3,
            "ratio_forward": attn / plain, "panel_capture_ms": panel * 1e3, "ratio_panel_capture": panel / plain,
            "inference_attention_maps_ms": core * 1e3, "ratio_inference_attention_maps": core / plain}


def bench_grid(loaded, T: int, repeat: int) -> dict:
    from PySide6.QtWidgets import QApplication

    from fatstudio.core.app.workspace import Workspace
    from fatstudio.core.inference.generation import attention_maps_for_ids as capture_attention
    from fatstudio.qt.jobs import new_jobs
    from fatstudio.qt.panels.attention.panel import AttentionPanel

    app = QApplication.instance() or QApplication([])
    model, tok = loaded.model, loaded.tokenizer
    g = torch.Generator().manual_seed(1)
    maps_list = []
    for _ in range(2):  # alternate two different passes so every redraw has new numbers
        ids = torch.randint(0, tok.vocab_size - 4, (T,), generator=g).tolist()
        maps_list.append(capture_attention(model, tok, ids))
    panel = AttentionPanel(Workspace(jobs=new_jobs()))
    panel.resize(1400, 900)
    panel.show()
    app.processEvents()
    panel.show_maps(maps_list[0])
    app.processEvents()
    grid = panel.headGrid
    rows_of = []
    for maps in maps_list:
        rows_of.append([(f"l{name.layer}", A, maps.entropy(name)) for name, A in maps.maps.items()])
    state = {"i": 0}

    def grid_redraw():
        state["i"] += 1
        grid.set_maps(rows_of[state["i"] % 2], with_mean=False)
        grid.grab()  # paints every thumbnail

    def panel_redraw():
        state["i"] += 1
        panel.show_maps(maps_list[state["i"] % 2])
        panel.grab()  # paints the grid (with the mean column), the large map, the strips

    shape = (len(rows_of[0]), rows_of[0][0][1].shape[0])
    t_grid = timeit(grid_redraw, repeat)
    t_panel = timeit(panel_redraw, repeat)
    panel.close()
    return {"grid": f"{shape[0]} x {shape[1]} at {T} tokens", "grid_redraw_ms": t_grid * 1e3,
            "panel_redraw_ms": t_panel * 1e3}


def bench_streaming(loaded, tokens: int) -> dict:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from fatstudio.core.app.workspace import Workspace
    from fatstudio.qt.jobs import new_jobs
    from fatstudio.qt.panels.prompt import PromptPanel

    app = QApplication.instance() or QApplication([])
    panel = PromptPanel(Workspace(jobs=new_jobs()))
    panel.resize(900, 600)
    panel.show()
    panel.set_model(loaded)
    panel.promptEdit.setPlainText("def main():\n    ")
    panel.tokensSpin.setValue(tokens)
    panel.seedSpin.setValue(0)
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    done = {"t": None, "first": None}
    panel.runFinished.connect(lambda s: done.__setitem__("t", time.perf_counter()))
    panel.attentionReady.connect(lambda m: None)
    app.processEvents()
    timer.start()
    t0 = time.perf_counter()
    panel.run()
    while done["t"] is None and time.perf_counter() - t0 < 300:
        app.processEvents()
        if done["first"] is None and panel.generated:
            done["first"] = time.perf_counter()
        time.sleep(0.0005)
    timer.stop()
    gaps = np.diff([t for t in ticks if t0 <= t <= (done["t"] or time.perf_counter())]) * 1e3
    elapsed = (done["t"] or time.perf_counter()) - t0
    panel.close()
    return {"tokens": len(panel.generated), "elapsed_s": elapsed,
            "tokens_per_s": len(panel.generated) / elapsed if elapsed else float("nan"),
            "first_token_ms": ((done["first"] or t0) - t0) * 1e3,
            "timer_ticks": len(gaps) + 1, "max_gap_ms": float(gaps.max()) if len(gaps) else float("nan"),
            "p99_gap_ms": float(np.percentile(gaps, 99)) if len(gaps) else float("nan"),
            "median_gap_ms": float(np.median(gaps)) if len(gaps) else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=256, help="prompt length for the capture and grid (default 256)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--d-e", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--generate", type=int, default=400, help="tokens to generate in the streaming test")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', '(unset)')}, Qt platform {os.environ.get('QT_QPA_PLATFORM')}")
    loaded = build(args.tokens, args.layers, args.heads, args.d_e)
    print(f"model: gpt L={args.layers} H={args.heads} d_e={args.d_e} l_max={args.tokens} "
          f"({loaded.model.num_parameters() / 1e6:.2f} M parameters)")

    r = bench_capture(loaded, args.tokens, args.repeat)
    print(f"\n[capture] {args.tokens}-token prompt")
    print(f"  plain forward                      {r['plain_forward_ms']:8.2f} ms")
    print(f"  forward with return_attention      {r['forward_with_attention_ms']:8.2f} ms   "
          f"{r['ratio_forward']:.2f}x   (goal <= 1.3x)")
    print(f"  prompt panel capture (numpy maps)  {r['panel_capture_ms']:8.2f} ms   {r['ratio_panel_capture']:.2f}x")
    print(f"  inference.attention_maps           {r['inference_attention_maps_ms']:8.2f} ms   "
          f"{r['ratio_inference_attention_maps']:.2f}x")

    g = bench_grid(loaded, args.tokens, max(5, args.repeat // 2))
    print(f"\n[redraw] head grid {g['grid']}")
    print(f"  grid: new maps + paint             {g['grid_redraw_ms']:8.2f} ms   (goal <= 100 ms)")
    print(f"  whole panel: show_maps + paint     {g['panel_redraw_ms']:8.2f} ms   (grid + mean column + large map)")

    s = bench_streaming(loaded, args.generate)
    print(f"\n[streaming] {s['tokens']} tokens in {s['elapsed_s']:.2f} s ({s['tokens_per_s']:.0f} tokens/s), "
          f"first token after {s['first_token_ms']:.0f} ms")
    print(f"  10 ms QTimer: {s['timer_ticks']} ticks, gap median {s['median_gap_ms']:.1f} ms, "
          f"p99 {s['p99_gap_ms']:.1f} ms, max {s['max_gap_ms']:.1f} ms")


if __name__ == "__main__":
    main()
