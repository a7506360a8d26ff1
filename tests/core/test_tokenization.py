"""Tokenizers: round trips, special ids, storage, unknown symbols, chunked encoding and its memory."""
import random
import re
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tokenizers import pre_tokenizers

from fatstudio.core.data import tokenization
from fatstudio.core.data.tokenization import SPECIALS, Tokenizer, encode_corpus, split_text, train_tokenizer

CORPUS = """The quick brown fox jumps over the lazy dog.
def f(x):
    return x * 2  # twice

Ünïcödé: café, naïve, 日本語, emoji 🙂, tab\there.
""" * 20
UNICODE = "Hello, wörld! 日本語 🙂\n\tindented  two  spaces \u00a0nbsp\r\n end"


@pytest.fixture(scope="module")
def toks():
    return {kind: train_tokenizer(kind, [CORPUS], vocab_size=300) for kind in ("char", "word", "bpe")}


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_specials_are_the_last_four_ids(toks, kind):
    tok = toks[kind]
    n = tok.vocab_size
    assert (tok.pad_id, tok.mask_id, tok.bos_id, tok.eos_id) == (n - 4, n - 3, n - 2, n - 1)
    assert tok.token_strings([n - 4, n - 3, n - 2, n - 1]) == list(SPECIALS)
    assert n == tok.backend.get_vocab_size(with_added_tokens=True)


def test_char_vocabulary_is_the_sorted_characters_and_round_trips_exactly(toks):
    tok = toks["char"]
    chars = sorted(set(CORPUS))
    assert tok.vocab_size == len(chars) + 4
    assert tok.token_strings(range(len(chars))) == chars
    assert tok.decode(tok.encode(CORPUS)) == CORPUS
    assert len(tok.encode(CORPUS)) == len(CORPUS)


def test_char_unknown_symbols_raise_a_clear_error(toks):
    with pytest.raises(ValueError, match=r"2 character\(s\).*'€', '\\x00'"):
        toks["char"].encode("fox €\x00 dog €")
    assert toks["char"].unknown_symbols("fox € 🙂") == ["€"]


def test_char_training_is_deterministic_and_ignores_vocab_size():
    a = train_tokenizer("char", ["cab", "bad\n"], vocab_size=8)
    b = train_tokenizer("char", iter(["bad\n", "cab"]), vocab_size=5000)
    assert a.to_json() == b.to_json()
    assert a.token_strings(range(a.vocab_size - 4)) == ["\n", "a", "b", "c", "d"]


@pytest.mark.parametrize("text", [CORPUS, UNICODE, "", " leading space", "\x00\x01 bytes ÿ"])
def test_bpe_round_trips_any_text_exactly(toks, text):
    tok = toks["bpe"]
    assert tok.decode(tok.encode(text)) == text
    assert tok.unknown_symbols(text) == []


def test_bpe_respects_vocab_size_and_rejects_too_small():
    tok = train_tokenizer("bpe", [CORPUS], vocab_size=280)
    assert tok.vocab_size <= 280
    with pytest.raises(ValueError, match="at least 260"):
        train_tokenizer("bpe", [CORPUS], vocab_size=100)


def test_bpe_token_strings_show_real_text():
    tok = train_tokenizer("bpe", ["the cat and the hat and the bat " * 50], vocab_size=300)
    ids = tok.encode(" the 日")
    assert tok.token_strings(ids)[0] == " the"
    # A byte that is only part of a character shows as an escape, never as a mojibake letter.
    assert tok.token_strings(tok.encode("日")) == ["\\xe6", "\\x97", "\\xa5"]
    byte_alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    assert byte_alphabet == set(tokenization._BYTE_OF_CHAR)
    assert sorted(tokenization._BYTE_OF_CHAR.values()) == list(range(256))


