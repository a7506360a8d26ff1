"""Train/val splits and batches for the four tasks: a ``Dataset`` per kind of corpus (``corpora.build_dataset``
makes one). Sequences are padded on the right with ``pad_id``, and a batch with padding carries a padding mask
for each padded tensor (True at real tokens). Ignored targets are ``IGNORE`` (-100)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..config import Task
from .stats import unigram_entropy
from .tokenization import Tokenizer, token_dtype

if TYPE_CHECKING:
    from .streaming import TokenFile

IGNORE = -100  # target index ignored by the loss


class Dataset:
    """Batches of one task from a tokenized corpus, split into "train" and "val"."""

    def __init__(self, task: Task, tokenizer: Tokenizer, l_max: int):
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


class StreamDataset(Dataset):
    """next_token (Algorithm 13) and masked_lm (Algorithm 12): random windows of one token stream."""

    def __init__(self, task: Task, tokenizer: Tokenizer, l_max: int, data: np.ndarray, n_train: int, p_mask: float):
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

    def window_starts(self, split: str, batch_size: int, generator: torch.Generator) -> tuple[np.ndarray, int]:
        """Where in `stream` the rows of ``batch(split, batch_size, generator)`` begin (B,), and their length T;
        it draws what `batch` draws first, so a generator in the same state gives the same windows."""
        data = self._data.get(split, ())
        self._check_split(split, len(data))
        extra = self.task == "next_token"  # y needs the token after the window
        T = min(self.l_max, len(data) - extra)
        return torch.randint(len(data) - T - extra + 1, (batch_size,), generator=generator).numpy(), T

    def batch(self, split, batch_size, generator):
        start, T = self.window_starts(split, batch_size, generator)
        data, extra = self._data[split], self.task == "next_token"
        w = torch.from_numpy(data[start[:, None] + np.arange(T + extra)].astype(np.int64))  # (B, T[+1])
        if extra:  # nanoGPT's get_batch: x = data[i:i+T], y = data[i+1:i+1+T]
            return {"x": w[:, :-1].contiguous(), "y": w[:, 1:].contiguous()}
        masked = torch.rand(w.shape, generator=generator) < self.p_mask  # (B, T)
        rows = (~masked.any(1)).nonzero(as_tuple=True)[0]  # at least one masked position per row
        masked[rows, torch.randint(T, (len(rows),), generator=generator)] = True
        return {"x": torch.where(masked, self.tokenizer.mask_id, w), "y": torch.where(masked, w, IGNORE)}


class MappedDataset(StreamDataset):
    """A `StreamDataset` over a streamed corpus's token file, mapped (`streaming.TokenFile`): the same
    batches from the same ids, while only the pages read stay in memory."""

    def __init__(self, task: Task, tokenizer: Tokenizer, l_max: int, tokens: TokenFile, n_train: int, p_mask: float):
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


class ExampleDataset(Dataset):
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
        return self.rows(split, torch.randint(n, (batch_size,), generator=generator).numpy())

    def rows(self, split: str, indices: np.ndarray) -> dict[str, torch.Tensor]:
        """The examples ``indices`` (0-based within ``split``) as `batch` gives them, in that order."""
        self._check_split(split)
        idx = self._offset[split] + np.asarray(indices, np.int64)
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

    def target_counts(self, split: str) -> np.ndarray:
        """(N_V,) how often each token is a seq2seq target in ``split``: the targets' tokens and one eos each."""
        self._check_split(split)
        flat, off = self._b
        n, start = len(self._examples[split]), self._offset[split]
        counts = np.bincount(flat[off[start]:off[start + n]], minlength=self.tokenizer.vocab_size)
        counts[self.tokenizer.eos_id] += n
        return counts

class AnswerDataset(Dataset):
    """next_token (Algorithm 13) on prompts and answers (the "modadd" corpus: ``12+34=`` → ``46``): a row is the
    prompt and the answer without its last token, and its targets are IGNORE but at the answer's tokens, so the
    loss and the accuracy count the answer only. A batch of at least a split's size is the whole split, in order
    (full-batch training, and an exact evaluation)."""

    def __init__(self, tokenizer: Tokenizer, l_max: int, examples: list[tuple[str, str]], n_train: int):
        super().__init__("next_token", tokenizer, l_max)
        self._examples = {"train": examples[:n_train], "val": examples[n_train:]}
        self._rows = {split: self._encode(rows) for split, rows in self._examples.items() if rows}

    def _encode(self, examples: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        prompts = self.tokenizer.encode_batch([a for a, _ in examples])
        answers = self.tokenizer.encode_batch([b for _, b in examples])
        longest = max(len(p) + len(a) - 1 for p, a in zip(prompts, answers))
        if longest > self.l_max:
            raise ValueError(f"a prompt and its answer take {longest + 1} tokens; l_max = {self.l_max} must be at "
                             f"least {longest}.")
        x = [np.array(p + a[:-1]) for p, a in zip(prompts, answers)]
        y = [np.array([IGNORE] * (len(p) - 1) + a) for p, a in zip(prompts, answers)]
        (xs, real), (ys, _) = _pad(x, self.tokenizer.pad_id), _pad(y, IGNORE)
        return {"x": xs, "y": ys, "x_pad_mask": real} if not real.all() else {"x": xs, "y": ys}

    def examples(self, split: str) -> list[tuple[str, str]]:
        """The (prompt, answer) strings of a split."""
        self._check_split(split)
        return self._examples[split]

    def sizes(self) -> dict:
        return {"train_examples": len(self._examples["train"]), "val_examples": len(self._examples["val"])}

    def batch(self, split, batch_size, generator):
        n = len(self._examples.get(split, ()))
        self._check_split(split, n)
        rows = self._rows[split]
        if batch_size >= n:
            return dict(rows)
        idx = torch.randint(n, (batch_size,), generator=generator)
        return {k: v[idx] for k, v in rows.items()}
