"""Attention over training time: a run's probe input, and every head's attention map for it saved at each
evaluation.

A run has one `ProbeInput` (recorded in ``meta.json`` under ``"probe"``, so a reopened or resumed run uses
the same one): a text for the model and, for an encoder-decoder, the source its encoder reads. Unless one is
given to ``training.train(..., probe=...)``, `default_probe` picks it from the validation split (the training
split when there is none): gpt/gopher next-token: the start of a validation window; bert masked LM: a
validation window with its masked positions written ``[MASK]``; edt seq2seq: a validation (source, target)
pair, the decoder reading [bos] + target; classification: a validation text, its label recorded beside it.

At every evaluation the trainer runs the model once on the probe (`probe_maps`, exactly
`generation.attention_maps_for_ids`), measures that step's head scores (`measure_scores`: prev, diag and sink
of the probe's maps, induction from one more forward pass of the model at that step on random tokens
repeated twice, see `head_scores`), and `save_probe` writes both to ``probes/step-NNNNNNNN.safetensors``:
one float16 tensor (H, T_query, T_key) per map, named as the model names it ("self/0", "cross/1", …); in
the file's metadata (strings) the tokens, the probe input and, under ``"scores"``, the head scores as JSON
(`HeadScores.to_dict`: {"maps": {"self/0": {"prev": [H numbers], …, "induction": [H numbers]}, …}, "n",
"seed"}); and, when the trainer measured it (`probe_lens.measure`), the step's logit lens and attribution as
``lens:…`` tensors and JSON under ``"lens"`` (`saved_lens`; `load_probe_lens`, None for an older file); written
under a temporary name and renamed into place like every run file. safetensors files hold
only tensors and strings, so reading one never executes code. `Run.probe_steps` and `Run.load_probe` read
them back; so do `list_probes` and `load_probe_file` for a folder; `probe_scores` a file's head scores
(a file written before scores were saved: what its maps give, no induction) and `score_history` a run's
over training time.

Torch-free at import (the GUI reads probe files without torch).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..config import Arch, RunConfig, Task
from ..files import NotAFile, atomic_write, regular_file, step_files
from ..inference.attention_maps import AttentionMaps
from ..inference.prompting import MASK_MARKER, Mode, check_length, encode_prompt
from ..names import AttentionKind, MapName
from .head_scores import HeadScores, head_scores, map_scores
from .saved_lens import META_KEY as LENS_KEY
from .saved_lens import PREFIX as LENS_PREFIX
from .saved_lens import SavedLens

if TYPE_CHECKING:
    from ..data.corpora import Dataset
    from ..data.tokenization import TokenizerLike

PROBES = "probes"  # the folder of a run that holds the probe maps
META_KEY = "probe"  # meta.json: the run's ProbeInput as a dict
MAX_TOKENS = 32  # a default probe's length: enough for patterns, small files (L·H·T² float16 numbers a step)


class MissingProbe(ValueError):
    """The probe maps of a step that has none."""


@dataclass(frozen=True)
class ProbeInput:
    """What the model reads at each evaluation. ``text``: the decoder's (gpt, gopher, edt) or encoder's
    (bert) text, with ``[MASK]`` markers for masked LM; ``source``: an edt's encoder input; ``label``:
    the true class of a classification text (shown, not read by the model)."""

    text: str
    source: str | None = None
    label: str | None = None

    @classmethod
    def asked(cls, text: str | None, source: str | None, arch: Arch) -> ProbeInput | None:
        """The probe a person asked for (the CLI's --probe/--probe-source, the Train panel's fields): None when
        neither text is given (the task's default). An encoder-decoder's needs both its source and its target
        text; no other model reads a source. ValueError in words otherwise."""
        text, source = text or None, source or None
        if text is None and source is None:
            return None
        if arch == "edt" and (text is None or source is None):
            raise ValueError("an encoder-decoder's probe needs both a source and a target text (or neither, for the "
                             "default).")
        if arch != "edt" and source is not None:
            raise ValueError(f"a probe source is an encoder-decoder's (model.arch = edt), not a {arch} model's; give "
                             "the text alone.")
        assert text is not None
        return cls(text, source)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> ProbeInput:
        if not isinstance(d, dict) or not isinstance(d.get("text"), str):
            raise ValueError(f"a probe input needs a text, not {d!r}.")
        return cls(d["text"], d.get("source"), d.get("label"))

    def describe(self) -> str:
        """One short line: the text (and source, label) as a person reads it."""
        s = repr(self.text)
        if self.source is not None:
            s = f"{self.source!r} → {s}"
        if self.label is not None:
            s += f" (label {self.label})"
        return s

    def encode(self, tokenizer: TokenizerLike, arch: Arch, task: Task, l_max: int) -> tuple[list[int], list[int] | None]:
        """The token ids the model reads, and an edt's encoder ids (else None), as the Prompt panel encodes
        the same text: gpt/gopher: encode(text), its last l_max tokens; bert: [bos] + text + [eos] with
        mask_id at each ``[MASK]``; edt: the encoder [bos] + source + [eos], the decoder [bos] + text (cut to
        l_max). ValueError in words when the text cannot be read or an encoder input is too long."""
        if arch == "edt":
            if self.source is None:
                raise ValueError("an encoder-decoder's probe needs a source text.")
            z = list(encode_prompt(tokenizer, self.source, "translate", l_max=l_max).context_ids or ())
            return [tokenizer.bos_id, *tokenizer.encode(self.text)][:l_max], z
        if arch == "bert":
            mode: Mode = "fill_mask" if task == "masked_lm" else "classify"
            return list(encode_prompt(tokenizer, self.text, mode, l_max=l_max).ids), None
        ids = list(encode_prompt(tokenizer, self.text, "generate", l_max=l_max).ids)
        return ids[-l_max:], None


# ------------------------------------------------------------------------------------------------ defaults
def default_probe(dataset: Dataset, tokenizer: TokenizerLike, task: Task, l_max: int, seed: int = 0) -> ProbeInput:
    """A probe taken from the validation split (the training split when there is none), short enough for
    ``l_max`` and at most `MAX_TOKENS` tokens (see the module for each task)."""
    split = "val" if any(v for k, v in dataset.sizes().items() if k.startswith("val")) else "train"
    if task in ("seq2seq", "classification"):
        examples = dataset.examples(split)  # type: ignore[attr-defined]
        a, b = examples[0]
        n = min(l_max - 2, MAX_TOKENS)
        a = tokenizer.decode(tokenizer.encode(a)[:n])
        if task == "classification":
            return ProbeInput(a, label=b)
        return ProbeInput(tokenizer.decode(tokenizer.encode(b)[:min(l_max - 1, MAX_TOKENS)]), source=a)
    import torch

    x = dataset.batch(split, 1, torch.Generator().manual_seed(seed))["x"][0].tolist()
    if task == "next_token":
        return ProbeInput(tokenizer.decode(x[:min(l_max, MAX_TOKENS)]))
    # masked LM: the window's first tokens, mask markers where the data masked (at least one)
    x = x[:max(1, min(l_max - 2, MAX_TOKENS))]
    if tokenizer.mask_id not in x:
        x[len(x) // 2] = tokenizer.mask_id
    pieces: list[str] = []
    run: list[int] = []
    for i in x:
        if i == tokenizer.mask_id:
            pieces += [tokenizer.decode(run), MASK_MARKER]
            run = []
        else:
            run.append(i)
    text = "".join([*pieces, tokenizer.decode(run)])
    check_length(len(encode_prompt(tokenizer, text, "fill_mask", l_max=l_max).ids), l_max, "probe text")
    return ProbeInput(text)


# ------------------------------------------------------------------------------------------------ the maps
def probe_maps(model, tokenizer: TokenizerLike, ids: list[int], context_ids: list[int] | None) -> AttentionMaps:
    """Every head's attention for the probe: one forward pass (`generation.attention_maps_for_ids`)."""
    from ..inference import generation

    return generation.attention_maps_for_ids(model, tokenizer, ids, context_ids)


def measure_scores(model, tokenizer: TokenizerLike, maps: AttentionMaps) -> HeadScores:
    """An evaluation step's head scores (`head_scores.head_scores`, seed 0, as the Attention panel measures a
    loaded model): prev, diag and sink of the probe's ``maps``, induction from the model on its repeated
    random sequence (one forward pass of at most 2n+1 = 101 tokens in eval mode without gradients; the
    training mode is restored). A model too short for that sequence (l_max < 3) gets the map scores alone."""
    try:
        return head_scores(model, tokenizer, maps)
    except ValueError:
        return map_scores(maps)


def probe_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / PROBES / f"step-{step:08d}.safetensors"


def save_probe(run_dir: str | Path, step: int, maps: AttentionMaps, probe: ProbeInput | None = None,
               scores: HeadScores | None = None, lens: SavedLens | None = None) -> Path:
    """Write ``maps`` as ``probes/step-NNNNNNNN.safetensors`` (float16 tensors named as the maps; the tokens,
    the probe input and the step's head ``scores`` in the metadata; the step's logit ``lens``, `saved_lens`),
    atomically. Returns the path."""
    from safetensors.numpy import save


    path = probe_path(run_dir, step)
    path.parent.mkdir(exist_ok=True)
    tensors = {str(name): np.ascontiguousarray(A, dtype=np.float16) for name, A in maps.maps.items()}
    metadata = {"format": "fatstudio-probe", "step": str(step), "tokens": json.dumps(list(maps.tokens)),
                "context_tokens": json.dumps(maps.context_tokens),
                "probe": json.dumps(probe.to_dict() if probe else None)}
    if scores is not None:
        metadata["scores"] = json.dumps(scores.to_dict())
    if lens is not None:
        tensors.update(lens.tensors())
        metadata[LENS_KEY] = lens.metadata()
    atomic_write(path, save(tensors, metadata=metadata))
    return path


def _read(path: str | Path, tensors: Literal["maps", "lens", "none"] = "maps") -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """A probe file's metadata and its ``tensors``: the maps as float32 arrays (the file holds float16), the
    lens's (`saved_lens`, named ``lens:…``) as saved, or none (only the header is read). ValueError if unreadable."""
    from safetensors import safe_open

    try:
        regular_file(path)  # a FIFO or a device is refused unread
        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            arrays = {name: f.get_tensor(name) for name in f.keys()  # noqa: SIM118 (not a dict)
                      if tensors != "none" and name.startswith(LENS_PREFIX) == (tensors == "lens")}
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist.") from None
    except NotAFile:
        raise
    except Exception as e:  # safetensors raises its own error types for bad headers and tensors
        raise ValueError(f"{path} is damaged or not a probe file of fatstudio: {e}") from None
    if tensors == "maps":
        arrays = {name: A.astype(np.float32) for name, A in arrays.items()}
    return meta, arrays


def load_probe_file(path: str | Path) -> AttentionMaps:
    """The maps of one probe file, as float32 arrays (the file holds float16). ValueError if unreadable."""
    meta, maps = _read(path)
    try:
        tokens = json.loads(meta["tokens"])
        context = json.loads(meta.get("context_tokens", "null"))
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path} is not a probe file of fatstudio: {e}") from None
    if not isinstance(tokens, list) or not (context is None or isinstance(context, list)):
        raise ValueError(f"{path} is not a probe file of fatstudio: its tokens are not a list.")
    try:
        probe = AttentionMaps(tokens, context, {MapName.parse(name): A for name, A in maps.items()})
        mismatch = probe_mismatch(probe)
    except ValueError as e:  # a map name that is not kind/layer
        mismatch = str(e)
    if mismatch:
        raise ValueError(f"{path}: its tokens and its maps disagree ({mismatch}); the probe file is damaged.")
    return probe