def test_bpe_token_labels_show_a_characters_pieces_as_that_character_and_which_of_its_bytes():
    tok = train_tokenizer("bpe", ["the cat and the hat and the bat " * 50], vocab_size=300)
    assert tok.token_labels(tok.encode("日")) == ["日‹1/3›", "日‹2/3›", "日‹3/3›"]
    ru = train_tokenizer("bpe", ["Привет мир, как дела? Всё хорошо. 中文字符 " * 3], vocab_size=300)
    ids = ru.encode("Привет мир 中文")
    labels = ru.token_labels(ids)
    assert ru.token_strings(ids[:2]) == ["\\xd0", "\\x9fр"]
    assert labels[:2] == ["П‹1/2›", "П‹2/2›р"]  # the second piece: the rest of П and a whole р
    assert labels[2:7] == ["иве", "т", " ми", "р", " 中"]  # whole characters as themselves
    assert labels[-2:] == ["文‹1–2/3›", "文‹3/3›"]  # a piece holding two of three bytes
    assert ru.token_labels(ids[1:])[0] == "\ufffdр"  # a character cut off at the start: as decoding shows it
    assert ru.token_labels([*ids[:1], ru.eos_id]) == ["\ufffd", "<eos>"]
    for kind, t in (("char", train_tokenizer("char", [CORPUS])), ("word", train_tokenizer("word", [CORPUS]))):
        some = t.encode("The quick fox")
        assert t.token_labels(some) == t.token_strings(some), kind  # their tokens are whole characters


def test_readable_pieces_read_a_run_of_bytes_across_the_pieces():
    from fatstudio.core.data.tokenization import readable_pieces

    e = "é".encode()
    assert readable_pieces([b"caf" + e[:1], e[1:] + b"!"]) == ["café‹1/2›", "é‹2/2›!"]
    assert readable_pieces([e[:1], "<mask>", e[1:]]) == ["\ufffd", "<mask>", "\ufffd"]  # a special parts the bytes
    assert readable_pieces([b"\xff", b"ok"]) == ["\ufffd", "ok"]  # no character begins with 0xff
    emoji = "🙂".encode()
    assert readable_pieces([emoji[:1], emoji[1:3], emoji[3:]]) == ["🙂‹1/4›", "🙂‹2–3/4›", "🙂‹4/4›"]


def test_word_round_trips_known_text_and_maps_unknown_pieces_to_unk(toks):
    tok = toks["word"]
    text = "The quick brown fox.\ndef f(x):\n    return x * 2"
    assert tok.unknown_symbols(text) == []
    assert tok.decode(tok.encode(text)) == text
    assert tok.unk_id == tok.vocab_size - 5
    ids = tok.encode("The zebra jumps")
    assert ids.count(tok.unk_id) == 1
    assert tok.decode(ids) == "The<unk> jumps"
    assert tok.unknown_symbols("The zebra jumps, zebra!") == [" zebra", "!"]


def test_word_vocabulary_keeps_the_most_frequent_pieces():
    text = "a a a a b b b c c d\n"
    tok = train_tokenizer("word", [text], vocab_size=5 + 3)
    assert tok.vocab_size == 8
    assert tok.token_strings(range(3)) == [" a", " b", " c"]  # the three most frequent pieces
    assert tok.decode(tok.encode(" a d")) == " a<unk>"


def test_decode_skips_pad_bos_eos_and_shows_mask(toks):
    for tok in toks.values():
        ids = tok.encode("The <mask> dog")
        assert tok.mask_id in ids
        wrapped = [tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]
        assert tok.decode(wrapped) == "The <mask> dog"
        with pytest.raises(ValueError, match="outside the vocabulary"):
            tok.decode([tok.vocab_size])


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_save_load_round_trip(toks, tmp_path, kind):
    tok = toks[kind]
    tok.save(tmp_path / "tokenizer.json")
    back = Tokenizer.load(tmp_path / "tokenizer.json")
    assert back.kind == kind and back.vocab_size == tok.vocab_size
    assert back.to_json() == tok.to_json()
    text = "The lazy dog.\n"
    assert back.encode(text) == tok.encode(text)
    assert back.token_strings(back.encode(text)) == tok.token_strings(tok.encode(text))


