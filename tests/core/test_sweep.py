"""Experiments over seeds (`training.sweep`): the values of --vary typed as the config's fields, the variants
with the baseline first, Welch's p-value as scipy computes it, the JSON and CSV forms; and bits per byte,
the value a sweep compares: UTF-8 bytes per validation token on a corpus with multi-byte characters."""
from __future__ import annotations

import csv
import io
import math

import pytest
from scipy.stats import ttest_ind
from training_helpers import tiny_config

from fatstudio.core.config import RunConfig
from fatstudio.core.data.chars import val_bytes_per_token
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.records import RunMeta
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import train
from fatstudio.core.training.sweep import Plan, Row, Sweep, parse_vary, run_value, welch_p

MULTI = "héllo wörld ☃ naïve café — über straße, 東京 and 🙂.\n"


def test_vary_values_take_the_type_of_their_key():
    c = RunConfig()
    assert parse_vary(c, "train.lr=1e-3, 3e-3") == ("train.lr", [0.001, 0.003])
    assert parse_vary(c, "train.lr=1,2")[1] == [1.0, 2.0] and all(type(v) is float for v in parse_vary(c, "train.lr=1,2")[1])
    assert parse_vary(c, "model.d_e=64,128") == ("model.d_e", [64, 128])
    assert parse_vary(c, "train.optimizer=adamw,\"muon\"") == ("train.optimizer", ["adamw", "muon"])
    assert parse_vary(c, "model.tie_embeddings=false,true")[1] == [False, True]
    assert parse_vary(c, "model.H_kv=none,1")[1] == [None, 1]
    for bad, words in (("model.d_e=64,1.5", "whole number"), ("train.lr=fast", "number"), ("train.nope=1", "no such key"),
                       ("model.tie_embeddings=yes", "true or false"), ("train.lr", "KEY=V1,V2")):
        with pytest.raises(ValueError, match=words):
            parse_vary(c, bad)


def test_variants_are_every_combination_with_the_baseline_first():
    c = RunConfig()
    plan = Plan(c, [parse_vary(c, "train.lr=1e-3,3e-3"), parse_vary(c, "model.L=2,4,6")], seeds=3)
    variants = plan.variants()
    assert len(variants) == 6 and variants[0] == {"train.lr": 0.001, "model.L": 2}
    assert plan.seed_list() == [c.train.seed, c.train.seed + 1, c.train.seed + 2]
    d = plan.config_of(variants[-1], 7, steps=5)
    assert (d["train"]["lr"], d["model"]["L"], d["train"]["seed"], d["train"]["steps"]) == (0.003, 6, 7, 5)
    with pytest.raises(ValueError, match="not both"):
        Plan(c, plan.vary, 2, budget_steps=3, budget_seconds=2.0)
    with pytest.raises(ValueError, match="twice"):
        Plan(c, [parse_vary(c, "train.lr=1,2"), parse_vary(c, "train.lr=3")], 2)


def test_p_values_are_welchs_as_scipy_computes_them_and_missing_values_are_left_out():
    base = Row({"train.lr": 1e-3}, [1.50, 1.52, 1.49, 1.55])
    other = Row({"train.lr": 3e-3}, [1.40, None, 1.46, 1.43], errors={1338: "the run exited with code 2"})
    lone = Row({"train.lr": 1e-2}, [1.3, None, None, None])
    sweep = Sweep([base, other, lone])
    expected = ttest_ind([1.50, 1.52, 1.49, 1.55], [1.40, 1.46, 1.43], equal_var=False).pvalue
    assert sweep.p_value(1) == pytest.approx(expected, rel=1e-12) and sweep.p_value(1) < 0.05
    assert sweep.p_value(0) is None and sweep.p_value(2) is None  # the baseline; one value: undefined
    assert welch_p([1.0, 1.0], [1.0, 1.0]) is None  # no spread: scipy says nan
    d = sweep.to_dict()["rows"]
    assert d[1]["values"] == [1.40, None, 1.46, 1.43] and d[1]["mean"] == pytest.approx(1.43)
    assert d[1]["sd"] == pytest.approx(math.sqrt(((1.40 - 1.43) ** 2 + (1.46 - 1.43) ** 2) / 2))
    assert d[1]["errors"] == {"1338": "the run exited with code 2"} and d[2]["sd"] is None
    rows = list(csv.DictReader(io.StringIO(sweep.csv())))
    assert [r["train.lr"] for r in rows] == ["0.001", "0.003", "0.01"]
    assert rows[1]["value_2"] == "" and float(rows[1]["p_value"]) == pytest.approx(expected) and rows[0]["p_value"] == ""
    assert sweep.missing() == ["train.lr=0.003, seed 1338: the run exited with code 2"]


