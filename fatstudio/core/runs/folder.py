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

``meta.json`` records the layout's ``format_version`` (`FORMAT_VERSION`; a run without one is version 1): a run
written by a newer fatstudio is refused with a message rather than misread. Training holds ``.lock`` in the
folder (`Run.lock`, an OS file lock: released when training ends, however it ends, or when its process dies),
so a second process training the same run is refused at once; reading a run takes no lock.

With ``train.tensorboard = true`` the rows and samples also go into TensorBoard event files in
``tensorboard/`` (`tensorboard_log`), written as they are appended and closed when the run ends.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from ..config import RunConfig
from ..files import atomic_write, naming, os_error_in
from ..inspect.loaded import LoadedModel
from ..memory import check_fits
from ..records import TOKENS_PER_S, WINDOW_END, MetricsRow, RunMeta, jsonl, read_jsonl, row_step

if TYPE_CHECKING:
    from filelock import BaseFileLock

    from ..inspect.attention_maps import AttentionMaps
    from ..inspect.probes import ProbeInput
    from .tensorboard_log import TensorBoardLog

CONFIG, META, TOKENIZER, METRICS, SAMPLES = "config.json", "meta.json", "tokenizer.json", "metrics.jsonl", "samples.jsonl"
WEIGHTS, OPTIMIZER = "model.safetensors", "optimizer.pt"
METRICS_WINDOWS = "metrics_window_ends"  # meta.json: metrics.jsonl marks each throughput window's last row
ENDED = ("finished", "failed", "stopped")  # the statuses a run ends with (write_meta closes its event files)
FORMAT_VERSION = 1  # meta.json's format_version: the run folder layout this fatstudio writes and reads up to
LOCK = ".lock"  # held by the process training the run (`Run.lock`)
_TAKEN = "{path} already exists and is not empty; choose another --out or use --resume."


def default_runs_root() -> Path:
    """``$FATSTUDIO_RUNS``, else ``runs`` in the platform's user data folder for fatstudio (platformdirs):
    ``$XDG_DATA_HOME/fatstudio`` or ``~/.local/share/fatstudio`` on Linux, ``~/Library/Application
    Support/fatstudio`` on macOS, ``%LOCALAPPDATA%\\fatstudio`` on Windows."""
    if os.environ.get("FATSTUDIO_RUNS"):
        return Path(os.environ["FATSTUDIO_RUNS"]).expanduser()
    return platformdirs.user_data_path("fatstudio", appauthor=False) / "runs"


