"""A text corpus too large to hold: streamed into a cached token file, read back mapped (`streaming`)."""
import json
import os
import random

import numpy as np
import pytest
import torch
from training_helpers import tiny_config

from fatstudio.core import training
from fatstudio.core.cache import TOKENS, entries
from fatstudio.core.data import streaming
from fatstudio.core.data.chars import chars_per_token
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import split_text, train_tokenizer
from fatstudio.core.runs.folder import Run

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex naïve café owners".split()


def _text(rng, n_lines, newline="\n"):
    return newline.join(" ".join(rng.choices(WORDS, k=rng.randint(0, 14))) for _ in range(n_lines))


@pytest.fixture
def big(tmp_path, monkeypatch):
    """A folder of a few hundred kB that streams (the threshold lowered to 50 kB, files read 10 kB at a
    time): UTF-8, CRLF, UTF-8 with BOM, cp1252, a file with no final newline, an empty one and a binary
    one; the cache in the test's folder."""
    monkeypatch.setattr(streaming, "STREAM_BYTES", 50_000)
    monkeypatch.setattr(streaming, "READ_BYTES", 10_000)
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path / "cache"))
    rng = random.Random(0)
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(_text(rng, 3000) + "\n", encoding="utf-8")
    (folder / "b.md").write_bytes(_text(rng, 2000, "\r\n").encode("utf-8"))  # no final newline
    (folder / "c.txt").write_bytes(b"\xef\xbb\xbf" + _text(rng, 1500).encode("utf-8"))
    (folder / "d.txt").write_text("")
    (folder / "sub" / "e.txt").write_bytes((_text(rng, 1500) + "\n").encode("cp1252"))
    (folder / "sub" / "f.txt").write_bytes(b"\0\1\2" * 1000)
    return folder


