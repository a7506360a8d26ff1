"""The validation split of a text (``data.split``): a folder of German then Russian files validates on both
languages with the "blocks" rule and on Russian alone with the old "tail" rule; the tail stays what old runs
used (their config.json has no data.split); the distance between the two splits' texts is measured, recorded
and warned about; the blocks' batches, characters, token losses and the tokenizer lab follow the blocks."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from training_helpers import tiny_config

from fatstudio.core import training
from fatstudio.core.config import DataConfig, RunConfig
from fatstudio.core.data import splits
from fatstudio.core.data.chars import chars_per_token
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.runs.folder import CONFIG, Run
from fatstudio.core.runs.presets import load_presets
from fatstudio.core.runs.reference_curves import ReferenceCurve, find_reference, same_settings
from fatstudio.core.runs.tokenizer_lab import split_corpus
from fatstudio.core.training.diagnostics import Diagnosis, diagnose

GERMAN = ("der die das und ist nicht ein eine zu mit auf für von dem den sich auch es im wir sie ich haben werden "
          "über schön groß Straße Mädchen Bücher hören möchte").split()
RUSSIAN = ("и в не на что он с как это по но она они мы вы был быть его её для от так же уже все или когда очень "
           "хорошо большой книга говорить").split()


def write_languages(folder, files=4, lines=600, seed=0):
    """``de-0.txt`` … then ``ru-0.txt`` …: sentences of random words, German in the first files, Russian after."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for lang, words in (("de", GERMAN), ("ru", RUSSIAN)):
        for i in range(files):
            text = "".join(" ".join(rng.choices(words, k=10)).capitalize() + ".\n" for _ in range(lines))
            (folder / f"{lang}-{i}.txt").write_text(text, encoding="utf-8")
    return folder


