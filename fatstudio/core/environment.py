"""The environment variables fatstudio reads, each read one way (`Variable.value`): unset or empty is its default;
anything else must lie in its range, else a ValueError in one line naming the variable and the range. The command
line checks every one (`check`) before a command (or the app) starts, so a bad one is said before any work.

``FATSTUDIO_RUNS`` and ``FATSTUDIO_CACHE`` (folders), ``FATSTUDIO_CACHE_MB`` (the cache's bound),
``FATSTUDIO_COMPILE_DECODE`` and ``FATSTUDIO_IGNORE_MEMORY`` (switches), ``FATSTUDIO_STATE`` (the app's state
file), ``FATSTUDIO_PARENT_PIPE`` (set by fatstudio for its own child processes, `children`), and torchrun's
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (`distributed.World.from_env`).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
C_INT_MAX = 2**31 - 1  # a rank or a descriptor is a C int


@dataclass(frozen=True)
class Variable(Generic[T]):
    """An environment variable: its ``name``, its range in words (``accepted``, completing "it must be …"),
    ``parse`` (the text, stripped, to its value; a ValueError outside the range) and its ``default``."""

    name: str
    accepted: str
    parse: Callable[[str], T]
    default: T

    def value(self, env: Mapping[str, str] | None = None) -> T:
        raw = (os.environ if env is None else env).get(self.name, "")
        if not raw.strip():
            return self.default
        try:
            return self.parse(raw.strip())
        except (ValueError, OverflowError):
            shown = repr(raw) if len(raw) <= 60 else f"{raw[:50]!r}… ({len(raw):,} characters)"
            raise ValueError(f"{self.name} = {shown} is not allowed; it must be {self.accepted}.") from None


def _megabytes(raw: str) -> float:
    value = float(raw)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(raw)
    return value


def _switch(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise ValueError(raw)
    return raw == "1"


def _folder(raw: str) -> Path:
    """A folder, or where one can be made: the nearest part of the path that exists is a folder."""
    path = Path(raw).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise ValueError(raw)
            break
    return path


def _file(raw: str) -> Path:
    """A file, or where one can be made: not a folder, and the nearest part of the path above it is a folder."""
    path = Path(raw).expanduser()
    if path.is_dir():
        raise ValueError(raw)
    _folder(str(path.parent))
    return path


def _whole(lo: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if not lo <= value <= C_INT_MAX:
            raise ValueError(raw)
        return value
    return parse


RUNS: Variable[Path | None] = Variable("FATSTUDIO_RUNS", "a folder for the runs (or a path where one can be made, "
                                       "not through a file)", _folder, None)
CACHE: Variable[Path | None] = Variable("FATSTUDIO_CACHE", "a folder for the cache (or a path where one can be made, "
                                        "not through a file)", _folder, None)
CACHE_MB = Variable("FATSTUDIO_CACHE_MB", "a number of megabytes ≥ 0, finite (unset: 20000)", _megabytes, 20_000.0)
COMPILE_DECODE = Variable("FATSTUDIO_COMPILE_DECODE", "0 (never compile the decode step) or 1 (the default)", _switch,
                          True)
IGNORE_MEMORY = Variable("FATSTUDIO_IGNORE_MEMORY", "0 (check that a model fits, the default) or 1 (build it anyway)",
                         _switch, False)
STATE: Variable[Path | None] = Variable("FATSTUDIO_STATE", "a file for the app's state (not a folder, nor through a "
                                        "file)", _file, None)
PARENT_PIPE: Variable[int | None] = Variable("FATSTUDIO_PARENT_PIPE", "a whole number ≥ 0 (a descriptor that fatstudio "
                                             "gives its own child processes; unset it)", _whole(0), None)
RANK: Variable[int | None] = Variable("RANK", "a whole number ≥ 0 (torchrun sets it)", _whole(0), None)
WORLD_SIZE: Variable[int | None] = Variable("WORLD_SIZE", "a whole number ≥ 1 (torchrun sets it)", _whole(1), None)
LOCAL_RANK: Variable[int | None] = Variable("LOCAL_RANK", "a whole number ≥ 0 (torchrun sets it)", _whole(0), None)
VARIABLES: tuple[Variable[Any], ...] = (RUNS, CACHE, CACHE_MB, COMPILE_DECODE, IGNORE_MEMORY, STATE, PARENT_PIPE,
                                        RANK, WORLD_SIZE, LOCAL_RANK)


def check(env: Mapping[str, str] | None = None) -> None:
    """ValueError, naming the first variable out of its range, unless every one is in range (`torchrun_world` too)."""
    for variable in VARIABLES:
        variable.value(env)
    torchrun_world(env)


def torchrun_world(env: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """(rank, world size, local rank) as torchrun sets them, or None outside torchrun (RANK or WORLD_SIZE unset); a
    ValueError naming the variable out of its range, or a RANK not below WORLD_SIZE."""
    rank, size = RANK.value(env), WORLD_SIZE.value(env)
    if rank is None or size is None:
        return None
    if rank >= size:
        raise ValueError(f"RANK = {rank} is not allowed; it must be less than WORLD_SIZE ({size}) (torchrun sets both).")
    local = LOCAL_RANK.value(env)
    return rank, size, rank if local is None else local
