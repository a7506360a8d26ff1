"""The logit lens and the direct logit attribution of token ids, measured for a probe file at each evaluation
(and for the Attention panel's text): `lens.lens_probs` once, then `lens.attribute` at every position, into
a `saved_lens.SavedLens` (see there for what is kept)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ..device import model_device
from .attribution import attribute_positions
from .lens import check_attributable, lens_probs
from .saved_lens import SavedAttribution, SavedLens

if TYPE_CHECKING:
    from ..data.tokenization import TokenizerLike


ATTRIBUTED = 8  # a probe file's attributed positions, the last ones (one forward pass each: ≤ 10% of an evaluation)


def measure(model, tokenizer: TokenizerLike, ids: list[int], context_ids: list[int] | None = None,
            attributed: int | None = ATTRIBUTED) -> SavedLens:
    """The lens of ``ids`` (an edt's decoder ids, read given the encoder's ``context_ids``) and the attribution
    of the last ``attributed`` positions' targets (None: every position's; the target: the next token, at the
    last position the model's top token), or why the model's output cannot be split."""
    dev = model_device(model)
    x = torch.tensor([list(ids)], device=dev)
    z = None if context_ids is None else torch.tensor([list(context_ids)], device=dev)
    probs, out = lens_probs(model, x, z)
    p, top = probs.max(-1)  # (L+1, T)
    top_ids, T = top.cpu().numpy().astype(np.int64), len(ids)
    flat = tokenizer.token_strings(top_ids.ravel().tolist())
    predicts_next = model.config.arch != "bert"
    saved = SavedLens(tokenizer.token_strings(list(ids)), top_ids, p.cpu().numpy(),
                      [flat[r * T:(r + 1) * T] for r in range(len(top_ids))], predicts_next,
                      None if context_ids is None else tokenizer.token_strings(list(context_ids)))
    try:
        check_attributable(model, z)
    except ValueError as e:
        saved.refused = str(e)
        return saved
    own = out.argmax(-1).tolist()
    shift = 1 if predicts_next else 0
    positions = list(range(0 if attributed is None else max(0, T - attributed), T))
    targets = [int(ids[t + shift]) if t + shift < T else int(own[t]) for t in positions]
    found = attribute_positions(model, x, positions, targets, z)  # one forward pass for them all
    names = list(found[0].parts)
    saved.attribution = SavedAttribution(np.asarray(positions, np.int64), np.asarray(targets, np.int64),
                                         tokenizer.token_strings(targets), np.asarray([t + shift < T for t in positions]),
                                         np.asarray([a.logit for a in found]),
                                         names, np.asarray([[a.parts[n] for n in names] for a in found]))
    return saved


__all__ = ["measure", "ATTRIBUTED"]
