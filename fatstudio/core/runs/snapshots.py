"""Weight snapshots: the model's weights at the run's evaluations, so any of them can be loaded again (a head's
necessity followed over training). ``snapshots/step-NNNNNNNN.safetensors`` holds the state dict in float32 (what
training keeps its parameters in: autocast casts copies), with the model's config, the step and the checksum in
the metadata, the same layout as ``model.safetensors`` (`folder.Run.load_weights` reads and verifies both).

``train.keep_weights = "evaluations"`` (the default) writes one at every evaluation, the steps of the probe maps;
``"last"`` writes none (the run keeps its last checkpoint only). Their total is bounded by `CAP_MB`: when every
evaluation's snapshot would not fit, only every 2nd, 4th, … evaluation's is kept (`stride`), and a model whose one
snapshot exceeds the cap keeps none. The gpt-char preset's model (≈0.8 M parameters) takes 3.2 MB a snapshot, 26 MB
for its 8 evaluations.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..files import atomic_write, sealed, step_files, unsealed, why_not_written
from .agreement import weights_metadata

SNAPSHOTS = "snapshots"  # the folder of a run that holds the snapshots
CAP_MB = 2048.0  # the most all of a run's snapshots may take, in MB (10⁶ bytes)


def snapshot_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / SNAPSHOTS / f"step-{step:08d}.safetensors"


def snapshot_bytes(model) -> int:
    """The bytes one float32 snapshot of ``model`` takes (tensors shared by tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for v in model.state_dict().values():
        key = v.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += v.numel() * 4
    return total


def stride(n_bytes: int, steps: int, eval_interval: int, cap_mb: float = CAP_MB) -> int:
    """Every how many evaluations a snapshot is written so that all of ``steps``' fit ``cap_mb``: 1, 2, 4, …;
    0 when one snapshot alone exceeds it."""
    if n_bytes > cap_mb * 1e6:
        return 0
    evaluations, k = math.ceil(steps / eval_interval), 1
    while math.ceil(evaluations / k) * n_bytes > cap_mb * 1e6:
        k *= 2
    return k


def due(step: int, eval_interval: int, every: int) -> bool:
    """Whether the evaluation at ``step`` writes a snapshot (``every``: the `stride`; 0 none). The run's last
    step, evaluated whatever the interval, counts as the evaluation after the one before it."""
    return every > 0 and math.ceil(step / eval_interval) % every == 0


def save_snapshot(run_dir: str | Path, model, step: int, run_id: object = None) -> Path:
    """Write ``model``'s weights (float32; tied tensors once, under their first name) as
    ``snapshots/step-NNNNNNNN.safetensors``, atomically (`files.atomic_write`). A write that fails (a full disk)
    leaves no file and is a ValueError naming the folder."""
    import torch
    from safetensors.torch import save

    path = snapshot_path(run_dir, step)
    metadata = weights_metadata(model, step, run_id)
    tensors, seen = {}, set()
    for name, v in model.state_dict().items():
        key = v.untyped_storage().data_ptr()
        if key not in seen:  # `safetensors.torch.load_model` fills the other names of a shared tensor
            seen.add(key)
            v = v.detach().to("cpu", torch.float32 if v.is_floating_point() else v.dtype)
            tensors[name] = v.contiguous()
    try:
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, sealed(save(tensors, metadata=unsealed(metadata))))  # with its checksum (`files.seal`)
    except OSError as e:
        raise ValueError(f"cannot save the weights of step {step} in {path.parent}: {why_not_written(e, path)}.") from e
    return path


def list_snapshots(run_dir: str | Path) -> dict[int, Path]:
    """The saved snapshots of a run folder, by step, ascending ({} for a run written before them)."""
    return step_files(Path(run_dir) / SNAPSHOTS)


def remove_after(run_dir: str | Path, step: int) -> None:
    """Delete the snapshots after ``step`` (resuming from a checkpoint: training writes them again)."""
    for s, p in list_snapshots(run_dir).items():
        if s > step:
            p.unlink(missing_ok=True)


__all__ = ["SNAPSHOTS", "CAP_MB", "snapshot_path", "snapshot_bytes", "stride", "due", "save_snapshot",
           "list_snapshots", "remove_after"]
