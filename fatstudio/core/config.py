"""Configurations in the paper's notation: the model (Algorithms 8-10 and their variations), the data and
the training. Plain dataclasses with validation that names the field, the value and what is allowed;
`to_dict`/`from_dict` round-trip through JSON; `apply_overrides` implements the CLI's ``--set key=value``.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import tomllib

ARCHS = ("edt", "bert", "gpt", "gopher")
NORMS = ("layer", "rms")
NORM_POSITIONS = ("pre", "post")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu")
POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "relative", "none")

# Each architecture's defaults are the paper's algorithm exactly.
PRESET_KEYS = ("name", "description", "walkthrough", "details", "demo_steps")  # a preset file's keys beside the tables
VASWANI_BASE = 10000.0  # b of Vaswani et al.'s sinusoids, RoPE's and Transformer-XL's
ARCH_DEFAULTS: dict[str, dict[str, str]] = {
    "edt": dict(norm="layer", norm_position="post", activation="relu", positions="learned"),  # Algorithm 8
    "bert": dict(norm="layer", norm_position="post", activation="gelu", positions="learned"),  # Algorithm 9
    "gpt": dict(norm="layer", norm_position="pre", activation="gelu", positions="learned"),  # Algorithm 10
    "gopher": dict(norm="rms", norm_position="pre", activation="gelu", positions="relative"),  # §6 Gopher
}
ARCH_NAMES = {
    "edt": "EDTransformer (encoder-decoder, Algorithm 8)",
    "bert": "ETransformer / BERT (encoder-only, Algorithm 9)",
    "gpt": "DTransformer / GPT-2 (decoder-only, Algorithm 10)",
    "gopher": "Gopher (DTransformer with RMSnorm and relative positions)",
}
CAUSAL_ARCHS = ("gpt", "gopher")


def check_choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name} = {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}.")


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} = {value!r} is not allowed; it must be a whole number greater than 0.")


def _check_number(name: str, value: Any, lo: float, hi: float, hi_open: bool = True, lo_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name} = {value!r} is not allowed; it must be a number in {rng}.")


_C = TypeVar("_C", bound="_Config")


class _Config:
    """Shared dict/JSON plumbing for the config dataclasses."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on each subclass

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[_C], d: dict[str, Any]) -> _C:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}; "
                             f"known fields are {', '.join(sorted(known))}.")
        return cls(**d)

    def replace(self: _C, **changes: Any) -> _C:
        return dataclasses.replace(self, **changes)


