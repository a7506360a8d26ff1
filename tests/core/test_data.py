"""Corpora, built-ins, splits and the batches of each task."""
import json
import tracemalloc

import numpy as np
import pytest
import torch

from fatstudio.core.data.builtin import REPEAT_ALPHABET, REPEAT_LENGTHS, repeat_sequences
from fatstudio.core.data.corpora import (
    BUILTIN_TASKS,
    BUILTINS,
    IGNORE,
    Corpus,
    build_dataset,
    load_corpus,
)
from fatstudio.core.data.tokenization import encode_corpus, train_tokenizer

SYNTHETIC = [name for name in BUILTINS if name not in ("python-stdlib", "modadd")]  # generated with the seed


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _char(corpus):
    return train_tokenizer("char", corpus.texts())


def _sum(expression):
    return sum(map(int, expression.split("+")))


def _lookup(source):
    pairs, key = source.split("|")
    return dict(pairs.split(" "))[key]  # "a1 b7" -> {"a": "1", "b": "7"}


def _balanced(s):
    stack = []
    for c in s:
        if c in "([":
            stack.append(")" if c == "(" else "]")
        elif not stack or stack.pop() != c:
            return False
    return not stack


# --- reading files ------------------------------------------------------------------------------------------
def test_utf8_bom_is_removed_and_crlf_becomes_newline(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffhéllo\r\nworld\r\n".encode("utf-8"))
    c = load_corpus(str(tmp_path / "a.txt"))
    assert c.kind == "text" and c.text == "héllo\nworld\n" and c.notes == []


def test_cp1252_then_latin1_fallback_is_noted(tmp_path):
    (tmp_path / "w.txt").write_bytes("café – naïve “quotes”\n".encode("cp1252"))
    c = load_corpus(str(tmp_path / "w.txt"))
    assert c.text == "café – naïve “quotes”\n"
    assert c.notes == ["w.txt is not UTF-8; decoded it as cp1252."]
    (tmp_path / "l.txt").write_bytes(b"abc \x81\xe9\n")  # 0x81 is undefined in cp1252
    c = load_corpus(str(tmp_path / "l.txt"))
    assert c.text == "abc \x81é\n" and "latin-1" in c.notes[0]


def test_folder_is_read_recursively_by_extension_in_sorted_order(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / "b.md").write_text("# bee")
    (tmp_path / "a.txt").write_text("ay\n")
    (tmp_path / "sub" / "deeper" / "c.py").write_text("x = 1\n")
    (tmp_path / "sub" / "fake.txt").write_bytes(b"\x00\x01binary")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00")
    (tmp_path / ".git" / "config.txt").write_text("hidden\n")
    c = load_corpus(str(tmp_path))
    assert c.text == "ay\n# bee\nx = 1\n"
    assert any("skipped 1 binary" in n for n in c.notes) and c.notes[0].startswith("3 files")


@pytest.mark.parametrize("setup, task, message", [
    (lambda p: None, "next_token", "neither a file, a folder nor a built-in"),
    (lambda p: (p / "x").write_text("  \n\n"), "next_token", "is empty"),
    (lambda p: (p / "x").mkdir() or (p / "x" / "a.bin").write_bytes(b"1"), "next_token", "has no text files"),
    (lambda p: (p / "x").write_bytes(b"PK\x03\x04\x00\x00zip"), "next_token", "looks like a binary file"),
    (lambda p: (p / "x").write_text("a\tb\n"), "seq2seq", "is neither"),
    (lambda p: (p / "x").write_text("only\tone\n"), "frobnicate", "task = 'frobnicate'"),
])
def test_unusable_input_raises_a_one_line_value_error(tmp_path, setup, task, message):
    setup(tmp_path)
    with pytest.raises(ValueError, match=message) as err:
        load_corpus(str(tmp_path / "x"), task)
    assert "\n" not in str(err.value)


def test_tsv_and_jsonl_pairs_and_labels(tmp_path):
    (tmp_path / "p.tsv").write_text("source\ttarget\nabc\tcba\n\nxy\tyx\n")
    assert load_corpus(str(tmp_path / "p.tsv"), "seq2seq").pairs == [("abc", "cba"), ("xy", "yx")]
    rows = [{"source": "ab", "target": "ba"}, {"source": "é", "target": "é"}]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, rows)))
    assert load_corpus(str(tmp_path / "p.jsonl"), "seq2seq").pairs == [("ab", "ba"), ("é", "é")]
    (tmp_path / "l.tsv").write_text("good film\tpos\nbad film\tneg\n")
    c = load_corpus(str(tmp_path / "l.tsv"), "classification")
    assert c.kind == "labelled" and c.labelled == [("good film", "pos"), ("bad film", "neg")]
    (tmp_path / "l.jsonl").write_text('{"text": "one", "label": 1}\n{"text": "two", "label": 2}\n')
    assert load_corpus(str(tmp_path / "l.jsonl"), "classification").labelled == [("one", "1"), ("two", "2")]


