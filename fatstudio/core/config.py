"""Configurations in the paper's notation: the model (Algorithms 8-10 and their variations), the data and
the training. Plain dataclasses with validation that names the field, the value and what is allowed;
`to_dict`/`from_dict` round-trip through JSON; `apply_overrides` implements the CLI's ``--set key=value``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeGuard, TypeVar, get_args

import tomllib

from .files import NotAFile, read_bytes, regular_file

# The closed choices of a config, each a Literal type (what mypy checks) and its values (what `check_choice`
# allows, in this order); a config read from a file holds plain strings, checked by `validate`.
Arch = Literal["edt", "bert", "gpt", "gopher"]
NormKind = Literal["layer", "rms"]
NormPosition = Literal["pre", "post"]
Activation = Literal["relu", "gelu", "gelu_tanh", "swiglu"]
Positions = Literal["learned", "sinusoidal", "rope", "alibi", "relative", "none"]
ARCHS: tuple[Arch, ...] = get_args(Arch)
NORMS: tuple[NormKind, ...] = get_args(NormKind)
NORM_POSITIONS: tuple[NormPosition, ...] = get_args(NormPosition)
ACTIVATIONS: tuple[Activation, ...] = get_args(Activation)
POSITIONS: tuple[Positions, ...] = get_args(Positions)

# Each architecture's defaults are the paper's algorithm exactly.
# a preset file's keys beside the model, data and train tables ([expected] a table too: `presets`)
PRESET_KEYS = ("name", "description", "walkthrough", "details", "demo_steps", "expected")
VASWANI_BASE = 10000.0  # b of Vaswani et al.'s sinusoids, RoPE's and Transformer-XL's
ARCH_DEFAULTS: dict[Arch, dict[str, str]] = {
    "edt": dict(norm="layer", norm_position="post", activation="relu", positions="learned"),  # Algorithm 8
    "bert": dict(norm="layer", norm_position="post", activation="gelu", positions="learned"),  # Algorithm 9
    "gpt": dict(norm="layer", norm_position="pre", activation="gelu", positions="learned"),  # Algorithm 10
    "gopher": dict(norm="rms", norm_position="pre", activation="gelu", positions="relative"),  # §6 Gopher
}
ARCH_NAMES: dict[Arch, str] = {
    "edt": "EDTransformer (encoder-decoder, Algorithm 8)",
    "bert": "ETransformer / BERT (encoder-only, Algorithm 9)",
    "gpt": "DTransformer / GPT-2 (decoder-only, Algorithm 10)",
    "gopher": "Gopher (DTransformer with RMSnorm and relative positions)",
}
CAUSAL_ARCHS: tuple[Arch, ...] = ("gpt", "gopher")


_S = TypeVar("_S", bound=str)


def one_of(value: object, allowed: tuple[_S, ...]) -> TypeGuard[_S]:
    """Whether ``value`` is one of the choices ``allowed`` (mypy then reads it as their Literal type)."""
    return isinstance(value, str) and value in allowed


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if not one_of(value, allowed):
        raise ValueError(f"{name} = {_shown(value)} is not allowed; choose one of {', '.join(map(repr, allowed))}.")


INT64_MAX = 2**63 - 1  # the largest whole number a config holds (torch's and numpy's int64)


def _shown(value: Any) -> str:
    """``value`` as a message shows it (true, false and null as a config file writes them): at most 60
    characters (a huge number or text is cut)."""
    text = json.dumps(value) if isinstance(value, bool) or value is None else repr(value)
    return text if len(text) <= 60 else f"{text[:50]}… ({len(text):,} characters)"


def _names(keys: list[str]) -> str:
    """Keys as a message lists them: a plain name as it is, anything else quoted (a newline shows as \\n)."""
    shown = [k if k.isidentifier() else _shown(k) for k in keys[:8]]
    return ", ".join(shown) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def _quotes_hint(value: Any) -> str:
    """For a number written in quotes ("12"): say to leave them out; for anything else, nothing."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            float(value)
            return " (written in quotes: leave them out)"
    return ""


