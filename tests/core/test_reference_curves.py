"""Bits per character and reference curves: each split's characters per token, recorded when training starts;
which runs a preset's reference applies to; the reference's bands over seeds; its file; the script that
measures it."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
from training_helpers import tiny_config

from fatstudio.core import training
from fatstudio.core.config import RunConfig
from fatstudio.core.runs.folder import Run
from fatstudio.core.runs.reference_curves import (
    POINTS,
    ReferenceCurve,
    SeedCurves,
    find_reference,
    load_reference,
    same_settings,
    save_reference,
)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "reference_curves.py"


def _started(events):
    """The Started event of a run trained to its end (a run whose events are dropped before its first step
    leaves no folder)."""
    return next(e for e in list(events) if e.kind == "started")


# ---- characters per token -------------------------------------------------------------------------------
def test_a_char_tokenizer_has_one_char_per_token_recorded_in_the_event_and_meta(tmp_path, text_file):
    events = list(training.train(tiny_config(text_file, steps=2), runs_root=tmp_path))
    started = _started(events)
    assert started.chars_per_token == {"train": 1.0, "val": 1.0}
    assert Run.open(started.run_dir).meta["chars_per_token"] == {"train": 1.0, "val": 1.0}


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_word_and_bpe_tokens_hold_each_splits_own_characters(tmp_path, kind):
    rng = random.Random(0)

    def lines(words):
        return "".join(" ".join(rng.choices(words, k=rng.randint(3, 12))) + rng.choice(["\n", ".\n", ":\n    "])
                       for _ in range(1500))
    # short words, then long ones: the splits' characters per token differ
    text = lines(["if", "x", "(y)", "12", "=", "+", "a", "café"]) + lines(["alphabetical", "returning", "gammas"])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(text, encoding="utf-8")
    cfg = tiny_config(corpus, steps=1)
    cfg.data.tokenizer, cfg.data.vocab_size, cfg.data.val_fraction = kind, 400, 0.5  # the val split spans pieces
    cfg.data.split = "tail"  # the long words validate
    started = _started(training.train(cfg, runs_root=tmp_path / "runs"))
    run = Run.open(started.run_dir)
    # independently: the whole text encoded at once, split where the trainer splits, each side decoded
    tok = run.load_tokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text  # no unknown words: decoding gives every character back
    n_train = int(len(ids) * (1 - cfg.data.val_fraction))
    assert run.meta["data_sizes"] == {"train_tokens": n_train, "val_tokens": len(ids) - n_train}
    want = {"train": len(tok.decode(ids[:n_train])) / n_train, "val": len(tok.decode(ids[n_train:])) / (len(ids) - n_train)}
    assert started.chars_per_token == pytest.approx(want, rel=1e-12)
    assert run.meta["chars_per_token"] == pytest.approx(want, rel=1e-12)
    assert min(want.values()) > 1.3 and abs(want["train"] - want["val"]) > 0.01


def test_paired_data_has_no_chars_per_token(tmp_path):
    cfg = tiny_config("reverse", steps=1)
    cfg.model.arch, cfg.data.task = "edt", "seq2seq"
    started = _started(training.train(cfg, runs_root=tmp_path))
    assert started.chars_per_token is None and Run.open(started.run_dir).meta["chars_per_token"] is None


# ---- which runs a reference applies to ------------------------------------------------------------------
def test_a_reference_applies_to_the_same_model_data_and_optimisation():
    ref = tiny_config("copy")
    same = RunConfig.from_dict(ref.to_dict())
    same.train.steps, same.train.seed, same.train.device, same.train.eval_interval = 9999, 7, "cuda", 3
    same.model.vocab_size, same.data.vocab_size = 77, 5000  # N_V follows the tokenizer; a char tokenizer has no cap
    same.model.norm = "layer"  # gpt's default spelled out
    assert same_settings(ref, same) and same_settings(same, ref)
    for change in ("train.lr=0.01", "train.batch_size=8", "model.d_e=32", "model.positions=rope", "data.corpus=sort",
                   "train.optimizer=sgd", "model.dropout=0.1", "data.val_fraction=0.2"):
        assert not same_settings(ref, ref.with_overrides([change])), change
    bpe = ref.with_overrides(["data.tokenizer=bpe"])
    assert not same_settings(bpe, bpe.with_overrides(["data.vocab_size=500"]))  # a BPE's cap changes its tokens


# ---- the reference's curves and file --------------------------------------------------------------------
def test_measured_bands_average_windows_of_steps_then_take_mean_min_max_over_seeds():
    n = 2 * POINTS + 3  # windows of 3 steps; the last holds 1
    runs = [SeedCurves(s, list(range(1, n + 1)), [float(s + i) for i in range(n)], [100, 200], [5.0 + s, 4.0 - s], 1.5)
            for s in (0, 10)]
    ref = ReferenceCurve.measured("9-x", "X", tiny_config("copy"), runs, commit="abc")
    assert len(ref.train.step) == 135 and ref.train.step[:2] == [2.0, 5.0] and ref.train.step[-1] == n
    assert ref.train.min[:2] == [1.0, 4.0] and ref.train.max[:2] == [11.0, 14.0] and ref.train.mean[:2] == [6.0, 9.0]
    assert ref.train.min[-1] == n - 1 and ref.train.max[-1] == n + 9
    assert ref.val.step == [100, 200] and ref.val.mean == [10.0, -1.0] and ref.val.min == [5.0, -6.0]
    assert ref.seeds == [0, 10] and ref.seconds == [1.5, 1.5]


def test_reference_file_round_trips_and_find_skips_what_does_not_apply(tmp_path):
    cfg = tiny_config("copy")
    run = SeedCurves(1, [1, 2], [3.0, 2.0], [2], [2.5])
    ref = ReferenceCurve.measured("9-tiny", "Tiny", cfg, [run], chars_per_token={"train": 1.0, "val": 1.0},
                                  machine={"device": "cpu"}, commit="abc-dirty", created="now")
    path = save_reference(ref, tmp_path / "refs")
    assert path.name == "9-tiny.json"
    assert json.loads(path.read_text(encoding="utf-8"))["loss_unit"] == "nats/token"
    assert load_reference(path) == ref
    (tmp_path / "refs" / "0-broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "refs" / "1-foreign.json").write_text('{"format": "something else"}', encoding="utf-8")
    with pytest.raises(ValueError, match="0-broken.json"):
        load_reference(tmp_path / "refs" / "0-broken.json")
    longer = RunConfig.from_dict(cfg.to_dict())
    longer.train.steps = 5000
    assert find_reference(longer, tmp_path / "refs") == ref
    assert find_reference(cfg.with_overrides(["train.lr=0.5"]), tmp_path / "refs") is None
    assert find_reference(cfg, tmp_path / "nowhere") is None


@pytest.mark.slow
def test_the_script_measures_a_preset_into_a_valid_reference(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("reference_curves_script", BENCH)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from fatstudio.core.runs.presets import preset

    p = preset("edt-reverse")
    assert script.main(["edt-reverse", "--steps", "3", "--seeds", "2", "--device", "cpu", "--out", str(tmp_path)]) == 0
    ref = load_reference(tmp_path / "edt-reverse.json")
    assert ref.preset == p.key and ref.name == p.name and ref.seeds == [p.config.train.seed, p.config.train.seed + 1]
    assert ref.train.step == [1.0, 2.0, 3.0] and ref.val.step == [3.0]  # evaluated at the last step
    assert all(lo <= m <= hi for lo, m, hi in zip(ref.train.min, ref.train.mean, ref.train.max))
    assert ref.applies_to(p.config) and ref.config.train.steps == 3 and ref.chars_per_token is None  # seq2seq
    assert ref.machine["device"] == "cpu" and ref.machine["threads"] >= 1 and len(ref.seconds) == 2
    assert ref.commit is None or len(ref.commit) >= 7
    assert "wrote" in capsys.readouterr().out


def test_every_preset_ships_a_reference_measured_at_its_settings():
    """A preset retuned without re-measuring (bench/reference_curves.py) would lose its band silently."""
    from fatstudio.core.runs.presets import load_presets

    for p in load_presets():
        ref = find_reference(p.config)
        assert ref is not None, f"{p.key}: no reference curve at its settings; run bench/reference_curves.py {p.key}"
        assert ref.preset == p.key and len(ref.seeds) >= 2
