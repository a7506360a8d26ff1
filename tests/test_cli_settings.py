"""Settings at the edges (issue 34, kind 4): every option and environment variable is checked before any work
starts, and one outside its range is one line naming it and what it must be, exit 2, no traceback. Fuzzed
(Hypothesis) over arbitrary values, as the config keys are (tests/core/test_config_files.py)."""
import math
import os
import subprocess
import sys

import pytest
from cli_helpers import write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fatstudio.cli import _parser, main
from fatstudio.core import environment
from fatstudio.core.training.sweep import Plan, parse_vary

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VALUES = st.one_of(st.integers(min_value=-2**70, max_value=2**70).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(
                       ["inf", "-inf", "nan", "NaN", "Infinity", "1e309", "0", "-0", "1", "1.5", "0x10", "1_000", " 7 ",
                        "", "-", "--x", "1e3"]), st.text(max_size=30))


def one_line_naming(err: str, name: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in err, err


# ---- environment variables -------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "lots"])
def test_fatstudio_cache_mb_out_of_range_is_one_line_naming_it(value, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", value)
    assert main(["cache"]) == 2
    err = capsys.readouterr().err
    one_line_naming(err, f"FATSTUDIO_CACHE_MB = {value!r} is not allowed; it must be a number of megabytes ≥ 0")


def test_a_bad_variable_is_said_before_any_command_as_a_process_would_say_it(tmp_path):
    env = {**os.environ, "FATSTUDIO_CACHE_MB": "inf", "FATSTUDIO_CACHE": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "fatstudio", "cache"], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    one_line_naming(p.stderr, "fatstudio cache: error: FATSTUDIO_CACHE_MB = 'inf' is not allowed")


@pytest.mark.parametrize(("name", "value", "words"), [
    ("FATSTUDIO_RUNS", "{file}", "a folder for the runs"),
    ("FATSTUDIO_CACHE", "{file}/sub", "a folder for the cache"),
    ("FATSTUDIO_STATE", "{tmp}", "a file for the app's state"),
    ("FATSTUDIO_COMPILE_DECODE", "yes", "0 (never compile the decode step) or 1"),
    ("FATSTUDIO_IGNORE_MEMORY", "true", "0 (check that a model fits, the default) or 1"),
    ("FATSTUDIO_PARENT_PIPE", "x", "fatstudio gives its own child processes"),
    ("RANK", "-1", "a whole number ≥ 0 (torchrun sets it)"),
])
def test_every_variable_out_of_its_range_is_one_line_before_any_command(name, value, words, tmp_path, monkeypatch,
                                                                         capsys):
    (tmp_path / "f").write_text("a file")
    monkeypatch.setenv(name, value.format(file=tmp_path / "f", tmp=tmp_path))
    assert main(["generate", str(tmp_path / "no-run"), "--prompt", "x"]) == 2  # said before the run is looked for
    err = capsys.readouterr().err
    one_line_naming(err, f"fatstudio generate: error: {name} = ")
    assert words in err and "no-run" not in err


def test_rank_must_be_below_world_size(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    assert main(["cache"]) == 2
    one_line_naming(capsys.readouterr().err, "RANK = 2 is not allowed; it must be less than WORLD_SIZE (2)")


@FUZZ
@given(variable=st.sampled_from(environment.VARIABLES), value=VALUES)
def test_fuzz_any_value_of_any_variable_is_read_or_refused_in_a_line_naming_it(variable, value):
    env = {variable.name: value}
    try:
        environment.check(env)
    except ValueError as e:
        assert "\n" not in str(e) and str(e).startswith(f"{variable.name} = ") and "it must be" in str(e)
    else:
        got = variable.value(env)
        assert got == variable.default or value.strip()
        if variable is environment.CACHE_MB:
            assert math.isfinite(got) and got >= 0


# ---- options -----------------------------------------------------------------------------------------------
NUMBERS = {  # every option that is a number: the command line before it, the option
    "--tokens": ["generate", "r", "--prompt", "x"], "--temperature": ["generate", "r", "--prompt", "x"],
    "--top-k": ["generate", "r", "--prompt", "x"], "--top-p": ["generate", "r", "--prompt", "x"],
    "--seed": ["generate", "r", "--prompt", "x"],
    "attention --step": ["attention", "r", "--out", "a.json"], "ablate --step": ["ablate", "r", "--out", "a.json"],
    "patch --step": ["patch", "r", "--clean", "a", "--corrupt", "b", "--out", "p.json"],
    "--position": ["patch", "r", "--clean", "a", "--corrupt", "b", "--out", "p.json"],
    "lens --step": ["lens", "r", "--prompt", "a", "--out", "l.json"],
    "token-loss --step": ["token-loss", "r", "--out", "t.json"], "--against-step": ["token-loss", "r", "--out", "t.json"],
    "--seeds": ["sweep", "c.toml", "--vary", "train.lr=1e-3", "--out", "s.json"],
    "--budget-steps": ["sweep", "c.toml", "--vary", "train.lr=1e-3", "--seeds", "1", "--out", "s.json"],
    "--budget-seconds": ["sweep", "c.toml", "--vary", "train.lr=1e-3", "--seeds", "1", "--out", "s.json"],
}
CHOICES = {"--kind": ["ablate", "r", "--out", "a.json"], "--format": ["export", "r", "--out", "o"],
           "--dtype": ["import", "s", "--out", "o"]}
RANGES = {"--tokens": (0, 1_000_000), "--temperature": (0, math.inf), "--top-k": (0, 2**63 - 1), "--top-p": (0, 1),
          "--seed": (0, 2**63 - 1), "--position": (-(2**63 - 1), 2**63 - 1), "--seeds": (1, 2**63 - 1),
          "--budget-steps": (1, 2**63 - 1), "--budget-seconds": (0, math.inf)}


def parsed_or_one_line(args: list[str], flag: str, capsys):
    """The parsed arguments, or None after asserting the error is one line naming ``flag`` (exit 2)."""
    try:
        return _parser().parse_args(args)
    except SystemExit as e:
        assert e.code == 2
        one_line_naming(capsys.readouterr().err, flag)
        return None


@FUZZ
@given(option=st.sampled_from(sorted(NUMBERS)), value=VALUES)
def test_fuzz_any_value_of_any_number_option_is_in_its_range_or_one_line_naming_it(option, value, capsys):
    flag = option.split()[-1]
    args = parsed_or_one_line([*NUMBERS[option], f"{flag}={value}"], flag, capsys)
    if args is not None:
        got = getattr(args, flag.lstrip("-").replace("-", "_"))
        lo, hi = RANGES.get(flag, (0, 2**63 - 1))
        assert math.isfinite(got) and lo <= got <= hi and (got > 0 or flag not in ("--top-p", "--budget-seconds"))


@FUZZ
@given(option=st.sampled_from(sorted(CHOICES)), value=VALUES)
def test_fuzz_any_value_of_any_choice_option_is_one_of_them_or_one_line_naming_it(option, value, capsys):
    args = parsed_or_one_line([*CHOICES[option], f"{option}={value}"], option, capsys)
    if args is not None:
        assert getattr(args, option.lstrip("-")) == value


def test_an_option_out_of_range_says_what_it_must_be(capsys):
    assert parsed_or_one_line(["generate", "r", "--prompt", "x", "--temperature", "nan"], "--temperature", capsys) is None
    assert parsed_or_one_line(["generate", "r", "--prompt", "x", "--top-p", "0"], "--top-p", capsys) is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["generate", "r", "--prompt", "x", "--tokens", "-3"])
    assert capsys.readouterr().err == ("fatstudio generate: error: argument --tokens: '-3' is not allowed; it must be a "
                                       "whole number in [0, 1,000,000] (see fatstudio generate --help)\n")


# ---- the sweep: nothing trains before its settings, its table's file and its runs folder are checked -----------
@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path, 6, sample_tokens=0)


@pytest.mark.parametrize(("extra", "words"), [
    (["--budget-seconds", "inf", "--out", "{tmp}/s.json"], "argument --budget-seconds: 'inf' is not allowed; it must "
                                                            "be a number > 0"),
    (["--budget-seconds", "nan", "--out", "{tmp}/s.json"], "argument --budget-seconds: 'nan' is not allowed"),
    (["--out", "{tmp}/missing/s.json"], "--out {tmp}/missing/s.json: the folder {tmp}/missing does not exist; make it "
                                        "first, or write elsewhere."),
    (["--out", "{tmp}/c.txt/s.json"], "--out {tmp}/c.txt/s.json: {tmp}/c.txt is a file, not a folder."),
    (["--out", "{tmp}/s.json", "--runs-dir", "{tmp}/c.txt"], "--runs-dir {tmp}/c.txt cannot hold the runs: {tmp}/c.txt "
                                                              "is a file, not a folder."),
    (["--out", "{tmp}/s.json", "--vary", "model.L=1,0"], "the run of train.lr=0.001, model.L=0, seed 1337: L = 0 is not allowed"),
])
def test_a_sweep_refuses_bad_settings_before_any_run_trains(extra, words, config, tmp_path, capsys):
    args = ["sweep", str(config), "--vary", "train.lr=1e-3,2e-3", "--seeds", "1", "--runs-dir", str(tmp_path / "runs"),
            *(a.format(tmp=tmp_path) for a in extra)]
    code = None
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    assert code == 2
    one_line_naming(capsys.readouterr().err, words.format(tmp=tmp_path))
    assert not (tmp_path / "runs").exists() and not (tmp_path / "s.json").exists()


def test_a_plan_refuses_a_budget_that_is_not_a_finite_number_of_seconds(config):
    from fatstudio.core.config import RunConfig

    c = RunConfig.load(config)
    for seconds in (math.inf, math.nan, 0.0, -1.0):
        with pytest.raises(ValueError, match="--budget-seconds .*: give a \\(finite\\) number of seconds > 0"):
            Plan(c, [parse_vary(c, "train.lr=1e-3")], seeds=1, budget_seconds=seconds)


# ---- outputs: their folder is checked before the work ---------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["attention", "{run}", "--prompt", "hello", "--out", "{tmp}/missing/a.json"],
    ["ablate", "{run}", "--out", "{tmp}/missing/a.json"],
    ["token-loss", "{run}", "--out", "{tmp}/missing/t.json"],
])
def test_an_output_in_a_folder_that_does_not_exist_is_refused_before_the_run_is_read(command, tmp_path, capsys):
    args = [a.format(run=tmp_path / "no-run", tmp=tmp_path) for a in command]
    assert main(args) == 2
    err = capsys.readouterr().err
    one_line_naming(err, f"the folder {tmp_path / 'missing'} does not exist")
    assert "no-run" not in err.split("does not exist")[1]


def test_a_new_run_where_nothing_can_be_written_is_refused_before_the_corpus_is_read(config, tmp_path, monkeypatch,
                                                                                    capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: os.fspath(p) != str(ro) and real(p, mode, **kw))
    read = []
    from fatstudio.core.data import corpora
    monkeypatch.setattr(corpora, "load_corpus", lambda *a, **kw: read.append(a) or pytest.fail("read the corpus"))
    assert main(["train", str(config), "--out", str(ro / "run"), "--quiet"]) == 2
    one_line_naming(capsys.readouterr().err, f"cannot create the run folder {ro / 'run'}: permission denied ({ro}).")
    assert not read and not (ro / "run").exists()
