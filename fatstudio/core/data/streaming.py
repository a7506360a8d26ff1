"""Text corpora too large to hold in memory: read in chunks, tokenized once into a token file, read back mapped.

A text corpus (next_token, masked_lm) whose files total more than ``STREAM_BYTES`` is never read whole.
`scan` reads it once in chunks: each file's encoding, exact statistics, every character it holds, and a
bounded sample spread over it (``SAMPLE_CHARS``, what a tokenizer is trained on and the preview shows).
`Source.tokens` then encodes it in chunks into a file of token ids in the cache folder (``$FATSTUDIO_CACHE``,
else the platform's user cache folder for fatstudio, then ``tokens``), keyed by the files (path, size,
modification time) and the tokenizer, and returns it as a read-only ``np.memmap``. The folder is written
under a hidden work name and renamed when complete (`cache.work_folder`), so a half-written one is never used; a
later run on the same files with the same tokenizer skips the work. The cache is bounded, with the compiled
decode steps beside the token files: past `cache.cache_cap` bytes in all (``$FATSTUDIO_CACHE_MB``), the entries
used least recently are removed (`cache.prune`); ``fatstudio cache --clear`` empties it. The pieces encoded are
exactly those `encode_corpus` encodes for the whole text in memory, so the token stream is the same.

Memory stays near one chunk of text (``READ_BYTES``) and one batch of ids, whatever the corpus's size.
"""
from __future__ import annotations

import codecs
import hashlib
import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..cache import TOKENS, mark_used, prune, work_folder
from ..files import open_regular
from .tokenization import BATCH_PIECES, CHUNK_CHARS, Progress, Tokenizer, split_text, token_dtype

STREAM_BYTES = 8 << 20  # a text corpus larger than this (in bytes, all files) is streamed (held in memory, it
# took ~4.7× its size at the peak: 10 MB trained at 472 MB peak RSS, streamed at 415 MB)
READ_BYTES = 4 << 20  # bytes read and decoded at a time
SAMPLE_CHARS = 8 << 20  # characters of the sample (for the tokenizer and the preview)…
SAMPLE_BLOCKS = 32  # …in this many blocks spread evenly over the corpus, the first at its start
FORMAT = 1  # of a token folder; part of its key


def cache_root() -> Path:
    """Where token files are kept: ``$FATSTUDIO_CACHE/tokens``, else ``tokens`` in the user cache folder."""
    return TOKENS.root()


@dataclass(frozen=True)
class TextFile:
    """One file of a streamed corpus, with the encoding (and error handling) it is decoded with."""

    path: Path
    size: int
    mtime_ns: int
    encoding: str
    errors: str = "strict"


def sniff(path: Path) -> tuple[str, str] | None:
    """(encoding, errors) that `data._decode` would use for ``path``, found by reading it in chunks;
    None for a binary file."""
    fh, size = open_regular(path)  # never a FIFO or a device; a size 0 that is not (/proc) is refused
    with fh:
        head = fh.read(min(size, 8192))
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if head.startswith(bom):
            return encoding, "replace"
    if b"\0" in head:
        return None
    for encoding in ("utf-8", "cp1252"):
        try:
            for _ in _decoded(path, encoding, "strict"):
                pass
            return encoding, "strict"
        except UnicodeDecodeError:
            continue
    return "latin-1", "strict"


