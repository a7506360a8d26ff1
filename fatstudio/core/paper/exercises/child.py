"""The child process that runs learner code (`sandbox`): ``python -m fatstudio.core.paper.exercises.child``.

Its imports (torch among them) come first; then it reads its request from stdin, says "ready" (the learner's time
limit starts), runs the check or the training with the learner's function and writes its answer (`sandbox.MARK` +
JSON) to stdout; the learner's own prints go to stderr.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from ...children import watch_parent
from .cases import Weights
from .catalog import BY_NAME
from .checking import check
from .sandbox import MARK, load_weights
from .training import train_with


def answer(request: dict[str, Any], weights: Weights | None) -> dict[str, Any]:
    exercise = BY_NAME[request["exercise"]]
    if request["mode"] == "train":
        return train_with(exercise, request["source"], request["steps"])
    result = check(exercise, request["source"], weights)
    return {"passed": result.passed, "message": result.message}


def main() -> None:
    watch_parent()
    with contextlib.suppress(ImportError, ValueError, OSError):  # no core file of a learner's segfault
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    request = json.loads(sys.stdin.read())
    weights = load_weights(request["weights"]) if request["weights"] else None  # before the clock starts
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the learner's code writes to descriptor 1 (C code, os.write) goes to stderr too
    out.write("ready\n")
    out.flush()
    with contextlib.redirect_stdout(sys.stderr):
        try:
            result = answer(request, weights)
        except SystemExit:
            result = {"passed": False, "message": "Stopped — your code called exit()."}
    out.write(MARK + json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
