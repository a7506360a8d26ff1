"""A sparse dictionary on a model's hook points: a TopK sparse autoencoder (SAE) of one point, or a transcoder
from an MLP's input to its output (Gao et al. 2024, "Scaling and evaluating sparse autoencoders"; Dunefsky et al.
2024, "Transcoders find interpretable LLM feature circuits").

With x (…, d_in) read at ``point_in``, μ its mean over the training activations, and d_f features:

    f = TopK_k(ReLU(W_enc (x − μ) + b_enc))        the k largest activations kept, the others 0   (…, d_f)
    x̂ = W_dec f + b_dec                              the reconstruction of ``point_out``'s tensor   (…, d_out)

W_enc is (d_f, d_in), W_dec (d_out, d_f) with columns of unit norm (feature i's direction ``W_dec[:, i]``), so a
feature's activation is its size in the reconstruction. An SAE reads and reconstructs one point (d_in = d_out);
a transcoder reads ``M/l/in`` and writes ``M/l/out``, standing in for the MLP.

A dictionary is a folder: ``dictionary.safetensors`` (the five tensors, with the checksum every weight file
fatstudio writes carries: `files.sealed`, `files.verify`) and ``dictionary.json`` (the points, k, the run and
step it was trained on, how it was trained and its quality). Features are 0-based here and in files, 1-based in
the app.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from ...files import Damaged, atomic_write, read_text, sealed, unsealed, verify, why_not_written
from .points import trainable

DictionaryKind = Literal["sae", "transcoder"]
KINDS: tuple[DictionaryKind, ...] = get_args(DictionaryKind)
WEIGHTS, INFO = "dictionary.safetensors", "dictionary.json"
FORMAT = 1  # dictionary.json's format_version
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec", "mean_in")
MAX_INFO = 10_000_000  # the largest dictionary.json read


class Dictionary(nn.Module):
    """A TopK SAE or transcoder (see the module): ``encode``, ``decode``, ``forward`` (x -> x̂), ``save``, `load`.

    ``info`` holds what dictionary.json records beyond the tensors and points: ``run`` and ``step`` (the weights it
    was trained on), ``training`` (tokens, steps, seed, how dead features were revived) and ``quality`` (explained
    variance, L0, dead fraction, CE loss score), each a plain JSON value."""

    def __init__(self, kind: DictionaryKind, point_in: str, point_out: str, d_in: int, d_out: int, d_f: int,
                 k: int, info: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"{kind!r} is not a kind of dictionary; use one of {', '.join(KINDS)}.")
        if kind == "sae" and (point_in != point_out or d_in != d_out):
            raise ValueError("an SAE reconstructs the point it reads: point_in, point_out and d_in, d_out agree.")
        if not 1 <= k <= d_f:
            raise ValueError(f"k = {k} must be between 1 and d_f = {d_f}.")
        self.kind, self.point_in, self.point_out, self.k = kind, point_in, point_out, k
        self.info: dict[str, Any] = dict(info or {})
        self.W_enc = nn.Parameter(torch.zeros(d_f, d_in))
        self.b_enc = nn.Parameter(torch.zeros(d_f))
        self.W_dec = nn.Parameter(torch.zeros(d_out, d_f))
        self.b_dec = nn.Parameter(torch.zeros(d_out))
        self.mean_in: torch.Tensor
        self.register_buffer("mean_in", torch.zeros(d_in))

    # ------------------------------------------------------------------------------------------------ sizes
    @property
    def d_in(self) -> int:
        return int(self.W_enc.shape[1])

    @property
    def d_out(self) -> int:
        return int(self.W_dec.shape[0])

    @property
    def d_f(self) -> int:
        return int(self.W_enc.shape[0])

    # ------------------------------------------------------------------------------------------------ the maps
    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """W_enc (x − μ) + b_enc (…, d_f): every feature's input before ReLU and TopK (one fused product and sum:
        half the time of a product, then a sum, on a CPU)."""
        return F.linear(x - self.mean_in, self.W_enc, self.b_enc)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """f = TopK_k(ReLU(W_enc (x − μ) + b_enc)) (…, d_f): the k largest pre-activations, ReLU'd, the rest 0."""
        return self.top_k(self.pre_acts(x))

    def top_k(self, pre: torch.Tensor) -> torch.Tensor:
        values, at = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, at, values.relu())

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """x̂ = W_dec f + b_dec (…, d_out)."""
        return f @ self.W_dec.T + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Give each column of W_dec unit norm (a column of zeros stays zero)."""
        self.W_dec.div_(self.W_dec.norm(dim=0, keepdim=True).clamp_min(1e-12))

    # ------------------------------------------------------------------------------------------------ files
    def describe(self) -> str:
        """One line: "SAE on self/1/resid_post · 1024 features (8 × 128) · k = 16"."""
        what = f"SAE on {self.point_in}" if self.kind == "sae" else f"transcoder {self.point_in} → {self.point_out}"
        times = self.d_f / self.d_in
        mult = f" ({int(times)} × {self.d_in})" if times == int(times) else ""
        return f"{what} · {self.d_f} features{mult} · k = {self.k}"

    def header(self) -> dict[str, Any]:
        """dictionary.json's content."""
        return {"format_version": FORMAT, "kind": self.kind, "point_in": self.point_in, "point_out": self.point_out,
                "d_in": self.d_in, "d_out": self.d_out, "d_f": self.d_f, "k": self.k, **self.info}

    def save(self, folder: str | Path) -> Path:
        """Write the dictionary into ``folder`` (made if missing), each file atomically; a ValueError naming the
        folder if it cannot be written."""
        from safetensors.torch import save

        folder = Path(folder)
        tensors = {name: getattr(self, name).detach().to("cpu", torch.float32).contiguous() for name in TENSORS}
        if bad := [name for name, t in tensors.items() if not torch.isfinite(t).all()]:
            raise ValueError(f"the dictionary was not saved: {', '.join(bad)} hold values that are not finite "
                             f"(NaN or ∞; the training diverged). Try a smaller learning rate.")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(folder / WEIGHTS, sealed(save(tensors, metadata=unsealed({"kind": self.kind}))))
            atomic_write(folder / INFO, json.dumps(self.header(), indent=1, allow_nan=False))
        except OSError as e:
            raise ValueError(f"cannot save the dictionary in {folder}: {why_not_written(e, folder)}.") from e
        return folder


