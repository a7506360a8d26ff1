"""How good a dictionary is, as the field measures it (Gao et al. 2024; SAELens's evaluations), on held-out tokens:

- explained variance 1 − Σ‖y − ŷ‖² / Σ‖y − ȳ‖² (y the output point's activation, ȳ its mean over the tokens);
- mean L0, the number of active features per token (k for TopK, fewer where some of the k are ≤ 0);
- the dead fraction: features active on none of the tokens;
- the CE loss score (L_zero − L_spliced) / (L_zero − L_clean): the model's loss with the dictionary spliced in
  (an SAE: its point replaced by x̂; a transcoder: the MLP's out replaced by the transcoder of the MLP's in),
  against the clean loss and the loss with the output point zero-ablated. 1: as good as the model; 0: as bad as
  knocking the point out.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ...inference.loaded import LoadedModel
from ...model.hooks import Hook, hooked
from ..ablation import row_losses
from .activations import HeldOut
from .dictionary import Dictionary

CHUNK = 4096  # tokens encoded at once


@dataclass(frozen=True)
class Quality:
    explained_variance: float
    l0: float
    dead_fraction: float
    ce_loss_score: float
    loss_clean: float
    loss_spliced: float
    loss_zero: float
    tokens: int  # the held-out tokens measured on

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (a score that is not a number, None)."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(self).items()}

    def line(self) -> str:
        """"explained variance 0.912 · CE loss score 0.953 · L0 16.0 · dead 1.2% (… on 32,768 held-out tokens)"."""
        score = f"{self.ce_loss_score:.3f}" if math.isfinite(self.ce_loss_score) else \
            "n/a (a loss is not finite)" if not all(map(math.isfinite, (self.loss_spliced, self.loss_zero))) else \
            "n/a (zeroing the point does not change the loss)"
        return (f"explained variance {self.explained_variance:.3f} · CE loss score {score} "
                f"(loss {self.loss_clean:.4f} clean, {self.loss_spliced:.4f} spliced, {self.loss_zero:.4f} zeroed) "
                f"· L0 {self.l0:.1f} · dead {self.dead_fraction:.1%} (all on {self.tokens:,} held-out tokens)")


@torch.no_grad()
def reconstruction_stats(d: Dictionary, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """(explained variance of y by d(x), mean L0, (d_f,) how often each feature was active) over the rows."""
    err = total = l0 = 0.0
    fired = torch.zeros(d.d_f, dtype=torch.long)
    mean = y.double().mean(0)
    for s in range(0, len(x), CHUNK):
        f = d.encode(x[s:s + CHUNK])
        on = f > 0
        yc = y[s:s + CHUNK]
        err += float((d.decode(f) - yc).double().pow(2).sum())
        total += float((yc.double() - mean).pow(2).sum())
        l0 += float(on.sum())
        fired += on.sum(0)
    return 1 - err / max(total, 1e-30), l0 / max(len(x), 1), fired


@torch.inference_mode()
def spliced_loss(loaded: LoadedModel, d: Dictionary, held: HeldOut, how: str) -> float:
    """The mean loss per counted target over the held-out rows: ``how`` "clean", "spliced" (the dictionary's
    output at its out point) or "zero" (the out point zeroed)."""
    seen: list[torch.Tensor] = []

    def read(x: torch.Tensor) -> None:
        seen.append(x)

    def splice(y: torch.Tensor) -> torch.Tensor:
        return d(seen.pop()).to(y.dtype)

    hooks: list[tuple[str, Hook]] = []
    if how == "spliced":
        hooks = [(d.point_in, read), (d.point_out, splice)]
    elif how == "zero":
        hooks = [(d.point_out, torch.zeros_like)]
    total, count = 0.0, 0
    task = loaded.config.data.task
    with hooked(loaded.model, hooks):
        for rows in held.rows:
            ce, n = row_losses(loaded.model, rows, task)
            total, count = total + float(ce.sum()), count + int(n.sum())
    return total / max(count, 1)


def measure(loaded: LoadedModel, d: Dictionary, held: HeldOut) -> Quality:
    """The dictionary's `Quality` on the held-out tokens (its points' activations in ``held.acts``: in, out)."""
    x, y = held.acts[0], held.acts[-1]
    ev, l0, fired = reconstruction_stats(d, x, y)
    clean, spliced, zero = (spliced_loss(loaded, d, held, how) for how in ("clean", "spliced", "zero"))
    gap = zero - clean
    score = (zero - spliced) / gap if abs(gap) > 1e-12 else float("nan")
    return Quality(ev, l0, float((fired == 0).float().mean()), score, clean, spliced, zero, held.n_tokens)


__all__ = ["Quality", "measure", "reconstruction_stats", "spliced_loss"]
