"""The corpus preview: what a person sees of a corpus before training on it.

``load`` reads a corpus (a synthetic built-in generated with the training seed, so the preview shows what
will be trained on), trains the chosen tokenizer on it and returns a ``CorpusPreview``: the statistics, the
first characters, and the first tokens as ``Piece`` s that tell every token boundary. ``retokenize`` trains
only a new tokenizer on a loaded corpus. The loaded corpus and tokenizer travel on as a ``data.Prepared``,
which training reuses when its settings ask for the same.

The GUI's Corpus panel runs these in a worker thread and only draws the result; a script or a test calls
them directly. This module is imported when the window opens, so the heavy modules (``data`` imports torch,
``tokenization`` the tokenizers library) are imported inside the functions that need them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import MODADD_P, Task, TokenizerKind

if TYPE_CHECKING:
    from .corpora import Corpus, CorpusKind, Prepared
    from .tokenization import Tokenizer

Progress = Callable[[float, str], None]

PREVIEW_CHARS = 2000  # characters of the corpus shown as text
TOKEN_PREVIEW_CHARS = 600  # characters of the corpus shown as tokens
STAT_LIST_ITEMS = 12  # a list statistic shows its first items…
STAT_DICT_ITEMS = 8  # …and a dict statistic its first entries


@dataclass(frozen=True)
class Piece:
    """A piece of the tokenized preview: a token (``token`` is its number in the preview, so neighbours can
    be told apart, e.g. by alternating colours) or a separator that is no token (``token`` is None): the
    line break between two examples, the arrow between a source and its target, an example's label."""

    text: str
    token: int | None = None

    @property
    def is_token(self) -> bool:
        return self.token is not None


LINE_BREAK = Piece("\n")


@dataclass
class CorpusPreview:
    """Everything the Corpus panel shows about a corpus and its tokenizer (plain data)."""

    spec: str  # what was asked for: a path or a built-in's name
    task: Task = "next_token"
    seed: int = 0  # what a synthetic built-in was generated with
    seeded: bool = False  # whether the corpus depends on the seed (the synthetic built-ins do)
    name: str = ""
    kind: CorpusKind = "text"
    stats: dict[str, Any] = field(default_factory=dict)
    preview: str = ""  # the first PREVIEW_CHARS characters, examples one a line
    notes: list[str] = field(default_factory=list)
    tokenizer: TokenizerKind = "char"
    vocab_size: int | None = None  # N_V of the trained tokenizer
    tokens: list[Piece] = field(default_factory=list)  # the start of the corpus, token by token
    n_tokens_preview: int = 0  # tokens in ``tokens``…
    n_chars_preview: int = 0  # …and the characters of the corpus they cover
    builtins: dict[str, str] = field(default_factory=dict)  # built-in name -> description
    builtin_tasks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # built-in name -> its tasks
    corpus: Corpus | None = None  # the core Corpus, kept to retrain only the tokenizer
    prepared: Prepared | None = None  # the corpus and its tokenizer, reused by training

    @property
    def chars_per_token(self) -> float:
        return self.n_chars_preview / self.n_tokens_preview if self.n_tokens_preview else 0.0


def token_pieces(tokenizer: Tokenizer, corpus: Corpus, n_chars: int = TOKEN_PREVIEW_CHARS) -> tuple[list[Piece], int, int]:
    """The start of ``corpus`` as tokens of ``tokenizer`` (about ``n_chars`` characters; examples one a
    line, a pair's source and target joined by an arrow, a label after its text), the number of tokens and
    the number of characters they cover."""

    def tokens(text: str, first: int) -> list[Piece]:
        return [Piece(s, first + i) for i, s in enumerate(tokenizer.token_strings(tokenizer.encode(text)))]

    if corpus.kind == "text":
        sample = corpus.preview(n_chars)  # the text's start (a streamed corpus holds no text, only a sample)
        pieces = tokens(sample, 0) if sample else []
        return pieces, len(pieces), len(sample)
    pieces = []
    n_tok = n_chr = 0
    for a, b in corpus.examples:
        if n_chr >= n_chars:
            break
        source = tokens(a, n_tok)
        pieces += source
        n_tok, n_chr = n_tok + len(source), n_chr + len(a)
        if corpus.kind == "pairs":
            target = tokens(b, n_tok)
            pieces += [Piece("  →  "), *target]
            n_tok, n_chr = n_tok + len(target), n_chr + len(b)
        else:
            pieces.append(Piece(f"   [{b}]"))
        pieces.append(LINE_BREAK)
    return pieces, n_tok, n_chr


