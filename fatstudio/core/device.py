"""Where tensors live and in what precision: choosing the device and the precision, the one place that moves
inputs to a model's device, random states that include the GPU's, and out-of-memory errors told as words.

CUDA, Apple's MPS and the CPU differ in what they do natively: MPS has no float64, bf16 is native only on
some CUDA GPUs, and ``non_blocking`` copies are safe only from pinned memory to CUDA. The rest of the core
asks here instead of testing for devices itself.
"""
from __future__ import annotations

import gc
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from .config import Device, Precision, ResolvedPrecision

OOM_ADVICE = "lower batch_size, l_max or d_e"


# ---- choosing ---------------------------------------------------------------------------------------------
def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def resolve_device(name: Device) -> torch.device:
    """``"auto"``: CUDA, else MPS, else the CPU. Naming a device that is absent is a ValueError."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("train.device = 'cuda' but no CUDA GPU is available; use 'auto' or 'cpu'.")
    if name == "mps" and not mps_available():
        raise ValueError("train.device = 'mps' but Apple's MPS is not available; use 'auto' or 'cpu'.")
    return torch.device(name)


def bf16_native(device: torch.device) -> bool:
    """Whether ``device`` computes in bf16 natively (emulated bf16 on older GPUs is slower than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "mps":
        try:
            torch.ones(1, dtype=torch.bfloat16, device=device)  # macOS 14 and later
        except (RuntimeError, TypeError):
            return False
        return True
    # the CPU: with AVX-512 BF16 or AMX instructions (elsewhere bf16 autocast works, emulated and slower)
    return any(getattr(torch.cpu, check, lambda: False)() for check in ("_is_avx512_bf16_supported",
                                                                          "_is_amx_tile_supported"))


def resolve_precision(precision: Precision, device: torch.device) -> ResolvedPrecision:
    """The precision a run uses on ``device``: ``"auto"`` is bf16 autocast where the device does bf16
    natively, else fp32 (with TF32 matmuls on CUDA, see `configure_matmul`). On a CPU with AVX-512 BF16 the
    recipe trains 1.5× faster in bf16 (its matrix products run twice as fast; attention stays fp32) at the
    same validation loss (docs/benchmarks.md). An explicit choice the device cannot honour is a ValueError
    that says what to use instead."""
    if precision == "auto":
        return "bf16" if bf16_native(device) else "fp32"
    if precision == "fp16" and device.type == "cpu":
        raise ValueError("train.precision = 'fp16' needs a GPU; on the CPU use 'bf16' or 'fp32'.")
    if precision == "bf16" and device.type != "cpu" and not bf16_native(device):
        raise ValueError(f"train.precision = 'bf16' is not native on this {device.type.upper()} device; "
                         "use 'fp16' (with loss scaling) or 'auto'.")
    return precision


def configure_matmul(device: torch.device, precision: ResolvedPrecision) -> None:
    """fp32 on CUDA multiplies matrices in TF32 (10-bit mantissa, fp32 range): 'high' rather than 'highest'."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if precision == "fp32" else "highest")


def autocast(device: torch.device, precision: ResolvedPrecision) -> AbstractContextManager[Any]:
    """The autocast context of a resolved precision (fp32: none)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """``t`` widened to fp32 when autocast made it half (fp16 or bf16); fp32 and the model's float64 stay as they
    are. Losses, log-probabilities and the maps shown are computed in at least fp32."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def deterministic(device: torch.device) -> bool:
    """Whether the same seed gives the same run bit for bit: on the CPU yes; GPU kernels (atomic adds in the
    backward of embeddings and attention) may sum in a different order each run."""
    return device.type == "cpu"


# ---- moving -----------------------------------------------------------------------------------------------
def model_device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    p = next(model.parameters(), None)
    return p.dtype if p is not None else torch.get_default_dtype()


def to_device(tensors: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every model input goes through here: each tensor moved to ``device``, asynchronously only where that is
    safe (to CUDA from pinned memory; a non_blocking copy from pageable memory to MPS can read freed memory)."""
    out: dict[str, torch.Tensor] = {}
    for k, t in tensors.items():
        if t.device == device:
            out[k] = t
        else:
            asynchronous = device.type == "cuda" and t.device.type == "cpu" and t.is_pinned()
            out[k] = t.to(device, non_blocking=asynchronous)
    return out


def pin(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Page-locked copies of CPU tensors bound for CUDA (so `to_device` copies them without a stall)."""
    if device.type != "cuda":
        return tensors
    return {k: t.pin_memory() if t.device.type == "cpu" else t for k, t in tensors.items()}


# ---- random state -----------------------------------------------------------------------------------------
def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """torch's CPU random state and, on CUDA, every GPU's (dropout draws on the GPU use those)."""
    state = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda_rng"] = torch.stack(torch.cuda.get_rng_state_all())
    elif device.type == "mps":
        state["mps_rng"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state: Mapping[str, torch.Tensor], device: torch.device) -> None:
    """Restore what `rng_state` saved (a GPU state saved on another kind of device is left alone)."""
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"])
    if device.type == "cuda" and "cuda_rng" in state:
        saved = list(state["cuda_rng"])
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)
    elif device.type == "mps" and "mps_rng" in state:
        torch.mps.set_rng_state(state["mps_rng"])


# ---- out of memory ----------------------------------------------------------------------------------------
_OOM_WORDS = ("out of memory", "cublas_status_alloc_failed", "cuda error: out of memory",
              "mps backend out of memory", "failed to allocate", "can't allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, MemoryError, or the plain RuntimeErrors that cuBLAS and MPS allocation
    failures arrive as."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _OOM_WORDS)


def free_memory(device: torch.device | None = None) -> None:
    """Drop what the collector can and hand cached GPU blocks back, so the app stays usable after an OOM."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if mps_available():
        torch.mps.empty_cache()


def oom_message(where: str, device: torch.device | str) -> str:
    """One line for a person: where memory ran out and what to change."""
    kind = "GPU memory" if torch.device(device).type in ("cuda", "mps") else "memory"
    return f"out of {kind} while {where}; {OOM_ADVICE} (or use a smaller model)."


class OutOfMemory(ValueError):
    """Memory ran out while setting a run up; the message says where and what to change."""


def describe_choice(device: Device, precision: Precision) -> tuple[str, str]:
    """The precision training with these settings will use here, and that in words (the Train panel shows
    it); a ValueError if the device or the precision cannot be had."""
    dev = resolve_device(device)
    chosen = resolve_precision(precision, dev)
    where = {"cpu": "the CPU", "mps": "Apple MPS"}.get(dev.type) or torch.cuda.get_device_name(dev)
    what = {"fp32": "fp32" + (" (TF32 matmuls)" if dev.type == "cuda" else ""), "bf16": "bf16 autocast",
            "fp16": "fp16 autocast with loss scaling"}[chosen]
    same = ("same seed → same run" if deterministic(dev) else
            "GPU kernels are not bit-for-bit deterministic, so the same seed gives a close, not identical, run")
    return chosen, f"{'auto → ' if precision == 'auto' else ''}{what} on {where}; {same}."


def cpp_compiler_problem() -> str | None:
    """Why nothing can be compiled for the CPU here (no C++ compiler), or None; without importing torch's
    compiler (a second), for a process that leaves compiling to another."""
    import shutil

    if not any(shutil.which(c) for c in ("c++", "g++", "clang++", "cl")):
        return "torch.compile needs a C++ compiler for the CPU, and none was found"
    return None


def compile_problem(dev: torch.device) -> str | None:
    """Why torch.compile cannot work here, or None: no Dynamo for this Python, no Triton for the GPU (e.g. on
    Windows), no C++ compiler for the CPU (`cpp_compiler_problem`)."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile is not supported on this Python"
    if dev.type == "cuda":
        from torch.utils._triton import has_triton
        if not has_triton():
            return "torch.compile needs Triton for the GPU, and it is not installed"
    return cpp_compiler_problem() if dev.type == "cpu" else None
