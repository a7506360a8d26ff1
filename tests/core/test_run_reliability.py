"""Run folders under faults (issue 14, "Runs"): a folder that cannot be made or written, a full disk mid-run,
an existing folder without --resume, weights of another model, truncated or newer files, two processes on
one run. Each case: a clear ValueError (or an OSError naming the file) and nothing saved is lost."""
import errno
import json
import os
import pathlib

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError, safe_open
from training_helpers import tiny_config as config

from fatstudio.core import training
from fatstudio.core.runs import folder as runs
from fatstudio.core.runs.folder import FORMAT_VERSION, WEIGHTS, Run, atomic_write, list_runs
from fatstudio.core.training import Control, train


def run_all(cfg, **kw):
    return list(train(cfg, **kw))


def files(folder):
    """Every file under ``folder`` and its bytes (what must not change)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def temporaries(folder):
    return [p.name for p in folder.rglob("*.tmp")]


def checkpoint_steps(folder):
    """The steps model.safetensors and optimizer.pt were saved at (equal unless a crash came between)."""
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        weights = int(f.metadata()["step"])
    return weights, torch.load(folder / "optimizer.pt", weights_only=True)["step"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 20-step run to copy (training it once per module)."""
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 200, encoding="utf-8")
    run = tmp_path_factory.mktemp("trained") / "run"
    assert run_all(config(corpus, steps=20), run_dir=run)[-1].status == "finished"
    return run


@pytest.fixture
def run_copy(trained, tmp_path):
    import shutil

    shutil.copytree(trained, tmp_path / "runs" / "run")
    return tmp_path / "runs" / "run"


def edit_json(path, **changes):
    d = json.loads(path.read_text())
    for key, value in changes.items():
        table, _, name = key.rpartition(".")
        (d[table] if table else d)[name] = value
    path.write_text(json.dumps(d))


# ---- a folder that cannot be made or written ---------------------------------------------------------------------
def test_a_path_through_a_file_is_one_clear_error(text_file, tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="cannot create the run folder .*afile is a file, not a folder"):
        run_all(config(text_file, steps=4), run_dir=tmp_path / "afile" / "run")
    with pytest.raises(ValueError, match="afile is a file, not a folder; choose another --out"):
        run_all(config(text_file, steps=4), run_dir=tmp_path / "afile")
    assert (tmp_path / "afile").read_text() == "x"


def _writes_despite_chmod(folder) -> bool:
    try:
        (folder / "probe").mkdir()
    except PermissionError:
        return False
    (folder / "probe").rmdir()
    return True


def test_a_read_only_parent_is_one_clear_error(text_file, tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        if _writes_despite_chmod(parent):
            pytest.skip("chmod does not stop this user's writes (root); the monkeypatched variant below runs")
        with pytest.raises(ValueError, match="cannot create the run folder .*ro/run: permission denied"):
            run_all(config(text_file, steps=4), run_dir=parent / "run")
    finally:
        parent.chmod(0o755)


def test_a_folder_that_refuses_writes_is_one_clear_error(text_file, tmp_path, monkeypatch):
    """As a read-only parent behaves for a user that chmod stops (monkeypatched: the tests may run as root)."""
    real_mkdir = pathlib.Path.mkdir

    def refused(self, *a, **kw):
        if self.parent.name == "ro":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *a, **kw)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(pathlib.Path, "mkdir", refused)
    with pytest.raises(ValueError, match="cannot create the run folder .*ro/run: permission denied"):
        run_all(config(text_file, steps=4), run_dir=tmp_path / "ro" / "run")


def test_a_run_folder_whose_files_cannot_be_written_is_not_left_half_made(text_file, tmp_path, monkeypatch):
    real = runs.atomic_write

    def refused(path, data):
        if pathlib.Path(path).name == "meta.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, data)

    monkeypatch.setattr(runs, "atomic_write", refused)
    with pytest.raises(ValueError, match="cannot write the run folder .*new: permission denied"):
        run_all(config(text_file, steps=4), run_dir=tmp_path / "new")
    assert not (tmp_path / "new").exists()  # made by this attempt, so removed with it
    monkeypatch.setattr(runs, "atomic_write", real)
    assert run_all(config(text_file, steps=4), run_dir=tmp_path / "new")[-1].status == "finished"  # lock released


