"""The decode step compiled ahead of time (AOTInductor) for the CPU, in a child process: Algorithm 14's forward
over a static KV cache (`model.attention.StaticKVCache`), exported once per model shape and length T.

Compiling takes tens of seconds of Dynamo and inductor in Python. In the app's own process that thread takes the
GIL from the GUI and from an eager generation at every tensor operation (a generation beside it ran at 27
instead of 838 tokens/s), so a child process does it (`aot_compile`), at the lowest CPU priority, and this
process only loads what it wrote (milliseconds). The weights are not in the package: it runs on the loaded
model's own tensors (user-managed constants, no copy), so one package serves every model of that shape (each
snapshot, each run, the next session's) and it is kept in the cache folder (``decode``), keyed by the model's
config, the dtype, the lengths and torch's version: an entry of `cache`, made in a hidden work folder then
renamed, marked used when loaded, and bounded with the token files by ``$FATSTUDIO_CACHE_MB`` (the least
recently used go first; a compile prunes the cache). The KV cache's tensors and the position are inputs, written
in place, so the graph of a token and that of the refilled window share them. One-token matrix products are
decomposed into fused loops (inductor's ``decompose_mm_pass``: on the CPU a library call costs more than a
1 × d_e product), which halves the step of a small model.

    python -m fatstudio.core.inference.decode_export REQUEST.json OUT_FOLDER    (what `aot_compile` runs)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from ..cache import DECODE, mark_used, prune, work_folder
from ..children import start, watch_parent
from ..config import ModelConfig
from ..device import model_device, model_dtype
from ..model import Transformer, build_model
from ..model.attention import StaticKVCache

FORMAT = 1  # of a package folder; part of its key
OPTIONS = {"aot_inductor.package_constants_in_so": False,  # the weights come from the loaded model
           "post_grad_fusion_options": {"decompose_mm_pass": {}}}
REQUEST = "request.json"
POLL_S = 0.1  # how often a compile checks whether it was cancelled


class CompileCancelled(Exception):
    """The compile was cancelled (`aot_compile`'s ``cancel``): its child was killed, nothing was kept."""


class ExportedStep(nn.Module):
    """What is exported: logits (1, T, N_V) of x (1, T) at ``position``, each layer's k and v written into ``kv``
    (k₁, v₁, k₂, v₂, … in the cache's layer order) at the position, which advances by T."""

    def __init__(self, model: Transformer, layers: Sequence[str]):
        super().__init__()
        self.model, self.layers = model, list(layers)

    def forward(self, x: torch.Tensor, position: torch.Tensor, *kv: torch.Tensor) -> torch.Tensor:
        slots = {name: (kv[2 * i], kv[2 * i + 1]) for i, name in enumerate(self.layers)}
        return self.model(x, cache=StaticKVCache.over(position, slots))


def allocated_cache(model: Transformer) -> StaticKVCache:
    """A static cache with its slots allocated (one token through the model), as ordinary tensors: inference
    tensors could not be written in place by the exported graph outside inference mode."""
    cache = StaticKVCache(model_device(model))
    with torch.no_grad():
        model(torch.zeros((1, 1), dtype=torch.long, device=cache.position.device), cache=cache)
    return cache.reset()


def _flat(cache: StaticKVCache) -> list[torch.Tensor]:
    return [t for k, v in cache.tensors().values() for t in (k, v)]


def package_key(cfg: ModelConfig, dtype: torch.dtype, lengths: Sequence[int]) -> str:
    """The cache key of a model shape's packages, on this kind of CPU (a cache folder shared by machines); not of
    its dropout, which the exported (eval) step leaves out."""
    what = {"model": cfg.replace(dropout=0.0).to_dict(), "dtype": str(dtype), "lengths": sorted(lengths),
            "torch": torch.__version__, "cpu": [platform.machine(), torch.backends.cpu.get_cpu_capability()],
            "format": FORMAT}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]


def package_path(folder: Path, T: int) -> Path:
    return folder / f"step-{T}.pt2"


def export_packages(cfg: ModelConfig, dtype: torch.dtype, lengths: Sequence[int], out: Path) -> None:
    """Export and compile one package per length into ``out`` (the child's work; the weights are random and unused)."""
    model = build_model(cfg).to(dtype).eval()
    cache = allocated_cache(model)
    step = ExportedStep(model, list(cache.tensors()))
    for T in lengths:
        x = torch.zeros((1, T), dtype=torch.long)
        with torch.no_grad():
            program = torch.export.export(step, (x, cache.position, *_flat(cache)), strict=False)
        torch._inductor.aoti_compile_and_package(program, package_path=str(package_path(out, T)),
                                                 inductor_configs=OPTIONS)


def _constants(model: Transformer) -> dict[str, torch.Tensor]:
    """The model's parameters and buffers under their names in `ExportedStep` (tied ones under each name)."""
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {f"model.{name}": t for name, t in named}


