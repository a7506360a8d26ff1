"""Corpora (files, folders, built-ins), train/val splits and batches for the four tasks.

A ``Corpus`` is raw text, (source, target) pairs or (text, label) examples; ``load_corpus`` makes one
from a path or a built-in name. ``build_dataset`` tokenizes it once and returns a ``Dataset`` whose
``batch`` gives CPU tensors for Algorithm 11 (seq2seq), 12 (masked_lm), 13 (next_token) or the paper's
classification task (§3). Sequences are padded on the right with ``pad_id``, and a batch with padding
carries a padding mask for each padded tensor: ``x_pad_mask`` for ``x``, ``z_pad_mask`` for ``z`` (True at
real tokens). These are not masked-LM masking, which replaces tokens of ``x`` with ``mask_id``. Ignored
targets are -100.
"""
from __future__ import annotations

import codecs
import gzip
import json
import random
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..config import TASKS, _check_choice
from ..resources import resource_path
from . import streaming
from .stats import unigram_entropy
from .tokenization import Progress, Tokenizer, encode_corpus, split_text, token_dtype

if TYPE_CHECKING:
    from .streaming import Source, TokenFile

IGNORE = -100  # target index ignored by the loss
TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .tex .org .adoc .csv .tsv .json .jsonl .html .htm .xml .yaml .yml .toml .ini .cfg "
    ".py .pyi .c .h .cpp .hpp .cc .java .js .ts .rs .go .rb .sh .css .sql .r .jl .lua .pl .hs .ml .scala .kt .swift"
    .split())
EXAMPLE_SUFFIXES = (".tsv", ".jsonl")
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
_FIELDS = {"seq2seq": ("source", "target"), "classification": ("text", "label")}


@dataclass
class Corpus:
    """Raw training material: ``text`` (kind "text"), ``pairs`` (kind "pairs", seq2seq) or ``labelled``
    (kind "labelled", classification), with ``notes`` on how it was read. A text larger than
    `streaming.STREAM_BYTES` is not held: ``text`` is None and ``source`` streams it from its files (its
    ``texts()`` are a sample spread over it, its ``preview`` the start of it; its ``stats`` are exact)."""

    name: str
    kind: str
    text: str | None = None
    pairs: list[tuple[str, str]] | None = None
    labelled: list[tuple[str, str]] | None = None
    notes: list[str] = field(default_factory=list)
    source: Source | None = None  # a streamed text (see `streaming`)

    @property
    def examples(self) -> list[tuple[str, str]]:
        return (self.pairs if self.kind == "pairs" else self.labelled) or []

    def texts(self) -> list[str]:
        """All text to train a tokenizer on: the text, or every source and target, or every example's text
        (labels are classes, not tokens). A list, so ``train_tokenizer`` can report progress. A streamed
        text gives a sample of it (and one of each character the sample lacks)."""
        if self.source is not None:
            return self.source.texts()
        if self.kind == "text":
            return [self.text or ""]
        if self.kind == "pairs":
            return [s for pair in self.examples for s in pair]
        return [text for text, _ in self.examples]

    def stats(self) -> dict:
        """Numbers for the GUI: characters, lines, words, distinct symbols, and examples/classes."""
        if self.source is not None:
            return {"name": self.name, "kind": self.kind, **self.source.stats(), "notes": list(self.notes)}
        chars = lines = words = 0
        symbols: set[str] = set()
        for piece in (p for t in self.texts() for p in split_text(t)):
            chars += len(piece)
            lines += piece.count("\n")
            words += len(piece.split())
            symbols.update(piece)
        if self.kind == "text":
            lines += bool(self.text) and not (self.text or "").endswith("\n")
        else:
            lines = len(self.examples)
        s = {"name": self.name, "kind": self.kind, "chars": chars, "lines": lines, "words": words,
             "symbols": len(symbols), "notes": list(self.notes)}
        if self.kind != "text":
            s["examples"] = len(self.examples)
        if self.kind == "labelled":
            s["classes"] = dict(sorted(Counter(label for _, label in self.examples).items()))
        return s

    def preview(self, n_chars: int = 2000) -> str:
        """The first ``n_chars`` characters, examples shown one a line as ``source → target`` or ``[label] text``."""
        if self.source is not None:
            return self.source.sample[0][:n_chars] if self.source.sample else ""
        if self.kind == "text":
            return (self.text or "")[:n_chars]
        out, size = [], 0
        for a, b in self.examples:
            line = f"{a} → {b}" if self.kind == "pairs" else f"[{b}] {a}"
            out.append(line)
            size += len(line) + 1
            if size >= n_chars:
                break
        return "\n".join(out)[:n_chars]


