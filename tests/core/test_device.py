"""Devices and precisions (core/device.py): what runs where, the one place that moves inputs, random states
that include the GPU's, out-of-memory errors told as words. GPUs are simulated where the machine has none."""
import types

import pytest
import torch

from fatstudio.core import device
from fatstudio.core.config import ModelConfig
from fatstudio.core.costs import memory_estimate


class _FakeTensor:
    """Enough of a CPU tensor for to_device: where it is, whether it is pinned, and how it was copied."""

    def __init__(self, pinned: bool):
        self.device, self.pinned, self.copies = torch.device("cpu"), pinned, []

    def is_pinned(self) -> bool:
        return self.pinned

    def to(self, dev, non_blocking=False):
        self.copies.append((torch.device(dev), non_blocking))
        return self


@pytest.mark.parametrize("target, pinned, asynchronous", [
    ("cuda", True, True), ("cuda", False, False), ("mps", True, False), ("mps", False, False),
])
def test_non_blocking_copies_only_to_cuda_from_pinned_memory(target, pinned, asynchronous):
    t = _FakeTensor(pinned)
    device.to_device({"x": t}, torch.device(target))
    assert t.copies == [(torch.device(target), asynchronous)]


def test_to_device_leaves_tensors_already_there_alone():
    x = torch.zeros(2)
    assert device.to_device({"x": x}, torch.device("cpu"))["x"] is x
    assert device.pin({"x": x}, torch.device("cpu"))["x"] is x  # pinning only for CUDA


def _fake_cuda(monkeypatch, bf16: bool):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16 or including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake GPU")


def test_bf16_only_where_native(monkeypatch):
    _fake_cuda(monkeypatch, bf16=False)
    cuda = torch.device("cuda")
    with pytest.raises(ValueError, match="fp16"):
        device.resolve_precision("bf16", cuda)
    assert device.resolve_precision("auto", cuda) == "fp32"
    assert device.resolve_precision("fp16", cuda) == "fp16"
    _fake_cuda(monkeypatch, bf16=True)
    assert device.resolve_precision("auto", cuda) == "bf16" == device.resolve_precision("bf16", cuda)


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_on_the_cpu_is_bf16_where_native_and_fp16_needs_a_gpu(native, monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    cpu = torch.device("cpu")
    assert device.resolve_precision("auto", cpu) == ("bf16" if native else "fp32")
    assert device.resolve_precision("bf16", cpu) == "bf16"  # emulated where not native: allowed, slower
    with pytest.raises(ValueError, match="needs a GPU"):
        device.resolve_precision("fp16", cpu)


def test_fp32_on_cuda_uses_tf32_matmuls(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_float32_matmul_precision", calls.append)
    device.configure_matmul(torch.device("cuda"), "fp32")
    device.configure_matmul(torch.device("cpu"), "fp32")
    assert calls == ["high"]


def test_the_choice_in_words_says_when_a_seed_does_not_repeat_a_run(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    precision, text = device.describe_choice("cpu", "auto")
    assert precision == "fp32" and "auto → fp32 on the CPU" in text and "same seed → same run" in text
    _fake_cuda(monkeypatch, bf16=True)
    precision, text = device.describe_choice("cuda", "auto")
    assert precision == "bf16" and "Fake GPU" in text and "not bit-for-bit deterministic" in text
    with pytest.raises(ValueError, match="needs a GPU"):
        device.describe_choice("cpu", "fp16")


def test_rng_state_includes_every_gpus_and_is_restored(monkeypatch):
    saved = [torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: saved)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.extend)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    state = device.rng_state(torch.device("cuda"))
    assert torch.equal(state["torch_rng"], torch.get_rng_state())
    device.set_rng_state(state, torch.device("cuda"))
    assert [r.tolist() for r in restored] == [s.tolist() for s in saved]
    device.set_rng_state(device.rng_state(torch.device("cpu")), torch.device("cuda"))  # a CPU run's state
    assert len(restored) == 2  # no GPU state to restore: left alone


@pytest.mark.parametrize("exc, oom", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), True),
    (RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB)"), True),
    (MemoryError(), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
    (ValueError("out of memory"), False),
])
def test_out_of_memory_is_recognised_by_type_and_by_message(exc, oom):
    assert device.is_out_of_memory(exc) is oom


def test_oom_message_names_what_to_lower():
    text = device.oom_message("training at step 3", "cuda")
    assert "out of GPU memory while training at step 3" in text and "batch_size, l_max or d_e" in text


def test_memory_estimate_counts_precision_and_fused_attention():
    learned = ModelConfig(l_max=256, positions="learned")
    fp32, bf16 = memory_estimate(learned, 8, precision="fp32"), memory_estimate(learned, 8, precision="bf16")
    assert bf16["activations"] * 2 == fp32["activations"] and bf16["weights"] == fp32["weights"]
    # fused attention keeps no T×T matrix: doubling T roughly doubles the activations, not quadruples them
    longer = memory_estimate(learned.replace(l_max=512), 8)
    assert longer["activations"] < 2.2 * fp32["activations"]
    relative = memory_estimate(learned.replace(positions="relative"), 8)  # its (B, H, T, T) terms stay
    assert relative["activations"] - fp32["activations"] >= 8 * learned.H * 256 * (256 - 1) * 4 * learned.L
    assert fp32["total"] == sum(fp32[k] for k in ("weights", "gradients", "optimizer", "activations"))


def test_free_memory_empties_the_gpu_cache(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    device.free_memory(torch.device("cuda"))
    assert emptied == [True]


def test_compile_problem_without_a_cpu_compiler(monkeypatch):
    import shutil

    from fatstudio.core import training

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert "C++ compiler" in training.compile_problem(torch.device("cpu"))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    assert training.compile_problem(torch.device("cpu")) is None
    fake_triton = types.SimpleNamespace(has_triton=lambda: False)
    monkeypatch.setitem(__import__("sys").modules, "torch.utils._triton", fake_triton)
    assert "Triton" in training.compile_problem(torch.device("cuda"))