def test_loading_rejects_what_is_not_ours(tmp_path):
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        Tokenizer.from_json("{not json")
    bare = train_tokenizer("char", ["abc"]).backend
    bare.add_tokens(["extra"])  # the specials are no longer last
    with pytest.raises(ValueError, match="last four ids"):
        Tokenizer.from_json(bare.to_str())
    with pytest.raises(ValueError, match="cannot read tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")


def test_train_rejects_unknown_kind_and_empty_corpus():
    with pytest.raises(ValueError, match="'char', 'word', 'bpe'"):
        train_tokenizer("sentencepiece", ["abc"])
    with pytest.raises(ValueError, match="empty corpus"):
        train_tokenizer("char", [""])


_HYPO_TOKS = [train_tokenizer(kind, ["ab 1.é's\n\t aab ab. 11 's", "a b"], vocab_size=270)
              for kind in ("char", "word", "bpe")]


_WORD = st.lists(st.sampled_from([*"ab1.é", "'s", "<mask>"]), min_size=1, max_size=2).map("".join)
_SEP = st.sampled_from([" "] * 4 + ["\n"] * 3 + ["\t", "  ", "\n\n  ", " \n"])


@given(st.lists(st.tuples(_WORD, _SEP).map("".join), max_size=40).map("".join))
@settings(max_examples=100, deadline=None)
def test_split_text_pieces_join_back_and_chunked_encode_equals_one_shot(text):
    pieces = list(split_text(text, 16))
    assert "".join(pieces) == text and all(pieces) and all(len(p) <= 32 for p in pieces)
    cuts = np.cumsum([len(p) for p in pieces[:-1]])
    # Cuts fall where no token can span; only a whitespace-free stretch of `size` characters is cut anywhere.
    assume(all(re.match(r"\S\n\S", text[c - 2:c + 1]) or re.match(r"\S \S", text[c - 1:c + 2]) for c in cuts))
    with mock.patch.object(tokenization, "CHUNK_CHARS", 16), mock.patch.object(tokenization, "BATCH_PIECES", 3):
        for tok in _HYPO_TOKS:
            assert encode_corpus(tok, text).tolist() == tok.backend.encode(text).ids


def test_encode_corpus_equals_one_shot_on_many_pieces_and_reports_progress(toks):
    rng = random.Random(0)
    lines = CORPUS.splitlines()
    text = "\n".join(rng.choice(lines) for _ in range(4000))  # ~100 kB: ~100 pieces in ~13 batches
    events = []
    with mock.patch.object(tokenization, "CHUNK_CHARS", 1024), mock.patch.object(tokenization, "BATCH_PIECES", 8):
        for tok in toks.values():
            data = encode_corpus(tok, text, progress=lambda f, m: events.append(f))
            assert data.dtype == np.uint16
            assert data.tolist() == tok.backend.encode(text).ids
    assert events[-1] == 1.0 and all(0 <= f <= 1 for f in events)
    parts = encode_corpus(toks["char"], iter(["ab", "c\n"]))  # an iterable: texts follow one another
    assert toks["char"].decode(parts) == "abc\n"


def test_encode_corpus_uses_int32_for_a_vocabulary_of_65536_or_more():
    chars = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 70_000) if not 0xD800 <= c < 0xE000)
    tok = train_tokenizer("char", [chars])
    assert tok.vocab_size >= 65536
    data = encode_corpus(tok, chars[-5:])
    assert data.dtype == np.int32 and data.max() >= 65532


def test_encode_corpus_memory_stays_near_the_array_size():
    """A ~20 MB text: the peak Python/numpy memory while encoding is a few times the token array."""
    rng = random.Random(1)
    words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(1, 8))) for _ in range(300)]
    sample = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(5000))
    text = (sample + "\n") * (20_000_000 // len(sample))
    tok = train_tokenizer("char", [sample])
    events = []
    tracemalloc.start()
    try:
        data = encode_corpus(tok, text, progress=lambda f, m: events.append(f))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) == len(text)
    assert len(events) >= 10 and events == sorted(events) and events[-1] == 1.0
    assert peak < 4 * data.nbytes + 8_000_000