# --- reading files ----------------------------------------------------------------------------------------
def _decode(path: Path, notes: list[str]) -> str | None:
    """The text of ``path`` (UTF-8 with or without BOM, UTF-16 with BOM, else cp1252, else latin-1),
    newlines made ``\\n``; None for a binary file."""
    data = path.read_bytes()
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            text = data.decode(encoding, errors="replace")
            break
    else:
        if b"\0" in data[:8192]:
            return None
        for encoding in ("utf-8", "cp1252", "latin-1"):
            try:
                text = data.decode(encoding)
                break
            except UnicodeDecodeError:
                continue
        if encoding != "utf-8":
            notes.append(f"{path.name} is not UTF-8; decoded it as {encoding}.")
    del data
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _parse_examples(path: Path, text: str, task: str) -> list[tuple[str, str]]:
    """(source, target) or (text, label) examples of a .tsv (``a<TAB>b``, optional header) or .jsonl file."""
    a_key, b_key = _FIELDS[task]
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if path.suffix.lower() == ".tsv":
            cells = line.split("\t")
            if len(cells) != 2:
                raise ValueError(f"{path.name} line {n}: expected {a_key}<TAB>{b_key} (exactly one tab), "
                                 f"found {len(cells) - 1} tabs.")
            if n == 1 and [c.strip().lower() for c in cells] == [a_key, b_key]:
                continue  # header
            out.append((cells[0], cells[1]))
        else:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path.name} line {n}: not valid JSON ({e.msg}).") from None
            if not isinstance(obj, dict) or not isinstance(obj.get(a_key), str) or b_key not in obj:
                raise ValueError(f'{path.name} line {n}: expected an object with "{a_key}" and "{b_key}".')
            b = obj[b_key]
            if task == "classification" and type(b) is int:
                b = str(b)  # numeric class labels
            if not isinstance(b, str):
                raise ValueError(f'{path.name} line {n}: "{b_key}" must be a string, not {json.dumps(b)}.')
            out.append((obj[a_key], b))
    return out


def _files(folder: Path, suffixes) -> list[Path]:
    """Files under ``folder`` (recursive, sorted, hidden and cache folders skipped) with one of ``suffixes``."""
    return sorted(p for p in folder.rglob("*")
                  if p.suffix.lower() in suffixes and p.is_file()
                  and not any(part.startswith(".") or part in _SKIPPED_DIRS for part in p.relative_to(folder).parts))


