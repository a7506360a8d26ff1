"""``fatstudio features``: a dictionary trained on a run's hook point, written as fatstudio's folder or SAELens's,
and its errors in a line."""
import json

import pytest

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.inspect.features.dictionary import dictionary_folder, load

TOML = """
[model]
arch = "gpt"
l_max = 16
L = 1
H = 2
d_e = 16
d_mlp = 32
[data]
corpus = "{corpus}"
[train]
steps = 10
batch_size = 4
eval_interval = 5
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 0
device = "cpu"
precision = "fp32"
"""
FAST = ["--tokens", "2048", "--k", "4", "--d-f-mult", "2", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    (tmp / "c.txt").write_text("hello world, hello transformers.\n" * 100, encoding="utf-8")
    (tmp / "run.toml").write_text(TOML.format(corpus=(tmp / "c.txt").as_posix()), encoding="utf-8")
    assert main(["train", str(tmp / "run.toml"), "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp / "run"


def test_features_trains_a_transcoder_writes_it_and_prints_its_quality(run, tmp_path, capsys):
    out = tmp_path / "tc"
    assert main(["features", str(run), "--point", "mlp/0", "--step", "5", "--out", str(out), *FAST]) == 0
    said = capsys.readouterr().out
    d = load(out)
    assert (d.kind, d.point_in, d.point_out, d.d_f, d.k, d.info["step"]) == ("transcoder", "mlp/0/in", "mlp/0/out",
                                                                            32, 4, 5)
    assert f"CE loss score {d.info['quality']['ce_loss_score']:.3f}" in said and "explained variance" in said
    assert str(out) in said


def test_features_writes_into_the_run_s_features_folder_and_saelens_s_format(run, tmp_path, capsys):
    inside = dictionary_folder(run, "self/0/resid_post", 10)
    assert main(["features", str(run), "--point", "self/0/resid_post", "--out", str(inside), *FAST]) == 0
    assert load(inside).kind == "sae"
    assert main(["features", str(run), "--point", "self/0/resid_post", "--out", str(tmp_path / "sl"),
                 "--format", "saelens", *FAST]) == 0
    cfg = json.loads((tmp_path / "sl" / "cfg.json").read_text())
    assert (cfg["architecture"], cfg["d_sae"], cfg["metadata"]["hook_name"]) == ("topk", 32, "self/0/resid_post")
    assert (tmp_path / "sl" / "sae_weights.safetensors").is_file() and "SAELens" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--point", "self/4/resid_post", "--out", "{tmp}/x"], "no hook point 'self/4/resid_post'"),
    (["--point", "mlp/0", "--step", "7", "--out", "{tmp}/x"], "no weights of step 7"),
    (["--point", "self/0/mask", "--step", "7", "--out", "{tmp}/x"], "self/0/mask cannot be trained on"),
    (["--point", "mlp/0", "--out", "{tmp}/file/x"], "is a file"),
    (["--point", "mlp/0", "--out", "{run}/x"], "inside the run folder"),
])
def test_features_errors_are_a_line_without_traceback(run, tmp_path, capsys, args, words):
    (tmp_path / "file").write_text("")
    args = [a.format(tmp=tmp_path, run=run) for a in args]
    assert main(["features", str(run), *args, *FAST]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "x").exists()