class Run:
    """One run folder. Create with `Run.create`, reopen with `Run.open`."""

    def __init__(self, path: Path, config: RunConfig, meta: dict):
        self.path, self.config, self.meta = Path(path), config, meta
        self._tensorboard: TensorBoardLog | None = None  # opened by the first write when config says so
        self._lock: BaseFileLock | None = None  # held while this process trains the run (`lock`)

    @property
    def name(self) -> str:
        return self.path.name

    # -- creating and opening ------------------------------------------------------------------------------
    @staticmethod
    def check_new(path: str | Path) -> None:
        """ValueError unless ``path`` can become a new run: absent, or an empty folder (an earlier run is never
        overwritten: resume it instead)."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} is a file, not a folder; choose another --out.")
        for parent in path.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"cannot create the run folder {path}: {parent} is a file, not a folder.")
        if path.is_dir() and not _empty(path):
            raise ValueError(_TAKEN.format(path=path))

    @classmethod
    def create(cls, config: RunConfig, root: Path | None = None, name: str | None = None, lock: bool = False) -> Run:
        """A new run folder: ``root/name`` (which must be new or empty, `check_new`), else a new name under
        ``root`` (default: `default_runs_root`). ``lock``: `lock` it before anything is written. A folder that
        cannot be made or written is a ValueError naming it and why."""
        root = Path(root) if root else default_runs_root()
        path = root / name if name else root
        try:
            root.mkdir(parents=True, exist_ok=True)
            if name:  # an explicit folder (the CLI's --out): exactly there, and never over an earlier run
                cls.check_new(path)
                made = not path.exists()
                path.mkdir(exist_ok=True)
            else:
                corpus = Path(config.data.corpus).stem or "corpus"
                base = f"{time.strftime('%Y%m%d-%H%M%S')}-{config.model.arch}-{corpus}"
                path, i = root / base, 1
                while path.exists():
                    i += 1
                    path = root / f"{base}-{i}"
                path.mkdir()
                made = True
        except OSError as e:
            raise ValueError(f"cannot create the run folder {path}: {_why(e, path)}.") from None
        run = cls(path, config, {})
        if lock:
            run.lock()
            if name and not _empty(path):  # another process made a run there after our check
                run.unlock()
                raise ValueError(_TAKEN.format(path=path))
        try:
            run.write_config(config)
            now = time.time()
            run.write_meta(status="created", step=0, total_steps=config.train.steps, created=now,
                           arch=config.model.arch, corpus=config.data.corpus, task=config.data.task,
                           versions=_versions(), format_version=FORMAT_VERSION, **{METRICS_WINDOWS: True})
        except OSError as e:  # leave nothing half-made behind (the folder is ours: new, or empty and locked)
            run.unlock()
            for f in (CONFIG, META, *((LOCK,) if made else ())):
                with contextlib.suppress(OSError):
                    (path / f).unlink(missing_ok=True)
            if made:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise ValueError(f"cannot write the run folder {path}: {_why(e, path)}.") from None
        return run

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """The run at ``path`` (no lock: reading is never blocked). ValueError, naming the file, for a folder
        that is not a run, a missing, unreadable or truncated config.json or meta.json, and a run written by a
        newer fatstudio (a newer ``format_version``)."""
        path = Path(path)
        if not path.is_dir():
            raise ValueError(f"{path} is not a fatstudio run: no such folder.")
        meta = _read_json(path, META)
        version = meta.get("format_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"{path / META} is not a fatstudio run's: format_version {version!r} is not a version.")
        if version > FORMAT_VERSION:
            raise ValueError(f"{path} was written by a newer fatstudio (format {version}; this one reads up to "
                             f"{FORMAT_VERSION}); upgrade fatstudio.")
        d = _read_json(path, CONFIG)
        try:
            config = RunConfig.from_dict(d)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"{path / CONFIG} is not a valid run config: {e}") from None
        return cls(path, config, meta)

    def delete(self) -> None:
        """Remove the run's folder. A run another process trains (`lock`) is a ValueError and nothing goes."""
        self.close()
        if not self.locked:
            self.lock()  # refused at once if another process holds it
        self.unlock()
        shutil.rmtree(self.path)

    # -- the lock (one training process per run) --------------------------------------------------------------
    def lock(self) -> None:
        """Hold ``RUN/.lock`` while this process trains the run: an OS lock (filelock), so it is released by
        `unlock` or, however the process ends (kill -9 too), by the system. Another process holding it is a
        ValueError at once (no waiting)."""
        from filelock import FileLock, Timeout

        if self._lock is not None:
            return
        lock = FileLock(str(self.path / LOCK), thread_local=False)  # released from whichever thread ends the run
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ValueError(f"{self.path} is being trained by another process; wait for it to end or stop it.") from None
        except OSError as e:
            raise ValueError(f"cannot write the run folder {self.path}: {_why(e, self.path)}.") from None
        self._lock = lock

    def unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                self._lock.release(force=True)
            self._lock = None

    @property
    def locked(self) -> bool:
        """Whether this process holds the run's lock (`lock`)."""
        return self._lock is not None

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

    def try_write_meta(self, **updates) -> bool:
        """`write_meta`, unless the folder cannot be written (a full disk, whose error is being reported
        already): False then. For marking a run that ends on an error."""
        try:
            self.write_meta(**updates)
        except OSError:
            self.close()
            return False
        return True

    def append_metrics(self, records: list[MetricsRow]) -> None:
        """Append metrics rows (see the module docstring for their fields); with ``train.tensorboard`` also
        to the event files, flushed."""
        rows = [dict(r) for r in records]
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
            try:
                with open(self.path / name, "a", encoding="utf-8") as f:
                    f.write(jsonl(rows))
                    f.flush()
            except OSError as e:  # a torn last row is skipped when read (`records.read_jsonl`)
                raise naming(e, self.path / name) from None

    def truncate_after(self, step: int) -> None:
        """Drop metric and sample rows and probe maps after ``step`` (resuming from a checkpoint that a crash
        outran)."""
        for name in (METRICS, SAMPLES):
            rows = read_jsonl(self.path / name)
            if any(row_step(r) > step for r in rows):
                atomic_write(self.path / name, jsonl(r for r in rows if row_step(r) <= step))
        from ..inspect.probes import remove_after

        remove_after(self.path, step)

    @property
    def info(self) -> RunMeta:
        """meta.json through typed readers (`records.RunMeta`)."""
        return RunMeta(self.meta)

    def metrics(self) -> list[dict]:
        """The rows of metrics.jsonl, each throughput window's last row marked ``window_end`` (also in runs
        that fatstudio wrote before it marked them)."""
        rows = read_jsonl(self.path / METRICS)
        if not self.meta.get(METRICS_WINDOWS):
            _mark_window_ends(rows)
        return rows

    def samples(self) -> list[dict]:
        return read_jsonl(self.path / SAMPLES)

    def save_tokenizer(self, tokenizer) -> None:
        atomic_write(self.path / TOKENIZER, tokenizer.to_json())

    def load_tokenizer(self):
        from ..data.tokenization import Tokenizer
        try:
            return Tokenizer.from_json((self.path / TOKENIZER).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{self.path} has no tokenizer.json; the run is incomplete.") from None
        except Exception as e:  # the tokenizers library raises its own exception types
            raise ValueError(f"{self.path}/tokenizer.json is corrupt or foreign: {e}") from None

    # -- probes (attention over training time) -------------------------------------------------------------
    def probe_input(self) -> ProbeInput | None:
        """The run's `probes.ProbeInput` (from meta.json), or None for a run that has none."""
        from ..inspect.probes import META_KEY, ProbeInput

        d = self.meta.get(META_KEY)
        return ProbeInput.from_dict(d) if d else None

    def probe_steps(self) -> list[int]:
        """The steps whose probe maps are saved, ascending."""
        from ..inspect.probes import list_probes

        return list(list_probes(self.path))

    def load_probe(self, step: int) -> AttentionMaps:
        """The `AttentionMaps` of the probe saved at ``step`` (float16 widened to float32);
        `probes.MissingProbe` (a ValueError listing the saved steps) if there are none."""
        from ..inspect.probes import load_probe

        return load_probe(self.path, step)

    @property
    def has_checkpoint(self) -> bool:
        return (self.path / WEIGHTS).exists()

    # -- checkpoints -----------------------------------------------------------------------------------------
    def save_checkpoint(self, model, optimizer, step: int, state: dict) -> None:
        """Weights (safetensors, with the model's config in their metadata) and optimizer/RNG state (torch
        tensors and numbers only), each written to a temporary file and renamed into place; both carry
        ``step`` so a mismatch after a crash between the two renames is detected. A write that fails (a full
        disk) removes its temporary files and is a ValueError; the previous checkpoint is left as it was."""
        import torch
        from safetensors.torch import save_model

        metadata = {"step": str(step), "format": "fatstudio"}
        if _model_config(model):
            metadata["model"] = json.dumps(_model_config(model))
        tmp = tmp_opt = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{WEIGHTS}.", suffix=".tmp", dir=self.path)
            os.close(fd)
            save_model(model, tmp, metadata=metadata)
            fd, tmp_opt = tempfile.mkstemp(prefix=f".{OPTIMIZER}.", suffix=".tmp", dir=self.path)
            with os.fdopen(fd, "wb") as f:
                torch.save({"step": step, "optimizer": optimizer.state_dict(), **state}, f)
            os.replace(tmp_opt, self.path / OPTIMIZER)
            os.replace(tmp, self.path / WEIGHTS)
        except Exception as e:  # torch.save and safetensors wrap the OSError of a full disk in their own errors
            cause = os_error_in(e)
            if cause is None:
                raise
            kept = self.meta.get("checkpoint_step")
            raise ValueError(f"cannot save the checkpoint of step {step} in {self.path}: {_why(cause, self.path)}; "
                             + (f"the checkpoint of step {kept} is kept." if kept else "no checkpoint was saved.")) from e
        finally:
            for t in (tmp, tmp_opt):
                if t:
                    with contextlib.suppress(OSError):
                        Path(t).unlink(missing_ok=True)
        self.write_meta(checkpoint_step=step)

    def load_weights(self, model) -> int:
        """Load model.safetensors into ``model``; return its step. ValueError if missing, corrupt or foreign."""
        from safetensors import safe_open
        from safetensors.torch import load_model

        from ..device import is_out_of_memory

        path = self.path / WEIGHTS
        if not path.exists():
            raise ValueError(f"{self.path} has no weights yet (model.safetensors); train it first.")
        try:
            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                step = int(metadata.get("step", 0))
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (not a dict)
        except Exception as e:  # safetensors raises its own error types for bad headers
            raise ValueError(f"{path} is corrupt or not a safetensors file: {e}") from None
        saved = _saved_model_config(metadata)
        mismatch = _arch_mismatch(saved, model) or _shape_mismatch(shapes, model)
        if mismatch:
            raise ValueError(f"{path} does not match the run's config.json: {mismatch}{_fields_differ(saved, model)}.")
        try:
            missing, unexpected = load_model(model, str(path), strict=False, device=str(next(model.parameters()).device))
        except Exception as e:  # safetensors raises its own error types for bad headers and shapes
            if is_out_of_memory(e):
                raise  # the file is fine; the device is full
            raise ValueError(f"{path} is corrupt or does not match the run's config: {e}") from None
        if missing or unexpected:
            raise ValueError(f"{path} does not match the run's config.json: other tensors (missing "
                             f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}){_fields_differ(saved, model)}.")
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
        from ..model import build_model

        check_fits(self.config.model, 1, device, training=False, what=f"opening the model of {self.path}")
        tokenizer = self.load_tokenizer()
        model = build_model(self.config.model).to(device)
        step = self.load_weights(model)
        model.eval()
        return LoadedModel(model, tokenizer, self.config, list(self.meta.get("class_names", [])),
                           f"{self.name} · step {step}", step)