def _whole(name: str, value: Any, lo: int, what: str) -> None:
    """ValueError unless ``value`` is a whole number in [lo, INT64_MAX] (a boolean or a string is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= INT64_MAX:
        hint = _quotes_hint(value)
        big = " up to 2⁶³ - 1" if isinstance(value, int) and value > INT64_MAX else ""
        raise ValueError(f"{name} = {_shown(value)}{hint} is not allowed; it must be a whole number {what}{big}.")


def _check_positive_int(name: str, value: Any) -> None:
    _whole(name, value, 1, "greater than 0")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} = {_shown(value)} is not allowed; it must be true or false (no quotes).")


def _check_number(name: str, value: Any, lo: float, hi: float, hi_open: bool = True, lo_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= INT64_MAX \
        and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise ValueError(f"{name} = {_shown(value)}{_quotes_hint(value)} is not allowed; it must be a number in {rng}.")


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
            raise ValueError(f"unknown {cls.__name__} field(s): {_names(unknown)}; "
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

    arch: Arch = "gpt"
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
    norm: NormKind | None = None
    norm_position: NormPosition | None = None
    activation: Activation | None = None
    positions: Positions | None = None
    # b, the base of every sinusoid: the sinusoidal W_p, the rotary angles and Transformer-XL's relative
    # distances. Default (None): ℓ_max for the sinusoidal W_p, as Algorithm 2 writes it; 10000 for RoPE and
    # Transformer-XL, as their papers (and Vaswani et al.'s table) do
    position_base: float | None = None
    tie_embeddings: bool = False  # W_u = W_eᵀ
    bias: bool = True  # b_q, b_k, b_v, b_o, b_mlp (norms keep β)
    embed_norm: bool = False  # a norm of the initial embedding e_t, before the first layer (BERT's, Devlin et al.)
    unembed_bias: bool = False  # logits W_u e + b_u (BERT's MLM head)
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
        for name in ("tie_embeddings", "bias", "embed_norm", "unembed_bias"):
            _check_bool(name, getattr(self, name))
        _check_number("dropout", self.dropout, 0.0, 1.0)
        if self.position_base is not None:
            _check_number("position_base", self.position_base, 0.0, math.inf, lo_open=True)
        _check_number("norm_eps", self.norm_eps, 0.0, 1.0)
        _whole("n_classes", self.n_classes, 0, "≥ 0 (0 = no class head)")
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

    arch: Arch
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
    norm: NormKind
    norm_position: NormPosition
    activation: Activation
    positions: Positions
    position_base: float
    tie_embeddings: bool
    bias: bool
    embed_norm: bool
    unembed_bias: bool
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
Task = Literal["next_token", "masked_lm", "seq2seq", "classification"]
TokenizerKind = Literal["char", "word", "bpe"]
Split = Literal["blocks", "tail"]  # data.split: where a text's validation part lies (see `data.splits`)
Optimizer = Literal["adamw", "sgd", "muon"]  # sgd: the paper's plain θ ← θ - η∇loss; muon: hidden matrices, AdamW the rest
LRSchedule = Literal["cosine", "constant", "wsd"]  # wsd: constant, then a cosine over the last 20% (`lr_at`)
Device = Literal["auto", "cpu", "cuda", "mps"]
ResolvedPrecision = Literal["fp32", "bf16", "fp16"]  # what a run computes in (`device.resolve_precision`)
Precision = Literal["auto", ResolvedPrecision]  # auto: bf16 on devices that do it natively, else fp32
KeepWeights = Literal["evaluations", "last"]  # evaluations: the weights at every evaluation too (`runs.snapshots`)
TASKS: tuple[Task, ...] = get_args(Task)
TOKENIZERS: tuple[TokenizerKind, ...] = get_args(TokenizerKind)
SPLITS: tuple[Split, ...] = get_args(Split)
OPTIMIZERS: tuple[Optimizer, ...] = get_args(Optimizer)
LR_SCHEDULES: tuple[LRSchedule, ...] = get_args(LRSchedule)
DEVICES: tuple[Device, ...] = get_args(Device)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
KEEP_WEIGHTS: tuple[KeepWeights, ...] = get_args(KeepWeights)
MODADD_P, MODADD_MAX_P = 97, 500  # the "modadd" corpus's p: by default, and at most (250,000 pairs)
TASK_ARCHS: dict[Task, tuple[Arch, ...]] = {"next_token": ("gpt", "gopher"), "masked_lm": ("bert",),
                                            "seq2seq": ("edt",), "classification": ("bert",)}


@dataclass
class DataConfig(_Config):
    """What to train on: a corpus (path or built-in name), its tokenizer, the task and the split."""

    corpus: str = "python-stdlib"
    tokenizer: TokenizerKind = "char"
    vocab_size: int = 1000  # for BPE
    val_fraction: float = 0.1
    split: Split = "blocks"  # "blocks" spread over the text | "tail", its last val_fraction (runs before the key)
    task: Task = "next_token"
    p_mask: float = 0.15  # masked_lm (Algorithm 12)
    modadd_p: int = MODADD_P  # p of the "modadd" corpus (a + b mod p); its training fraction is 1 - val_fraction

    def validate(self) -> DataConfig:
        if not isinstance(self.corpus, str):
            raise ValueError(f"data.corpus = {_shown(self.corpus)} is not allowed; it must be a string: a file, a "
                             "folder or the name of a built-in corpus.")
        if "\0" in self.corpus:
            raise ValueError("data.corpus holds a NUL character; give a file, a folder or a built-in corpus's name.")
        if not self.corpus.strip():
            raise ValueError("data.corpus is empty; give a file, a folder or the name of a built-in corpus.")
        check_choice("data.tokenizer", self.tokenizer, TOKENIZERS)
        check_choice("data.task", self.task, TASKS)
        _whole("data.vocab_size", self.vocab_size, 8, "≥ 8")
        _check_number("data.val_fraction", self.val_fraction, 0.0, 1.0)
        check_choice("data.split", self.split, SPLITS)
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
    optimizer: Optimizer = "adamw"
    lr: float = 1e-3
    warmup: int = 100
    lr_schedule: LRSchedule = "cosine"
    min_lr: float = 1e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    muon_lr: float = 0.02  # optimizer "muon": the hidden matrices' peak learning rate (lr stays AdamW's)
    muon_weight_decay: float = 0.0  # optimizer "muon": the hidden matrices' decoupled weight decay
    grad_clip: float = 1.0  # 0 = off
    eval_interval: int = 250
    eval_iters: int = 20
    checkpoint_interval: int = 500
    sample_tokens: int = 200  # length of the sample text written at each evaluation (0 = none)
    seed: int = 1337
    device: Device = "auto"
    precision: Precision = "auto"
    compile: bool = False
    tensorboard: bool = False  # also write TensorBoard event files into RUN_DIR/tensorboard/ (see `tensorboard_log`)
    keep_weights: KeepWeights = "evaluations"

    def warmup_note(self) -> str:
        """What a warm-up as long as the run or longer does (`schedule.lr_at`: η rises every step and never reaches
        lr); "" for a shorter one."""
        if self.warmup < self.steps:
            return ""
        return (f"The warm-up ({self.warmup:,} steps) is as long as training ({self.steps:,} steps): η rises every "
                f"step and never reaches {self.lr:g}.")

    def validate(self) -> TrainConfig:
        for name in ("steps", "batch_size", "eval_interval", "eval_iters", "checkpoint_interval"):
            _check_positive_int(f"train.{name}", getattr(self, name))
        for name in ("warmup", "sample_tokens", "seed"):
            _whole(f"train.{name}", getattr(self, name), 0, "≥ 0")
        check_choice("train.optimizer", self.optimizer, OPTIMIZERS)
        check_choice("train.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_choice("train.device", self.device, DEVICES)
        check_choice("train.precision", self.precision, PRECISIONS)
        check_choice("train.keep_weights", self.keep_weights, KEEP_WEIGHTS)
        _check_number("train.lr", self.lr, 0.0, 10.0, lo_open=True)
        _check_number("train.min_lr", self.min_lr, 0.0, 10.0)
        _check_number("train.weight_decay", self.weight_decay, 0.0, 10.0)
        _check_number("train.muon_lr", self.muon_lr, 0.0, 10.0, lo_open=True)
        _check_number("train.muon_weight_decay", self.muon_weight_decay, 0.0, 10.0)
        _check_number("train.beta1", self.beta1, 0.0, 1.0)
        _check_number("train.beta2", self.beta2, 0.0, 1.0)
        _check_number("train.grad_clip", self.grad_clip, 0.0, math.inf)
        for name in ("compile", "tensorboard"):
            _check_bool(f"train.{name}", getattr(self, name))
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
            raise ValueError(f"unknown config table(s): {_names(unknown)}; the tables are [model], [data], [train].")
        for table, value in d.items():
            if not isinstance(value, dict):
                raise ValueError(f"{table} is {_json_type(value)}; it must be a table ([{table}] with key = value "
                                 "lines), not a value or an array of tables.")
        return cls(model=ModelConfig.from_dict(d.get("model", {})), data=DataConfig.from_dict(d.get("data", {})),
                   train=TrainConfig.from_dict(d.get("train", {})))

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> RunConfig:
        """A config as a run's config.json (or a reference curve) recorded it: a key it lacks that
        `RECORDED_BEFORE` names takes the value runs had before the key existed, not today's default."""
        filled = dict(d)
        for table, old in RECORDED_BEFORE.items():
            if isinstance(d.get(table), dict):
                filled[table] = {**old, **d[table]}
        return cls.from_dict(filled)

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
        """Read and validate a TOML (or ``.json``) config file; a preset's file too (its `PRESET_KEYS`,
        ``name``, ``description`` and the like, are for people, not training, and are left out). Whatever the
        file holds, a `ConfigError` naming the file, the key and what is allowed, or the config."""
        path = Path(path)
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        d = _parse(path, kind, _read(path))
        try:
            if not isinstance(d, dict):
                raise ValueError(f"it holds {_json_type(d)}, not a {kind} object with [model], [data] and [train] "
                                 "tables.")
            for key in PRESET_KEYS:
                d.pop(key, None)
            config = cls.from_dict(d)
            config.data.validate()
            config.train.validate()
            try:
                config.model.validate()
            except ValueError as e:
                raise ValueError(f"[model] {e}") from None
            return config.validate()
        except ValueError as e:
            raise ConfigError(f"{path}: {e}") from None

    @staticmethod
    def given_in(path: str | Path) -> set[str]:
        """The ``table.key`` names that the config file at ``path`` sets (one `load` read without error)."""
        path = Path(path)
        d = _parse(path, "JSON" if path.suffix.lower() == ".json" else "TOML", _read(path))
        return {f"{t}.{k}" for t, v in d.items() if isinstance(v, dict) and t not in PRESET_KEYS for k in v} \
            if isinstance(d, dict) else set()

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


