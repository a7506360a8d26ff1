"""The tokenizer lab: the split, each tokenizer's numbers on the validation split checked against counts made
independently, the sentence, sampling of large corpora, and the runs on a corpus in bits per character."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from training_helpers import tiny_config

from fatstudio.core import training
from fatstudio.core.data.corpora import Corpus, load_corpus
from fatstudio.core.runs import tokenizer_lab
from fatstudio.core.runs.folder import META, Run
from fatstudio.core.runs.tokenizer_lab import (
    bits_per_char,
    compare_tokenizers,
    finished_runs_on,
    parse_specs,
    run_chars_per_token,
    split_corpus,
    tokenize_sentence,
)


def text_corpus(text: str) -> Corpus:
    return Corpus("t", "text", text=text)


# ---- the split ---------------------------------------------------------------------------------------------
def test_a_text_is_split_at_a_line_start_and_nothing_is_lost():
    text = "".join(f"line {i} of the text\n" for i in range(100))
    (train,), (val,) = split_corpus(text_corpus(text), 0.1, "tail")
    assert train + val == text
    assert train.endswith("\n") and val.startswith("line ")
    assert abs(len(val) - 0.1 * len(text)) < len("line 99 of the text\n")


def test_examples_are_split_by_example_and_too_little_text_is_refused():
    corpus = load_corpus("reverse", "seq2seq")
    train, val = split_corpus(corpus, 0.25)
    n_val = round(len(corpus.examples) * 0.25)
    assert val == [s for pair in corpus.examples[-n_val:] for s in pair] and len(train) == 2 * (len(corpus.examples) - n_val)
    with pytest.raises(ValueError, match="validation split"):
        split_corpus(corpus, 0.0)
    with pytest.raises(ValueError, match="too small"):
        split_corpus(text_corpus("one line only\n"), 0.1)


def test_parse_specs():
    assert parse_specs(" char, word 1024,bpe 512 , bpe 512") == [("char", None), ("word", 1024), ("bpe", 512)]
    for bad, match in (("chars", "tokenizers are"), ("char 12", "just 'char'"), ("bpe", "vocabulary size"),
                       ("word many", "vocabulary size"), (" , ", "no tokenizer")):
        with pytest.raises(ValueError, match=match):
            parse_specs(bad)


# ---- each tokenizer's numbers -------------------------------------------------------------------------------
def test_char_on_its_own_alphabet_is_one_token_a_character_with_nothing_unknown():
    text = "".join(f"{'abcdefgh'[i % 8] * (i % 5 + 1)} fed cab\n" for i in range(200))
    lab = compare_tokenizers(text_corpus(text), [("char", None)], 0.1)
    (row,) = lab.rows
    _, (val,) = split_corpus(text_corpus(text), 0.1)
    assert row.chars == len(val) == lab.val_chars and row.tokens == len(val) and row.tokens_per_char == 1.0
    assert row.unknown == 0 and row.unknown_rate == 0.0
    assert row.vocab_size == len(set(text[:len(text) - len(val)])) + 4  # the characters and the four specials
    lines = [s for s in val.split("\n") if s]
    assert row.lengths.tolist() == [len(s) for s in lines]  # a character a token
    assert sum(row.histogram) == len(lines) and len(lab.bin_edges) == len(row.histogram) + 1


def test_char_counts_a_character_absent_from_training_as_unknown():
    text = "abc ab\n" * 90 + "abz zb\n" * 10  # 'z' only in the last lines: the tail's validation split
    lab = compare_tokenizers(text_corpus(text), [("char", None)], 0.1, split="tail")
    (row,) = lab.rows
    _, (val,) = split_corpus(text_corpus(text), 0.1, "tail")
    assert val == "abz zb\n" * 10
    assert row.tokens == len(val) and row.unknown == val.count("z") == 20
    assert row.unknown_rate == pytest.approx(20 / 70)
    assert row.lengths.tolist() == [6] * 10
    assert [t for t, unknown in row.sentence if unknown] == ["z", "z"] and "".join(t for t, _ in row.sentence) == "abz zb"


def test_word_counts_match_a_count_by_hand():
    text = "the cat sat\n" * 9 + "the cat ran.\n"
    lab = compare_tokenizers(text_corpus(text), [("word", 100)], 0.1, split="tail")
    (row,) = lab.rows
    # the validation split is "the cat ran.\n": "the", " cat", " ran" (never seen), "." (never seen), "\n"
    assert (row.chars, row.tokens, row.unknown) == (13, 5, 2)
    assert row.tokens_per_char == pytest.approx(5 / 13) and row.unknown_rate == pytest.approx(2 / 5)
    assert row.vocab_size == 5 + 4  # "the", " cat", " sat", "\n" and "<unk>", then the four specials
    assert row.lengths.tolist() == [4]  # the line without its line break
    assert lab.sentence == "the cat ran." and row.sentence == [("the", False), (" cat", False), (" ran", True),
                                                                (".", True)]


def test_bpe_matches_the_tokenizer_encoding_the_whole_split_at_once():
    corpus = load_corpus("python-stdlib")
    text = corpus.text[:200_000]
    lab = compare_tokenizers(text_corpus(text), [("bpe", 300), ("bpe", 1000)], 0.2, sentence="def f(x): return x",
                             split="tail")
    _, (val,) = split_corpus(text_corpus(text), 0.2, "tail")
    small, large = lab.rows
    for row in lab.rows:
        assert row.tokens == len(row.tokenizer.encode(val)) and row.unknown == 0 and row.vocab_size <= row.vocab_cap
        lines = [s for s in val.split("\n") if s.strip()]
        assert row.lengths.tolist() == [len(row.tokenizer.encode(s)) for s in lines]
        assert "".join(t for t, _ in row.sentence) == "def f(x): return x"
        assert row.train_seconds > 0
    assert 1.0 > small.tokens_per_char > large.tokens_per_char  # more merges, fewer tokens
    assert np.median(large.lengths) < np.median(small.lengths)
    assert len(large.sentence) < len(small.sentence)


def test_the_histogram_shares_its_bins_and_keeps_long_lines_in_the_last():
    text = "".join("ab " * (1 + i % 30) + "\n" for i in range(300)) + "x" * 5000 + "\n" + "ab\n" * 40
    lab = compare_tokenizers(text_corpus(text), [("char", None), ("bpe", 300)], 0.3, split="tail")
    for row in lab.rows:
        assert len(row.histogram) == len(lab.bin_edges) - 1 and sum(row.histogram) == len(row.lengths)
        assert row.histogram[-1] >= 1  # the 5,000-character line, beyond the 99th percentile
    widths = np.diff(lab.bin_edges)
    assert lab.bin_edges[0] == 0 and (widths == widths[0]).all()


def test_examples_are_measured_one_text_each():
    corpus = load_corpus("add", "classification")
    lab = compare_tokenizers(corpus, [("char", None)], 0.1)
    n_val = round(len(corpus.examples) * 0.1)
    (row,) = lab.rows
    assert lab.unit == "example text"
    assert row.lengths.tolist() == [len(t) for t, _ in corpus.examples[-n_val:]]


def test_a_large_corpus_is_sampled(monkeypatch):
    monkeypatch.setattr(tokenizer_lab, "TRAIN_CHARS", 40_000)
    monkeypatch.setattr(tokenizer_lab, "VAL_CHARS", 20_000)
    text = load_corpus("python-stdlib").text[:400_000]
    lab = compare_tokenizers(text_corpus(text), [("char", None)], 0.25)
    (row,) = lab.rows
    assert 40_000 <= lab.train_chars < 70_000 and 20_000 <= row.chars < 40_000  # evenly spaced ~8 k pieces
    assert lab.val_chars > 90_000 and row.tokens_per_char == pytest.approx(1.0, abs=0.01)


def test_a_text_without_words_or_lines_says_so_instead_of_giving_numbers():
    corpus = load_corpus("repeat")  # letters only: no space, punctuation or line break
    lab = compare_tokenizers(corpus, [("char", None), ("word", 1024), ("bpe", 300)], 0.1)
    char, word, bpe = lab.rows
    assert word.note.startswith("no words") and word.chars_per_token > tokenizer_lab.WORD_CHARS
    assert not char.note and not bpe.note and char.tokens_per_char == 1.0
    assert [n.split(":")[0] for n in lab.notes] == ["No words", "No lines"]
    assert all(not len(r.lengths) and r.quantiles == {} and not any(r.histogram) for r in lab.rows)
    assert 20 <= len(lab.sentence) == len(char.sentence) <= tokenizer_lab.SENTENCE_CHARS  # still one to cut


def test_a_text_with_words_and_lines_has_no_notes():
    text = "".join(f"x{i} = compute(y{i}, z)\n" for i in range(300))  # long identifiers, still words
    lab = compare_tokenizers(text_corpus(text), [("word", 1024)], 0.1)
    assert lab.notes == [] and lab.rows[0].note == "" and len(lab.rows[0].lengths) > 20


@pytest.mark.parametrize("lengths", [[8_000] * 40, [30_000, 500, 500, 30_000] * 10, [1, 20_000] * 25])
def test_sampling_keeps_about_the_cap_spread_over_pieces_of_any_length(lengths):
    texts = ["x" * n for n in lengths]
    kept = tokenizer_lab._sample(texts, 100_000)
    assert 100_000 <= sum(map(len, kept)) < 100_000 + max(lengths)
    where = [i for i, t in enumerate(texts) if any(t is k for k in kept)]
    assert where[0] == 0 and where[-1] >= len(texts) * 3 // 4  # from the start to near the end


def test_tokenize_sentence_marks_unknown_words_and_shows_their_text():
    from fatstudio.core.data.tokenization import train_tokenizer

    tok = train_tokenizer("word", ["the cat sat on the mat\n"], vocab_size=100)
    assert tokenize_sentence(tok, "the dog sat") == [("the", False), (" dog", True), (" sat", False)]
    bpe = train_tokenizer("bpe", ["the cat sat on the mat\n"] * 20, vocab_size=280)
    pieces = tokenize_sentence(bpe, "the caté")
    assert not any(u for _, u in pieces) and "".join(t for t, _ in pieces[:-2]) == "the cat"  # é: two bytes


# ---- runs on the corpus -------------------------------------------------------------------------------------
def test_bits_per_char():
    assert bits_per_char(math.log(2), 1.0) == pytest.approx(1.0)
    assert bits_per_char(2 * math.log(2), 4.0) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs on one corpus (char and BPE), one on another corpus, one failed."""
    root = tmp_path_factory.mktemp("runs")
    corpus = root.parent / "corpus.txt"
    corpus.write_text("".join(f"the quick brown fox {i} jumps over the lazy dog.\n" for i in range(400)))
    other = root.parent / "other.txt"
    other.write_text("a different corpus.\n" * 200)

    def train(path, tokenizer="char", vocab=1000, steps=10):
        cfg = tiny_config(path, steps=steps)
        cfg.data.tokenizer, cfg.data.vocab_size = tokenizer, vocab
        events = list(training.train(cfg, runs_root=root))
        return Run.open(next(e for e in events if e.kind == "started").run_dir)

    made = {"char": train(corpus), "bpe": train(corpus, "bpe", 300), "other": train(other), "failed": train(corpus)}
    made["failed"].write_meta(status="failed")
    return root, corpus, made


