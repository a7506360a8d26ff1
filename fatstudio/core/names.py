"""The names of a model's attention maps and of its components, as small typed values.

An attention map is named ``kind/l`` as ``model(x, return_attention=True)`` returns it, l from 0: "self/l" (gpt,
gopher, bert), "enc/l", "dec/l" and "cross/l" (edt). A component is one head of a map, ``kind/l/h``, or the MLP of a
layer, "mlp/l" ("enc-mlp/l", "dec-mlp/l" of an edt). Code passes `MapName` and `ComponentName`; the strings are
for files, the public attention dict and hook points (``str(name)``, `MapName.parse`). What a person reads counts
as the paper does, from 1, and names the kind in words (`MapName.label`).

Plain Python: no torch, no numpy.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal, get_args

from .config import one_of

StackKind = Literal["self", "enc", "dec"]  # a stack's self-attention: a model's one stack, an edt's encoder, decoder
AttentionKind = Literal[StackKind, "cross"]  # and an edt's decoder's cross-attention (decoder → encoder)
STACK_KINDS: tuple[StackKind, ...] = get_args(StackKind)
ATTENTION_KINDS: tuple[AttentionKind, ...] = get_args(AttentionKind)  # in the order they are listed
KIND_WORDS: dict[AttentionKind, str] = {"self": "", "enc": "encoder", "dec": "decoder", "cross": "cross-attention"}
MEAN_HEAD = -1  # the head index that stands for the mean over a layer's heads


def of_stack(kind: StackKind, what: str) -> str:
    """``what`` ("mlp", "embed", …) of the stack whose self-attention is ``kind``: "mlp" of a model's one stack
    ("self"), "enc-mlp" and "dec-mlp" of an edt's encoder and decoder."""
    return what if kind == "self" else f"{kind}-{what}"


_MLPS: dict[str, StackKind] = {of_stack(kind, "mlp"): kind for kind in STACK_KINDS}  # "mlp" → "self", …


@dataclass(frozen=True)
class MapName:
    """The attention map of layer ``layer`` (l, 0-based) of ``kind``: "self/1" as a string."""

    kind: AttentionKind
    layer: int

    @classmethod
    def parse(cls, name: str) -> MapName:
        """``"cross/1"`` → MapName("cross", 1); ValueError, in words, for anything not ``kind/l``."""
        kind, sep, layer = name.partition("/")
        if not (sep and one_of(kind, ATTENTION_KINDS) and layer.isdigit()):
            raise ValueError(f"{name!r} is not the name of an attention map; names are kind/layer, e.g. 'self/0', "
                             "'enc/1', 'dec/0', 'cross/0'.")
        return cls(kind, int(layer))

    def __str__(self) -> str:
        return f"{self.kind}/{self.layer}"

    @property
    def self_attention(self) -> bool:
        """Whether queries and keys are one sequence (not an edt's cross-attention)."""
        return self.kind != "cross"

    @property
    def order(self) -> tuple[int, int]:
        """A sort key: kinds in the order `ATTENTION_KINDS` lists them, then layers."""
        return ATTENTION_KINDS.index(self.kind), self.layer

    @property
    def label(self) -> str:
        """As a person counts: "self/0" → "layer 1", "dec/1" → "decoder layer 2", "cross/0" → "cross-attention
        layer 1"."""
        words = KIND_WORDS[self.kind]
        return f"{words} layer {self.layer + 1}" if words else f"layer {self.layer + 1}"

    def head_label(self, head: int) -> str:
        """Head ``head`` (0-based) as a person counts: "layer 1 · head 3"; `MEAN_HEAD`: "layer 1 · mean over
        heads"."""
        return f"{self.label} · " + ("mean over heads" if head == MEAN_HEAD else f"head {head + 1}")


@dataclass(frozen=True)
class ComponentName:
    """Head ``head`` of the attention map ``map`` ("self/0/2"), or, with ``head`` None, the MLP of layer
    ``map.layer`` of the stack whose self-attention is ``map.kind`` ("mlp/1", "dec-mlp/0")."""

    map: MapName
    head: int | None = None

    @classmethod
    def mlp(cls, kind: StackKind, layer: int) -> ComponentName:
        return cls(MapName(kind, layer))

    @classmethod
    def parse(cls, name: str) -> ComponentName:
        """``"cross/1/0"`` → head 0 of cross/1, ``"dec-mlp/0"`` → the MLP of decoder layer 0; ValueError, in
        words, for anything else."""
        where, sep, index = name.rpartition("/")
        if sep and index.isdigit():
            if where in _MLPS:
                return cls.mlp(_MLPS[where], int(index))
            with contextlib.suppress(ValueError):
                return cls(MapName.parse(where), int(index))
        raise ValueError(f"{name!r} is not the name of a component; names are kind/layer/head (a head, e.g. "
                         "'self/0/1', 'cross/1/0') or mlp/layer ('mlp/0', 'enc-mlp/1', 'dec-mlp/0').")

    def __str__(self) -> str:
        if self.head is not None:
            return f"{self.map}/{self.head}"
        kind = self.map.kind
        assert kind != "cross"  # an MLP is a stack's (`mlp`)
        return f"{of_stack(kind, 'mlp')}/{self.map.layer}"

    @property
    def label(self) -> str:
        """As a person counts (from 1): "self/0/2" → "layer 1 · head 3", "cross/1/0" → "cross-attention layer 2 ·
        head 1", "mlp/1" → "layer 2 · MLP", "enc-mlp/0" → "encoder layer 1 · MLP"."""
        return f"{self.map.label} · MLP" if self.head is None else self.map.head_label(self.head)


__all__ = ["StackKind", "AttentionKind", "STACK_KINDS", "ATTENTION_KINDS", "KIND_WORDS", "MEAN_HEAD", "of_stack",
           "MapName", "ComponentName"]