def probe_mismatch(maps: AttentionMaps, config: RunConfig | None = None) -> str | None:
    """How a probe file's maps differ from its tokens (each map is H × queries × keys), or, with ``config``, from
    the model's heads and layers."""
    m = config.model.resolved() if config is not None else None
    layers: dict[AttentionKind, int] = {"self": m.L, "enc": m.L_enc, "dec": m.L_dec, "cross": m.L_dec} if m else {}
    for name, A in maps.maps.items():
        want = (len(maps.query_tokens(name)), len(maps.key_tokens(name)))
        if A.ndim != 3 or A.shape[1:] != want:
            return f"map {name} is {'×'.join(map(str, A.shape))}, its tokens make it H×{want[0]}×{want[1]}"
        if m and A.shape[0] != m.H:
            return f"map {name} has {A.shape[0]} heads, config.json's model H = {m.H}"
        if m and name.layer >= layers[name.kind]:
            return f"map {name} is of a layer that config.json's model does not have"
    return None


def saved_input(path: str | Path) -> dict | None:
    """The probe input a probe file was saved for (`ProbeInput.to_dict`; its header only is read), or None
    (a file without one). ValueError if the file cannot be read."""
    try:
        d = json.loads(_read(path, "none")[0].get("probe") or "null")
    except ValueError:  # not JSON: none to compare
        return None
    return d if isinstance(d, dict) else None


