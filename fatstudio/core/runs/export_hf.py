"""Export a decoder-only run to a Hugging Face ``transformers`` folder (``fatstudio export RUN --format hf``).

The folder holds ``config.json``, ``model.safetensors`` (transformers' parameter names, float32),
``tokenizer.json`` (the run's own, unchanged) and ``tokenizer_config.json`` / ``special_tokens_map.json``,
so ``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)`` load it. Writing
it needs no ``transformers``: only torch, safetensors and JSON.

Two standard classes express fatstudio's decoder-only models exactly (logits equal up to float rounding):

- ``GPT2LMHeadModel``: learned positions (sinusoidal or none too: their fixed table, or zeros, become GPT-2's
  ``wpe``), layer norm before each sublayer, an MLP with ReLU, exact GELU (``"gelu"``) or tanh GELU
  (``"gelu_pytorch_tanh"``), heads d_e/H wide. Runs without biases get zero biases (GPT-2's Conv1D always
  has them); grouped-query key/value heads are repeated to one per query head (H_kv < H computes the same).
- ``LlamaForCausalLM``: rotary positions (``position_base`` is ``rope_theta``), RMSnorm before each sublayer,
  SwiGLU, grouped-query heads (``num_key_value_heads``), biases or none (``attention_bias``, ``mlp_bias``).
  fatstudio rotates the interleaved pairs (x_{2i}, x_{2i+1}) of each head; Llama's ``rotate_half`` rotates
  (x_i, x_{i+d/2}). The rows of each head of W_q and W_k (and their biases) are reordered, evens then odds,
  which gives the same q·k.

Anything else (ALiBi or relative positions, post-LN, an encoder, RMSnorm with learned positions, …) is
refused with a ValueError naming the field, its value and what each class needs.

Both classes know positions up to ℓ_max only (``n_positions``, ``max_position_embeddings``), and
transformers' ``generate`` does not slide a window as fatstudio's does: `generate_limit` says so, in the
export's summary.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import CAUSAL_ARCHS, ResolvedModelConfig
from ..files import seal, unsealed
from ..temporary import made_beside

if TYPE_CHECKING:
    import torch

    from ..data.tokenization import Tokenizer

GPT2, LLAMA = "GPT2LMHeadModel", "LlamaForCausalLM"
GPT2_POSITIONS = ("learned", "sinusoidal", "none")
GPT2_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh"}  # ours -> transformers'
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass
class HFExport:
    """What `export_hf` wrote: the folder, the transformers class it loads as, the files."""

    out_dir: Path
    model_class: str
    files: tuple[str, ...] = FILES
    note: str = ""  # what a user of the folder must know: how ℓ_max limits transformers' generate

    def summary(self) -> str:
        wrote = f"wrote a {self.model_class} (transformers) to {self.out_dir}: {', '.join(self.files)}"
        return f"{wrote}\nnote: {self.note}" if self.note else wrote


def generate_limit(cfg: ResolvedModelConfig) -> str:
    """How ℓ_max limits transformers' ``generate`` on the exported model (`hf_class` of ``cfg``), in a
    sentence: GPT-2's position table ends at n_positions = ℓ_max (a longer call fails); Llama's rotary
    positions go on, past any position the model was trained on."""
    n = cfg.l_max
    if hf_class(cfg) == GPT2:
        return (f"transformers' generate stops at n_positions = {n} tokens, prompt included: ℓ_max of this run "
                f"(GPT-2's learned positions end there and a longer call fails with an IndexError, so keep the "
                f"prompt's tokens + max_new_tokens ≤ {n}; fatstudio generate slides its window instead).")
    return (f"max_position_embeddings = {n} is ℓ_max of this run: transformers' generate goes past {n} tokens, "
            "prompt included, but the model never saw a position beyond ℓ_max, so what it writes there degrades "
            "(fatstudio generate slides its window of ℓ_max tokens instead).")


def hf_class(cfg: ResolvedModelConfig) -> str:
    """The transformers class that expresses ``cfg`` exactly (`GPT2` or `LLAMA`); a ValueError naming each
    field that neither does."""
    if cfg.arch not in CAUSAL_ARCHS:
        raise ValueError(f"model.arch = {cfg.arch!r} has no Hugging Face causal-LM export; only decoder-only runs "
                         f"({', '.join(map(repr, CAUSAL_ARCHS))}) export, as GPT-2 or Llama.")
    if cfg.positions in GPT2_POSITIONS:
        target, name, hint = GPT2, "GPT-2", "; Llama (RMSnorm, SwiGLU) needs positions = 'rope'"
        wants = {"norm": "'layer'", "activation": "'relu', 'gelu' or 'gelu_tanh'"}
        ok = {"norm": cfg.norm == "layer", "activation": cfg.activation in GPT2_ACTIVATIONS}
    elif cfg.positions == "rope":
        target, name, hint = LLAMA, "Llama", "; GPT-2 (layer norm, GELU or ReLU) needs positions = 'learned'"
        wants = {"norm": "'rms'", "activation": "'swiglu'"}
        ok = {"norm": cfg.norm == "rms", "activation": cfg.activation == "swiglu"}
    else:
        raise ValueError(f"model.positions = {cfg.positions!r} has no Hugging Face class; GPT-2 needs 'learned' "
                         "(or 'sinusoidal', 'none'), Llama needs 'rope'.")
    problems = [f"model.{field} = {getattr(cfg, field)!r} does not fit {name} (positions = {cfg.positions!r}), "
                f"which needs {field} = {wants[field]}{hint}" for field in ("norm", "activation") if not ok[field]]
    if cfg.norm_position != "pre":
        problems.append(f"model.norm_position = {cfg.norm_position!r} has no Hugging Face class; GPT-2 and Llama "
                        "put the norm before each sublayer ('pre')")
    if cfg.d_e % cfg.H:
        problems.append(f"model.H = {cfg.H} does not fit {name}, which needs d_e = {cfg.d_e} to be a multiple of H")
    elif target == GPT2:
        problems += [f"model.{field} = {getattr(cfg, field)} does not fit GPT-2, whose heads are d_e/H = "
                     f"{cfg.d_e // cfg.H} wide" for field in ("d_attn", "d_mid") if getattr(cfg, field) != cfg.d_e // cfg.H]
    if target == LLAMA and cfg.d_attn != cfg.d_mid:
        problems.append(f"model.d_mid = {cfg.d_mid} does not fit Llama, whose values are as wide as its queries "
                        f"(d_attn = {cfg.d_attn})")
    if problems:
        raise ValueError("; ".join(problems) + ".")
    return target


def hf_config(cfg: ResolvedModelConfig, tokenizer: Tokenizer) -> dict:
    """The ``config.json`` of the transformers class `hf_class` picks for ``cfg``."""
    target = hf_class(cfg)
    common = dict(architectures=[target], vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_embeddings,
                  bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                  initializer_range=0.02, use_cache=True, dtype="float32")
    if target == GPT2:
        return dict(model_type="gpt2", n_positions=cfg.l_max, n_embd=cfg.d_e, n_layer=cfg.L, n_head=cfg.H,
                    n_inner=cfg.d_mlp, activation_function=GPT2_ACTIVATIONS[cfg.activation],
                    layer_norm_epsilon=cfg.norm_eps, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
                    attn_pdrop=cfg.dropout, scale_attn_weights=True, **common)
    return dict(model_type="llama", hidden_size=cfg.d_e, intermediate_size=cfg.d_mlp, num_hidden_layers=cfg.L,
                num_attention_heads=cfg.H, num_key_value_heads=cfg.H_kv, head_dim=cfg.d_attn, hidden_act="silu",
                max_position_embeddings=cfg.l_max, rms_norm_eps=cfg.norm_eps, attention_bias=cfg.bias,
                mlp_bias=cfg.bias, attention_dropout=cfg.dropout, rope_theta=cfg.position_base,  # transformers 4
                rope_parameters=dict(rope_type="default", rope_theta=cfg.position_base), **common)  # transformers 5


def _rope_rows(W: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder each head's rows (x_0, x_1, …, x_{d-1}) to (x_0, x_2, …, x_1, x_3, …): our interleaved rotary
    pairs become rotate_half's (i, i + d/2). W: (heads·d, …) or (heads·d,)."""
    import torch

    d = W.shape[0] // heads
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return W.reshape(heads, d, *W.shape[1:])[:, order].reshape(W.shape)


