"""Export a dictionary to SAELens's folder format (sae_lens 6: ``cfg.json`` and ``sae_weights.safetensors``), which
``sae_lens.SAE.load_from_disk`` loads as a TopK SAE ("topk" architecture).

SAELens's TopK SAE, with ``apply_b_dec_to_input`` off, encodes f = TopK(ReLU(x W_enc + b_enc)) and decodes
x̂ = f W_dec + b_dec, W_enc (d_in, d_sae) and W_dec (d_sae, d_in): fatstudio's maps transposed, its mean μ folded
into the encoder's bias (b_enc − W_enc μ). A transcoder is written the same way (d_in = d_out = d_e here):
SAELens's own transcoder classes use ReLU, not TopK, so the "topk" SAE is the one that computes the same map; its
output point is named in the metadata's ``hook_name_out``.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ...files import atomic_write, why_not_written
from .dictionary import Dictionary

CONFIG, WEIGHTS = "cfg.json", "sae_weights.safetensors"


def saelens_tensors(d: Dictionary) -> dict[str, torch.Tensor]:
    """W_enc (d_in, d_sae), b_enc (d_sae,) with μ folded in, W_dec (d_sae, d_out), b_dec (d_out,); float32."""
    with torch.no_grad():
        t = {"W_enc": d.W_enc.T, "b_enc": d.b_enc - d.W_enc @ d.mean_in, "W_dec": d.W_dec.T, "b_dec": d.b_dec}
        return {name: v.detach().to("cpu", torch.float32).contiguous() for name, v in t.items()}


def saelens_config(d: Dictionary) -> dict:
    if d.d_in != d.d_out:
        raise ValueError(f"SAELens's TopK SAE maps d_in to d_in; this dictionary maps {d.d_in} to {d.d_out}.")
    return {"architecture": "topk", "d_in": d.d_in, "d_sae": d.d_f, "k": d.k, "dtype": "float32", "device": "cpu",
            "apply_b_dec_to_input": False, "normalize_activations": "none", "reshape_activations": "none",
            "rescale_acts_by_decoder_norm": False,
            "metadata": {"sae_lens_version": "6.0.0", "sae_lens_training_version": "6.0.0",
                         "hook_name": d.point_in, "hook_name_out": d.point_out, "model_name": str(d.info.get("run", "")),
                         "model_class_name": "fatstudio", "context_size": None, "prepend_bos": False,
                         "fatstudio": {"kind": d.kind, "step": d.info.get("step"), "quality": d.info.get("quality")}}}


def export(d: Dictionary, folder: str | Path) -> Path:
    """Write ``d`` to ``folder`` (made if missing) in SAELens's format; a ValueError naming the folder if it cannot
    be written."""
    from safetensors.torch import save

    folder = Path(folder)
    config = saelens_config(d)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / WEIGHTS, save(saelens_tensors(d)))
        atomic_write(folder / CONFIG, json.dumps(config, indent=1, allow_nan=False))
    except OSError as e:
        raise ValueError(f"cannot write the SAELens folder {folder}: {why_not_written(e, folder)}.") from e
    return folder


__all__ = ["export", "saelens_tensors", "saelens_config", "CONFIG", "WEIGHTS"]
