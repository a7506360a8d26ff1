"""Feature dashboards: what a dictionary's features respond to on a run's validation split, and what they write.

`feature_activations` (loaded, dictionary) runs the model over the validation split once — windows of l_max
tokens laid end to end, each read from its own start, as training reads them (a token's context is the tokens
before it in its window) — encodes the dictionary's input point there, and keeps every active (token, feature,
activation) in a `FeatureActivations`: a few megabytes, after which everything else is a lookup:

- ``stats()``: one `FeatureStats` per feature for the sortable list: frequency (the fraction of the tokens it is
  active on), mean activation when active, and a short label, its top tokens (the distinct tokens of its
  strongest activations);
- ``dashboard(i)``: a `Dashboard` of feature i: its top-activating contexts (`Context`, the activating token
  marked, the feature's activation on every token shown), a `Histogram` of its nonzero activations, and the
  tokens it promotes and suppresses (`logit_effects`).

`logit_effects` is the feature's direct effect on the logits, as Neuronpedia's and SAELens's dashboards read it:
its decoder column d (what it writes into the stream) through the final norm's linear part — centred for a
layer norm, times γ, without dividing by the token's scale, which a dictionary's column does not know — and the
unembedding: W_u (γ ⊙ (d − mean d)). It is defined where d is written into the residual stream that a pre-LN
gpt or gopher unembeds (the stream's points and the sublayers' outputs, ``M/l/out`` for a transcoder); ``final``
reads W_u d. A dashboard ranks the tokens that occur in the training split: the specials' rows of W_u (<bos>,
<pad>, …) were never trained towards anything and would top its lists. `text_activations` gives every
feature's activation on a text (the Prompt text).

Features are 0-based here, as in the dictionary's tensors; the app counts them from 1.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...data.datasets import StreamDataset
from ...device import model_device
from ...inference.generation import eval_mode
from ...inference.prompting import display_token, token_labels
from ...model.hooks import hooked, point_names
from ..ablation import validation_dataset
from ..lens import encode

if TYPE_CHECKING:
    from ...inference.loaded import LoadedModel
    from .dictionary import Dictionary

Progress = Callable[[float, str], None]
MAX_TOKENS = 500_000  # the validation tokens read at most (the split's first): the cache stays ≤ ~60 MB at k = 16
ROW_TOKENS = 2048  # positions per forward pass: small enough to stay in the CPU's caches
STREAM_TASKS = ("next_token", "masked_lm")
LABEL_TOKENS = 3  # distinct tokens in a feature's label
LABEL_FROM = 20  # …read from its strongest activations


@dataclass(frozen=True)
class FeatureStats:
    """One row of the feature list: feature ``index`` (0-based), active on ``frequency`` of the tokens with mean
    activation ``mean_act`` there (0 if never), ``label`` its top tokens ("" if never active)."""

    index: int
    frequency: float
    mean_act: float
    label: str


@dataclass(frozen=True)
class Context:
    """A stretch of the validation split around one activation: ``tokens`` (their text) and the feature's
    activation on each (``acts``); ``marked`` the activating token's index in them. ``tokens[:marked + 1]`` is
    what the model read (from its window's start, at most ``before`` tokens); those after it are shown for
    reading. ``position``: the token's index in the validation split."""

    tokens: list[str]
    acts: list[float]
    marked: int
    position: int

    @property
    def activation(self) -> float:
        return self.acts[self.marked]


@dataclass(frozen=True)
class Histogram:
    """The feature's nonzero activations in ``len(counts)`` equal bins between ``edges[0]`` = 0 and
    ``edges[-1]`` = its largest; ``inactive``: the tokens it is 0 on."""

    edges: list[float]
    counts: list[int]
    inactive: int


@dataclass(frozen=True)
class LogitEffects:
    """The tokens a feature's direction promotes and suppresses most (`logit_effects`): (token's visible label
    (`display_token`), logit change per unit of activation), strongest first; ``note`` says how they were read,
    or why they are not (then both empty)."""

    promoted: list[tuple[str, float]]
    suppressed: list[tuple[str, float]]
    note: str


@dataclass(frozen=True)
class Dashboard:
    """Everything the app shows of one feature (see the module)."""

    stats: FeatureStats
    contexts: list[Context]
    histogram: Histogram
    effects: LogitEffects


@dataclass(frozen=True)
class TextActivations:
    """Every feature's activation on each token of a text: ``tokens`` (their text), ``acts`` (T, d_f)."""

    tokens: list[str]
    acts: np.ndarray

    def of(self, feature: int) -> list[float]:
        """Feature ``feature``'s activation on each token."""
        return self.acts[:, feature].tolist()


class FeatureActivations:
    """Every nonzero activation of a dictionary's features on ``ids``, the validation tokens read, grouped by
    feature: feature i's are ``where[start[i]:start[i + 1]]`` (token indices, ascending) and ``act[…]``;
    ``window_start`` (N,) where each token's window begins. Made by `feature_activations`."""

    def __init__(self, dictionary: Dictionary, effects: Callable[[int], LogitEffects], tokens: list[str],
                 ids: np.ndarray, window_start: np.ndarray, feature: np.ndarray, where: np.ndarray,
                 act: np.ndarray) -> None:
        self.dictionary, self._effects, self._tokens = dictionary, effects, tokens  # each id's text
        self.ids, self.window_start = ids, window_start
        key = feature.astype(np.int16) if dictionary.d_f <= 2**15 else feature  # int16: numpy's radix sort
        order = np.argsort(key, kind="stable")  # by feature, then by token (``where`` ascends)
        self.where, self.act = where[order], act[order]
        self.start = np.searchsorted(key[order], np.arange(dictionary.d_f + 1))
        self.count = np.diff(self.start)
        self.sum = np.bincount(feature, weights=act, minlength=dictionary.d_f)
        self._label_of: dict[int, str] = {}

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    def _check(self, feature: int) -> None:
        if not 0 <= feature < self.dictionary.d_f:
            raise ValueError(f"there is no feature {feature + 1}: this dictionary has {self.dictionary.d_f} "
                             f"(1 to {self.dictionary.d_f}).")

    def _span(self, feature: int) -> slice:
        return slice(int(self.start[feature]), int(self.start[feature + 1]))

    def top(self, feature: int, n: int) -> np.ndarray:
        """Indices (into the feature's span) of its ``n`` strongest activations, strongest first (of equal ones,
        the earlier token)."""
        a = self.act[self._span(feature)]
        best = np.flatnonzero(a >= np.partition(a, len(a) - n)[len(a) - n]) if len(a) > n else np.arange(len(a))
        return best[np.argsort(-a[best], kind="stable")][:n]

    def stats(self) -> list[FeatureStats]:
        """Every feature's `FeatureStats`, by index."""
        return [self.stats_of(i) for i in range(self.dictionary.d_f)]

    def stats_of(self, feature: int) -> FeatureStats:
        """Feature ``feature``'s row of the list."""
        c = int(self.count[feature])
        return FeatureStats(feature, c / self.n_tokens, float(self.sum[feature]) / c if c else 0.0,
                            self.label(feature))

    def label(self, feature: int) -> str:
        """The distinct tokens of the feature's strongest activations, at most `LABEL_TOKENS`, strongest first."""
        if feature not in self._label_of:
            at = self.where[self._span(feature)][self.top(feature, LABEL_FROM)]
            tokens = dict.fromkeys(display_token(self._tokens[i], 8) for i in self.ids[at].tolist())
            self._label_of[feature] = " ".join(list(tokens)[:LABEL_TOKENS])
        return self._label_of[feature]

    def activations_at(self, feature: int, positions: np.ndarray) -> np.ndarray:
        """The feature's activation on the tokens at ``positions`` (0 where it is inactive)."""
        span = self._span(feature)
        where, act = self.where[span], self.act[span]
        i = np.searchsorted(where, positions).clip(max=max(len(where) - 1, 0))
        hit = (where[i] == positions) if len(where) else np.zeros(len(positions), bool)
        return np.where(hit, act[i] if len(act) else 0.0, 0.0)

    def dashboard(self, feature: int, top: int = 20, before: int = 24, after: int = 6, bins: int = 30) -> Dashboard:
        """Feature ``feature``'s `Dashboard`: its ``top`` contexts (up to ``before`` tokens of what the model read
        and ``after`` following), a histogram of ``bins`` bins."""
        self._check(feature)
        span = self._span(feature)
        contexts = []
        for j in self.top(feature, top).tolist():
            p = int(self.where[span][j])
            a = max(int(self.window_start[p]), p - before)
            shown = np.arange(a, min(p + after + 1, self.n_tokens))
            contexts.append(Context([self._tokens[i] for i in self.ids[shown].tolist()],
                                    self.activations_at(feature, shown).tolist(), p - a, p))
        acts = self.act[span]
        hi = float(acts.max()) if len(acts) else 1.0
        counts, edges = np.histogram(acts, bins=bins, range=(0.0, hi))
        histogram = Histogram(edges.tolist(), counts.tolist(), self.n_tokens - len(acts))
        return Dashboard(self.stats_of(feature), contexts, histogram, self._effects(feature))


class _Read(Exception):
    """Raised by the recording hook: the point is read, the rest of the forward pass is not needed."""


def point_activations(model, point: str, x: torch.Tensor) -> torch.Tensor:
    """The tensor at hook point ``point`` when ``model`` reads ids ``x`` (B, T); the layers after it do not run."""
    got: list[torch.Tensor] = []

    def read(X: torch.Tensor) -> None:
        got.append(X)
        raise _Read

    with torch.inference_mode(), eval_mode(model), hooked(model, {point: read}), suppress(_Read):
        model(x)
    return got[0]


def check_dictionary(loaded: LoadedModel, dictionary: Dictionary) -> None:
    """A ValueError unless ``dictionary`` reads a point of the model of its size, and the run reads one stream of
    tokens (a next-token or masked-LM task: its validation split is a text)."""
    model, task = loaded.model, loaded.config.data.task
    if task not in STREAM_TASKS:
        raise ValueError(f"feature dashboards read runs of one stream of tokens ({' or '.join(STREAM_TASKS)}); "
                         f"this run's task is {task}.")
    if dictionary.point_in not in point_names(model):
        raise ValueError(f"this dictionary reads {dictionary.point_in!r}, which this model does not have; it was "
                         f"trained on another kind of model.")
    d = point_activations(model, dictionary.point_in, torch.zeros(1, 1, dtype=torch.long, device=model_device(model)))
    if d.shape[-1] != dictionary.d_in:
        raise ValueError(f"this dictionary reads vectors of {dictionary.d_in} numbers at {dictionary.point_in!r}; "
                         f"this model's are {d.shape[-1]}: it was trained on another model.")


def _sparse(dictionary: Dictionary, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`Dictionary.encode` of X (N, d_in) as its k kept activations and their features, each (N, k): TopK's
    values ReLU'd (0 for one that is not active) without the (N, d_f) tensor of zeros around them."""
    value, feature = dictionary.pre_acts(X.to(dictionary.W_enc)).topk(dictionary.k, dim=-1)
    return value.relu(), feature


def feature_activations(loaded: LoadedModel, dictionary: Dictionary, *, max_tokens: int = MAX_TOKENS,
                        progress: Progress | None = None) -> FeatureActivations:
    """Every feature's activations on the run's validation split (its first ``max_tokens`` tokens), once (see the
    module). A ValueError for a run whose validation split is not one token stream (seq2seq, classification) or a
    dictionary of another model."""
    model = loaded.model
    check_dictionary(loaded, dictionary)
    dataset = validation_dataset(loaded.config, loaded.tokenizer)
    assert isinstance(dataset, StreamDataset)  # as its task's is (`check_dictionary`)
    ids = np.asarray(dataset.stream("val")[:max_tokens]).astype(np.int64)
    T, N = loaded.config.model.l_max, len(ids)
    window_start = np.arange(N) // T * T
    features, wheres, acts = [], [], []
    rows = max(1, ROW_TOKENS // T)
    dev = model_device(model)
    with torch.inference_mode():
        for a in range(0, N, rows * T):
            chunk = ids[a:a + rows * T]
            full = len(chunk) // T * T
            parts = [chunk[:full].reshape(-1, T), chunk[full:][None]] if full < len(chunk) else [chunk.reshape(-1, T)]
            offset = a
            for x in (p for p in parts if p.size):
                X = point_activations(model, dictionary.point_in, torch.from_numpy(x).to(dev)).flatten(0, 1)
                value, feature = _sparse(dictionary, X)
                token, j = value.nonzero(as_tuple=True)
                features.append(feature[token, j].cpu().numpy().astype(np.int32))
                wheres.append((token.cpu().numpy() + offset).astype(np.int32 if N < 2**31 else np.int64))
                acts.append(value[token, j].float().cpu().numpy())
                offset += x.size
            if progress is not None:
                progress(min(a + rows * T, N) / N, "reading the features on the validation split")
    tokens = loaded.tokenizer.token_strings(range(loaded.tokenizer.vocab_size))
    seen = np.flatnonzero(dataset.split_counts()["train"])  # not the specials, whose W_u rows were never trained
    return FeatureActivations(dictionary, lambda i: logit_effects(loaded, dictionary, i, among=seen), tokens, ids,
                              window_start, np.concatenate(features), np.concatenate(wheres), np.concatenate(acts))


_WRITES = re.compile(r"^(embed|self/\d+/(resid_pre|resid_mid|resid_post|out)|mlp/\d+/out|final)$")
_WHY_NOT = ("promoted and suppressed tokens are read for a dictionary that writes into the residual stream of a "
            "pre-LN gpt or gopher")


def logit_effects(loaded: LoadedModel, dictionary: Dictionary, feature: int, n: int = 10,
                  among: np.ndarray | None = None) -> LogitEffects:
    """The ``n`` tokens (of the ids ``among``; None: all) feature ``feature``'s direction raises and lowers most:
    W_u (γ ⊙ (d − mean d)) for its decoder column d (see the module), or empty lists saying why not."""
    cfg, point = loaded.model.config, dictionary.point_out
    if cfg.arch not in ("gpt", "gopher") or cfg.norm_position != "pre" or not _WRITES.match(point):
        return LogitEffects([], [], f"{_WHY_NOT}; this one writes {point!r} of a {cfg.arch}.")
    with torch.no_grad():
        logits, how = _direct(loaded.model, dictionary.W_dec[:, feature].detach().float().cpu(), point == "final")
    ids = torch.arange(len(logits)) if among is None else torch.as_tensor(among, dtype=torch.long)
    logits, k = logits[ids], min(n, len(ids))
    labels = [display_token(t) for t in loaded.tokenizer.token_strings(ids.tolist())]
    up, down = logits.topk(k), (-logits).topk(k)
    if among is not None:
        how += "; among the tokens of the training split"
    return LogitEffects([(labels[i], float(v)) for v, i in zip(up.values.tolist(), up.indices.tolist())],
                        [(labels[i], -float(v)) for v, i in zip(down.values.tolist(), down.indices.tolist())], how)


def _direct(model, d: torch.Tensor, final: bool) -> tuple[torch.Tensor, str]:
    """A pre-LN model's logits' change for d written into its stream (``final``: after its final norm), and how."""
    W_u = model.unembed.W_u.weight.float().cpu()
    if final:
        return W_u @ d, "W_u d: the logits' change per unit of activation"
    norm = model.norm_final
    if norm.kind == "layer":
        d = d - d.mean()
        how = "W_u (γ ⊙ (d − mean d)): through the final layer norm's γ, at unit scale"
    else:
        how = "W_u (γ ⊙ d): through the final RMS norm's γ, at unit scale"
    return W_u @ (d * norm.gamma.detach().float().cpu()), how


def text_activations(loaded: LoadedModel, dictionary: Dictionary, text: str) -> TextActivations:
    """Every feature's activation on each token of ``text``, read as the Prompt tab reads it (`lens.encode`)."""
    model = loaded.model
    check_dictionary(loaded, dictionary)
    x, _ = encode(model, loaded.tokenizer, text)
    X = point_activations(model, dictionary.point_in, torch.tensor([x], device=model_device(model)))
    with torch.no_grad():
        f = dictionary.encode(X.to(dictionary.W_enc))[0].float().cpu().numpy()
    return TextActivations(token_labels(loaded.tokenizer, x), f)


__all__ = ["FeatureStats", "Context", "Histogram", "LogitEffects", "Dashboard", "TextActivations",
           "FeatureActivations", "feature_activations", "logit_effects", "text_activations", "point_activations",
           "check_dictionary", "MAX_TOKENS"]
