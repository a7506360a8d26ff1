"""Feature interventions: zero a dictionary's feature, or clamp it to a value, at one position or at every one,
and rerun the prompt.

The dictionary is spliced in at its points together with its error term: where it reads x and the model has y at
its output point (an SAE: y = x; a transcoder: the MLP's output), the model goes on with

    y + W_dec (f' − f),   f = encode(x),   f' = f with the edited entries set,

which is y − W_dec,i f_i for feature i zeroed, and y exactly when nothing is edited. The rest of the model runs
as it is ("live"): attention, norms, later MLPs respond to the edit, so the logit moves by the feature's direct
effect (its edge into the logit in an attribution graph) plus its effects through them.

``frozen=True`` (`edited_logits`) runs the `replacement` model instead: attention patterns, norm scales and
every other feature and error node held at their values on the prompt (circuit-tracer's constrained
intervention). The logit is then affine in the activations, so zeroing feature s moves it by exactly −A[logit, s],
the graph's direct effect: the check that the graph's edges mean what they say.

`intervene` gives the result as the head ablation gives its (`ablation.TokenChange`): each token's probability
before and after, and the most likely tokens after the prompt before and after.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ...inference.generation import eval_mode
from ...inference.prompting import token_labels
from ...inference.scoring import score_text
from ...model.hooks import Hook, hooked
from ..ablation import TokenChange
from .dictionary import Dictionary
from .replacement import Replacement, check_model, transcoders_by_layer

TOP = 5  # the most likely next tokens shown, before and after


@dataclass(frozen=True, eq=False)
class FeatureEdit:
    """Feature ``feature`` (0-based) of ``dictionary`` set to ``value`` (0: zeroed) at ``position`` (0-based;
    None: every position)."""

    dictionary: Dictionary
    feature: int
    value: float = 0.0
    position: int | None = None

    def describe(self) -> str:
        """"feature 13 of mlp/1 zeroed at every position" (features and positions counted from 1)."""
        what = "zeroed" if self.value == 0 else f"clamped to {self.value:g}"
        where = "every position" if self.position is None else f"position {self.position + 1}"
        point = self.dictionary.point_in.removesuffix("/in") if self.dictionary.kind == "transcoder" \
            else self.dictionary.point_in
        return f"feature {self.feature + 1} of {point} {what} at {where}"

    def check(self, T: int) -> None:
        """A ValueError unless the edit fits the dictionary and a prompt of T tokens."""
        if not 0 <= self.feature < self.dictionary.d_f:
            raise ValueError(f"feature {self.feature + 1} is not one of the dictionary's {self.dictionary.d_f}.")
        if self.position is not None and not 0 <= self.position < T:
            raise ValueError(f"position {self.position + 1} is not in the prompt (1 … {T}).")
        if not math.isfinite(self.value):
            raise ValueError(f"a feature is clamped to a finite value, not {self.value}.")


def edited(f: torch.Tensor, edits: Iterable[FeatureEdit]) -> torch.Tensor:
    """f (…, T, d_f) with each edit's entries set; an edit at a position past T (scoring a prompt reads all of it
    but its last token) sets nothing."""
    f = f.clone()
    for e in edits:
        if e.position is None or e.position < f.shape[-2]:
            f[..., slice(None) if e.position is None else e.position, e.feature] = e.value
    return f


def _grouped(edits: Sequence[FeatureEdit]) -> list[tuple[Dictionary, list[FeatureEdit]]]:
    groups: dict[int, tuple[Dictionary, list[FeatureEdit]]] = {}
    for e in edits:
        groups.setdefault(id(e.dictionary), (e.dictionary, []))[1].append(e)
    return list(groups.values())


def _splice(d: Dictionary, edits: list[FeatureEdit]) -> list[tuple[str, Hook]]:
    """The hooks that add W_dec (f' − f) to ``d``'s output point, f read at its input point."""
    def change(x: torch.Tensor) -> torch.Tensor:
        f = d.encode(x.to(d.W_enc))  # in the dictionary's dtype and device
        return ((edited(f, edits) - f) @ d.W_dec.T).to(x)

    if d.point_in == d.point_out:
        return [(d.point_in, lambda x: x + change(x))]
    read: list[torch.Tensor] = []

    def keep(x: torch.Tensor) -> None:
        read.append(x)
    return [(d.point_in, keep), (d.point_out, lambda y: y + change(read.pop()))]


@contextmanager
def editing(model, edits: Sequence[FeatureEdit]) -> Iterator[None]:
    """Run the body with the edits in place (live, see the module): hooks on each dictionary's points."""
    hooks: list[tuple[str, Hook]] = []
    for d, mine in _grouped(edits):
        hooks += _splice(d, mine)
    with torch.no_grad(), eval_mode(model), hooked(model, hooks):
        yield


def edited_logits(model, ids: Sequence[int], edits: Sequence[FeatureEdit], *, frozen: bool = False,
                  transcoders: Iterable[Dictionary] = ()) -> torch.Tensor:
    """The logits (T, N_V) of the prompt ``ids`` with the edits in place: live, or (``frozen``) in the replacement
    model of ``transcoders`` (one per MLP layer; each edit's dictionary among them)."""
    check_model(model)
    for e in edits:
        e.check(len(ids))
    if not frozen:
        x = torch.tensor([list(ids)], device=next(model.parameters()).device)
        with editing(model, edits):
            return model(x)[0]
    by_layer = transcoders_by_layer(model, transcoders)
    if any(all(e.dictionary is not t for t in by_layer) for e in edits):
        raise ValueError("a frozen edit is of a feature of the transcoders the replacement model is made of.")
    rep = Replacement(model, by_layer, ids)
    f = [edited(fl, [e for e in edits if e.dictionary is t]) for fl, t in zip(rep.f, by_layer)]
    with torch.no_grad():
        return rep.run(*rep.sources(1, f))[0][0]


@dataclass
class FeatureIntervention(TokenChange):
    """The prompt's tokens with their probabilities before and after the ``edits`` (`TokenChange`), and the
    most likely tokens after the prompt: ``next_tokens`` (the top `TOP` before, then those after not among them)
    with their probabilities ``next_before`` and ``next_after``; the ``target`` token's (by default the most
    likely before) logit ``logit_before`` and ``logit_after``, and ``direct_effect``, the graph's A[logit, s] of
    the edited feature node when the edit came from a graph (None: it did not)."""

    edits: tuple[FeatureEdit, ...] = ()
    next_tokens: tuple[str, ...] = ()
    next_before: tuple[float, ...] = ()
    next_after: tuple[float, ...] = ()
    target: str = ""
    logit_before: float = 0.0
    logit_after: float = 0.0
    direct_effect: float | None = None

    def describe(self) -> str:
        return "; ".join(e.describe() for e in self.edits)


def intervene(loaded, text: str, edits: Sequence[FeatureEdit], target: int | None = None,
              direct_effect: float | None = None) -> FeatureIntervention:
    """Score the prompt ``text`` with a LoadedModel (gpt or gopher) as it is and with the ``edits`` (live, see
    the module), with the logit of token ``target`` (None: the most likely before) and the graph's
    ``direct_effect`` of the edited node on it, carried to be shown beside it."""
    model, tok = loaded.model, loaded.tokenizer
    check_model(model)
    ids = tok.encode(text)
    if not edits:
        raise ValueError("choose a feature to zero or clamp.")
    if not 2 <= len(ids) <= model.config.l_max:
        raise ValueError(f"the prompt is {len(ids)} tokens long; an edit reruns a prompt of 2 to l_max = "
                         f"{model.config.l_max} tokens.")
    for e in edits:
        e.check(len(ids))
    before = score_text(loaded, text, alternatives=0)
    with editing(model, edits):
        after = score_text(loaded, text, alternatives=0)
    lp, lq = edited_logits(model, ids, [])[-1].double(), edited_logits(model, ids, edits)[-1].double()
    p, q = lp.softmax(-1), lq.softmax(-1)
    top = p.topk(min(TOP, len(p))).indices.tolist()
    top += [i for i in q.topk(min(TOP, len(q))).indices.tolist() if i not in top]
    target = top[0] if target is None else target
    return FeatureIntervention([t.text for t in before.tokens], [t.prob for t in before.tokens],
                               [t.prob for t in after.tokens], tuple(edits), tuple(token_labels(tok, top)),
                               tuple(float(p[i]) for i in top), tuple(float(q[i]) for i in top),
                               token_labels(tok, [target])[0], float(lp[target]), float(lq[target]), direct_effect)


__all__ = ["FeatureEdit", "FeatureIntervention", "TOP", "edited", "edited_logits", "editing", "intervene"]
