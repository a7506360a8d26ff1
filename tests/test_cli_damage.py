"""Damage nobody sees, on the command line (issue 34, kind 5): four kilobytes of zeros in a snapshot's tensors make
``ablate`` and ``lens`` at that step refuse it in a line naming the file (they loaded it silently before), while the
other steps, the checkpoint and the runs list work as before; a run written before checksums says so."""
import json

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.runs import snapshots

TOML = """
[model]
l_max = 16
L = 1
H = 2
d_e = 16
d_mlp = 32
[data]
corpus = "{corpus}"
[train]
steps = 20
batch_size = 4
eval_interval = 10
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 0
device = "cpu"
"""


@pytest.fixture
def run(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"hello world {i % 7}, hello transformers.\n" for i in range(100)), encoding="utf-8")
    (tmp_path / "c.toml").write_text(TOML.format(corpus=corpus.as_posix()), encoding="utf-8")
    assert main(["train", str(tmp_path / "c.toml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    return tmp_path / "run"


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fatstudio "), err
    return err[0]


def test_zeros_in_a_snapshot_make_ablate_and_lens_refuse_that_step_by_name(run, tmp_path, capsys):
    path = snapshots.snapshot_path(run, 10)
    data = bytearray(path.read_bytes())
    data[-4096:] = bytes(4096)
    path.write_bytes(bytes(data))
    capsys.readouterr()
    for args in (["ablate", str(run), "--step", "10"], ["lens", str(run), "--prompt", "hello", "--step", "10"]):
        out = tmp_path / f"{args[0]}.json"
        assert main([*args, "--out", str(out)]) == EXIT_ERROR
        line = one_error(capsys)
        assert "run/snapshots/step-00000010.safetensors is damaged" in line and "other weights (step 20) still load" \
            in line, line
        assert not out.exists()
        assert main([*args[:-1], "20", "--out", str(out)]) == 0  # the other step's weights
    assert main(["generate", str(run), "--prompt", "hello", "--tokens", "3"]) == 0
    assert main(["train", "--resume", str(run), "--set", "train.steps=30", "--quiet"]) == 0  # the checkpoint is fine
    capsys.readouterr()
    assert main(["ablate", str(run), "--step", "10", "--out", str(tmp_path / "y.json")]) == EXIT_ERROR
    assert "is damaged" in one_error(capsys)  # resuming never rewrites a snapshot it keeps


def test_an_older_run_without_checksums_says_so_and_works(run, tmp_path, capsys):
    for path in [run / "model.safetensors", *snapshots.list_snapshots(run).values()]:
        with safe_open(str(path), framework="pt") as f:
            metadata = {k: v for k, v in f.metadata().items() if k != "sha256"}
        save_file(load_file(path), path, metadata=metadata)
    meta = json.loads((run / "meta.json").read_text())
    del meta["format_version"]  # as fatstudio wrote them before format_version: version 1
    (run / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "hello", "--tokens", "3"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["note: run was written by an older fatstudio (format 1): its weights carry no checksum, so damage "
                   "to them cannot be detected."]
