"""``fatstudio --self-test``: offscreen, it trains, generates and draws attention through the window's panels,
prints a line for each with its numbers, exits 0, and leaves nothing behind; a failure prints what failed and
exits 1."""
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("PySide6")


def test_self_test_passes_and_says_what_it_did(tmp_path):
    state, runs, tmp = tmp_path / "state.ini", tmp_path / "runs", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "FATSTUDIO_STATE": str(state), "FATSTUDIO_RUNS": str(runs),
           "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "fatstudio", "--self-test"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["window", "corpus", "train", "generate", "attention", "passed"]
    text = out.stdout
    assert "icon 256x256" in text
    assert text.isascii()
    assert re.search(r"corpus +python-stdlib: [\d,]+ characters", text)  # the default preset's corpus
    assert re.search(r"train +30 steps of gpt .*loss \d+\.\d+ -> \d+\.\d+", text)
    assert re.search(r"generate +24 tokens after 'def '", text)
    assert re.search(r"attention 2 heads in 1 layer", text)
    assert re.search(r"passed in \d+\.\d s", text)
    assert all(re.search(r"\(\d+\.\d s\)$", line) for line in lines[:-1])  # each step timed
    # nothing left behind, nothing of the user's touched
    assert not runs.exists() and not state.exists()
    assert list(tmp.iterdir()) == []


def test_a_failure_says_what_failed_and_returns_1(qapp, monkeypatch, runs_root):
    from fatstudio.qt import self_test

    def broken(self):
        raise RuntimeError("no corpus today")

    monkeypatch.setattr(self_test._SelfTest, "load_corpus", broken)
    lines: list[str] = []
    assert self_test.run(out=lines.append) == 1
    assert lines[0].startswith("self-test: window")
    assert lines[1] == "self-test: FAILED while loading the default preset's corpus: RuntimeError('no corpus today')"
    assert not runs_root.exists()
