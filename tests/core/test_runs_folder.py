"""Where runs go by default: $FATSTUDIO_RUNS, else runs/ in the platform's user data folder (platformdirs)."""
import sys
from pathlib import Path

import platformdirs
import pytest

from fatstudio.core.runs.folder import default_runs_root


def test_fatstudio_runs_overrides(monkeypatch, tmp_path):
    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path / "mine"))
    assert default_runs_root() == tmp_path / "mine"
    monkeypatch.setenv("FATSTUDIO_RUNS", "~/elsewhere")
    assert default_runs_root() == Path.home() / "elsewhere"


def test_the_user_data_folder_otherwise(monkeypatch):
    monkeypatch.setenv("FATSTUDIO_RUNS", "")  # empty: not set
    assert default_runs_root() == platformdirs.user_data_path("fatstudio", appauthor=False) / "runs"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG base directories are Linux's")
def test_xdg_data_home_on_linux(monkeypatch, tmp_path):
    monkeypatch.delenv("FATSTUDIO_RUNS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_runs_root() == tmp_path / "data" / "fatstudio" / "runs"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_runs_root() == tmp_path / "home" / ".local" / "share" / "fatstudio" / "runs"


def test_a_fine_tuned_run_is_named_after_what_it_was_fine_tuned_from():
    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs.folder import SOURCE_CHARS, run_name

    config = RunConfig.from_dict({"data": {"corpus": "/data/de-ru"}})
    when = 1_790_000_000.0
    plain = run_name(config, when=when)
    assert plain.endswith("-gpt-de-ru") and len(plain) == len("20260911-123456-gpt-de-ru")
    assert run_name(config, "20261126-223922-gpt-python-stdlib", when) == plain + "-finetuned-from-gpt-python-stdlib"
    assert run_name(config, "tiny-gpt2", when) == plain + "-finetuned-from-tiny-gpt2"  # an import's folder name
    twice = run_name(config, run_name(config, "tiny-gpt2", when), when)  # a fine-tuned run fine-tuned again
    assert twice == plain + "-finetuned-from-gpt-de-ru-finetuned-from-tiny-gpt2"
    assert len(run_name(config, "x" * 300, when)) == len(plain) + len("-finetuned-from-") + SOURCE_CHARS
