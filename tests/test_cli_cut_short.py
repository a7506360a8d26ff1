"""Work cut short leaves nothing half-made that looks whole (issue 34, kind 2). A command killed (SIGKILL) while it
writes leaves only a hidden folder, never listed, that the next write in the same folder removes; a run whose
process was killed reads "interrupted", never "running"; and a child process (a sweep's run, a decode step's
compile) ends with its parent. Each command is stopped at the very rename that would put its work in place (a
driver process stands in for it there) and killed then."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import train_tiny, write_config

from fatstudio.cli import main
from fatstudio.core.runs.export_hf import export_hf
from fatstudio.core.runs.folder import LOCK, Run, list_runs
from fatstudio.core.temporary import SUFFIX, held

WAIT_S = 180  # ceilings for what a slow, shared machine takes (nothing here is timed)

STUCK = r"""
import fnmatch, os, sys, time
(pattern, nth), args = sys.argv[1].split("@"), sys.argv[2:]
real = {name: getattr(os, name) for name in ("replace", "rename")}
seen = []
def stuck(name):
    def call(src, dst, *a, **kw):
        if fnmatch.fnmatch(os.path.basename(os.fsdecode(dst)), pattern):
            seen.append(dst)
            if len(seen) == int(nth):
                print(os.fsdecode(src), flush=True)
                time.sleep(600)
        return real[name](src, dst, *a, **kw)
    return call
os.replace, os.rename = stuck("replace"), stuck("rename")
from fatstudio.cli import main
sys.exit(main(args))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("trained"), steps=20)


