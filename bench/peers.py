"""The peer for fatstudio's benchmarks: a nanoGPT checkout, run side by side with fatstudio (benchmarks.md).

- `find_nanogpt` looks for the checkout: $NANOGPT_DIR if set (only there), else ../nanoGPT beside the
  repository, else ../../nanoGPT; `require_nanogpt` prints how to get it and exits with code 2.
- `NanoGPT` copies the checkout into a temporary working folder (the checkout is never written to),
  prepares data/shakespeare_char from the corpus file (copied to input.txt, so prepare.py downloads
  nothing) and runs its scripts as subprocesses with the same python and environment (OMP_NUM_THREADS
  included). nanoGPT's train.py seeds with torch.manual_seed(1337 + seed_offset) and has no seed option,
  so `NanoGPT.run("train.py", args, seed=S)` runs it through a small runner written into the copy that shifts that call
  to S + seed_offset (S = 1337 is nanoGPT unchanged).
- `run_timed` times a whole process from the parent (start to exit, or to the line `stop` accepts);
  `parse_iters` / `parse_evals` read the "iter N: loss X, time Yms" and "step N: train loss X, val loss Y"
  lines (fatstudio's CLI prints its evaluations in the same form).
- `nanogpt_model` imports the checkout's model.py in-process; `load_nanogpt_checkpoint` loads a ckpt.pt.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
RECIPE_TOML = ROOT / "bench" / "shakespeare_char.toml"
PEER_MODULES = ("numpy", "requests", "tiktoken")  # prepare.py imports requests, sample.py tiktoken
# nanoGPT's CPU recipe (benchmarks.md), less --max_iters/--lr_decay_iters/--eval_interval, set per run
NANOGPT_RECIPE = ["config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
                  "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
                  "--n_embd=128", "--dropout=0.0", "--always_save_checkpoint=True"]
GET_IT = ("get it with `git clone https://github.com/karpathy/nanoGPT` beside this repository "
          "(../nanoGPT), or point NANOGPT_DIR at a checkout")

ITER_RE = re.compile(r"iter (\d+): loss ([-\d.naif]+), time ([\d.]+)ms")
EVAL_RE = re.compile(r"step (\d+): train loss ([-\d.naif]+), val loss ([-\d.naif]+)")

_RUNNER = '''"""Written by fatstudio's bench/peers.py: run nanoGPT's SCRIPT with its torch.manual_seed(1337 + k)
shifted to SEED + k (train.py has no seed option).  Usage: python _seeded.py SCRIPT SEED [ARGS...]"""
import runpy, sys
import torch
script, seed = sys.argv[1], int(sys.argv[2])
_manual_seed = torch.manual_seed
torch.manual_seed = lambda s: _manual_seed(s - 1337 + seed)
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
'''


# ---- finding the peer -----------------------------------------------------------------------------------
def _candidates() -> list[Path]:
    if os.environ.get("NANOGPT_DIR"):
        return [Path(os.environ["NANOGPT_DIR"]).expanduser()]
    return [ROOT.parent / "nanoGPT", ROOT.parent.parent / "nanoGPT"]


def find_nanogpt() -> Path | None:
    """The nanoGPT checkout (a folder with train.py and model.py), or None."""
    for d in _candidates():
        if (d / "train.py").is_file() and (d / "model.py").is_file():
            return d.resolve()
    return None


def missing_message() -> str:
    return f"nanoGPT not found (looked in {', '.join(map(str, _candidates()))}); {GET_IT}."


def require_nanogpt(modules: tuple[str, ...] = PEER_MODULES) -> Path:
    """The checkout, and its scripts' imports present; else a message and exit code 2."""
    path = find_nanogpt()
    if path is None:
        print(missing_message() + " Or pass --fatstudio-only.", file=sys.stderr)
        raise SystemExit(2)
    missing = missing_modules(modules)
    if missing:
        print(f"nanoGPT's scripts need {', '.join(missing)}, missing from {sys.executable}: "
              f"pip install tiktoken requests", file=sys.stderr)
        raise SystemExit(2)
    return path


def missing_modules(names=PEER_MODULES) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def describe(path: Path) -> str:
    """The checkout and its commit, for the report."""
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         check=False, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(path.parent)})  # not a parent's
    return f"{path} @ {out.stdout.strip() or 'unknown commit'}"


