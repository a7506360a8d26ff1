"""Benchmark of the interventions (a benchmark, not a test), on the gpt-char preset's model (L = 4, H = 4,
d_e = 128, ℓ_max = 64; its char vocabulary of the python-stdlib corpus), untrained weights (timings do not
depend on them):

    OMP_NUM_THREADS=1 python bench/bench_interventions.py ablate       # goals: one head ≤ 2 s, the table ≤ 15 s
    OMP_NUM_THREADS=1 python bench/bench_interventions.py patch        # goal: layer × position map at T = 64 ≤ 5 s
    OMP_NUM_THREADS=2 python bench/bench_interventions.py token-loss   # goal: tinyshakespeare's val split ≤ 10 s

ablate uses the preset's validation batch (eval_iters × batch_size windows of the python-stdlib corpus);
token-loss scores the char validation split of tinyshakespeare (``--corpus``, default
shared/data/tinyshakespeare.txt in a folder above the checkout), read where it is.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch


def loaded_preset(corpus: str | None = None):
    from fatstudio.core.data.corpora import load_corpus
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.loaded import LoadedModel
    from fatstudio.core.model import build_model
    from fatstudio.core.runs.presets import preset

    config = preset("gpt-char").config
    if corpus:
        config = config.with_overrides([f"data.corpus={corpus}"])
    tok = train_tokenizer("char", load_corpus(config.data.corpus).texts())
    config = config.with_overrides([f"model.vocab_size={tok.vocab_size}"])
    torch.manual_seed(0)
    return LoadedModel(build_model(config.model).eval(), tok, config)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_ablate() -> None:
    from fatstudio.core.inspect.ablation import ablator_for
    from fatstudio.core.inspect.components import component
    from fatstudio.core.names import ComponentName

    loaded = loaded_preset()
    ablator, s = timed(lambda: ablator_for(loaded))
    print(f"validation batch ({ablator.val.n} rows × {loaded.config.model.l_max}) built in {s:.2f} s")
    base, s = timed(ablator.baseline)
    print(f"baseline loss {base:.4f} in {s:.2f} s")
    head = component(loaded.model, ComponentName.parse("self/2/1"))

    def one_head(kind: str) -> float:
        fresh = ablator_for(loaded)
        fresh.baseline(record=kind != "zero")
        return fresh.ablated([head], kind)
    for kind in ("zero", "mean", "resample"):
        _, s = timed(lambda kind=kind: one_head(kind))
        print(f"one head, {kind} (with the baseline it needs): {s:.2f} s (goal ≤ 2 s)")
        table, s = timed(lambda kind=kind: ablator_for(loaded).table(kind))
        print(f"table of {len(table.rows)} components, {kind}: {s:.2f} s (goal ≤ 15 s)")


def bench_patch() -> None:
    from fatstudio.core.inspect.patching import patch

    loaded = loaded_preset()
    T = loaded.config.model.l_max
    clean = ("def f(x):\n    return x + 1\n" * 4)[:T]
    corrupt = clean[:-8] + "y" * 8
    result, s = timed(lambda: patch(loaded.model, loaded.tokenizer, clean, corrupt))
    print(f"residual {len(result.residual)} layers × {len(result.residual[0])} positions and {len(result.heads)} "
          f"layers of heads at T = {T}: {s:.2f} s (goal ≤ 5 s)")


def bench_token_loss(corpus: str) -> None:
    from fatstudio.core.inspect.token_classes import breakdown, text_lines, worst
    from fatstudio.core.inspect.token_loss import token_losses, validation_split

    loaded = loaded_preset(corpus)
    cpu0 = time.process_time()
    split, s_split = timed(lambda: validation_split(loaded))
    result, s_score = timed(lambda: token_losses(loaded, split))
    _, s_rest = timed(lambda: (breakdown(result), worst(result, 100), text_lines(result)))
    cpu = time.process_time() - cpu0
    total = s_split + s_score
    print(f"{result.n_tokens} validation tokens of {corpus} scored in {total:.2f} s with {torch.get_num_threads()} "
          f"threads (goal ≤ 10 s on 2): the split read and laid out in windows {s_split:.2f} s, the forward passes "
          f"{s_score:.2f} s; {cpu:.2f} s of CPU in all; mean {result.mean:.4f}. The view's extras (classes, the "
          f"100 worst, the lines): {s_rest:.2f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["ablate", "patch", "token-loss"])
    near = [d / "shared/data/tinyshakespeare.txt" for d in Path(__file__).resolve().parents]
    p.add_argument("--corpus", default=str(next((f for f in near if f.exists()), near[2])))
    args = p.parse_args()
    {"ablate": bench_ablate, "patch": bench_patch, "token-loss": lambda: bench_token_loss(args.corpus)}[args.what]()


if __name__ == "__main__":
    main()
