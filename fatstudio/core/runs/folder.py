"""Run folders: one per training run, in open formats, every file written to a temporary name and renamed
into place. ``config.json``, ``meta.json``, ``tokenizer.json``, append-only ``metrics.jsonl`` and
``samples.jsonl``, weights as ``model.safetensors`` and the optimizer state as ``optimizer.pt`` (read with
``weights_only=True``), and ``probes/step-NNNNNNNN.safetensors``: every head's attention map for the run's
probe input at each evaluation (see `probes`), and ``snapshots/step-NNNNNNNN.safetensors``: the weights at those
steps (see `snapshots`). Loading a run never executes code from it.

``metrics.jsonl`` holds one row per step: ``step``, ``train_loss``, ``lr``, ``grad_norm`` (None, with
``skipped``, where loss scaling skipped the step), ``tokens_per_s``, and on evaluated steps
``eval_train_loss``, ``val_loss`` and ``accuracy``. The trainer measures throughput once per emission
window (a batch of steps announced together), so every row of a window carries the window's
``tokens_per_s`` and the window's last row carries ``window_end: true``: the throughput curve is the
``tokens_per_s`` of those rows.

``meta.json`` records the layout's ``format_version`` (`FORMAT_VERSION`; a run without one is version 1): a run
written by a newer fatstudio is refused with a message rather than misread. Training holds ``.lock`` in the
folder (`Run.lock`, an OS file lock: released when training ends, however it ends, or when its process dies),
so a second process training the same run is refused at once. Reading a run writes nothing, takes no lock and
needs nothing writable; a run whose meta.json says it is at work (`AT_WORK`) while no process holds its lock
reads as `INTERRUPTED` (its process was killed or crashed), what the runs list shows and what resuming continues.

With ``train.tensorboard = true`` the rows and samples also go into TensorBoard event files in
``tensorboard/`` (`tensorboard_log`), written as they are appended and closed when the run ends.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from ..config import RunConfig
from ..environment import RUNS
from ..files import (
    JSON_LIMIT,
    ROWS_LIMIT,
    TOKENIZER_LIMIT,
    NotAFile,
    atomic_write,
    cannot_make,
    naming,
    read_bytes,
    read_text,
    regular_file,
    why_not_written,
)
from ..inference.loaded import LoadedModel
from ..records import (
    AT_WORK,
    ENDED,
    INTERRUPTED,
    MetricsRow,
    RunMeta,
    RunStatus,
    jsonl,
    mark_window_ends,
    parse_jsonl,
    read_jsonl,
    row_step,
)
from ..temporary import held, remove_abandoned
from . import agreement, snapshots
from .weights import CONFIG, META, METRICS, OPTIMIZER, SAMPLES, TOKENIZER, WEIGHTS, RunWeights

if TYPE_CHECKING:
    from filelock import BaseFileLock

    from ..inference.attention_maps import AttentionMaps
    from ..inspect.probes import ProbeInput
    from .tensorboard_log import TensorBoardLog

METRICS_WINDOWS = "metrics_window_ends"  # meta.json: metrics.jsonl marks each throughput window's last row
FORMAT_VERSION = 2  # meta.json's format_version: the run folder layout this fatstudio writes and reads up to
# (2: every weight file carries a checksum, `weights.CHECKSUMMED`; 1 and older runs load without one)
LOCK = ".lock"  # held by the process training the run (`Run.lock`)
RUN_FILES = (CONFIG, META, TOKENIZER, METRICS, SAMPLES, WEIGHTS, OPTIMIZER)
_TAKEN = "{path} already exists and is not empty; choose another --out or use --resume."
BUSY = "{path} is being trained by another process; wait for it to end or stop it."
LOCK_WAIT_S = 0.25  # how long `Run.lock` tries: a reader's look at the lock (`temporary.held`) holds it for microseconds


def default_runs_root() -> Path:
    """``$FATSTUDIO_RUNS``, else ``runs`` in the platform's user data folder for fatstudio (platformdirs):
    ``$XDG_DATA_HOME/fatstudio`` or ``~/.local/share/fatstudio`` on Linux, ``~/Library/Application
    Support/fatstudio`` on macOS, ``%LOCALAPPDATA%\\fatstudio`` on Windows."""
    return RUNS.value() or platformdirs.user_data_path("fatstudio", appauthor=False) / "runs"


class Run(RunWeights):
    """One run folder. Create with `Run.create`, reopen with `Run.open`; its weights: `weights.RunWeights`."""

    def __init__(self, path: Path, config: RunConfig, meta: dict, interrupted: bool = False):
        self.path, self.config, self.meta = Path(path), config, meta
        self.interrupted = interrupted  # meta.json says a process is at work on the run, and none is (`open`)
        self._tensorboard: TensorBoardLog | None = None  # opened by the first write when config says so
        self._lock: BaseFileLock | None = None  # held while this process trains the run (`lock`)

    @property
    def name(self) -> str:
        return self.path.name

    # -- creating and opening ------------------------------------------------------------------------------
    @staticmethod
    def check_new(path: str | Path) -> None:
        """ValueError unless ``path`` can become a new run: absent, or an empty folder (an earlier run is never
        overwritten: resume it instead), where this process may write (`files.cannot_make`)."""
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} is a file, not a folder; choose another --out.")
        inside = run_folder_above(path)
        if inside:
            raise ValueError(f"{path} is inside the run {inside}; a run folder holds one run: choose another --out.")
        for parent in path.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"cannot create the run folder {path}: {parent} is a file, not a folder.")
        if path.is_dir() and not _empty(path):
            raise ValueError(_TAKEN.format(path=path))
        problem = cannot_make(path)  # a read-only disk: said now, not once the corpus is prepared
        if problem:
            raise ValueError(f"cannot create the run folder {path}: {problem}.")

    @classmethod
    def create(cls, config: RunConfig, root: Path | None = None, name: str | None = None, lock: bool = False,
               tuned_from: str | None = None) -> Run:
        """A new run folder: ``root/name`` (which must be new or empty, `check_new`), else a new name under
        ``root`` (default: `default_runs_root`; `run_name`, ``tuned_from`` the name of the run whose weights it starts
        from). ``lock``: `lock` it before anything is written. A folder that cannot be made or written is a ValueError
        naming it and why."""
        root = Path(root) if root else default_runs_root()
        path = root / name if name else root
        try:
            root.mkdir(parents=True, exist_ok=True)
            remove_abandoned(root)  # the hidden work a killed import or copy left there
            if name:  # an explicit folder (the CLI's --out): exactly there, and never over an earlier run
                cls.check_new(path)
                made = not path.exists()
                path.mkdir(exist_ok=True)
            else:
                base = run_name(config, tuned_from)
                path, i = root / base, 1
                while path.exists():
                    i += 1
                    path = root / f"{base}-{i}"
                path.mkdir()
                made = True
        except OSError as e:
            raise ValueError(f"cannot create the run folder {path}: {why_not_written(e, path)}.") from None
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
                           versions=_versions(), format_version=FORMAT_VERSION, run_id=uuid.uuid4().hex,
                           **{METRICS_WINDOWS: True})
        except OSError as e:  # leave nothing half-made behind (the folder is ours: new, or empty and locked)
            run.unlock()
            for f in (CONFIG, META, *((LOCK,) if made else ())):
                with contextlib.suppress(OSError):
                    (path / f).unlink(missing_ok=True)
            if made:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise ValueError(f"cannot write the run folder {path}: {why_not_written(e, path)}.") from None
        return run

    @classmethod
    def open(cls, path: str | Path) -> Run:
        """The run at ``path`` (no lock: reading is never blocked). ValueError, naming the file, for a folder
        that is not a run, a missing, unreadable or truncated config.json or meta.json, a run file that is not a
        regular file (`files.NotAFile`), and a run written by a newer fatstudio (a newer ``format_version``).
        A bare name that is no folder here is looked for in the runs folder (`default_runs_root`): the name the
        runs list shows."""
        path = Path(path)
        if not path.is_dir():
            root = default_runs_root()
            if len(path.parts) == 1 and not path.exists() and (root / path).is_dir():
                return cls.open(root / path)
            where = f" here or in the runs folder {root}" if len(path.parts) == 1 else ""
            raise ValueError(f"{path} is not a fatstudio run: "
                             f"{'a file, not a run folder' if path.exists() else f'no such folder{where}'}.")
        for name in RUN_FILES:  # a FIFO, a device or a socket in their place is refused here, never read
            if (path / name).exists():
                regular_file(path / name)
        meta = _read_json(path, META)
        version = meta.get("format_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"{path / META} is not a fatstudio run's: format_version {version!r} is not a version.")
        if version > FORMAT_VERSION:
            raise ValueError(f"{path} was written by a newer fatstudio (format {version}; this one reads up to "
                             f"{FORMAT_VERSION}); upgrade fatstudio.")
        d = _read_json(path, CONFIG)
        try:
            config = RunConfig.from_record(d)  # a key added since takes what the run used (data.split: the tail)
            config.model.validate()
            config.data.validate()  # training checks its own table when resuming
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ValueError(f"{path / CONFIG} is not a valid run config: {e}") from None
        return cls(path, config, meta, interrupted=meta.get("status") in AT_WORK and not held(path / LOCK))

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
        ValueError at once (after `LOCK_WAIT_S`, for a reader looking at it: `temporary.held`)."""
        from filelock import FileLock, Timeout

        if self._lock is not None:
            return
        busy = BUSY.format(path=self.path)
        for _ in range(3):  # the file we locked may have been removed by the holder releasing it (`unlock`)
            lock = FileLock(str(self.path / LOCK), thread_local=False)  # released from whichever thread ends the run
            try:
                lock.acquire(timeout=LOCK_WAIT_S)
            except Timeout:
                raise ValueError(busy) from None
            except OSError as e:
                raise ValueError(f"cannot write the run folder {self.path}: {why_not_written(e, self.path)}.") from None
            if _holds_the_file(lock, self.path / LOCK):
                self._lock = lock
                return
            with contextlib.suppress(OSError):
                lock.release(force=True)
        raise ValueError(busy)

    def unlock(self) -> None:
        """Release the lock; its file goes too (removed while still held, so no one locks it meanwhile) if it is
        empty, as the lock leaves it."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                if (self.path / LOCK).stat().st_size == 0:
                    (self.path / LOCK).unlink()
            with contextlib.suppress(OSError):
                self._lock.release(force=True)
            self._lock = None

    @property
    def locked(self) -> bool:
        """Whether this process holds the run's lock (`lock`)."""
        return self._lock is not None

    @property
    def trained_elsewhere(self) -> bool:
        """Whether another process (or another `Run` of this one) holds the run's lock, found without taking it."""
        return not self.locked and held(self.path / LOCK)

    # -- files -----------------------------------------------------------------------------------------------
    def write_config(self, config: RunConfig) -> None:
        self.config = config
        atomic_write(self.path / CONFIG, json.dumps(config.to_dict(), indent=2))

    def write_meta(self, status: RunStatus | None = None, **updates: Any) -> None:
        """Update meta.json (``status`` first, where given). ``status="running"`` with ``train.tensorboard`` on
        first imports TensorBoard's writer (a ValueError in one line, before the run starts, if it cannot); a
        status the run ends with (`ENDED`) closes the event files."""
        if status is not None:
            updates = {"status": status, **updates}
            self.interrupted = False
        if status == "running" and self.config.train.tensorboard:
            from .tensorboard_log import summary_writer_class

            summary_writer_class()
        self.meta.update(updates, updated=time.time())
        atomic_write(self.path / META, json.dumps(self.meta, indent=2))
        if status in ENDED:
            self.close()

    def try_write_meta(self, status: RunStatus | None = None, **updates: Any) -> bool:
        """`write_meta`, unless the folder cannot be written (a full disk, whose error is being reported
        already): False then. For marking a run that ends on an error."""
        try:
            self.write_meta(status, **updates)
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
                if (self.path / name).exists():
                    regular_file(self.path / name)  # never append to a FIFO (it blocks) or a device
                with open(self.path / name, "a", encoding="utf-8") as f:
                    f.write(jsonl(rows))
                    f.flush()
            except OSError as e:  # a torn last row is skipped when read (`records.read_jsonl`)
                raise naming(e, self.path / name) from None

    def truncate_after(self, step: int) -> None:
        """Drop metric and sample rows, probe maps and weight snapshots after ``step`` (resuming from a checkpoint
        that a crash outran), and the lines of the append-only files that are not rows (a torn last line: a crash
        mid-write), so the rows appended next start on a line of their own: one parseable row per step."""
        for name in (METRICS, SAMPLES):
            path = self.path / name
            if not path.exists():
                continue
            data = read_bytes(path, ROWS_LIMIT)
            kept = list({row_step(r): r for r in parse_jsonl(data) if row_step(r) <= step}.values())  # one a step
            lines = sum(1 for line in data.splitlines() if line.strip())
            if len(kept) != lines or (data and not data.endswith(b"\n")):
                atomic_write(path, jsonl(kept))
        from ..inspect.probes import remove_after

        remove_after(self.path, step)
        snapshots.remove_after(self.path, step)

    @property
    def info(self) -> RunMeta:
        """meta.json through typed readers (`records.RunMeta`), its status `INTERRUPTED` where its process is gone (read,
        never written)."""
        return RunMeta({**self.meta, "status": INTERRUPTED} if self.interrupted else self.meta)

    def metrics(self) -> list[dict]:
        """The rows of metrics.jsonl, each throughput window's last row marked ``window_end`` (also in runs
        that fatstudio wrote before it marked them)."""
        rows = read_jsonl(self.path / METRICS)
        if not self.meta.get(METRICS_WINDOWS):
            mark_window_ends(rows)
        return rows

    def samples(self) -> list[dict]:
        return read_jsonl(self.path / SAMPLES)

    def save_tokenizer(self, tokenizer) -> None:
        """Write tokenizer.json; meta.json records its digest (a tokenizer put in its place is refused)."""
        text = tokenizer.to_json()
        atomic_write(self.path / TOKENIZER, text)
        self.write_meta(tokenizer_sha256=agreement.digest(text))

    def load_tokenizer(self):
        from ..data.tokenization import Tokenizer
        try:
            text = read_text(self.path / TOKENIZER, limit=TOKENIZER_LIMIT)
            tokenizer = Tokenizer.from_json(text)
        except FileNotFoundError:
            raise ValueError(f"{self.path} has no tokenizer.json; the run is incomplete.") from None
        except NotAFile:
            raise
        except Exception as e:  # the tokenizers library raises its own exception types
            raise ValueError(f"{self.path}/tokenizer.json is corrupt or foreign: {e}") from None
        other = agreement.tokenizer_mismatch(self.meta, self.config, text, tokenizer.vocab_size)
        if other:
            raise agreement.disagree(self.path / TOKENIZER, self.path / (CONFIG if "config.json" in other else META), other)
        return tokenizer

    def check_agreement(self):
        """The run's tokenizer, once its files are found to agree (`agreement`), else a ValueError naming the two
        that disagree: the tokenizer and config.json or meta.json, the weights' run id and step and meta.json
        (their shapes, then meta.json's model, are checked as they load, `load_weights`)."""
        tokenizer = self.load_tokenizer()
        if self.has_checkpoint:
            self._weights_header(self.path / WEIGHTS)
        return tokenizer

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
        from ..inspect.probes import load_probe, probe_mismatch, probe_path, saved_input

        maps = load_probe(self.path, step)
        other = probe_mismatch(maps, self.config)
        if other:
            raise agreement.disagree(probe_path(self.path, step), self.path / CONFIG, other)
        mine, saved = self.probe_input(), saved_input(probe_path(self.path, step))
        if mine and saved and saved != mine.to_dict():
            raise agreement.disagree(probe_path(self.path, step), self.path / META, "the probe is of another input")
        return maps


