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
projections, another activation, quantized weights, …) is refused with a ValueError naming the config field or
the tensor; nothing is approximated silently: a weight that is not float16, bfloat16 or float32 (int8 and the
other quantized types; float64, which float32 would round), a tensor of the checkpoint the model has no place for
(a quantization scale, an adapter, another head), an ``lm_head`` that ``tie_word_embeddings`` would replace by
a different embedding are refused by name. The tokenizer is the checkpoint's own (``tokenizer.json``; GPT-2's
``vocab.json`` + ``merges.txt``, BERT's ``vocab.txt``), its ids unchanged (`Tokenizer.imported`).

Every file of the folder is checked before it is read: a regular file (never a FIFO, which would block, nor a
device, which never ends: `files.regular_file`) of a bounded size (`files.JSON_LIMIT`, `files.TOKENIZER_LIMIT`);
the weights are read tensor by tensor, only those the model takes and no more numbers than it has, and a
safetensors file that carries a checksum (`files.verify`: one that ``fatstudio export`` wrote) is checked against
it. A ``pytorch_model.bin`` (PyTorch's pickle format) is never read, since unpickling can run code: it is refused in one
line that says how to write safetensors instead.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers

from ..config import Activation, DataConfig, ModelConfig, RunConfig, Task, TrainConfig
from ..data.tokenization import Tokenizer
from ..files import JSON_LIMIT, TOKENIZER_LIMIT, NotAFile, read_text, regular_file, verify
from ..memory import check_fits
from ..model import build_empty
from ..temporary import made_beside
from .folder import Run
from .weights import WEIGHT_DTYPES

GPT2, LLAMA, MISTRAL, BERT = "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM", "BertForMaskedLM"
CLASSES = (GPT2, LLAMA, MISTRAL, BERT)
DTYPES = {name: getattr(torch, name) for name in WEIGHT_DTYPES}  # --dtype: what the run keeps its weights in
EXACT = (torch.float16, torch.bfloat16, torch.float32)  # the checkpoint's weights that float32 holds exactly
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
def _shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters (a message names it, however large it is)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else f"{text[:50]}… ({len(text):,} characters)"


def _refuse(field: str, value: Any, why: str) -> ValueError:
    return ValueError(f"config.json: {field} = {_shown(value)} cannot be imported: {why}.")


_MISSING = object()


def _field(hf: dict, field: str, ok: Callable[[Any], bool], why: str, default: Any = _MISSING) -> Any:
    """``hf[field]`` (``default`` when absent; no default: a missing field is refused by name) if ``ok`` says it is
    allowed, else a ValueError naming the field, its value and ``why``."""
    if field not in hf and default is _MISSING:
        raise ValueError(f"config.json has no {field}; fatstudio needs it to build the model.")
    value = hf.get(field, default)
    if not ok(value):
        raise _refuse(field, value, why)
    return value


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def _size(hf: dict, field: str, default: Any = _MISSING) -> int:
    """A size of the model (a width, a count of layers or heads): a whole number ≥ 1 (or null, where the default
    is None: "the usual one")."""
    return _field(hf, field, lambda v: _whole(v) or (v is None and default is None), "it must be a whole number ≥ 1",
                  default)


def _eps(hf: dict, field: str, default: float) -> float:
    """A norm's ε: a number in (0, 1)."""
    return float(_field(hf, field, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1,
                        "the norm's ε must be a number between 0 and 1", default))


def _flag(hf: dict, field: str, default: bool) -> bool:
    return _field(hf, field, lambda v: isinstance(v, bool), "it must be true or false", default)


def model_class(hf: dict) -> str:
    """The class of a transformers ``config.json`` (its ``architectures``; an older file without them, GPT-2's
    and Llama's ``model_type``), if fatstudio imports it."""
    names = hf.get("architectures") or [{"gpt2": GPT2, "llama": LLAMA}.get(str(hf.get("model_type", "")), "")]
    if not isinstance(names, list):
        raise _refuse("architectures", names, "it must be a list of class names")
    found = next((n for n in names if isinstance(n, str) and n in CLASSES), None)
    if found is None:
        raise _refuse("architectures", names, f"fatstudio imports {', '.join(CLASSES)} (the paper's GPT-2, a "
                      "Llama-style decoder and BERT)")
    return found


def model_config(hf: dict) -> ModelConfig:
    """Our ModelConfig for a transformers ``config.json``, validated; a ValueError naming the first field that is
    missing, of the wrong type, or that the paper's models cannot express exactly (quantized weights included)."""
    if not isinstance(hf, dict):
        raise ValueError(f"config.json holds {type(hf).__name__} {_shown(hf)}, not the JSON object transformers "
                         "writes; it is not a transformers model folder.")
    cls = model_class(hf)
    if hf.get("quantization_config"):
        q = hf["quantization_config"]
        method = q.get("quant_method") if isinstance(q, dict) else None
        raise _refuse("quantization_config", q, f"the weights are quantized{f' ({method})' if method else ''}: stored "
                      "as integers with scales, which the paper's float weights cannot hold exactly; import the "
                      "checkpoint it was quantized from")
    try:
        return _model_config(cls, hf).validate()
    except ValueError as e:
        if str(e).startswith("config.json"):
            raise
        raise ValueError(f"config.json describes a model fatstudio cannot build: {e}") from None


def _model_config(cls: str, hf: dict) -> ModelConfig:
    if cls == GPT2:
        act = _field(hf, "activation_function", lambda v: isinstance(v, str) and v in GPT2_ACTIVATIONS,
                     f"fatstudio's MLP has {', '.join(GPT2_ACTIVATIONS)}", "gelu_new")
        _field(hf, "scale_attn_weights", lambda v: v is True, "Algorithm 4 divides S by √d_attn", True)
        _field(hf, "scale_attn_by_inverse_layer_idx", lambda v: not v, "Algorithm 4 has no per-layer scale", False)
        _field(hf, "add_cross_attention", lambda v: not v, "a decoder-only model has no cross-attention", False)
        d_e, H = _size(hf, "n_embd"), _size(hf, "n_head")
        return ModelConfig(arch="gpt", vocab_size=_size(hf, "vocab_size"), l_max=_size(hf, "n_positions"),
                           L=_size(hf, "n_layer"), H=H, d_e=d_e, d_mlp=_size(hf, "n_inner", None) or 4 * d_e,
                           norm="layer", norm_position="pre", activation=GPT2_ACTIVATIONS[act], positions="learned",
                           bias=True, tie_embeddings=_flag(hf, "tie_word_embeddings", True),
                           norm_eps=_eps(hf, "layer_norm_epsilon", 1e-5))
    if cls == BERT:
        _field(hf, "hidden_act", lambda v: v == "gelu", "BERT's MLP and MLM head use the exact GELU in Algorithm 9",
               "gelu")
        _field(hf, "position_embedding_type", lambda v: v == "absolute",
               "fatstudio's BERT has learned absolute positions", "absolute")
        _field(hf, "is_decoder", lambda v: not v, "Algorithm 9 is bidirectional", False)
        _field(hf, "add_cross_attention", lambda v: not v, "an encoder-only model has no cross-attention", False)
        _size(hf, "type_vocab_size", 2)  # the token-type-0 embedding is added to W_p
        d_e = _size(hf, "hidden_size")
        return ModelConfig(arch="bert", vocab_size=_size(hf, "vocab_size"), l_max=_size(hf, "max_position_embeddings"),
                           L=_size(hf, "num_hidden_layers"), H=_size(hf, "num_attention_heads"), d_e=d_e,
                           d_mlp=_size(hf, "intermediate_size"), d_f=d_e, norm="layer", norm_position="post",
                           activation="gelu", positions="learned", bias=True, embed_norm=True, unembed_bias=True,
                           tie_embeddings=_flag(hf, "tie_word_embeddings", True),
                           norm_eps=_eps(hf, "layer_norm_eps", 1e-12))
    # Llama-style
    _field(hf, "hidden_act", lambda v: v == "silu", "a Llama-style MLP is SwiGLU (Swish = silu gate)", "silu")
    for field in ("rope_scaling", "rope_parameters"):  # transformers 4's, transformers 5's
        _field(hf, field, lambda v: not v or (isinstance(v, dict) and v.get("rope_type", v.get("type", "default"))
                                              == "default"), "fatstudio's rotary positions are unscaled", None)
    rope = hf.get("rope_parameters") or {}
    theta = rope.get("rope_theta") or hf.get("rope_theta", 10000.0)
    if not (isinstance(theta, (int, float)) and not isinstance(theta, bool) and 0 < theta < math.inf):
        raise _refuse("rope_theta", theta, "the base of the rotary angles must be a number > 0")
    _field(hf, "sliding_window", lambda v: not v, "attention in fatstudio sees the whole context", None)
    bias = _flag(hf, "attention_bias", False)
    if bias != _flag(hf, "mlp_bias", False):
        raise _refuse("attention_bias", bias, "fatstudio puts biases on every projection or on none; mlp_bias differs")
    d_e, H = _size(hf, "hidden_size"), _size(hf, "num_attention_heads")
    head_dim = _size(hf, "head_dim", None) or d_e // H
    return ModelConfig(arch="gpt", vocab_size=_size(hf, "vocab_size"), l_max=_size(hf, "max_position_embeddings"),
                       L=_size(hf, "num_hidden_layers"), H=H, d_e=d_e, d_mlp=_size(hf, "intermediate_size"),
                       d_attn=head_dim, d_mid=head_dim, norm="rms", norm_position="pre", activation="swiglu",
                       positions="rope", position_base=float(theta), H_kv=_size(hf, "num_key_value_heads", None) or H,
                       bias=bias, tie_embeddings=_flag(hf, "tie_word_embeddings", False),
                       norm_eps=_eps(hf, "rms_norm_eps", 1e-6))


# ---- the weights ---------------------------------------------------------------------------------------------
# Tensors a checkpoint may hold that the class does not compute with, dropped without changing a logit: buffers
# transformers may save (GPT-2's causal mask, Llama's rotary frequencies, BERT's position ids) and the pre-training
# heads of a BERT checkpoint that a BertForMaskedLM does not use (the pooler, next-sentence prediction).
UNUSED = re.compile(r"(\.attn\.(masked_)?bias|rotary_emb\.inv_freq|embeddings\.(position|token_type)_ids)$"
                    r"|^(bert\.)?pooler\.|^cls\.seq_relationship\.")
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                       "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}  # safetensors' names -> torch's


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


class Checkpoint(Mapping[str, torch.Tensor]):
    """The tensors of a checkpoint folder by name, each read only when asked for: ``model.safetensors`` (or the
    shards its index names; each file's header read first, its checksum checked where it carries one) or
    ``pytorch_model.bin`` (or its shards; memory-mapped, ``weights_only``). Every file is a regular file of at most
    ``limit`` bytes; a tensor that is not float16, bfloat16 or float32, or that would take the numbers read past
    ``budget``, is refused by name before it is read. ``read``: the names read so far."""

    def __init__(self, folder: Path, budget: int | None = None, limit: int | None = None):
        self.folder, self.budget, self.limit = folder, budget, limit
        self.file: dict[str, Path] = {}  # tensor name -> the file that holds it
        self.dtype: dict[str, str] = {}  # its dtype, in words
        self.shape: dict[str, list[int]] = {}
        self.read: set[str] = set()
        self._get: dict[str, Callable[[], torch.Tensor]] = {}
        for name, opener in (("model.safetensors", self._safetensors), ("pytorch_model.bin", self._pickle)):
            index = folder / f"{name}.index.json"
            files = _shards(index) if index.exists() else [folder / name] if (folder / name).exists() else []
            if files:
                for f in files:
                    opener(f)
                return
        raise ValueError(f"{folder} has no model.safetensors or pytorch_model.bin; it is not a transformers model folder.")

    def _safetensors(self, path: Path) -> None:
        from safetensors import safe_open

        regular_file(path, self.limit)  # never a FIFO (it would block) nor a device
        verify(path)  # a file fatstudio exported carries a checksum; transformers' carry none
        try:
            f = safe_open(str(path), framework="pt")
            for k in f.keys():  # noqa: SIM118 (not a dict)
                piece = f.get_slice(k)
                dtype = str(piece.get_dtype())
                self._put(k, path, _SAFETENSORS_DTYPES.get(dtype, dtype), list(piece.get_shape()),
                          functools.partial(f.get_tensor, k))
        except Exception as e:  # safetensors raises its own error types for bad headers
            raise ValueError(f"cannot read the weights {path}: {_first_line(e)}") from None

    def _pickle(self, path: Path) -> None:
        regular_file(path, self.limit)  # a FIFO or a device is said as such
        raise ValueError(f"{path} is in PyTorch's pickle format, which fatstudio does not read (unpickling can run "
                         "code); save the model with safetensors (transformers: save_pretrained(folder, "
                         "safe_serialization=True)) and import that folder.")

    def _put(self, name: str, path: Path, dtype: str, shape: list[int], get: Callable[[], torch.Tensor]) -> None:
        self.file[name], self.dtype[name], self.shape[name], self._get[name] = path, dtype, shape, get

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.file:
            raise KeyError(name)
        dtype = getattr(torch, self.dtype[name], None)
        if dtype not in EXACT:
            what = "float64, which float32 would round" if dtype is torch.float64 else \
                f"{self.dtype[name]}: not floating point (a quantized weight?), which read as numbers would be garbage"
            raise ValueError(f"{self.file[name]}: {name} is {what}; fatstudio imports float16, bfloat16 and float32 "
                             "weights exactly and nothing else.")
        if name not in self.read and self.budget is not None:
            self.budget -= math.prod(self.shape[name])
            if self.budget < 0:
                raise ValueError(f"{self.file[name]}: {name} ({'×'.join(map(str, self.shape[name]))}) takes the "
                                 "weights past the numbers config.json's model has; they are not its weights.")
        self.read.add(name)
        return self._get[name]()

    def __contains__(self, name: object) -> bool:  # without reading it (Mapping's would)
        return name in self.file

    def __iter__(self) -> Iterator[str]:
        return iter(self.file)

    def __len__(self) -> int:
        return len(self.file)


def _shards(index: Path) -> list[Path]:
    """The files an index (``model.safetensors.index.json``) names: plain names of files in its folder."""
    weight_map = _json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index}: weight_map = {_shown(weight_map)} is not a map of tensor names to file names.")
    files = []
    for name in sorted(set(weight_map.values())):
        if not name or Path(name).name != name or name in (".", "..") or "\\" in name:
            raise ValueError(f"{index}: weight_map names {_shown(name)}, which is not a file of the folder; fatstudio "
                             "reads only the folder's own files.")
        if not (index.parent / name).exists():
            raise ValueError(f"{index}: weight_map names {name}, which the folder does not have.")
        files.append(index.parent / name)
    return files


