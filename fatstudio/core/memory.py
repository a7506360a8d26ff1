"""Whether a model and its batch fit in memory, asked before anything is allocated: Linux often kills a process
that runs out rather than raising, so finding out afterwards is too late. The need is the Model panel's
estimate (`costs.memory_estimate`: weights, gradients, optimizer state and the activations at this batch and
ℓ_max); the memory free is the RAM the kernel says is available (less under a cgroup limit) or, on CUDA, the
GPU's free memory. ``FATSTUDIO_IGNORE_MEMORY=1`` (``--force-memory``, the app's "Train anyway") skips the check.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import ModelConfig, Optimizer, ResolvedPrecision
from .costs import memory_estimate
from .environment import IGNORE_MEMORY
from .files import human_bytes

IGNORE_ENV = IGNORE_MEMORY.name
OVERRIDE = f"--force-memory or {IGNORE_ENV}=1"


class DoesNotFit(ValueError):
    """The estimate of what a model needs is more than the memory available; the message has both."""


def _read_int(path: str | Path) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def ram_available() -> int | None:
    """Bytes of RAM a new allocation can have: /proc/meminfo's MemAvailable, less under a cgroup's limit (v2's
    memory.max, v1's limit_in_bytes) minus what the cgroup uses already; None where neither can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:
            found.append(max(0, cap - used))
    return min(found) if found else None


def device_available(device: Any) -> int | None:
    """Bytes free where a model would go: the RAM on "cpu" (and "mps", which shares it), the GPU's free memory
    on "cuda" (torch's caching allocator's free blocks not counted)."""
    kind = str(device).split(":")[0]
    if kind != "cuda":
        return ram_available()
    import torch  # only asked about a CUDA device, so torch is loaded already

    index = None if isinstance(device, str) else device.index
    if index is None and ":" in str(device):
        index = int(str(device).split(":")[1])
    return int(torch.cuda.mem_get_info(index if index is not None else torch.cuda.current_device())[0])


def needs(model: ModelConfig, batch_size: int, *, training: bool = True, optimizer: Optimizer = "adamw",
          precision: ResolvedPrecision = "fp32") -> dict[str, int]:
    """The estimate: for training `costs.memory_estimate`; for using a model (prompting, inspecting,
    exporting) its weights and the activations of one sequence, no gradients nor optimizer state."""
    est = memory_estimate(model, batch_size, optimizer, precision)
    if not training:
        est = {"weights": est["weights"], "gradients": 0, "optimizer": 0, "activations": est["activations"],
               "total": est["weights"] + est["activations"]}
    return est


def check_fits(model: ModelConfig, batch_size: int = 1, where: Any = "cpu", *, training: bool = True,
               optimizer: Optimizer = "adamw", precision: ResolvedPrecision = "fp32",
               what: str = "training this model") -> None:
    """Raise `DoesNotFit` if ``model`` at ``batch_size`` (and its ℓ_max) needs more than ``where`` (a device or
    its name) has free, before anything is built. Weights are made in RAM and then moved, so a CUDA device's
    RAM must hold the weights too. Nothing is checked where the memory free cannot be read, or with
    ``FATSTUDIO_IGNORE_MEMORY=1``. Cheap: arithmetic on the config and a file or two read."""
    if IGNORE_MEMORY.value():
        return
    est = needs(model, batch_size, training=training, optimizer=optimizer, precision=precision)
    on_gpu = str(where).startswith("cuda")
    for need, free, name in ((est["total"], device_available(where), "GPU memory" if on_gpu else "RAM"),
                             (est["weights"] if on_gpu else 0, ram_available() if on_gpu else None, "RAM")):
        if free is None or need <= free:
            continue
        parts = [f"weights {human_bytes(est['weights'])}"]
        if training:
            parts += [f"gradients {human_bytes(est['gradients'])}", f"optimizer state {human_bytes(est['optimizer'])}"]
        parts.append(f"activations at batch {batch_size} and l_max {model.l_max} {human_bytes(est['activations'])}")
        raise DoesNotFit(f"{what} needs about {human_bytes(need)} ({', '.join(parts)}), but only "
                         f"{human_bytes(free)} of {name} is free; lower d_e, d_mlp, L, l_max or batch_size "
                         f"(or use {OVERRIDE} to try anyway).")
