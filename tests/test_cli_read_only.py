"""Reading is not writing (issue 34, kind 3): every command that only reads a run works on a run on a read-only
disk and changes nothing in it, not a byte, and takes no lock (read_only_disk.py: the folder refuses every write and
every exclusive lock of this process; the bytes are compared too). The runs list and opening a run: tests/core/
test_work_cut_short.py; the app: tests/qt/test_reliability.py."""
import shutil

import pytest
from cli_helpers import train_tiny, write_config

from fatstudio.cli import main
from fatstudio.core.runs.folder import Run


def files(folder):
    """Every file under ``folder`` (the hidden ones too) and its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("trained"), steps=20)  # probes and weights at steps 10 and 20


@pytest.fixture
def disk(trained, tmp_path):
    """A read-only disk holding the run at ``disk/run``."""
    shutil.copytree(trained, tmp_path / "disk" / "run")
    return tmp_path / "disk"


READERS = {
    "generate": ["generate", "{run}", "--prompt", "hello", "--tokens", "5", "--seed", "1"],
    "attention": ["attention", "{run}", "--prompt", "hello", "--out", "{out}/a.json"],
    "attention --step": ["attention", "{run}", "--step", "10", "--out", "{out}/a.npz"],
    "ablate": ["ablate", "{run}", "--out", "{out}/a.csv"],
    "ablate --step": ["ablate", "{run}", "--step", "10", "--kind", "mean", "--out", "{out}/a.json"],
    "patch": ["patch", "{run}", "--clean", "hello", "--corrupt", "world", "--out", "{out}/p.json"],
    "lens": ["lens", "{run}", "--prompt", "hello world", "--step", "10", "--out", "{out}/l.json"],
    "token-loss": ["token-loss", "{run}", "--out", "{out}/t.json"],
    "token-loss --against": ["token-loss", "{run}", "--against", "{run}", "--out", "{out}/t.csv"],
    "token-loss --against-step": ["token-loss", "{run}", "--against-step", "10", "--out", "{out}/t.json"],
    "export": ["export", "{run}", "--format", "hf", "--out", "{out}/hf"],
    "train --init-from": ["train", "{config}", "--init-from", "{run}", "--out", "{out}/tuned", "--quiet"],
    "train --resume --out (a copy)": ["train", "--resume", "{run}", "--out", "{out}/copy", "--set", "train.steps=30",
                                      "--quiet"],
}


@pytest.mark.parametrize("command", READERS)
def test_a_command_that_only_reads_a_run_works_on_a_read_only_disk_and_changes_nothing(command, disk, tmp_path,
                                                                                         read_only, capsys):
    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(run=disk / "run", out=out, config=write_config(out, 10)) for a in READERS[command]]
    before = files(disk)
    guard = read_only(disk)
    assert main(args) == 0, capsys.readouterr().err
    assert guard.refused == [] and files(disk) == before


def test_resuming_into_a_copy_leaves_a_copy_that_trains_whatever_the_run_s_files_modes(disk, tmp_path, read_only,
                                                                                     capsys):
    """A run copied from a read-only disk keeps no read-only mode: the copy is written as it trains."""
    for p in [disk / "run", *(disk / "run").rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    read_only(disk)
    new = tmp_path / "new"
    assert main(["train", "--resume", str(disk / "run"), "--out", str(new), "--set", "train.steps=30", "--quiet"]) == 0
    assert Run.open(new).info.step == 30 and Run.open(new).meta["copied_from"] == str(disk / "run")
    assert all(p.stat().st_mode & 0o200 for p in [new, *new.rglob("*")])