def read_tensors(folder: Path, budget: int | None = None, limit: int | None = None) -> Checkpoint:
    """Every tensor of the checkpoint in ``folder`` (`Checkpoint`: each read when asked for); a ValueError when
    there is none, or a file of it cannot be read."""
    return Checkpoint(folder, budget, limit)


def _rope_rows_back(W: torch.Tensor, heads: int) -> torch.Tensor:
    """Each head's rows from rotate_half's order (x_0, x_2, …, x_1, x_3, …) back to (x_0, x_1, …): the inverse
    of `export_hf`'s reordering. W: (heads·d, …) or (heads·d,)."""
    d = W.shape[0] // heads
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return W.reshape(heads, d, *W.shape[1:])[:, torch.argsort(order)].reshape(W.shape)


def state_dict(cls: str, hf: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors ``hf`` under fatstudio's names and layouts (``cfg`` from `model_config`). Every
    tensor of ``hf`` is taken, or one that the class does not compute with (`UNUSED`), or, with tied embeddings,
    the head's copy of the embedding; any other is refused by name (dropping it would change the model)."""
    r = cfg.resolved()
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()

    def key_of(name: str) -> str | None:
        return next((k for k in (name, *(name[len(p):] for p in PREFIXES if name.startswith(p))) if k in hf), None)

    def get(name: str) -> torch.Tensor:
        key = key_of(name)
        if key is None:
            raise ValueError(f"the checkpoint has no tensor {name!r}; it does not match its config.json.")
        used.add(key)
        return hf[key]

    def differs(name: str, value: torch.Tensor) -> str | None:
        """The checkpoint's ``name`` (a copy of ``value`` where weights are tied), if it has one that is not."""
        key = key_of(name)
        if key is None:
            return None
        theirs = get(name)
        return key if theirs.shape != value.shape or not torch.equal(theirs.to(torch.float32), value.to(torch.float32)) \
            else None

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
    if r.tie_embeddings:
        out["unembed.W_u.weight"] = out["embed.W_e.weight"]
        other = differs(head + ".weight", out["embed.W_e.weight"])
        if other:
            raise _refuse("tie_word_embeddings", True, f"the checkpoint's {other} differs from its token embedding, "
                          "which W_u = W_eᵀ would use instead")
    else:
        out["unembed.W_u.weight"] = get(head + ".weight")
    if cls == BERT and differs("cls.predictions.decoder.bias", out["unembed.b_u"]):  # transformers ties the two
        raise ValueError("the checkpoint's cls.predictions.decoder.bias differs from cls.predictions.bias (b_u), which "
                         "transformers ties together; it is not one BertForMaskedLM.")
    left = [k for k in hf if k not in used and not UNUSED.search(k)]
    if left:
        where = getattr(hf, "file", {}).get(left[0], "the checkpoint")
        raise ValueError(f"{where} holds {len(left)} tensor(s) that fatstudio's {cls} has no place for ("
                         f"{', '.join(left[:3])}{', …' if len(left) > 3 else ''}): it is not a plain {cls} (quantization "
                         "scales? adapters?), and dropping them would change what it computes.")
    return out


# ---- the tokenizer -------------------------------------------------------------------------------------------
def _json(path: Path) -> dict:
    """The JSON object in ``path`` ({} if there is no such file): a regular file of at most `files.JSON_LIMIT`
    bytes; a ValueError naming it if it is not one, or not JSON, or not an object."""
    if not path.exists():
        return {}
    try:
        d = json.loads(read_text(path, limit=JSON_LIMIT))
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}.") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text (byte {e.start}).") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}).") from None
    except RecursionError:
        raise ValueError(f"{path} is nested too deeply to be a config.") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path} holds {type(d).__name__} {_shown(d)}, not a JSON object.")
    return d