def test_welchs_df_is_scipys_and_a_p_value_on_two_seeds_a_side_says_it_means_little():
    from fatstudio.core.training.sweep import FEW_DF, few_seeds, welch_df

    a, b = [1.50, 1.52], [1.40, 1.46]
    assert welch_df(a, b) == pytest.approx(ttest_ind(a, b, equal_var=False).df, rel=1e-12)
    assert 1 <= welch_df(a, b) <= 2  # two values a side: between 1 and n_a + n_b - 2
    assert few_seeds(welch_df(a, b)).startswith("Welch's df ≈ 1.2: too few seeds for this p-value to mean much")
    five = [1.50, 1.52, 1.49, 1.55, 1.51], [1.40, 1.46, 1.43, 1.45, 1.41]
    assert welch_df(*five) >= FEW_DF and few_seeds(welch_df(*five)) is None
    assert welch_df([1.0], b) is None and welch_df([1.0, 1.0], [2.0, 2.0]) is None and few_seeds(None) is None
    sweep = Sweep([Row({"train.lr": 1e-3}, a), Row({"train.lr": 3e-3}, b)])
    rows = sweep.to_dict()["rows"]
    assert rows[0]["df"] is None and rows[1]["df"] == pytest.approx(welch_df(b, a))
    assert rows[1]["p_note"] == few_seeds(rows[1]["df"]) and rows[0]["p_note"] is None
    assert float(next(csv.DictReader(io.StringIO(sweep.csv().split("\n", 2)[0] + "\n" + sweep.csv().split("\n")[2])))
                 ["df"]) == pytest.approx(rows[1]["df"])


def test_sweep_runs_are_named_by_their_variant_and_seed_and_keys_come_with_their_types():
    from fatstudio.core.config_keys import config_key, config_keys
    from fatstudio.core.training.sweep import SEED, run_folder_name

    variant = {"train.lr": 0.003, "train.optimizer": "muon"}
    assert run_folder_name("sweep-20261127-101010", variant, 1338) == "lr=0.003+optimizer=muon-s1338-sweep-20261127-101010"
    assert run_folder_name("sweep-1", variant, 1338, ["train.lr"]) == "lr=0.003-s1338-sweep-1"  # what varies only
    both = run_folder_name("s", {"model.vocab_size": 3, "data.vocab_size": 500}, 1)  # the same last part: in full
    assert both == "model.vocab_size=3+data.vocab_size=500-s1-s"
    long = [run_folder_name("s", {"data.corpus": f"/a/very/long/folder/name/for/a/corpus/{c}/of/text.txt"}, 1)
            for c in ("one", "two")]
    assert long[0] != long[1] and all(len(n) == len("-s1-s") + 60 for n in long)  # cut, told apart by a digest
    c = RunConfig()
    keys = {k.key: k for k in config_keys(c, leave_out=(SEED,))}
    assert "train.seed" not in keys and "model.vocab_size" not in keys  # the sweep's own; filled in by training
    assert keys["train.lr"].describe() == f"train.lr: a number; now {c.train.lr:g}"
    assert keys["train.optimizer"].describe() == 'train.optimizer: one of adamw, sgd, muon; now "adamw"'
    assert keys["model.d_attn"].kind == "whole number or none" and keys["model.bias"].kind == "true or false"
    assert keys["model.positions"].kind == "one of learned, sinusoidal, rope, alibi, relative, none"
    assert list(keys)[:2] == ["model.arch", "model.l_max"]
    with pytest.raises(ValueError, match="no such key"):
        config_key(c, "train.nope")
    with pytest.raises(ValueError, match="train.seed: the sweep sets it"):
        parse_vary(c, "train.seed=1,2")


