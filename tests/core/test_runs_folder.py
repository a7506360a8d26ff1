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