def _tokenizer_file(path: Path) -> str:
    """``path`` as the tokenizers library reads it, once it is found to be a regular file of a tokenizer's size."""
    regular_file(path, TOKENIZER_LIMIT)
    return str(path)


def _backend(folder: Path, cls: str, settings: dict) -> HFTokenizer:
    """The checkpoint's own tokenizer: ``tokenizer.json``; else GPT-2's byte-level BPE from ``vocab.json`` and
    ``merges.txt``, or BERT's WordPiece from ``vocab.txt``. A file that the tokenizers library cannot read is a
    ValueError naming it."""
    def made(files: str, make: Callable[[], HFTokenizer]) -> HFTokenizer:
        try:
            return make()
        except NotAFile:  # a FIFO, a device or a huge file in its place, refused unread: it names the file
            raise
        except Exception as e:  # not UTF-8, not JSON, the tokenizers library's own exception types
            raise ValueError(f"{files} is not a tokenizer the tokenizers library reads: {_first_line(e)}") from None

    if (folder / "tokenizer.json").exists():
        path = folder / "tokenizer.json"
        return made(str(path), lambda: HFTokenizer.from_str(read_text(path, limit=TOKENIZER_LIMIT)))
    if (folder / "vocab.json").exists() and (folder / "merges.txt").exists():
        backend = made(f"{folder}/vocab.json with merges.txt", lambda: HFTokenizer(models.BPE.from_file(
            _tokenizer_file(folder / "vocab.json"), _tokenizer_file(folder / "merges.txt"))))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=settings.get("add_prefix_space") is True)
        backend.decoder = decoders.ByteLevel()
    elif cls == BERT and (folder / "vocab.txt").exists():
        backend = made(str(folder / "vocab.txt"), lambda: HFTokenizer(models.WordPiece.from_file(
            _tokenizer_file(folder / "vocab.txt"), unk_token="[UNK]")))
        backend.normalizer = normalizers.BertNormalizer(lowercase=settings.get("do_lower_case", True) is not False)
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
    and mask (BERT's [MASK]; a causal model has none and eos stands in, never used as one). An id that config.json
    gives outside the tokenizer's vocabulary is refused naming the field."""
    settings = {**_json(folder / "special_tokens_map.json"), **_json(folder / "tokenizer_config.json")}
    backend = _backend(folder, cls, settings)
    size = backend.get_vocab_size(with_added_tokens=True)

    def named(key: str) -> int | None:
        v = settings.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return backend.token_to_id(v) if isinstance(v, str) else None

    def given(field: str) -> int | None:
        """config.json's ``field`` (an id; a list of several, as Llama 3 gives eos, is left to the tokenizer's)."""
        v = hf.get(field)
        if v is None or isinstance(v, list):
            return None
        if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < size):
            raise _refuse(field, v, f"it must be a token id of the tokenizer, 0 to {size - 1}")
        return v

    def first(*ids: int | None) -> int | None:
        return next((int(i) for i in ids if i is not None), None)

    if cls == BERT:
        bos = first(named("cls_token"), backend.token_to_id("[CLS]"))
        eos = first(named("sep_token"), backend.token_to_id("[SEP]"))
        mask = first(named("mask_token"), backend.token_to_id("[MASK]"))
    else:
        bos, eos = first(given("bos_token_id"), named("bos_token")), first(given("eos_token_id"), named("eos_token"))
        bos = first(bos, eos)
        mask = eos
    pad = first(given("pad_token_id"), named("pad_token"), eos)
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
    except Exception as e:  # huggingface_hub's own errors: offline and not cached, unknown id, no network
        raise ValueError(f"cannot fetch {source} from the Hugging Face Hub: {str(e).splitlines()[0]}") from None
    if not any(folder.glob("*.safetensors")):  # an older checkpoint: PyTorch's pickle, which is never read
        raise ValueError(f"{source} has no safetensors weights on the Hub (only PyTorch's pickle format, which "
                         "fatstudio does not read); import a folder of it saved with safetensors.")
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
    if not (folder / "config.json").exists():
        raise ValueError(f"{folder} has no config.json; it is not a transformers model folder.")
    hf = _json(folder / "config.json")
    cls = model_class(hf)
    cfg = model_config(hf)
    check_fits(cfg, 1, "cpu", training=False, what=f"importing {folder.name} ({cls})")  # before a weight is read
    tokenizer = load_tokenizer(folder, cls, hf)
    say(0.1, f"reading the {cls} weights")
    model = build_empty(cfg, "meta")  # no memory and no random initialisation: every parameter is assigned next
    n = model.num_parameters()  # the weights read may hold twice that (the tied head's copy), files 16 bytes each
    tensors = read_tensors(folder, budget=2 * n + (1 << 20), limit=16 * n + (64 << 20))
    say(0.5, "mapping them onto the paper's model")
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
