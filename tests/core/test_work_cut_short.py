"""Temporary work and the runs list (issue 34, kind 2; `fatstudio.core.temporary`): what a killed process left is
told from work under way by the OS lock its maker held, removed by the next write in its folder, and never listed;
a run whose meta.json says it is at work reads "interrupted" once no process holds its lock, and reading it writes
nothing. The commands killed mid-write: tests/test_cli_cut_short.py."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from held_work import held_by_another_process, left_by_a_killed_process
from training_helpers import tiny_config

from fatstudio.core.files import atomic_write
from fatstudio.core.runs.folder import INTERRUPTED, LOCK, Run, list_runs
from fatstudio.core.temporary import SUFFIX, held, made_beside, remove_abandoned
from fatstudio.core.training import train


def test_only_fatstudios_temporaries_that_no_process_holds_are_removed(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    dead = []
    for name, kind in (("a.json", False), ("export", True)):  # each made apart (the next made beside removes it)
        (tmp_path / name).mkdir()
        made = left_by_a_killed_process(tmp_path / name / name, folder=kind)
        dead.append(shutil.move(made, folder / made.name))
    others = [folder / ".git", folder / ".notes.k3j4h5g6.tmp", folder / "run.fatstudio.tmp"]  # not ours
    others[0].mkdir()
    others[1].write_text("another program's temporary")
    others[2].mkdir()
    (tmp_path / "target").mkdir()
    link = folder / ".link.abcdefgh.fatstudio.tmp"
    link.symlink_to(tmp_path / "target", target_is_directory=True)  # never followed, never removed
    fifo = folder / ".fifo.abcdefgh.fatstudio.tmp"
    os.mkfifo(fifo)
    (tmp_path / "b.json").mkdir()
    with held_by_another_process(tmp_path / "b.json" / "b.json", folder=False) as made:
        alive = shutil.move(made, folder / made.name)  # still held: the lock is on the folder itself
        assert held(alive) and not any(held(p) for p in dead)
        assert sorted(remove_abandoned(folder)) == sorted(dead)
        assert alive.exists() and all(p.exists() or p.is_symlink() for p in [*others, link, fifo])
    assert (tmp_path / "target").is_dir()


def test_a_temporary_goes_unless_renamed_into_place(tmp_path):
    target = tmp_path / "x.json"
    with pytest.raises(RuntimeError), made_beside(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("cut short")
    with made_beside(tmp_path / "folder", folder=True) as scratch:
        (scratch / "a").write_text("scratch work")
    atomic_write(target, "whole")
    assert target.read_text() == "whole" and [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_the_next_write_beside_removes_what_a_killed_write_left(tmp_path):
    dead = left_by_a_killed_process(tmp_path / "meta.json", folder=False)
    assert dead.name.startswith(".meta.json.") and dead.name.endswith(SUFFIX)
    atomic_write(tmp_path / "other.json", "{}")
    assert not dead.exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trained")
    (tmp / "c.txt").write_text("the quick brown fox jumps over the lazy dog.\n" * 100)
    assert list(train(tiny_config(tmp / "c.txt", steps=10), run_dir=tmp / "run"))[-1].status == "finished"
    return tmp / "run"


def test_the_runs_list_never_shows_hidden_work_whole_or_not(trained, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(trained, root / "run")
    shutil.copytree(trained, root / f".imported.x1y2z3w4{SUFFIX}")  # an import killed just before its rename
    shutil.copytree(trained, root / ".imported.abc123")  # as an earlier fatstudio named it
    assert [r.name for r in list_runs(root)] == ["run"]


HOLDER = r"""
import sys, time
from fatstudio.core.runs.folder import Run
run = Run.open(sys.argv[1])
run.lock()
print("holding", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("status", ["created", "running"])
def test_a_run_at_work_reads_so_while_its_process_lives_and_interrupted_once_it_is_gone(status, trained, tmp_path,
                                                                                         read_only):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "meta.json").write_text(json.dumps({**json.loads((run / "meta.json").read_text()), "status": status}))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    guard = read_only(tmp_path)
    assert Run.open(run).info.status == status and Run.open(run).trained_elsewhere
    holder.kill()
    holder.communicate()
    assert (run / LOCK).exists()  # as a killed process leaves it
    assert Run.open(run).info.status == INTERRUPTED and [r.info.status for r in list_runs(tmp_path)] == [INTERRUPTED]
    assert not Run.open(run).trained_elsewhere
    assert guard.refused == [] and {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_a_run_at_work_without_its_lock_file_is_interrupted_too(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "meta.json").write_text(json.dumps({**json.loads((run / "meta.json").read_text()), "status": "running"}))
    assert not (run / LOCK).exists() and Run.open(run).info.status == INTERRUPTED


def test_the_runs_list_reads_a_time_past_any_float(trained, tmp_path):
    """Found by the config fuzz: a meta.json's created of 10**400 made RunMeta overflow, and the runs list with it."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "meta.json").write_text(json.dumps({**json.loads((run / "meta.json").read_text()), "created": 10**400}))
    assert [r.info.created for r in list_runs(tmp_path)] == [float("inf")]