def _load_path(spec: str, task: str, progress: Progress | None) -> Corpus:
    path = Path(spec).expanduser()
    if not path.exists():
        raise ValueError(f"corpus {spec!r} is neither a file, a folder nor a built-in corpus "
                         f"(built-ins: {', '.join(BUILTINS)}).")
    text_task = task in ("next_token", "masked_lm")
    suffixes = TEXT_SUFFIXES if text_task else EXAMPLE_SUFFIXES
    what = "text" if text_task else ".tsv or .jsonl"
    if path.is_dir():
        files = _files(path, suffixes)
        if not files:
            raise ValueError(f"folder {path} has no {what} files (looked for {', '.join(sorted(suffixes))}).")
    else:
        files = [path]
        if not text_task and path.suffix.lower() not in EXAMPLE_SUFFIXES:
            a, b = _FIELDS[task]
            raise ValueError(f"task {task} needs examples: a .tsv file with {a}<TAB>{b} lines or a .jsonl file "
                             f'with {{"{a}": …, "{b}": …}} objects; {path.name} is neither.')
    notes: list[str] = []
    if text_task and _streams(files):
        return _load_streamed(path, spec, files, notes, progress)
    texts, examples, binaries = [], [], 0
    for i, f in enumerate(files):
        try:
            text = _decode(f, notes)
        except OSError as e:
            raise ValueError(f"cannot read {f}: {e.strerror or e}.") from None
        if text is None:
            if path.is_file():
                raise ValueError(f"{f.name} looks like a binary file, not text.")
            binaries += 1
        elif text_task:
            texts.append(text if text.endswith("\n") or f is files[-1] else text + "\n")
        else:
            examples += _parse_examples(f, text, task)
        if progress:
            progress((i + 1) / len(files), f"read {f.name}")
    if binaries:
        notes.append(f"skipped {binaries} binary file(s).")
    if len(files) > 1:
        notes.insert(0, f"{len(files) - binaries} files from {path}.")
    if text_task:
        text = texts[0] if len(texts) == 1 else "".join(texts)
        if not text.strip():
            raise ValueError(f"corpus {spec!r} is empty.")
        return Corpus(path.name, "text", text=text, notes=notes)
    if len(examples) < 2:
        raise ValueError(f"corpus {spec!r} has {len(examples)} example(s); at least 2 are needed "
                         "(one to train on, one to validate).")
    if task == "seq2seq":
        return Corpus(path.name, "pairs", pairs=examples, notes=notes)
    return Corpus(path.name, "labelled", labelled=examples, notes=notes)


def _streams(files: list[Path]) -> bool:
    """Whether text ``files`` are too large to hold in memory (`streaming.STREAM_BYTES`)."""
    return sum(f.stat().st_size for f in files) > streaming.STREAM_BYTES


def _load_streamed(path: Path, spec: str, files: list[Path], notes: list[str], progress: Progress | None) -> Corpus:
    try:
        source = streaming.scan(files, notes, progress)
    except OSError as e:
        raise ValueError(f"cannot read {getattr(e, 'filename', None) or path}: {e.strerror or e}.") from None
    if not source.files and path.is_file():
        raise ValueError(f"{path.name} looks like a binary file, not text.")
    if not source.alphabet.strip():
        raise ValueError(f"corpus {spec!r} is empty.")
    if len(source.files) < len(files):
        notes.append(f"skipped {len(files) - len(source.files)} binary file(s).")
    if len(files) > 1:
        notes.insert(0, f"{len(source.files)} files from {path}.")
    notes.append(f"{source.size / 1e6:,.0f} MB: too large to hold, so it is streamed from disk into a token file "
                 f"(cached in {streaming.cache_root()}); the tokenizer is trained on "
                 f"{sum(map(len, source.sample)) / 1e6:.0f} M characters sampled across it.")
    return Corpus(path.name, "text", notes=notes, source=source)


# --- built-in corpora -------------------------------------------------------------------------------------
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


