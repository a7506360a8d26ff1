"""A run is only ever changed by a command aimed at it (issue 26, item 4): ``train --resume RUN --out NEW``
continues a copy in NEW and leaves RUN byte for byte as it was; every command that writes checks its target
(never a run's own file, never inside a run folder, never a folder or a FIFO); a torn last line of the
append-only files is cut off on resume. And (item 9) the lock's empty file goes when it is released; under
torchrun only rank 0 prints an error."""
import json
import os
import shutil
import time

import pytest
from cli_helpers import train_tiny, write_config

from fatstudio.cli import main
from fatstudio.core.records import read_jsonl
from fatstudio.core.runs.folder import LOCK, Run, list_runs


def files(folder):
    """Every file under ``folder`` (the hidden ones too) and its bytes: what must not change."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("trained"), steps=20)


@pytest.fixture
def run(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "runs" / "run")
    return tmp_path / "runs" / "run"


def test_resume_into_another_folder_continues_a_copy_and_leaves_the_run_as_it_was(run, tmp_path, capsys):
    before = files(run)
    new = tmp_path / "runs" / "new"
    assert main(["train", "--resume", str(run), "--out", str(new), "--set", "train.steps=30", "--quiet"]) == 0
    assert files(run) == before  # not a byte changed, no lock file left
    steps = [r["step"] for r in Run.open(new).metrics()]
    assert steps == list(range(1, 31))
    assert Run.open(new).meta["copied_from"] == str(run) and Run.open(new).meta["step"] == 30
    assert not (new / LOCK).exists()
    assert {r.name for r in list_runs(tmp_path / "runs")} == {"run", "new"}


def test_resume_into_the_same_folder_is_resuming_in_place(run, capsys):
    assert main(["train", "--resume", str(run), "--out", str(run), "--set", "train.steps=30", "--quiet"]) == 0
    assert [r["step"] for r in Run.open(run).metrics()][-1] == 30


@pytest.mark.parametrize("where", ["existing run", "inside the run", "a file"])
def test_resume_into_a_folder_that_cannot_take_it_is_refused_and_changes_nothing(run, trained, tmp_path, capsys,
                                                                                   where):
    other = tmp_path / "other"
    if where == "existing run":
        shutil.copytree(trained, other)
    elif where == "inside the run":
        other = run / "sub"
    else:
        other.write_text("mine")
    before, other_before = files(run), other.read_bytes() if other.is_file() else files(other.parent)
    assert main(["train", "--resume", str(run), "--out", str(other), "--set", "train.steps=30", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 2 and "error:" in err, err
    assert files(run) == before
    assert (other.read_bytes() if other.is_file() else files(other.parent)) == other_before


def test_a_new_run_inside_a_run_folder_is_refused(run, tmp_path, capsys):
    before = files(run)
    assert main(["train", str(write_config(tmp_path, 5)), "--out", str(run / "probes" / "x"), "--quiet"]) == 2
    assert "is inside the run" in capsys.readouterr().err
    assert files(run) == before


COMMANDS = {
    "attention": ["attention", "{run}", "--prompt", "hello", "--out", "{out}"],
    "attention --step": ["attention", "{run}", "--step", "10", "--out", "{out}"],
    "ablate": ["ablate", "{run}", "--out", "{out}"],
    "patch": ["patch", "{run}", "--clean", "hello", "--corrupt", "jello", "--out", "{out}"],
    "lens": ["lens", "{run}", "--prompt", "hello", "--out", "{out}"],
    "token-loss": ["token-loss", "{run}", "--out", "{out}"],
}


@pytest.mark.parametrize("target", ["config.json", "meta.json", "new.json", "probes/x.json", "link to meta"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_writes_into_a_run_folder(run, tmp_path, capsys, command, target):
    before = files(run)
    out = run / target
    if target == "link to meta":  # a link outside the run, pointing at one of its files
        out = tmp_path / "link.json"
        out.symlink_to(run / "meta.json")
    argv = [a.format(run=run, out=out) for a in COMMANDS[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "inside the run folder" in err and err.count("\n") == 1, err
    assert files(run) == before


@pytest.mark.parametrize("kind", ["folder", "fifo", "through a file"])
def test_an_output_that_is_not_a_file_is_refused(run, tmp_path, capsys, kind):
    out = tmp_path / "out.json"
    if kind == "folder":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.with_suffix("").write_text("mine")
        out = out.with_suffix("") / "x.json"
    assert main(["lens", str(run), "--prompt", "hello", "--out", str(out)]) == 2
    assert {"folder": "is a folder", "fifo": "FIFO", "through a file": "is a file, not a folder"}[kind] in \
        capsys.readouterr().err


def test_export_never_writes_into_a_run_folder(run, capsys):
    before = files(run)
    assert main(["export", str(run), "--format", "hf", "--out", str(run / "hf")]) == 2
    assert "inside the run folder" in capsys.readouterr().err
    assert files(run) == before


def test_a_torn_last_line_is_cut_off_on_resume_so_every_step_has_one_row(run, capsys):
    with open(run / "metrics.jsonl", "ab") as f:  # the 20 steps' rows, then part of a row (a crash mid-write)
        f.write(b'{"step": 21, "train_lo')
    with open(run / "samples.jsonl", "ab") as f:
        f.write('{"step": 20, "text": "caf\u00e9'.encode()[:-1])  # torn inside a character
    assert len(read_jsonl(run / "metrics.jsonl")) == 20  # readers skip the torn line meanwhile
    assert main(["train", "--resume", str(run), "--set", "train.steps=30", "--quiet"]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]  # every line parses
    assert steps == list(range(1, 31))
    samples = [json.loads(line)["step"] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples == sorted(set(samples)) and samples[-1] == 30


def test_readers_skip_torn_and_malformed_lines(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_bytes(b'{"step": 1, "train_loss": 2.0}\n{"step": "two"}\n[3]\n{"step": null}\n\xff\xfe\n'
                  b'{"step": 4, "train_loss": 1.5}\n{"step": 5, "tra')
    assert [r["step"] for r in read_jsonl(p)] == [1, 4]


def test_the_lock_file_goes_when_training_ends_and_still_excludes_while_held(run):
    assert not (run / LOCK).exists()  # the trained run left none
    a, b = Run.open(run), Run.open(run)
    a.lock()
    assert (run / LOCK).exists()
    with pytest.raises(ValueError, match="being trained by another process"):
        b.lock()
    a.unlock()
    assert not (run / LOCK).exists()
    b.lock()  # a fresh lock file, held
    assert (run / LOCK).exists() and b.locked
    b.unlock()
    assert not (run / LOCK).exists()


def test_under_torchrun_rank_0_says_an_error_and_another_rank_only_if_rank_0_has_not_ended_the_job(
        tmp_path, capsys, monkeypatch):
    import fatstudio.cli as cli

    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nL = true\n")  # every rank meets the same error
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(cli, "RANK_WAIT_S", 0.01)  # rank 0 did not end the job meanwhile: rank 1 says it
    assert main(["train", str(bad)]) == 2 and "L = true is not allowed" in capsys.readouterr().err

    def ended(seconds):  # torchrun's SIGTERM, once rank 0 has said it and ended
        raise KeyboardInterrupt("SIGTERM")
    monkeypatch.setattr(time, "sleep", ended)
    assert main(["train", str(bad)]) == 2 and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")  # at once (the sleep would raise)
    assert main(["train", str(bad)]) == 2 and "L = true is not allowed" in capsys.readouterr().err


def test_a_run_folder_given_as_the_config_says_to_resume_it(run, capsys):
    before = files(run)
    assert main(["train", str(run)]) == 2
    assert "is a run folder, not a config file; continue it with --resume" in capsys.readouterr().err
    assert files(run) == before


def test_resume_into_another_folder_is_refused_while_another_process_trains_the_run(run, tmp_path, capsys):
    trainer = Run.open(run)
    trainer.lock()  # as a training process holds it
    try:
        before = files(run)
        assert main(["train", "--resume", str(run), "--out", str(tmp_path / "new"), "--quiet"]) == 2
        assert "being trained by another process" in capsys.readouterr().err
        assert files(run) == before and not (tmp_path / "new").exists()
        assert not list(tmp_path.glob(".new.*"))  # no half-made copy
    finally:
        trainer.unlock()
