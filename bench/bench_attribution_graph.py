"""Benchmark of attribution graphs and feature interventions (a benchmark, not a test), on the trained gpt-char
run (L = 4, d_e = 128, d_mlp = 512) with a transcoder for every MLP layer:

    OMP_NUM_THREADS=2 python bench/bench_attribution_graph.py RUN_DIR TRANSCODERS_DIR   # goal: 32 tokens ≤ 10 s

TRANSCODERS_DIR holds mlp-0 … mlp-L−1 (``fatstudio features RUN_DIR --point mlp/l --out TRANSCODERS_DIR/mlp-l``;
default: RUN_DIR/features/mlp-l-step<last>). It prints the time to build the full graph of a 32-token prompt and
to prune it, the node and edge counts, and for the 5 features with the largest direct effect on the logit: that
edge, and how much zeroing the feature moves the logit (the ratio to the edge in brackets): frozen (attention,
norms, other features and errors held: exactly the edge), with every other MLP's output held (attention and norms
live: the direct effect through the live nonlinearities) and live (the model as it runs: the edge plus the
effects through later MLPs).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

PROMPT = "import os\nimport sys\n\ndef main(args):\n    return 0"  # cut to 32 tokens


def _num(info: dict, key: str) -> float:
    v = info.get(key)
    return float("nan") if v is None else float(v)


def main(argv: list[str] | None = None) -> int:
    from fatstudio.core.inspect.features.dictionary import dictionary_folder, load
    from fatstudio.core.inspect.features.graph import attribution_graph, prune
    from fatstudio.core.inspect.features.interventions import FeatureEdit, edited_logits
    from fatstudio.core.model.hooks import hooked, recorded
    from fatstudio.core.runs.folder import Run, load_at_step

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", default="/work/bench-runs/gpt-char")
    ap.add_argument("transcoders", nargs="?", default=None)
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args(argv)
    loaded = load_at_step(Run.open(args.run_dir), None)
    model, L = loaded.model, loaded.model.config.L
    folders = [Path(args.transcoders) / f"mlp-{l}" if args.transcoders else
               dictionary_folder(args.run_dir, f"mlp/{l}", loaded.step) for l in range(L)]
    tcs = [load(f) for f in folders]
    for t in tcs:
        q = t.info.get("quality", {})
        print(f"{t.describe()}: EV {_num(q, 'explained_variance'):.3f}, "
              f"CE score {_num(q, 'ce_loss_score'):.3f}")
    ids = loaded.tokenizer.encode(PROMPT)[:args.tokens]
    print(f"prompt: {len(ids)} tokens {loaded.tokenizer.decode(ids)!r}")
    t0 = time.perf_counter()
    g = attribution_graph(model, tcs, ids, tokenizer=loaded.tokenizer)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    p = prune(g)
    pruned = time.perf_counter() - t0
    kinds = lambda nodes: ", ".join(f"{sum(n.kind == k for n in nodes)} {k}" for k in ("embedding", "feature", "error"))
    print(f"target {g.nodes[-1].token!r} (p = {g.probability:.3f}), logit {g.logit:.4f} = baseline {g.baseline:.4f} "
          f"+ Σ edges {float(g.adjacency[-1].sum()):.4f}")
    print(f"full graph: {len(g.nodes)} nodes ({kinds(g.nodes)}), {int((g.adjacency != 0).sum()):,} edges, built in {built:.2f} s "
          f"(goal ≤ 10 s)")
    print(f"pruned (0.8, 0.98): {len(p.nodes)} nodes ({kinds(p.nodes)}), {len(p.edges())} edges, in {pruned:.2f} s; "
          f"kept {p.stats['node_influence']:.1%} of the influence, {p.stats['edge_score']:.1%} of the edge score")
    print("5 strongest features: edge into the logit | logit moved by zeroing it: frozen | MLPs held | live "
          "(ratios to the edge)")
    clean = g.logit
    outs = [f"mlp/{l}/out" for l in range(L)]
    with torch.no_grad(), recorded(model, outs) as got:
        model(torch.tensor([ids]))
    for i in g.strongest(5):
        n = g.nodes[i]
        edit = [FeatureEdit(tcs[n.layer], n.feature, 0.0, n.position)]
        edge = float(g.adjacency[-1, i])
        frozen = clean - float(edited_logits(model, ids, edit, frozen=True, transcoders=tcs)[-1, g.target])
        held = {name: (lambda _, y=got[name][0]: y) for l, name in enumerate(outs) if l != n.layer}
        with hooked(model, held):  # every other MLP's output held: attention and norms live
            mlps_held = clean - float(edited_logits(model, ids, edit)[-1, g.target])
        live = clean - float(edited_logits(model, ids, edit)[-1, g.target])
        print(f"  {n.label():>14}  act {n.activation:6.3f}  {edge:+.4f} | {frozen:+.4f} ({frozen / edge:.3f}) | "
              f"{mlps_held:+.4f} ({mlps_held / edge:.3f}) | {live:+.4f} ({live / edge:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
