"""The "python-stdlib" corpus is a fixed snapshot shipped in resources/corpora: the same text whatever Python
runs fatstudio, and the same from a checkout, an installed wheel and a frozen bundle (packaging/fatstudio.spec)."""
import ast
import hashlib
import shutil
import sys
import sysconfig
from fnmatch import fnmatch
from pathlib import Path

import pytest

from fatstudio.core.data import builtin
from fatstudio.core.data import corpora as data
from fatstudio.core.resources import resource_path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(*builtin.STDLIB_SNAPSHOT)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_corpus_is_the_recorded_snapshot_not_this_pythons_library(monkeypatch, tmp_path):
    """The text hashes to the recorded sha256 (the text the reference curves were measured on, CPython
    3.11.7's), also when this Python's own library is elsewhere or absent."""
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: {"stdlib": str(tmp_path)})  # an empty "stdlib"
    corpus = data.load_corpus("python-stdlib")
    assert sha256(corpus.text) == builtin.STDLIB_SHA256
    assert "CPython 3.11.7" in corpus.notes[0] and "this Python" not in data.BUILTINS["python-stdlib"]


def test_the_snapshot_is_small_and_licensed():
    path = resource_path(*builtin.STDLIB_SNAPSHOT)
    assert path.stat().st_size < 500_000  # compressed: well under 1 MB in the wheel
    notes = (path.parent / "README.md").read_text()
    assert "CPython 3.11.7" in notes and builtin.STDLIB_SHA256 in notes
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in (path.parent / "PSF-LICENSE.txt").read_text()


def test_the_wheel_and_the_bundle_carry_the_snapshot_and_its_license():
    line = next(x for x in (ROOT / "pyproject.toml").read_text().splitlines() if x.startswith('"fatstudio.resources" = ['))
    globs = ast.literal_eval(line.split("=", 1)[1].split("#")[0].strip())  # [tool.setuptools.package-data]
    for name in (SNAPSHOT, SNAPSHOT.parent / "PSF-LICENSE.txt"):
        assert any(fnmatch(name.as_posix(), g) for g in globs)
    spec = (ROOT / "packaging" / "fatstudio.spec").read_text()
    assert '"corpora/*"' in spec and "stdlib_corpus_files" not in spec  # no copies of this Python's modules


def test_a_frozen_bundle_reads_the_same_text_from_its_resources(tmp_path, monkeypatch):
    text = data.load_corpus("python-stdlib").text
    bundled = tmp_path / "resources"
    shutil.copytree(resource_path("presets"), bundled / "presets")  # what the spec's datas put in the bundle
    shutil.copytree(resource_path(*builtin.STDLIB_SNAPSHOT).parent, bundled / "corpora")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert resource_path(*builtin.STDLIB_SNAPSHOT) == bundled / SNAPSHOT
    assert data.load_corpus("python-stdlib").text == text


def test_a_missing_or_damaged_snapshot_says_so(tmp_path, monkeypatch):
    for content in (None, b"not gzip", resource_path(*builtin.STDLIB_SNAPSHOT).read_bytes()[:1000]):
        path = tmp_path / "python-stdlib.txt.gz"
        if content is not None:
            path.write_bytes(content)
        monkeypatch.setattr(builtin, "resource_path", lambda *parts, p=path: p)
        with pytest.raises(ValueError, match="python-stdlib corpus .* cannot be read .*reinstall fatstudio"):
            data.load_corpus("python-stdlib")
