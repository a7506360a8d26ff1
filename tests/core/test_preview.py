"""The corpus preview the Corpus panel draws: token boundaries, statistics, loading and retokenizing."""
import subprocess
import sys

import pytest

from fatstudio.core.data import preview
from fatstudio.core.data.corpora import Corpus
from fatstudio.core.data.preview import LINE_BREAK, Piece, stat_rows, token_pieces
from fatstudio.core.data.tokenization import train_tokenizer


def _tokens(pieces):
    return [p for p in pieces if p.is_token]


def test_text_is_cut_into_numbered_tokens_that_join_to_the_text():
    corpus = Corpus("t", "text", text="hello world\n\tindented\n" * 100)
    tok = train_tokenizer("word", corpus.texts(), 100)
    pieces, n_tok, n_chr = token_pieces(tok, corpus, n_chars=44)  # two lines of each kind, whole words
    assert n_chr == 44 and n_tok == len(pieces) and all(p.is_token for p in pieces)
    assert [p.token for p in pieces] == list(range(n_tok))  # neighbours always differ
    assert "".join(p.text for p in pieces) == corpus.text[:44]
    assert " world" in [p.text for p in pieces]  # a word token keeps its leading space


def test_pairs_show_an_arrow_between_source_and_target_one_example_a_line():
    corpus = Corpus("p", "pairs", pairs=[("abc", "cba"), ("de", "ed"), ("fgh", "hgf")])
    tok = train_tokenizer("char", corpus.texts())
    pieces, n_tok, n_chr = token_pieces(tok, corpus, n_chars=8)  # stops after the example that reaches 8
    assert n_chr == 10 and n_tok == 10
    assert pieces[:8] == [Piece("a", 0), Piece("b", 1), Piece("c", 2), Piece("  →  "), Piece("c", 3),
                          Piece("b", 4), Piece("a", 5), LINE_BREAK]
    assert [p.token for p in _tokens(pieces)] == list(range(10))  # numbered across examples
    assert pieces[-1] == LINE_BREAK and sum(p == LINE_BREAK for p in pieces) == 2


def test_labelled_examples_show_their_label_as_no_token():
    corpus = Corpus("l", "labelled", labelled=[("abc", "sorted"), ("cab", "unsorted")])
    tok = train_tokenizer("char", corpus.texts())
    pieces, n_tok, n_chr = token_pieces(tok, corpus)
    assert (n_tok, n_chr) == (6, 6)
    assert Piece("   [sorted]") in pieces and Piece("   [unsorted]") in pieces
    assert "".join(p.text for p in _tokens(pieces)) == "abccab"


def test_stat_rows_read_as_a_person_reads_them():
    stats = {"name": "x", "notes": ["n"], "kind": "labelled", "chars": 1234567, "mean_len": 12.345678,
             "symbols": list("abcdefghijklmn"), "classes": {f"c{i}": i for i in range(10)}}
    rows = dict(stat_rows(stats))
    assert "name" not in rows and "notes" not in rows
    assert rows["chars"] == "1,234,567" and rows["mean len"] == "12.35" and rows["kind"] == "labelled"
    assert rows["symbols"] == "a, b, c, d, e, f, g, h, i, j, k, l …"
    assert rows["classes"] == ", ".join(f"c{i}: {i}" for i in range(8))


def test_load_previews_what_training_will_use_and_retokenize_keeps_the_corpus():
    seen = []
    info = preview.load("copy", "next_token", "char", 1000, seed=7, progress=lambda f, m="": seen.append(f))
    assert info.seeded and info.seed == 7 and info.kind == "text" and info.name == "copy"
    assert "7" in " ".join(info.notes) and info.preview and info.stats["chars"] > 0
    assert "copy" in info.builtins and "next_token" in info.builtin_tasks["copy"]
    assert info.vocab_size == info.prepared.tokenizer.vocab_size
    assert info.prepared.serves("copy", "next_token", "char", 1000, 7)
    assert info.n_chars_preview == preview.TOKEN_PREVIEW_CHARS and info.chars_per_token == pytest.approx(1.0)
    assert "".join(p.text for p in info.tokens) == info.corpus.text[:preview.TOKEN_PREVIEW_CHARS]
    assert seen[0] == 0.0 and max(seen) <= 1.0 and seen == sorted(seen)

    words = preview.retokenize(info, "word", 50)
    assert words.corpus is info.corpus and words.tokenizer == "word" and words.vocab_size <= 50
    assert words.prepared.serves("copy", "next_token", "word", 50, 7)
    assert words.n_tokens_preview < info.n_tokens_preview and words.chars_per_token > 1
    assert info.tokenizer == "char" and info.prepared.tokenizer_kind == "char"  # the first preview is kept


def test_load_explains_an_unusable_corpus(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        preview.load(str(empty), "next_token", "char", 1000, seed=0)


def test_importing_the_preview_imports_no_torch():
    code = "import sys, fatstudio.core.data.preview; print([m for m in ('torch', 'tokenizers') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
