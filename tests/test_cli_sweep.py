"""``fatstudio sweep`` as a user runs it: 3 variants × 2 seeds of a tiny model, each run its own process, one
variant crashing (a batch that cannot fit) while the sweep goes on, the p-values scipy's; the CSV form. A value its
config refuses is said before any run trains."""
import csv
import json
import math
from pathlib import Path

import pytest
from cli_helpers import TRAIN, toml_table, write_config
from scipy.stats import ttest_ind

from fatstudio.cli import main
from fatstudio.core.runs.folder import Run

HUGE = 4 * 10**12  # a batch no machine holds: the run's process refuses it before it reads the corpus


@pytest.fixture
def cfg_file(tmp_path):
    return write_config(tmp_path, 50, "héllo wörld, hello transformers.\n" * 100, sample_tokens=0, seed=5)


def test_sweep_runs_every_variant_and_seed_and_records_a_crash(cfg_file, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FATSTUDIO_IGNORE_MEMORY", raising=False)  # a command run in this process may have set it
    out = tmp_path / "sweep.json"
    rc = main(["sweep", str(cfg_file), "--vary", f"train.batch_size=4,8,{HUGE}", "--seeds", "2", "--budget-steps", "6",
               "--runs-dir", str(tmp_path / "runs"), "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert result["unit"] == "bits/byte"
    assert [r["variant"] for r in rows] == [{"train.batch_size": 4}, {"train.batch_size": 8}, {"train.batch_size": HUGE}]
    for r in rows[:2]:
        assert len(r["values"]) == 2 and all(isinstance(v, float) and 0 < v < 10 for v in r["values"])
        assert r["mean"] == pytest.approx(sum(r["values"]) / 2)
        for run_dir, seed in zip(r["runs"], (5, 6)):
            run = Run.open(run_dir)
            assert run.config.train.seed == seed and run.info.step == 6 and run.info.status == "finished"
            assert run.info.val_bits_per_byte == r["values"][r["runs"].index(run_dir)]
            assert run.meta["variant"] == r["variant"]
            assert Path(run_dir).name == f"batch_size={r['variant']['train.batch_size']}-s{seed}-{run.meta['sweep']}"
            assert run.info.sweep_variant == f"{run.meta['sweep']}: train.batch_size = {r['variant']['train.batch_size']}"
    assert rows[0]["p_value"] is None
    expected = ttest_ind(rows[1]["values"], rows[0]["values"], equal_var=False).pvalue
    assert rows[1]["p_value"] == pytest.approx(expected, rel=1e-12) and not math.isnan(expected)
    crashed = rows[2]  # refused by the run's own process (it cannot fit): recorded, and the sweep went on
    assert crashed["values"] == [None, None] and crashed["mean"] is None and crashed["p_value"] is None
    assert all(e.startswith("the run exited with code 2: training this model needs about")
               for e in crashed["errors"].values())
    said = capsys.readouterr()
    assert said.err.count(f"missing: train.batch_size={HUGE}") == 2
    assert rows[1]["df"] < 2  # two seeds a side: a p-value that means little, and the output says so
    assert f"p = {rows[1]['p_value']:.3g} (Welch's df ≈ {rows[1]['df']:.1f}: too few seeds to mean much)" in said.out


def test_a_value_its_config_refuses_is_said_before_any_run_trains(cfg_file, tmp_path, capsys):
    assert main(["sweep", str(cfg_file), "--vary", "train.lr=1e-3,0.0", "--seeds", "2", "--runs-dir",
                 str(tmp_path / "runs"), "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("fatstudio sweep: error: the run of train.lr=0.0, seed 5: train.lr = 0.0 is not allowed; it must be "
                   "a number in (0, 10).")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "s.json").exists()


def test_sweep_writes_csv_and_refuses_bad_keys(cfg_file, tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    assert main(["sweep", str(cfg_file), "--vary", "model.d_e=16", "--seeds", "1", "--budget-steps", "3",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    (row,) = list(csv.DictReader(out.open(encoding="utf-8")))
    assert row["model.d_e"] == "16" and float(row["mean"]) == float(row["value_1"]) and row["sd"] == ""
    assert row["unit"] == "bits/byte"
    assert Run.open(row["runs"]).config.model.d_e == 16
    assert main(["sweep", str(cfg_file), "--vary", "model.width=1,2", "--seeds", "1", "--out", str(out)]) == 2
    assert "error: --vary model.width: no such key" in capsys.readouterr().err  # the flag named on the command line
    assert main(["sweep", str(cfg_file), "--vary", "model.d_e", "--seeds", "1", "--out", str(out)]) == 2
    assert "error: --vary 'model.d_e' is not of the form KEY=V1,V2" in capsys.readouterr().err


def test_a_sweep_on_modadd_scores_bits_per_token(tmp_path, capsys):
    """The modadd corpus has no bytes to count its answers by: its runs are scored in bits per token (the
    validation loss / ln 2), not all missing."""
    cfg = tmp_path / "modadd.toml"
    cfg.write_text(toml_table("model", dict(l_max=4, L=1, H=2, d_e=16, d_mlp=32))
                   + toml_table("data", dict(corpus="modadd", tokenizer="word", modadd_p=7, vocab_size=20,
                                             val_fraction=0.5))
                   + toml_table("train", dict(TRAIN, batch_size=8, sample_tokens=0)), encoding="utf-8")
    out = tmp_path / "sweep.json"
    assert main(["sweep", str(cfg), "--vary", "train.weight_decay=1.0,0.0", "--seeds", "1", "--budget-steps", "4",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["unit"] == "bits/token"
    for r in result["rows"]:
        info = Run.open(r["runs"][0]).info
        assert info.val_bits_per_byte is None and r["values"] == [pytest.approx(info.val_loss / math.log(2))]
    assert "bits/token" in capsys.readouterr().out