def test_finished_runs_on_a_corpus_in_bits_per_char(runs):
    root, corpus, made = runs
    scores = finished_runs_on(str(corpus), root, task="next_token")
    by_name = {s.name: s for s in scores}
    assert set(by_name) == {made["char"].name, made["bpe"].name}  # not the other corpus, not the failed run
    for key in ("char", "bpe"):
        run, s = made[key], by_name[made[key].name]
        best = min(r["val_loss"] for r in run.metrics() if "val_loss" in r)
        cpt = run.meta["chars_per_token"]["val"]
        assert s.val_loss == pytest.approx(best) and s.chars_per_token == cpt
        assert s.bits_per_char == pytest.approx(best / math.log(2) / cpt)
        assert s.tokenizer == key and s.vocab_size == run.config.model.vocab_size
    assert by_name[made["char"].name].chars_per_token == 1.0 and by_name[made["bpe"].name].chars_per_token > 2
    assert [s.bits_per_char for s in scores] == sorted(s.bits_per_char for s in scores)
    assert finished_runs_on(str(corpus), root, task="masked_lm") == []
    assert [s.name for s in finished_runs_on(str(corpus.parent / "." / corpus.name), root)] == [s.name for s in scores]


def test_a_run_without_chars_per_token_in_its_meta_gets_them_from_its_tokenizer(runs):
    root, corpus, made = runs
    run = made["bpe"]
    recorded = run.meta["chars_per_token"]["val"]
    meta = {k: v for k, v in run.meta.items() if k != "chars_per_token"}  # a run from before it was recorded
    (run.path / META).write_text(json.dumps(meta))
    try:
        old = Run.open(run.path)
        assert run_chars_per_token(old) == pytest.approx(recorded, rel=1e-12)
        (score,) = [s for s in finished_runs_on(str(corpus), root) if s.name == run.name]
        assert score.chars_per_token == pytest.approx(recorded, rel=1e-12)
    finally:
        run.write_meta()  # puts the full meta back


def test_a_meta_json_that_says_nonsense_gives_no_numbers(tmp_path):
    """chars_per_token or best_val_loss of the wrong type in meta.json: None, never a traceback."""
    from fatstudio.core.runs.tokenizer_lab import _best_val_loss

    class FakeRun:
        meta = {"chars_per_token": [1, 2], "best_val_loss": "low"}

        @staticmethod
        def metrics():
            return [{"step": 1, "val_loss": "x"}, {"step": 2, "val_loss": 2.5}]

    assert run_chars_per_token(FakeRun()) is None
    assert _best_val_loss(FakeRun()) == 2.5
    FakeRun.meta = {"chars_per_token": {"val": -1.0}}
    assert run_chars_per_token(FakeRun()) is None
