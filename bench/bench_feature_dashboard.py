"""Benchmark: feature dashboards on the gpt-char preset's run (default /work/bench-runs/gpt-char, or a path
given) with an SAE of 1024 features (8 × d_e, k = 16) at self/1/resid_post: the one pass over the validation split
(`feature_activations`), the feature list (`stats`), and the dashboards of features (top 20 contexts, histogram,
promoted and suppressed tokens) as lookups after it. The target: a dashboard ≤ 2 s, the pass included.

The SAE is the saved one given by ``--dictionary DIR``, else a random one as a trainer initialises it (decoder
columns random unit vectors, W_enc = W_decᵀ, mean_in and b_dec the point's mean): its activations are as dense
(k per token) as a trained one's, so the times hold for either. On a shared machine the wall time is the
contended one; with one thread the CPU time printed beside it is what the pass costs on a machine to itself.
    OMP_NUM_THREADS=2 python bench/bench_feature_dashboard.py [RUN_DIR] [--dictionary DIR] [--repeat 3]"""
import argparse
import os
import statistics
import time

import torch

from fatstudio.core.inspect.features.dashboard import feature_activations, point_activations, text_activations
from fatstudio.core.inspect.features.dictionary import Dictionary, load
from fatstudio.core.runs.folder import Run, load_at_step

POINT = "self/1/resid_post"


def random_sae(loaded, d_f: int = 1024, k: int = 16) -> Dictionary:
    d_e = loaded.config.model.d_e
    sae = Dictionary("sae", POINT, POINT, d_e, d_e, d_f, k, {"init": "random"})
    x = torch.randint(loaded.config.model.vocab_size, (16, loaded.config.model.l_max), generator=torch.Generator().manual_seed(0))
    mean = point_activations(loaded.model, POINT, x).flatten(0, 1).mean(0)
    with torch.no_grad():
        sae.W_dec.normal_()
        sae.normalize_decoder()
        sae.W_enc.copy_(sae.W_dec.T)
        sae.mean_in.copy_(mean)
        sae.b_dec.copy_(mean)
    return sae.requires_grad_(False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", nargs="?", default="/work/bench-runs/gpt-char")
    ap.add_argument("--dictionary", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    loaded = load_at_step(Run.open(args.run), None)
    sae = load(args.dictionary) if args.dictionary else random_sae(loaded)
    print(f"{sae.describe()} ({'saved: ' + args.dictionary if args.dictionary else 'random init'})")
    passes, cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        acts = feature_activations(loaded, sae)
        passes.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    t_pass = statistics.median(passes)
    print(f"pass over the validation split: {acts.n_tokens} tokens, {len(acts.act)} activations, median {t_pass:.2f} s "
          f"of {args.repeat} ({', '.join(f'{t:.2f}' for t in passes)}); CPU time {statistics.median(cpu):.2f} s "
          f"(all threads; with 1 thread, the wall time of a machine to itself); load average {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    stats = acts.stats()
    print(f"feature list (stats of {len(stats)} features): {time.perf_counter() - t0:.3f} s")
    by_freq = sorted(stats, key=lambda s: -s.frequency)
    times = []
    for s in by_freq[:5] + by_freq[len(by_freq) // 2:len(by_freq) // 2 + 5]:
        t0 = time.perf_counter()
        d = acts.dashboard(s.index)
        times.append(time.perf_counter() - t0)
    print(f"dashboard lookups: median {statistics.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms "
          f"(frequent and median features)")
    t0 = time.perf_counter()
    text = text_activations(loaded, sae, "def main():\n    return 0\n")
    print(f"activations on a 26-character prompt: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    print(f"first dashboard (pass + list + one dashboard): {t_pass + max(times):.2f} s  (target ≤ 2 s)")
    top = by_freq[0]
    d = acts.dashboard(top.index)
    print(f"feature {top.index + 1}: freq {top.frequency:.3f}, mean {top.mean_act:.2f}, label {top.label!r}; "
          f"top context {''.join(d.contexts[0].tokens)!r} at {d.contexts[0].marked}; "
          f"promotes {[t for t, _ in d.effects.promoted[:5]]}; prompt acts {max(text.of(top.index)):.2f} max")


if __name__ == "__main__":
    main()
