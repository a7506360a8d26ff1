"""The checker: the learner's function against the float64 reference (`kit`) on each case of its exercise, saying
exactly what is wrong — the shape, the first differing entry with both values, or the case (a mask) that fails.

It runs the learner's code in this process: `sandbox` calls it in a child process, which is what the app and the
command line do; the tests call it directly.
"""
from __future__ import annotations

import copy
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .cases import Weights
from .catalog import Exercise

F64 = torch.float64
RTOL, ATOL = 1e-6, 1e-9
CODE = "<your code>"  # the file name compile gives the learner's code: the line in a message is theirs


class Problem(Exception):
    """What is wrong, in words for the learner."""


@dataclass(frozen=True)
class Result:
    passed: bool
    message: str


def _line(exc: BaseException) -> str:
    """" (line N)" of the learner's code where ``exc`` was raised, or ""."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == CODE]
    return f" (line {lines[-1]})" if lines else ""


def _said(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load(source: str, name: str) -> Callable[..., Any]:
    """The function ``name`` that ``source`` defines; a `Problem` if it does not compile, run or define it."""
    try:
        code = compile(source, CODE, "exec")
    except SyntaxError as e:
        raise Problem(f"line {e.lineno} of your code: {e.msg}.") from None
    namespace: dict[str, Any] = {"__name__": "learner", "torch": torch}
    try:
        exec(code, namespace)
    except Exception as e:
        raise Problem(f"your code raised {_said(e)}{_line(e)} before {name} was called.") from None
    fn = namespace.get(name)
    if not callable(fn):
        raise Problem(f"your code defines no function {name}(…); write its body under the stub's def line.")
    return fn


def attempt(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)``; its error in words (a `Problem`)."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise Problem("not written yet: replace `raise NotImplementedError` with the body.") from None
    except Exception as e:
        raise Problem(f"your function raised {_said(e)}{_line(e)}.") from None


def call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`attempt` on copies of the arguments (the reference gets them as they were)."""
    return attempt(fn, copy.deepcopy(args))


def _tensor(got: Any, name: str, shape: str) -> torch.Tensor:
    if isinstance(got, torch.Tensor):
        return got.detach().to(F64)
    try:
        return torch.as_tensor(got, dtype=F64)
    except (TypeError, ValueError, RuntimeError):
        raise Problem(f"{name} should be a tensor ({shape}); your function returned {type(got).__name__}.") from None


def _entry(name: str, index: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def compare(got: Any, want: Any, name: str, shape: str) -> str | None:
    """What differs between the learner's ``got`` and the reference's ``want`` (None: they agree)."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            return f"{name} should be a dict with the names {sorted(want)}; your function returned {keys}."
        return next((p for k in want if (p := compare(got[k], want[k], f"{name}[{k!r}]", shape))), None)
    if isinstance(want, list):
        if not isinstance(got, (list, tuple)):
            return f"{name} should be a list ({shape}); your function returned {type(got).__name__}."
        got = [tuple(g) if isinstance(g, list) else g for g in got]
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                return f"{name}[{i}] is {a!r} where the reference gives {b!r}."
        if len(got) != len(want):
            return f"{name} has {len(got)} entries; the reference has {len(want)}."
        return None
    g = _tensor(got, name, shape)
    if g.shape != want.shape:
        flipped = " (transposed?)" if g.dim() == want.dim() == 2 and g.shape == want.T.shape else ""
        return f"{name} has shape {tuple(g.shape)}{flipped}; it should be {shape} = {tuple(want.shape)}."
    close = torch.isclose(g, want, rtol=RTOL, atol=ATOL)
    if bool(close.all()):
        return None
    index = tuple(int(i) for i in (~close).nonzero()[0])
    return (f"{_entry(name, index)} is {float(g[index]):.8g} where the reference gives {float(want[index]):.8g} "
            f"({int((~close).sum())} of {want.numel()} entries differ).")


def check(exercise: Exercise, source: str, weights: Weights | None = None, seed: int = 0) -> Result:
    """Run the learner's ``source`` on every case of ``exercise``; passed only when every case agrees."""
    try:
        fn = load(source, exercise.name)
    except Problem as p:
        return Result(False, f"Not yet — {p}")
    cases = exercise.cases(torch.Generator().manual_seed(seed), weights)
    for case in cases:
        want = exercise.reference(*copy.deepcopy(case.args))
        try:
            problem = compare(call(fn, case.args), want, exercise.output, exercise.shape)
        except Problem as p:
            problem = str(p)
        if problem is not None:
            return Result(False, f"Not yet — {case.label}: {problem}")
    on_model = any("model in focus" in c.label for c in cases)
    where = " and on the model in focus's weights" if on_model else ""
    return Result(True, f"Passed: {len(cases)} of {len(cases)} cases agree with the float64 reference (random inputs{where}).")
