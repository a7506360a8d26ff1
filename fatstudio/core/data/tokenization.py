"""Tokenizers for fatstudio, built with the Hugging Face ``tokenizers`` library.

Three kinds (``TOKENIZERS`` in config):

- ``char``: every distinct character of the corpus, sorted (a BPE model with no merges, so each symbol is
  one token). ``decode`` is the exact inverse of ``encode``. Text with a character the corpus never had
  raises ``ValueError`` naming it.
- ``word``: pieces matched by ``WORD_PATTERN``: a word (``\\w+``) or one punctuation character, each with
  its leading space attached (``" the"`` and ``"the"`` are different tokens), and every other whitespace
  character (newline, tab, a second space) as a token of its own. So ``decode(encode(t)) == t`` whenever
  every piece is known, and indentation and line breaks survive. The vocabulary keeps the
  ``vocab_size - 5`` most frequent pieces (ties in alphabetical order); any other piece, in the corpus or in
  a prompt, becomes ``<unk>`` (id N_V-5), which decodes as the string ``<unk>``. ``unknown_symbols`` lists
  them, so a GUI can warn.
- ``bpe``: byte-level BPE trained to at most ``vocab_size`` tokens. It never fails and round-trips any
  text exactly.

The four special tokens take the last ids, as the paper puts mask_token, bos_token, eos_token at
N_V-2..N_V: ``pad = N_V-4, mask = N_V-3, bos = N_V-2, eos = N_V-1`` (padding is ours; the paper has
none). The special strings written in a text (``"<mask>"`` in a fill-mask prompt) encode to their ids.

A fourth kind, ``imported``, is a checkpoint's own tokenizer (`Tokenizer.imported`, `runs.import_hf`), used as is:
any ``tokenizers`` model, its specials wherever they are. Which id plays pad, mask, bos and eos is written into its
``tokenizer.json`` as entries ``fatstudio:pad`` … of a ``TemplateProcessing`` post-processor (`ROLES`), which adds
nothing to an encoding (fatstudio encodes without the post-processor anyway).
A tokenizer is stored as one ``tokenizer.json`` in the ``tokenizers`` format; the kind is read back from
the model type and pre-tokenizer, and loading only parses JSON.

`TokenizerLike` is what inference and sampling ask of a tokenizer; `Tokenizer` is one, and so is any
stand-in with the same few members.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as _HFTokenizer

from ..config import TOKENIZERS, TokenizerKind, check_choice
from ..files import TOKENIZER_LIMIT, atomic_write, read_text

SPECIALS = ("<pad>", "<mask>", "<bos>", "<eos>")
UNK = "<unk>"
ROLES = ("pad", "mask", "bos", "eos")  # the special ids' roles, in the order of SPECIALS
ROLE_KEY = "fatstudio:{}"  # an imported tokenizer's post-processor entry for a role
Kind = Literal[TokenizerKind, "imported"]  # a tokenizer fatstudio trains, or a checkpoint's own (`Tokenizer.imported`)
IMPORTED: Kind = "imported"
WORD_PATTERN = r" ?\w+| ?[^\w\s]|\s"
CHUNK_CHARS = 1 << 13  # characters per piece handed to the Rust tokenizer (cut at safe points, see split_text)
BATCH_PIECES = 4  # pieces per encode_batch call (~32 kB, in parallel; 32 held ~50 MB more in the tokenizer, no faster)

Progress = Callable[[float, str], None]

# Cut points where every kind's pre-tokenization has a boundary anyway, so chunked encoding equals
# one-shot encoding: just after a newline between two non-space characters, else before a single space.
_LINE_CUT = re.compile(r"\S\n(?=\S)")
_SPACE_CUT = re.compile(r"\S(?= \S)")


def split_text(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    """Yield consecutive pieces of ``text`` of about ``size`` characters (at most ``2 * size``), cut where no
    token of any kind can span; only a stretch of ``size`` characters without whitespace is cut anywhere."""
    start, n = 0, len(text)
    while n - start > size:
        lo, hi = start + size, min(n, start + 2 * size)
        m = _LINE_CUT.search(text, lo, hi) or _SPACE_CUT.search(text, lo, hi)
        if not m and hi == n:
            break  # the rest is short enough to stay whole
        cut = m.end() if m else lo
        yield text[start:cut]
        start = cut
    if start < n:
        yield text[start:]


def token_dtype(vocab_size: int) -> type:
    """The numpy dtype that holds token ids compactly: uint16 if N_V < 65536, else int32."""
    return np.uint16 if vocab_size < 65536 else np.int32


def _byte_of_char() -> dict[str, int]:
    """The byte-level alphabet: printable Latin-1 bytes stand for themselves, the rest for chr(256 + k)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in table.values()]
    table.update({chr(256 + k): b for k, b in enumerate(others)})
    return table


