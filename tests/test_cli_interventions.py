"""The experiments on a trained run from the command line: ablate, patch, lens, token-loss, with their files and
their errors in a line."""
import csv
import json
import math

import pytest
import torch

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.runs.folder import Run

TOML = """
[model]
arch = "{arch}"
l_max = 16
L = 2
L_enc = 1
L_dec = 1
H = 2
d_e = 16
d_mlp = 32
[data]
corpus = "{corpus}"
task = "{task}"
[train]
steps = 10
batch_size = 4
eval_interval = 5
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 0
seed = {seed}
device = "cpu"
precision = "fp32"  # as ablate, patch and token-loss compute: "auto" is bf16 on a CPU that has it
"""


def _train(tmp, name, arch="gpt", task="next_token", corpus=None, seed=0):
    if corpus is None:
        corpus = tmp / "c.txt"
        if not corpus.exists():
            corpus.write_text("".join(f"hello world {i % 7}, hello transformers.\n" for i in range(100)), encoding="utf-8")
        corpus = corpus.as_posix()
    cfg = tmp / f"{name}.toml"
    cfg.write_text(TOML.format(arch=arch, corpus=corpus, task=task, seed=seed), encoding="utf-8")
    assert main(["train", str(cfg), "--out", str(tmp / name), "--quiet"]) == 0
    return tmp / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return {"gpt": _train(tmp, "gpt"), "gpt2": _train(tmp, "gpt2", seed=1),
            "edt": _train(tmp, "edt", "edt", "seq2seq", "reverse"), "bert": _train(tmp, "bert", "bert", "masked_lm")}


