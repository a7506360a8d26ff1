"""Hook points: named places in the forward pass where a caller reads or replaces an activation, and the one
module that attaches hooks to them (and removes them, in ``finally``).

A `HookPoint` is a plain object the model calls as ``X = point(X)``: with nothing attached that is one empty
check, no ``nn.Module`` call, so training and generation pay nothing; the attention pattern is computed
explicitly, softmax(S/√d_attn) of Algorithm 4, only while a hook watches it, and by the fused kernel otherwise.
Watching the scores, the mask or a norm's statistics costs computing them (only then), and the fused kernels still
run unless a hook replaces them. A hook ``fn(tensor)`` returns None to read, or the tensor the model uses instead
(of the same shape); hooks on one
point run in the order attached. A hook acts only in the thread that attached it, so a model shared between
threads (a prompt in one, a measurement in another) is inspected by one without changing the other.

Names, 0-based as the attention maps' ("self/0"); ``K`` is a stack's self-attention kind: "self" (gpt, gopher,
bert), "enc" and "dec" (edt); ``A`` an attention kind (K, or an edt's "cross"); ``M`` a stack's MLP: "mlp"
(gpt, gopher, bert), "enc-mlp", "dec-mlp". In the order they run in layer l:

- ``K/l/resid_pre`` (B, T, d_e): the residual stream X that layer l reads;
- ``A/l/norm-stats`` (B, T, 2), pre-LN: the statistics of the norm before the sublayer, [..., 0] the mean m and
  [..., 1] the denominator √(v + ε) of Algorithm 6 (RMSnorm: m = 0, v = mean(e²)); a replacement is normed with;
- ``A/l/in`` (B, T, d_e): what the attention's queries read (pre-LN: X̃ = norm(X); post-LN: X);
- ``A/l/q`` (B, H, T_query, d_attn), ``A/l/k`` (B, H_kv, T_key, d_attn), ``A/l/v`` (B, H_kv, T_key, d_mid): Q, K,
  V of Algorithm 4 per head, Q and K after RoPE's rotation (a cross-attention reusing cached keys and values
  calls only ``q``);
- ``A/l/scores`` (B, H, T_query, T_key): S/√d_attn with the positional terms (ALiBi, Transformer-XL), unmasked;
- ``A/l/mask`` (B, 1, T_query, T_key): the Mask as the term added to the scores: 0 where query t may attend to
  key t′, -∞ where Mask[t′, t] = 0;
- ``A/l/pattern`` (B, H, T_query, T_key): softmax(S/√d_attn), each row summing to 1;
- ``A/l/z`` (B, T, H, d_mid): each head's output Y^h before W_o (Algorithm 5), head h at ``[:, :, h]``;
- ``A/l/out`` (B, T, d_e): W_o Y + b_o, what the sublayer adds to the stream;
- ``A/l/sum`` (B, T, d_e), post-LN only: X + out, before the norm that follows (``A/l/norm-stats`` after it);
- ``K/l/resid_mid`` (B, T, d_e): the stream after the self-attention (post-LN: normed); an edt's decoder has
  ``dec/l/resid_mid_cross`` after its cross-attention;
- ``M/l/norm-stats``, ``M/l/in``, ``M/l/out`` (B, T, d_e): the MLP's norm statistics, input (pre-LN: normed) and
  output (with b_mlp2); ``M/l/sum`` (post-LN only) as above;
- ``K/l/resid_post`` (B, T, d_e): the layer's output, the next layer's ``resid_pre``.

Around the layers: ``embed`` (B, T, d_e), e_t = W_e[:, x[t]] + W_p[:, t] of eq. 1, before BERT's embedding norm;
``final`` (B, T, d_e), the stack's output after its final norm (pre-LN) or its last layer (post-LN): what is
unembedded (gpt, gopher) or projected (bert); bert's head ``proj`` (B, T, d_f), GELU(W_f X + b_f), and
``proj-norm``, its norm. The statistics of the other norms: ``embed-norm-stats`` (BERT's embedding norm),
``final-norm-stats`` (pre-LN), ``proj-norm-stats``. An edt has these per stack: ``enc-embed``, ``enc-final`` (Z,
what cross-attention reads), ``dec-embed``, ``dec-final``, ``enc-final-norm-stats``, and so on. `point_names`
lists a model's points in the order they run.
"""
from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

import torch

Hook = Callable[[torch.Tensor], "torch.Tensor | None"]  # an activation -> None (read it) or its replacement


