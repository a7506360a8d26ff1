"""The built-in corpora: the synthetic tasks (copy, reverse, sort, add, brackets, kv; each with a seq2seq pair
and, where it has one, a labelled form), the "repeat" sequences where induction heads form, "modadd" (a + b
mod p, where grokking happens) and the shipped python-stdlib snapshot. ``corpora.load_corpus`` makes a
``Corpus`` of them."""
from __future__ import annotations

import gzip
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..config import TASKS
from ..resources import resource_path

LETTERS = "abcdefgh"
N_EXAMPLES = 4000
_CLOSE = {"(": ")", "[": "]"}


def _word(rng: random.Random, lo: int = 3, hi: int = 12) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(lo, hi)))


def _copy(rng):
    s = _word(rng)
    return s, s


def _reverse(rng):
    s = _word(rng)
    return s, s[::-1]


def _sort(rng):
    s = _word(rng)
    return s, "".join(sorted(s))


def _add(rng):
    a, b = (rng.randint(0, 10 ** rng.randint(1, 3) - 1) for _ in range(2))
    return f"{a}+{b}", str(a + b)


def _brackets(rng):
    """A prefix of a balanced string and the closers it still needs: ``([(`` → ``)])``."""
    out: list[str] = []
    stack: list[str] = []
    for _ in range(rng.randint(3, 10)):
        if stack and rng.random() < 0.45:
            out.append(_CLOSE[stack.pop()])
        else:
            stack.append(rng.choice("(["))
            out.append(stack[-1])
    if not stack:
        stack.append(rng.choice("(["))
        out.append(stack[-1])
    return "".join(out), "".join(_CLOSE[o] for o in reversed(stack))


def _kv(rng):
    """Key→value lookup (induction): ``a1 b7 c3|b`` → ``7``."""
    keys = rng.sample(LETTERS, rng.randint(2, 4))
    values = [rng.choice("0123456789") for _ in keys]
    k = rng.randrange(len(keys))
    return " ".join(a + v for a, v in zip(keys, values)) + "|" + keys[k], values[k]


def _palindrome(rng):
    half = _word(rng, 2, 6)
    p = half + rng.choice(["", rng.choice(LETTERS)]) + half[::-1]
    if rng.random() < 0.5:
        return p, "palindrome"
    i = rng.randrange(len(half))  # change one letter of the first half: no longer a palindrome
    return p[:i] + rng.choice(LETTERS.replace(p[i], "")) + p[i + 1:], "not palindrome"


def _sorted_or_not(rng):
    s = "".join(sorted(_word(rng)))
    i, j = rng.randrange(len(s)), rng.randrange(len(s))
    if rng.random() < 0.5 or s[i] == s[j]:
        return s, "sorted"
    i, j = min(i, j), max(i, j)
    return s[:i] + s[j] + s[i + 1:j] + s[i] + s[j + 1:], "unsorted"


def _sum_right_or_wrong(rng):
    source, total = _add(rng)
    wrong = max(0, int(total) + rng.choice([-100, -10, -1, 1, 10, 100]))
    if rng.random() < 0.5 or wrong == int(total):
        return f"{source}={total}", "correct"
    return f"{source}={wrong}", "wrong"


def _balanced_or_not(rng):
    out: list[str] = []
    stack: list[str] = []
    opens = rng.randint(1, 6)
    while opens or stack:
        if opens and (not stack or rng.random() < 0.5):
            stack.append(rng.choice("(["))
            out.append(stack[-1])
            opens -= 1
        else:
            out.append(_CLOSE[stack.pop()])
    if rng.random() < 0.5:
        return "".join(out), "balanced"
    i = rng.randrange(len(out))  # one substitution always unbalances a balanced string
    out[i] = rng.choice("()[]".replace(out[i], ""))
    return "".join(out), "unbalanced"


@dataclass(frozen=True)
class _Synthetic:
    description: str
    sep: str  # between source and target in the text form
    pair: Callable[[random.Random], tuple[str, str]]
    labelled: Callable[[random.Random], tuple[str, str]] | None = None


SYNTHETIC = {
    "copy": _Synthetic("copy a string of letters: abc>abc", ">", _copy),
    "reverse": _Synthetic("reverse a string: abc>cba; classification: palindrome or not", ">", _reverse, _palindrome),
    "sort": _Synthetic("sort the letters: cab>abc; classification: sorted or unsorted", ">", _sort, _sorted_or_not),
    "add": _Synthetic("add two numbers: 12+34=46; classification: is the sum correct", "=", _add, _sum_right_or_wrong),
    "brackets": _Synthetic("close open brackets: ([(>)]); classification: balanced or unbalanced", ">", _brackets,
                           _balanced_or_not),
    "kv": _Synthetic("key→value lookup: a1 b7 c3|b>7; classification: the value (10 classes)", ">", _kv, _kv),
}
BUILTINS: dict[str, str] = {
    **{name: s.description for name, s in SYNTHETIC.items()},
    "repeat": "random letters, each sequence written twice: qwkdmqwkdmxbxb… (where induction heads form)",
    "python-stdlib": "Python standard library source (53 modules of CPython 3.11.7, 1.5 M characters)",
    "modadd": "a + b mod p for every pair a, b < p: 12+34=46 (grokking; p is data.modadd_p); the loss is on the "
              "answer only",
}
BUILTIN_TASKS: dict[str, tuple[str, ...]] = {
    **{name: tuple(t for t in TASKS if t != "classification" or s.labelled) for name, s in SYNTHETIC.items()},
    "repeat": ("next_token", "masked_lm"),
    "python-stdlib": ("next_token", "masked_lm"),
    "modadd": ("next_token",),
}
# "repeat": N_REPEAT blocks r + r, r of REPEAT_LENGTHS random letters of REPEAT_ALPHABET, one after another
# with nothing between them. A second copy is predictable only by looking back at the first (an induction
# head); a first copy not at all. No separator or newline: the induction score's probe (`head_scores`) is
# random ordinary tokens, and a model that learned "a newline ends what matters" fails it whenever the
# probe draws one.
REPEAT_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
REPEAT_LENGTHS = (4, 12)
N_REPEAT = 20_000