def _in_memory(corpus_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(streaming, "STREAM_BYTES", 1 << 40)
        return load_corpus(str(corpus_path))


def _encodings(monkeypatch):
    """Counts the token folders encoded."""
    calls = []
    real = streaming.encode_to_folder

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(streaming, "encode_to_folder", counting)
    return calls


def test_a_large_corpus_is_streamed_with_the_same_text_stats_and_preview(big, monkeypatch):
    memory, streamed = _in_memory(big, monkeypatch), load_corpus(str(big))
    assert memory.text is not None and memory.source is None
    assert streamed.text is None and streamed.source is not None
    assert "".join(streaming.chunks(streamed.source.files, streamed.source.newline_after_last)) == memory.text
    assert streamed.stats() == {**memory.stats(), "notes": streamed.notes}
    assert streamed.notes[:len(memory.notes)] == memory.notes  # files, cp1252, the binary file skipped
    assert "streamed" in streamed.notes[-1]
    assert streamed.preview(500) == memory.preview(500)
    assert sum(map(len, streamed.source.sample)) <= streaming.SAMPLE_CHARS
    assert set("".join(streamed.texts())) == set(memory.text)  # a char tokenizer learns every character


@pytest.mark.parametrize("read_bytes", [1, 7, 4096])
def test_chunks_decode_across_read_boundaries(big, monkeypatch, read_bytes):
    """Multi-byte characters, a BOM and CRLF split between two reads decode as when read whole."""
    memory = _in_memory(big, monkeypatch)
    source = load_corpus(str(big)).source
    monkeypatch.setattr(streaming, "READ_BYTES", read_bytes)
    assert "".join(streaming.chunks(source.files, source.newline_after_last)) == memory.text


def test_split_stream_cuts_exactly_as_split_text():
    rng = random.Random(1)
    text = _text(rng, 400) + "x" * 300 + _text(rng, 100)  # a stretch with no whitespace forces a cut
    for size in (16, 64, 1000):
        for n in (1, 5, 97, 4000):
            parts = [text[i:i + n] for i in range(0, len(text), n)]
            assert list(streaming.split_stream(parts, size)) == list(split_text(text, size))


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_streamed_tokens_and_batches_equal_the_in_memory_ones(big, monkeypatch, kind):
    memory, streamed = _in_memory(big, monkeypatch), load_corpus(str(big))
    tok = train_tokenizer(kind, streamed.texts(), 400)
    for task in ("next_token", "masked_lm"):
        a = build_dataset(memory, tok, task, l_max=32)
        b = build_dataset(streamed, tok, task, l_max=32)
        assert isinstance(b.stream("train").base, np.memmap)  # its blocks read from the mapped token file
        assert a.sizes() == b.sizes()
        for split in ("train", "val"):
            np.testing.assert_array_equal(a._data[split], b._data[split])
            x, y = a.batch(split, 8, torch.Generator().manual_seed(3)), b.batch(split, 8, torch.Generator().manual_seed(3))
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        assert b.unigram_entropy() == pytest.approx(a.unigram_entropy(), rel=1e-12)
    exact = chars_per_token(memory, tok, a)
    counted = b.split_chars()
    ratios = {s: n / b.sizes()[f"{s}_tokens"] for s, n in counted.items()}
    assert counted["train"] + counted["val"] == len(memory.text)
    assert ratios == pytest.approx(exact, rel=0.02)  # interpolated within one piece of the split
    if kind == "char":
        assert ratios == exact


def test_the_token_file_is_cached_and_rebuilt_when_a_file_changes(big, monkeypatch, tmp_path):
    encoded = _encodings(monkeypatch)
    corpus = load_corpus(str(big))
    tok = train_tokenizer("char", corpus.texts())
    first = build_dataset(corpus, tok, "next_token", l_max=16)
    assert len(encoded) == 1
    again = build_dataset(load_corpus(str(big)), tok, "next_token", l_max=16)
    assert len(encoded) == 1  # the cache hit encoded nothing
    np.testing.assert_array_equal(first._data["train"], again._data["train"])
    folders = list((tmp_path / "cache" / "tokens").iterdir())
    assert [p.name for p in folders] == [corpus.source.key(tok)]
    assert sorted(p.name for p in folders[0].iterdir()) == ["marks.npy", "meta.json", "tokens.bin"]
    assert json.loads((folders[0] / "meta.json").read_text())["dtype"] == "uint16"

    with open(big / "a.txt", "a", encoding="utf-8") as f:
        f.write("the lazy dog again\n")
    changed = load_corpus(str(big))
    rebuilt = build_dataset(changed, tok, "next_token", l_max=16, val_fraction=0.0)
    assert len(encoded) == 2
    memory = build_dataset(_in_memory(big, monkeypatch), tok, "next_token", l_max=16, val_fraction=0.0)
    np.testing.assert_array_equal(rebuilt._data["train"], memory._data["train"])

    other = train_tokenizer("word", changed.texts(), 300)  # another tokenizer: another token file
    build_dataset(changed, other, "next_token", l_max=16)
    assert len(encoded) == 3


def test_a_half_written_token_folder_is_never_used(big, monkeypatch, tmp_path):
    encoded = _encodings(monkeypatch)
    corpus = load_corpus(str(big))
    tok = train_tokenizer("char", corpus.texts())
    root = tmp_path / "cache" / "tokens"
    partial = root / f".{corpus.source.key(tok)}.killed"  # what a build killed midway leaves
    partial.mkdir(parents=True)
    (partial / "tokens.bin").write_bytes(b"\xff" * 1000)
    (partial / "meta.json").write_text(json.dumps({"format": 1, "dtype": "uint16", "tokens": 500, "chars": 500}))
    ds = build_dataset(corpus, tok, "next_token", l_max=16)
    assert len(encoded) == 1
    memory = build_dataset(_in_memory(big, monkeypatch), tok, "next_token", l_max=16)
    np.testing.assert_array_equal(ds._data["train"], memory._data["train"])
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == [partial.name]  # fresh: not stale yet

    def failing(tokenizer, pieces, folder, *args, **kwargs):  # a build that fails leaves nothing behind
        (folder / "tokens.bin").write_bytes(b"\0" * 10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(streaming, "encode_to_folder", failing)
    other = train_tokenizer("word", corpus.texts(), 300)
    with pytest.raises(ValueError, match="cannot write the token file .* No space left on device; set FATSTUDIO_CACHE"):
        build_dataset(corpus, other, "next_token", l_max=16)
    assert not any(corpus.source.key(other) in p.name for p in root.iterdir())


def test_training_on_a_streamed_corpus_runs_and_resumes(big, tmp_path):
    events = list(training.train(tiny_config(big, steps=10), run_dir=tmp_path / "run"))
    started = next(e for e in events if e.kind == "started")
    assert events[-1].kind == "finished" and events[-1].step == 10
    assert started.unigram_entropy and started.unigram_entropy > 0
    run = Run.open(tmp_path / "run")
    again = list(training.train(run.config.with_overrides(["train.steps=15"]), run_dir=run.path, resume=True))
    assert next(e for e in again if e.kind == "started").start_step == 10 and again[-1].step == 15
    assert [r["step"] for r in Run.open(run.path).metrics()] == list(range(1, 16))
    assert len(list((tmp_path / "cache" / "tokens").iterdir())) == 1  # the resume reused the token file


def test_a_large_binary_or_blank_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "STREAM_BYTES", 1000)
    (tmp_path / "blob.txt").write_bytes(b"\0" * 5000)
    with pytest.raises(ValueError, match="binary"):
        load_corpus(str(tmp_path / "blob.txt"))
    (tmp_path / "blank.txt").write_text(" \n" * 5000)
    with pytest.raises(ValueError, match="empty"):
        load_corpus(str(tmp_path / "blank.txt"))



def test_the_token_cache_is_bounded_least_recently_used_first(big, monkeypatch, tmp_path, capsys):
    from fatstudio.cli import main

    root = tmp_path / "cache" / "tokens"
    corpus = load_corpus(str(big))
    char, word = train_tokenizer("char", corpus.texts()), train_tokenizer("word", corpus.texts(), vocab_size=200)
    build_dataset(corpus, char, "next_token", l_max=16)
    build_dataset(corpus, word, "next_token", l_max=16)
    sizes = {f.name: n for f, n, _ in entries(TOKENS)}
    assert set(sizes) == {corpus.source.key(char), corpus.source.key(word)}
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", str(max(sizes.values()) / 1e6))  # room for one of them
    os.utime(root / corpus.source.key(char) / "meta.json", (1, 1))  # char's used long ago …
    build_dataset(corpus, word, "next_token", l_max=16)  # … word's now: char's goes
    assert [f.name for f, _, _ in entries(TOKENS)] == [corpus.source.key(word)]
    build_dataset(corpus, char, "next_token", l_max=16)  # the one in use stays, the older goes
    assert [f.name for f, _, _ in entries(TOKENS)] == [corpus.source.key(char)]

    assert main(["cache"]) == 0
    assert "1 token file(s)" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "removed 1" in capsys.readouterr().out and entries(TOKENS) == []
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "lots")
    assert main(["cache"]) != 0 and "FATSTUDIO_CACHE_MB" in capsys.readouterr().err