def killed_at(pattern: str, args: list[str]) -> Path:
    """Run ``fatstudio ARGS`` in a process stopped at the Nth rename of its work to a name matching ``pattern``
    (``NAME@N``), kill it there (SIGKILL), and return the hidden temporary folder it was renaming from (or that
    holds what it was)."""
    p = subprocess.Popen([sys.executable, "-c", STUCK, pattern, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    p.kill()
    _, err = p.communicate()
    assert line, err
    src = Path(line)
    return src if src.name.endswith(SUFFIX) else src.parent


MEMBERS = {  # what is killed mid-write: (the rename it is stopped at, its arguments, the next command if not again)
    "an output file (attention --out)": ("a.json@1", ["attention", "{run}", "--prompt", "hello", "--out", "{tmp}/a.json"],
                                         None),
    "a checkpoint (train)": ("model.safetensors@2", ["train", "{config}", "--out", "{tmp}/runs/new", "--quiet"],
                             ["train", "--resume", "{tmp}/runs/new", "--quiet"]),
    "an export (export --out)": ("hf@1", ["export", "{run}", "--format", "hf", "--out", "{tmp}/hf"], None),
    "an import (import --out)": ("imported@1", ["import", "{hf}", "--out", "{tmp}/runs/imported"], None),
    "a copy to continue (train --resume RUN --out NEW)": (
        "copy@1", ["train", "--resume", "{run}", "--out", "{tmp}/runs/copy", "--set", "train.steps=30", "--quiet"], None),
}


@pytest.mark.parametrize("member", MEMBERS)
def test_a_command_killed_mid_write_leaves_hidden_work_never_listed_that_the_next_write_there_removes(
        member, trained, tmp_path, capsys):
    pattern, args, again = MEMBERS[member]
    (tmp_path / "runs").mkdir()
    hf = tmp_path / "source-hf"
    if "import" in member:
        export_hf(trained, hf)
    values = dict(run=trained, tmp=tmp_path, hf=hf, config=write_config(tmp_path, 30))
    fill = lambda a: [x.format(**values) for x in a]
    work = killed_at(pattern, fill(args))
    assert work.is_dir() and work.name.startswith(".") and not held(work)
    assert work.name not in {r.name for r in list_runs(work.parent)} | {r.name for r in list_runs(tmp_path / "runs")}
    if "checkpoint" in member:  # the run was killed mid-run: it says so, and resuming it continues
        assert Run.open(tmp_path / "runs" / "new").info.status == "interrupted"
    assert main(fill(again or args)) == 0, capsys.readouterr().err
    assert not work.exists()
    assert not [p.name for p in work.parent.iterdir() if p.name.endswith(SUFFIX)]


def test_a_run_whose_process_was_killed_reads_interrupted_and_resumes(trained, tmp_path, capsys):
    """Killed mid-run (at a step, not in a write): the lock's file stays, no one holds it; meta.json still says
    "running", which reading neither believes nor changes."""
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "fatstudio", "train", str(write_config(tmp_path, 100000)), "--out",
                          str(run), "--quiet"], stderr=subprocess.PIPE)
    deadline = time.monotonic() + WAIT_S
    while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert (run / "metrics.jsonl").exists()
    assert Run.open(run).info.status == "running" and held(run / LOCK)  # at work
    p.send_signal(signal.SIGKILL)
    p.communicate()
    written = (run / "meta.json").read_bytes()
    assert json.loads(written)["status"] == "running" and (run / LOCK).exists()
    assert Run.open(run).info.status == "interrupted"
    assert [r.info.status for r in list_runs(tmp_path)] == ["interrupted"]
    assert (run / "meta.json").read_bytes() == written
    if Run.open(run).has_checkpoint:
        assert main(["train", "--resume", str(run), "--set", "train.steps=" + str(Run.open(run).info.checkpoint_step + 5),
                     "--quiet"]) == 0
        assert Run.open(run).info.status == "finished"


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting: {what}"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, waiting for a parent that never reaps it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_killing_a_sweep_ends_its_run_which_says_stopped_and_its_scratch_folder_goes(tmp_path, monkeypatch):
    """The sweep's child training ends (SIGTERM: it stops after its step and checkpoints) once its parent is killed;
    the sweep's folder of configs is abandoned, and the next sweep removes it."""
    import tempfile

    from fatstudio.core.temporary import scratch_folder

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    runs = tmp_path / "runs"
    sweep = subprocess.Popen([sys.executable, "-m", "fatstudio", "sweep", str(write_config(tmp_path, 100000)), "--vary",
                              "train.lr=0.001,0.002", "--seeds", "1", "--runs-dir", str(runs), "--out",
                              str(tmp_path / "s.json")], env={**os.environ, "TMPDIR": str(scratch)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    metrics = lambda: list(runs.glob("*/metrics.jsonl"))
    _wait_until(lambda: metrics() or sweep.poll() is not None, "the sweep's first run training")
    run = metrics()[0].parent
    assert held(run / LOCK) and Run.open(run).info.status == "running"
    sweep.send_signal(signal.SIGKILL)
    sweep.communicate()
    _wait_until(lambda: not held(run / LOCK), "the run's process ending with the sweep")
    assert Run.open(run).info.status == "stopped" and Run.open(run).has_checkpoint
    assert len(list(runs.iterdir())) == 1  # the next variant never started
    left = [p for p in scratch.iterdir() if p.name.endswith(SUFFIX)]
    assert len(left) == 1 and not held(left[0])
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with scratch_folder("sweep") as mine:
        assert list(scratch.iterdir()) == [mine]


DECODE_PARENT = r"""
import subprocess, sys
from pathlib import Path
import torch
from fatstudio import ModelConfig
from fatstudio.core.inference import decode_export

class Seen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        print(self.pid, flush=True)

subprocess.Popen = Seen
cfg = ModelConfig(arch="gpt", vocab_size=20, l_max=16, L=1, H=2, d_e=16, d_mlp=32)
decode_export._compile_in_child(cfg, torch.float32, [1, 15], Path(sys.argv[1]) / "decode" / "key")
"""


def test_the_decode_step_s_compile_ends_with_its_parent_and_its_work_folder_goes(tmp_path, monkeypatch):
    from fatstudio.core.cache import DECODE, work_folder

    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", DECODE_PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "FATSTUDIO_CACHE": str(tmp_path)})
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.communicate()
    _wait_until(lambda: not _alive(child), "the compile ending with its parent")
    left = [p for p in DECODE.root().iterdir() if p.name.endswith(SUFFIX)]
    assert len(left) == 1 and not held(left[0])
    with work_folder(DECODE, "other") as mine:
        assert list(DECODE.root().iterdir()) == [mine]