def modadd_pairs(p: int) -> list[tuple[str, str]]:
    """Every prompt "a+b=" with its answer (a + b) mod p, for a, b = 0 … p-1 (Power et al. 2022): p² pairs."""
    return [(f"{a}+{b}=", str((a + b) % p)) for a in range(p) for b in range(p)]


def unique_examples(make, rng: random.Random, n: int) -> list[tuple[str, str]]:
    """``n`` examples with distinct first elements, so a train/val split never shares one."""
    seen: dict[str, str] = {}
    for _ in range(50 * n):
        a, b = make(rng)
        seen.setdefault(a, b)
        if len(seen) == n:
            break
    return list(seen.items())


# The "python-stdlib" corpus is a fixed snapshot shipped in resources/corpora (see its README.md): CPython
# 3.11.7's top-level .py modules sorted by name until ~1.5 M characters, the text the reference curves were
# measured on. The same on every machine, installed or frozen, whatever Python runs fatstudio.
STDLIB_SNAPSHOT = ("corpora", "python-stdlib.txt.gz")
STDLIB_SHA256 = "6a4a2a5518e7d81162a1b2e254040b71cb65346ce3da2d146a605383aa1ddd8e"  # of the decompressed text


def stdlib_text() -> tuple[str, list[str]]:
    path = resource_path(*STDLIB_SNAPSHOT)
    try:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"the python-stdlib corpus {path} cannot be read ({e}); reinstall fatstudio, "
                         "or choose another corpus.") from None
    return text, ["53 modules of CPython 3.11.7's standard library (a snapshot shipped with fatstudio)."]


def repeat_sequences(seed: int) -> list[str]:
    """The N_REPEAT random sequences r of the "repeat" corpus for ``seed``; its text is r + r of each, in order."""
    rng, (lo, hi) = random.Random(f"repeat/{seed}"), REPEAT_LENGTHS
    return ["".join(rng.choices(REPEAT_ALPHABET, k=rng.randint(lo, hi))) for _ in range(N_REPEAT)]


COPIES = ("first copy", "second copy: its first letter", "second copy: the rest")  # `text_parts` of "repeat"
PARTS = ("question", "separator", "answer", "end of line")  # of a synthetic task's text form


def text_parts(name: str, text: str, seed: int) -> tuple[str, tuple[str, ...], np.ndarray] | None:
    """The parts of a built-in corpus's text that its task tells apart, as (family, the parts' names, (len(text),)
    the part of every character), or None for a corpus without such parts (a file, python-stdlib, modadd):

    - "repeat" (family "copy", `COPIES`): each sequence's first copy, the first letter of its second copy, and the
      rest of the second copy, the letters a next-token model can predict, by induction (`repeat_lookback`);
    - a synthetic task's text form, ``question>answer`` a line (family "part", `PARTS`)."""
    if name == "repeat":
        parts = []
        for r in repeat_sequences(seed):
            n = len(r)
            parts += [np.zeros(n, np.int8), np.ones(1, np.int8), np.full(n - 1, 2, np.int8)]
        part = np.concatenate(parts)
        return ("copy", COPIES, part) if len(part) == len(text) else None
    if name not in SYNTHETIC:
        return None
    sep, out = SYNTHETIC[name].sep, []
    for line in text.splitlines(keepends=True):
        question, found, rest = line.partition(sep)
        answer = rest.rstrip("\n")
        out += [0] * len(question) + [1] * len(found) + [2] * len(answer) + [3] * (len(rest) - len(answer))
    return "part", PARTS, np.asarray(out, np.int8)


def repeat_lookback(seed: int) -> np.ndarray:
    """For each character j of the "repeat" text of ``seed``: n = len(r) where j is the k-th (k ≥ 1) character of
    a second copy of r, else 0. Only these follow by induction: text[j] = text[j - n], and the token before,
    text[j - 1], came n characters earlier followed by it. (k = 0, the second copy's first character, follows the
    first copy's last, which says nothing of it.)"""
    parts = []
    for r in repeat_sequences(seed):
        n = len(r)
        parts.append(np.zeros(n + 1, np.int32))
        parts.append(np.full(n - 1, n, np.int32))
    return np.concatenate(parts)