def hf_state_dict(ours: Mapping[str, torch.Tensor], cfg: ResolvedModelConfig) -> dict[str, torch.Tensor]:
    """A decoder-only model's ``state_dict()`` (fatstudio's names) under the names and layouts of the
    transformers class `hf_class` picks for ``cfg``, float32."""
    import torch

    from ..model.positions import sinusoids

    target = hf_class(cfg)
    out: dict[str, torch.Tensor] = {}

    def put(name: str, t: torch.Tensor) -> None:
        out[name] = t.detach().to(torch.float32).contiguous().clone()

    def bias(name: str, rows: int) -> torch.Tensor:
        """Our bias ``name``, or zeros where the run has none."""
        return ours[name] if name in ours else torch.zeros(rows)

    with torch.no_grad():
        if target == GPT2:
            group = cfg.H // cfg.H_kv

            def kv(t: torch.Tensor) -> torch.Tensor:  # one copy of key/value head ⌊h·H_kv/H⌋ per query head h
                return t.reshape(cfg.H_kv, -1, *t.shape[1:]).repeat_interleave(group, 0).reshape(-1, *t.shape[1:])

            put("transformer.wte.weight", ours["embed.W_e.weight"])
            if cfg.positions == "learned":
                W_p = ours["embed.W_p.weight"]
            elif cfg.positions == "sinusoidal":  # the model's fixed table (paper positions t = 1..ℓ_max)
                W_p = sinusoids(torch.arange(1, cfg.l_max + 1), cfg.d_e, cfg.position_base)
            else:
                W_p = torch.zeros(cfg.l_max, cfg.d_e)
            put("transformer.wpe.weight", W_p)
            for l in range(cfg.L):
                a, m, p = f"layers.{l}.attn.", f"layers.{l}.mlp.", f"transformer.h.{l}."
                W = torch.cat([ours[a + "W_q.weight"], kv(ours[a + "W_k.weight"]), kv(ours[a + "W_v.weight"])])
                b = torch.cat([bias(a + "W_q.bias", cfg.d_e), kv(bias(a + "W_k.bias", cfg.H_kv * cfg.d_attn)),
                               kv(bias(a + "W_v.bias", cfg.H_kv * cfg.d_mid))])
                put(p + "attn.c_attn.weight", W.T)  # Conv1D stores (in, out): the transpose of nn.Linear's
                put(p + "attn.c_attn.bias", b)
                for hf, lin, rows in (("attn.c_proj", a + "W_o", cfg.d_e), ("mlp.c_fc", m + "W_mlp1", cfg.d_mlp),
                                      ("mlp.c_proj", m + "W_mlp2", cfg.d_e)):
                    put(p + hf + ".weight", ours[lin + ".weight"].T)
                    put(p + hf + ".bias", bias(lin + ".bias", rows))
                for hf, norm in (("ln_1", "norm_attn"), ("ln_2", "norm_mlp")):
                    put(p + hf + ".weight", ours[f"layers.{l}.{norm}.gamma"])
                    put(p + hf + ".bias", ours[f"layers.{l}.{norm}.beta"])
            put("transformer.ln_f.weight", ours["norm_final.gamma"])
            put("transformer.ln_f.bias", ours["norm_final.beta"])
        else:
            put("model.embed_tokens.weight", ours["embed.W_e.weight"])
            for l in range(cfg.L):
                a, m, p = f"layers.{l}.attn.", f"layers.{l}.mlp.", f"model.layers.{l}."
                for hf, lin, heads in (("q_proj", a + "W_q", cfg.H), ("k_proj", a + "W_k", cfg.H_kv)):
                    put(p + f"self_attn.{hf}.weight", _rope_rows(ours[lin + ".weight"], heads))
                    if cfg.bias:
                        put(p + f"self_attn.{hf}.bias", _rope_rows(ours[lin + ".bias"], heads))
                for hf, lin in (("self_attn.v_proj", a + "W_v"), ("self_attn.o_proj", a + "W_o"),
                                ("mlp.gate_proj", m + "W_gate"), ("mlp.up_proj", m + "W_mlp1"),
                                ("mlp.down_proj", m + "W_mlp2")):
                    put(p + hf + ".weight", ours[lin + ".weight"])
                    if cfg.bias:
                        put(p + hf + ".bias", ours[lin + ".bias"])
                put(p + "input_layernorm.weight", ours[f"layers.{l}.norm_attn.gamma"])
                put(p + "post_attention_layernorm.weight", ours[f"layers.{l}.norm_mlp.gamma"])
            put("model.norm.weight", ours["norm_final.gamma"])
        if not cfg.tie_embeddings:  # tied: transformers ties lm_head to the token embedding itself
            put("lm_head.weight", ours["unembed.W_u.weight"])
    return out


