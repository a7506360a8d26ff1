"""Train with my code: a short run of a small GPT with the learner's function swapped into the model through its
hook points (`model.hooks`), beside the same run with the model's own; same seed, same batches. When the function
is right the two loss curves are the same (to float rounding).

The learner's function gets float64 copies of the model's tensors, as in a check, and what it returns goes back into
the float32 model; gradients flow through it. Which exercises can be swapped in: `SWAPS`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

from ...config import ModelConfig
from ...model.hooks import Hook, hooked
from ...model.transformers import Transformer, build_model
from .catalog import Exercise
from .checking import Problem, attempt, load
from .kit import unidirectional_mask

F64 = torch.float64
TEXT = ("Formal Algorithms for Transformers. This document aims to be a self-contained, mathematically precise "
        "overview of transformer architectures and algorithms (not results). It covers what transformers are, how "
        "they are trained, what they are used for, their key architectural components, and a preview of the most "
        "prominent models. The reader is assumed to be familiar with basic ML terminology and simpler neural "
        "network architectures such as MLPs. ")
B, T, LR, SEED = 4, 16, 1e-2, 0
SAME = 1e-4  # the largest difference between the two curves (nats) that still reads as the same curve

Fn = Callable[..., Any]
Swap = Callable[[Transformer, Fn, torch.Tensor], Iterator[Callable[[torch.Tensor], torch.Tensor] | None]]


def _model() -> tuple[Transformer, torch.Tensor]:
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT])
    torch.manual_seed(SEED)
    cfg = ModelConfig(arch="gpt", vocab_size=len(chars), l_max=T, L=2, H=2, d_e=16, d_mlp=32)
    return build_model(cfg), data


def _batches(data: torch.Tensor, steps: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(SEED)
    return [torch.stack([data[i:i + T] for i in torch.randint(0, len(data) - T, (B,), generator=g).tolist()])
            for _ in range(steps)]


def _f(fn: Fn, *args: Any) -> torch.Tensor:
    """The learner's function on float64 arguments, its result as float32 (gradients flow both ways)."""
    out = attempt(fn, tuple(a.to(F64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args))
    if not isinstance(out, torch.Tensor):
        raise Problem(f"your function returned {type(out).__name__}, not a tensor.")
    return out.float()


def _cols(m: torch.Tensor) -> torch.Tensor:
    """(T, d) of one sequence as the paper's d × T."""
    return m.T


def _per_sequence(out: Callable[[int], torch.Tensor]) -> torch.Tensor:
    return torch.stack([out(b) for b in range(B)])


# ---- the swaps: each a context in which the model computes with the learner's function ----------------------
@contextmanager
def _embedding(model: Transformer, fn: Fn, x: torch.Tensor, which: str) -> Iterator[None]:
    W_e, W_p = model.embed.W_e.weight.T, model.embed.W_p.weight.T  # d_e × N_V, d_e × ℓ_max

    def column(b: int, t: int) -> torch.Tensor:
        v = int(x[b, t])
        if which == "token_embedding":
            return _f(fn, v, W_e) + W_p[:, t]
        return W_e[:, v] + _f(fn, t, W_p)

    def embed(e: torch.Tensor) -> torch.Tensor:
        if which == "embed":
            return _per_sequence(lambda b: _cols(_f(fn, x[b].tolist(), W_e, W_p)))
        return _per_sequence(lambda b: torch.stack([column(b, t) for t in range(x.shape[1])]))
    with hooked(model, {"embed": embed}):
        yield None


def _attn_weights(model: Transformer, l: int) -> list[torch.Tensor]:
    """Layer l's W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o."""
    return [model.get_parameter(f"layers.{l}.attn.W_{n}.{w}") for n in "qkvo" for w in ("weight", "bias")]


@contextmanager
def _attention(model: Transformer, fn: Fn, x: torch.Tensor, which: str) -> Iterator[None]:
    seen: dict[int, torch.Tensor] = {}
    Mask = unidirectional_mask(x.shape[1])
    H = model.config.H
    hooks: list[tuple[str, Hook]] = []
    for l in range(model.config.L):
        def keep(X: torch.Tensor, l: int = l) -> None:
            seen[l] = X

        def heads(Y: torch.Tensor, l: int = l) -> torch.Tensor:  # Y: (B, T, H, d_mid)
            W_q, b_q, W_k, b_k, W_v, b_v = _attn_weights(model, l)[:6]
            a, m = W_q.shape[0] // H, W_v.shape[0] // H

            def head(b: int, h: int) -> torch.Tensor:
                X = _cols(seen[l][b])
                return _cols(_f(fn, X, X, W_q[h * a:(h + 1) * a], b_q[h * a:(h + 1) * a], W_k[h * a:(h + 1) * a],
                                b_k[h * a:(h + 1) * a], W_v[h * m:(h + 1) * m], b_v[h * m:(h + 1) * m], Mask))
            return _per_sequence(lambda b: torch.stack([head(b, h) for h in range(H)], 1))

        def whole(out: torch.Tensor, l: int = l) -> torch.Tensor:  # out: (B, T, d_e)
            W = _attn_weights(model, l)
            return _per_sequence(lambda b: _cols(_f(fn, _cols(seen[l][b]), _cols(seen[l][b]), *W, H, Mask)))
        hooks += [(f"self/{l}/in", keep), (f"self/{l}/z", heads) if which == "attention" else (f"self/{l}/out", whole)]
    with hooked(model, hooks):
        yield None


@contextmanager
def _layer_norm(model: Transformer, fn: Fn, x: torch.Tensor, which: str) -> Iterator[None]:
    """Every norm of the pre-LN model: X̃ = layer_norm(X) of each column, from the stream it reads."""
    seen: dict[str, torch.Tensor] = {}
    L = model.config.L

    def keep(name: str) -> Hook:
        def fn_(X: torch.Tensor) -> None:
            seen[name] = X
        return fn_

    def normed(name: str, norm: str) -> Hook:
        gamma, beta = model.get_parameter(f"{norm}.gamma"), model.get_parameter(f"{norm}.beta")

        def fn_(_: torch.Tensor) -> torch.Tensor:
            X = seen[name]
            return _per_sequence(lambda b: torch.stack([_f(fn, X[b, t], gamma, beta, model.config.norm_eps)
                                                        for t in range(X.shape[1])]))
        return fn_
    hooks: list[tuple[str, Hook]] = []
    for l in range(L):
        hooks += [(f"self/{l}/resid_pre", keep(f"a{l}")), (f"self/{l}/in", normed(f"a{l}", f"layers.{l}.norm_attn")),
                  (f"self/{l}/resid_mid", keep(f"m{l}")), (f"mlp/{l}/in", normed(f"m{l}", f"layers.{l}.norm_mlp"))]
    hooks += [(f"self/{L - 1}/resid_post", keep("f")), ("final", normed("f", "norm_final"))]
    with hooked(model, hooks):
        yield None


def _loss_mine(model: Transformer, fn: Fn, x: torch.Tensor, which: str) -> torch.Tensor:
    """The loss with the learner's unembedding or d_loss (the mean over the B·(T-1) predicted tokens)."""
    n = x.shape[0] * (x.shape[1] - 1)
    if which == "d_loss":
        P = model(x).softmax(-1)
        return sum((_f(fn, x[b].tolist(), _cols(P[b])) for b in range(B)), torch.zeros(())) / n
    seen: list[torch.Tensor] = []
    with hooked(model, {"final": lambda X: seen.append(X)}):
        model(x)
    W_u = model.get_parameter("unembed.W_u.weight")
    total = torch.zeros(())
    for b in range(B):
        for t in range(x.shape[1] - 1):
            total = total - torch.log(_f(fn, seen[0][b, t], W_u)[x[b, t + 1]])
    return total / n


def _loss(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


SWAPS: dict[str, Callable[..., Any]] = {"token_embedding": _embedding, "positional_embedding": _embedding,
                                        "embed": _embedding, "attention": _attention, "mh_attention": _attention,
                                        "layer_norm": _layer_norm, "unembedding": _loss_mine, "d_loss": _loss_mine}


def curve(fn: Fn | None, which: str, steps: int) -> list[float]:
    """The losses of ``steps`` Adam steps, with the learner's ``fn`` swapped in for ``which`` (None: the model's)."""
    model, data = _model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses: list[float] = []
    for x in _batches(data, steps):
        swap = SWAPS[which]
        if fn is None:
            loss = _loss(model, x)
        elif swap is _loss_mine:
            loss = _loss_mine(model, fn, x, which)
        else:
            with swap(model, fn, x, which):
                loss = _loss(model, x)
        value = float(loss.detach())
        if not torch.isfinite(loss):
            raise Problem(f"the loss became {value} at step {len(losses)}.")
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(value)
    return losses


def train_with(exercise: Exercise, source: str, steps: int) -> dict[str, Any]:
    """Both curves and what they say: ``{"passed", "message", "reference", "mine"}``."""
    if exercise.name not in SWAPS:
        return {"passed": False, "message": f"{exercise.name} cannot be trained with: only "
                                            f"{', '.join(SWAPS)} can be swapped into the model.",
                "reference": [], "mine": []}
    reference = curve(None, exercise.name, steps)
    try:
        mine = curve(load(source, exercise.name), exercise.name, steps)
    except Problem as p:
        return {"passed": False, "message": f"Not yet — while training: {p}", "reference": reference, "mine": []}
    gap = max(abs(a - b) for a, b in zip(reference, mine))
    if gap <= SAME:
        message = f"The same curve: {steps} steps, largest difference {gap:.1e} nats (float rounding)."
    else:
        first = next(i for i, (a, b) in enumerate(zip(reference, mine)) if abs(a - b) > SAME)
        message = (f"The curves part at step {first}: loss {mine[first]:.4f} with your {exercise.name}, "
                   f"{reference[first]:.4f} with the model's (largest difference {gap:.3g} nats).")
    return {"passed": gap <= SAME, "message": message, "reference": reference, "mine": mine}
