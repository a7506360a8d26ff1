"""Run folders: one per training run, in open formats, every file written to a temporary name and renamed
into place. ``config.json``, ``meta.json``, ``tokenizer.json``, append-only ``metrics.jsonl`` and
``samples.jsonl``, weights as ``model.safetensors`` and the optimizer state as ``optimizer.pt`` (read with
``weights_only=True``), and ``probes/step-NNNNNNNN.safetensors``: every head's attention map for the run's
probe input at each evaluation (see `probes`). Loading a run never executes code from it.

``metrics.jsonl`` holds one row per step: ``step``, ``train_loss``, ``lr``, ``grad_norm`` (None, with
``skipped``, where loss scaling skipped the step), ``tokens_per_s``, and on evaluated steps
``eval_train_loss``, ``val_loss`` and ``accuracy``. The trainer measures throughput once per emission
window (a batch of steps announced together), so every row of a window carries the window's
``tokens_per_s`` and the window's last row carries ``window_end: true``: the throughput curve is the
``tokens_per_s`` of those rows.

With ``train.tensorboard = true`` the rows and samples also go into TensorBoard event files in
``tensorboard/`` (`tensorboard_log`), written as they are appended and closed when the run ends.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from .config import RunConfig

if TYPE_CHECKING:
    from .attention_maps import AttentionMaps
    from .model import Transformer
    from .probes import ProbeInput
    from .tensorboard_log import TensorBoardLog
    from .tokenization import Tokenizer

CONFIG, META, TOKENIZER, METRICS, SAMPLES = "config.json", "meta.json", "tokenizer.json", "metrics.jsonl", "samples.jsonl"
WEIGHTS, OPTIMIZER = "model.safetensors", "optimizer.pt"
METRICS_WINDOWS = "metrics_window_ends"  # meta.json: metrics.jsonl marks each throughput window's last row
ENDED = ("finished", "failed", "stopped")  # the statuses a run ends with (write_meta closes its event files)


def default_runs_root() -> Path:
    """``$FATSTUDIO_RUNS``, else ``runs`` in the platform's user data folder for fatstudio (platformdirs):
    ``$XDG_DATA_HOME/fatstudio`` or ``~/.local/share/fatstudio`` on Linux, ``~/Library/Application
    Support/fatstudio`` on macOS, ``%LOCALAPPDATA%\\fatstudio`` on Windows."""
    if os.environ.get("FATSTUDIO_RUNS"):
        return Path(os.environ["FATSTUDIO_RUNS"]).expanduser()
    return platformdirs.user_data_path("fatstudio", appauthor=False) / "runs"


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write to a temporary file beside ``path``, flush it to disk, then rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; a torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


@dataclass
class LoadedModel:
    """A model ready for prompting: in eval mode (on the CPU unless `Run.load_model` was asked for another
    device), never the live training model."""

    model: Transformer  # built by `model.build_model` from config.model
    tokenizer: Tokenizer
    config: RunConfig
    class_names: list[str] = field(default_factory=list)
    label: str = ""
    step: int = 0


class Run:
    """One run folder. Create with `Run.create`, reopen with `Run.open`."""

    def __init__(self, path: Path, config: RunConfig, meta: dict):
        self.path, self.config, self.meta = Path(path), config, meta
        self._tensorboard: TensorBoardLog | None = None  # opened by the first write when config says so

    @property
    def name(self) -> str:
        return self.path.name

    # -- creating and opening ------------------------------------------------------------------------------
    @classmethod
    def create(cls, config: RunConfig, root: Path | None = None, name: str | None = None) -> Run:
        root = Path(root) if root else default_runs_root()
        root.mkdir(parents=True, exist_ok=True)
        if name:  # an explicit folder (the CLI's --out): exactly there, and never over an earlier run
            path = root / name
            if path.exists() and any(path.iterdir()):
                raise ValueError(f"{path} already exists and is not empty; choose another --out or use --resume.")
            path.mkdir(exist_ok=True)
        else:
            corpus = Path(config.data.corpus).stem or "corpus"
            base = f"{time.strftime('%Y%m%d-%H%M%S')}-{config.model.arch}-{corpus}"
            path, i = root / base, 1
            while path.exists():
                i += 1
                path = root / f"{base}-{i}"
            path.mkdir()
        run = cls(path, config, {})
        run.write_config(config)
        now = time.time()
        run.write_meta(status="created", step=0, total_steps=config.train.steps, created=now, arch=config.model.arch,
                       corpus=config.data.corpus, task=config.data.task, versions=_versions(),
                       **{METRICS_WINDOWS: True})
        return run

    @classmethod
    def open(cls, path: str | Path) -> Run:
        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"{path} is not a fatstudio run: no such folder.")
        try:
            config = RunConfig.from_dict(json.loads((path / CONFIG).read_text(encoding="utf-8")))
            meta = json.loads((path / META).read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ValueError(f"{path} is not a fatstudio run: {Path(e.filename).name} is missing.") from None
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError) as e:
            raise ValueError(f"{path} is not a fatstudio run: its config or meta file is unreadable ({e}).") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{path} is not a fatstudio run: meta.json holds no object.")
        return cls(path, config, meta)

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.path)

    # -- files -----------------------------------------------------------------------------------------------
    def write_config(self, config: RunConfig) -> None:
        self.config = config
        atomic_write(self.path / CONFIG, json.dumps(config.to_dict(), indent=2))

    def write_meta(self, **updates) -> None:
        """Update meta.json. ``status="running"`` with ``train.tensorboard`` on first imports TensorBoard's
        writer (a ValueError in one line, before the run starts, if it cannot); a status the run ends with
        (`ENDED`) closes the event files."""
        status = updates.get("status")
        if status == "running" and self.config.train.tensorboard:
            from .tensorboard_log import summary_writer_class

            summary_writer_class()
        self.meta.update(updates, updated=time.time())
        atomic_write(self.path / META, json.dumps(self.meta, indent=2))
        if status in ENDED:
            self.close()

    def append_metrics(self, rows: list[dict]) -> None:
        """Append metrics rows (see the module docstring for their fields); with ``train.tensorboard`` also
        to the event files, flushed."""
        self._append(METRICS, rows)
        if rows and self.config.train.tensorboard:
            self._events().add_rows(rows)

    def append_sample(self, step: int, text: str) -> None:
        self._append(SAMPLES, [{"step": step, "text": text}])
        if self.config.train.tensorboard:
            self._events().add_sample(step, text)

    def _events(self) -> TensorBoardLog:
        if self._tensorboard is None:
            from .tensorboard_log import TENSORBOARD_DIR, TensorBoardLog

            self._tensorboard = TensorBoardLog(self.path / TENSORBOARD_DIR)
        return self._tensorboard

    def close(self) -> None:
        """Close the run's TensorBoard event file if one is open (writing more opens a new one)."""
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None

    def _append(self, name: str, rows: list[dict]) -> None:
        if rows:
            with open(self.path / name, "a", encoding="utf-8") as f:
                f.write(_jsonl(rows))
                f.flush()

    def truncate_after(self, step: int) -> None:
        """Drop metric and sample rows and probe maps after ``step`` (resuming from a checkpoint that a crash
        outran)."""
        for name in (METRICS, SAMPLES):
            rows = _read_jsonl(self.path / name)
            if any(r.get("step", 0) > step for r in rows):
                atomic_write(self.path / name, _jsonl(r for r in rows if r.get("step", 0) <= step))
        from .probes import remove_after

        remove_after(self.path, step)

    def metrics(self) -> list[dict]:
        """The rows of metrics.jsonl, each throughput window's last row marked ``window_end`` (also in runs
        that fatstudio wrote before it marked them)."""
        rows = _read_jsonl(self.path / METRICS)
        if not self.meta.get(METRICS_WINDOWS):
            _mark_window_ends(rows)
        return rows

    def samples(self) -> list[dict]:
        return _read_jsonl(self.path / SAMPLES)

    def save_tokenizer(self, tokenizer) -> None:
        atomic_write(self.path / TOKENIZER, tokenizer.to_json())

    def load_tokenizer(self):
        from .tokenization import Tokenizer
        try:
            return Tokenizer.from_json((self.path / TOKENIZER).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{self.path} has no tokenizer.json; the run is incomplete.") from None
        except Exception as e:  # the tokenizers library raises its own exception types
            raise ValueError(f"{self.path}/tokenizer.json is corrupt or foreign: {e}") from None

    # -- probes (attention over training time) -------------------------------------------------------------
    def probe_input(self) -> ProbeInput | None:
        """The run's `probes.ProbeInput` (from meta.json), or None for a run that has none."""
        from .probes import META_KEY, ProbeInput

        d = self.meta.get(META_KEY)
        return ProbeInput.from_dict(d) if d else None

    def probe_steps(self) -> list[int]:
        """The steps whose probe maps are saved, ascending."""
        from .probes import list_probes

        return list(list_probes(self.path))

    def load_probe(self, step: int) -> AttentionMaps:
        """The `AttentionMaps` of the probe saved at ``step`` (float16 widened to float32);
        `probes.MissingProbe` (a ValueError listing the saved steps) if there are none."""
        from .probes import load_probe

        return load_probe(self.path, step)

    @property
    def has_checkpoint(self) -> bool:
        return (self.path / WEIGHTS).exists()

    # -- checkpoints -----------------------------------------------------------------------------------------
    def save_checkpoint(self, model, optimizer, step: int, state: dict) -> None:
        """Weights (safetensors) and optimizer/RNG state (torch tensors and numbers only), each renamed into
        place; both carry ``step`` so a mismatch after a crash between the two renames is detected."""
        import torch
        from safetensors.torch import save_model

        fd, tmp = tempfile.mkstemp(prefix=f".{WEIGHTS}.", suffix=".tmp", dir=self.path)
        os.close(fd)
        try:
            save_model(model, tmp, metadata={"step": str(step), "format": "fatstudio"})
            fd, tmp_opt = tempfile.mkstemp(prefix=f".{OPTIMIZER}.", suffix=".tmp", dir=self.path)
            with os.fdopen(fd, "wb") as f:
                torch.save({"step": step, "optimizer": optimizer.state_dict(), **state}, f)
            os.replace(tmp_opt, self.path / OPTIMIZER)
            os.replace(tmp, self.path / WEIGHTS)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self.write_meta(checkpoint_step=step)

    def load_weights(self, model) -> int:
        """Load model.safetensors into ``model``; return its step. ValueError if missing, corrupt or foreign."""
        from safetensors import safe_open
        from safetensors.torch import load_model

        from .device import is_out_of_memory

        path = self.path / WEIGHTS
        if not path.exists():
            raise ValueError(f"{self.path} has no weights yet (model.safetensors); train it first.")
        try:
            with safe_open(str(path), framework="pt") as f:
                step = int((f.metadata() or {}).get("step", 0))
            missing, unexpected = load_model(model, str(path), strict=False, device=str(next(model.parameters()).device))
        except Exception as e:  # safetensors raises its own error types for bad headers and shapes
            if is_out_of_memory(e):
                raise  # the file is fine; the device is full
            raise ValueError(f"{path} is corrupt or does not match the run's config: {e}") from None
        if missing or unexpected:
            raise ValueError(f"{path} does not match the run's config (missing {sorted(missing)[:3]}, "
                             f"unexpected {sorted(unexpected)[:3]}).")
        return step

    def load_training_state(self) -> dict | None:
        """The optimizer/RNG state saved with the weights, or None if absent or unreadable."""
        import torch
        try:
            return torch.load(self.path / OPTIMIZER, map_location="cpu", weights_only=True)
        except Exception:  # a torn or foreign file: resume with fresh optimizer state
            return None

    def load_model(self, device: str = "cpu") -> LoadedModel:
        """The trained model for prompting (eval mode), with its tokenizer."""
        from .model import build_model

        tokenizer = self.load_tokenizer()
        model = build_model(self.config.model).to(device)
        step = self.load_weights(model)
        model.eval()
        return LoadedModel(model, tokenizer, self.config, list(self.meta.get("class_names", [])),
                           f"{self.name} · step {step}", step)


def _mark_window_ends(rows: list[dict]) -> None:
    """Mark the window ends of metrics rows written before the trainer marked them: it wrote each window's
    throughput onto all of the window's rows, so a window ends where the next row's value differs."""
    for row, after in zip(rows, [*rows[1:], {}]):
        if row.get("tokens_per_s") is not None and row["tokens_per_s"] != after.get("tokens_per_s"):
            row["window_end"] = True


def list_runs(root: Path | None = None) -> list[Run]:
    """Every readable run under ``root``, newest first; folders that are not runs are skipped."""
    root = Path(root) if root else default_runs_root()
    runs = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and (p / CONFIG).exists():
                try:
                    runs.append(Run.open(p))
                except ValueError:
                    continue
    return sorted(runs, key=lambda r: r.meta.get("created", 0), reverse=True)


def _versions() -> dict[str, str]:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for pkg in ("fatstudio", "torch", "tokenizers", "safetensors"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out
