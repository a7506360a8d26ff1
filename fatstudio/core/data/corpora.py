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
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..config import MODADD_P, TASKS, Task, TokenizerKind, check_choice
from ..files import NotAFile, read_bytes, regular_file
from . import streaming
from .builtin import (
    BUILTIN_TASKS,
    BUILTINS,
    N_EXAMPLES,
    N_REPEAT,
    SYNTHETIC,
    modadd_pairs,
    repeat_sequences,
    stdlib_text,
    unique_examples,
)
from .datasets import IGNORE as IGNORE  # the loss and the interventions read it here
from .datasets import AnswerDataset, Dataset, ExampleDataset, MappedDataset, StreamDataset
from .tokenization import Progress, Tokenizer, encode_corpus, split_text

if TYPE_CHECKING:
    from .streaming import Source

TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .tex .org .adoc .csv .tsv .json .jsonl .html .htm .xml .yaml .yml .toml .ini .cfg "
    ".py .pyi .c .h .cpp .hpp .cc .java .js .ts .rs .go .rb .sh .css .sql .r .jl .lua .pl .hs .ml .scala .kt .swift"
    .split())
EXAMPLE_SUFFIXES = (".tsv", ".jsonl")
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
_FIELDS = {"seq2seq": ("source", "target"), "classification": ("text", "label")}
CorpusKind = Literal["text", "pairs", "labelled"]  # a text (next_token, masked_lm), seq2seq pairs, labelled texts


@dataclass
class Corpus:
    """Raw training material: ``text`` (kind "text"), ``pairs`` (kind "pairs", seq2seq) or ``labelled``
    (kind "labelled", classification), with ``notes`` on how it was read. A text larger than
    `streaming.STREAM_BYTES` is not held: ``text`` is None and ``source`` streams it from its files (its
    ``texts()`` are a sample spread over it, its ``preview`` the start of it; its ``stats`` are exact)."""

    name: str
    kind: CorpusKind
    text: str | None = None
    pairs: list[tuple[str, str]] | None = None
    labelled: list[tuple[str, str]] | None = None
    notes: list[str] = field(default_factory=list)
    source: Source | None = None  # a streamed text (see `streaming`)
    modulus: int | None = None  # "modadd": p

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
    data = read_bytes(path)
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


def _parse_examples(path: Path, text: str, task: Task) -> list[tuple[str, str]]:
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


def _load_path(spec: str, task: Task, progress: Progress | None) -> Corpus:
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
        try:
            regular_file(path)
        except NotAFile as e:
            raise ValueError(f"corpus {e}") from None
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


def _load_builtin(name: str, task: Task, seed: int, modadd_p: int) -> Corpus:
    if task not in BUILTIN_TASKS[name]:
        raise ValueError(f"built-in corpus {name!r} has no {task} form; it supports {', '.join(BUILTIN_TASKS[name])}.")
    if name == "modadd":
        pairs = modadd_pairs(modadd_p)
        return Corpus(name, "text", text="".join(f"{a}{b}\n" for a, b in pairs), pairs=pairs, modulus=modadd_p,
                      notes=[f"all {len(pairs):,} sums a+b mod {modadd_p}; the validation split is a random "
                             "val_fraction of them, and the loss counts the answer only."])
    if name == "python-stdlib":
        text, notes = stdlib_text()
        return Corpus(name, "text", text=text, notes=notes)
    if name == "repeat":
        text = "".join(r + r for r in repeat_sequences(seed))
        return Corpus(name, "text", text=text, notes=[f"generated {N_REPEAT} repeated sequences with seed {seed}."])
    s, rng = SYNTHETIC[name], random.Random(f"{name}/{task}/{seed}")
    examples = unique_examples(s.labelled if task == "classification" else s.pair, rng, N_EXAMPLES)
    notes = [f"generated {len(examples)} examples with seed {seed}."]
    if task == "seq2seq":
        return Corpus(name, "pairs", pairs=examples, notes=notes)
    if task == "classification":
        return Corpus(name, "labelled", labelled=examples, notes=notes)
    return Corpus(name, "text", text="".join(f"{a}{s.sep}{b}\n" for a, b in examples), notes=notes)


def load_corpus(spec: str, task: Task = "next_token", progress: Progress | None = None, seed: int = 0,
                modadd_p: int = MODADD_P) -> Corpus:
    """A corpus from a built-in name (``BUILTINS``), a file or a folder (recursive), shaped for ``task``.

    Text tasks read text files; seq2seq reads ``source<TAB>target`` .tsv or ``{"source", "target"}`` .jsonl;
    classification reads ``text<TAB>label`` .tsv or ``{"text", "label"}`` .jsonl. Raises ValueError with a
    one-line reason for anything unusable. ``modadd_p`` is the p of "modadd".
    """
    check_choice("task", task, TASKS)
    if spec in BUILTINS:
        corpus = _load_builtin(spec, task, seed, modadd_p)
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
    task: Task
    tokenizer_kind: TokenizerKind
    vocab_cap: int
    seed: int
    corpus: Corpus
    tokenizer: Tokenizer

    def serves(self, corpus: str, task: Task, tokenizer: TokenizerKind, vocab_cap: int, seed: int,
               modadd_p: int = MODADD_P) -> bool:
        """Whether these are what ``load_corpus(corpus, task, seed=seed, modadd_p=modadd_p)`` and
        ``train_tokenizer(tokenizer, …, vocab_cap)`` would make (``vocab_cap``: data.vocab_size)."""
        made_for = (self.corpus_spec, self.task, self.tokenizer_kind, self.vocab_cap)
        return (made_for == (corpus, task, tokenizer, vocab_cap) and (self.seed == seed or not seeded(corpus))
                and self.corpus.modulus in (None, modadd_p))


