"""The command line's options checked as they are read, before any command starts: a number option's ``type`` is a
`whole` or a `number` in its range, and a parser error (`Parser.error`) is one line naming the option and what it
must be, exit status 2: ``fatstudio generate: error: argument --temperature: 'nan' is not allowed; it must be a
number ≥ 0 (0: greedy).``"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

from .core.config import INT64_MAX

EXIT_ERROR = 2


class Parser(argparse.ArgumentParser):
    """argparse's parser, its errors one line (no usage: ``--help`` shows it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _refused(raw: str, what: str) -> argparse.ArgumentTypeError:
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:30]!r}… ({len(raw):,} characters)"
    return argparse.ArgumentTypeError(f"{shown} is not allowed; it must be {what}")


def whole(lo: int, hi: int = INT64_MAX, note: str = "") -> Callable[[str], int]:
    """The type of an option that is a whole number in [lo, hi] (``note`` says what a value means)."""
    what = (f"a whole number ≥ {lo:,}" if hi == INT64_MAX else f"a whole number in [{lo:,}, {hi:,}]") + note

    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise _refused(raw, what) from None
        if not lo <= value <= hi:
            raise _refused(raw, what)
        return value
    return parse


def number(lo: float, hi: float = math.inf, *, lo_open: bool = False, note: str = "") -> Callable[[str], float]:
    """The type of an option that is a finite number from ``lo`` (excluded if ``lo_open``) to ``hi`` (included)."""
    what = (f"a number {'>' if lo_open else '≥'} {lo:g}" if hi == math.inf else
            f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]") + note

    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise _refused(raw, what) from None
        if not (math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi):
            raise _refused(raw, what)
        return value
    return parse