def _decoded(path: Path, encoding: str, errors: str) -> Iterator[str]:
    """The text of ``path`` in chunks, newlines made ``\\n`` (a ``\\r`` at a chunk's end waits for the next): as
    many bytes as its size when opened, never more (a file that grows meanwhile is read as it was)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors)
    cr = ""
    fh, left = open_regular(path)
    with fh:
        while True:
            data = fh.read(min(READ_BYTES, left))
            left -= len(data)
            text = cr + decoder.decode(data, final=not data)
            cr = ""
            if data and text.endswith("\r"):
                text, cr = text[:-1], "\r"
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            if text:
                yield text
            if not data:
                return


def chunks(files: list[TextFile], newline_after_last: bool = False) -> Iterator[str]:
    """The corpus's text in chunks: the files one after another, a newline added after each that does not
    end with one but the last (and after the last too with ``newline_after_last``), as `data.load_corpus`
    joins them in memory."""
    for i, f in enumerate(files):
        last = ""
        for text in _decoded(f.path, f.encoding, f.errors):
            last = text
            yield text
        if not last.endswith("\n") and (i < len(files) - 1 or newline_after_last):
            yield "\n"


def split_stream(texts: Iterable[str], size: int = CHUNK_CHARS) -> Iterator[str]:
    """`split_text` of the texts' concatenation, piece for piece, holding only about one text at a time.

    `split_text` chooses each cut from the ``2 * size`` characters after the previous cut alone, so a piece
    whose start lies more than ``2 * size`` before the end of what has been read is the one it would cut
    from the whole; the rest waits for the next text."""
    buffer = ""
    for text in texts:
        buffer += text
        start = 0
        for piece in split_text(buffer, size):
            if start + 2 * size >= len(buffer):
                break
            yield piece
            start += len(piece)
        buffer = buffer[start:]
    yield from split_text(buffer, size)


@dataclass
class Source:
    """A streamed text corpus: its files and what one pass over them found (exact counts, the alphabet, a
    sample of about ``SAMPLE_CHARS`` characters in blocks spread over it, the first at its start)."""

    files: list[TextFile]
    newline_after_last: bool = False  # see `chunks` (when the last file of a folder was binary, so skipped)
    chars: int = 0
    lines: int = 0
    words: int = 0
    alphabet: str = ""  # every distinct character, sorted
    sample: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def texts(self) -> list[str]:
        """What a tokenizer is trained on: the sample, then the characters it lacks (so a char tokenizer
        knows every character of the corpus)."""
        missing = set(self.alphabet).difference(*self.sample)
        return [*self.sample, *(["".join(sorted(missing))] if missing else [])]

    def stats(self) -> dict[str, int]:
        return {"chars": self.chars, "lines": self.lines, "words": self.words, "symbols": len(self.alphabet)}

    def key(self, tokenizer: Tokenizer) -> str:
        """The name of this corpus's token folder for ``tokenizer``: a hash of the files and the tokenizer."""
        files = [[str(f.path.resolve()), f.size, f.mtime_ns, f.encoding, f.errors] for f in self.files]
        blob = json.dumps({"format": FORMAT, "files": files, "tokenizer": tokenizer.to_json()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def tokens(self, tokenizer: Tokenizer, progress: Progress | None = None) -> TokenFile:
        """The corpus's token stream, from the cache or encoded into it now."""
        root = cache_root()
        key = self.key(tokenizer)
        folder = root / key
        if not (folder / "meta.json").exists():
            try:
                with work_folder(TOKENS, key) as partial:  # removed unless renamed into place
                    pieces = split_stream(chunks(self.files, self.newline_after_last))
                    encode_to_folder(tokenizer, pieces, partial, self.chars, progress)
                    partial.rename(folder)
            except OSError as e:
                if not (folder / "meta.json").exists():  # else another process finished it first: use that
                    raise ValueError(f"cannot write the token file of this large corpus in {root}: "
                                     f"{e.strerror or e}; set FATSTUDIO_CACHE to a folder with room.") from None
        elif progress:
            progress(1.0, f"using the token file cached in {folder}")
        mark_used(TOKENS, folder)  # the last to go when the cache is pruned
        tokens = TokenFile.open(folder)
        prune(keep=folder)
        return tokens


def encode_to_folder(tokenizer: Tokenizer, pieces: Iterable[str], folder: Path, total_chars: int,
                     progress: Progress | None = None) -> None:
    """Encode ``pieces`` (``BATCH_PIECES`` at a time, in parallel, as `encode_corpus` does) into
    ``folder``: ``tokens.bin`` (the ids, raw, `token_dtype`), ``marks.npy`` (each piece's end in characters
    and in tokens, to tell how many characters a split covers) and, last, ``meta.json``."""
    dtype = token_dtype(tokenizer.vocab_size)
    char_ends, token_ends = array("q"), array("q")
    n_chars = n_tokens = reported = 0
    batch: list[str] = []
    with open(folder / "tokens.bin", "wb") as out:
        def flush() -> None:
            nonlocal n_chars, n_tokens, reported
            rows = tokenizer.encode_batch(batch)
            for piece, row in zip(batch, rows):
                n_chars += len(piece)
                n_tokens += len(row)
                char_ends.append(n_chars)
                token_ends.append(n_tokens)
            if rows:
                np.concatenate([np.array(row, dtype) for row in rows]).tofile(out)
            batch.clear()
            if progress and n_chars - reported >= 1 << 22:
                reported = n_chars
                progress(min(n_chars / max(total_chars, 1), 1.0), f"encoded {n_chars / 1e6:,.0f} M characters")

        for piece in pieces:
            batch.append(piece)
            if len(batch) == BATCH_PIECES:
                flush()
        flush()
    np.save(folder / "marks.npy", np.stack([np.frombuffer(char_ends, np.int64), np.frombuffer(token_ends, np.int64)], 1))
    meta = {"format": FORMAT, "dtype": np.dtype(dtype).name, "tokens": n_tokens, "chars": n_chars}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    if progress:
        progress(1.0, f"{n_tokens:,} tokens")


@dataclass
class TokenFile:
    """A token folder: the ids mapped read-only (``data``), and what is needed to count a split's
    characters and tokens without reading it into memory."""

    folder: Path
    data: np.ndarray  # np.memmap
    chars: int
    marks: np.ndarray  # (pieces, 2): each piece's end in characters and in tokens

    @classmethod
    def open(cls, folder: Path) -> TokenFile:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        dtype = np.dtype(meta["dtype"])
        n = int(meta["tokens"])
        data = np.memmap(folder / "tokens.bin", dtype, "r", shape=(n,)) if n else np.zeros(0, dtype)
        return cls(folder, data, int(meta["chars"]), np.load(folder / "marks.npy"))

    def chars_before(self, n: int) -> int:
        """About how many characters the first ``n`` tokens cover: exact at a piece's end, interpolated
        within the piece (of ``CHUNK_CHARS`` characters or so) that holds token ``n``."""
        char_ends, token_ends = self.marks[:, 0], self.marks[:, 1]
        return round(float(np.interp(n, np.concatenate(([0], token_ends)), np.concatenate(([0], char_ends)))))

    def counts(self, stop: int, chunk: int = 1 << 22) -> np.ndarray:
        """How often each id occurs in the first ``stop`` tokens, read ``chunk`` tokens at a time (not
        through the map, so the pages read do not stay in this process's memory)."""
        total = np.zeros(0, np.int64)
        with open(self.folder / "tokens.bin", "rb") as fh:
            for start in range(0, stop, chunk):
                ids = np.fromfile(fh, self.data.dtype, min(chunk, stop - start))
                c = np.bincount(ids, minlength=len(total))
                c[:len(total)] += total
                total = c
        return total


def scan(paths: list[Path], notes: list[str], progress: Progress | None = None) -> Source:
    """One pass over ``paths`` (already sorted as `data.load_corpus` reads them): their encodings, counts,
    alphabet and sample. Binary files are skipped (counted in ``notes``'s caller); a file that is not
    UTF-8 gets a note, as in memory."""
    files: list[TextFile] = []
    for p in paths:
        found = sniff(p)
        if found is None:
            continue
        if found[0] in ("cp1252", "latin-1"):
            notes.append(f"{p.name} is not UTF-8; decoded it as {found[0]}.")
        st = p.stat()
        files.append(TextFile(p, st.st_size, st.st_mtime_ns, *found))
    # in memory, every file but the last of the folder gets a newline, binary or not: so the last text file
    # too when a binary file follows it
    source = Source(files, newline_after_last=bool(files) and files[-1].path != paths[-1])
    total = max(source.size, 1)
    block = SAMPLE_CHARS // SAMPLE_BLOCKS
    alphabet: set[str] = set()
    done = 0  # bytes of the files before the current one
    next_block = 0.0  # the byte position where the next sample block starts
    inside_word = False  # whether the text so far ends inside a word (a word cut between two chunks)
    last = ""
    for i, f in enumerate(files):
        last = ""
        read = 0  # about how many bytes of this file are read (UTF-8 lengths: good enough to spread blocks)
        for text in _decoded(f.path, f.encoding, f.errors):
            if done + read >= next_block and len(source.sample) < SAMPLE_BLOCKS:
                source.sample.append(_block(text, block, first=not source.sample))
                next_block = len(source.sample) * total / SAMPLE_BLOCKS
            source.chars += len(text)
            source.lines += text.count("\n")
            for j in range(0, len(text), 1 << 18):  # a slice at a time: a chunk's words would be a large list
                part = text[j:j + (1 << 18)]
                source.words += len(part.split()) - (inside_word and not part[0].isspace())
                inside_word = not part[-1].isspace()
            alphabet.update(text)
            read += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            last = text
            if progress:
                progress(min((done + min(f.size, read)) / total, 1.0), f"read {f.path.name}")
        done += f.size
        if not last.endswith("\n") and (i < len(files) - 1 or source.newline_after_last):  # as `chunks` adds
            source.chars += 1
            source.lines += 1
            alphabet.add("\n")
            inside_word, last = False, "\n"
    source.lines += bool(last) and not last.endswith("\n")
    source.alphabet = "".join(sorted(alphabet))
    return source


def _block(text: str, n: int, first: bool) -> str:
    """About ``n`` characters of ``text`` for the sample: whole lines where ``text`` has them (the first
    block from the very start)."""
    out = text[:n]
    if not first and "\n" in out[:-1]:
        out = out[out.index("\n") + 1:]
    if len(text) > n and "\n" in out:
        out = out[:out.rindex("\n") + 1]
    return out