class HookPoint:
    """One named activation of the forward pass: the identity until a hook is attached (`hooked`)."""

    __slots__ = ("name", "hooks")

    def __init__(self, name: str) -> None:
        self.name = name
        self.hooks: tuple[tuple[int, Hook], ...] = ()  # (the attaching thread, hook); replaced, never mutated

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.hooks:
            return x
        here = threading.get_ident()
        for thread, fn in self.hooks:
            if thread == here:
                y = fn(x)
                if y is not None:
                    if y.shape != x.shape:
                        raise ValueError(f"a hook on {self.name!r} returned a tensor of shape {tuple(y.shape)}; "
                                         f"the point's tensor is {tuple(x.shape)}.")
                    x = y
        return x

    def watched(self) -> bool:
        """Whether a hook of the calling thread is attached."""
        here = threading.get_ident()
        return any(thread == here for thread, _ in self.hooks)

    def __reduce__(self) -> tuple[type[HookPoint], tuple[str]]:
        """A copy (``copy.deepcopy`` of a model, a pickle) is the point without hooks: they belong to a ``with``."""
        return HookPoint, (self.name,)

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r}, {len(self.hooks)} hooks)"


class Hooked(Protocol):
    """A model with hook points (every `Transformer`)."""

    def hook_points(self) -> dict[str, HookPoint]: ...


def point_names(model: Hooked) -> list[str]:
    """The names of ``model``'s hook points, in the order a forward pass reaches them."""
    return list(model.hook_points())


def hook_point(model: Hooked, name: str) -> HookPoint:
    """The point called ``name``; a ValueError naming valid ones otherwise."""
    return _find(model.hook_points(), name)


def _find(points: dict[str, HookPoint], name: str) -> HookPoint:
    if name not in points:
        names = list(points)
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ValueError(f"this model has no hook point {name!r}; {hint}its points are {', '.join(names[:4])}, … "
                         f"{names[-1]} ({len(names)} in all; `point_names` lists them).")
    return points[name]


@contextmanager
def hooked(model: Hooked, hooks: Mapping[str, Hook] | Iterable[tuple[str, Hook]]) -> Iterator[None]:
    """Run the body with each hook attached to its named point (in this thread); removed when it ends, also by
    an exception. Every name is checked before any hook is attached."""
    points = model.hook_points()
    pairs = hooks.items() if isinstance(hooks, Mapping) else hooks
    with attached([(_find(points, name), fn) for name, fn in pairs]):
        yield


_attaching = threading.Lock()  # one attach or removal at a time: each replaces a point's tuple of hooks


@contextmanager
def attached(hooks: Iterable[tuple[HookPoint, Hook]]) -> Iterator[None]:
    """`hooked` for points in hand (a model's, from `hook_point` or its modules)."""
    here = threading.get_ident()
    done: list[tuple[HookPoint, tuple[int, Hook]]] = []
    try:
        for point, fn in hooks:
            entry = (here, fn)
            with _attaching:
                point.hooks = (*point.hooks, entry)
            done.append((point, entry))
        yield
    finally:
        with _attaching:
            for point, entry in done:
                point.hooks = tuple(h for h in point.hooks if h is not entry)


@contextmanager
def recorded(model: Hooked, names: Iterable[str], *, copy: bool = True) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Run the body keeping each named point's tensor of every forward pass: ``{name: [first call's, …]}``, in
    the order the points run. Kept as detached copies, or (``copy=False``) as they are, autograd included."""
    points = model.hook_points()
    wanted = {_find(points, name).name for name in names}
    got: dict[str, list[torch.Tensor]] = {name: [] for name in points if name in wanted}

    def keep(into: list[torch.Tensor]) -> Hook:
        def fn(x: torch.Tensor) -> None:
            into.append(x.detach().clone() if copy else x)
        return fn
    with hooked(model, {name: keep(into) for name, into in got.items()}):
        yield got


def attending(model: Hooked, run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``run()`` (a forward pass of ``model``) with every attention pattern kept: (its result, {"self/0": (B, H,
    T_query, T_key), …}), the maps named as in ``return_attention=True``, which is built on this."""
    patterns = [name for name in model.hook_points() if name.endswith("/pattern")]
    with recorded(model, patterns, copy=False) as got:
        out = run()
    return out, {name.removesuffix("/pattern"): maps[0] for name, maps in got.items() if maps}


__all__ = ["Hook", "HookPoint", "Hooked", "point_names", "hook_point", "hooked", "attached", "recorded", "attending"]
