"""The text side of prompting, decided once in the core: the mode per run, what the model reads for a text
in each mode (framing, mask markers, lengths), <unk> words, token labels."""
from types import SimpleNamespace

import pytest

from fatstudio import ModelConfig, RunConfig
from fatstudio.core.config import DataConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.prompting import (
    MASK_MARKER,
    MODES,
    EncodedPrompt,
    MaskSpan,
    display_token,
    encode_masked,
    encode_prompt,
    framed,
    prompt_mode,
    unknown_words,
)

TOK = train_tokenizer("char", ["the quick brown fox jumps over the lazy dog."])
BOS, EOS, MASK = TOK.bos_id, TOK.eos_id, TOK.mask_id


def loaded(arch, task, n_classes=0):
    cfg = ModelConfig(arch=arch, vocab_size=TOK.vocab_size, n_classes=n_classes)
    return SimpleNamespace(model=SimpleNamespace(config=cfg), config=RunConfig(model=cfg, data=DataConfig(task=task)))


def test_one_mode_per_run():
    assert prompt_mode(None) is None
    assert prompt_mode(loaded("gpt", "next_token")) == "generate"
    assert prompt_mode(loaded("gopher", "next_token")) == "generate"
    assert prompt_mode(loaded("edt", "seq2seq")) == "translate"
    assert prompt_mode(loaded("bert", "masked_lm")) == "fill_mask"
    assert prompt_mode(loaded("bert", "classification", n_classes=3)) == "classify"
    assert prompt_mode(loaded("bert", "masked_lm", n_classes=3)) == "fill_mask"  # the run trained masked LM
    assert set(MODES) == {"generate", "fill_mask", "translate", "classify"}


def test_generate_reads_the_text_and_may_be_longer_than_l_max():
    p = encode_prompt(TOK, "the fox", "generate", l_max=4)
    assert p.ids == tuple(TOK.encode("the fox")) and p.context_ids is None and p.masks == ()
    assert p.cropped == 3  # the model sees the last 4 tokens
    assert encode_prompt(TOK, "", "generate", l_max=4).ids == (BOS,)  # an empty prompt starts from bos
    assert encode_prompt(TOK, "ab", "generate", l_max=4, add_bos=True).ids == (BOS, *TOK.encode("ab"))


def test_encoder_inputs_are_framed_and_checked():
    assert framed(TOK, "dog") == [BOS, *TOK.encode("dog"), EOS]
    p = encode_prompt(TOK, "dog", "classify", l_max=5)
    assert p.ids == tuple(framed(TOK, "dog")) and p.cropped == 0
    t = encode_prompt(TOK, "dog", "translate", l_max=5)
    assert t.ids == (BOS,) and t.context_ids == tuple(framed(TOK, "dog"))  # the decoder starts from bos
    with pytest.raises(ValueError, match="text with bos and eos is 6 tokens long.*l_max = 5"):
        encode_prompt(TOK, "dogs", "classify", l_max=5)
    with pytest.raises(ValueError, match="source with bos and eos is 6 tokens long"):
        encode_prompt(TOK, "dogs", "translate", l_max=5)
    with pytest.raises(ValueError, match="no prompt mode"):
        encode_prompt(TOK, "dog", None, l_max=5)
    with pytest.raises(ValueError, match="unknown|know"):
        encode_prompt(TOK, "dög", "generate", l_max=5)


def test_mask_markers_are_the_users_and_the_tokenizers():
    text = f"the {MASK_MARKER}ox <mask>"
    p = encode_prompt(TOK, text, "fill_mask", l_max=32)
    assert p.ids == (BOS, *TOK.encode("the "), MASK, *TOK.encode("ox "), MASK, EOS)
    assert p.masks == (MaskSpan(5, 4, 10), MaskSpan(9, 13, 19))
    assert [text[m.start:m.end] for m in p.masks] == [MASK_MARKER, "<mask>"]
    assert encode_masked(TOK, text) == (list(p.ids), [5, 9], [4, 13])
    assert encode_prompt(TOK, "no marker", "fill_mask", l_max=32).masks == ()  # fill_mask itself refuses it
    with pytest.raises(ValueError, match="l_max = 8"):
        encode_prompt(TOK, "the [MASK] fox", "fill_mask", l_max=8)


def test_unknown_words_of_a_word_tokenizer():
    word = train_tokenizer("word", ["the cat sat on the mat"], vocab_size=50)
    p = encode_prompt(word, "the dog [MASK] on the rug", "fill_mask", l_max=32)
    assert unknown_words(word, p) == [" dog", " ", " rug"]  # the pieces around the marker, not the marker
    assert p.ids.count(word.unk_id) == 3
    assert unknown_words(TOK, encode_prompt(TOK, "the fox", "generate", l_max=32)) == []
    assert isinstance(p, EncodedPrompt)


def test_display_token():
    assert display_token(" a\n\t") == "␣a↵⇥"
    assert display_token("") == "∅"
    assert display_token("\x00") == "\\x00"
    assert display_token("abcdefghijklmnopq", 5) == "abcd…"
