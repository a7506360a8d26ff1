"""A run folder whose files are not what they say (issue 34, kind 1): a file far larger than such a file holds (a
sparse file: gigabytes that take no disk) is refused before a byte is read; meta.json's values are read through
checks (a dtype fatstudio never writes, class names that are not a list of names), and a tokenizer.json of any
shape is a tokenizer or a one-line refusal. Fuzzed (Hypothesis) where the values are many."""
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from training_helpers import trained_run

from fatstudio.core.data.tokenization import Tokenizer
from fatstudio.core.runs.folder import Run, list_runs
from fatstudio.core.training import train

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, steps=10)


def copy(trained, tmp_path):
    run = tmp_path / "runs" / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(trained, run)
    return run


@pytest.mark.parametrize("name,size", [("config.json", 2 << 30), ("meta.json", 2 << 30), ("tokenizer.json", 2 << 30),
                                       ("metrics.jsonl", 3 << 30), ("samples.jsonl", 3 << 30)])
def test_a_run_file_far_larger_than_such_a_file_is_refused_unread(trained, tmp_path, name, size):
    run = copy(trained, tmp_path)
    os.truncate(run / name, size)  # sparse: no disk, and no memory unless it is read
    says = f"run/{name} is {size / 2**30:.1f} GB, more than such a file can hold"
    with pytest.raises(ValueError, match=says):
        opened = Run.open(run)
        opened.load_model()
        opened.metrics()
        opened.samples()
    if name.endswith(".jsonl"):  # the run opens and lists; reading its rows is refused
        assert [r.name for r in list_runs(run.parent)] == ["run"]
        with pytest.raises(ValueError, match=says):
            list(train(Run.open(run).config.with_overrides(["train.steps=20"]), run_dir=run, resume=True))


@pytest.mark.parametrize("key,value,says", [
    ("dtype", "float16", "meta.json: dtype = 'float16' is not one fatstudio writes"),
    ("dtype", "load", "meta.json: dtype = 'load' is not one fatstudio writes"),
    ("class_names", "abc", "meta.json: class_names = 'abc' is not a list of names"),
    ("class_names", 3, "meta.json: class_names = 3 is not a list of names"),
])
def test_a_meta_value_that_loading_reads_is_checked_not_trusted(trained, tmp_path, key, value, says):
    run = copy(trained, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, key: value}))
    with pytest.raises(ValueError, match=says):
        Run.open(run).load_model()


META_KEYS = ["dtype", "class_names", "run_id", "checkpoint_step", "tokenizer_sha256", "n_parameters", "arch", "task",
             "format_version", "step", "probe", "status"]


@FUZZ
@given(key=st.sampled_from(META_KEYS), value=JSON_VALUES)
@example(key="format_version", value=3)  # a newer run: refused naming the run folder
def test_fuzz_any_meta_value_loads_the_model_or_is_one_line_naming_the_run(trained, tmp_path, key, value):
    run = copy(trained, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, key: value}))
    try:
        loaded = Run.open(run).load_model()
    except ValueError as e:
        assert "\n" not in str(e) and str(run) in str(e), str(e)  # the run, or its file
        return
    assert loaded.model.config.vocab_size == loaded.tokenizer.vocab_size


def _tokenizer_or_refusal(text: str) -> None:
    try:
        tok = Tokenizer.from_json(text)
    except ValueError as e:
        assert "\n" not in str(e), str(e)
        return
    assert {tok.pad_id, tok.mask_id, tok.bos_id, tok.eos_id} <= set(range(tok.vocab_size))


@FUZZ
@given(doc=JSON_VALUES)
def test_fuzz_a_tokenizer_json_of_any_shape_is_a_tokenizer_or_one_line(doc):
    _tokenizer_or_refusal(json.dumps(doc))


def _paths(d, here=()):
    """Every path to a value in the JSON document ``d`` (keys and list indices)."""
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else []
    for k, v in items:
        yield (*here, k)
        yield from _paths(v, (*here, k))


def _imported_tokenizer_json() -> dict:
    from fatstudio.core.data.tokenization import train_tokenizer

    backend = train_tokenizer("bpe", ["the quick brown fox"] * 5, 270).backend
    return json.loads(Tokenizer.imported(backend, {"pad": 0, "mask": 1, "bos": 2, "eos": 3}).to_json())


IMPORTED = _imported_tokenizer_json()
PATHS = [p for p in _paths(IMPORTED) if "vocab" not in p and "merges" not in p]  # the rest of the file, not its words


@FUZZ
@given(path=st.sampled_from(PATHS), value=JSON_VALUES)
@example(path=("post_processor", "special_tokens", "fatstudio:bos", "ids"), value=[])  # no id for a role
def test_fuzz_a_run_tokenizer_json_with_any_value_anywhere_is_a_tokenizer_or_one_line(path, value):
    """Any value put in place of any value of a real tokenizer.json (an imported one's, with its roles)."""
    d = json.loads(json.dumps(IMPORTED))
    here = d
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    _tokenizer_or_refusal(json.dumps(d))