_SYNTHETIC = {
    "copy": _Synthetic("copy a string of letters: abc>abc", ">", _copy),
    "reverse": _Synthetic("reverse a string: abc>cba; classification: palindrome or not", ">", _reverse, _palindrome),
    "sort": _Synthetic("sort the letters: cab>abc; classification: sorted or unsorted", ">", _sort, _sorted_or_not),
    "add": _Synthetic("add two numbers: 12+34=46; classification: is the sum correct", "=", _add, _sum_right_or_wrong),
    "brackets": _Synthetic("close open brackets: ([(>)]); classification: balanced or unbalanced", ">", _brackets,
                           _balanced_or_not),
    "kv": _Synthetic("key→value lookup: a1 b7 c3|b>7; classification: the value (10 classes)", ">", _kv, _kv),
}
BUILTINS: dict[str, str] = {
    **{name: s.description for name, s in _SYNTHETIC.items()},
    "repeat": "random letters, each sequence written twice: qwkdmqwkdmxbxb… (where induction heads form)",
    "python-stdlib": "Python standard library source (53 modules of CPython 3.11.7, 1.5 M characters)",
}
BUILTIN_TASKS: dict[str, tuple[str, ...]] = {
    **{name: tuple(t for t in TASKS if t != "classification" or s.labelled) for name, s in _SYNTHETIC.items()},
    "repeat": ("next_token", "masked_lm"),
    "python-stdlib": ("next_token", "masked_lm"),
}
# "repeat": N_REPEAT blocks r + r, r of REPEAT_LENGTHS random letters of REPEAT_ALPHABET, one after another
# with nothing between them. A second copy is predictable only by looking back at the first (an induction
# head); a first copy not at all. No separator or newline: the induction score's probe (`head_scores`) is
# random ordinary tokens, and a model that learned "a newline ends what matters" fails it whenever the
# probe draws one.
REPEAT_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
REPEAT_LENGTHS = (4, 12)
N_REPEAT = 20_000


def _unique(make, rng: random.Random, n: int) -> list[tuple[str, str]]:
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


def _stdlib_text() -> tuple[str, list[str]]:
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


def _load_builtin(name: str, task: str, seed: int) -> Corpus:
    if task not in BUILTIN_TASKS[name]:
        raise ValueError(f"built-in corpus {name!r} has no {task} form; it supports {', '.join(BUILTIN_TASKS[name])}.")
    if name == "python-stdlib":
        text, notes = _stdlib_text()
        return Corpus(name, "text", text=text, notes=notes)
    if name == "repeat":
        text = "".join(r + r for r in repeat_sequences(seed))
        return Corpus(name, "text", text=text, notes=[f"generated {N_REPEAT} repeated sequences with seed {seed}."])
    s, rng = _SYNTHETIC[name], random.Random(f"{name}/{task}/{seed}")
    examples = _unique(s.labelled if task == "classification" else s.pair, rng, N_EXAMPLES)
    notes = [f"generated {len(examples)} examples with seed {seed}."]
    if task == "seq2seq":
        return Corpus(name, "pairs", pairs=examples, notes=notes)
    if task == "classification":
        return Corpus(name, "labelled", labelled=examples, notes=notes)
    return Corpus(name, "text", text="".join(f"{a}{s.sep}{b}\n" for a, b in examples), notes=notes)


def load_corpus(spec: str, task: str = "next_token", progress: Progress | None = None, seed: int = 0) -> Corpus:
    """A corpus from a built-in name (``BUILTINS``), a file or a folder (recursive), shaped for ``task``.

    Text tasks read text files; seq2seq reads ``source<TAB>target`` .tsv or ``{"source", "target"}`` .jsonl;
    classification reads ``text<TAB>label`` .tsv or ``{"text", "label"}`` .jsonl. Raises ValueError with a
    one-line reason for anything unusable.
    """
    _check_choice("task", task, TASKS)
    if spec in BUILTINS:
        corpus = _load_builtin(spec, task, seed)
        if progress:
            progress(1.0, f"built-in corpus {spec}")
        return corpus
    return _load_path(spec, task, progress)


@dataclass(frozen=True)
class Prepared:
    """A corpus loaded and a tokenizer trained on it for some data settings (and ``seed``, which only the
    synthetic built-ins depend on). ``training.train(prepared=…)`` reuses both when its own settings ask
    for the same, so work done for a preview is not done twice. ``vocab_cap`` is the data settings'
    ``vocab_size``: the most tokens the tokenizer was allowed; its actual N_V is ``tokenizer.vocab_size``."""

    corpus_spec: str
    task: str
    tokenizer_kind: str
    vocab_cap: int
    seed: int
    corpus: Corpus
    tokenizer: Tokenizer

    def serves(self, corpus: str, task: str, tokenizer: str, vocab_cap: int, seed: int) -> bool:
        """Whether these are what ``load_corpus(corpus, task, seed=seed)`` and ``train_tokenizer(tokenizer,
        …, vocab_cap)`` would make (``vocab_cap``: data.vocab_size)."""
        made_for = (self.corpus_spec, self.task, self.tokenizer_kind, self.vocab_cap)
        return made_for == (corpus, task, tokenizer, vocab_cap) and (self.seed == seed or not seeded(corpus))