def cyrillic(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum("а" <= c.lower() <= "я" or c in "ёЁ" for c in letters) / len(letters)


@pytest.fixture(scope="module")
def languages(tmp_path_factory):
    folder = write_languages(tmp_path_factory.mktemp("corpus") / "de-ru")
    corpus = load_corpus(str(folder))
    return folder, corpus, train_tokenizer("char", corpus.texts())


# ---- the rule --------------------------------------------------------------------------------------------------
def test_a_folder_of_two_languages_validates_on_both_with_blocks_and_on_the_last_alone_with_the_tail(languages):
    _, corpus, tok = languages
    text = corpus.text
    share = {}
    for rule in ("tail", "blocks"):
        ds = build_dataset(corpus, tok, "next_token", l_max=32, split=rule)
        train, val = (tok.decode(np.asarray(ds.stream(s)).tolist()) for s in ("train", "val"))
        share[rule] = cyrillic(train), cyrillic(val)
        assert len(val) == pytest.approx(0.1 * len(text), rel=0.01)
    assert share["tail"][1] == 1.0 and share["tail"][0] < 0.45  # validation all Russian, training mostly German
    assert abs(share["blocks"][1] - share["blocks"][0]) < 0.05  # validation as Russian as training
    # every file gives about its share to validation (the blocks rule spreads it over the whole corpus)
    plan = splits.plan(corpus.chars, 0.1, "blocks")
    _, val = plan.ranges(len(text))
    start = 0
    for name, n in corpus.parts:
        held = sum(max(0, min(b, start + n) - max(a, start)) for a, b in val)
        assert held / n == pytest.approx(0.1, abs=0.04), name
        start += n


def test_the_gap_between_the_splits_is_marked_for_the_tail_and_not_for_the_blocks(languages):
    _, corpus, tok = languages
    tail = build_dataset(corpus, tok, "next_token", l_max=32, split="tail").split_gap()
    blocks = build_dataset(corpus, tok, "next_token", l_max=32, split="blocks").split_gap()
    assert tail is not None and blocks is not None
    assert tail.marked and tail.tv > 0.4 and tail.kl > 0.5  # Russian against mostly German
    assert not blocks.marked and blocks.tv < tail.tv / 5 and blocks.kl < 0.05
    same = splits.gap(np.array([50, 30, 20]) * 1000, np.array([50, 30, 20]) * 100)
    assert same is not None and same.tv == 0 and same.kl == pytest.approx(0, abs=1e-6)
    assert splits.gap(np.array([5, 0]), np.array([0, 0])) is None  # no validation tokens: nothing to compare


def test_ranges_cover_the_stream_once_and_the_tail_cuts_where_it_always_did():
    for chars, f in ((100, 0.1), (50_000, 0.1), (1_546_369, 0.1), (300_000, 0.37), (10_000_000, 0.05)):
        for n in (chars, chars // 3, 17):
            for rule in splits.SPLITS:
                train, val = splits.plan(chars, f, rule).ranges(n)
                covered = sorted(train + val)
                assert covered[0][0] == 0 and covered[-1][1] == n
                assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # no gap, no overlap
                if rule == "tail":
                    assert train == [(0, int(n * (1 - f)))]
    p = splits.plan(1_546_369, 0.1)
    assert p.blocks == 100 and p.describe() == "10% in 100 blocks, one in each of 100 equal stretches of the text"
    assert splits.plan(1_546_369, 0.1).val == p.val  # fixed places: no seed, no tokenizer
    assert splits.plan(3000, 0.1).blocks == 1 and splits.plan(30_000, 0.1).blocks == 2
    assert splits.plan(10**9, 0.1).blocks == splits.MAX_BLOCKS
    assert splits.plan(5000, 0.0).ranges(5000) == ([(0, 5000)], [])
    with pytest.raises(ValueError, match="data.split = 'middle' is not allowed"):
        splits.plan(100, 0.1, "middle")


def test_blocks_batches_are_windows_of_the_validation_blocks_joined(languages):
    _, corpus, tok = languages
    ds = build_dataset(corpus, tok, "next_token", l_max=32)
    data = np.asarray(tok.encode(corpus.text))
    joined = np.concatenate([data[a:b] for a, b in ds.ranges["val"]])
    assert len(ds.ranges["val"]) > 1 and np.array_equal(np.asarray(ds.stream("val")), joined)
    g = torch.Generator().manual_seed(0)
    starts, T = ds.window_starts("val", 8, g)
    b = ds.batch("val", 8, torch.Generator().manual_seed(0))
    for s, x, y in zip(starts, b["x"].numpy(), b["y"].numpy()):
        assert np.array_equal(x, joined[s:s + T]) and np.array_equal(y, joined[s + 1:s + T + 1])
    assert np.array_equal(ds.positions("val", np.arange(len(joined))),
                          np.concatenate([np.arange(a, b) for a, b in ds.ranges["val"]]))
    first = ds.ranges["val"][0][0]
    assert np.array_equal(ds.before("val", 32), data[first - 32:first])


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_each_blocks_split_holds_its_own_characters(languages, kind):
    _, corpus, _ = languages
    tok = train_tokenizer(kind, corpus.texts(), 400)
    ds = build_dataset(corpus, tok, "next_token", l_max=32)
    ids = np.asarray(tok.encode(corpus.text))
    val_chars = sum(len(tok.decode(ids[a:b].tolist())) for a, b in ds.ranges["val"])
    ratios = chars_per_token(corpus, tok, ds)
    assert ratios is not None
    n_train, n_val = ds.sizes()["train_tokens"], ds.sizes()["val_tokens"]
    assert ratios["val"] * n_val == pytest.approx(val_chars, rel=1e-3)
    assert ratios["train"] * n_train + ratios["val"] * n_val == pytest.approx(len(corpus.text), rel=1e-12)


def test_examples_are_shuffled_whatever_the_rule():
    corpus = load_corpus("reverse", "seq2seq")
    tok = train_tokenizer("char", corpus.texts())
    a, b = (build_dataset(corpus, tok, "seq2seq", l_max=32, split=rule) for rule in splits.SPLITS)
    assert a.examples("val") == b.examples("val") and a.split_gap() is None
    assert not splits.applies(DataConfig(corpus="reverse", task="seq2seq"))
    assert not splits.applies(DataConfig(corpus="modadd", tokenizer="word")) and splits.applies(DataConfig())


def test_the_tokenizer_lab_measures_on_the_blocks(languages):
    _, corpus, _ = languages
    _, tail = split_corpus(corpus, 0.1, "tail")
    train, blocks = split_corpus(corpus, 0.1, "blocks")
    assert cyrillic("".join(tail)) == 1.0
    assert 0.35 < cyrillic("".join(blocks)) < 0.6 and len(blocks) > 1
    assert "".join(train).count("\n") + "".join(blocks).count("\n") == corpus.text.count("\n")  # nothing lost


# ---- old runs, new runs, reference curves ------------------------------------------------------------------------
def test_a_run_records_its_rule_and_an_old_run_without_one_reads_as_the_tail(tmp_path, languages):
    folder, _, _ = languages
    cfg = tiny_config(folder, steps=2)
    assert cfg.data.split == "blocks"  # a new config's default
    events = list(training.train(cfg, runs_root=tmp_path))
    run = Run.open(next(e for e in events if e.kind == "started").run_dir)
    recorded = json.loads((run.path / CONFIG).read_text())
    assert recorded["data"]["split"] == "blocks" and run.config.data.split == "blocks"
    del recorded["data"]["split"]  # as fatstudio wrote it before data.split
    (run.path / CONFIG).write_text(json.dumps(recorded))
    assert Run.open(run.path).config.data.split == "tail"
    assert RunConfig.from_dict(recorded).data.split == "blocks"  # a config file (not a record) takes the default
    assert cfg.with_overrides(["data.split=tail"]).data.split == "tail"
    with pytest.raises(ValueError, match="data.split = 'last' is not allowed; choose one of 'blocks', 'tail'"):
        cfg.with_overrides(["data.split=last"]).validate()


def test_a_reference_curve_without_the_key_was_measured_on_the_tail():
    cfg = RunConfig(data=DataConfig(corpus="python-stdlib"))
    d = {"format": "fatstudio-reference-curve", "version": 1, "preset": "p", "name": "P", "seeds": [1],
         "config": cfg.to_dict(), "train": dict.fromkeys(("step", "mean", "min", "max"), [1]),
         "val": dict.fromkeys(("step", "mean", "min", "max"), [1])}
    del d["config"]["data"]["split"]
    ref = ReferenceCurve.from_dict(d)
    assert ref.config.data.split == "tail" and not ref.applies_to(cfg)
    assert ref.applies_to(cfg.with_overrides(["data.split=tail"]))
    examples = RunConfig(data=DataConfig(corpus="reverse", task="seq2seq"))
    assert same_settings(examples, examples.with_overrides(["data.split=tail"]))  # the rule says nothing there


def test_the_presets_runs_of_before_keep_their_reference_curves():
    """A preset run made before data.split (it validated on the tail) still finds the reference measured then;
    a run at the preset's settings of now finds the one measured on blocks."""
    for p in load_presets():
        if not splits.applies(p.config.data):
            assert find_reference(p.config) is not None, p.key  # examples: one reference, whatever the rule
            continue
        old, new = find_reference(p.config.with_overrides(["data.split=tail"])), find_reference(p.config)
        assert old is not None and new is not None and old.preset == new.preset == p.key
        assert (old.config.data.split, new.config.data.split) == ("tail", "blocks")


# ---- diagnostics ---------------------------------------------------------------------------------------------------
def test_a_run_on_the_tail_of_two_languages_is_warned_about_and_one_on_blocks_is_not(tmp_path, languages):
    folder, _, _ = languages
    found = {}
    for rule in ("tail", "blocks"):
        cfg = tiny_config(folder, steps=40).with_overrides([f"data.split={rule}"])
        events = list(training.train(cfg, runs_root=tmp_path / rule))
        started = next(e for e in events if e.kind == "started")
        said = [e.message for e in events if isinstance(e, training.Note) and "unlike the training text" in e.message]
        assert len(said) == (rule == "tail")  # the terminal's line (fatstudio train prints notes)
        run = Run.open(started.run_dir)
        assert run.meta["split_gap"]["rule"] == rule and started.split_gap == run.meta["split_gap"]
        diagnosis = Diagnosis(unigram=run.meta["unigram_entropy"], split=run.meta["split_gap"])
        found[rule] = diagnosis(run.metrics())
        summary = diagnosis.summary(found[rule])
        if rule == "blocks":  # with the noise floor it is read against
            gap = run.meta["split_gap"]
            assert (f"validation text like the training text (token frequencies {gap['tv']:.2f} apart; two samples "
                    f"of one text of these sizes: about {gap['chance']:.2f})") in summary
    warning = [f for f in found["tail"] if f.kind == "split_mismatch"]
    assert len(warning) == 1 and warning[0].warning and warning[0].step == 0
    assert "unlike the training text" in warning[0].advice and 'data.split = "tail"' in warning[0].advice
    assert not any(f.kind == "split_mismatch" for f in found["blocks"])
    # an old run's meta.json has no split_gap: nothing is claimed either way
    assert diagnose([], split=None) == [] and diagnose([], split={"tv": "x"}) == []