def _model_config(model) -> dict:
    to_dict = getattr(getattr(model, "config", None), "to_dict", None)
    return to_dict() if callable(to_dict) else {}


def _saved_model_config(metadata: dict) -> dict:
    """The model config saved in the weights' metadata (`Run.save_checkpoint`); {} in older weights."""
    try:
        saved = json.loads(metadata.get("model") or "{}")
    except json.JSONDecodeError:
        return {}
    return saved if isinstance(saved, dict) else {}


def _arch_mismatch(saved: dict, model) -> str | None:
    arch = _model_config(model).get("arch")
    if saved.get("arch", arch) != arch:
        return f"the weights are of a {saved['arch']} model, the config's model.arch is {arch!r}"
    return None


def _fields_differ(saved: dict, model) -> str:
    """The model fields whose values the weights were saved with differ from the config's, in words (after
    a mismatch: what was changed); "" where unknown."""
    now = _model_config(model)
    differ = [k for k in now if k in saved and saved[k] != now[k] and k != "arch"]
    if not differ:
        return ""
    shown = ", ".join(f"{k} = {saved[k]!r} (config: {now[k]!r})" for k in differ[:3])
    return f"; the weights were saved with {shown}{' and more' if len(differ) > 3 else ''}"


def _shape_mismatch(shapes: dict[str, tuple[int, ...]], model) -> str | None:
    """The first tensor whose shape in the file differs from ``model``'s, in words (weights saved without
    their config); None if every tensor both have agrees."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    differ = [k for k in shapes if k in expected and shapes[k] != expected[k]]
    if not differ:
        return None
    k = differ[0]

    def shape(s: tuple[int, ...]) -> str:
        return "×".join(map(str, s)) or "a scalar"

    more = f" ({len(differ)} tensors differ)" if len(differ) > 1 else ""
    return f"{k} is {shape(shapes[k])} in the weights, {shape(expected[k])} for the config{more}"


def _mark_window_ends(rows: list[dict]) -> None:
    """Mark the window ends of metrics rows written before the trainer marked them: it wrote each window's
    throughput onto all of the window's rows, so a window ends where the next row's value differs."""
    for row, after in zip(rows, [*rows[1:], {}]):
        if row.get(TOKENS_PER_S) is not None and row[TOKENS_PER_S] != after.get(TOKENS_PER_S):
            row[WINDOW_END] = True


def _empty(path: Path) -> bool:
    """No files in the folder but a lock's (left by a creation that failed, or an earlier lock)."""
    return all(p.name == LOCK for p in path.iterdir())


