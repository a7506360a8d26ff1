"""Characters per token of each split of a corpus: what turns a loss in nats per token into bits per character
(training records it, the tokenizer lab compares runs by it); and UTF-8 bytes per validation token, what turns
it into bits per byte (sweeps compare runs of different tokenizers by it)."""
from __future__ import annotations

from itertools import accumulate

import numpy as np

from .corpora import Corpus, Dataset
from .datasets import StreamDataset
from .tokenization import Tokenizer, split_text


def chars_per_token(corpus: Corpus, tokenizer: Tokenizer, dataset: Dataset) -> dict[str, float] | None:
    """Characters per token of each split of a text stream (next_token, masked_lm), ``{"train": …, "val": …}``
    ("val" only where there is a validation split): a split's loss of ℓ nats per token is ℓ / ln 2 / its
    ratio bits per character. Each split has its own (a BPE's differ by 10 % on python-stdlib). None for
    paired or labelled corpora (seq2seq, classification), whose loss is not over one text."""
    sizes = dataset.sizes()
    if corpus.kind != "text" or not sizes.get("train_tokens"):
        return None
    counted = dataset.split_chars()  # a streamed corpus's, counted as it was encoded (it holds no text)
    if counted is not None:
        return {split: n / sizes[f"{split}_tokens"] for split, n in counted.items()}
    if not corpus.text or not isinstance(dataset, StreamDataset):
        return None
    n_val = sizes.get("val_tokens", 0)
    val = dataset.ranges["val"]
    tail = not val or (len(val) == 1 and val[0][1] == sizes["train_tokens"] + n_val)  # the tail rule's one range
    if dataset.pieces is not None and not tail:
        val_chars = sum(_char_at(corpus.text, tokenizer, dataset.pieces, b) -
                        _char_at(corpus.text, tokenizer, dataset.pieces, a) for a, b in val)
    else:
        val_chars = _tail_chars(corpus.text, tokenizer, n_val)
    ratios = {"train": (len(corpus.text) - val_chars) / sizes["train_tokens"]}
    if n_val:
        ratios["val"] = val_chars / n_val
    return ratios


def _tail_chars(text: str, tokenizer: Tokenizer, n: int) -> int:
    """The characters that the last ``n`` tokens of ``text``'s token stream cover: the pieces `encode_corpus`
    encodes (cut where no token spans) encoded again from the end, the split found by the tokens' offsets."""
    covered = 0  # characters of the pieces wholly in the tail
    ends = [0, *accumulate(len(piece) for piece in split_text(text))]
    for lo, hi in reversed(list(zip(ends, ends[1:]))):
        if n <= 0:
            break
        offsets = tokenizer.backend.encode_batch([text[lo:hi]], add_special_tokens=False)[0].offsets  # GIL released
        if len(offsets) >= n:
            return covered + (hi - lo) - offsets[-n][0]
        n -= len(offsets)
        covered += hi - lo
    return covered


def _char_at(text: str, tokenizer: Tokenizer, pieces: np.ndarray, k: int) -> int:
    """Where token ``k`` of ``text``'s token stream starts in the text (its length for the stream's end): the
    piece that holds it found from ``pieces`` (each encoded piece's characters and tokens, `encode_corpus`'s
    marks), and only that piece encoded again, for its tokens' offsets."""
    char_ends, token_ends = np.cumsum(pieces[:, 0]), np.cumsum(pieces[:, 1])
    i = int(np.searchsorted(token_ends, k, side="right"))  # the piece whose tokens hold k
    if i >= len(pieces):
        return len(text)
    lo = int(char_ends[i - 1]) if i else 0
    first = int(token_ends[i - 1]) if i else 0
    if k == first:
        return lo
    offsets = tokenizer.backend.encode_batch([text[lo:int(char_ends[i])]], add_special_tokens=False)[0].offsets
    return lo + offsets[k - first][0]


CHUNK = 1 << 20  # ids summed at a time


def val_bytes_per_token(tokenizer: Tokenizer, dataset: Dataset) -> float | None:
    """UTF-8 bytes per token of the validation split of a token stream (next_token, masked_lm), from its ids'
    texts (`Tokenizer.utf8_lengths`): a validation loss of ℓ nats per token is ℓ / ln 2 / this bits per byte,
    a number that tokenizers share. None without a validation split, or for paired or labelled data."""
    if not isinstance(dataset, StreamDataset) or not dataset.sizes()["val_tokens"]:
        return None
    lengths, val = tokenizer.utf8_lengths(), dataset.stream("val")
    total = sum(int(lengths[np.asarray(val[i:i + CHUNK]).astype(np.int64)].sum()) for i in range(0, len(val), CHUNK))
    return total / len(val)