@pytest.mark.parametrize("name, content, task, message", [
    ("p.tsv", "a\tb\nno tab\n", "seq2seq", r"p.tsv line 2: expected source<TAB>target \(exactly one tab\), found 0"),
    ("p.tsv", "a\tb\tc\n", "classification", "p.tsv line 1: expected text<TAB>label.*found 2 tabs"),
    ("p.jsonl", '{"source": "a", "target": "b"}\n{oops\n', "seq2seq", "p.jsonl line 2: not valid JSON"),
    ("p.jsonl", '{"source": "a"}\n', "seq2seq", 'p.jsonl line 1: expected an object with "source" and "target"'),
    ("p.jsonl", '{"text": "a", "label": [1]}\n', "classification", r'line 1: "label" must be a string, not \[1\]'),
    ("p.tsv", "a\tb\n", "seq2seq", "has 1 example"),
])
def test_malformed_examples_name_the_file_and_line(tmp_path, name, content, task, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError, match=message):
        load_corpus(str(tmp_path / name), task)


def test_corpus_stats_preview_and_texts():
    c = Corpus("t", "text", text="ab cd\nef\n")
    assert c.stats() == {"name": "t", "kind": "text", "chars": 9, "lines": 2, "words": 3, "symbols": 8, "notes": []}
    assert c.preview(4) == "ab c" and c.texts() == [c.text]
    p = Corpus("p", "pairs", pairs=[("ab", "ba"), ("c", "c")])
    assert p.stats()["examples"] == 2 and list(p.texts()) == ["ab", "ba", "c", "c"]
    assert p.preview() == "ab → ba\nc → c"
    lab = Corpus("l", "labelled", labelled=[("x y", "A"), ("z", "B"), ("w", "A")])
    assert lab.stats()["classes"] == {"A": 2, "B": 1} and list(lab.texts()) == ["x y", "z", "w"]


# --- built-ins ----------------------------------------------------------------------------------------------
def test_builtin_task_table():
    assert set(BUILTINS) == {"copy", "reverse", "sort", "add", "brackets", "kv", "repeat", "python-stdlib", "modadd"}
    assert BUILTIN_TASKS["copy"] == ("next_token", "masked_lm", "seq2seq")
    assert BUILTIN_TASKS["repeat"] == ("next_token", "masked_lm")
    assert BUILTIN_TASKS["python-stdlib"] == ("next_token", "masked_lm")
    assert all(len(BUILTIN_TASKS[n]) == 4 for n in ("reverse", "sort", "add", "brackets", "kv"))
    with pytest.raises(ValueError, match="'copy' has no classification form; it supports next_token"):
        load_corpus("copy", "classification")
    with pytest.raises(ValueError, match="'python-stdlib' has no seq2seq form"):
        load_corpus("python-stdlib", "seq2seq")


@pytest.mark.parametrize("name", SYNTHETIC)
def test_builtins_are_deterministic_per_seed(name):
    for task in BUILTIN_TASKS[name]:
        a, b, c = (load_corpus(name, task, seed=s) for s in (3, 3, 4))
        assert a == b and a != c