def _why(e: OSError, path: Path) -> str:
    """Why ``path`` could not be made or written, in words: a file where a folder was meant, else the system's."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                return f"{p} is a file, not a folder"
            break
    if e.errno == errno.ENOSPC:
        return "the disk is full"
    return e.strerror.lower() if e.strerror else str(e)


def _read_json(path: Path, name: str) -> dict:
    """The object in ``path/name``; ValueError naming the file if it is missing, unreadable, truncated or
    not an object."""
    f = path / name
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path} is not a fatstudio run: {name} is missing.") from None
    except OSError as e:
        raise ValueError(f"{f} cannot be read: {_why(e, f)}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{f} is truncated or not JSON ({e}); the run cannot be opened.") from None
    if not isinstance(d, dict):
        raise ValueError(f"{f} holds no JSON object; the run cannot be opened.")
    return d


def list_runs(root: Path | None = None) -> list[Run]:
    """Every readable run under ``root``, newest first; folders that are not runs (or not readable ones: a
    truncated config.json or meta.json, a newer format) are skipped."""
    root = Path(root) if root else default_runs_root()
    runs = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and (p / CONFIG).exists():
                try:
                    runs.append(Run.open(p))
                except ValueError:
                    continue
    return sorted(runs, key=lambda r: _created(r.meta), reverse=True)


def _created(meta: dict) -> float:
    created = meta.get("created", 0)
    return float(created) if isinstance(created, (int, float)) else 0.0


def _versions() -> dict[str, str]:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for pkg in ("fatstudio", "torch", "tokenizers", "safetensors"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


def load_at_step(run: Run, step: int | None) -> LoadedModel:
    """The run's model at ``step`` (None: the saved weights). A run folder keeps one set of weights, the last
    checkpoint's (probe steps keep attention maps only), so another step is a ValueError naming the one kept."""
    loaded = run.load_model()
    if step is not None and step != loaded.step:
        probes = run.probe_steps()
        more = (f"; its probe steps ({_steps(probes)}) keep attention maps, not weights" if probes else "")
        raise ValueError(f"{run.path} keeps the weights of step {loaded.step} only (each checkpoint replaces the "
                         f"last){more}. Use --step {loaded.step} or leave --step out.")
    return loaded


def _steps(steps: Sequence[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 6 else f"{steps[0]}, {steps[1]}, …, {steps[-1]}"
