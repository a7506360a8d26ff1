"""Benchmark: generating in the app's long-lived process, today's eager step against the static decode step run
eagerly and compiled (fatstudio.core.inference.decode_step.DecodeStep), and nanoGPT's model.generate when its
checkout is found (bench_generate's side, in the process).

    OMP_NUM_THREADS=1 python bench/bench_generate_app.py [--repeats 5]

The recipe-size model (4 layers, 4 heads, d_e 128, l_max 64, no biases, random init), 500 tokens at τ 0.8 and
top-k 200 from "\\n", seed 1:
(a) through generate, every TokenChoice consumed, no alternatives (as bench_generate's (a));
(b) as the Prompt panel runs it: prompt_events with 5 alternatives per token, handed over every 0.03 s.
One warm-up each, then --repeats alternating runs; median tokens/s and the ratio to today's eager. Prints the
one-off compile time too (into an empty cache folder), the time to load it for a second model of that shape,
and checks that every variant draws today's tokens.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers
from bench_generate import TEMPERATURE, TOKENS, TOP_K, in_process, nanogpt_generator

ALTERNATIVES, BATCH_S = 5, 0.03  # the Prompt panel's


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="alternating runs per measurement (default 5)")
    ap.add_argument("--corpus", default=str(peers.CORPUS), help="tinyshakespeare (default ../shared/data/tinyshakespeare.txt)")
    a = ap.parse_args(argv)
    import torch

    from fatstudio import RunConfig, build_model
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.decode_step import DecodeStep
    from fatstudio.core.inference.generation import generate
    from fatstudio.core.inference.loaded import LoadedModel
    from fatstudio.core.inference.prompt_events import Tokens, prompt_events
    from fatstudio.core.inference.prompting import encode_prompt

    peers.header("bench_generate_app")
    checkout = peers.find_nanogpt()
    print(f"{TOKENS} tokens, τ={TEMPERATURE}, top-k {TOP_K}; nanoGPT: "
          f"{peers.describe(checkout) if checkout else 'not found, skipped'}", flush=True)
    tok = train_tokenizer("char", [peers.require_corpus(a.corpus).read_text(encoding="utf-8")])
    config = RunConfig.load(peers.RECIPE_TOML)
    torch.manual_seed(0)
    model = build_model(config.model.replace(vocab_size=tok.vocab_size)).eval()

    static = DecodeStep(model, compiler=lambda d: dict.fromkeys(d.lengths, d.eager_step))
    os.environ["FATSTUDIO_CACHE"] = tempfile.mkdtemp(prefix="bench-generate-app-")  # a first compile
    compiled = DecodeStep(model)
    static.wait()
    compiled.wait()
    note = compiled.take_note()
    print(f"compiling the decode step (once per model shape, in a child process): "
          f"{note or f'{compiled.compile_s:.1f} s'}", flush=True)
    if compiled.ready:
        again = DecodeStep(model)
        again.wait()
        print(f"    a model of the same shape, from the cache folder: {again.compile_s:.2f} s", flush=True)
    decoders = {"eager (today)": None, "static step, eager": static}
    if compiled.ready:
        decoders["static step, compiled"] = compiled

    def generated(decoder, n: int, alternatives: int = 0) -> list[int]:
        return [c.id for c in generate(model, tok, "\n", tokens=n, temperature=TEMPERATURE, top_k=TOP_K, seed=1,
                                       alternatives=alternatives, decoder=decoder)]
    today = generated(None, TOKENS)
    for name, d in decoders.items():
        same = generated(d, TOKENS) == today
        print(f"    {name}: {'the same' if same else 'NOT the same'} {TOKENS} tokens as today's eager", flush=True)

    prompt = encode_prompt(tok, "\n", "generate", l_max=model.config.l_max)

    def app(decoder):
        loaded = LoadedModel(model, tok, config, decoder=decoder)
        return lambda n: sum(len(e.choices) for e in prompt_events(
            loaded, prompt, tokens=n, temperature=TEMPERATURE, top_k=TOP_K, seed=1, alternatives=ALTERNATIVES,
            batch_s=BATCH_S, attention=False, compiled=decoder is not None) if isinstance(e, Tokens))

    rows = {
        "(a) generate": {name: (lambda n, d=d: len(generated(d, n))) for name, d in decoders.items()},
        "(b) as in the app": {name: app(d) for name, d in decoders.items()},
    }
    if checkout:
        rows["(a) generate"]["nanoGPT"] = nanogpt_generator(peers.nanogpt_model(checkout))
    for row, sides in rows.items():
        r = in_process(sides, a.repeats)
        base = r["eager (today)"]
        print(f"{row}, tokens/s (medians of {a.repeats}):", flush=True)
        for name, rate in r.items():
            vs = "" if name == "eager (today)" else f"  → {peers.ratio(rate, base)} today's eager"
            print(f"    {name:24s} {rate:7.0f}{vs}", flush=True)
        if "nanoGPT" in r:
            best = max(v for k, v in r.items() if k != "nanoGPT")
            print(f"    fastest fatstudio vs nanoGPT: {peers.ratio(best, r['nanoGPT'])} (target ≥ 4x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
