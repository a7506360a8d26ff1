"""Tiny transformers checkpoints for the import tests, made with transformers itself: random weights from small
configs of each class (a large initializer_range, so attention is far from uniform), saved with save_pretrained,
with a tokenizer trained by ``tokenizers``. No network.

Run as a script in a child process (transformers imported into the suite's process left a later Qt test's
tokenizer threads hanging, see test_export_hf): ``make ROOT`` writes each checkpoint of `KINDS` to ROOT/KIND with
``expected.json``, what transformers computes on it; ``logits JSON`` prints the logits of causal LMs ({folder: ids})."""
from __future__ import annotations

import json
import sys
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


KINDS = {"gpt2": ("gpt2", {}), "llama": ("llama", {}),  # Llama: grouped-query (H_kv = 2), untied W_u
         "llama-tied-bias": ("llama", dict(tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                           num_key_value_heads=1)),
         "bert": ("bert", {})}
MASKED = "the cat [MASK] on the mat"
NEW_TOKENS = 12


def run_of_random_weights(cfg, tok, root: Path, name: str, scale: float, optimizer: bool = False):
    """A run folder ``root/name`` of ``cfg`` and ``tok`` whose checkpoint (step 1) holds random weights far from the
    initialisation (N(1 or 0, scale²): biases ≠ 0, γ ≠ 1), so a transposed, swapped or missing tensor shows in the
    logits; ``optimizer``: with an SGD state beside them."""
    from fatstudio import build_model
    from fatstudio.core.runs.folder import Run

    run = Run.create(cfg.validate(), root=root, name=name)
    run.save_tokenizer(tok)
    torch.manual_seed(0)
    net = build_model(cfg.model)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * scale + (1 if p.dim() == 1 else 0))
    run.save_checkpoint(net, torch.optim.SGD(net.parameters(), lr=0.1) if optimizer else None, 1, {})
    return run


def exported(root: Path) -> Path:
    """A Llama-style transformers folder (``root/hf``) that fatstudio's export wrote from a run with random weights
    (``root/source-run``): no transformers needed."""
    from fatstudio import ModelConfig
    from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.runs.export_hf import export_hf

    text = "the quick brown fox jumps over the lazy dog.\nthe dog sleeps; the fox runs!\n" * 20
    tok = train_tokenizer("bpe", [text], vocab_size=300)
    cfg = RunConfig(ModelConfig(l_max=32, L=2, H=4, H_kv=2, d_e=32, d_mlp=48, vocab_size=tok.vocab_size, norm="rms",
                                activation="swiglu", positions="rope", bias=False),
                    DataConfig(corpus="corpus.txt", tokenizer="bpe"), TrainConfig(device="cpu"))
    run = run_of_random_weights(cfg, tok, root, "source-run", scale=0.5)
    export_hf(run.path, root / "hf")
    return root / "hf"


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
                             intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                             initializer_range=init, bos_token_id=1, eos_token_id=2, pad_token_id=None,
                             rope_theta=500.0, **{"num_key_value_heads": 2, **overrides})
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
    model.config._attn_implementation = "eager"  # output_attentions: the weights themselves
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder, model


def expected(folder: Path, kind: str, model, tok) -> dict:
    """What transformers computes: the prompt's ids, the logits and every attention map on [bos] + ids (BERT:
    [CLS] + ids + [SEP]), greedy generation (causal) or the top token at a mask (BERT)."""
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    x = tok(PROMPT)["input_ids"] if kind == "bert" else [model.config.bos_token_id, *ids]
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([x]), output_attentions=True)
        got = dict(ids=ids, x=x, logits=out.logits[0].tolist(), attentions=[a[0].tolist() for a in out.attentions])
        if kind == "bert":
            m = tok(MASKED)["input_ids"]
            logits = model(torch.tensor([m])).logits[0, m.index(tok.mask_token_id)]
            got["fill_mask"] = tok.convert_ids_to_tokens(int(logits.argmax()))
        else:
            gen = model.generate(torch.tensor([x]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 pad_token_id=model.config.eos_token_id)
            got["greedy"] = gen[0, len(x):].tolist()
    return got


def logits(jobs: dict[str, list[int]]) -> dict[str, list]:
    """{folder: ids} -> {folder: the causal LM's logits on ids, its tokenizer's size and ids of PROMPT}."""
    import transformers as tf

    out = {}
    for folder, ids in jobs.items():
        model = tf.AutoModelForCausalLM.from_pretrained(folder).eval()
        tok = tf.AutoTokenizer.from_pretrained(folder)
        with torch.no_grad():
            out[folder] = dict(logits=model(torch.tensor([ids])).logits[0].tolist(), n_tokens=len(tok),
                               ids=tok(PROMPT, add_special_tokens=False)["input_ids"])
    return out


if __name__ == "__main__":
    if sys.argv[1] == "make":
        import transformers as tf

        root = Path(sys.argv[2])
        for name, (kind, overrides) in KINDS.items():
            folder, model = save(root / name, kind, **overrides)
            want = expected(folder, kind, model, tf.AutoTokenizer.from_pretrained(folder))
            (folder / "expected.json").write_text(json.dumps(want))
    else:
        print(json.dumps(logits(json.loads(sys.argv[2]))))
