"""Benchmark: generating 500 characters at temperature 0.8, top-k 200, fatstudio against nanoGPT.

    OMP_NUM_THREADS=1 python bench/bench_generate.py [--repeats 5] [--run RUN_DIR] [--out-dir NANOGPT_OUT]

(a) inside the process: the recipe-size model (4 layers, 4 heads, d_e 128, l_max 64, no biases, random
    init) on each side, fatstudio through fatstudio.core.inspect.inference.generate (every TokenChoice consumed, no
    alternatives computed), nanoGPT through its model.generate on GPT(GPTConfig(n_layer=4, n_head=4,
    n_embd=128, block_size=64, vocab_size=65, bias=False, dropout=0.0)); both start from "\\n", one warm-up
    each, then --repeats alternating runs; median tokens/s and the ratio (target ≥ 4x).
(b) whole processes, timed by this parent from start to exit, alternating, median of --repeats:
    `fatstudio generate RUN_DIR --prompt "\\n" --tokens 500 --temperature 0.8 --top-k 200 --seed 1` against
    nanoGPT's `sample.py --out_dir=OUT --device=cpu --num_samples=1 --max_new_tokens=500 --compile=False`
    (target ≥ 1.5x). RUN_DIR and OUT come from --run / --out-dir, or from short trainings of the recipe
    (--train-steps, 50 by default) made here first.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers

TOKENS, TEMPERATURE, TOP_K = 500, 0.8, 200


def fatstudio_generator(text: str):
    """A random-init recipe model and a char tokenizer: ``gen(n)`` generates n tokens, returns how many."""
    import torch

    from fatstudio import RunConfig, build_model
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inspect.inference import generate

    tok = train_tokenizer("char", [text])
    torch.manual_seed(0)
    model = build_model(RunConfig.load(peers.RECIPE_TOML).model.replace(vocab_size=tok.vocab_size)).eval()
    extra = {"alternatives": 0} if "alternatives" in inspect.signature(generate).parameters else {}
    return lambda n: sum(1 for _ in generate(model, tok, "\n", tokens=n, temperature=TEMPERATURE, top_k=TOP_K,
                                             seed=1, **extra))


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

    sides = {"fatstudio": fatstudio_generator(text)}
    if checkout:
        sides["nanoGPT"] = nanogpt_generator(peers.nanogpt_model(checkout))
    r = in_process(sides, a.repeats)
    print(f"(a) in the process: fatstudio {r['fatstudio']:.0f} tokens/s, nanoGPT {r.get('nanoGPT', math.nan):.0f} "
          f"tokens/s (medians of {a.repeats}) → {peers.ratio(r['fatstudio'], r.get('nanoGPT', math.nan))} "
          f"(target ≥ 4x)", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-generate-") as tmp, \
            (peers.NanoGPT(checkout) if checkout else contextlib.nullcontext()) as nano:
        run = a.run
        if not run:
            run = Path(tmp) / "fat"
            sets = [f"data.corpus={peers.toml_str(corpus)}", f"train.steps={a.train_steps}",
                    f"train.eval_interval={a.train_steps}"]
            peers.run_timed(peers.fatstudio_train_cmd(peers.RECIPE_TOML, run, sets)).check("fatstudio train")
        cmds = {"fatstudio": lambda: peers.run_timed(peers.fatstudio_cmd(
            "generate", run, "--prompt", "\n", "--tokens", TOKENS, "--temperature", TEMPERATURE, "--top-k", TOP_K,
            "--seed", 1))}
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
    print(f"(b) whole process: fatstudio {w['fatstudio']:.2f} s, nanoGPT {w.get('nanoGPT', math.nan):.2f} s "
          f"(medians of {a.repeats}) → {peers.ratio(w.get('nanoGPT', math.nan), w['fatstudio'])} (target ≥ 1.5x)")
    for name, v in walls.items():
        print(f"    {name}: {', '.join(f'{x:.2f}' for x in v)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