@dataclass
class ModelConfig(_Config):
    """The hyperparameters of Algorithms 8-10 in the paper's names, plus their variations (norms, norm
    placement, activations, positions, grouped-query heads, tied embeddings, a class head).

    Fields left as ``None`` take the architecture's paper default (see `resolved`).
    """

    arch: str = "gpt"
    vocab_size: int = 65  # N_V (filled in from the tokenizer when training)
    l_max: int = 64  # ℓ_max, maximum context length
    L: int = 4  # layers of a decoder-only or encoder-only stack
    L_enc: int = 2  # encoder layers (edt)
    L_dec: int = 2  # decoder layers (edt)
    H: int = 4  # attention heads
    d_e: int = 128  # embedding width
    d_mlp: int = 512  # MLP hidden width
    d_attn: int | None = None  # query/key width per head (default d_e // H)
    d_mid: int | None = None  # value width per head (default d_e // H)
    d_f: int | None = None  # BERT's final projection width (default d_e)
    norm: str | None = None  # "layer" | "rms"
    norm_position: str | None = None  # "pre" | "post"
    activation: str | None = None  # "relu" | "gelu" | "gelu_tanh" | "swiglu"
    positions: str | None = None  # "learned" | "sinusoidal" | "rope" | "alibi" | "relative" | "none"
    # b, the base of every sinusoid: the sinusoidal W_p, the rotary angles and Transformer-XL's relative
    # distances. Default (None): ℓ_max for the sinusoidal W_p, as Algorithm 2 writes it; 10000 for RoPE and
    # Transformer-XL, as their papers (and Vaswani et al.'s table) do
    position_base: float | None = None
    tie_embeddings: bool = False  # W_u = W_eᵀ
    bias: bool = True  # b_q, b_k, b_v, b_o, b_mlp (norms keep β)
    H_kv: int | None = None  # key/value heads (default H; 1 = multi-query, else grouped-query)
    dropout: float = 0.0
    norm_eps: float = 1e-5  # ε under the root of layer_norm / RMSnorm
    n_classes: int = 0  # >0 adds a class head to a bert model (paper §3 classification)

    def resolved(self) -> ResolvedModelConfig:
        """This configuration with every ``None`` replaced by the architecture's paper default: what
        `build_model` builds. A ValueError if ``arch`` or ``H`` is not valid (then there is no default)."""
        check_choice("arch", self.arch, ARCHS)
        _check_positive_int("H", self.H)
        d = self.to_dict()
        for k, v in ARCH_DEFAULTS[self.arch].items():
            if d[k] is None:
                d[k] = v
        for k in ("d_attn", "d_mid"):
            if d[k] is None:
                d[k] = max(1, self.d_e // self.H)
        if d["d_f"] is None:
            d["d_f"] = self.d_e
        if d["H_kv"] is None:
            d["H_kv"] = self.H
        if d["position_base"] is None:
            d["position_base"] = float(self.l_max) if d["positions"] == "sinusoidal" else VASWANI_BASE
        return ResolvedModelConfig(**d)

    @property
    def causal(self) -> bool:
        return self.arch in CAUSAL_ARCHS

    def validate(self) -> ModelConfig:
        """Raise ValueError naming the field, the value and what is allowed; return self if valid."""
        check_choice("arch", self.arch, ARCHS)
        for name in ("vocab_size", "l_max", "L", "L_enc", "L_dec", "H", "d_e", "d_mlp"):
            _check_positive_int(name, getattr(self, name))
        for name in ("d_attn", "d_mid", "d_f", "H_kv"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        for name, allowed in (("norm", NORMS), ("norm_position", NORM_POSITIONS),
                              ("activation", ACTIVATIONS), ("positions", POSITIONS)):
            if getattr(self, name) is not None:
                check_choice(name, getattr(self, name), allowed)
        for name in ("tie_embeddings", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} = {getattr(self, name)!r} is not allowed; it must be true or false.")
        _check_number("dropout", self.dropout, 0.0, 1.0)
        if self.position_base is not None:
            _check_number("position_base", self.position_base, 0.0, math.inf, lo_open=True)
        _check_number("norm_eps", self.norm_eps, 0.0, 1.0)
        if not isinstance(self.n_classes, int) or isinstance(self.n_classes, bool) or self.n_classes < 0:
            raise ValueError(f"n_classes = {self.n_classes!r} is not allowed; it must be a whole number ≥ 0 (0 = no class head).")
        r = self.resolved()
        if self.d_e // self.H < 1 and (self.d_attn is None or self.d_mid is None):
            raise ValueError(f"H = {self.H} is not allowed with d_e = {self.d_e}: d_e // H would be 0; "
                             "lower H or set d_attn and d_mid.")
        if self.H % r.H_kv != 0:
            raise ValueError(f"H_kv = {r.H_kv} is not allowed; it must divide H = {self.H} "
                             "(1 = multi-query, H = ordinary multi-head).")
        if r.positions in ("sinusoidal", "relative") and self.d_e % 2:
            raise ValueError(f"d_e = {self.d_e} is not allowed with positions = {r.positions!r}; "
                             "the sinusoidal table needs an even d_e.")
        if r.positions == "rope" and r.d_attn % 2:
            raise ValueError(f"d_attn = {r.d_attn} is not allowed with positions = 'rope'; rotary positions rotate "
                             "pairs, so d_attn (d_e // H by default) must be even.")
        if r.positions == "rope" and self.d_e % 2:
            raise ValueError(f"d_e = {self.d_e} is not allowed with positions = 'rope'; use an even d_e.")
        if self.tie_embeddings and self.arch == "bert" and r.d_f != self.d_e:
            raise ValueError(f"tie_embeddings = true is not allowed with d_f = {r.d_f} ≠ d_e = {self.d_e}: "
                             "W_u = W_eᵀ needs d_f = d_e.")
        if self.n_classes and self.arch != "bert":
            raise ValueError(f"n_classes = {self.n_classes} is not allowed with arch = {self.arch!r}; "
                             "classification uses the encoder-only 'bert' architecture.")
        return self


@dataclass(frozen=True)
class ResolvedModelConfig:
    """A ModelConfig with the paper defaults filled in (`ModelConfig.resolved`): the same fields, none of
    them ``None``, so the model reads ``d_attn``, ``norm``, ``positions``… without checking. Frozen: change the
    ModelConfig and resolve it again. `as_config` gives the values back as a ModelConfig (``model.config``)."""

    arch: str
    vocab_size: int
    l_max: int
    L: int
    L_enc: int
    L_dec: int
    H: int
    d_e: int
    d_mlp: int
    d_attn: int
    d_mid: int
    d_f: int
    norm: str
    norm_position: str
    activation: str
    positions: str
    position_base: float
    tie_embeddings: bool
    bias: bool
    H_kv: int
    dropout: float
    norm_eps: float
    n_classes: int

    @property
    def causal(self) -> bool:
        return self.arch in CAUSAL_ARCHS

    def as_config(self) -> ModelConfig:
        return ModelConfig(**dataclasses.asdict(self))


TENSORBOARD_MISSING = "train.tensorboard needs the tensorboard package: pip install tensorboard"
TASKS = ("next_token", "masked_lm", "seq2seq", "classification")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
TOKENIZERS = ("char", "word", "bpe")
MODADD_P, MODADD_MAX_P = 97, 500  # the "modadd" corpus's p: by default, and at most (250,000 pairs)
TASK_ARCHS = {"next_token": ("gpt", "gopher"), "masked_lm": ("bert",), "seq2seq": ("edt",),
              "classification": ("bert",)}


@dataclass
class DataConfig(_Config):
    """What to train on: a corpus (path or built-in name), its tokenizer, the task and the split."""

    corpus: str = "python-stdlib"
    tokenizer: str = "char"
    vocab_size: int = 1000  # for BPE
    val_fraction: float = 0.1
    task: str = "next_token"
    p_mask: float = 0.15  # masked_lm (Algorithm 12)
    modadd_p: int = MODADD_P  # p of the "modadd" corpus (a + b mod p); its training fraction is 1 - val_fraction

    def validate(self) -> DataConfig:
        if not isinstance(self.corpus, str) or not self.corpus.strip():
            raise ValueError("data.corpus is empty; give a file, a folder or the name of a built-in corpus.")
        check_choice("data.tokenizer", self.tokenizer, TOKENIZERS)
        check_choice("data.task", self.task, TASKS)
        if not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool) or self.vocab_size < 8:
            raise ValueError(f"data.vocab_size = {self.vocab_size!r} is not allowed; it must be a whole number ≥ 8.")
        _check_number("data.val_fraction", self.val_fraction, 0.0, 1.0)
        _check_number("data.p_mask", self.p_mask, 0.0, 1.0, lo_open=True)
        if not isinstance(self.modadd_p, int) or isinstance(self.modadd_p, bool) or not 2 <= self.modadd_p <= MODADD_MAX_P:
            raise ValueError(f"data.modadd_p = {self.modadd_p!r} is not allowed; it must be a whole number "
                             f"in [2, {MODADD_MAX_P}].")
        if self.corpus == "modadd":
            if self.tokenizer != "word" or self.vocab_size < self.modadd_p + 8:
                raise ValueError(f"the modadd corpus needs data.tokenizer = 'word' and data.vocab_size ≥ "
                                 f"{self.modadd_p + 8} (p = {self.modadd_p} numbers, '+', '=', newline, <unk> and "
                                 "the four specials): one token per number.")
            if not 0 < self.val_fraction < 1:
                raise ValueError(f"data.val_fraction = {self.val_fraction!r} is not allowed for modadd; the pairs "
                                 "not trained on are the validation split, so it must be in (0, 1).")
        return self


@dataclass
class TrainConfig(_Config):
    """Minibatch training (paper §8): optimizer, schedule, regularisation, evaluation, device."""

    steps: int = 2000
    batch_size: int = 12
    optimizer: str = "adamw"  # "adamw" | "sgd" (the paper's plain θ ← θ - η∇loss)
    lr: float = 1e-3
    warmup: int = 100
    lr_schedule: str = "cosine"  # "cosine" | "constant"
    min_lr: float = 1e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0 = off
    eval_interval: int = 250
    eval_iters: int = 20
    checkpoint_interval: int = 500
    sample_tokens: int = 200  # length of the sample text written at each evaluation (0 = none)
    seed: int = 1337
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "mps"
    precision: str = "auto"  # "auto" (bf16 on GPUs that do it natively, else fp32) | "fp32" | "bf16" | "fp16"
    compile: bool = False
    tensorboard: bool = False  # also write TensorBoard event files into RUN_DIR/tensorboard/ (see `tensorboard_log`)

    def validate(self) -> TrainConfig:
        for name in ("steps", "batch_size", "eval_interval", "eval_iters", "checkpoint_interval"):
            _check_positive_int(f"train.{name}", getattr(self, name))
        for name in ("warmup", "sample_tokens", "seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"train.{name} = {v!r} is not allowed; it must be a whole number ≥ 0.")
        check_choice("train.optimizer", self.optimizer, ("adamw", "sgd"))
        check_choice("train.lr_schedule", self.lr_schedule, ("cosine", "constant"))
        check_choice("train.device", self.device, ("auto", "cpu", "cuda", "mps"))
        check_choice("train.precision", self.precision, PRECISIONS)
        _check_number("train.lr", self.lr, 0.0, 10.0, lo_open=True)
        _check_number("train.min_lr", self.min_lr, 0.0, 10.0)
        _check_number("train.weight_decay", self.weight_decay, 0.0, 10.0)
        _check_number("train.beta1", self.beta1, 0.0, 1.0)
        _check_number("train.beta2", self.beta2, 0.0, 1.0)
        _check_number("train.grad_clip", self.grad_clip, 0.0, math.inf)
        for name in ("compile", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"train.{name} = {getattr(self, name)!r} is not allowed; it must be true or false.")
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:  # looks, imports nothing
            raise ValueError(TENSORBOARD_MISSING)
        return self


@dataclass
class RunConfig(_Config):
    """The three tables of a config file: [model], [data], [train]."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        unknown = sorted(set(d) - {"model", "data", "train"})
        if unknown:
            raise ValueError(f"unknown config table(s): {', '.join(unknown)}; the tables are [model], [data], [train].")
        return cls(model=ModelConfig.from_dict(d.get("model", {})), data=DataConfig.from_dict(d.get("data", {})),
                   train=TrainConfig.from_dict(d.get("train", {})))

    def validate(self) -> RunConfig:
        self.data.validate()
        self.train.validate()
        self.model.validate()
        allowed = TASK_ARCHS[self.data.task]
        if self.model.arch not in allowed:
            raise ValueError(f"model.arch = {self.model.arch!r} is not allowed for data.task = {self.data.task!r}; "
                             f"use {' or '.join(map(repr, allowed))}.")
        return self

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        """Read a TOML (or JSON) config file; a preset's file too (its `PRESET_KEYS`, ``name``, ``description``
        and the like, are for people, not training, and are left out)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"cannot read config file {path}: {e.strerror or e}.") from None
        try:
            d = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"config file {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {e}.") from None
        for key in PRESET_KEYS:
            d.pop(key, None)
        return cls.from_dict(d)

    def with_overrides(self, assignments: list[str]) -> RunConfig:
        """Apply ``table.key=value`` assignments (the CLI's ``--set``); values parse as TOML, else as text."""
        d = self.to_dict()
        for a in assignments:
            key, sep, raw = a.partition("=")
            table, dot, name = key.strip().partition(".")
            if not sep or not dot or table not in d:
                raise ValueError(f"--set {a!r} is not of the form table.key=value (tables: model, data, train).")
            if name not in d[table]:
                raise ValueError(f"--set {a!r}: {table} has no key {name!r}; known keys: {', '.join(sorted(d[table]))}.")
            d[table][name] = parse_value(raw.strip())
        return RunConfig.from_dict(d)


def parse_value(raw: str) -> Any:
    """A --set value: TOML scalar syntax (3e-4, true, "x") where it parses, else the raw text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