def seeded(spec: str) -> bool:
    """Whether ``load_corpus(spec, …)`` depends on its seed: the synthetic built-ins do."""
    return spec in _SYNTHETIC or spec == "repeat"


# --- datasets ---------------------------------------------------------------------------------------------
class Dataset:
    """Batches of one task from a tokenized corpus, split into "train" and "val"."""

    def __init__(self, task: str, tokenizer: Tokenizer, l_max: int):
        self.task, self.tokenizer, self.l_max = task, tokenizer, l_max
        self.n_classes = 0  # classification only
        self.class_names: list[str] = []

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` random rows of ``split`` ("train" or "val"), drawn with ``generator``; long or bool
        CPU tensors, T ≤ l_max. next_token and masked_lm: x, y (B, T) (windows of a stream have no padding,
        so no padding mask; masked_lm's masking is in x itself, as ``mask_id``). seq2seq: z, z_pad_mask
        (B, T_z), x, x_pad_mask, y (B, T_x). classification: x, x_pad_mask (B, T), label (B,). A padding
        mask is False at padding."""
        raise NotImplementedError

    def sizes(self) -> dict:
        """How much each split holds: train_tokens/val_tokens or train_examples/val_examples."""
        raise NotImplementedError

    def unigram_entropy(self) -> float | None:
        """The unigram entropy of the train split's tokens in nats (`diagnostics.unigram_entropy`): the loss
        of predicting token frequencies only. None where it is no baseline (seq2seq, classification)."""
        return None

    def split_chars(self) -> dict[str, int] | None:
        """The characters of the text each split covers, where the dataset knew them as it encoded (a
        streamed corpus); else None (`training.chars_per_token` counts them from the text)."""
        return None

    @staticmethod
    def _check_split(split: str, n: int | None = None) -> None:
        if split not in ("train", "val"):
            raise ValueError(f"split = {split!r} is not allowed; use 'train' or 'val'.")
        if n == 0:
            raise ValueError("there is no validation split (val_fraction = 0).")


class _StreamDataset(Dataset):
    """next_token (Algorithm 13) and masked_lm (Algorithm 12): random windows of one token stream."""

    def __init__(self, task: str, tokenizer: Tokenizer, l_max: int, data: np.ndarray, n_train: int, p_mask: float):
        super().__init__(task, tokenizer, l_max)
        self.p_mask = p_mask
        self._data = {"train": data[:n_train], "val": data[n_train:]}

    def sizes(self) -> dict:
        return {"train_tokens": len(self._data["train"]), "val_tokens": len(self._data["val"])}

    def stream(self, split: str) -> np.ndarray:
        """The token ids of ``split`` in corpus order (the val split follows the train split)."""
        self._check_split(split)
        return self._data[split]

    def unigram_entropy(self) -> float | None:
        train = self._data["train"]
        return unigram_entropy(np.asarray(train)) if len(train) else None

    def batch(self, split, batch_size, generator):
        data = self._data.get(split, ())
        self._check_split(split, len(data))
        extra = self.task == "next_token"  # y needs the token after the window
        T = min(self.l_max, len(data) - extra)
        start = torch.randint(len(data) - T - extra + 1, (batch_size,), generator=generator).numpy()
        w = torch.from_numpy(data[start[:, None] + np.arange(T + extra)].astype(np.int64))  # (B, T[+1])
        if extra:  # nanoGPT's get_batch: x = data[i:i+T], y = data[i+1:i+1+T]
            return {"x": w[:, :-1].contiguous(), "y": w[:, 1:].contiguous()}
        masked = torch.rand(w.shape, generator=generator) < self.p_mask  # (B, T)
        rows = (~masked.any(1)).nonzero(as_tuple=True)[0]  # at least one masked position per row
        masked[rows, torch.randint(T, (len(rows),), generator=generator)] = True
        return {"x": torch.where(masked, self.tokenizer.mask_id, w), "y": torch.where(masked, w, IGNORE)}


class _MappedDataset(_StreamDataset):
    """A `_StreamDataset` over a streamed corpus's token file, mapped (`streaming.TokenFile`): the same
    batches from the same ids, while only the pages read stay in memory."""

    def __init__(self, task: str, tokenizer: Tokenizer, l_max: int, tokens: TokenFile, n_train: int, p_mask: float):
        super().__init__(task, tokenizer, l_max, tokens.data, n_train, p_mask)
        self._tokens, self._n_train = tokens, n_train

    def unigram_entropy(self) -> float | None:
        if not self._n_train:
            return None
        counts = self._tokens.counts(self._n_train)  # read in chunks, not through the map
        p = counts[counts > 0] / self._n_train
        return float(-(p * np.log(p)).sum())

    def split_chars(self) -> dict[str, int] | None:
        train = self._tokens.chars_before(self._n_train)
        out = {"train": train}
        if len(self._data["val"]):
            out["val"] = self._tokens.chars - train
        return out


def _ragged(tokenizer: Tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """All ``texts`` encoded into one flat array plus offsets (text i is ``flat[off[i]:off[i+1]]``)."""
    dtype = token_dtype(tokenizer.vocab_size)  # the tokenizer's N_V
    flat: list[np.ndarray] = []
    lengths: list[int] = []
    for s in range(0, len(texts), 4096):
        ids = tokenizer.encode_batch(texts[s:s + 4096])
        lengths += map(len, ids)
        flat.append(np.fromiter((i for row in ids for i in row), dtype))
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.concatenate(flat), offsets


def _pad(rows: list[np.ndarray], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows padded on the right with ``value`` to (B, T) long, and the (B, T) bool padding mask (True at
    real tokens)."""
    lengths = np.fromiter(map(len, rows), np.int64, len(rows))
    real = np.arange(lengths.max()) < lengths[:, None]
    out = np.full(real.shape, value, np.int64)
    out[real] = np.concatenate(rows)  # row-major: each row's tokens land left-aligned in that row
    return torch.from_numpy(out), torch.from_numpy(real)


class _ExampleDataset(Dataset):
    """seq2seq (Algorithm 11) and classification (§3): examples shuffled with the seed, then split."""

    def __init__(self, task, tokenizer, l_max, examples, n_train, duplicates, progress):
        super().__init__(task, tokenizer, l_max)
        self._examples = {"train": examples[:n_train], "val": examples[n_train:]}
        self._duplicates = duplicates
        self._offset = {"train": 0, "val": n_train}
        if task == "classification":
            names = sorted({b for _, b in examples})
            self.class_names = sorted(names, key=int) if all(c.isdigit() for c in names) else names
            self.n_classes = len(names)
            if self.n_classes < 2:
                raise ValueError(f"classification needs at least 2 different labels; every example is {names[0]!r}.")
            index = {c: i for i, c in enumerate(self.class_names)}
            self._labels = np.array([index[b] for _, b in examples], np.int64)
        if progress:
            progress(0.0, f"encoding {len(examples)} examples")
        self._a = _ragged(tokenizer, [a for a, _ in examples])
        if task == "seq2seq":
            self._b = _ragged(tokenizer, [b for _, b in examples])
        if progress:
            progress(1.0, f"{len(examples)} examples")

    def examples(self, split: str) -> list[tuple[str, str]]:
        """The (source, target) or (text, label) strings of a split, e.g. for exact-match on held-out pairs."""
        self._check_split(split)
        return self._examples[split]

    def sizes(self) -> dict:
        return {"train_examples": len(self._examples["train"]), "val_examples": len(self._examples["val"]),
                "duplicates_removed": self._duplicates}

    def batch(self, split, batch_size, generator):
        n = len(self._examples.get(split, ()))
        self._check_split(split, n)
        idx = self._offset[split] + torch.randint(n, (batch_size,), generator=generator).numpy()
        bos, eos, L = [self.tokenizer.bos_id], [self.tokenizer.eos_id], self.l_max
        flat, off = self._a
        # classification's x, seq2seq's z: [bos] + the text (cut to fit l_max) + [eos]
        z, z_pad_mask = _pad([np.concatenate((bos, flat[off[i]:off[i + 1]][:L - 2], eos)) for i in idx],
                             self.tokenizer.pad_id)
        if self.task == "classification":
            return {"x": z, "x_pad_mask": z_pad_mask, "label": torch.from_numpy(self._labels[idx])}
        flat, off = self._b
        b = [flat[off[i]:off[i + 1]] for i in idx]
        x, x_pad_mask = _pad([np.concatenate((bos, t))[:L] for t in b], self.tokenizer.pad_id)
        y, _ = _pad([np.concatenate((t, eos))[:L] for t in b], IGNORE)
        return {"z": z, "z_pad_mask": z_pad_mask, "x": x, "x_pad_mask": x_pad_mask, "y": y}


_CORPUS_KIND = {"next_token": "text", "masked_lm": "text", "seq2seq": "pairs", "classification": "labelled"}


def build_dataset(corpus: Corpus, tokenizer: Tokenizer, task: str, l_max: int, val_fraction: float = 0.1,
                  p_mask: float = 0.15, seed: int = 0, progress: Progress | None = None) -> Dataset:
    """Tokenize ``corpus`` for ``task`` and split it: a text's token stream is cut at (1 - val_fraction)
    (nanoGPT's 90/10); examples lose exact duplicates, are shuffled with ``seed`` and split so each side
    holds at least one (val is empty only when val_fraction = 0)."""
    _check_choice("task", task, TASKS)
    if corpus.kind != _CORPUS_KIND[task]:
        raise ValueError(f"task {task} needs a corpus of {_CORPUS_KIND[task]}, but {corpus.name!r} holds "
                         f"{corpus.kind}; load it with task={task!r}.")
    if not isinstance(l_max, int) or l_max < (1 if corpus.kind == "text" else 2):
        raise ValueError(f"l_max = {l_max!r} is too small for task {task}.")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction = {val_fraction!r} is not allowed; it must be in [0, 1).")
    if task == "masked_lm" and not 0 < p_mask <= 1:
        raise ValueError(f"p_mask = {p_mask!r} is not allowed; it must be in (0, 1].")
    if corpus.kind == "text":
        tokens = corpus.source.tokens(tokenizer, progress) if corpus.source is not None else None
        data = tokens.data if tokens is not None else encode_corpus(tokenizer, corpus.text or "", progress)
        n_train = int(len(data) * (1 - val_fraction))
        need = 2 if task == "next_token" else 1  # tokens per split
        if n_train < need or (val_fraction > 0 and len(data) - n_train < need):
            raise ValueError(f"corpus {corpus.name!r} gives only {len(data)} tokens, too few to split with "
                             f"val_fraction = {val_fraction}; use a larger corpus.")
        if tokens is not None:
            return _MappedDataset(task, tokenizer, l_max, tokens, n_train, p_mask)
        return _StreamDataset(task, tokenizer, l_max, data, n_train, p_mask)
    unique = list(dict.fromkeys(corpus.examples))
    order = np.random.default_rng(seed).permutation(len(unique))
    examples = [unique[i] for i in order]
    n_val = 0 if val_fraction == 0 else max(1, round(len(examples) * val_fraction))
    if len(examples) - n_val < 1:
        raise ValueError(f"corpus {corpus.name!r} has {len(examples)} distinct example(s); at least "
                         f"{n_val + 1} are needed for a train and a validation split.")
    return _ExampleDataset(task, tokenizer, l_max, examples, len(examples) - n_val,
                           len(corpus.examples) - len(unique), progress)