def seeded(spec: str) -> bool:
    """Whether ``load_corpus(spec, …)`` depends on its seed: the synthetic built-ins do."""
    return spec in SYNTHETIC or spec == "repeat"


_CORPUS_KIND: dict[Task, CorpusKind] = {"next_token": "text", "masked_lm": "text", "seq2seq": "pairs",
                                        "classification": "labelled"}


def build_dataset(corpus: Corpus, tokenizer: Tokenizer, task: Task, l_max: int, val_fraction: float = 0.1,
                  p_mask: float = 0.15, seed: int = 0, progress: Progress | None = None) -> Dataset:
    """Tokenize ``corpus`` for ``task`` and split it: a text's token stream is cut at (1 - val_fraction)
    (nanoGPT's 90/10); examples lose exact duplicates, are shuffled with ``seed`` and split so each side
    holds at least one (val is empty only when val_fraction = 0)."""
    check_choice("task", task, TASKS)
    if corpus.kind != _CORPUS_KIND[task]:
        raise ValueError(f"task {task} needs a corpus of {_CORPUS_KIND[task]}, but {corpus.name!r} holds "
                         f"{corpus.kind}; load it with task={task!r}.")
    if not isinstance(l_max, int) or l_max < (1 if corpus.kind == "text" else 2):
        raise ValueError(f"l_max = {l_max!r} is too small for task {task}.")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction = {val_fraction!r} is not allowed; it must be in [0, 1).")
    if task == "masked_lm" and not 0 < p_mask <= 1:
        raise ValueError(f"p_mask = {p_mask!r} is not allowed; it must be in (0, 1].")
    if corpus.kind == "text" and corpus.pairs is not None and task == "next_token":
        examples, n_train = _shuffled_split(corpus.pairs, val_fraction, seed, corpus.name)
        return AnswerDataset(tokenizer, l_max, examples, n_train)
    if corpus.kind == "text":
        tokens = corpus.source.tokens(tokenizer, progress) if corpus.source is not None else None
        data = tokens.data if tokens is not None else encode_corpus(tokenizer, corpus.text or "", progress)
        n_train = int(len(data) * (1 - val_fraction))
        need = 2 if task == "next_token" else 1  # tokens per split
        if n_train < need or (val_fraction > 0 and len(data) - n_train < need):
            raise ValueError(f"corpus {corpus.name!r} gives only {len(data)} tokens, too few to split with "
                             f"val_fraction = {val_fraction}; use a larger corpus.")
        if tokens is not None:
            return MappedDataset(task, tokenizer, l_max, tokens, n_train, p_mask)
        return StreamDataset(task, tokenizer, l_max, data, n_train, p_mask)
    unique = list(dict.fromkeys(corpus.examples))
    examples, n_train = _shuffled_split(unique, val_fraction, seed, corpus.name)
    return ExampleDataset(task, tokenizer, l_max, examples, n_train, len(corpus.examples) - len(unique), progress)


def _shuffled_split(examples: list[tuple[str, str]], val_fraction: float, seed: int, name: str
                    ) -> tuple[list[tuple[str, str]], int]:
    """``examples`` shuffled with ``seed``, and how many of them train (the rest validate): each side holds at
    least one (val is empty only when val_fraction = 0)."""
    order = np.random.default_rng(seed).permutation(len(examples))
    shuffled = [examples[i] for i in order]
    n_val = 0 if val_fraction == 0 else max(1, round(len(shuffled) * val_fraction))
    if len(shuffled) - n_val < 1:
        raise ValueError(f"corpus {name!r} has {len(shuffled)} distinct example(s); at least "
                         f"{n_val + 1} are needed for a train and a validation split.")
    return shuffled, len(shuffled) - n_val


def short_splits_note(dataset: Dataset, l_max: int) -> str | None:
    """What the numbers of a run on a text too short for ℓ_max will mean: None when each split (train, and val
    if there is one) fills at least one window of ℓ_max tokens (and the next-token target)."""
    sizes = dataset.sizes()
    if "train_tokens" not in sizes:
        return None
    need = l_max + (dataset.task == "next_token")
    train, val = sizes["train_tokens"], sizes["val_tokens"]
    if train >= need and (val == 0 or val >= need):
        return None
    short = " and ".join(f"{name} {n:,} tokens" for name, n in (("train", train), ("validation", val))
                         if 0 < n < need)
    return (f"the corpus is too short for l_max = {l_max}: its splits hold {short}, fewer than one window of "
            f"{need}; windows are shorter than l_max, the model never sees a full context, and a validation "
            f"loss and accuracy over {val:,} tokens say little. Use a longer corpus (or a smaller l_max).")
