"""The tokenizer lab: several tokenizers side by side on one corpus, and the runs trained on it in bits per
character, so tokenizers compare fairly.

``compare_tokenizers`` trains each tokenizer (char, word, byte-level BPE of a few sizes) on the corpus's
training split and measures it on the held-out validation split, text it has never seen: N_V, tokens per
character, the rate of unknown tokens, the distribution of tokens per line, and one sentence as it cuts it.
``finished_runs_on`` lists the finished runs on the same corpus with their best validation loss in nats per
token and in bits per character (`bits_per_char`), the unit that does not depend on the tokenizer.

The validation split is the last ``val_fraction`` of a text's characters (from the next line start, or
the next space), or of a corpus's examples. Very large corpora are sampled: the tokenizers
train on at most ``TRAIN_CHARS`` characters and are measured on at most ``VAL_CHARS``, in evenly spaced
pieces of the split (`tokenization.split_text`; evenly spaced lines for the lengths). A text without words
(letters only: a word tokenizer's tokens span over ``WORD_CHARS`` characters on average) or without line breaks
gets a note saying so (`LabResult.notes`, `LabRow.note`) in place of numbers that would mean nothing. Plain
data in, plain data out: the GUI runs it in a worker.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..config import TOKENIZERS, Task, TokenizerKind, one_of
from ..data.tokenization import Progress, Tokenizer, split_text, train_tokenizer
from ..records import VAL_LOSS, ShownStatus, row_number
from .reference_curves import bits_per_char

if TYPE_CHECKING:
    from ..data.corpora import Corpus
    from .folder import Run

Spec = tuple[TokenizerKind, int | None]  # (kind, vocab_size); char takes no size
DEFAULT_SPECS: tuple[Spec, ...] = (("char", None), ("word", 1024), ("word", 4096), ("bpe", 512), ("bpe", 1024),
                                   ("bpe", 4096))
TRAIN_CHARS = 4_000_000  # the most characters a tokenizer trains on (an even sample of the training split)
VAL_CHARS = 1_000_000  # the most characters measured (an even sample of the validation split)
BINS = 40  # histogram bins of the sequence lengths
SENTENCE_CHARS = 120  # the default sentence is the first validation line with ≥ 20 characters, cut to this
WORD_CHARS = 20  # more characters a word token than this on average: the text has no words to speak of
QUANTILES = {"min": 0.0, "median": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
_BATCH = 4096  # texts per encode_batch call
_LINE_START = re.compile(r"\n")
_SPACE = re.compile(r"\s")


@dataclass
class LabRow:
    """One tokenizer measured on the validation split. A "length" is the tokens of one line of the split (one
    text for a corpus of examples), encoded on its own, without its line break."""

    kind: TokenizerKind
    vocab_cap: int | None  # what was asked for (word, bpe)
    vocab_size: int  # N_V, the four special tokens included
    train_seconds: float
    chars: int  # characters of the validation split measured…
    tokens: int  # …the tokens they make, one per unknown character for a char tokenizer…
    unknown: int  # …and how many of those are unknown (word: <unk>; char: characters the tokenizer refuses)
    lengths: np.ndarray  # tokens per line
    histogram: list[int]  # lengths counted in `LabResult.bin_edges`
    sentence: list[tuple[str, bool]]  # the sentence as this tokenizer cuts it: (token text, unknown?)
    tokenizer: Tokenizer
    note: str = ""  # why this row's tokens per character and unknown rate mean nothing here ("" when they do)

    @property
    def label(self) -> str:
        return spec_label((self.kind, self.vocab_cap))

    @property
    def tokens_per_char(self) -> float:
        return self.tokens / self.chars if self.chars else 0.0

    @property
    def chars_per_token(self) -> float:
        return self.chars / self.tokens if self.tokens else 0.0

    @property
    def unknown_rate(self) -> float:
        return self.unknown / self.tokens if self.tokens else 0.0

    @property
    def quantiles(self) -> dict[str, float]:
        """Tokens per line: min, median, p90, p99, max and mean."""
        if not len(self.lengths):
            return {}
        q = {name: float(np.quantile(self.lengths, p)) for name, p in QUANTILES.items()}
        return {**q, "mean": float(self.lengths.mean())}


@dataclass
class LabResult:
    corpus: str
    unit: str  # what a length counts the tokens of: "line" or "example text"
    val_fraction: float
    train_chars: int  # characters the tokenizers trained on (a sample if fewer than the split's)
    val_chars: int  # characters of the validation split (`LabRow.chars` were measured, a sample if fewer)
    sentence: str
    bin_edges: list[int]  # shared by every row's histogram; the last bin also holds every longer sequence
    rows: list[LabRow]
    notes: list[str] = field(default_factory=list)  # what the corpus lacks that some numbers need (words, lines)


def spec_label(spec: Spec) -> str:
    """``"char"``, ``"word 1024"``, ``"bpe 4096"``."""
    kind, size = spec
    return kind if size is None else f"{kind} {size}"


def parse_specs(text: str) -> list[Spec]:
    """Tokenizers written as ``"char, word 1024, bpe 512, bpe 4096"``: a kind, and for word and bpe the most
    tokens it may have. ValueError with a sentence for anything else."""
    specs: list[Spec] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, *rest = item.split()
        if not one_of(kind, TOKENIZERS):
            raise ValueError(f"{item!r}: the tokenizers are {', '.join(TOKENIZERS)}.")
        if kind == "char":
            if rest:
                raise ValueError(f"{item!r}: a char tokenizer takes every character; write just 'char'.")
            specs.append((kind, None))
        elif len(rest) != 1 or not rest[0].isdigit():
            raise ValueError(f"{item!r}: give the vocabulary size after {kind}, e.g. '{kind} 1024'.")
        else:
            specs.append((kind, int(rest[0])))
    if not specs:
        raise ValueError("no tokenizer to compare; write e.g. 'char, word 1024, bpe 1024'.")
    return list(dict.fromkeys(specs))


def split_corpus(corpus: Corpus, val_fraction: float) -> tuple[list[str], list[str]]:
    """The training and validation texts of ``corpus``: a text cut at 1 - ``val_fraction`` of its characters
    (moved on to the next line start within 10,000 characters, else to the next space), or its examples'
    texts, the last ``val_fraction`` of them held out. A streamed corpus (too large to hold) is represented by
    its sample (`streaming.SAMPLE_CHARS` characters spread over it)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"the tokenizer lab measures on the validation split; val_fraction = {val_fraction} "
                         "holds none out. Set the validation split above 0.")
    if corpus.kind == "text":
        text = corpus.text or ("".join(corpus.source.sample) if corpus.source else "")
        cut = int(len(text) * (1 - val_fraction))
        m = _LINE_START.search(text, max(cut - 1, 0), cut + 10_000) or _SPACE.search(text, cut)
        cut = m.end() if m else cut
        train, val = [text[:cut]], [text[cut:]]
    else:
        texts = corpus.texts()  # a source and a target per pair, a text per labelled example
        cut = len(texts) - max(1, round(len(corpus.examples) * val_fraction)) * (2 if corpus.kind == "pairs" else 1)
        train, val = texts[:cut], texts[cut:]
    if not "".join(val).strip() or not "".join(train).strip():
        raise ValueError(f"corpus {corpus.name!r} is too small to split into training and validation text; "
                         "use a larger corpus.")
    return train, val