def test_resuming_a_run_whose_folder_refuses_writes_changes_nothing(run_copy, monkeypatch):
    real = runs.atomic_write

    def refused(path, data):
        if pathlib.Path(path).parent == run_copy:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, data)

    before = files(run_copy)
    monkeypatch.setattr(runs, "atomic_write", refused)
    with pytest.raises(PermissionError, match="config.json"):
        run_all(Run.open(run_copy).config.with_overrides(["train.steps=30"]), run_dir=run_copy, resume=True)
    assert files(run_copy) == before and lock_is_free(run_copy)


def test_atomic_write_on_a_full_disk_keeps_the_file_and_names_it(tmp_path, monkeypatch):
    path = tmp_path / "meta.json"
    path.write_text('{"step": 10}')

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device") as e:
        atomic_write(path, '{"step": 20}')
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert path.read_text() == '{"step": 10}' and temporaries(tmp_path) == []


class _FullDisk:
    """Makes ``safetensors.torch.save_model`` or ``torch.save`` fail as they do on a full disk (seen on a
    120 KB tmpfs) at the ``at``-th call: a part of the file written, then safetensors' SafetensorError
    ending "(os error 28)", or torch's RuntimeError raised while handling the OSError."""

    def __init__(self, real, at=2):
        self.real, self.at, self.calls = real, at, 0

    def __call__(self, obj, target, *a, **kw):
        self.calls += 1
        if self.calls < self.at:
            return self.real(obj, target, *a, **kw)
        if isinstance(target, (str, os.PathLike)):
            pathlib.Path(target).write_bytes(b"\0" * 100)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        target.write(b"\0" * 100)
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from None


@pytest.mark.parametrize("part", ["weights", "optimizer"])
def test_a_full_disk_at_a_checkpoint_keeps_the_previous_one(part, text_file, tmp_path, monkeypatch):
    if part == "weights":
        monkeypatch.setattr(safetensors.torch, "save_model", _FullDisk(safetensors.torch.save_model))
    else:
        monkeypatch.setattr(torch, "save", _FullDisk(torch.save))
    run = tmp_path / "run"
    with pytest.raises(ValueError, match="cannot save the checkpoint of step 20 .*the disk is full; "
                                         "the checkpoint of step 10 is kept"):
        run_all(config(text_file, steps=30), run_dir=run)
    monkeypatch.undo()
    meta = Run.open(run).meta
    assert meta["status"] == "failed" and meta["checkpoint_step"] == 10
    assert temporaries(run) == [] and checkpoint_steps(run) == (10, 10)
    Run.open(run).load_model()
    again = run_all(Run.open(run).config, run_dir=run, resume=True)  # once there is room again
    assert next(e for e in again if e.kind == "started").start_step == 10 and again[-1].status == "finished"


def test_a_full_disk_for_meta_json_ends_the_run_with_a_message(text_file, tmp_path, monkeypatch):
    """The checkpoint's files are written but meta.json cannot be: the error names it, the failed status
    cannot be recorded (not a second error), and the checkpoint's two files agree."""
    real, saves = runs.atomic_write, []
    real_save = safetensors.torch.save_model
    monkeypatch.setattr(safetensors.torch, "save_model", lambda *a, **kw: saves.append(1) or real_save(*a, **kw))

    def full_after_two_saves(path, data):
        if len(saves) >= 2 and pathlib.Path(path).name == "meta.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(runs, "atomic_write", full_after_two_saves)
    run = tmp_path / "run"
    with pytest.raises(OSError, match="No space left on device.*meta.json"):
        run_all(config(text_file, steps=30), run_dir=run)
    monkeypatch.undo()
    assert temporaries(run) == [] and checkpoint_steps(run) == (20, 20)
    assert Run.open(run).load_model().step == 20