@pytest.mark.parametrize("name, check", [
    ("copy", lambda a, b: a == b),
    ("reverse", lambda a, b: b == a[::-1]),
    ("sort", lambda a, b: b == "".join(sorted(a))),
    ("add", lambda a, b: _sum(a) == int(b)),
    ("brackets", lambda a, b: _balanced(a + b) and not _balanced(a)),
    ("kv", lambda a, b: _lookup(a) == b),
])
def test_builtin_pairs_are_correct_short_and_distinct(name, check):
    pairs = load_corpus(name, "seq2seq").pairs
    assert 2000 <= len(pairs) == len({a for a, _ in pairs})
    assert all(check(a, b) for a, b in pairs)
    assert all(3 <= len(a) <= 16 for a, _ in pairs)
    text = load_corpus(name, "next_token").text
    sep = "=" if name == "add" else ">"
    assert all(check(*line.rsplit(sep, 1)) for line in text.splitlines())


@pytest.mark.parametrize("name, check", [
    ("reverse", lambda t, y: (t == t[::-1]) == (y == "palindrome")),
    ("sort", lambda t, y: (t == "".join(sorted(t))) == (y == "sorted")),
    ("add", lambda t, y: (_sum(t.split("=")[0]) == int(t.split("=")[1])) == (y == "correct")),
    ("brackets", lambda t, y: _balanced(t) == (y == "balanced")),
    ("kv", lambda t, y: _lookup(t) == y),
])
def test_builtin_labels_are_correct_and_not_lopsided(name, check):
    labelled = load_corpus(name, "classification").labelled
    assert all(check(t, y) for t, y in labelled)
    counts = np.array(list(load_corpus(name, "classification").stats()["classes"].values()))
    assert counts.min() > 0.5 * counts.max()


def test_repeat_builtin_is_random_letters_written_twice_per_seed():
    text = load_corpus("repeat", seed=3).text
    assert text == load_corpus("repeat", "masked_lm", seed=3).text != load_corpus("repeat", seed=4).text
    rs = repeat_sequences(3)
    assert text == "".join(r + r for r in rs)  # nothing between the blocks: every char is a letter
    assert set(text) <= set(REPEAT_ALPHABET) and len(set("".join(rs))) == len(REPEAT_ALPHABET)
    lo, hi = REPEAT_LENGTHS
    assert all(lo <= len(r) <= hi for r in rs) and {len(r) for r in rs} == set(range(lo, hi + 1))
    i = 0
    for r in rs:  # read the stream back block by block: the second half of each equals the first
        block = text[i:i + 2 * len(r)]
        assert block[:len(r)] == block[len(r):] == r
        i += len(block)
    assert i == len(text)
    with pytest.raises(ValueError, match="'repeat' has no seq2seq form"):
        load_corpus("repeat", "seq2seq")


def test_python_stdlib_builtin_and_tokenizer_training_progress():
    c = load_corpus("python-stdlib")
    assert 1_000_000 <= len(c.text) <= 2_500_000 and "def " in c.text and "import" in c.text
    assert c.text == load_corpus("python-stdlib", "masked_lm", seed=9).text
    events = []
    train_tokenizer("char", c.texts(), progress=lambda f, m: events.append(f))
    assert len(events) >= 2 and 0 < events[0] < 1 and events == sorted(events) and events[-1] == 1.0


@pytest.mark.parametrize("name", list(BUILTINS))
def test_every_builtin_form_builds_and_batches(name):
    for task in BUILTIN_TASKS[name]:
        corpus = load_corpus(name, task)
        ds = build_dataset(corpus, _char(corpus), task, l_max=16)
        for split in ("train", "val"):
            b = ds.batch(split, 4, _gen())
            assert all(v.shape[0] == 4 and v.device.type == "cpu" for v in b.values())