def load(folder: str | Path) -> Dictionary:
    """The dictionary saved in ``folder`` (`Dictionary.save`); a ValueError (`files.Damaged` for a checksum that
    fails) saying what is wrong with it: a missing file, a format from a newer fatstudio, shapes that disagree."""
    from safetensors.torch import load

    folder = Path(folder)
    for name in (INFO, WEIGHTS):
        if not (folder / name).is_file():
            raise ValueError(f"{folder} is not a dictionary folder: it has no {name}.")
    try:
        head = json.loads(read_text(folder / INFO, limit=MAX_INFO))
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{folder / INFO} is not valid JSON: {e}") from None
    if not isinstance(head, dict):
        raise ValueError(f"{folder / INFO} does not hold a JSON object.")
    version = head.get("format_version")
    if not isinstance(version, int) or version > FORMAT:
        raise ValueError(f"{folder} was written by a newer fatstudio (dictionary format {version!r}; this one reads "
                         f"{FORMAT}); update fatstudio to open it.")
    if not verify(folder / WEIGHTS):
        raise Damaged(f"{folder / WEIGHTS} carries no checksum; fatstudio writes one into every dictionary.")
    try:
        tensors = load((folder / WEIGHTS).read_bytes())
        d = Dictionary(head["kind"], str(head["point_in"]), str(head["point_out"]), int(head["d_in"]),
                       int(head["d_out"]), int(head["d_f"]), int(head["k"]),
                       {k: v for k, v in head.items() if k not in _HEADER_KEYS})
        d.load_state_dict({name: tensors[name] for name in TENSORS})
    except (KeyError, TypeError, RuntimeError) as e:
        raise ValueError(f"{folder} is not a dictionary this fatstudio can read: {e}") from None
    if not all(math.isfinite(float(t.abs().sum())) for t in tensors.values()):
        raise ValueError(f"{folder / WEIGHTS} holds values that are not finite.")
    return d.requires_grad_(False)


_HEADER_KEYS = ("format_version", "kind", "point_in", "point_out", "d_in", "d_out", "d_f", "k")


def points_of(name: str) -> tuple[DictionaryKind, str, str]:
    """What ``--point NAME`` trains: an MLP (``mlp/1``, ``dec-mlp/0``) a transcoder from its ``in`` to its
    ``out``; a point of the residual stream (``self/1/resid_post``, `trainable`) an SAE of it. (kind, point_in,
    point_out); a ValueError for any other point (the scores, the mask, a norm's statistics)."""
    parts = name.split("/")
    if len(parts) == 2 and parts[0].endswith("mlp"):
        return "transcoder", f"{name}/in", f"{name}/out"
    if not trainable(name):
        raise ValueError(f"{name} cannot be trained on: a dictionary reads a (tokens, d_e) activation of the "
                         f"residual stream, such as self/0/resid_post, mlp/0/out or final, or an MLP (mlp/0: a "
                         f"transcoder).")
    return "sae", name, name


FOLDER = "features"  # a run folder's dictionaries: features/<point>-step<N>/


def dictionary_folder(run_dir: str | Path, point: str, step: int) -> Path:
    """Where the app keeps the dictionary of ``point`` (`points_of`'s NAME) trained at ``step`` of a run:
    ``RUN/features/mlp-1-step2000``, ``RUN/features/self-1-resid_post-step2000``."""
    return Path(run_dir) / FOLDER / f"{point.replace('/', '-')}-step{step}"


def saved_dictionaries(run_dir: str | Path) -> list[Path]:
    """The dictionary folders of a run (those holding dictionary.json), sorted by name."""
    root = Path(run_dir) / FOLDER
    return sorted(p for p in root.iterdir() if (p / INFO).is_file()) if root.is_dir() else []


__all__ = ["Dictionary", "DictionaryKind", "KINDS", "load", "points_of", "dictionary_folder", "saved_dictionaries",
           "WEIGHTS", "INFO", "FOLDER"]
