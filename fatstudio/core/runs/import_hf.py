"""Import a Hugging Face ``transformers`` checkpoint as an ordinary fatstudio run (``fatstudio import SOURCE``).

SOURCE is a folder that transformers wrote (``config.json``; ``model.safetensors``, sharded or not, or
``pytorch_model.bin`` read with ``weights_only=True``; the tokenizer's files), or a Hub id fetched with
``huggingface_hub`` where it is installed (`fetch_source`; ``HF_HUB_OFFLINE`` is honoured by it). The run it
writes holds ``config.json``, ``meta.json``, ``tokenizer.json`` and ``model.safetensors``, as a trained run does,
so every command and view opens it. Three classes map exactly onto the paper's models (logits equal up to
float rounding):

- ``GPT2LMHeadModel``: Algorithm 10 as written (learned positions, pre-LN, tanh GELU, biases, W_u = W_eᵀ).
- ``LlamaForCausalLM`` (and ``MistralForCausalLM`` without a sliding window): RMSnorm, SwiGLU, rotary positions
  with b = ``rope_theta``, grouped-query heads (H_kv), tied or untied W_u. Llama's ``rotate_half`` pairs
  (x_i, x_{i+d/2}) of a head; fatstudio pairs (x_{2i}, x_{2i+1}): each head's rows of W_q and W_k are put back
  in that order (the inverse of `export_hf`'s reordering), which gives the same q·k.
- ``BertForMaskedLM``: Algorithm 9, post-LN, exact GELU, learned positions; its embedding layer norm
  (``embed_norm``), the MLM head's transform (W_f, GELU, layer_norm) and its bias b_u (``unembed_bias``). The
  token-type embedding of type 0 is added to every row of W_p (fatstudio's inputs are all type 0).

Anything the paper's models cannot compute exactly (rope scaling, a sliding window, biases on only some
projections, another activation, …) is refused with a ValueError naming the config field. The tokenizer is
the checkpoint's own (``tokenizer.json``; GPT-2's ``vocab.json`` + ``merges.txt``, BERT's ``vocab.txt``),
its ids unchanged (`Tokenizer.imported`).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers

from ..config import Activation, DataConfig, ModelConfig, RunConfig, Task, TrainConfig
from ..data.tokenization import Tokenizer
from ..memory import check_fits
from ..model import build_empty
from ..temporary import made_beside
from .folder import Run

GPT2, LLAMA, MISTRAL, BERT = "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM", "BertForMaskedLM"
CLASSES = (GPT2, LLAMA, MISTRAL, BERT)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
GPT2_ACTIVATIONS: dict[str, Activation] = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                    "gelu": "gelu", "relu": "relu"}  # transformers' -> ours (gelu_new is the tanh formula)
PREFIXES = ("transformer.", "model.", "bert.")  # a base model's tensors, saved with or without its prefix
Progress = Callable[[float, str], None]


@dataclass
class HFImport:
    """What `import_hf` wrote: the run folder, the class it came from, N_V and the parameter count."""

    run_dir: Path
    model_class: str
    vocab_size: int
    parameters: int

    def summary(self) -> str:
        return (f"imported a {self.model_class} ({self.parameters:,} parameters, N_V = {self.vocab_size}) "
                f"as the run {self.run_dir}")


# ---- the configuration ---------------------------------------------------------------------------------------
def _refuse(field: str, value: Any, why: str) -> ValueError:
    return ValueError(f"config.json: {field} = {json.dumps(value)} cannot be imported: {why}.")


def model_class(hf: dict) -> str:
    """The class of a transformers ``config.json`` (its ``architectures``; an older file without them, GPT-2's
    and Llama's ``model_type``), if fatstudio imports it."""
    names = hf.get("architectures") or [{"gpt2": GPT2, "llama": LLAMA}.get(hf.get("model_type", ""), "")]
    found = next((n for n in names if n in CLASSES), None)
    if found is None:
        raise _refuse("architectures", names, f"fatstudio imports {', '.join(CLASSES)} (the paper's GPT-2, a "
                      "Llama-style decoder and BERT)")
    return found


def model_config(hf: dict) -> ModelConfig:
    """Our ModelConfig for a transformers ``config.json``; a ValueError naming the first field that the paper's
    models cannot express exactly."""
    cls = model_class(hf)

    def want(field: str, ok: Callable[[Any], bool], why: str, default: Any = None) -> Any:
        value = hf.get(field, default)
        if not ok(value):
            raise _refuse(field, value, why)
        return value

    if cls == GPT2:
        act = want("activation_function", lambda v: v in GPT2_ACTIVATIONS,
                   f"fatstudio's MLP has {', '.join(GPT2_ACTIVATIONS)}", "gelu_new")
        want("scale_attn_weights", lambda v: v is True, "Algorithm 4 divides S by √d_attn", True)
        want("scale_attn_by_inverse_layer_idx", lambda v: not v, "Algorithm 4 has no per-layer scale", False)
        want("add_cross_attention", lambda v: not v, "a decoder-only model has no cross-attention", False)
        d_e, H = hf["n_embd"], hf["n_head"]
        return ModelConfig(arch="gpt", vocab_size=hf["vocab_size"], l_max=hf["n_positions"], L=hf["n_layer"], H=H,
                           d_e=d_e, d_mlp=hf.get("n_inner") or 4 * d_e, norm="layer", norm_position="pre",
                           activation=GPT2_ACTIVATIONS[act], positions="learned", bias=True,
                           tie_embeddings=hf.get("tie_word_embeddings", True),
                           norm_eps=hf.get("layer_norm_epsilon", 1e-5))
    if cls == BERT:
        want("hidden_act", lambda v: v == "gelu", "BERT's MLP and MLM head use the exact GELU in Algorithm 9", "gelu")
        want("position_embedding_type", lambda v: v == "absolute", "fatstudio's BERT has learned absolute positions",
             "absolute")
        want("is_decoder", lambda v: not v, "Algorithm 9 is bidirectional", False)
        want("add_cross_attention", lambda v: not v, "an encoder-only model has no cross-attention", False)
        d_e = hf["hidden_size"]
        return ModelConfig(arch="bert", vocab_size=hf["vocab_size"], l_max=hf["max_position_embeddings"],
                           L=hf["num_hidden_layers"], H=hf["num_attention_heads"], d_e=d_e,
                           d_mlp=hf["intermediate_size"], d_f=d_e, norm="layer", norm_position="post",
                           activation="gelu", positions="learned", bias=True, embed_norm=True, unembed_bias=True,
                           tie_embeddings=hf.get("tie_word_embeddings", True),
                           norm_eps=hf.get("layer_norm_eps", 1e-12))
    # Llama-style
    want("hidden_act", lambda v: v == "silu", "a Llama-style MLP is SwiGLU (Swish = silu gate)", "silu")
    for field in ("rope_scaling", "rope_parameters"):  # transformers 4's, transformers 5's
        want(field, lambda v: not v or v.get("rope_type", v.get("type", "default")) == "default",
             "fatstudio's rotary positions are unscaled", None)
    rope = hf.get("rope_parameters") or {}
    want("sliding_window", lambda v: not v, "attention in fatstudio sees the whole context", None)
    bias = want("attention_bias", lambda v: v == hf.get("mlp_bias", False), "fatstudio puts biases on every projection "
                "or on none; mlp_bias differs", False)
    d_e, H = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or d_e // H
    return ModelConfig(arch="gpt", vocab_size=hf["vocab_size"], l_max=hf["max_position_embeddings"],
                       L=hf["num_hidden_layers"], H=H, d_e=d_e, d_mlp=hf["intermediate_size"], d_attn=head_dim,
                       d_mid=head_dim, norm="rms", norm_position="pre", activation="swiglu", positions="rope",
                       position_base=float(rope.get("rope_theta") or hf.get("rope_theta", 10000.0)),
                       H_kv=hf.get("num_key_value_heads") or H, bias=bool(bias),
                       tie_embeddings=hf.get("tie_word_embeddings", False), norm_eps=hf.get("rms_norm_eps", 1e-6))


# ---- the weights ---------------------------------------------------------------------------------------------
def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint: ``model.safetensors`` (or its shards), else ``pytorch_model.bin`` (or its
    shards) read with ``weights_only=True``; a ValueError when there is none."""
    from safetensors.torch import load_file

    for name, load in (("model.safetensors", lambda p: load_file(str(p))),
                       ("pytorch_model.bin", lambda p: torch.load(p, map_location="cpu", weights_only=True))):
        index = folder / f"{name}.index.json"
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()}) \
            if index.exists() else [folder / name] if (folder / name).exists() else []
        if files:
            out: dict[str, torch.Tensor] = {}
            for f in files:
                try:
                    out.update(load(f))
                except Exception as e:  # safetensors and torch raise their own errors for corrupt files
                    raise ValueError(f"cannot read the weights {f}: {e}") from None
            return out
    raise ValueError(f"{folder} has no model.safetensors or pytorch_model.bin; it is not a transformers model folder.")


def _rope_rows_back(W: torch.Tensor, heads: int) -> torch.Tensor:
    """Each head's rows from rotate_half's order (x_0, x_2, …, x_1, x_3, …) back to (x_0, x_1, …): the inverse
    of `export_hf`'s reordering. W: (heads·d, …) or (heads·d,)."""
    d = W.shape[0] // heads
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return W.reshape(heads, d, *W.shape[1:])[:, torch.argsort(order)].reshape(W.shape)


def state_dict(cls: str, hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors ``hf`` under fatstudio's names and layouts (``cfg`` from `model_config`)."""
    r = cfg.resolved()
    out: dict[str, torch.Tensor] = {}

    def get(name: str) -> torch.Tensor:
        for key in (name, *(name[len(p):] for p in PREFIXES if name.startswith(p))):
            if key in hf:
                return hf[key]
        raise ValueError(f"the checkpoint has no tensor {name!r}; it does not match its config.json.")

    def linear(ours: str, theirs: str, transpose: bool = False, bias: bool = True) -> None:
        out[ours + ".weight"] = get(theirs + ".weight").T if transpose else get(theirs + ".weight")
        if bias:
            out[ours + ".bias"] = get(theirs + ".bias")

    def norm(ours: str, theirs: str, weight: str = "weight", bias: str | None = "bias") -> None:
        out[ours + ".gamma"] = get(f"{theirs}.{weight}")
        if bias:
            out[ours + ".beta"] = get(f"{theirs}.{bias}")

    if cls == GPT2:
        out["embed.W_e.weight"], out["embed.W_p.weight"] = get("transformer.wte.weight"), get("transformer.wpe.weight")
        for l in range(r.L):
            a, p = f"layers.{l}.", f"transformer.h.{l}."
            W, b = get(p + "attn.c_attn.weight").T, get(p + "attn.c_attn.bias")  # Conv1D stores Wᵀ
            for i, n in enumerate("qkv"):
                rows = slice(i * r.d_e, (i + 1) * r.d_e)
                out[a + f"attn.W_{n}.weight"], out[a + f"attn.W_{n}.bias"] = W[rows], b[rows]
            for ours, theirs in (("attn.W_o", "attn.c_proj"), ("mlp.W_mlp1", "mlp.c_fc"), ("mlp.W_mlp2", "mlp.c_proj")):
                linear(a + ours, p + theirs, transpose=True)
            norm(a + "norm_attn", p + "ln_1")
            norm(a + "norm_mlp", p + "ln_2")
        norm("norm_final", "transformer.ln_f")
        head = "lm_head"
    elif cls == BERT:
        e = "bert.embeddings."
        out["embed.W_e.weight"] = get(e + "word_embeddings.weight")
        out["embed.W_p.weight"] = get(e + "position_embeddings.weight") + get(e + "token_type_embeddings.weight")[0]
        norm("embed.norm", e + "LayerNorm")
        for l in range(r.L):
            a, p = f"layers.{l}.", f"bert.encoder.layer.{l}."
            for n in "qkv":
                linear(a + f"attn.W_{n}", p + f"attention.self.{dict(q='query', k='key', v='value')[n]}")
            linear(a + "attn.W_o", p + "attention.output.dense")
            norm(a + "norm_attn", p + "attention.output.LayerNorm")
            linear(a + "mlp.W_mlp1", p + "intermediate.dense")
            linear(a + "mlp.W_mlp2", p + "output.dense")
            norm(a + "norm_mlp", p + "output.LayerNorm")
        linear("W_f", "cls.predictions.transform.dense")
        norm("norm_f", "cls.predictions.transform.LayerNorm")
        out["unembed.b_u"] = get("cls.predictions.bias")
        head = "cls.predictions.decoder"
    else:
        out["embed.W_e.weight"] = get("model.embed_tokens.weight")
        for l in range(r.L):
            a, p = f"layers.{l}.", f"model.layers.{l}."
            for n, heads in (("q", r.H), ("k", r.H_kv)):
                out[a + f"attn.W_{n}.weight"] = _rope_rows_back(get(p + f"self_attn.{n}_proj.weight"), heads)
                if r.bias:
                    out[a + f"attn.W_{n}.bias"] = _rope_rows_back(get(p + f"self_attn.{n}_proj.bias"), heads)
            for ours, theirs in (("attn.W_v", "self_attn.v_proj"), ("attn.W_o", "self_attn.o_proj"),
                                 ("mlp.W_gate", "mlp.gate_proj"), ("mlp.W_mlp1", "mlp.up_proj"),
                                 ("mlp.W_mlp2", "mlp.down_proj")):
                linear(a + ours, p + theirs, bias=r.bias)
            norm(a + "norm_attn", p + "input_layernorm", bias=None)
            norm(a + "norm_mlp", p + "post_attention_layernorm", bias=None)
        norm("norm_final", "model.norm", bias=None)
        head = "lm_head"
    out["unembed.W_u.weight"] = out["embed.W_e.weight"] if r.tie_embeddings else get(head + ".weight")
    return out


# ---- the tokenizer -------------------------------------------------------------------------------------------
def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None


def _backend(folder: Path, cls: str, settings: dict) -> HFTokenizer:
    """The checkpoint's own tokenizer: ``tokenizer.json``; else GPT-2's byte-level BPE from ``vocab.json`` and
    ``merges.txt``, or BERT's WordPiece from ``vocab.txt``."""
    if (folder / "tokenizer.json").exists():
        return HFTokenizer.from_file(str(folder / "tokenizer.json"))
    if (folder / "vocab.json").exists() and (folder / "merges.txt").exists():
        backend = HFTokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(settings.get("add_prefix_space")))
        backend.decoder = decoders.ByteLevel()
    elif cls == BERT and (folder / "vocab.txt").exists():
        backend = HFTokenizer(models.WordPiece.from_file(str(folder / "vocab.txt"), unk_token="[UNK]"))
        backend.normalizer = normalizers.BertNormalizer(lowercase=settings.get("do_lower_case", True))
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece()
    else:
        raise ValueError(f"{folder} has no tokenizer.json (nor GPT-2's vocab.json and merges.txt, nor BERT's "
                         "vocab.txt); fatstudio uses the checkpoint's own tokenizer.")
    specials = [t for t in _special_strings(settings) if backend.token_to_id(t) is not None]
    backend.add_special_tokens(specials)
    return backend


def _special_strings(settings: dict) -> list[str]:
    """The special tokens that tokenizer_config.json / special_tokens_map.json name (strings or AddedToken dicts)."""
    out = []
    for key in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "cls_token", "sep_token"):
        v = settings.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            out.append(v)
    return out