def _sample(texts: list[str], cap: int) -> list[str]:
    """``texts``, or ones spread evenly over them totalling about ``cap`` characters if they hold more: a
    piece is kept while the kept characters lag ``cap`` × the fraction seen (a stride over the pieces
    missed ``cap`` by far when the pieces' lengths differ)."""
    total = sum(map(len, texts))
    if total <= cap:
        return texts
    kept, seen, out = 0, 0, []
    for t in texts:
        seen += len(t)
        if kept < cap * seen / total:
            out.append(t)
            kept += len(t)
    return out


def count_tokens(tokenizer: Tokenizer, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The tokens and the unknown tokens of each of ``texts``, each encoded on its own, no specials added.
    A char tokenizer refuses a character it does not know; it counts here as one (unknown) token."""
    tokens = np.zeros(len(texts), np.int64)
    unknown = np.zeros(len(texts), np.int64)
    for s in range(0, len(texts), _BATCH):
        encodings = tokenizer.backend.encode_batch(list(texts[s:s + _BATCH]), add_special_tokens=False)
        ids = [e.ids for e in encodings]
        tokens[s:s + _BATCH] = [len(i) for i in ids]
        if tokenizer.unk_id is not None:  # word
            unknown[s:s + _BATCH] = [i.count(tokenizer.unk_id) for i in ids]
    if tokenizer.kind == "char":
        missing = tokenizer.unknown_symbols("".join(texts))  # the backend drops them
        if missing:
            unknown[:] = [sum(t.count(c) for c in missing) for t in texts]
            tokens += unknown
    return tokens, unknown


def tokenize_sentence(tokenizer: Tokenizer, text: str) -> list[tuple[str, bool]]:
    """``text`` as ``tokenizer`` cuts it: (token text, unknown?) per token. An unknown character or word
    shows its own text, flagged; a BPE token that is part of a multi-byte character shows its bytes."""
    if tokenizer.kind == "char":
        unknown = set(tokenizer.unknown_symbols(text))
        return [(c, c in unknown) for c in text]
    enc = tokenizer.backend.encode_batch([text], add_special_tokens=False)[0]  # the GIL released, as Tokenizer.encode
    if tokenizer.kind == "word":
        return [(text[a:b], i == tokenizer.unk_id) for i, (a, b) in zip(enc.ids, enc.offsets)]
    return [(s, False) for s in tokenizer.token_strings(enc.ids)]


def _default_sentence(lines: list[str]) -> str:
    line = next((s for s in lines if len(s.strip()) >= 20), lines[0] if lines else "")
    return line.strip()[:SENTENCE_CHARS]


def _no_words(row: LabRow) -> str:
    """Why a word tokenizer's numbers mean nothing on this text, or "": its tokens span more than WORD_CHARS
    characters on average, so the text has no spaces or punctuation to cut words at (e.g. the built-in
    "repeat": letters only)."""
    if row.kind != "word" or row.chars_per_token <= WORD_CHARS:
        return ""
    return (f"no words: the text has hardly a space or punctuation mark to cut words at, so {row.label} sees a "
            "few long, never-seen 'words' and makes each one <unk>; its tokens per character and unknown rate say "
            "nothing here (compare char and bpe).")


def compare_tokenizers(corpus: Corpus, specs: Sequence[Spec] = DEFAULT_SPECS, val_fraction: float = 0.1,
                       sentence: str | None = None, progress: Progress | None = None) -> LabResult:
    """Train each tokenizer of ``specs`` on ``corpus``'s training split and measure it on the validation split
    (see the module docstring); ``sentence`` (default: a line of the validation split) tokenized by each."""
    train, val = split_corpus(corpus, val_fraction)
    train = _sample([p for t in train for p in split_text(t)], TRAIN_CHARS)
    val_pieces = _sample([p for t in val for p in split_text(t)], VAL_CHARS)
    notes = []
    if corpus.kind == "text" and "\n" not in val[0]:  # no lines: one "line" would be the whole split
        lines = []
        notes.append(f"No lines: the validation split has no line breaks ({len(val[0]):,} characters in one "
                     "run), so there are no tokens per line to compare; the lengths are left out.")
    else:
        lines = _sample([s for t in val for s in t.split("\n") if s.strip()] if corpus.kind == "text" else
                        [t for t in val if t], VAL_CHARS)
    sentence = _default_sentence(lines or [val_pieces[0]]) if sentence is None else sentence
    rows = []
    for i, (kind, size) in enumerate(specs):
        if progress:
            progress(i / len(specs), f"training {spec_label((kind, size))}")
        start = time.perf_counter()
        tok = train_tokenizer(kind, train, size or 0)
        seconds = time.perf_counter() - start
        tokens, unknown = count_tokens(tok, val_pieces)
        lengths, _ = count_tokens(tok, lines)
        row = LabRow(kind, size, tok.vocab_size, seconds, sum(map(len, val_pieces)), int(tokens.sum()),
                     int(unknown.sum()), lengths, [], tokenize_sentence(tok, sentence), tok)
        row.note = _no_words(row)
        rows.append(row)
    if any(r.note for r in rows):
        notes.insert(0, "No words: the text has hardly a space or punctuation mark between its letters, so a word "
                        "tokenizer has nothing to cut at; its tokens per character and unknown rate are left out.")
    top = max((float(np.quantile(r.lengths, 0.99)) for r in rows if len(r.lengths)), default=1.0)
    width = max(1, math.ceil(top / BINS))
    edges = list(range(0, width * (math.ceil(top / width) + 1) + 1, width))
    for r in rows:
        r.histogram = np.bincount(np.minimum(r.lengths // width, len(edges) - 2), minlength=len(edges) - 1).tolist()
    if progress:
        progress(1.0, f"{len(rows)} tokenizers compared")
    return LabResult(corpus.name, "line" if corpus.kind == "text" else "example text", val_fraction,
                     sum(map(len, train)), sum(map(len, val)), sentence, edges, rows, notes)


# --- runs on the corpus ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunScore:
    """A finished run's best validation loss, in nats per token and, for a text stream, bits per character."""

    name: str
    path: str
    status: ShownStatus  # "finished" or "stopped"
    task: Task
    tokenizer: TokenizerKind
    vocab_size: int  # N_V
    steps: int
    val_loss: float  # the best, nats per token
    chars_per_token: float | None  # of the validation split; None where the loss is not over one text

    @property
    def tokenizer_label(self) -> str:
        return spec_label((self.tokenizer, None if self.tokenizer == "char" else self.vocab_size))

    @property
    def bits_per_char(self) -> float | None:
        return bits_per_char(self.val_loss, self.chars_per_token) if self.chars_per_token else None


def same_corpus(a: str, b: str) -> bool:
    """Whether two ``data.corpus`` settings name the same corpus: the same built-in, or the same file or folder."""
    from ..data.corpora import BUILTINS

    if a in BUILTINS or b in BUILTINS:
        return a == b
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def run_chars_per_token(run: Run, corpus: Corpus | None = None) -> float | None:
    """Characters per token of ``run``'s validation split: the trainer's record in meta.json, else computed by
    `training.chars_per_token` with the run's tokenizer on ``corpus`` (default: loaded as the run loaded it).
    None for paired or labelled data, and for a run with no validation split."""
    if "chars_per_token" in run.meta:
        recorded = run.meta["chars_per_token"]
        val = recorded.get("val") if isinstance(recorded, dict) else None  # a meta.json may say anything
        return float(val) if isinstance(val, (int, float)) and val > 0 else None
    d, t = run.config.data, run.config.train
    if d.task not in ("next_token", "masked_lm") or not d.val_fraction:
        return None
    from ..data.chars import chars_per_token
    from ..data.corpora import build_dataset, load_corpus

    corpus = corpus or load_corpus(d.corpus, d.task, seed=t.seed, modadd_p=d.modadd_p)
    tokenizer = run.load_tokenizer()
    dataset = build_dataset(corpus, tokenizer, d.task, run.config.model.l_max, d.val_fraction, d.p_mask, t.seed)
    return (chars_per_token(corpus, tokenizer, dataset) or {}).get("val")


def _best_val_loss(run: Run) -> float | None:
    best = run.meta.get("best_val_loss")
    if not isinstance(best, (int, float)):  # missing, or not a number: the metrics say
        best = min((v for r in run.metrics() if (v := row_number(r, VAL_LOSS)) is not None), default=None)
    return float(best) if best is not None and math.isfinite(best) else None


def finished_runs_on(corpus_spec: str, runs_root: str | Path | None = None, *, task: Task | None = None,
                     loaded: Corpus | None = None, seed: int = 0, progress: Progress | None = None) -> list[RunScore]:
    """The finished (or stopped) runs under ``runs_root`` trained on ``corpus_spec`` (and ``task``, if given)
    that have a validation loss, lowest bits per character first (then lowest loss). ``loaded`` is the
    corpus as loaded for ``task`` with ``seed``; it spares loading it again for runs that predate meta.json's
    ``chars_per_token``. A run whose corpus or tokenizer can no longer be read has no bits per character."""
    from ..data.corpora import load_corpus, seeded
    from .folder import list_runs

    runs = [r for r in list_runs(Path(runs_root) if runs_root else None)
            if r.info.status in ("finished", "stopped") and same_corpus(r.config.data.corpus, corpus_spec)
            and (task is None or r.config.data.task == task)]
    corpora: dict[tuple[str, int | None], Corpus] = {}
    if loaded is not None and task is not None:
        corpora[task, seed if seeded(corpus_spec) else None] = loaded
    scores = []
    for i, run in enumerate(runs):
        if progress:
            progress(i / len(runs), f"reading run {run.name}")
        loss = _best_val_loss(run)
        if loss is None:
            continue
        d, status = run.config.data, run.info.status
        assert status is not None  # finished or stopped (`runs`)
        key = (d.task, run.config.train.seed if seeded(corpus_spec) else None)
        try:
            if "chars_per_token" not in run.meta and key not in corpora:
                corpora[key] = load_corpus(d.corpus, d.task, seed=run.config.train.seed, modadd_p=d.modadd_p)
            cpt = run_chars_per_token(run, corpora.get(key))
        except ValueError:
            cpt = None
        scores.append(RunScore(run.name, str(run.path), status, d.task, d.tokenizer,
                               run.config.model.vocab_size, int(run.meta.get("step", 0)), loss, cpt))
    return sorted(scores, key=lambda s: (s.bits_per_char is None, s.bits_per_char or 0.0, s.val_loss))