# --- datasets -----------------------------------------------------------------------------------------------
def test_next_token_is_nanogpt_windows_of_the_split_stream():
    """The tail rule (runs before data.split) is nanoGPT's: the stream cut at 90%."""
    corpus = load_corpus("python-stdlib")
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "next_token", l_max=32, val_fraction=0.1, split="tail")
    data = encode_corpus(tok, corpus.text)
    n_train = int(len(data) * 0.9)
    assert ds.sizes() == {"train_tokens": n_train, "val_tokens": len(data) - n_train}
    for split, part in (("train", data[:n_train]), ("val", data[n_train:])):
        b = ds.batch(split, 8, _gen(1))
        assert set(b) == {"x", "y"} and b["x"].shape == b["y"].shape == (8, 32) and b["x"].dtype == torch.long
        assert torch.equal(b["x"][:, 1:], b["y"][:, :-1])
        windows = np.lib.stride_tricks.sliding_window_view(part, 33)
        for x, y in zip(b["x"].numpy(), b["y"].numpy()):
            assert (windows == np.append(x, y[-1])).all(1).any()  # a window of this split, y shifted by one
    assert torch.equal(ds.batch("train", 8, _gen(5))["x"], ds.batch("train", 8, _gen(5))["x"])


def test_short_stream_gives_windows_shorter_than_l_max():
    corpus = Corpus("tiny", "text", text="abcdefghij" * 3)
    ds = build_dataset(corpus, _char(corpus), "next_token", l_max=64)
    assert ds.batch("val", 2, _gen())["x"].shape == (2, 2)  # 3 val tokens: T = 2
    with pytest.raises(ValueError, match="too few to split"):
        build_dataset(Corpus("t", "text", text="abcdefghij"), _char(corpus), "next_token", l_max=8, val_fraction=0.1)


def test_masked_lm_masks_about_p_mask_and_targets_only_masked_positions():
    corpus = load_corpus("copy", "masked_lm")
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "masked_lm", l_max=64, p_mask=0.15)
    b = ds.batch("train", 256, _gen())
    x, y = b["x"], b["y"]
    assert set(b) == {"x", "y"} and x.shape == y.shape == (256, 64)  # a window has no padding: no padding mask
    masked = x == tok.mask_id
    assert abs(masked.float().mean().item() - 0.15) < 0.02
    assert torch.equal(y != IGNORE, masked) and (y[masked] < tok.vocab_size - 4).all()
    full = build_dataset(corpus, tok, "masked_lm", l_max=64, p_mask=1.0).batch("train", 4, _gen())
    windows = np.lib.stride_tricks.sliding_window_view(encode_corpus(tok, corpus.text), 64)
    assert all((windows == row).all(1).any() for row in full["y"].numpy())  # y holds the original tokens
    rare = build_dataset(corpus, tok, "masked_lm", l_max=64, p_mask=1e-9).batch("train", 32, _gen())
    assert ((rare["x"] == tok.mask_id).sum(1) == 1).all()  # at least one masked position a row


def test_seq2seq_batches_and_held_out_pairs_disjoint_from_train():
    corpus = load_corpus("reverse", "seq2seq", seed=2)
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "seq2seq", l_max=16, val_fraction=0.1, seed=2)
    train, val = ds.examples("train"), ds.examples("val")
    assert len(val) == round(0.1 * len(corpus.pairs)) and len(train) + len(val) == len(corpus.pairs)
    assert not {a for a, _ in train} & {a for a, _ in val}
    assert ds.sizes() == {"train_examples": len(train), "val_examples": len(val), "duplicates_removed": 0}
    b = ds.batch("val", 16, _gen())
    assert set(b) == {"z", "z_pad_mask", "x", "x_pad_mask", "y"}
    z, zm, x, xm, y = (b[k] for k in ("z", "z_pad_mask", "x", "x_pad_mask", "y"))
    assert z.dtype == x.dtype == y.dtype == torch.long and zm.dtype == xm.dtype == torch.bool
    assert x.shape == y.shape == xm.shape and z.shape == zm.shape and z.shape[1] <= 16
    assert (z[:, 0] == tok.bos_id).all() and (x[:, 0] == tok.bos_id).all()
    assert torch.equal(z == tok.pad_id, ~zm) and torch.equal(x == tok.pad_id, ~xm)
    assert torch.equal(y == IGNORE, ~xm)
    lengths = xm.sum(1)
    assert (y[torch.arange(16), lengths - 1] == tok.eos_id).all()
    assert torch.equal(torch.where(xm[:, 1:], x[:, 1:], 0), torch.where(xm[:, 1:], y[:, :-1], 0))
    for row in range(16):
        source, target = tok.decode(z[row]), tok.decode(x[row])
        assert (source, target) in val and target == source[::-1]
        assert z[row, zm[row].sum() - 1] == tok.eos_id


