"""A fine-tune that drops a setting (issue 34, kind 6): ``train CONFIG --init-from RUN`` takes RUN's model, tokenizer
and task. A setting of them that CONFIG (or ``--set``) gives another value is refused in one line naming it, even when
that value is the default (``model.L = 4``, ``data.tokenizer = "char"``); ``model.dropout`` applies; what comes from
RUN is said. The app's Fine-tune… follows the same rules with nothing given: its settings never refuse, and the run
says what it took."""
import dataclasses

import pytest
from cli_helpers import MODEL, TEXT, TRAIN, toml_table
from hypothesis import given, settings
from hypothesis import strategies as st

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.app.runs import fine_tune_config
from fatstudio.core.config import ModelConfig, RunConfig
from fatstudio.core.runs.folder import Run
from fatstudio.core.runs.init_from import init_config
from fatstudio.core.training import Note, train


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A char run: L = 1, l_max = 16, learned positions, next_token."""
    tmp = tmp_path_factory.mktemp("source")
    (tmp / "c.txt").write_text(TEXT, encoding="utf-8")
    cfg = tmp / "source.toml"
    cfg.write_text(toml_table("model", MODEL) + toml_table("data", {"corpus": (tmp / "c.txt").as_posix()})
                   + toml_table("train", {"steps": 10, **TRAIN}), encoding="utf-8")
    assert main(["train", str(cfg), "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp / "run"


def fine_tune(tmp_path, model=None, data=None, extra=()):
    """``train`` of a config giving ``model`` and ``data`` keys (with a corpus of the source's characters)
    ``--init-from`` the source, writing ``tmp_path/tuned``."""
    (tmp_path / "mine.txt").write_text("hello transformers, hello world.\n" * 80, encoding="utf-8")
    cfg = tmp_path / "fine.toml"
    cfg.write_text((toml_table("model", model) if model else "")
                   + toml_table("data", {"corpus": (tmp_path / "mine.txt").as_posix(), **(data or {})})
                   + toml_table("train", {"steps": 5, **TRAIN}), encoding="utf-8")
    return ["train", str(cfg), "--out", str(tmp_path / "tuned"), *extra]


@pytest.mark.parametrize("model,data,extra,says", [
    (None, {"tokenizer": "word"}, (), "data.tokenizer = 'word' (run's tokenizer is 'char')"),  # the example
    (None, None, ("--set", "data.tokenizer=bpe"), "data.tokenizer = 'bpe' (run's tokenizer is 'char')"),
    (None, {"vocab_size": 500}, (), "data.vocab_size = 500 (no tokenizer is trained: run's has N_V = "),
    ({"arch": "bert"}, {"task": "masked_lm"}, (), "model.arch = 'bert' (run has 'gpt'); data.task = 'masked_lm' "
                                                  "(run's weights are trained for 'next_token')"),
    ({"L": 4}, None, (), "model.L = 4 (run has 1)"),  # 4 is the default: it was dropped in silence
    ({"l_max": 64}, None, (), "model.l_max = 64 (run has 16)"),
    ({"positions": "rope"}, None, (), "model.positions = 'rope' (run has 'learned')"),
    ({"vocab_size": 65}, None, (), "model.vocab_size = 65 (run has "),
    ({"d_e": 32, "H": 4}, {"tokenizer": "word"}, (), "model.H = 4 (run has 2); model.d_e = 32 (run has 16); "
                                                      "data.tokenizer = 'word'"),
])
def test_a_setting_that_cannot_apply_is_refused_in_one_line_naming_it(source, tmp_path, capsys, model, data, extra,
                                                                      says):
    capsys.readouterr()
    assert main([*fine_tune(tmp_path, model, data, extra), "--init-from", str(source), "--quiet"]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fatstudio train: error: --init-from {source} starts from that run's "
                                               "model, tokenizer and task, which the config sets otherwise: "), err
    assert says in err[0], err[0]
    assert not (tmp_path / "tuned").exists()


def test_settings_the_source_has_or_that_apply_train_and_what_comes_from_it_is_said(source, tmp_path, capsys):
    capsys.readouterr()
    args = fine_tune(tmp_path, {"L": 1, "dropout": 0.1}, {"tokenizer": "char", "task": "next_token", "vocab_size": 1000})
    assert main([*args, "--init-from", str(source)]) == 0
    err = capsys.readouterr().err
    assert ("starting from the weights of run (step 10): its model (gpt, L = 1, H = 2, d_e = 16, l_max = 16), its "
            "tokenizer (char, N_V = ") in err and "the corpus and the training settings are the config's." in err
    tuned = Run.open(tmp_path / "tuned")
    assert tuned.config.model == Run.open(source).config.model.replace(dropout=0.1)  # dropout applies
    assert (tuned.path / "tokenizer.json").read_text() == (source / "tokenizer.json").read_text()


def test_the_python_api_refuses_a_setting_away_from_its_default_and_the_app_says_instead(source, tmp_path):
    settings = RunConfig.from_dict({"data": {"corpus": str(source.parent / "c.txt"), "tokenizer": "word"},
                                    "model": {"L": 3}, "train": {"steps": 3, **TRAIN}})
    with pytest.raises(ValueError, match=r"data.tokenizer = 'word' \(run's tokenizer is 'char'\)"):
        list(train(settings, run_dir=tmp_path / "api", init_from=source))
    assert not (tmp_path / "api").exists()
    config = fine_tune_config(Run.open(source), settings)  # the app: the settings are the Corpus panel's, not the run's
    assert config.data.tokenizer == "char" and config.model == Run.open(source).config.model.replace(dropout=0.0)
    events = list(train(config, run_dir=tmp_path / "app", init_from=source))
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any("its tokenizer (char, N_V = " in n for n in notes), notes
    assert events[-1].status == "finished" and Run.open(tmp_path / "app").config.data.tokenizer == "char"


def test_a_class_head_of_another_size_is_refused_before_anything_is_written(tmp_path):
    def labelled(name, labels):
        p = tmp_path / f"{name}.tsv"
        p.write_text("".join(f"text number {i}\t{labels[i % len(labels)]}\n" for i in range(60)), encoding="utf-8")
        return str(p)

    cfg = RunConfig.from_dict({"model": {"arch": "bert", **MODEL}, "data": {"corpus": labelled("two", "ab"),
                               "task": "classification"}, "train": {"steps": 3, **TRAIN}})
    assert list(train(cfg, run_dir=tmp_path / "source"))[-1].status == "finished"
    three = RunConfig.from_dict({"data": {"corpus": labelled("three", "abc")}, "train": {"steps": 3, **TRAIN}})
    with pytest.raises(ValueError, match=r"--init-from .*source: its class head has 2 classes, the corpus 3"):
        list(train(three, run_dir=tmp_path / "tuned", init_from=tmp_path / "source"))
    assert not (tmp_path / "tuned").exists()
    two = RunConfig.from_dict({"data": {"corpus": labelled("other", "ba")}, "train": {"steps": 3, **TRAIN}})
    assert list(train(two, run_dir=tmp_path / "tuned", init_from=tmp_path / "source"))[-1].status == "finished"


KEYS = [f"model.{f.name}" for f in dataclasses.fields(ModelConfig)] + ["data.tokenizer", "data.vocab_size", "data.task"]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.floats(0, 2), st.sampled_from(
    ["gpt", "bert", "char", "word", "bpe", "learned", "rope", "next_token", "masked_lm", "layer", "pre", "gelu"]))


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(KEYS), value=VALUES)
def test_fuzz_every_setting_init_from_takes_is_refused_by_name_unless_it_is_the_sources(source, key, value):
    """Whatever a config gives for any key that --init-from takes from the source: the source's own value passes,
    model.dropout applies, and any other value is refused naming the key, never replaced in silence."""
    run = Run.open(source)
    mine = run.config
    table, name = key.split(".")
    d = RunConfig().to_dict()
    d[table][name] = value
    config = RunConfig.from_dict(d)
    if table == "model":
        sources = (getattr(mine.model, name), getattr(mine.model.resolved(), name))
    else:
        sources = (getattr(mine.data, name), *((mine.model.vocab_size,) if name == "vocab_size" else ()))
    try:
        got, said = init_config(config, run, given={key})
    except ValueError as e:
        assert key != "model.dropout" and value not in sources, str(e)
        assert f"{key} = {value!r}" in str(e) and "\n" not in str(e), str(e)
        return
    assert key == "model.dropout" or value in sources  # nothing given is dropped
    assert got.model == mine.model.replace(dropout=config.model.dropout) and "its tokenizer (char" in said
    assert (got.data.tokenizer, got.data.vocab_size, got.data.task) == (mine.data.tokenizer, mine.data.vocab_size,
                                                                        mine.data.task)
