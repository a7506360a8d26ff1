"""Benchmark: training on a corpus larger than fatstudio holds in memory (streamed into a token file).

    OMP_NUM_THREADS=1 nice python bench/bench_huge_corpus.py [--mb 1000] [--steps 20] [--tokenizer char]

Writes a text file of about ``--mb`` megabytes into a temporary folder (tinyshakespeare over and over, each
copy rotated to a random line and with a few random words changed; written a copy at a time, never held),
then runs ``python -m fatstudio train`` with a small model for ``--steps`` steps as a child process, three
times: on a 1 MB corpus (tinyshakespeare: the baseline, held in memory), on the large file with an empty
token cache (so it is scanned, its tokenizer trained on a sample, and encoded into the cache) and on it
again (the cache hit). For each it prints the child's wall time and peak RSS (``os.wait4``'s ru_maxrss of
that child alone), and the token file's size. The large file and the cache are deleted at the end.
With ``--sizes 10,50,100,191`` it instead trains once on a corpus of each size (MB) and prints the peak RSS
against the bound peak memory must stay within at every size: 400 MB + 1.5 × the corpus's size.
A benchmark, not a test: the times vary with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAKESPEARE = Path("/work/shared/data/tinyshakespeare.txt")
if not SHAKESPEARE.exists():
    SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
SMALL_MODEL = ["model.l_max=64", "model.L=2", "model.H=4", "model.d_e=64", "model.d_mlp=256"]


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> int:
    """About ``megabytes`` MB of text at ``path``; its size in bytes."""
    lines = SHAKESPEARE.read_text(encoding="utf-8").splitlines(keepends=True)
    words = sorted({w for line in lines for w in line.split() if w.isalpha()})
    rng = random.Random(seed)
    size, target = 0, megabytes * 1_000_000
    with open(path, "w", encoding="utf-8") as out:
        while size < target:
            k = rng.randrange(len(lines))
            copy = lines[k:] + lines[:k]
            for _ in range(200):  # a few changed words per copy (never a line's last, which holds its newline)
                i = rng.randrange(len(copy))
                parts = copy[i].split(" ")
                if len(parts) > 1:
                    parts[rng.randrange(len(parts) - 1)] = rng.choice(words)
                    copy[i] = " ".join(parts)
            text = "".join(copy)
            out.write(text)
            size += len(text.encode("utf-8"))
    return path.stat().st_size


def train(corpus: Path, out: Path, steps: int, tokenizer: str, env: dict) -> dict:
    """One ``fatstudio train`` child: wall seconds and peak RSS in MB."""
    cmd = [sys.executable, "-m", "fatstudio", "train", str(ROOT / "bench" / "shakespeare_char.toml"), "--quiet",
           "--out", str(out), "--set", f"data.corpus={json.dumps(str(corpus))}",
           "--set", f'data.tokenizer="{tokenizer}"', "--set", f"train.steps={steps}",
           "--set", f"train.eval_interval={steps}", "--set", "train.eval_iters=2",
           "--set", f"train.checkpoint_interval={steps}", "--set", "train.warmup=2"]
    cmd += [arg for s in SMALL_MODEL for arg in ("--set", s)]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"fatstudio train failed on {corpus}:\n{output[-3000:]}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024, "output": output}


def by_size(folder: Path, sizes: list[int], steps: int, tokenizer: str, env: dict) -> None:
    print(f"{'corpus MB':>9} {'held':>9} {'wall s':>7} {'peak RSS MB':>12} {'bound MB':>9} {'within':>7}", flush=True)
    for mb in sizes:
        corpus = folder / f"c{mb}.txt"
        size = write_corpus(corpus, mb) / 2**20
        r = train(corpus, folder / f"run-{mb}", steps, tokenizer, env)
        bound = 400 + 1.5 * size
        held = "streamed" if any((folder / "cache").rglob("tokens.bin")) else "in memory"
        print(f"{size:>9.0f} {held:>9} {r['seconds']:>7.0f} {r['peak_rss_mb']:>12.0f} {bound:>9.0f} "
              f"{str(r['peak_rss_mb'] <= bound):>7}", flush=True)
        corpus.unlink()
        shutil.rmtree(folder / "cache", ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=1000, help="size of the large corpus in MB (default 1000)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokenizer", default="char", choices=("char", "word", "bpe"))
    ap.add_argument("--folder", default=None, help="where to write the corpus and the cache (default: a temp folder)")
    ap.add_argument("--sizes", help="MB of each corpus to train once on, comma-separated (e.g. 10,50,100,191): "
                    "peak RSS against 400 MB + 1.5 × the size")
    a = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fatstudio-huge-", dir=a.folder))
    env = {**os.environ, "FATSTUDIO_CACHE": str(folder / "cache"), "FATSTUDIO_RUNS": str(folder / "runs")}
    if a.sizes:
        try:
            by_size(folder, [int(s) for s in a.sizes.split(",")], a.steps, a.tokenizer, env)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    try:
        huge = folder / "huge.txt"
        t0 = time.perf_counter()
        size = write_corpus(huge, a.mb)
        print(f"wrote {size / 1e6:,.0f} MB to {huge} in {time.perf_counter() - t0:.0f} s", flush=True)
        rows = [("1 MB baseline (in memory)", train(SHAKESPEARE, folder / "run-small", a.steps, a.tokenizer, env))]
        print(f"{rows[-1][0]}: {rows[-1][1]['seconds']:.0f} s, peak RSS {rows[-1][1]['peak_rss_mb']:.0f} MB", flush=True)
        for label, run in (("cold cache", "run-huge"), ("cached", "run-huge-again")):
            rows.append((f"{size / 1e6:,.0f} MB streamed, {label}", train(huge, folder / run, a.steps, a.tokenizer, env)))
            print(f"{rows[-1][0]}: {rows[-1][1]['seconds']:.0f} s, peak RSS {rows[-1][1]['peak_rss_mb']:.0f} MB",
                  flush=True)
        token_files = list((folder / "cache").rglob("tokens.bin"))
        tokens_mb = sum(p.stat().st_size for p in token_files) / 1e6
        base = rows[0][1]["peak_rss_mb"]
        print(f"\n{'corpus':<34} {'wall s':>7} {'peak RSS MB':>12} {'vs baseline':>12}")
        for label, r in rows:
            print(f"{label:<34} {r['seconds']:>7.0f} {r['peak_rss_mb']:>12.0f} {r['peak_rss_mb'] - base:>+12.0f}")
        cold, hot = rows[1][1]["seconds"], rows[2][1]["seconds"]
        print(f"token file: {tokens_mb:,.0f} MB ({len(token_files)} file); encoding into it took about "
              f"{cold - hot:.0f} s (cold minus cached run)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