def load_tokenizer(folder: Path, cls: str, hf: dict) -> Tokenizer:
    """The checkpoint's tokenizer with the roles of its specials: bos, eos (BERT: [CLS], [SEP]), pad (else eos)
    and mask (BERT's [MASK]; a causal model has none and eos stands in, never used as one)."""
    settings = {**_json(folder / "special_tokens_map.json"), **_json(folder / "tokenizer_config.json")}
    backend = _backend(folder, cls, settings)

    def named(key: str) -> int | None:
        v = settings.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return backend.token_to_id(v) if isinstance(v, str) else None

    def first(*ids: Any) -> int | None:
        return next((int(i) for i in ids if isinstance(i, int) and not isinstance(i, bool)), None)

    if cls == BERT:
        bos = first(named("cls_token"), backend.token_to_id("[CLS]"))
        eos = first(named("sep_token"), backend.token_to_id("[SEP]"))
        mask = first(named("mask_token"), backend.token_to_id("[MASK]"))
    else:
        bos, eos = first(hf.get("bos_token_id"), named("bos_token")), first(hf.get("eos_token_id"), named("eos_token"))
        bos = first(bos, eos)
        mask = eos
    pad = first(hf.get("pad_token_id"), named("pad_token"), eos)
    roles = {"pad": pad, "mask": mask, "bos": bos, "eos": eos}
    missing = [r for r, i in roles.items() if i is None]
    if missing:
        raise ValueError(f"the tokenizer of {folder} names no {' or '.join(missing)} token (config.json's "
                         f"{missing[0]}_token_id or tokenizer_config.json's {missing[0]}_token); fatstudio needs one.")
    tokenizer = Tokenizer.imported(backend, {r: int(i) for r, i in roles.items() if i is not None})
    if tokenizer.vocab_size != hf["vocab_size"]:
        raise _refuse("vocab_size", hf["vocab_size"], f"the tokenizer has {tokenizer.vocab_size} tokens and "
                      "fatstudio's N_V is both the tokenizer's and the model's")
    return tokenizer