# ---- an existing folder without --resume -------------------------------------------------------------------------
def test_training_into_an_existing_run_without_resume_never_overwrites_it(run_copy, text_file):
    before = files(run_copy)
    gen = train(config(text_file, steps=4), run_dir=run_copy)
    with pytest.raises(ValueError, match="already exists and is not empty; choose another --out or use --resume"):
        next(gen)  # refused before the corpus is prepared
    assert files(run_copy) == before


def test_a_new_run_in_a_folder_being_created_by_another_process_is_refused(text_file, tmp_path):
    cfg = config(text_file, steps=4)
    (tmp_path / "x").mkdir()
    other = Run(tmp_path / "x", cfg, {})
    other.lock()  # another process got there first and has written nothing yet
    try:
        with pytest.raises(ValueError, match="being trained by another process"):
            Run.create(cfg, tmp_path, "x", lock=True)
    finally:
        other.unlock()
    assert Run.create(cfg, tmp_path, "x", lock=True).locked


# ---- weights of another model -----------------------------------------------------------------------------------
@pytest.mark.parametrize("edit,words", [
    ({"model.d_e": 32}, r"embed.W_e.weight is \d+×16 in the weights, \d+×32 for the config .*d_e = 16 \(config: 32\)"),
    ({"model.arch": "gopher"}, "the weights are of a gpt model, the config's model.arch is 'gopher'"),
    ({"model.L": 2}, r"other tensors \(missing \['layers.1"),
])
def test_weights_of_another_model_are_refused_naming_the_mismatch(edit, words, run_copy):
    edit_json(run_copy / "config.json", **edit)
    before = files(run_copy)
    with pytest.raises(ValueError, match=words):
        Run.open(run_copy).load_model()
    with pytest.raises(ValueError, match=words):
        run_all(Run.open(run_copy).config, run_dir=run_copy, resume=True)
    assert files(run_copy) == before


def test_weights_saved_without_their_config_are_checked_by_shape(run_copy):
    """Runs from before the weights carried their config: the first tensor of another shape is named."""
    path = str(run_copy / "model.safetensors")
    tensors = safetensors.torch.load_file(path)
    safetensors.torch.save_file(tensors, path, metadata={"step": "20", "format": "fatstudio"})
    edit_json(run_copy / "config.json", **{"model.d_e": 32})
    with pytest.raises(ValueError, match=r"model.safetensors does not match the run's config.json: embed.W_e.weight is "
                                         r"\d+×16 in the weights, \d+×32 for the config \(\d+ tensors differ\)\.$"):
        Run.open(run_copy).load_model()


