"""Config files of every shape (issue 26, item 1): TOML and JSON whose tables are values, arrays or arrays of
tables, a top level that is not an object, a BOM, duplicate keys, huge integers, inf and nan, booleans and
strings where numbers go. Each is refused as a ConfigError naming the file and the key, or accepted; and,
fuzzed over arbitrary values for every key, nothing else ever comes out (no traceback)."""
import dataclasses
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from special_files import WORDS, make

from fatstudio.cli import main
from fatstudio.core.config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig


def write(tmp_path, text: str, suffix: str = ".toml", name: str = "c"):
    p = tmp_path / f"{name}{suffix}"
    p.write_bytes(text.encode("utf-8"))
    return p


def refused(path, *words):
    with pytest.raises(ConfigError) as e:
        RunConfig.load(path)
    message = str(e.value)
    assert str(path) in message and "\n" not in message, message
    for w in words:
        assert w in message, message
    return message


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", ["holds an array", "not a JSON object"]),
    ("3", ["holds a number"]),
    ('"model"', ["holds a string"]),
    ("null", ["holds nothing (null)"]),
    ('{"model": 3}', ["model is a number", "must be a table"]),
    ('{"model": [{"L": 2}]}', ["model is an array", "must be a table"]),
    ('{"train": "fast"}', ["train is a string"]),
    ('{"model": {"L": 2, "L": 3}}', ["'L' appears twice"]),
    ('{"model": {"L": 2}, "model": {"H": 2}}', ["'model' appears twice"]),
    ('{"model": {"L": 100000000000000000000000}}', ["L = 100000000000000000000000", "2⁶³"]),
    ('{"model": {"d_e": ' + "9" * 5000 + "}}", ["thousands of digits"]),
    ('{"train": {"lr": NaN}}', ["train.lr = nan", "a number in (0, 10)"]),
    ('{"train": {"lr": Infinity}}', ["train.lr = inf"]),
    ('{"train": {"grad_clip": 1e999}}', ["train.grad_clip = inf"]),
    ('{"model": {"L": true}}', ["L = true", "whole number"]),
    ('{"train": {"lr": false}}', ["train.lr = false", "a number"]),
    ('{"data": {"val_fraction": true}}', ["data.val_fraction = true"]),
    ('{"train": {"lr": "3e-4"}}', ["train.lr = '3e-4'", "leave them out"]),
    ('{"model": {"L": "2"}}', ["L = '2' (written in quotes: leave them out)", "whole number"]),
    ('{"model": {"d_e": "abc"}}', ["d_e = 'abc' is not allowed", "whole number"]),  # no quotes to leave out
    ('{"train": {"lr": "fast"}}', ["train.lr = 'fast' is not allowed", "a number"]),
    ('{"train": {"compile": "true"}}', ["train.compile = 'true'", "true or false"]),
    ('{"model": {"arch": ["gpt"]}}', ["arch = ['gpt']", "choose one of"]),
    ('{"data": {"corpus": {"path": "x"}}}', ["data.corpus = {'path': 'x'}", "must be a string"]),
    ('{"train": {"seed": 18446744073709551616}}', ["train.seed"]),
    ("[" * 100_000, ["nested too deeply"]),
])
def test_json_of_every_shape_is_refused_naming_the_file_and_key(tmp_path, text, words):
    refused(write(tmp_path, text, ".json"), *words)


@pytest.mark.parametrize("text, words", [
    ("model = 3\n", ["model is a number", "must be a table"]),
    ("[[model]]\nL = 2\n[[model]]\nL = 3\n", ["model is an array"]),
    ("train = [1, 2]\n", ["train is an array"]),
    ("[model]\nL = 2\nL = 3\n", ["not valid TOML", "L = 3"]),
    ("[model]\nL = 2\n[model]\nH = 2\n", ["not valid TOML", "[model]"]),
    ("[model]\nL = 100000000000000000000000\n", ["L = 100000000000000000000000"]),
    ("[train]\nlr = nan\n", ["train.lr = nan"]),
    ("[train]\nlr = inf\n", ["train.lr = inf"]),
    ("[model]\nL = true\n", ["L = true"]),
    ("[model]\nH = 2.0\n", ["H = 2.0", "whole number"]),
    ('[train]\nlr = "0.001"\n', ["train.lr = '0.001'"]),
    ("[train]\nsteps = 2024-01-01\n", ["train.steps = datetime.date(2024, 1, 1)"]),
    ("[model]\nL = {a = 1}\n", ["L = {'a': 1}"]),
    ("[modle]\nL = 2\n", ["unknown config table(s): modle"]),
    ("\0", ["not valid TOML"]),
])
def test_toml_of_every_shape_is_refused_naming_the_file_and_key(tmp_path, text, words):
    refused(write(tmp_path, text), *words)