TUNED = "-finetuned-from-"  # in the name of a run that starts from another run's weights (`run_name`)
_STAMP = re.compile(r"^\d{8}-\d{6}-")  # the time a run's name begins with
SOURCE_CHARS = 80  # the most of a source run's name that a fine-tuned run's name repeats


def run_name(config: RunConfig, tuned_from: str | None = None, when: float | None = None) -> str:
    """The name a new run's folder gets: the time (``when``, default now), the architecture and the corpus,
    ``20261126-223922-gpt-python-stdlib``; a run fine-tuned from the run named ``tuned_from`` ends in what it was
    fine-tuned from, without that run's own time: ``20261127-101010-gpt-de-ru-finetuned-from-gpt-python-stdlib``."""
    corpus = Path(config.data.corpus).stem or "corpus"
    name = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}-{config.model.arch}-{corpus}"
    if tuned_from:
        source = _STAMP.sub("", tuned_from) or tuned_from
        name += TUNED + source[:SOURCE_CHARS]
    return name


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run's folder (it has a config.json and a meta.json)."""
    return (path / CONFIG).exists() and (path / META).exists()


def run_folder_above(path: str | Path) -> Path | None:
    """The run folder that ``path`` (links resolved) lies inside, or None: where writing would change a run."""
    for p in Path(path).resolve().parents:
        if is_run_folder(p):
            return p
    return None


