"""The parts of a model one can intervene on, read or replaced at their hook points (`model.hooks`).

A component is one attention head or one MLP block:

- a head: its output Y^h (B, T, d_mid), the head's slice of the input of the output projection W_o
  (Algorithm 5: W_o [Y¹; …; Y^H]), read at the hook point ``A/l/z`` (``[:, :, h]``). Replacing it there, before W_o,
  is the exact "knock the head out": zeroing it equals a copy of the model with that slice of W_o zeroed (W_o's
  bias b_o stays, as it belongs to no head).
- an MLP block: its whole output W_mlp2 act(W_mlp1 e + b_mlp1) + b_mlp2 (B, T, d_e), the point ``M/l/out``.

Names (`names.ComponentName`) are the attention maps' names with the head added, 0-based: ``self/L/H`` (gpt,
gopher, bert), ``enc/L/H`` and ``dec/L/H`` (an encoder-decoder's encoder and decoder self-attention), ``cross/L/H``
(its cross-attention); MLPs ``mlp/L`` and, for an encoder-decoder, ``enc-mlp/L`` and ``dec-mlp/L``.

Hooks are attached inside a ``with`` and removed when it ends; a model without them runs as before.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..model.hooks import Hook, HookPoint, attached
from ..names import ComponentName, MapName, StackKind

Replace = Callable[[torch.Tensor], torch.Tensor]  # a component's output (B, T, d) -> what the model uses instead


@dataclass(frozen=True, eq=False)
class Component:
    """One head (``name.head`` its index in W_o's input) or one MLP (``name.head`` None).

    ``module`` is the head's W_o (an ``nn.Linear``) or the ``MLP``; ``point`` where its output is read: the
    sublayer's ``z`` (every head's Y^h) or the MLP's ``out``."""

    name: ComponentName
    module: nn.Module
    width: int  # d_mid for a head, d_e for an MLP
    point: HookPoint

    @property
    def head(self) -> int | None:
        return self.name.head

    @property
    def is_head(self) -> bool:
        return self.head is not None

    def part(self, Y: torch.Tensor) -> torch.Tensor:
        """This head's slice of W_o's input Y (..., H·d_mid), or Y itself for an MLP."""
        if self.head is None:
            return Y
        return Y[..., self.head * self.width:(self.head + 1) * self.width]


def stacks(model) -> list[tuple[StackKind, Sequence[Any]]]:
    """(self-attention map kind, layers) of each stack of ``model``, in the order it runs them."""
    return [("enc", model.encoder), ("dec", model.decoder)] if hasattr(model, "encoder") else [("self", model.layers)]


def stream_point(kind: StackKind, layer: int, n_layers: int) -> str:
    """The hook point of the residual stream of stack ``kind`` before layer ``layer`` (``n_layers``: after the
    last)."""
    return f"{MapName(kind, layer)}/resid_pre" if layer < n_layers else f"{MapName(kind, n_layers - 1)}/resid_post"


def components(model) -> list[Component]:
    """Every head and MLP of ``model``, layer by layer: self-attention heads, cross-attention heads, MLP."""
    out: list[Component] = []
    for kind, layers in stacks(model):
        for l, layer in enumerate(layers):
            for attn, name in ((layer.attn, MapName(kind, l)), (layer.cross, MapName("cross", l))):
                if attn is not None:
                    out += [Component(ComponentName(name, h), attn.W_o, attn.d_mid, attn.hook_z) for h in range(attn.H)]
            mlp = layer.mlp
            out.append(Component(ComponentName.mlp(kind, l), mlp, mlp.W_mlp2.out_features, mlp.hook_out))
    return out


def component(model, name: ComponentName) -> Component:
    """The component called ``name``; ValueError naming the model's components otherwise."""
    found = {c.name: c for c in components(model)}
    if name not in found:
        names = list(map(str, found))
        raise ValueError(f"this model has no component '{name}'; it has {', '.join(names[:6])}, … "
                         f"{names[-1]} ({len(names)} in all).")
    return found[name]


@contextmanager
def replaced(replacements: dict[Component, Replace]) -> Iterator[None]:
    """Run the model with each component's output passed through its function (which may only read it):
    a head's Y^h (its slice of W_o's input), an MLP's output."""
    by_point: dict[HookPoint, list[tuple[Component, Replace]]] = {}
    for c, fn in replacements.items():
        by_point.setdefault(c.point, []).append((c, fn))
    with attached([(point, _hook(items)) for point, items in by_point.items()]):
        yield


def _hook(items: list[tuple[Component, Replace]]) -> Hook:
    """One point's hook: each head's part replaced in a copy of the heads' outputs; an MLP's output replaced."""
    if not items[0][0].is_head:
        return items[0][1]

    def hook(z: torch.Tensor) -> torch.Tensor:  # (B, T, H, d_mid)
        Y = z.flatten(-2)  # W_o's input [Y¹; …; Y^H]
        out = Y.clone()
        for c, fn in items:
            c.part(out)[...] = fn(c.part(Y))
        return out.view_as(z)
    return hook


@contextmanager
def recorded(comps: Sequence[Component], into: dict[ComponentName, list[torch.Tensor]]) -> Iterator[None]:
    """Append each component's output (a copy) of every forward pass to ``into[name]``."""
    def keep(c: Component) -> Replace:
        def fn(a: torch.Tensor) -> torch.Tensor:
            into.setdefault(c.name, []).append(a.detach().clone())
            return a
        return fn
    with replaced({c: keep(c) for c in comps}):
        yield


__all__ = ["Component", "Replace", "components", "component", "stacks", "stream_point", "replaced", "recorded"]