# ---- truncated or newer files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["config.json", "meta.json"])
def test_a_truncated_config_or_meta_names_the_file_and_other_runs_still_list(name, run_copy, trained):
    text = (run_copy / name).read_text()
    (run_copy / name).write_text(text[: len(text) // 2])
    before = files(run_copy)
    with pytest.raises(ValueError, match=f"run/{name} is truncated or not JSON"):
        Run.open(run_copy)
    with pytest.raises(ValueError, match=f"run/{name} is truncated or not JSON"):
        run_all(config("unused.txt"), run_dir=run_copy, resume=True)
    assert files(run_copy) == before
    import shutil

    shutil.copytree(trained, run_copy.parent / "good")
    assert [r.name for r in list_runs(run_copy.parent)] == ["good"]


@pytest.mark.parametrize("name", ["config.json", "meta.json"])
def test_an_unreadable_config_or_meta_is_one_line_naming_the_file(name, run_copy, monkeypatch):
    """Monkeypatched (the tests may run as root, where chmod stops no read)."""
    real = runs.read_text

    def read_text(path, *a, **k):
        if pathlib.Path(path).name == name:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(runs, "read_text", read_text)
    with pytest.raises(ValueError) as e:
        Run.open(run_copy)
    assert str(e.value) == f"cannot read {run_copy / name}: Permission denied; the run cannot be opened."


def test_a_meta_of_another_shape_names_the_file(run_copy):
    (run_copy / "meta.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="meta.json holds no JSON object"):
        Run.open(run_copy)
    (run_copy / "meta.json").write_text('{"format_version": "two"}')
    with pytest.raises(ValueError, match="meta.json is not a fatstudio run's: format_version 'two'"):
        Run.open(run_copy)


def test_every_run_records_its_format_version_and_a_newer_one_is_refused(run_copy, trained):
    assert FORMAT_VERSION == 2 and Run.open(run_copy).meta["format_version"] == FORMAT_VERSION
    edit_json(run_copy / "meta.json", format_version=FORMAT_VERSION + 1)
    before = files(run_copy)
    message = (f"{run_copy} was written by a newer fatstudio (format {FORMAT_VERSION + 1}; this one reads up to "
               f"{FORMAT_VERSION}); upgrade fatstudio.")
    with pytest.raises(ValueError) as e:
        Run.open(run_copy)
    assert str(e.value) == message
    with pytest.raises(ValueError, match="newer fatstudio"):
        run_all(config("unused.txt"), run_dir=run_copy, resume=True)
    assert files(run_copy) == before
    import shutil

    shutil.copytree(trained, run_copy.parent / "good")
    assert [r.name for r in list_runs(run_copy.parent)] == ["good"]


def test_a_run_without_a_format_version_is_version_one(run_copy):
    meta = json.loads((run_copy / "meta.json").read_text())
    del meta["format_version"]
    (run_copy / "meta.json").write_text(json.dumps(meta))
    assert Run.open(run_copy).load_model().step == 20


# ---- two processes on one run: the lock ---------------------------------------------------------------------------
def lock_is_free(folder) -> bool:
    run = Run.open(folder)
    try:
        run.lock()
    except ValueError:
        return False
    run.unlock()
    return True


def test_training_holds_the_lock_and_reading_is_not_blocked(text_file, tmp_path):
    run = tmp_path / "run"
    gen = train(config(text_file, steps=400, checkpoint_interval=5), run_dir=run)
    for e in gen:
        if e.kind == "checkpoint":
            break
    assert not lock_is_free(run)
    with pytest.raises(ValueError, match=f"{run} is being trained by another process"):
        run_all(Run.open(run).config, run_dir=run, resume=True)
    assert Run.open(run).load_model().step == 5  # reading (prompting, attention, the GUI) takes no lock
    with pytest.raises(ValueError, match="being trained by another process"):
        Run.open(run).delete()  # the runs list's Delete… while the CLI trains it
    assert (run / WEIGHTS).exists()
    gen.close()  # the consumer stops it
    assert Run.open(run).meta["status"] == "stopped" and lock_is_free(run)


@pytest.mark.parametrize("ending", ["finished", "stopped", "error"])
def test_the_lock_is_released_however_training_ends(ending, text_file, tmp_path, monkeypatch):
    run, control = tmp_path / "run", Control()
    if ending == "error":
        monkeypatch.setattr(training.loss, "task_loss", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    try:
        for e in train(config(text_file, steps=20), run_dir=run, control=control):
            if e.kind == "started" and ending == "stopped":
                control.stop()
    except RuntimeError:
        assert ending == "error"
    assert Run.open(run).meta["status"] == {"error": "failed"}.get(ending, ending)
    assert lock_is_free(run)


def test_the_lock_is_released_from_another_thread_than_took_it(run_copy):
    """The GUI trains in a worker thread and may close the training from the GUI thread."""
    import threading

    run = Run.open(run_copy)
    t = threading.Thread(target=run.lock)
    t.start()
    t.join()
    assert run.locked and not lock_is_free(run_copy)
    run.unlock()
    assert lock_is_free(run_copy)
