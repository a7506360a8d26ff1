"""Benchmark: generating 500 characters at temperature 0.8, top-k 200, fatstudio against nanoGPT.

    OMP_NUM_THREADS=1 python bench/bench_generate.py [--repeats 5] [--run RUN_DIR] [--out-dir NANOGPT_OUT]

(a) inside the process: the recipe-size model (4 layers, 4 heads, d_e 128, l_max 64, no biases, random
    init) on each side, fatstudio through fatstudio.core.inference.generation.generate (every TokenChoice consumed, no
    alternatives computed), eagerly and through the compiled decode step (compiled first, into a temporary
    cache folder), nanoGPT through its model.generate on GPT(GPTConfig(n_layer=4, n_head=4,
    n_embd=128, block_size=64, vocab_size=65, bias=False, dropout=0.0)); both start from "\\n", one warm-up
    each, then --repeats alternating runs; median tokens/s and the ratio (target ≥ 4x).
(b) whole processes, timed by this parent from start to exit, alternating, median of --repeats:
    `fatstudio generate RUN_DIR --prompt "\\n" --tokens 500 --temperature 0.8 --top-k 200 --seed 1` against
    nanoGPT's `sample.py --out_dir=OUT --device=cpu --num_samples=1 --max_new_tokens=500 --compile=False`
    (target ≥ 1.5x), fatstudio with an empty cache folder (a first use: eager) and with the one (a) compiled
    into (without --compile the command line loads a compiled step it finds, never compiles). RUN_DIR and OUT come from --run /
    --out-dir, or from short trainings of the recipe (--train-steps, 50 by default) made here first.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

TOKENS, TEMPERATURE, TOP_K = 500, 0.8, 200


def fatstudio_generators(text: str) -> dict:
    """A random-init recipe model and a char tokenizer: ``gen(n)`` generates n tokens, returns how many; eagerly,
    and through the compiled decode step (compiled here first, in a child process, into the cache folder)."""
    import torch

    from fatstudio import RunConfig, build_model
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.decode_step import DecodeStep
    from fatstudio.core.inference.generation import generate

    tok = train_tokenizer("char", [text])
    torch.manual_seed(0)
    model = build_model(RunConfig.load(peers.RECIPE_TOML).model.replace(vocab_size=tok.vocab_size)).eval()
    decoder = DecodeStep(model)
    decoder.wait()
    print(f"compiling the decode step (once per model shape): "
          f"{decoder.take_note() or f'{decoder.compile_s:.1f} s'}", flush=True)
    gen = lambda d: lambda n: sum(1 for _ in generate(model, tok, "\n", tokens=n, temperature=TEMPERATURE,
                                                      top_k=TOP_K, seed=1, alternatives=0, decoder=d))
    return {"fatstudio": gen(None), **({"fatstudio compiled": gen(decoder)} if decoder.ready else {})}


def nanogpt_generator(module):
    import torch

    torch.manual_seed(0)
    with peers.quiet():
        model = module.GPT(module.GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65,
                                            bias=False, dropout=0.0)).eval()
    start = torch.zeros((1, 1), dtype=torch.long)  # "\n" is id 0 in shakespeare_char's vocabulary

    def gen(n: int) -> int:
        with torch.no_grad():
            return model.generate(start, n, temperature=TEMPERATURE, top_k=TOP_K).shape[1] - 1
    return gen


def in_process(sides: dict, repeats: int) -> dict:
    """Median tokens/s of each side's ``gen(TOKENS)``, after a warm-up, runs alternating."""
    rates = {name: [] for name in sides}
    for gen in sides.values():
        gen(50)
    for _ in range(repeats):
        for name, gen in sides.items():
            t0 = time.perf_counter()
            n = gen(TOKENS)
            rates[name].append(n / (time.perf_counter() - t0))
    return {name: statistics.median(r) for name, r in rates.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="alternating runs per measurement (default 5)")
    ap.add_argument("--corpus", default=str(peers.CORPUS), help="tinyshakespeare (default ../shared/data/tinyshakespeare.txt)")
    ap.add_argument("--run", help="a trained fatstudio run of the recipe (default: train one for --train-steps)")
    ap.add_argument("--out-dir", help="a nanoGPT out_dir with ckpt.pt (default: train one for --train-steps)")
    ap.add_argument("--train-steps", type=int, default=50, help="steps of the short trainings (default 50)")
    ap.add_argument("--fatstudio-only", action="store_true", help="skip nanoGPT")
    a = ap.parse_args(argv)
    corpus = peers.require_corpus(a.corpus)
    checkout = None if a.fatstudio_only else peers.require_nanogpt()
    peers.header("bench_generate")
    print(f"{TOKENS} tokens, τ={TEMPERATURE}, top-k {TOP_K}; nanoGPT: {peers.describe(checkout) if checkout else 'skipped'}",
          flush=True)
    text = corpus.read_text(encoding="utf-8")

    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp, \
            (peers.NanoGPT(checkout) if checkout else contextlib.nullcontext()) as nano:
        caches = {"": Path(tmp) / "cache-empty", " (compiled step cached)": Path(tmp) / "cache"}
        os.environ["FATSTUDIO_CACHE"] = str(caches[" (compiled step cached)"])  # filled by the compile here
        sides = fatstudio_generators(text)
        if checkout:
            sides["nanoGPT"] = nanogpt_generator(peers.nanogpt_model(checkout))
        r = in_process(sides, a.repeats)
        print(f"(a) in the process, tokens/s (medians of {a.repeats}):", flush=True)
        for name, rate in r.items():
            vs = "" if name == "nanoGPT" else f" → {peers.ratio(rate, r.get('nanoGPT', math.nan))} (target ≥ 4x)"
            print(f"    {name:20s} {rate:6.0f}{vs}", flush=True)

        run = a.run
        if not run:
            run = Path(tmp) / "fat"
            sets = [f"data.corpus={peers.toml_str(corpus)}", f"train.steps={a.train_steps}",
                    f"train.eval_interval={a.train_steps}"]
            peers.run_timed(peers.fatstudio_train_cmd(peers.RECIPE_TOML, run, sets)).check("fatstudio train")
        generate = peers.fatstudio_cmd("generate", run, "--prompt", "\n", "--tokens", TOKENS, "--temperature",
                                       TEMPERATURE, "--top-k", TOP_K, "--seed", 1)
        cmds = {f"fatstudio{what}": lambda c=c: peers.run_timed(generate, env={**peers.child_env(), "FATSTUDIO_CACHE": str(c)})
                for what, c in caches.items() if "fatstudio compiled" in sides or not what}
        if checkout:
            nano.prepare_shakespeare_char(corpus)
            out = a.out_dir and str(Path(a.out_dir).resolve())
            if not out:
                out = "out-generate"
                nano.run("train.py", [*peers.NANOGPT_RECIPE, f"--out_dir={out}", f"--max_iters={a.train_steps}",
                                      f"--lr_decay_iters={a.train_steps}", f"--eval_interval={a.train_steps}"]
                         ).check("nanoGPT train.py")
            cmds["nanoGPT"] = lambda: nano.run("sample.py", [f"--out_dir={out}", "--device=cpu", "--num_samples=1",
                                                             f"--max_new_tokens={TOKENS}", "--compile=False"])
        walls = {name: [] for name in cmds}
        for _ in range(a.repeats):
            for name, cmd in cmds.items():
                walls[name].append(cmd().check(f"{name} generation").wall_s)
    w = {name: statistics.median(v) for name, v in walls.items()}
    print(f"(b) whole process, seconds (medians of {a.repeats}):")
    for name, v in walls.items():
        vs = "" if name == "nanoGPT" else f" → {peers.ratio(w.get('nanoGPT', math.nan), w[name])} (target ≥ 1.5x)"
        print(f"    {name:36s} {w[name]:5.2f}{vs}   ({', '.join(f'{x:.2f}' for x in v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