def load_steps(folder: Path, model: Transformer, cache: StaticKVCache,
               lengths: Sequence[int]) -> dict[int, Callable[[torch.Tensor], torch.Tensor]]:
    """The packages of ``folder``, run on ``model``'s own tensors and ``cache``'s: T -> step(x (1, T)).

    They are loaded by torch's C++ loader itself: its Python wrapper (torch._inductor.aoti_load_package) would
    import the compiler (~1 s, where the command line loads a package in milliseconds) and re-read the call's
    signature at each call (~0.25 ms of a ~0.2 ms step)."""
    constants, kv = _constants(model), _flat(cache)
    steps: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
    for T in lengths:
        loader = torch._C._aoti.AOTIModelPackageLoader(str(package_path(folder, T)), "model", False, 1, -1)
        names = loader.get_constant_fqns()
        missing = [n for n in names if n not in constants]
        if missing:
            raise RuntimeError(f"the compiled step wants weights the model does not have ({missing[0]})")
        used = {n: constants[n] for n in names}
        loader.load_constants(used, False, True, True, False)  # user-managed: the model's memory, no copy
        steps[T] = _Bound(loader, cache.position, kv, used)
    return steps


class _Bound:
    """The step of one package: the loader runs x (1, T) at the cache's position on its k and v. It keeps the
    tensors the loader points into (``used``) alive, even if the model were to replace one (a cast re-derives
    its fixed tables)."""

    def __init__(self, loader: torch._C._aoti.AOTIModelPackageLoader, position: torch.Tensor,
                 kv: list[torch.Tensor], used: dict[str, torch.Tensor]):
        self.loader, self.position, self.kv, self.used = loader, position, kv, used

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.loader.boxed_run([x, self.position, *self.kv])[0]


def _compile_in_child(cfg: ModelConfig, dtype: torch.dtype, lengths: Sequence[int], folder: Path,
                      cancel: threading.Event | None = None) -> None:
    """Run this module in a child process to fill ``folder`` (made whole, or not at all); RuntimeError with the
    child's last line if it fails; `CompileCancelled` (the child killed) within `POLL_S` of ``cancel`` being set."""
    with work_folder(DECODE, folder.name) as work:  # removed unless renamed into place
        request = {"model": cfg.to_dict(), "dtype": str(dtype).removeprefix("torch."), "lengths": list(lengths)}
        (work / REQUEST).write_text(json.dumps(request), encoding="utf-8")
        with start([__name__, str(work / REQUEST), str(work)], env={"OMP_NUM_THREADS": "1"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:  # it dies with this process
            while True:
                try:
                    _, err = child.communicate(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if cancel is not None and cancel.is_set():
                        child.kill()  # a compile has nothing to save; its work folder is removed
                        child.communicate()
                        raise CompileCancelled from None
        if child.returncode != 0:
            lines = err.strip().splitlines() or [f"exit code {child.returncode}"]
            raise RuntimeError(f"in a child process, {lines[-1]}")
        with contextlib.suppress(OSError):  # another process may have put the same packages there first
            work.rename(folder)


def _folder(model: Transformer, lengths: Sequence[int]) -> Path:
    return DECODE.root() / package_key(model.config, model_dtype(model), lengths)


def _load_cached(model: Transformer, cache: StaticKVCache,
                 lengths: Sequence[int]) -> dict[int, Callable[[torch.Tensor], torch.Tensor]]:
    """`load_steps` of the packages of ``model``'s shape in the cache folder, which are marked used now."""
    folder = _folder(model, lengths)
    steps = load_steps(folder, model, cache, lengths)
    mark_used(DECODE, folder)
    return steps


def is_cached(model: Transformer, lengths: Sequence[int]) -> bool:
    """Whether the cache folder has the packages of ``model``'s shape."""
    return all(package_path(_folder(model, lengths), T).is_file() for T in lengths)


def cached_steps(model: Transformer, cache: StaticKVCache,
                 lengths: Sequence[int]) -> dict[int, Callable[[torch.Tensor], torch.Tensor]] | None:
    """The steps of ``model`` over ``cache`` (allocated: `allocated_cache`) from the packages of its shape in the
    cache folder (marked used), or None if they are not there."""
    return _load_cached(model, cache, lengths) if is_cached(model, lengths) else None


def aot_compile(model: Transformer, cache: StaticKVCache, lengths: Sequence[int],
                cancel: threading.Event | None = None) -> dict[int, Callable[[torch.Tensor], torch.Tensor]]:
    """The steps compiled in a child process into the cache folder, then loaded as `cached_steps` loads them; the
    cache is then pruned to its bound (`cache.prune`), never of these packages. Setting ``cancel`` kills the child
    (`CompileCancelled`)."""
    _compile_in_child(model.config, model_dtype(model), lengths, _folder(model, lengths), cancel)
    steps = _load_cached(model, cache, lengths)
    prune(keep=_folder(model, lengths))
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    """The child: export the packages a request asks for, at the lowest CPU priority; it ends if its parent does."""
    watch_parent()
    request_file, out = argv if argv is not None else sys.argv[1:]
    with contextlib.suppress(AttributeError, OSError):
        os.nice(19)
    request = json.loads(Path(request_file).read_text(encoding="utf-8"))
    export_packages(ModelConfig.from_dict(request["model"]), getattr(torch, request["dtype"]), request["lengths"],
                    Path(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