def test_ablate_writes_every_component_s_change_in_validation_loss(runs, tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["ablate", str(runs["gpt"]), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert [r["component"] for r in d["rows"]] == ["self/0/0", "self/0/1", "mlp/0", "self/1/0", "self/1/1", "mlp/1"]
    assert abs(d["baseline_loss"] - Run.open(runs["gpt"]).meta["val_loss"]) <= 1e-5  # the trainer's, same weights
    assert all(math.isclose(r["delta_loss"], r["loss"] - d["baseline_loss"]) for r in d["rows"])
    said = capsys.readouterr().out
    assert "step 10" in said and "self/" not in said and ("· head" in said or "· MLP" in said)
    assert main(["ablate", str(runs["gpt"]), "--kind", "resample", "--step", "10", "--out", str(tmp_path / "a.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    assert list(rows[0]) == ["component", "loss", "delta_loss"] and len(rows) == 6
    assert [float(r["loss"]) for r in rows] != [r["loss"] for r in d["rows"]]  # another kind, other losses


def test_ablate_names_an_encoder_decoder_s_components(runs, tmp_path):
    out = tmp_path / "e.json"
    assert main(["ablate", str(runs["edt"]), "--kind", "mean", "--out", str(out)]) == 0
    names = [r["component"] for r in json.loads(out.read_text())["rows"]]
    assert names == ["enc/0/0", "enc/0/1", "enc-mlp/0", "dec/0/0", "dec/0/1", "cross/0/0", "cross/0/1", "dec-mlp/0"]


def test_patch_and_lens_write_their_json(runs, tmp_path):
    out = tmp_path / "p.json"
    assert main(["patch", str(runs["gpt"]), "--clean", "hello world", "--corrupt", "hello wtrld", "--target", "o",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["target"] == "o" and len(d["residual"]) == 3 and all(len(r["restored"]) == 11 for r in d["residual"])
    assert restores_all(d, d["residual"][2]["restored"][-1]) and set(d["heads"]) == {"self/0", "self/1"}
    out = tmp_path / "l.json"
    assert main(["lens", str(runs["gpt"]), "--prompt", "hello", "--step", "10", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["tokens"] == list("hello") and [r["layer"] for r in d["layers"]] == [0, 1, 2]
    loaded = Run.open(runs["gpt"]).load_model()
    with torch.no_grad():
        p = loaded.model(torch.tensor([loaded.tokenizer.encode("hello")]))[0].softmax(-1)
    assert d["layers"][-1]["top_probs"] == pytest.approx(p.max(-1).values.tolist(), abs=1e-6)
    assert d["layers"][-1]["top_tokens"] == loaded.tokenizer.token_strings(p.argmax(-1).tolist())


def restores_all(d: dict, restored: float) -> bool:
    """Whether a patch gave the clean logit difference back: within float32 rounding of the logits (the fraction
    divides by d_clean - d_corrupted, which can be small for a model trained a few steps)."""
    return abs(restored - 1.0) * abs(d["clean_logit_diff"] - d["corrupted_logit_diff"]) < 1e-4


def test_patch_and_lens_read_bert_at_its_mask_and_an_encoder_decoder_given_its_source(runs, tmp_path):
    out = tmp_path / "p.json"
    assert main(["patch", str(runs["bert"]), "--clean", "hello w[MASK]rld", "--corrupt", "hello t[MASK]rld",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["position"] == 8 and len(d["clean_tokens"]) == 13 and "decoder_residual" not in d  # [bos] text [eos]
    assert restores_all(d, d["residual"][2]["restored"][8]) and set(d["heads"]) == {"self/0", "self/1"}
    assert main(["patch", str(runs["edt"]), "--clean", "abcd", "--corrupt", "hbcd", "--prefix", "dc", "--position", "-1",
                 "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["position"] == 2 and d["prefix_tokens"][1:] == ["d", "c"] and d["clean_tokens"][1:-1] == list("abcd")
    assert [len(r["restored"]) for r in d["residual"]] == [6, 6] and [r["layer"] for r in d["decoder_residual"]] == [0, 1]
    assert restores_all(d, d["decoder_residual"][1]["restored"][2]) and set(d["heads"]) == {"enc/0", "dec/0", "cross/0"}

    loaded = Run.open(runs["bert"]).load_model()
    assert main(["lens", str(runs["bert"]), "--prompt", "hello w[MASK]rld", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    tok = loaded.tokenizer
    x = [tok.bos_id, *tok.encode("hello w"), tok.mask_id, *tok.encode("rld"), tok.eos_id]
    with torch.no_grad():
        p = loaded.model(torch.tensor([x]))[0].softmax(-1)
    assert d["tokens"] == tok.token_strings(x) and len(d["layers"]) == 3
    assert d["layers"][-1]["top_probs"] == pytest.approx(p.max(-1).values.tolist(), abs=1e-6)
    assert main(["lens", str(runs["edt"]), "--prompt", "dc", "--source", "abcd", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert len(d["tokens"]) == 3 and d["source_tokens"][1:-1] == list("abcd") and len(d["layers"]) == 2


def test_token_loss_and_its_diffs(runs, tmp_path):
    out = tmp_path / "t.json"
    assert main(["token-loss", str(runs["gpt"]), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["n_tokens"] == len(d["tokens"]) == len(d["loss"]) > 100
    assert d["mean"] == pytest.approx(sum(d["loss"]) / d["n_tokens"])
    kinds = [c for c in d["classes"] if c["family"] == "kind"]  # an extra key: the loss by class of token
    assert sum(c["count"] for c in kinds) == d["n_tokens"]
    assert main(["token-loss", str(runs["edt"]), "--out", str(out)]) == 0  # seq2seq: each target token and eos
    assert json.loads(out.read_text())["tokens"].count("<eos>") > 0
    assert main(["token-loss", str(runs["gpt"]), "--against-step", "10", "--out", str(out)]) == 0
    assert set(json.loads(out.read_text())["delta_loss"]) == {0.0}
    assert main(["token-loss", str(runs["gpt"]), "--against", str(runs["gpt2"]), "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert math.isclose(math.fsum(d["delta_loss"]), d["n_tokens"] * d["delta_mean"], abs_tol=1e-6)
    assert d["delta_mean"] != 0
    assert main(["token-loss", str(runs["gpt"]), "--out", str(tmp_path / "t.csv")]) == 0
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "position,token,loss"


def test_ablate_at_an_earlier_evaluation_uses_that_step_s_weights(runs, tmp_path, capsys):
    from fatstudio.core.inspect.ablation import knockout_table
    from fatstudio.core.runs.folder import load_at_step

    run = Run.open(runs["gpt"])
    assert run.weight_steps() == [5, 10]
    tables = {}
    for step in (5, 10):
        out = tmp_path / f"a{step}.json"
        assert main(["ablate", str(run.path), "--step", str(step), "--out", str(out)]) == 0
        assert f"at step {step} " in capsys.readouterr().out
        tables[step] = json.loads(out.read_text())
    assert tables[5]["baseline_loss"] > tables[10]["baseline_loss"]  # the earlier model, less trained
    want = knockout_table(load_at_step(run, 5), "zero")
    assert tables[5]["baseline_loss"] == pytest.approx(want.baseline_loss, abs=1e-9)


@pytest.mark.parametrize("args,words", [
    (["ablate", "{gpt}", "--step", "7", "--out", "{tmp}/x.json"], "no weights of step 7; saved steps: 5, 10."),
    (["ablate", "{gpt}", "--out", "{tmp}/x.txt"], ".json or .csv"),
    (["patch", "{gpt}", "--clean", "hello", "--corrupt", "hello world", "--out", "{tmp}/x.json"], "same number of tokens"),
    (["patch", "{gpt}", "--clean", "hello", "--corrupt", "hellw", "--prefix", "he", "--out", "{tmp}/x.json"],
     "target prefix"),
    (["patch", "{gpt}", "--clean", "hello", "--corrupt", "hellw", "--position", "5", "--out", "{tmp}/x.json"],
     "--position 5"),
    (["lens", "{edt}", "--prompt", "abc", "--out", "{tmp}/x.json"], "--source"),
    (["token-loss", "{gpt}", "--against", "{edt}", "--out", "{tmp}/x.json"], "different tokens"),
])
def test_errors_are_a_line_without_traceback(args, words, runs, tmp_path, capsys):
    args = [a.format(gpt=runs["gpt"], edt=runs["edt"], tmp=tmp_path) for a in args]
    assert main(args) == EXIT_ERROR
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_against_and_against_step_exclude_each_other(runs, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["token-loss", str(runs["gpt"]), "--against", str(runs["gpt2"]), "--against-step", "10", "--out", "x.json"])
    assert e.value.code != 0 and "not allowed with" in capsys.readouterr().err