_BYTE_OF_CHAR = _byte_of_char()


def _byte_level(backend: _HFTokenizer) -> bool:
    """Whether the tokenizer's pieces are written in the byte-level alphabet (GPT-2's): its decoder says so."""
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return any(part.get("type") == "ByteLevel" for part in parts)


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback: one byte a piece
UNREADABLE = "\ufffd"  # what a byte that is no part of a whole character shows as (as decoding shows it)


def _char_length(lead: int) -> int:
    """The bytes of the UTF-8 character that begins with byte ``lead`` (0: no character begins with it)."""
    return 1 if lead < 0x80 else 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 0


def _characters(data: bytes) -> list[tuple[int, int, str | None]]:
    """``data`` as UTF-8: (start, end, the character) of each character, (start, start + 1, None) for each byte that
    is no part of a whole one (a character cut off at either end, a broken sequence)."""
    out: list[tuple[int, int, str | None]] = []
    i = 0
    while i < len(data):
        n = _char_length(data[i])
        try:
            ch = data[i:i + n].decode("utf-8") if n and i + n <= len(data) else None
        except UnicodeDecodeError:
            ch = None
        out.append((i, i + n, ch) if ch is not None else (i, i + 1, None))
        i += n if ch is not None else 1
    return out


def readable_pieces(pieces: Sequence[bytes | str]) -> list[str]:
    """The pieces of one text as a reader reads them: a ``str`` (a special, a piece of text) as it is; each run of
    ``bytes`` pieces (byte-level BPE) read as UTF-8 across the pieces, so that a piece holding part of a multi-byte
    character shows that character and which of its bytes it holds, ``‹k/n›`` (``‹j–k/n›`` for several): ``П`` cut
    into two pieces shows as ``П‹1/2›`` and ``П‹2/2›``, a piece ``' \\xd0'`` before ``'\\x9fри'`` as ``' П‹1/2›'``
    and ``'П‹2/2›ри'``. A byte that is part of no whole character (cut off at the text's ends, or broken) shows as
    �, as decoding shows it."""
    out: list[str] = []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if isinstance(piece, str):
            out.append(piece)
            i += 1
            continue
        j = i
        while j < len(pieces) and isinstance(pieces[j], bytes):
            j += 1
        run = [p for p in pieces[i:j] if isinstance(p, bytes)]  # all of them
        chars, at = _characters(b"".join(run)), 0
        for p in run:
            lo, hi, shown = at, at + len(p), []
            for start, end, ch in chars:
                if end <= lo or start >= hi:
                    continue
                if ch is None:
                    shown.append(UNREADABLE)
                elif lo <= start and end <= hi:
                    shown.append(ch)
                else:  # a character this piece holds part of: which of its bytes
                    first, last, n = max(lo, start) - start + 1, min(hi, end) - start, end - start
                    shown.append(f"{ch}‹{first}/{n}›" if first == last else f"{ch}‹{first}–{last}/{n}›")
            out.append("".join(shown))
            at = hi
        i = j
    return out


