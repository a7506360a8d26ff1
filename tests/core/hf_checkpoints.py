"""Tiny transformers checkpoints for the import tests, made with transformers itself: random weights from small
configs of each class (a large initializer_range, so attention is far from uniform), saved with save_pretrained,
with a tokenizer trained by ``tokenizers``. No network."""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXT = ("the quick brown fox jumps over the lazy dog. a cat sat on the mat and the dog sat on the log. "
        "def f(x):\n    return x + 1\n") * 20
PROMPT = "the cat sat on the"
GPT2_SPECIALS = ["<|endoftext|>"]
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def byte_level_bpe(specials: list[str], vocab_size: int = 300) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    return tok


def wordpiece(vocab_size: int = 120) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator([TEXT], trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS,
                                                              show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def save(folder: Path, kind: str, init: float = 0.5, **overrides) -> tuple[Path, object]:
    """A ``kind`` checkpoint ("gpt2", "llama", "bert") in ``folder``; returns it and the transformers model."""
    import transformers as tf

    torch.manual_seed(0)
    if kind == "gpt2":
        tok = byte_level_bpe(GPT2_SPECIALS)
        eot = tok.token_to_id("<|endoftext|>")
        cfg = tf.GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=48, n_embd=32, n_layer=2, n_head=4,
                            initializer_range=init, bos_token_id=eot, eos_token_id=eot, **overrides)
        model = tf.GPT2LMHeadModel(cfg)
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    elif kind == "llama":
        tok = byte_level_bpe(LLAMA_SPECIALS)
        cfg = tf.LlamaConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=48, hidden_size=32,
                             intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             initializer_range=init, bos_token_id=1, eos_token_id=2, pad_token_id=None,
                             rope_theta=500.0, **overrides)
        model = tf.LlamaForCausalLM(cfg)
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    else:
        tok = wordpiece()
        cfg = tf.BertConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=48, hidden_size=32,
                            intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, type_vocab_size=2,
                            initializer_range=init, pad_token_id=0, **overrides)
        model = tf.BertForMaskedLM(cfg)
        fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]",
                                          mask_token="[MASK]", pad_token="[PAD]", unk_token="[UNK]")
    with torch.no_grad():  # biases and norms away from 0 and 1 too, so a misplaced one shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder, model
