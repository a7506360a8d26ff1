"""A run folder's weights (`folder.Run` has them through `RunWeights`): the checkpoint, ``model.safetensors``
with the optimizer state ``optimizer.pt`` beside it, written together, the snapshots at each evaluation
(`snapshots`), and the model loaded from either, checked against the run's other files (`agreement`).

Every weight file carries a checksum that loading verifies: a safetensors file its header's ``data_sha256``
(`files.seal`, `files.verify`), ``optimizer.pt`` a ``sha256`` entry, the digest of everything else it holds
(`state_digest`). A file that fails is refused by name (`files.Damaged`), saying which of the run's other weights
still load; the run stays listed and its other files usable. Runs of a format before `CHECKSUMMED` (written by an
older fatstudio) have none: they load unverified (`unverified` says so), never refused for it."""
from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import Damaged, os_error_in, regular_file, seal, unsealed, verify, why_not_written
from ..inference.loaded import LoadedModel
from ..memory import check_fits
from ..temporary import made_beside
from . import agreement, snapshots

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..records import RunMeta

CONFIG, META, TOKENIZER, METRICS, SAMPLES = "config.json", "meta.json", "tokenizer.json", "metrics.jsonl", "samples.jsonl"
WEIGHTS, OPTIMIZER = "model.safetensors", "optimizer.pt"
WEIGHT_DTYPES = ("float32", "bfloat16")  # what a run's model is kept in: meta.json's dtype (an import's --dtype)
CHECKSUMMED = 2  # the run format (meta.json's format_version) from which every weight file carries a checksum
STATE_SUM = "sha256"  # optimizer.pt's entry: `state_digest` of the rest