def load_probe_lens(path: str | Path) -> SavedLens | None:
    """The logit lens saved in a probe file (`saved_lens`); None for a file written before it was saved.
    ValueError if the file or its lens cannot be read."""
    meta, tensors = _read(path, "lens")
    if LENS_KEY not in meta:
        return None
    try:
        return SavedLens.from_file(meta, tensors)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def saved_scores(path: str | Path) -> HeadScores | None:
    """The head scores saved in a probe file (its header only is read); None for a file written before
    scores were saved. ValueError if the file or its scores cannot be read."""
    text = _read(path, "none")[0].get("scores")
    if text is None:
        return None
    try:
        return HeadScores.from_dict(json.loads(text))
    except ValueError as e:
        raise ValueError(f"{path}: its head scores cannot be read: {e}") from None


def probe_scores(path: str | Path) -> HeadScores:
    """A probe file's head scores: the saved ones (induction included), else what its maps give
    (`head_scores.map_scores`: prev, diag, sink). ValueError if unreadable."""
    saved = saved_scores(path)
    return saved if saved is not None else map_scores(load_probe_file(path))


def score_history(run: str | Path | Mapping[int, str | Path]) -> dict[int, HeadScores]:
    """Head scores over training time: {step: `probe_scores`} for a run folder (or its probe files by step,
    `list_probes`), ascending; unreadable files are left out."""
    paths = list_probes(run) if isinstance(run, (str, Path)) else run
    history = {}
    for step, path in sorted(paths.items()):
        try:
            history[int(step)] = probe_scores(path)
        except ValueError:
            continue
    return history


