"""Learner code runs in a child process (`child`), one per check, with a time limit: an endless loop is stopped,
a crash (an exception, ``exit()``, a segfault through ctypes) ends the child alone, and the caller gets a message
saying what happened. The clock starts once the child has imported torch (it says "ready"), so a busy machine's
slow start is not counted against the learner's code.

The request goes to the child's stdin as JSON, the answer comes back as the last line of its stdout that starts
with `MARK`; what the learner's code prints goes to its stderr (the message quotes its last line on a crash).
"""
from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ... import children
from ...config import ModelConfig
from .cases import Weights

MARK = "@@fatstudio-exercise "
READY = b"ready\n"
STARTUP_S = 120.0  # the child's imports on a busy machine
CHECK_LIMIT_S = 10.0  # the learner's code, every case of a check
TRAIN_LIMIT_S = 120.0  # two short runs, one with the learner's function in the model
CHILD = "fatstudio.core.paper.exercises.child"
WHOLE_LIMIT = 20_000_000  # parameters: a larger model in focus goes to a check as its first layer alone


def save_weights(cfg: ModelConfig, state: dict[str, torch.Tensor], path: Path) -> Path:
    """The model in focus for a child: its parameters and configuration in one safetensors file; of a model larger
    than `WHOLE_LIMIT` only what the cases read of a single layer (its first), not the decoder's forward pass."""
    if sum(v.numel() for v in state.values()) > WHOLE_LIMIT:
        state = {k: v for k, v in state.items() if not k.startswith("layers.") or k.startswith("layers.0.")}
    tensors = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in state.items()}  # tied: one each
    save_file(tensors, str(path), metadata={"config": json.dumps(cfg.to_dict())})
    return path


def load_weights(path: str | Path) -> Weights:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        cfg = ModelConfig.from_dict(json.loads(f.metadata()["config"]))
    return Weights(cfg.resolved(), {k: v.to(torch.float64) for k, v in load_file(str(path)).items()})


def _wait_ready(child: subprocess.Popen) -> bytes:
    """Read the child's stdout until its "ready" line; what came after it is returned."""
    assert child.stdout is not None
    got = b""
    deadline = time.monotonic() + STARTUP_S
    with selectors.DefaultSelector() as sel:
        sel.register(child.stdout, selectors.EVENT_READ)
        while READY not in got:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise TimeoutError
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got.partition(READY)[2]


def _ended(rc: int, err: str) -> str:
    """Why a child that gave no answer ended, in words."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        what = " (a segmentation fault: memory your code should not touch)" if name == "SIGSEGV" else ""
        return f"your code crashed the process that ran it with {name}{what}; nothing else was affected."
    last = next((line for line in reversed(err.strip().splitlines()) if line.strip()), "")
    return f"the process that ran your code ended (exit status {rc}) before it answered{': ' + last if last else ''}."


def run(request: dict[str, Any], limit_s: float) -> dict[str, Any]:
    """Send ``request`` to a fresh child and return its answer: ``{"passed": bool, "message": str, …}``."""
    with children.start([CHILD], env={"OMP_NUM_THREADS": "1"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, bufsize=0) as child:
        assert child.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a child that ended at once: its exit status says why
            child.stdin.write(json.dumps(request).encode())
        child.stdin.close()
        child.stdin = None  # communicate() must not flush it
        try:
            head = _wait_ready(child)
        except TimeoutError:
            child.kill()
            child.communicate()
            return {"passed": False, "message": f"Stopped — the process to run your code did not start within "
                                                f"{STARTUP_S:g} s (is the machine very busy?)."}
        try:
            out, err = child.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return {"passed": False, "message": f"Stopped — your code ran longer than {limit_s:g} s and was stopped "
                                                f"(an endless loop?)."}
        text = (head + out).decode(errors="replace")
        answers = [line[len(MARK):] for line in text.splitlines() if line.startswith(MARK)]
        if answers:
            return dict(json.loads(answers[-1]))
        return {"passed": False, "message": f"Stopped — {_ended(child.returncode, err.decode(errors='replace'))}"}


def request(exercise: str, source: str, mode: str = "check", weights: Path | None = None,
            steps: int = 0) -> dict[str, Any]:
    return {"exercise": exercise, "source": source, "mode": mode, "weights": str(weights) if weights else None,
            "steps": steps}


def check(exercise: str, source: str, cfg: ModelConfig | None = None, state: dict[str, torch.Tensor] | None = None,
          limit_s: float = CHECK_LIMIT_S) -> dict[str, Any]:
    """Check ``source`` for ``exercise`` in a child, on the model ``cfg``/``state`` too where given."""
    if cfg is None or state is None:
        return run(request(exercise, source), limit_s)
    with tempfile.TemporaryDirectory(prefix="fatstudio-exercise-") as tmp:
        path = save_weights(cfg, state, Path(tmp) / "model.safetensors")
        return run(request(exercise, source, weights=path), limit_s)


def train(exercise: str, source: str, steps: int = 30, limit_s: float = TRAIN_LIMIT_S) -> dict[str, Any]:
    """Train with my code in a child: ``{"passed", "message", "reference": [losses], "mine": [losses]}``."""
    return run(request(exercise, source, "train", steps=steps), limit_s)