def state_digest(obj: Any) -> str:
    """The SHA-256 of a training state as `torch.save` stores it (dicts, lists, tuples, tensors, numbers, strings):
    every tensor's dtype, shape and bytes, every other value's repr, in order; the same after a save and a load."""
    import torch

    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(x.shape)};".encode())
            h.update(t.view(torch.uint8).numpy().data if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(f"D{len(x)};".encode())
            for k in x:
                h.update(f"{k!r}:".encode())
                walk(x[k])
        elif isinstance(x, (list, tuple)):
            h.update(f"L{len(x)};".encode())
            for v in x:
                walk(v)
        else:
            h.update(f"{x!r};".encode())

    walk(obj)
    return h.hexdigest()


class RunWeights:
    """The weights of a run folder: saved, listed and loaded."""

    path: Path
    config: RunConfig
    meta: dict
    if TYPE_CHECKING:  # given by `folder.Run`
        @property
        def name(self) -> str: ...
        @property
        def info(self) -> RunMeta: ...
        def write_meta(self, **updates) -> None: ...
        def check_agreement(self): ...

    @property
    def has_checkpoint(self) -> bool:
        return (self.path / WEIGHTS).exists()

    def resume_problem(self, total_steps: int | None = None) -> str | None:
        """Why the run cannot be continued (up to ``total_steps``), in words, or None."""
        if not self.has_checkpoint:
            return f"{self.path} has no checkpoint to resume from; start a new run instead."
        upto = self.info.checkpoint_step
        if total_steps is not None and total_steps <= upto:
            return f"{self.name} is already at step {upto}; resume to a larger number of steps."
        return None

    # -- checkpoints -----------------------------------------------------------------------------------------
    def save_checkpoint(self, model, optimizer, step: int, state: dict) -> None:
        """Weights (safetensors, with the model's config in their metadata) and optimizer/RNG state (torch
        tensors and numbers only; an ``optimizer`` of None: the weights alone, as an import saves them), each
        written to a temporary file and renamed into place; both carry ``step`` so a mismatch after a crash
        between the two renames is detected. A failed write (a full disk) removes its temporary files and is a
        ValueError; the previous checkpoint is left as it was."""
        import torch
        from safetensors.torch import save_model

        metadata = agreement.weights_metadata(model, step, self.meta.get("run_id"))
        try:
            with contextlib.ExitStack() as temporaries:  # each removed if it is not renamed into place
                tmp = temporaries.enter_context(made_beside(self.path / WEIGHTS))
                save_model(model, str(tmp), metadata=unsealed(metadata))
                seal(tmp)  # the checksum of what was written, before it is renamed into place
                if optimizer is not None:
                    tmp_opt = temporaries.enter_context(made_beside(self.path / OPTIMIZER))
                    saved = {"step": step, "optimizer": optimizer.state_dict(), **state,
                             **({"run_id": str(self.meta["run_id"])} if self.meta.get("run_id") else {})}
                    with open(tmp_opt, "wb") as f:
                        torch.save({**saved, STATE_SUM: state_digest(saved)}, f)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp_opt, self.path / OPTIMIZER)
                os.replace(tmp, self.path / WEIGHTS)
        except Exception as e:  # torch.save and safetensors wrap the OSError of a full disk in their own errors
            cause = os_error_in(e)
            if cause is None:
                raise
            kept = self.meta.get("checkpoint_step")
            raise ValueError(f"cannot save the checkpoint of step {step} in {self.path}: {why_not_written(cause, self.path)}; "
                             + (f"the checkpoint of step {kept} is kept." if kept else "no checkpoint was saved.")) from e
        self.write_meta(checkpoint_step=step)

    def weight_steps(self) -> list[int]:
        """The steps whose weights can be loaded (`load_model`), ascending: the snapshots' and the checkpoint's."""
        steps = set(snapshots.list_snapshots(self.path))
        if self.has_checkpoint:
            steps.add(self.info.checkpoint_step)
        return sorted(steps)

    def load_weights(self, model, path: Path | None = None) -> int:
        """Load model.safetensors (or the weights file ``path``: a snapshot) into ``model``; return its step.
        ValueError if missing, corrupt or foreign."""
        from safetensors.torch import load_model

        from ..device import is_out_of_memory

        path = path or self.path / WEIGHTS
        metadata, step, shapes = self._weights_header(path)
        saved = agreement.saved_model_config(metadata)
        mismatch = agreement.arch_mismatch(saved, model) or agreement.shape_mismatch(shapes, model)
        if mismatch:
            raise ValueError(f"{path} does not match the run's config.json: {mismatch}"
                             f"{agreement.fields_differ(saved, model)}.")
        try:
            checked = verify(path)
        except Damaged as e:
            raise Damaged(f"{str(e).rstrip('.')}; {self._still_loads(path)}.") from None
        if not checked and self.checksummed:
            raise Damaged(f"{path} carries no checksum, though every weight file of a run of format {CHECKSUMMED} or "
                          f"later has one: it was replaced or rewritten since; {self._still_loads(path)}.")
        try:
            missing, unexpected = load_model(model, str(path), strict=False, device=str(next(model.parameters()).device))
        except Exception as e:  # safetensors raises its own error types for bad headers and shapes
            if is_out_of_memory(e):
                raise  # the file is fine; the device is full
            raise ValueError(f"{path} is corrupt or does not match the run's config: {e}") from None
        if missing or unexpected:
            raise ValueError(f"{path} does not match the run's config.json: other tensors (missing "
                             f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
                             f"{agreement.fields_differ(saved, model)}.")
        other = agreement.meta_mismatch(self.meta, self.config) or agreement.parameters_mismatch(self.meta, model)
        if other:
            raise agreement.disagree(self.path / META, self.path / CONFIG, other)
        return step

    def _weights_header(self, path: Path) -> tuple[dict, int, dict[str, tuple[int, ...]]]:
        """The metadata, step and tensor shapes of model.safetensors or a snapshot (its header alone is read),
        checked against meta.json (`agreement.run_id_mismatch`; the checkpoint: `agreement.step_mismatch`)."""
        from safetensors import safe_open

        if not path.exists():
            raise ValueError(f"{self.path} has no weights yet (model.safetensors); train it first.")
        regular_file(path)
        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                step = int(metadata.get("step", 0))
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (not a dict)
        except Exception as e:  # safetensors raises its own error types for bad headers
            raise ValueError(f"{path} is corrupt or not a safetensors file: {e}") from None
        other = agreement.run_id_mismatch(self.meta, metadata)
        if path == self.path / WEIGHTS:
            other = other or agreement.step_mismatch(self.meta, step)
        if other:
            raise agreement.disagree(path, self.path / META, other)
        return metadata, step, shapes

    @property
    def checksummed(self) -> bool:
        """Whether every weight file of the run carries a checksum (written by a fatstudio of format `CHECKSUMMED`
        or later), so that one without is refused."""
        version = self.meta.get("format_version", 1)
        return isinstance(version, int) and version >= CHECKSUMMED

    def unverified(self) -> str | None:
        """For a run whose weights carry no checksum (an older format), the sentence that says so; else None."""
        if self.checksummed:
            return None
        return (f"{self.name} was written by an older fatstudio (format {self.meta.get('format_version', 1)}): its "
                "weights carry no checksum, so damage to them cannot be detected.")

    def _still_loads(self, path: Path) -> str:
        """What of the run still loads when the weight file ``path`` cannot: its other weights, by step."""
        files = {**snapshots.list_snapshots(self.path), **({self.info.checkpoint_step: self.path / WEIGHTS}
                                                           if self.has_checkpoint else {})}
        others = [s for s, p in sorted(files.items()) if p != path]
        if others:
            return f"the run's other weights (step {_steps(others)}) still load"
        return "the rest of the run (its metrics, samples and probes) is unaffected"

    def load_training_state(self, parameters: int | None = None) -> dict | None:
        """The optimizer/RNG state saved with the weights, or None if there is none. Checked against the checksum
        saved in it (`state_digest`): one that fails, cannot be read, or (in a checksummed run) has none is a
        `files.Damaged` naming it, never fresh optimizer state in silence. ``parameters``: the model's, bounding
        the file's size (an optimizer keeps a few numbers a parameter)."""
        import torch

        path = self.path / OPTIMIZER
        if not path.exists():
            return None
        limit = 24 * parameters + (64 << 20) if parameters else None
        regular_file(path, limit)  # a FIFO or a device is refused, not read (nor taken as absent)
        fresh = f"the weights still load; remove {OPTIMIZER} to resume with a fresh optimizer state"
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a torn or foreign file (torch's errors; an UnpicklingError's lines)
            first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
            raise Damaged(f"{path} cannot be read ({first[:200]}); {fresh}.") from None
        said = state.pop(STATE_SUM, None) if isinstance(state, dict) else None
        if not isinstance(state, dict) or (said is None and self.checksummed):
            raise Damaged(f"{path} is not the training state fatstudio writes (no {STATE_SUM}); {fresh}.")
        if said is not None and said != state_digest(state):
            raise Damaged(f"{path} is damaged: its contents do not match the checksum written with them; {fresh}.")
        other = agreement.run_id_mismatch(self.meta, state)
        if other:
            raise agreement.disagree(path, self.path / META, other.replace("weights", "optimizer state"))
        return state

    def load_model(self, device: str = "cpu", step: int | None = None) -> LoadedModel:
        """The trained model for prompting (eval mode), with its tokenizer: the last checkpoint's, or with
        ``step`` the weights saved at that step (a snapshot; the checkpoint if it is that step's). Built without
        initialising (`build_empty`: seconds less for GPT-2 small), then filled from the weights, every one of
        which load_weights requires; in the run's ``dtype`` (meta.json: an import's ``--dtype bfloat16`` keeps
        the model in bfloat16, half the memory), else float32."""
        import torch

        from ..model import build_empty

        path = snapshots.list_snapshots(self.path).get(step) if step is not None else None
        kept = self.weight_steps()
        if step is not None and path is None and kept and step != self.info.checkpoint_step:
            raise ValueError(f"{self.path} has no weights of step {step}; saved steps: {_steps(kept)}.")
        check_fits(self.config.model, 1, device, training=False, what=f"opening the model of {self.path}")
        tokenizer = self.check_agreement()
        model = build_empty(self.config.model, device)
        if model.config.tie_embeddings:  # given storage, W_u became a Parameter of its own
            model.tie_unembedding()
        model = model.to(getattr(torch, self._meta_dtype()))
        step = self.load_weights(model, path)
        model.eval()
        return LoadedModel(model, tokenizer, self.config, self._class_names(), f"{self.name} · step {step}", step)

    def _meta_dtype(self) -> str:
        """meta.json's ``dtype``, if it is one fatstudio writes (`WEIGHT_DTYPES`), else a ValueError naming it."""
        dtype = self.meta.get("dtype", "float32")
        if not (isinstance(dtype, str) and dtype in WEIGHT_DTYPES):
            raise ValueError(f"{self.path / META}: dtype = {dtype!r:.60} is not one fatstudio writes "
                             f"({', '.join(WEIGHT_DTYPES)}); the model cannot be opened.")
        return dtype

    def _class_names(self) -> list[str]:
        """meta.json's ``class_names`` (a classifier's labels, one per class of the model; none otherwise)."""
        names = self.meta.get("class_names", [])
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ValueError(f"{self.path / META}: class_names = {names!r:.60} is not a list of names; the model "
                             "cannot be opened.")
        if names and len(names) != self.config.model.n_classes:
            raise agreement.disagree(self.path / META, self.path / CONFIG, f"meta.json names {len(names)} classes, "
                                     f"config.json's model has {self.config.model.n_classes}")
        return names


def _steps(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 12 else f"{steps[0]}, {steps[1]}, …, {steps[-1]}"
