"""What saving the logit lens and the attribution with the probe maps adds to an evaluation (a benchmark, not a
test). Run with one CPU thread:

    OMP_NUM_THREADS=1 python bench/bench_probe_lens.py [--preset gpt-char] [--repeat 7] [--steps 0]

For a preset's model and data (``--steps`` training steps first, 0: its initial weights), an evaluation as the
trainer runs one: `loss.evaluate` on both splits, then the probe's maps, head scores and file
(`probes.probe_maps`, `measure_scores`, `save_probe`); with the lens: `probe_lens.measure` too, saved in the
same file. Printed: the median seconds of each over ``--repeat`` rounds (interleaved, so a busy machine slows
both alike), the lens's own time, and the ratios (of the medians, and the median of each round's). Goal: with / without ≤ 1.10.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt-char")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    from fatstudio.core.inspect import probe_lens, probes
    from fatstudio.core.model import build_model
    from fatstudio.core.runs.presets import load_presets
    from fatstudio.core.training.loss import evaluate
    from fatstudio.core.training.preparation import prepare

    preset = next(p for p in load_presets() if p.key == a.preset or a.preset.endswith(p.key))
    gen = prepare(preset.config)
    try:
        while True:
            next(gen)
    except StopIteration as done:
        tokenizer, dataset, config, _ = done.value
    t, dev = config.train, torch.device("cpu")
    torch.manual_seed(t.seed)
    model = build_model(config.model)
    if a.steps:
        from fatstudio.core.training.loss import next_batch, task_loss

        opt = torch.optim.AdamW(model.parameters(), lr=t.lr)
        g = torch.Generator().manual_seed(0)
        for _ in range(a.steps):
            loss = task_loss(model, next_batch(dataset, "train", t.batch_size, g, dev), config.data.task)[0]
            opt.zero_grad()
            loss.backward()
            opt.step()
    probe = probes.default_probe(dataset, tokenizer, config.data.task, config.model.l_max, t.seed)
    ids, ctx = probe.encode(tokenizer, config.model.arch, config.data.task, config.model.l_max)
    folder = Path(tempfile.mkdtemp(prefix="fatstudio-bench-lens-"))

    def evaluation(with_lens: bool) -> tuple[float, float]:
        t0 = time.perf_counter()
        evaluate(model, dataset, config.data.task, t, dev, t.seed)
        maps = probes.probe_maps(model, tokenizer, ids, ctx)
        scores = probes.measure_scores(model, tokenizer, maps)
        t1 = time.perf_counter()
        lens = probe_lens.measure(model, tokenizer, ids, ctx) if with_lens else None
        t2 = time.perf_counter()
        probes.save_probe(folder, 1, maps, probe, scores, lens)
        return time.perf_counter() - t0, t2 - t1

    evaluation(True)  # warm-up
    without, with_, lens_only = [], [], []
    for _ in range(a.repeat):
        without.append(evaluation(False)[0])
        total, lens_s = evaluation(True)
        with_.append(total)
        lens_only.append(lens_s)
    w0, w1, ls = (statistics.median(v) for v in (without, with_, lens_only))
    paired = statistics.median(b / a for a, b in zip(without, with_))
    print(f"{preset.key}: L = {config.model.L}, H = {config.model.H}, d_e = {config.model.d_e}, probe T = {len(ids)}, "
          f"eval_iters = {t.eval_iters} × batch {t.batch_size} × 2 splits; torch threads {torch.get_num_threads()}")
    print(f"evaluation without the lens {w0 * 1e3:8.1f} ms (median of {a.repeat})")
    print(f"evaluation with the lens    {w1 * 1e3:8.1f} ms   (the lens and attribution alone {ls * 1e3:.1f} ms)")
    print(f"ratio with / without        {w1 / w0:8.3f}   (goal ≤ 1.10; median of the rounds' ratios {paired:.3f}; "
          f"the lens's own time / without: {ls / w0:.3f})")


if __name__ == "__main__":
    main()
