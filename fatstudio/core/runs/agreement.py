"""Whether a run folder's files agree with one another, in words for the messages that refuse a run whose files
do not (`folder.Run` names the two files): the weights and config.json (the model config saved in the weights'
metadata, the tensors' shapes), meta.json and config.json (the architecture and task each records; the
parameter count),
and meta.json and the weights or the tokenizer (the run id and the tokenizer's digest meta.json records). Each
returns None where they agree. (A probe file's tokens and maps: `probes.probe_mismatch`.)"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..records import RunMeta


def model_config(model: Any) -> dict:
    """The model config of ``model`` as a dict ({} for a module without one)."""
    to_dict = getattr(getattr(model, "config", None), "to_dict", None)
    return to_dict() if callable(to_dict) else {}


def saved_model_config(metadata: dict) -> dict:
    """The model config saved in the weights' metadata (`Run.save_checkpoint`); {} in older weights."""
    try:
        saved = json.loads(metadata.get("model") or "{}")
    except json.JSONDecodeError:
        return {}
    return saved if isinstance(saved, dict) else {}


def arch_mismatch(saved: dict, model: Any) -> str | None:
    arch = model_config(model).get("arch")
    if saved.get("arch", arch) != arch:
        return f"the weights are of a {saved['arch']} model, the config's model.arch is {arch!r}"
    return None


def fields_differ(saved: dict, model: Any) -> str:
    """The model fields whose values the weights were saved with differ from the config's, in words (after
    a mismatch: what was changed); "" where unknown."""
    now = model_config(model)
    differ = [k for k in now if k in saved and saved[k] != now[k] and k != "arch"]
    if not differ:
        return ""
    shown = ", ".join(f"{k} = {saved[k]!r} (config: {now[k]!r})" for k in differ[:3])
    return f"; the weights were saved with {shown}{' and more' if len(differ) > 3 else ''}"


def shape_mismatch(shapes: dict[str, tuple[int, ...]], model: Any) -> str | None:
    """The first tensor whose shape in the file differs from ``model``'s, in words (weights saved without
    their config); None if every tensor both have agrees."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    differ = [k for k in shapes if k in expected and shapes[k] != expected[k]]
    if not differ:
        return None
    k = differ[0]
    more = f" ({len(differ)} tensors differ)" if len(differ) > 1 else ""
    return f"{k} is {_shape(shapes[k])} in the weights, {_shape(expected[k])} for the config{more}"


def _shape(s: tuple[int, ...]) -> str:
    return "×".join(map(str, s)) or "a scalar"


def meta_mismatch(meta: dict, config: RunConfig) -> str | None:
    """How meta.json's architecture or task differs from config.json's (both recorded when the run was made)."""
    for key, mine in (("arch", config.model.arch), ("task", config.data.task)):
        said = meta.get(key)
        if said is not None and said != mine:
            return f"meta.json records {key} {said!r}, config.json {mine!r}"
    return None


def parameters_mismatch(meta: dict, model: Any) -> str | None:
    """How meta.json's parameter count differs from the model config.json builds (``n_parameters``)."""
    said = RunMeta(meta).data.get("n_parameters")
    count = getattr(model, "num_parameters", None)
    if isinstance(said, int) and not isinstance(said, bool) and callable(count) and said != count():
        return f"meta.json records a model of {said:,} parameters, config.json's has {count():,}"
    return None


def run_id_mismatch(meta: dict, metadata: dict) -> str | None:
    """How the run id in the weights' metadata differs from meta.json's (runs made before ids: None)."""
    mine, saved = meta.get("run_id"), metadata.get("run_id")
    if mine and saved and mine != saved:
        return f"the weights are of run {saved}, meta.json of run {mine}"
    return None


def step_mismatch(meta: dict, step: int) -> str | None:
    """meta.json's checkpoint step past the weights' (meta.json is written after the weights: never so in a run)."""
    said = meta.get("checkpoint_step")
    if isinstance(said, int) and not isinstance(said, bool) and said > step:
        return f"meta.json records a checkpoint of step {said}, the weights are of step {step}"
    return None


def digest(text: str) -> str:
    """The SHA-256 of ``text`` (a tokenizer.json) that meta.json records."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_mismatch(meta: dict, config: RunConfig, text: str, vocab_size: int) -> str | None:
    """How a tokenizer (its file's ``text`` and N_V) differs from the run's: config.json's N_V (the weights')
    and the digest meta.json recorded when the run was made."""
    if vocab_size != config.model.vocab_size:
        return f"the tokenizer has {vocab_size} tokens, config.json's model (and its weights) N_V = " \
               f"{config.model.vocab_size}"
    said = meta.get("tokenizer_sha256")
    if said and said != digest(text):
        return "it is not the tokenizer meta.json records (another digest)"
    return None


def disagree(a: Path, b: Path, why: str) -> ValueError:
    """The error for two files of a run that disagree: both named, and why."""
    return ValueError(f"{a} and {b} disagree: {why}. One of them is another run's (or was edited); the run cannot "
                      "be used as it is.")


def weights_metadata(model, step: int, run_id: object = None) -> dict[str, str]:
    """The metadata of model.safetensors: the step, the model's config and the run's id (checked when loaded:
    `run_id_mismatch`)."""
    metadata = {"step": str(step), "format": "fatstudio"}
    if model_config(model):
        metadata["model"] = json.dumps(model_config(model))
    if run_id:
        metadata["run_id"] = str(run_id)  # whose weights these are (`agreement.run_id_mismatch`)
    return metadata
