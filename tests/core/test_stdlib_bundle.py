"""The "python-stdlib" corpus in a frozen bundle (packaging/fatstudio.spec): read from the copies the spec
collects into the bundle's STDLIB_BUNDLE_DIR, it is the same text as an unfrozen run reads."""
import shutil
import sys

import pytest

from fatstudio.core import data


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(data, "STDLIB_CHARS", 200_000)  # a handful of modules


def freeze(monkeypatch, meipass):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(meipass), raising=False)


def test_the_bundle_reads_the_same_files_in_the_same_order(small, tmp_path, monkeypatch):
    text, notes = data._stdlib_text()
    files = data.stdlib_corpus_files()
    assert 2 <= len(files) == int(notes[0].split()[0])
    assert files == sorted(files)
    bundled = tmp_path / data.STDLIB_BUNDLE_DIR
    bundled.mkdir()
    for f in files:  # what the spec does: datas += [(f, STDLIB_BUNDLE_DIR) for f in stdlib_corpus_files()]
        shutil.copy(f, bundled / f.name)

    freeze(monkeypatch, tmp_path)
    assert [f.name for f in data.stdlib_corpus_files()] == [f.name for f in files]
    frozen_text, frozen_notes = data._stdlib_text()
    assert frozen_text == text
    assert str(bundled) in frozen_notes[0]
    corpus = data.load_corpus("python-stdlib")
    assert corpus.text == text


def test_a_bundle_without_the_sources_says_so(tmp_path, monkeypatch):
    freeze(monkeypatch, tmp_path)
    with pytest.raises(ValueError, match="standard library sources were not found"):
        data.load_corpus("python-stdlib")