# What a recorded config without a key meant, where today's default means something else: runs recorded before
# data.split validated on the tail of the text.
RECORDED_BEFORE: dict[str, dict[str, Any]] = {"data": {"split": "tail"}}


class ConfigError(ValueError):
    """A config file that cannot be read or holds a value that is not allowed: the message names the file,
    the key and what is allowed (`RunConfig.load`)."""


MAX_CONFIG_BYTES = 1 << 20  # a config file is a few hundred bytes; anything past a megabyte is not one


def _read(path: Path) -> str:
    """The text of config file ``path`` (UTF-8, a BOM allowed): never a device, FIFO or socket, nor a huge file."""
    try:
        size = regular_file(path).st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is {size:,} bytes; a config file is at most "
                              f"{MAX_CONFIG_BYTES:,}: is it the right file?")
        return read_bytes(path).decode("utf-8-sig")
    except NotAFile as e:
        raise ConfigError(f"config file {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}.") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}).") from None


def _parse(path: Path, kind: str, text: str) -> Any:
    """The value in ``text``: JSON (duplicate keys refused, naming the key) or TOML."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                raise ConfigError(f"config file {path} is not valid JSON: the key {k!r} appears twice in one object.")
            d[k] = v
        return d

    try:
        return json.loads(text, object_pairs_hook=unique) if kind == "JSON" else tomllib.loads(text)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply to be a config.") from None
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError, an integer of more than 4300 digits
        why = str(e)
        if "digits" in why and not isinstance(e, (json.JSONDecodeError, tomllib.TOMLDecodeError)):
            why = "a number has thousands of digits"
        at = re.search(r"at line (\d+)", why)
        lines = text.splitlines()
        if at and 0 < int(at.group(1)) <= len(lines):  # the line itself: it names the key (a duplicate key)
            why += f": {_shown(lines[int(at.group(1)) - 1].strip())}"
        raise ConfigError(f"config file {path} is not valid {kind}: {why}.") from None


def _json_type(value: Any) -> str:
    """What ``value`` is, in a config file's words."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return "an array"
    return "nothing (null)" if value is None else f"a {type(value).__name__}"


def parse_value(raw: str) -> Any:
    """A --set value: TOML scalar syntax (3e-4, true, "x") where it parses, else the raw text."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