def test_a_bom_is_accepted_in_toml_and_json(tmp_path):
    toml = write(tmp_path, "\ufeff[model]\nL = 3\n[train]\nlr = 3e-4\n")
    js = write(tmp_path, '\ufeff{"model": {"L": 3}, "train": {"lr": 0.0003}}', ".json")
    for p in (toml, js):
        c = RunConfig.load(p)
        assert (c.model.L, c.train.lr) == (3, 3e-4)


def test_not_utf8_and_too_large_files_are_refused(tmp_path):
    (tmp_path / "latin.toml").write_bytes(b"[data]\ncorpus = \"caf\xe9\"\n")
    refused(tmp_path / "latin.toml", "not UTF-8")
    (tmp_path / "big.toml").write_bytes(b"#" * (2 << 20))
    refused(tmp_path / "big.toml", "bytes; a config file is at most")


@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "link to fifo", "folder"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_reading(tmp_path, no_hang, kind):
    target = tmp_path / "c.toml"
    if kind == "folder":
        target.mkdir()
    else:
        make(target, kind, tmp_path)
    refused(target, {**WORDS, "folder": "a folder"}[kind], "not a regular file")


def test_the_cli_says_it_in_a_line_and_exits_non_zero(tmp_path, capsys):
    for text, suffix in (('{"model": {"L": true}}', ".json"), ("[[train]]\nsteps = 1\n", ".toml"),
                         ("[1]", ".json")):
        p = write(tmp_path, text, suffix)
        assert main(["train", str(p)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"fatstudio train: error: {p}") and err.count("\n") <= 2, err
        assert "Traceback" not in err


# ---- fuzzing: arbitrary values for every key --------------------------------------------------------------
KEYS = [(table, f.name) for table, cls in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig))
        for f in dataclasses.fields(cls)]
SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62, max_value=2**80)
           | st.sampled_from([10**400, -(10**400), 2**63, -(2**63) - 1])
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(["gpt", "bert", "cpu", "char", "rope", "3e-4", "", "1", "true"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def toml_value(v) -> str | None:
    """``v`` as a TOML value (None where TOML has no way to write it: null)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float, str)):
        return json.dumps(v)
    items = [toml_value(x) for x in (v.values() if isinstance(v, dict) else v)]
    if any(x is None for x in items):
        return None
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {x}" for k, x in zip(v, items)) + "}"
    return "[" + ", ".join(items) + "]"


def loads_or_config_error(path) -> None:
    try:
        assert isinstance(RunConfig.load(path), RunConfig)
    except ConfigError as e:
        assert str(path) in str(e) and "\n" not in str(e)


FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(key=st.sampled_from(KEYS), value=VALUES, as_json=st.booleans())
def test_fuzz_any_value_for_any_key_loads_or_is_a_config_error(tmp_path, key, value, as_json):
    table, name = key
    if as_json:
        p = write(tmp_path, json.dumps({table: {name: value}}), ".json")
    else:
        v = toml_value(value)
        if v is None:
            return
        p = write(tmp_path, f"[{table}]\n{json.dumps(name)} = {v}\n")
    loads_or_config_error(p)


@FUZZ
@given(doc=VALUES)
def test_fuzz_any_json_document_loads_or_is_a_config_error(tmp_path, doc):
    loads_or_config_error(write(tmp_path, json.dumps(doc), ".json"))


@FUZZ
@given(tables=st.dictionaries(st.sampled_from(["model", "data", "train", "name", "x"]), VALUES, max_size=3))
def test_fuzz_any_tables_load_or_are_a_config_error(tmp_path, tables):
    loads_or_config_error(write(tmp_path, json.dumps(tables), ".json"))
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in tables.items() if toml_value(v) is not None]
    loads_or_config_error(write(tmp_path, "\n".join(lines) + "\n"))


@FUZZ
@given(key=st.sampled_from(KEYS), value=VALUES, meta_key=st.sampled_from(
    ["format_version", "created", "status", "step", "run_id", "tokenizer_sha256", "arch", "probe", "n_parameters"]),
    meta_value=VALUES)
def test_fuzz_a_run_folder_config_and_meta_open_or_are_one_value_error(tmp_path, key, value, meta_key, meta_value):
    """A run's config.json and meta.json are config files too: any value opens or is a ValueError naming the
    file; the runs list reads what opens without failing."""
    from fatstudio.core.runs.folder import Run, list_runs

    run = tmp_path / "runs" / "run"
    run.mkdir(parents=True, exist_ok=True)
    config = RunConfig().to_dict()
    config[key[0]][key[1]] = value
    (run / "config.json").write_text(json.dumps(config))
    (run / "meta.json").write_text(json.dumps({meta_key: meta_value}))
    try:
        opened = Run.open(run)
    except ValueError as e:
        message = str(e)
        assert "\n" not in message and any(w in message for w in ("run/config.json", "run/meta.json", str(run))), message
        return
    info = opened.info
    for reader in ("status", "step", "checkpoint_step", "unigram_entropy", "best_val_loss", "val_loss", "created",
                   "chars_per_token", "diverged"):
        getattr(info, reader)
    info.total_steps(10)
    assert [r.name for r in list_runs(run.parent)] == ["run"]
