"""The hook points a dictionary is trained on (torch-free: the app lists them on the GUI thread)."""
from __future__ import annotations

# the (B, T, d_e) activations a dictionary is trained on: the residual stream and what its sublayers read and add
# (`hooks`'s list); not q/k/v/z (per head), scores, mask, pattern (per key) nor a norm's statistics (B, T, 2)
STREAM_KINDS = ("resid_pre", "resid_mid", "resid_mid_cross", "resid_post", "in", "out", "sum")
STREAM_POINTS = ("embed", "final")  # and each stack's (enc-embed, dec-final)


def trainable(name: str) -> bool:
    """Whether an SAE may be trained on the hook point ``name``: a (B, T, d_e) activation of the residual stream
    (``STREAM_KINDS`` of a layer, ``STREAM_POINTS`` around the layers)."""
    parts = name.split("/")
    if len(parts) == 1:
        return name.rsplit("-", 1)[-1] in STREAM_POINTS
    return len(parts) == 3 and parts[2] in STREAM_KINDS


__all__ = ["trainable", "STREAM_KINDS", "STREAM_POINTS"]