def test_a_runs_value_is_bits_per_byte_else_bits_per_token_and_a_sweep_keeps_one_unit():
    text = RunMeta({"val_loss": 2.0, "val_bytes_per_token": 1.25})
    pairs = RunMeta({"val_loss": 2.0})  # modadd, seq2seq, classification: no bytes per token
    assert run_value(text) == (pytest.approx(2.0 / math.log(2) / 1.25), "bits/byte")
    assert run_value(pairs) == (pytest.approx(2.0 / math.log(2)), "bits/token")
    assert run_value(RunMeta({})) is None
    sweep = Sweep([Row({"train.lr": 1e-3})])
    assert sweep.unit is None and sweep.take(None, "the run exited with code 2") == (None, "the run exited with code 2")
    assert sweep.take(run_value(pairs), None) == (pytest.approx(2.885, abs=1e-3), None) and sweep.unit == "bits/token"
    value, why = sweep.take(run_value(text), None)
    assert value is None and why == "its value is in bits/byte, the sweep's others in bits/token: they do not compare"
    assert sweep.to_dict()["unit"] == "bits/token" and list(csv.DictReader(io.StringIO(sweep.csv())))[0]["unit"] == "bits/token"


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_bytes_per_token_counts_the_utf8_bytes_of_the_validation_split(kind, tmp_path):
    p = tmp_path / "multi.txt"
    p.write_text("".join(f"{i}: {MULTI}" for i in range(60)), encoding="utf-8")
    corpus = load_corpus(str(p))
    tok = train_tokenizer(kind, corpus.texts(), 300)
    dataset = build_dataset(corpus, tok, "next_token", 16, 0.2)
    val = dataset.stream("val")
    expected = len(tok.decode(val).encode("utf-8")) / len(val)  # the validation text, decoded whole
    assert val_bytes_per_token(tok, dataset) == pytest.approx(expected, rel=1e-12)
    chars = len(tok.decode(val)) / len(val)
    assert expected > chars  # é, ☃, 東, 🙂 are more than one byte: bits per byte ≠ bits per character


def test_a_run_records_its_bytes_per_token_and_reads_bits_per_byte(tmp_path):
    p = tmp_path / "multi.txt"
    p.write_text(MULTI * 80, encoding="utf-8")
    events = list(train(tiny_config(p, steps=4, eval_interval=4, sample_tokens=0), run_dir=tmp_path / "run"))
    assert events[-1].status == "finished"
    info = Run.open(tmp_path / "run").info
    per_token = info.data["val_bytes_per_token"]
    assert per_token == pytest.approx(len(MULTI.encode()) / len(MULTI), rel=0.05)  # char tokens: bytes per char
    assert info.val_bits_per_byte == pytest.approx(info.val_loss / math.log(2) / per_token)


def test_a_seconds_budget_becomes_the_steps_that_fit_and_a_stopped_sweep_runs_nothing(text_file, tmp_path):
    import threading

    from fatstudio.core.training.sweep import VARIANT_CHARS, _steps_in, run_folder_name, run_sweep

    c = tiny_config(text_file, steps=10_000, sample_tokens=0)
    plan = Plan(c, [parse_vary(c, f"data.corpus={text_file},{tmp_path / 'gone.txt'}")], seeds=2, budget_seconds=3.0)
    steps, error = _steps_in(plan, plan.variants()[0], 3.0)
    assert error is None and 1 <= steps < 10_000  # a tiny model's step takes milliseconds, not 0.3 ms
    steps, error = _steps_in(plan, plan.variants()[1], 3.0)
    assert steps is None and "cannot time the variant" in error and "gone.txt" in error
    stop = threading.Event()
    stop.set()
    seen = []
    sweep = run_sweep(plan, tmp_path / "runs", name="s", progress=lambda s, done: seen.append(done), stop=stop)
    assert [r.values for r in sweep.rows] == [[None, None], [None, None]] and len(seen) == 4
    assert sweep.rows[1].runs == [str(tmp_path / "runs" / run_folder_name("s", sweep.rows[1].variant, seed))
                                  for seed in (1337, 1338)]
    name = sweep.rows[1].runs[0].rsplit("/", 1)[1]  # the variant first, then the seed and the sweep
    assert name.startswith("corpus=_") and name.endswith("-s1337-s") and len(name) <= len("-s1337-s") + VARIANT_CHARS
    assert set(sweep.rows[0].errors.values()) == {"the sweep was stopped"} and not (tmp_path / "runs").exists()