def stat_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """The corpus statistics as (label, value) text: numbers with thousands separators, long lists and
    class counts cut short; the name and the notes are shown elsewhere."""
    rows = []
    for key, v in stats.items():
        if key in ("name", "notes"):
            continue
        if isinstance(v, float):
            text = f"{v:,.4g}"
        elif isinstance(v, int) and not isinstance(v, bool):
            text = f"{v:,}"
        elif isinstance(v, (list, tuple)):
            text = ", ".join(map(str, v[:STAT_LIST_ITEMS])) + (" …" if len(v) > STAT_LIST_ITEMS else "")
        elif isinstance(v, dict):
            text = ", ".join(f"{a}: {b}" for a, b in list(v.items())[:STAT_DICT_ITEMS])
        else:
            text = str(v)
        rows.append((str(key).replace("_", " "), text))
    return rows


def load(spec: str, task: Task, tokenizer: TokenizerKind, vocab_size: int, seed: int,
         progress: Progress | None = None, modadd_p: int = MODADD_P) -> CorpusPreview:
    """Load the corpus ``spec`` for ``task`` (a synthetic built-in generated with ``seed``; "modadd" with
    ``modadd_p``), train a ``tokenizer`` tokenizer of at most ``vocab_size`` tokens on it, and describe both."""
    from . import corpora as data

    report = progress or _quiet
    report(0.0, f"loading {spec}")
    corpus = data.load_corpus(spec, task, progress=_scaled(report, 0.0, 0.6), seed=seed, modadd_p=modadd_p)
    info = CorpusPreview(spec=spec, task=task, seed=seed, seeded=data.seeded(spec), name=corpus.name,
                         kind=corpus.kind, stats=dict(corpus.stats()), preview=corpus.preview(PREVIEW_CHARS),
                         notes=list(corpus.notes), builtins=dict(data.BUILTINS),
                         builtin_tasks=dict(data.BUILTIN_TASKS), corpus=corpus)
    report(0.6, f"training the {tokenizer} tokenizer")
    return _tokenize(info, corpus, tokenizer, vocab_size, report)


def retokenize(info: CorpusPreview, tokenizer: TokenizerKind, vocab_size: int, progress: Progress | None = None) -> CorpusPreview:
    """A new preview of the corpus ``info`` loaded, with only the tokenizer trained again."""
    if info.corpus is None:
        raise ValueError(f"the corpus {info.spec} is not loaded; load it first.")
    new = dataclasses.replace(info, tokens=[], n_tokens_preview=0, n_chars_preview=0, vocab_size=None, prepared=None)
    return _tokenize(new, info.corpus, tokenizer, vocab_size, progress or _quiet)


def _tokenize(info: CorpusPreview, corpus: Corpus, kind: TokenizerKind, vocab_size: int, report: Progress) -> CorpusPreview:
    from . import corpora as data
    from . import tokenization

    tok = tokenization.train_tokenizer(kind, corpus.texts(), vocab_size,
                                       progress=_scaled(report, 0.6, 1.0))
    info.vocab_size = tok.vocab_size
    info.tokenizer = kind
    info.prepared = data.Prepared(info.spec, info.task, kind, vocab_size, info.seed, corpus, tok)
    try:
        info.tokens, info.n_tokens_preview, info.n_chars_preview = token_pieces(tok, corpus)
    except ValueError as e:  # the preview is a courtesy: never block training because of it
        info.tokens, info.n_tokens_preview, info.n_chars_preview = [Piece(f"(no tokenized preview: {e})")], 0, 0
    return info


def _quiet(fraction: float, message: str = "") -> None:
    """Progress reported to no one."""


def _scaled(report: Progress, lo: float, hi: float) -> Progress:
    """``report`` for a part of the work: its fractions 0…1 become lo…hi."""

    def scaled(fraction: float, message: str = "") -> None:
        report(lo + (hi - lo) * float(fraction), message)

    return scaled
