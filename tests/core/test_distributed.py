"""Data-parallel training under torchrun (fatstudio.core.distributed): two CPU processes (gloo) train the
curve one process trains, rank 0 alone writes the run, and --resume continues it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fatstudio.core.distributed import World

# one sentence, 200 times, as the text_file fixture; no dropout, so the two processes see the same model
CONFIG = """\
[model]
arch = "gpt"
l_max = 16
L = 1
H = 2
d_e = 16
d_mlp = 32
dropout = 0.0
[data]
corpus = "{corpus}"
tokenizer = "char"
[train]
steps = 20
batch_size = 8
warmup = 2
eval_interval = 10
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 0
device = "cpu"
precision = "fp32"
compile = false
seed = 5
"""


def _train(tmp_path: Path, processes: int, *args: str) -> subprocess.CompletedProcess:
    launcher = (["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1
                else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FATSTUDIO_RUNS": str(tmp_path / "default-runs")}
    done = subprocess.run([sys.executable, *launcher, "-m", "fatstudio", "train", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _curve(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _assert_same_curve(one: list[dict], two: list[dict]) -> None:
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, len(one) + 1))
    for a, b in zip(one, two):
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert ("val_loss" in a) == ("val_loss" in b)
        if "val_loss" in a:
            assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-5)


@pytest.fixture
def config(tmp_path, text_file) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG.format(corpus=text_file.as_posix()), encoding="utf-8")
    return path


def test_two_processes_train_the_one_process_curve_and_rank_0_alone_writes(tmp_path, config):
    _train(tmp_path, 1, str(config), "--out", "one")
    two = _train(tmp_path, 2, str(config), "--out", "two", "--quiet")
    _assert_same_curve(_curve(tmp_path / "one"), _curve(tmp_path / "two"))
    meta = json.loads((tmp_path / "two" / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["processes"] == 2 and meta["checkpoint_step"] == 20
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["one", "two"]  # one folder, no default run
    assert "Traceback" not in two.stderr


def test_a_two_process_run_resumes_where_it_stopped(tmp_path, config):
    for out, processes in (("one", 1), ("two", 2)):  # 10 steps, then on to 20 (the schedule as the run's)
        _train(tmp_path, processes, str(config), "--out", out, "--set", "train.steps=10", "--quiet")
        _train(tmp_path, processes, "--resume", out, "--set", "train.steps=20", "--quiet")
    _assert_same_curve(_curve(tmp_path / "one"), _curve(tmp_path / "two"))
    assert json.loads((tmp_path / "two" / "meta.json").read_text())["step"] == 20


def test_a_batch_that_does_not_split_over_the_processes_is_refused(tmp_path, config):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "fatstudio", "train", str(config), "--out", "odd", "--set", "train.batch_size=7"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "train.batch_size (7) is the global batch and must split evenly over the 2 processes" in done.stderr
    assert not (tmp_path / "odd").exists()


def test_the_world_comes_from_torchrun_s_variables():
    assert not World.from_env({}).distributed and World.from_env({}).is_main
    w = World.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (w.rank, w.size, w.local_rank, w.is_main, w.distributed) == (3, 4, 1, False, True)


def test_each_process_takes_its_own_rows_of_the_global_batch():
    import torch

    batch = {"x": torch.arange(12).reshape(6, 2), "y": torch.arange(6)}
    shards = [World(rank, 3).shard(batch) for rank in range(3)]
    assert torch.equal(torch.cat([s["x"] for s in shards]), batch["x"])
    assert [s["y"].tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]