def _tokenizer_files(tokenizer: Tokenizer, l_max: int) -> dict[str, str]:
    """tokenizer.json (the run's own), tokenizer_config.json and special_tokens_map.json for
    ``PreTrainedTokenizerFast``: the run's specials (an imported run's own: GPT-2's <|endoftext|>, …), no bos/eos
    added, so it gives the run's ids."""
    from ..data.tokenization import UNK

    token = tokenizer.backend.id_to_token
    specials = dict(bos_token=token(tokenizer.bos_id), eos_token=token(tokenizer.eos_id),
                    pad_token=token(tokenizer.pad_id), mask_token=token(tokenizer.mask_id))
    if tokenizer.unk_id is not None:
        specials["unk_token"] = UNK
    config = dict(tokenizer_class="PreTrainedTokenizerFast", model_max_length=l_max, clean_up_tokenization_spaces=False,
                  add_bos_token=False, add_eos_token=False, **specials)
    return {"tokenizer.json": tokenizer.to_json(), "tokenizer_config.json": json.dumps(config, indent=2),
            "special_tokens_map.json": json.dumps(specials, indent=2)}


def export_hf(run_dir: str | Path, out_dir: str | Path) -> HFExport:
    """Write the run's last checkpoint and tokenizer to ``out_dir`` (a new or empty folder) as a transformers
    model folder. A ValueError, before anything is written, for a run no standard class expresses (naming
    the field), a run without weights, or an ``out_dir`` that is a file or a folder with files in it."""
    from safetensors.torch import save_file

    from .folder import Run
    from .targets import check_output

    run = Run.open(run_dir)
    cfg = run.config.model.validate().resolved()
    target = hf_class(cfg)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} already exists and is not an empty folder; export to a new or empty folder.")
    check_output(out, "the export folder", parents=True)  # never inside a run folder (the run's own, or another's)
    loaded = run.load_model("cpu")
    files = _tokenizer_files(loaded.tokenizer, cfg.l_max)
    files["config.json"] = json.dumps(hf_config(cfg, loaded.tokenizer), indent=2)
    tensors = hf_state_dict(loaded.model.state_dict(), cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    with made_beside(out, folder=True) as tmp:  # the whole folder renamed into place
        save_file(tensors, str(tmp / "model.safetensors"), metadata=unsealed({"format": "pt"}))
        seal(tmp / "model.safetensors")  # its checksum in its header, which import checks
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    return HFExport(out, target, note=generate_limit(cfg))