def _holds_the_file(lock: BaseFileLock, path: Path) -> bool:
    """Whether ``lock`` holds the file now at ``path`` (not one its holder removed on release, `Run.unlock`)."""
    try:
        now = os.stat(path)
    except OSError:
        return False
    identity = getattr(getattr(lock, "_context", None), "lock_file_fd_identity", None)  # (st_dev, st_ino)
    return identity is None or tuple(identity) == (now.st_dev, now.st_ino)


def _empty(path: Path) -> bool:
    """No files in the folder but a lock's (left by a creation that failed, or an earlier lock)."""
    return all(p.name == LOCK for p in path.iterdir())


def _read_json(path: Path, name: str) -> dict:
    """The object in ``path/name``; ValueError naming the file if it is missing, unreadable, truncated or
    not an object."""
    f = path / name
    try:
        d = json.loads(read_text(f, limit=JSON_LIMIT))
    except FileNotFoundError:
        raise ValueError(f"{path} is not a fatstudio run: {name} is missing.") from None
    except OSError as e:
        raise ValueError(f"cannot read {f}: {e.strerror or e}; the run cannot be opened.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{f} is truncated or not JSON ({e}); the run cannot be opened.") from None
    if not isinstance(d, dict):
        raise ValueError(f"{f} holds no JSON object; the run cannot be opened.")
    return d


def list_runs(root: Path | None = None) -> list[Run]:
    """Every readable run under ``root``, newest first; folders that are not runs (or not readable ones: a
    truncated config.json or meta.json, a newer format) are skipped, and hidden ones (the temporary work of an
    import or a copy, `temporary.made_beside`, whole or not)."""
    root = Path(root) if root else default_runs_root()
    runs = []
    if root.is_dir():
        for p in root.iterdir():
            if p.is_dir() and not p.name.startswith(".") and (p / CONFIG).exists():
                try:
                    runs.append(Run.open(p))
                except ValueError:
                    continue
    return sorted(runs, key=lambda r: r.info.created or 0.0, reverse=True)


def _versions() -> dict[str, str]:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for pkg in ("fatstudio", "torch", "tokenizers", "safetensors"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


def load_at_step(run: Run, step: int | None) -> LoadedModel:
    """The run's model at ``step`` (None: the last checkpoint's): a snapshot (`snapshots`) or the checkpoint. Another
    step is a ValueError listing the steps whose weights are saved."""
    return run.load_model(step=step)
