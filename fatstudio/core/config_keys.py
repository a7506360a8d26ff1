"""The keys of a run's config, with their types: what a sweep varies (`training.sweep`) and what the Experiments
tab completes and checks as it is typed."""
from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, fields
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .config import RunConfig

TABLES = ("model", "data", "train")
FILLED_IN = ("model.vocab_size", "model.n_classes")  # keys training sets from the tokenizer and the data
KIND_WORDS = {"int": "whole number", "float": "number", "bool": "true or false", "str": "text"}


@dataclass(frozen=True)
class ConfigKey:
    """A key of a `RunConfig`: ``key`` (table.name), its ``base`` type (int, float, bool or str), its ``choices``
    (a closed choice's values, from its Literal type; else none), whether it may be none, and the config's
    ``value``."""

    key: str
    base: str
    choices: tuple[str, ...] = ()
    optional: bool = False
    value: Any = None

    @property
    def kind(self) -> str:
        """Its type in words: "number", "whole number or none", "one of adamw, sgd, muon"…"""
        words = f"one of {', '.join(self.choices)}" if self.choices else KIND_WORDS[self.base]
        return words + (" or none" if self.optional and "none" not in self.choices else "")

    def describe(self) -> str:
        """"train.lr: a number; now 0.0003"."""
        now = "none" if self.value is None else json.dumps(self.value) if isinstance(self.value, (bool, str)) else \
            f"{self.value:g}" if isinstance(self.value, float) else str(self.value)
        article = "a " if self.base in ("int", "float", "str") and not self.choices else ""
        return f"{self.key}: {article}{self.kind}; now {now}"


def config_key(config: RunConfig, key: str) -> ConfigKey:
    """The `ConfigKey` of ``key`` (table.name) in ``config``; ValueError in words for a key the config has not."""
    table, _, name = key.partition(".")
    section = getattr(config, table) if table in TABLES else None
    if section is None or name not in {f.name for f in fields(section)}:
        raise ValueError(f"{key}: no such key; give table.key with table model, data or train "
                         f"(e.g. train.lr, model.d_e).")
    hint = get_type_hints(type(section))[name]
    types = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)  # X | None: (X, None)
    literal = get_origin(types[0]) is Literal  # a choice (`Arch`, …) is text
    return ConfigKey(key, "str" if literal else types[0].__name__,
                     tuple(map(str, get_args(types[0]))) if literal else (), type(None) in types, getattr(section, name))


def config_keys(config: RunConfig, leave_out: Collection[str] = ()) -> list[ConfigKey]:
    """Every key of ``config`` a person sets, table by table in the config's order: not those training fills in
    (`FILLED_IN`), nor those of ``leave_out``."""
    return [config_key(config, f"{table}.{f.name}") for table in TABLES for f in fields(getattr(config, table))
            if f"{table}.{f.name}" not in (*FILLED_IN, *leave_out)]