def score_series(history: Mapping[int, HeadScores], name: MapName, score: str) -> tuple[np.ndarray, np.ndarray]:
    """One score of map ``name`` over training time: the steps (S,) that have it, ascending, and its values
    (S, H), for plotting one line per head."""
    found = [(step, v) for step, sc in sorted(history.items()) if (v := sc.get(name, score)) is not None]
    if not found:
        return np.zeros(0, np.int64), np.zeros((0, 0))
    steps, values = zip(*found)
    return np.asarray(steps, np.int64), np.stack(values)


def list_probes(run_dir: str | Path) -> dict[int, Path]:
    """The saved probe files of a run folder, by step, ascending."""
    return step_files(Path(run_dir) / PROBES)


def load_probe(run_dir: str | Path, step: int) -> AttentionMaps:
    """The probe maps saved at ``step``; `MissingProbe` (a ValueError) naming the saved steps if none."""
    saved = list_probes(run_dir)
    if step not in saved:
        have = ", ".join(map(str, saved)) if saved else "none"
        raise MissingProbe(f"{Path(run_dir).name} has no probe maps at step {step}; saved steps: {have}.")
    return load_probe_file(saved[step])


def remove_after(run_dir: str | Path, step: int) -> None:
    """Delete the probe files after ``step`` (resuming from a checkpoint that a crash outran)."""
    for s, p in list_probes(run_dir).items():
        if s > step:
            p.unlink(missing_ok=True)


__all__ = ["ProbeInput", "MissingProbe", "default_probe", "probe_maps", "measure_scores", "save_probe",
           "load_probe_file", "load_probe_lens", "saved_input", "saved_scores", "probe_scores", "score_history",
           "score_series", "load_probe",
           "list_probes", "probe_path", "remove_after", "PROBES", "META_KEY", "MAX_TOKENS"]
