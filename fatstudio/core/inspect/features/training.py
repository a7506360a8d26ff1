"""Training a dictionary (`dictionary.Dictionary`) on a hook point of a run, as Gao et al. 2024 train TopK SAEs:

- activations streamed from the run's train split (`activations.stream`), never all in memory;
- init: W_dec's columns random unit vectors, W_enc = s W_decᵀ (tied, s making the first batches' reconstructions
  as large as the output's deviations from its mean: a transcoder's in and out differ in size), b_dec the output
  point's mean, μ (``mean_in``) the input's mean, b_enc = 0;
- loss: the normalized reconstruction error Σ‖y − ŷ‖² / Σ‖y − ȳ‖² over a batch, plus the AuxK loss that revives
  dead features: the k_aux = d_in/2 largest dead latents reconstruct the error y − ŷ, normalized the same way;
- per kind, a `Recipe` (`RECIPES`): an SAE at lr 10⁻³, AuxK 1/32, dead after 50,000 tokens; a transcoder at lr
  3·10⁻³, AuxK 1/8, dead after 10,000 tokens, its dead features also resampled (Anthropic 2023, `resample`) at 25%,
  50% and 75% of the steps;
- Adam (β = 0.9, 0.999), the learning rate constant then falling linearly to 0 over the last fifth, gradients
  clipped at norm 1; each step removes the part of W_dec's gradient parallel to its columns and renormalizes the
  columns after the step.

`train_dictionary` is a generator of `DictionaryEvent`s (at most ~10 a second), the last one (``kind == "done"``)
carrying the trained dictionary with its `quality.Quality` on held-out validation tokens in ``info["quality"]``.
Stopping: a ``control`` with a ``stopping`` property (the trainer's `training.Control`) ends the training at the
next step, the dictionary then measured and handed over as trained so far; closing the generator (what the job
system does to a cancelled job) ends it at once.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn.functional as F

from ...inference.loaded import LoadedModel
from ...model.hooks import hook_point
from .activations import held_out, run_data, stream
from .dictionary import Dictionary, points_of
from .quality import Quality, measure


@dataclass(frozen=True)
class Recipe:
    """How a kind of dictionary is trained: Adam's learning rate, when a feature counts as dead (not active for
    ``dead_tokens`` training tokens), AuxK's coefficient, and the fractions of the steps at which dead features are
    resampled (`resample`; none: AuxK alone). Measured on gpt-char (bench/bench_features.py): a transcoder needs the
    higher rate for its CE loss score, and resampling with it to keep features alive; the residual stream's SAE
    loses features at that rate, and keeps them at 10⁻³ with AuxK alone."""

    lr: float
    dead_tokens: int
    aux_coeff: float
    resample_at: tuple[float, ...]


RECIPES = {"sae": Recipe(1e-3, 50_000, 1 / 32, ()), "transcoder": Recipe(3e-3, 10_000, 1 / 8, (0.25, 0.5, 0.75))}
DECAY_FRACTION = 0.2  # the last fifth of the steps: the learning rate falls linearly to 0
INIT_BATCHES = 4  # the batches whose means give b_dec and μ
EVENT_INTERVAL_S = 0.1

EventKind = Literal["progress", "measuring", "done"]


class Stopping(Protocol):
    """What asks a training to stop (`training.Control` is one)."""

    @property
    def stopping(self) -> bool: ...


@dataclass(frozen=True)
class DictionaryEvent:
    """One report of `train_dictionary`: ``progress`` (the fraction of the tokens seen and the last batch's loss,
    explained variance, L0 and the fraction of features dead so far), ``measuring`` (training over, the quality
    being measured) and ``done`` (``dictionary`` and its ``quality``; ``stopped`` if a control ended it early)."""

    kind: EventKind
    fraction: float
    tokens: int
    step: int
    loss: float
    explained_variance: float
    l0: float
    dead_fraction: float
    dictionary: Dictionary | None = None
    quality: Quality | None = None
    stopped: bool = False


def train_dictionary(loaded: LoadedModel, point: str, *, d_f_mult: int = 8, k: int = 16, tokens: int = 1_000_000,
                     batch_tokens: int = 4096, lr: float | None = None, seed: int = 0, held_out_tokens: int = 32_768,
                     control: Stopping | None = None) -> Iterator[DictionaryEvent]:
    """Train a dictionary on ``point`` of ``loaded`` (`dictionary.points_of`: an MLP such as ``mlp/1`` a
    transcoder, any other hook point an SAE) with d_f = ``d_f_mult`` · d_in features, TopK ``k``, on ``tokens``
    training tokens in batches of ``batch_tokens``, by its kind's `Recipe` (``lr`` None: the recipe's); ``seed`` draws
    the init and the batches. A ValueError for a point the model does not have or sizes out of range, before any
    work."""
    kind, p_in, p_out = points_of(point)
    recipe = RECIPES[kind]
    lr = recipe.lr if lr is None else lr
    for name in dict.fromkeys((p_in, p_out)):
        hook_point(loaded.model, name)
    for name, value, lo in (("d_f_mult", d_f_mult, 1), ("k", k, 1), ("tokens", tokens, 1),
                            ("batch_tokens", batch_tokens, 1), ("held_out_tokens", held_out_tokens, 1)):
        if int(value) != value or value < lo:
            raise ValueError(f"{name} = {value!r} must be a whole number ≥ {lo}.")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr = {lr!r} must be a number > 0.")
    points = [p_in] if kind == "sae" else [p_in, p_out]
    data = run_data(loaded)
    g = torch.Generator().manual_seed(seed)
    batches = stream(loaded, data, points, batch_tokens, g)
    first = [next(batches) for _ in range(INIT_BATCHES)]
    d_in, d_out = first[0][0].shape[1], first[0][-1].shape[1]
    if not k <= d_f_mult * d_in:
        raise ValueError(f"k = {k} must be at most d_f = {d_f_mult * d_in} ({d_f_mult} × {d_in}).")
    steps = max(1, math.ceil(tokens / batch_tokens))
    d = Dictionary(kind, p_in, p_out, d_in, d_out, d_f_mult * d_in, k)
    with torch.no_grad():
        d.W_dec.copy_(torch.randn(d_out, d.d_f, generator=g))
        d.normalize_decoder()
        x0, y0 = torch.cat([b[0] for b in first]), torch.cat([b[-1] for b in first])
        d.b_dec.copy_(y0.mean(0))
        d.mean_in.copy_(x0.mean(0))
        d.W_enc.copy_(d.W_dec.T)  # then scaled: the first batches' reconstructions as large as the output's spread
        spread = (y0 - d.b_dec).norm(dim=1).mean() / (d(x0) - d.b_dec).norm(dim=1).mean().clamp_min(1e-12)
        d.W_enc.mul_(spread)
    opt = torch.optim.Adam(d.parameters(), lr=lr, betas=(0.9, 0.999), eps=6.25e-10)
    decay_from = int(steps * (1 - DECAY_FRACTION))
    since = torch.zeros(d.d_f, dtype=torch.long)  # tokens since each feature was last active
    k_aux = max(1, d_in // 2)
    last, stopped, step, seen = -math.inf, False, 0, 0
    loss = ev = l0 = 0.0
    resample_at = {int(steps * f) for f in recipe.resample_at} - {0}
    for step in range(1, steps + 1):
        batch = first.pop(0) if first else next(batches)
        x, y = batch[0], batch[-1]  # (N, d_in), (N, d_out): an SAE's are one tensor
        if step in resample_at:
            resample(d, opt, x, y, since >= recipe.dead_tokens, g)
            since[since >= recipe.dead_tokens] = 0
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (steps - step + 1) / max(1, steps - decay_from))
        dead = since >= recipe.dead_tokens
        main, total, values, at = losses(d, x, y, dead, k_aux, recipe.aux_coeff)
        opt.zero_grad(set_to_none=True)
        total.backward()
        with torch.no_grad():
            assert d.W_dec.grad is not None
            d.W_dec.grad -= (d.W_dec.grad * d.W_dec).sum(0) * d.W_dec  # no change along the unit columns
        torch.nn.utils.clip_grad_norm_(d.parameters(), 1.0)
        opt.step()
        d.normalize_decoder()
        on = values > 0
        since += len(x)
        since[at[on]] = 0
        seen += len(x)
        loss = float(main.detach())
        ev, l0 = 1 - loss, float(on.sum(1).float().mean())
        stopped = control is not None and control.stopping
        now = time.monotonic()
        if now - last >= EVENT_INTERVAL_S or step == steps or stopped:
            last = now
            yield DictionaryEvent("progress", step / steps, seen, step, loss, ev, l0, float(dead.float().mean()))
        if stopped:
            break
    d.requires_grad_(False)
    dead_now = float((since >= recipe.dead_tokens).float().mean())
    yield DictionaryEvent("measuring", step / steps, seen, step, loss, ev, l0, dead_now)
    quality = measure(loaded, d, held_out(loaded, data, points, held_out_tokens, seed))
    d.info.update(run=loaded.label, step=loaded.step, quality=quality.to_dict(), training={
        "tokens": seen, "steps": step, "batch_tokens": batch_tokens, "lr": lr, "seed": seed, "stopped": stopped,
        "optimizer": "Adam (0.9, 0.999), lr constant then linear to 0 over the last 20%, grad clip 1",
        "dead_revival": f"AuxK (Gao et al. 2024): k_aux = {k_aux} dead latents reconstruct the residual error, "
                        f"coefficient 1/{round(1 / recipe.aux_coeff)}; dead = not active for {recipe.dead_tokens:,} "
                        "tokens" + (f"; plus resampling (Anthropic 2023) of the dead features at "
                                    f"{', '.join(f'{f:.0%}' for f in recipe.resample_at)} of the steps toward tokens "
                                    "drawn by squared reconstruction error" if recipe.resample_at else ""),
        "init": "W_dec columns random unit, W_enc = s W_dec^T (s: first reconstructions' size), "
                "b_dec = mean of the output, mean_in = mean of the input"})
    yield DictionaryEvent("done", step / steps, seen, step, loss, ev, l0, dead_now, d, quality, stopped)


@torch.no_grad()
def resample(d: Dictionary, opt: torch.optim.Adam, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor,
             g: torch.Generator) -> None:
    """Anthropic's (2023) resampling: each ``dead`` feature restarts on a token drawn with probability ∝ its
    squared reconstruction error: W_dec's column the error's direction, W_enc's row the token's centred input
    scaled to the live rows' mean norm, b_enc 0, and Adam's moments for them zeroed."""
    n = int(dead.sum())
    if n == 0:
        return
    err = y - d(x)
    rows = torch.multinomial(err.pow(2).sum(1) + 1e-12, n, replacement=n > len(x), generator=g)
    j = torch.nonzero(dead).flatten()
    d.W_dec[:, j] = F.normalize(err[rows], dim=1).T
    scale = d.W_enc[~dead].norm(dim=1).mean() if (~dead).any() else 1.0
    d.W_enc[j] = F.normalize(x[rows] - d.mean_in, dim=1) * scale
    d.b_enc[j] = 0
    for param, index in ((d.W_dec, (slice(None), j)), (d.W_enc, j), (d.b_enc, j)):
        for moment in opt.state.get(param, {}).values():
            if moment.dim() > 0:
                moment[index] = 0


def losses(d: Dictionary, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor, k_aux: int,
           aux_coeff: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the normalized reconstruction error, it plus the AuxK loss, the TopK values (N, k) ReLU'd and their
    features (N, k)) of a batch; decoding only the k features of each token (`sparse_decode`)."""
    pre = d.pre_acts(x)
    values, at = pre.topk(d.k, dim=-1)
    values = values.relu()
    err = sparse_decode(d, values, at) + d.b_dec - y
    main = err.pow(2).sum() / (y - y.mean(0)).pow(2).sum().clamp_min(1e-12)
    if not dead.any():
        return main, main, values.detach(), at
    e = -err.detach()  # what the live features left unexplained
    aux_values, aux_at = pre.masked_fill(~dead, -math.inf).topk(min(k_aux, int(dead.sum())), dim=-1)
    aux = (sparse_decode(d, aux_values.relu(), aux_at) - e).pow(2).sum() / (e - e.mean(0)).pow(2).sum().clamp_min(1e-12)
    return main, main + aux_coeff * aux, values.detach(), at


def sparse_decode(d: Dictionary, values: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """W_dec f without b_dec, for f given by its nonzero ``values`` at features ``at`` (N, k): k columns a token."""
    return F.embedding_bag(at, d.W_dec.T, per_sample_weights=values, mode="sum")


__all__ = ["train_dictionary", "DictionaryEvent", "Stopping", "Recipe", "RECIPES"]