def test_seq2seq_truncates_to_l_max_and_removes_duplicates(tmp_path):
    (tmp_path / "p.tsv").write_text("abcdefghij\tjihgfedcba\n" + "ab\tba\n" * 3 + "cd\tdc\n")
    corpus = load_corpus(str(tmp_path / "p.tsv"), "seq2seq")
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "seq2seq", l_max=6, val_fraction=0.4)
    assert ds.sizes() == {"train_examples": 2, "val_examples": 1, "duplicates_removed": 2}
    assert not set(ds.examples("train")) & set(ds.examples("val"))
    for split in ("train", "val"):
        b = ds.batch(split, 64, _gen())
        assert b["z"].shape[1] <= 6 and b["x"].shape[1] <= 6
        assert (b["z"][b["z_pad_mask"].sum(1) == 6][:, -1] == tok.eos_id).all()  # a truncated source keeps eos
    same = Corpus("same", "pairs", pairs=[("a", "b"), ("a", "b")])
    with pytest.raises(ValueError, match="1 distinct example"):
        build_dataset(same, _char(same), "seq2seq", l_max=8)


def test_classification_batches():
    corpus = load_corpus("brackets", "classification")
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "classification", l_max=32)
    assert ds.n_classes == 2 and ds.class_names == ["balanced", "unbalanced"]
    b = ds.batch("train", 32, _gen())
    assert set(b) == {"x", "x_pad_mask", "label"} and b["label"].shape == (32,) and b["label"].dtype == torch.long
    assert (b["x"][:, 0] == tok.bos_id).all() and torch.equal(b["x"] == tok.pad_id, ~b["x_pad_mask"])
    for row, label in zip(b["x"], b["label"]):
        assert row[row != tok.pad_id][-1] == tok.eos_id
        assert _balanced(tok.decode(row)) == (ds.class_names[label] == "balanced")
    kv = load_corpus("kv", "classification")
    assert build_dataset(kv, _char(kv), "classification", l_max=32).class_names == list("0123456789")
    one = Corpus("one", "labelled", labelled=[("a", "x"), ("b", "x")])
    with pytest.raises(ValueError, match="at least 2 different labels"):
        build_dataset(one, _char(one), "classification", l_max=8)


def test_splits_and_arguments_are_checked():
    corpus = load_corpus("copy")
    tok = _char(corpus)
    ds = build_dataset(corpus, tok, "next_token", l_max=8, val_fraction=0.0)
    assert ds.sizes()["val_tokens"] == 0
    with pytest.raises(ValueError, match="no validation split"):
        ds.batch("val", 2, _gen())
    with pytest.raises(ValueError, match="split = 'test'"):
        ds.batch("test", 2, _gen())
    with pytest.raises(ValueError, match="task seq2seq needs a corpus of pairs"):
        build_dataset(corpus, tok, "seq2seq", l_max=8)
    with pytest.raises(ValueError, match="val_fraction"):
        build_dataset(corpus, tok, "next_token", l_max=8, val_fraction=1.0)


def test_build_dataset_memory_stays_near_the_token_array():
    text = ("the cat sat on the mat\nand the dog ran off\n" * 120_000)  # ~5 MB
    corpus = Corpus("big", "text", text=text)
    tok = train_tokenizer("char", [text[:1000]])
    tracemalloc.start()
    try:
        ds = build_dataset(corpus, tok, "next_token", l_max=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    array_bytes = 2 * len(text)
    assert sum(ds.sizes().values()) == len(text)
    assert peak < 3 * array_bytes + 4_000_000