# ---- the source and the run ----------------------------------------------------------------------------------
def fetch_source(source: str, progress: Progress | None = None) -> Path:
    """``source`` as a local folder: itself when it is one, else a Hub id downloaded (or found in the cache
    under ``HF_HUB_OFFLINE=1``) with huggingface_hub's ``snapshot_download``; ValueError in words otherwise."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists() or source.count("/") > 1 or source.startswith((".", "/", "~")):
        raise ValueError(f"{source} is not a folder; give a folder that transformers wrote, or a Hub id.")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"{source} is not a folder, and a Hub id needs huggingface_hub: pip install "
                         "'fatstudio[hub]' (or give a folder that transformers wrote).") from None
    if progress:
        progress(0.0, f"fetching {source} from the Hugging Face Hub (or its cache)")
    patterns = ["*.json", "*.txt", "*.safetensors"]
    try:
        folder = Path(snapshot_download(source, allow_patterns=patterns))
        if not any(folder.glob("*.safetensors")):  # an older checkpoint: PyTorch's pickle (read weights_only)
            folder = Path(snapshot_download(source, allow_patterns=[*patterns, "pytorch_model*.bin"]))
    except Exception as e:  # huggingface_hub's own errors: offline and not cached, unknown id, no network
        raise ValueError(f"cannot fetch {source} from the Hugging Face Hub: {str(e).splitlines()[0]}") from None
    return folder


def import_hf(source: str | Path, out: str | Path, dtype: str = "float32",
              progress: Progress | None = None) -> HFImport:
    """Read the transformers checkpoint ``source`` (a folder or a Hub id) and write it as a new run ``out``
    (absent or empty: never over an earlier run), weights in ``dtype`` (``float32`` or ``bfloat16``: half the
    file). Everything is checked before anything is written, and the folder appears whole or not at all."""
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype} is not allowed; choose one of {', '.join(DTYPES)}.")
    out = Path(out)
    Run.check_new(out)
    say = progress or (lambda fraction, message: None)
    folder = fetch_source(str(source), progress)
    hf = _json(folder / "config.json")
    if not hf:
        raise ValueError(f"{folder} has no config.json; it is not a transformers model folder.")
    cls = model_class(hf)
    cfg = model_config(hf).validate()
    check_fits(cfg, 1, "cpu", training=False, what=f"importing {folder.name} ({cls})")  # before a weight is read
    tokenizer = load_tokenizer(folder, cls, hf)
    say(0.1, f"reading the {cls} weights")
    tensors = read_tensors(folder)
    say(0.5, "mapping them onto the paper's model")
    model = build_empty(cfg, "meta")  # no memory and no random initialisation: every parameter is assigned next
    try:  # a tensor of another shape than config.json says: torch's RuntimeError (a reshape's, or the load's)
        ours = {k: v.to(torch.float32).clone() for k, v in state_dict(cls, tensors, cfg).items()}  # own storage each
        del tensors
        model.load_state_dict(ours, strict=True, assign=True)  # assign: the tensors themselves, no second copy
    except RuntimeError as e:
        first = next((line.strip() for line in str(e).splitlines()[1:] if line.strip()), str(e))
        raise ValueError(f"the weights of {folder} do not match its config.json: {first}") from None
    if cfg.tie_embeddings:  # assign gave W_u a Parameter of its own: tie it again
        model.tie_unembedding()
    model.to(DTYPES[dtype])
    task: Task = "masked_lm" if cfg.arch == "bert" else "next_token"
    # the built-in corpus (python-stdlib) is what ablate and token-loss read of an imported run; --init-from trains on yours
    config = RunConfig(cfg, DataConfig(tokenizer="bpe", task=task), TrainConfig())
    say(0.8, "writing the run")
    out.parent.mkdir(parents=True, exist_ok=True)
    with made_beside(out, folder=True) as tmp:  # the whole run renamed into place; hidden, never listed meanwhile
        run = Run.create(config, tmp.parent, tmp.name)
        run.save_tokenizer(tokenizer)
        run.save_checkpoint(model, None, 0, {})
        run.write_meta(status="finished", imported_from=str(source), hf_class=cls, finished=time.time(), dtype=dtype)
        if out.exists():
            out.rmdir()  # empty (Run.check_new)
        os.replace(tmp, out)
    return HFImport(out, cls, cfg.vocab_size, sum(p.numel() for p in model.parameters()))
