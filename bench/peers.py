"""The peer for fatstudio's benchmarks: a nanoGPT checkout, run side by side with fatstudio (benchmarks.md).

- `find_nanogpt` looks for the checkout: $NANOGPT_DIR if set (only there), else ../nanoGPT beside the
  repository, else ../../nanoGPT; `require_nanogpt` prints how to get it and exits with code 2.
- `NanoGPT` copies the checkout into a temporary working folder (the checkout is never written to),
  prepares data/shakespeare_char from the corpus file (copied to input.txt, so prepare.py downloads
  nothing) and runs its scripts as subprocesses with the same python and environment (OMP_NUM_THREADS
  included). nanoGPT's train.py seeds with torch.manual_seed(1337 + seed_offset) and has no seed option,
  so `NanoGPT.run("train.py", args, seed=S)` runs it through a small runner written into the copy that shifts that call
  to S + seed_offset (S = 1337 is nanoGPT unchanged); with ``keep_checkpoints=True`` the runner writes each
  checkpoint to its own ckpt-NNNNNNNN.pt instead of overwriting ckpt.pt (`NanoGPT.checkpoints` lists them).
- `run_timed` times a whole process from the parent (start to exit) and each line's arrival;
  `parse_iters` / `parse_evals` read the "iter N: loss X, time Yms" and "step N: train loss X, val loss Y"
  lines (fatstudio's CLI prints its evaluations in the same form); `Proc.evaluations` adds their seconds.
- `nanogpt_model` imports the checkout's model.py in-process; `load_nanogpt_checkpoint` loads a ckpt.pt.
- `SameWindows` scores both programs' models on the same validation windows (each in its own vocabulary).
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
from typing import Any

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

_RUNNER = '''"""Written by fatstudio's bench/peers.py: python _runner.py SCRIPT [ARGS...] runs nanoGPT's SCRIPT with
what the environment asks: PEER_SEED=S shifts its torch.manual_seed(1337 + k) to S + k (train.py has no seed
option); PEER_KEEP_CHECKPOINTS=1 writes each checkpoint (a dict with its iter_num) to ckpt-NNNNNNNN.pt beside
the ckpt.pt it would overwrite."""
import os, runpy, sys
import torch
if "PEER_SEED" in os.environ:
    seed, _manual_seed = int(os.environ["PEER_SEED"]), torch.manual_seed
    torch.manual_seed = lambda s: _manual_seed(s - 1337 + seed)
if os.environ.get("PEER_KEEP_CHECKPOINTS"):
    _save = torch.save
    def _kept(obj, f, *args, **kw):
        if isinstance(obj, dict) and "iter_num" in obj:
            f = os.path.join(os.path.dirname(f), f"ckpt-{obj['iter_num']:08d}.pt")
        return _save(obj, f, *args, **kw)
    torch.save = _kept
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
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
    wall_s: float  # from just before the process started to its exit
    rc: int | None
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # each line's arrival, seconds from the start

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def evaluations(self) -> dict[int, tuple[float, float]]:
        """step → (the program's own val loss estimate, seconds from the start to its evaluation line)."""
        return {int(m[1]): (float(m[3]), t) for line, t in zip(self.lines, self.times) if (m := EVAL_RE.search(line))}

    def check(self, what: str) -> Proc:
        if self.rc not in (0, None):
            tail = "\n".join(self.lines[-25:])
            raise SystemExit(f"{what} failed (exit {self.rc}):\n{tail}")
        return self


def run_timed(cmd: list[str], cwd: str | Path | None = None, echo=None, env: dict | None = None) -> Proc:
    """Run ``cmd`` (stderr into stdout), time it and each line's arrival from the parent; ``echo(line)`` true
    prints the line as it comes."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    lines, times = [], []
    for line in p.stdout:
        times.append(time.perf_counter() - t0)
        lines.append(line.rstrip("\r\n"))
        if echo and echo(lines[-1]):
            print("    " + lines[-1], flush=True)
    p.stdout.close()
    rc = p.wait()
    return Proc(time.perf_counter() - t0, rc, lines, times)


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
        (self.dir / "_runner.py").write_text(_RUNNER, encoding="utf-8")

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

    def run(self, script: str, args: list[str], seed: int | None = None, keep_checkpoints: bool = False,
            **kw) -> Proc:
        """``python SCRIPT ARGS`` in the copy (through the runner when ``seed`` or ``keep_checkpoints`` is given)."""
        asks = {**({"PEER_SEED": str(seed)} if seed is not None else {}),
                **({"PEER_KEEP_CHECKPOINTS": "1"} if keep_checkpoints else {})}
        cmd = [sys.executable, *(["_runner.py"] if asks else []), script, *args]
        return run_timed(cmd, cwd=self.dir, env=child_env(**asks), **kw)

    def out_dir(self, name: str) -> Path:
        return self.dir / name

    def checkpoints(self, name: str) -> dict[int, Path]:
        """The checkpoints a ``keep_checkpoints`` run wrote in its out_dir ``name``, by iteration, ascending."""
        return {int(p.stem.removeprefix("ckpt-")): p for p in sorted(self.out_dir(name).glob("ckpt-*.pt"))}


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


# ---- the same validation windows for both ------------------------------------------------------------------
@dataclass
class SameWindows:
    """Validation windows scored alike for both programs: ``starts`` (batches × B offsets, drawn once) into the
    last 10% of the characters (both programs' validation split), windows of T + 1 characters, each program's
    encoded with its own vocabulary (fatstudio's char tokenizer; nanoGPT's meta.pkl stoi). The models are scored
    as loaded: in eval mode (no dropout), float32."""
    val: str
    starts: Any  # a (batches, B) torch tensor
    T: int
    device: str = "cpu"

    @classmethod
    def draw(cls, text: str, batches: int, B: int, T: int, device: str = "cpu") -> SameWindows:
        import torch

        val = text[int(len(text) * 0.9):]
        return cls(val, torch.randint(len(val) - T, (batches, B), generator=torch.Generator().manual_seed(0)), T, device)

    def loss(self, loss_fn, ids) -> float:
        """Mean of ``loss_fn(x, y)`` over the batches of windows ids[s : s+T+1] (one batch per row of starts)."""
        import torch

        ids, offsets = ids.to(self.device), torch.arange(self.T + 1, device=self.device)
        with torch.no_grad():
            windows = (ids[row[:, None] + offsets] for row in self.starts.to(self.device))
            return statistics.fmean(float(loss_fn(w[:, :-1].contiguous(), w[:, 1:].contiguous())) for w in windows)

    def fatstudio(self, loaded) -> float:
        """A fatstudio model's loss (a LoadedModel: its model and its char tokenizer)."""
        import torch
        import torch.nn.functional as F

        ids = torch.tensor(loaded.tokenizer.encode(self.val))
        assert len(ids) == len(self.val), "fatstudio's char tokenizer should give one token per character"
        return self.loss(lambda x, y: F.cross_entropy(loaded.model(x).flatten(0, 1).float(), y.flatten()), ids)

    def nanogpt(self, model, stoi: dict) -> float:
        """A nanoGPT GPT's loss (``model(x, y)`` returns its logits and mean loss), its ids from ``stoi``."""
        import torch

        return self.loss(lambda x, y: model(x, y)[1], torch.tensor([stoi[c] for c in self.val]))


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