def _shorten(symbols: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(repr(s) for s in symbols[:n])
    return shown + (f" and {len(symbols) - n} more" if len(symbols) > n else "")


class TokenizerLike(Protocol):
    """What inference and sampling use of a tokenizer: text to ids and back, one readable string per id, N_V
    and the special ids (pad, mask, bos, eos). `Tokenizer` has these; a stand-in needs only these."""

    @property
    def vocab_size(self) -> int: ...
    @property
    def pad_id(self) -> int: ...
    @property
    def mask_id(self) -> int: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no specials added; a ValueError for text the tokenizer cannot encode."""
        ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def token_strings(self, ids: Iterable[int]) -> list[str]: ...


def _token(backend: _HFTokenizer, i: int) -> str:
    piece = backend.id_to_token(i)
    if piece is None:
        raise ValueError(f"this tokenizer has no token with id {i} below its vocabulary size, so fatstudio cannot "
                         "use it; train a new one.")
    return piece


class Tokenizer:
    """A char, word or BPE tokenizer with N_V = ``vocab_size`` tokens, the four specials last."""

    def __init__(self, backend: _HFTokenizer, kind: Kind, roles: dict[str, int] | None = None) -> None:
        """``roles``: the ids of pad, mask, bos, eos for an ``imported`` tokenizer (else the last four ids)."""
        self.backend, self.kind = backend, kind
        self.vocab_size = n = backend.get_vocab_size(with_added_tokens=True)
        ids = [roles[r] for r in ROLES] if roles else list(range(n - 4, n))
        if not roles and [backend.token_to_id(s) for s in SPECIALS] != ids:
            raise ValueError(f"this tokenizer does not hold {', '.join(SPECIALS)} as its last four ids, "
                             "so fatstudio cannot use it; train a new one.")
        if any(not 0 <= i < n for i in ids):
            raise ValueError(f"a special token id of {ids} is outside this tokenizer's {n} tokens.")
        self.pad_id, self.mask_id, self.bos_id, self.eos_id = ids
        self.unk_id = backend.token_to_id(UNK) if kind == "word" else None
        pieces = [_token(backend, i) for i in range(n)]
        self._known = frozenset(pieces)
        specials = SPECIALS + ((UNK,) if kind == "word" else ())
        self._special_re = re.compile("|".join(map(re.escape, specials)))
        self._bytes: list[bytes | None] | None = None  # a byte-level piece's bytes (`token_labels`); None: text
        if kind == "bpe" or (kind == IMPORTED and _byte_level(backend)):
            added = {t.content for t in backend.get_added_tokens_decoder().values()}
            self._bytes = [None if p in SPECIALS or p in added else bytes(_BYTE_OF_CHAR.get(c, 63) for c in p)
                           for p in pieces]
            pieces = [p if b is None else b.decode("utf-8", "backslashreplace") for p, b in zip(pieces, self._bytes)]
        elif kind == IMPORTED:  # SentencePiece's word boundary ▁ is a space; its byte fallback <0xD0> a byte
            self._bytes = [bytes([int(m[1], 16)]) if (m := _BYTE_PIECE.fullmatch(p)) else None for p in pieces]
            pieces = [p.replace("\u2581", " ") for p in pieces]
        self._strings = pieces

    @classmethod
    def imported(cls, backend: _HFTokenizer, roles: dict[str, int]) -> Tokenizer:
        """A checkpoint's own tokenizer, its ids unchanged, with ``roles`` (pad, mask, bos, eos -> id) written
        into its post-processor, so that ``to_json``/``from_json`` keep them."""
        d = json.loads(backend.to_str())
        entries = {ROLE_KEY.format(r): {"id": ROLE_KEY.format(r), "ids": [roles[r]],
                                        "tokens": [_token(backend, roles[r])]} for r in ROLES}
        post = d.get("post_processor")
        if not post or post.get("type") != "TemplateProcessing":  # GPT-2's ByteLevel one only trims offsets
            seq = [{"Sequence": {"id": "A", "type_id": 0}}]
            post = {"type": "TemplateProcessing", "single": seq,
                    "pair": [*seq, {"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": {}}
        post["special_tokens"].update(entries)
        d["post_processor"] = post
        return cls(_HFTokenizer.from_str(json.dumps(d)), IMPORTED, roles)

    def __repr__(self) -> str:
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"

    # --- encoding -----------------------------------------------------------------------------------
    def unknown_symbols(self, text: str) -> list[str]:
        """Distinct symbols of ``text`` outside the vocabulary, in order of appearance.

        char: characters (``encode`` refuses them); word: pieces that encode to ``<unk>``; bpe: none.
        """
        if self.kind in ("bpe", IMPORTED):
            return []
        segments = self._special_re.split(text)
        if self.kind == "char":
            symbols: Iterable[str] = (c for seg in segments for c in sorted(set(seg) - self._known, key=seg.index))
        else:
            symbols = (p for seg in segments for p, _ in self.backend.pre_tokenizer.pre_tokenize_str(seg))
        return [s for s in dict.fromkeys(symbols) if s not in self._known]

    def _check(self, texts: Iterable[str]) -> None:
        if self.kind == "char":
            missing = list(dict.fromkeys(s for t in texts for s in self.unknown_symbols(t)))
            if missing:
                raise ValueError(f"the text has {len(missing)} character(s) the char tokenizer does not know: "
                                 f"{_shorten(missing)}; remove them or train the tokenizer on a corpus that has them.")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no specials added (a char tokenizer raises ValueError on unknown characters)."""
        self._check([text])
        # through encode_batch, which releases the GIL while Rust works (`encode` holds it): the GUI thread and
        # the other workers go on meanwhile
        return self.backend.encode_batch([text], add_special_tokens=False)[0].ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for many texts at once (in parallel)."""
        self._check(texts)
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    # --- decoding -----------------------------------------------------------------------------------
    def _ids(self, ids: Iterable[int]) -> list[int]:
        ids = ids.tolist() if hasattr(ids, "tolist") else [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (N_V = {self.vocab_size}).")
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; pad, bos and eos are skipped, mask shows as ``<mask>`` (and unknowns as ``<unk>``)."""
        skip = (self.pad_id, self.bos_id, self.eos_id)
        return self.backend.decode([i for i in self._ids(ids) if i not in skip], skip_special_tokens=False)

    def token_strings(self, ids: Iterable[int]) -> list[str]:
        """One readable string per id: its text (byte-level pieces decoded: ``'Ġthe'`` → ``' the'``; a piece
        that is part of a multi-byte character shows its bytes as ``'\\xe6'``), or the special's name. For the
        tokens of one text, `token_labels` shows those bytes as the character they are part of."""
        return [self._strings[i] for i in self._ids(ids)]

    def token_labels(self, ids: Iterable[int]) -> list[str]:
        """The tokens of one text, ``ids`` in order, as a reader reads them (`readable_pieces`): `token_strings`,
        but a byte-level piece that holds part of a multi-byte character shows that character and which of its
        bytes it holds: ``'П‹1/2›'``, ``'П‹2/2›ри'``."""
        ids = self._ids(ids)
        if self._bytes is None:
            return [self._strings[i] for i in ids]
        return readable_pieces([b if (b := self._bytes[i]) is not None else self._strings[i] for i in ids])

    def utf8_lengths(self) -> np.ndarray:
        """The UTF-8 bytes of each id's text (0 for the specials): a byte-level BPE piece's characters stand
        for one byte each, a char's or word's piece is its text. Summed over a split's ids: its bytes."""
        pieces = [_token(self.backend, i) for i in range(self.vocab_size)]
        specials = set(SPECIALS) | {UNK}
        return np.array([0 if p in specials else len(p) if self.kind == "bpe" else len(p.encode("utf-8"))
                         for p in pieces], dtype=np.int64)

    # --- storage ------------------------------------------------------------------------------------
    def to_json(self) -> str:
        return self.backend.to_str()

    @classmethod
    def from_json(cls, s: str) -> Tokenizer:
        """Read a ``tokenizer.json`` text (pure JSON, nothing executed)."""
        try:
            d = json.loads(s)
            model, pre = d["model"]["type"], (d.get("pre_tokenizer") or {}).get("type")
            backend = _HFTokenizer.from_str(s)
        except Exception as e:  # json, key or tokenizers errors all mean "not a tokenizer file"
            raise ValueError(f"this is not a valid tokenizer.json ({e}).") from None
        entries = (d.get("post_processor") or {}).get("special_tokens") or {}
        if ROLE_KEY.format("bos") in entries:
            try:
                roles = {r: entries[ROLE_KEY.format(r)]["ids"][0] for r in ROLES}
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"this tokenizer.json does not give an id for each of {', '.join(ROLES)} "
                                 f"({ROLE_KEY.format('…')} entries of its post-processor).") from None
            return cls(backend, IMPORTED, roles)
        kinds: dict[tuple[str, str | None], TokenizerKind] = {("BPE", "ByteLevel"): "bpe", ("BPE", None): "char",
                                                              ("WordLevel", "Split"): "word"}
        if (model, pre) not in kinds:
            raise ValueError(f"a {model} tokenizer with a {pre} pre-tokenizer is not one fatstudio makes "
                             f"({', '.join(TOKENIZERS)}).")
        return cls(backend, kinds[model, pre])

    def save(self, path: str | Path) -> None:
        atomic_write(Path(path), self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        try:
            text = read_text(path, limit=TOKENIZER_LIMIT)
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read tokenizer file {path}: {getattr(e, 'strerror', None) or e}.") from None
        return cls.from_json(text)


def _pieces(texts: Iterable[str], progress: Progress | None, verb: str) -> Iterator[str]:
    """All texts cut by ``split_text``, reporting progress about once a megabyte (as a fraction of the
    characters when ``texts`` is a sequence, else as 0.0 with the count in the message)."""
    if isinstance(texts, str):
        texts = [texts]
    total = sum(map(len, texts)) if isinstance(texts, Sequence) else 0
    done = reported = 0
    for text in texts:
        for piece in split_text(text, CHUNK_CHARS):
            yield piece
            done += len(piece)
            if progress and done - reported >= 1 << 20:
                reported = done
                progress(min(done / total, 1.0) if total else 0.0, f"{verb} {done / 1e6:.0f} M characters")


def train_tokenizer(kind: TokenizerKind, texts: Iterable[str], vocab_size: int = 1000,
                    progress: Progress | None = None) -> Tokenizer:
    """Train a ``kind`` tokenizer on ``texts``. ``vocab_size`` is the most N_V may be (word, bpe; char
    takes every character). Progress is reported as a fraction of characters when ``texts`` is a sequence."""
    check_choice("tokenizer", kind, TOKENIZERS)
    pieces = _pieces(texts, progress, "read")
    if kind == "char":
        alphabet: set[str] = set()
        for p in pieces:
            alphabet.update(p)
        if not alphabet:
            raise ValueError("cannot train a tokenizer on an empty corpus.")
        backend = _HFTokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
        backend.decoder = decoders.Fuse()
    elif kind == "word":
        if vocab_size < 6:
            raise ValueError(f"vocab_size = {vocab_size} is too small for a word tokenizer; it needs at least 6 "
                             "(one word, <unk> and the four specials).")
        split = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
        counter = _HFTokenizer(models.WordLevel(unk_token=UNK))
        counter.pre_tokenizer = split
        counter.train_from_iterator(pieces, trainers.WordLevelTrainer(vocab_size=vocab_size - 5, show_progress=False))
        ranks = counter.get_vocab()  # piece -> id, ids in order of frequency
        words = sorted(ranks, key=ranks.__getitem__)  # most frequent first
        if not words:
            raise ValueError("cannot train a tokenizer on an empty corpus.")
        backend = _HFTokenizer(models.WordLevel({w: i for i, w in enumerate([*words, UNK])}, unk_token=UNK))
        backend.pre_tokenizer = split
        backend.decoder = decoders.Fuse()
        backend.add_special_tokens([UNK])
    else:
        if vocab_size < 260:
            raise ValueError(f"vocab_size = {vocab_size} is too small for byte-level BPE; it needs at least 260 "
                             "(256 bytes and the four specials).")
        backend = _HFTokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size - 4, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        backend.train_from_iterator(pieces, trainer)
    backend.add_special_tokens(list(SPECIALS))
    if progress:
        progress(1.0, f"{kind} tokenizer with N_V = {backend.get_vocab_size()}")
    return Tokenizer(backend, kind)


def encode_corpus(tokenizer: Tokenizer, text_or_iterable: str | Iterable[str],
                  progress: Progress | None = None, marks: list[tuple[int, int]] | None = None) -> np.ndarray:
    """The whole corpus as one token stream (uint16 if N_V < 65536, else int32), no specials added; ``marks``,
    when given, gets each piece's characters and tokens (what places a token in the text, `chars`).

    Encodes ``BATCH_PIECES`` pieces of ``CHUNK_CHARS`` characters at a time (in parallel) into one array
    reserved at a token per character (a reservation: memory is taken only as ids are written; it grows
    if a text has more tokens than characters), so memory stays near the resulting array. The texts of an
    iterable follow one another with no separator added.
    """
    dtype = token_dtype(tokenizer.vocab_size)
    size = len(text_or_iterable) if isinstance(text_or_iterable, str) else \
        sum(map(len, text_or_iterable)) if isinstance(text_or_iterable, Sequence) else 1 << 20
    data: np.ndarray = np.empty(max(size, 1024), dtype)
    n = 0
    batch: list[str] = []

    def flush() -> None:
        nonlocal data, n
        for piece, ids in zip(batch, tokenizer.encode_batch(batch)):
            if marks is not None:
                marks.append((len(piece), len(ids)))
            if n + len(ids) > len(data):
                grown: np.ndarray = np.empty(max(2 * len(data), n + len(ids)), dtype)
                grown[:n] = data[:n]
                data = grown
            data[n:n + len(ids)] = ids
            n += len(ids)
        batch.clear()

    for piece in _pieces(text_or_iterable, progress, "encoded"):
        batch.append(piece)
        if len(batch) == BATCH_PIECES:
            flush()
    flush()
    data = data[:n]
    if progress:
        progress(1.0, f"{len(data):,} tokens")
    return data