def require_corpus(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        print(f"corpus not found: {path} (tinyshakespeare; give --corpus)", file=sys.stderr)
        raise SystemExit(2)
    return path.resolve()


# ---- processes ------------------------------------------------------------------------------------------
def child_env(**extra: str) -> dict:
    """The parent's environment (OMP_NUM_THREADS included), unbuffered output, fatstudio importable."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class Proc:
    wall_s: float  # from just before the process started to its exit (or to the `stop` line)
    rc: int | None
    lines: list[str] = field(default_factory=list)
    stopped: bool = False  # ended early because `stop` accepted a line

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def check(self, what: str) -> Proc:
        if self.rc not in (0, None) and not self.stopped:
            tail = "\n".join(self.lines[-25:])
            raise SystemExit(f"{what} failed (exit {self.rc}):\n{tail}")
        return self


def run_timed(cmd: list[str], cwd: str | Path | None = None, stop=None, echo=None, env: dict | None = None) -> Proc:
    """Run ``cmd`` (stderr into stdout), time it from the parent; ``stop(line)`` true ends it at that line
    (the time is taken at the line); ``echo(line)`` true prints the line as it comes."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    lines, stopped = [], False
    for line in p.stdout:
        line = line.rstrip("\r\n")
        lines.append(line)
        if echo and echo(line):
            print("    " + line, flush=True)
        if stop and stop(line):
            wall, stopped = time.perf_counter() - t0, True
            p.terminate()
            break
    p.stdout.close()
    rc = p.wait()
    if not stopped:
        wall = time.perf_counter() - t0
    return Proc(wall, rc, lines, stopped)


def parse_iters(lines) -> list[tuple[int, float, float]]:
    """nanoGPT's (iter, loss, ms) lines."""
    return [(int(m[1]), float(m[2]), float(m[3])) for m in map(ITER_RE.search, lines) if m]


def parse_evals(lines) -> list[tuple[int, float, float]]:
    """(step, train loss, val loss) evaluation lines, nanoGPT's or fatstudio's."""
    return [(int(m[1]), float(m[2]), float(m[3])) for m in map(EVAL_RE.search, lines) if m]


def fatstudio_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fatstudio", *map(str, args)]


def fatstudio_train_cmd(config: str | Path, out: str | Path, sets: list[str]) -> list[str]:
    return fatstudio_cmd("train", config, *[a for s in sets for a in ("--set", s)], "--out", out)


def toml_str(s: str | Path) -> str:
    """A --set value that stays a string (JSON's escapes are TOML's)."""
    return json.dumps(str(s))


def fatstudio_ms_per_step(run_dir: str | Path, tokens_per_step: int, skip: int = 5) -> float:
    """Median ms/step of a finished fatstudio run, from the throughput it logged (evaluations excluded)."""
    from fatstudio.core.runs.folder import Run

    rows = [r for r in Run.open(run_dir).metrics() if r.get("step", 0) > skip and r.get("tokens_per_s")]
    return statistics.median(1000 * tokens_per_step / r["tokens_per_s"] for r in rows) if rows else math.nan


# ---- nanoGPT in a working copy --------------------------------------------------------------------------
class NanoGPT:
    """A throw-away copy of the checkout to run nanoGPT's scripts in (``with NanoGPT(path) as nano:``)."""

    def __init__(self, checkout: Path):
        self.checkout = Path(checkout)
        self._tmp = tempfile.TemporaryDirectory(prefix="nanogpt-")
        self.dir = Path(self._tmp.name) / "nanoGPT"
        shutil.copytree(self.checkout, self.dir, ignore=shutil.ignore_patterns(
            ".git", "__pycache__", "out*", "*.bin", "*.pkl", "*.pt", "input.txt", "*.ipynb"))
        (self.dir / "_seeded.py").write_text(_RUNNER, encoding="utf-8")

    def __enter__(self) -> NanoGPT:
        return self

    def __exit__(self, *exc) -> None:
        self._tmp.cleanup()

    @property
    def data(self) -> Path:
        return self.dir / "data" / "shakespeare_char"

    def prepare_shakespeare_char(self, corpus: Path) -> dict:
        """Copy the corpus to input.txt, run prepare.py; return its meta (stoi, itos, vocab_size)."""
        import pickle

        shutil.copyfile(corpus, self.data / "input.txt")
        run_timed([sys.executable, "prepare.py"], cwd=self.data).check("nanoGPT's prepare.py")
        with open(self.data / "meta.pkl", "rb") as f:
            return pickle.load(f)

    def run(self, script: str, args: list[str], seed: int | None = None, **kw) -> Proc:
        """``python SCRIPT ARGS`` in the copy (through the seed runner when ``seed`` is given)."""
        cmd = [sys.executable, script, *args] if seed is None else \
            [sys.executable, "_seeded.py", script, str(seed), *args]
        return run_timed(cmd, cwd=self.dir, **kw)

    def out_dir(self, name: str) -> Path:
        return self.dir / name


@contextlib.contextmanager
def quiet():
    """Swallow what nanoGPT's code prints while building a model or its optimizer."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def nanogpt_model(path: Path):
    """nanoGPT's model.py as a module (GPT, GPTConfig), imported in-process without writing bytecode."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec = importlib.util.spec_from_file_location("nanogpt_model", Path(path) / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = before
    return module


def load_nanogpt_checkpoint(module, ckpt: Path, device: str = "cpu"):
    """The GPT saved in nanoGPT's ckpt.pt (a dict with its config: weights_only=False, our own temp file)."""
    import torch

    state = torch.load(ckpt, map_location=device, weights_only=False)
    with quiet():
        model = module.GPT(module.GPTConfig(**state["model_args"]))
    sd = {k.removeprefix("_orig_mod."): v for k, v in state["model"].items()}
    model.load_state_dict(sd)
    return model.to(device).eval(), state.get("iter_num")


# ---- statistics -----------------------------------------------------------------------------------------
def mean_se(values) -> tuple[float, float]:
    v = list(values)
    return statistics.fmean(v), (statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else math.nan)


def ratio(peer: float, ours: float) -> str:
    return f"{peer / ours:.2f}x" if ours and not math.isnan(ours) and not math.isnan(peer) else "n/a"


def header(what: str) -> None:
    import torch

    print(f"{what}: python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}, torch threads {torch.get_num_threads()}",
          flush=True)
