"""Fixtures the core's tests share."""
import pytest


@pytest.fixture
def text_file(tmp_path):
    """A small text corpus: one sentence, 200 times."""
    p = tmp_path / "corpus.txt"
    p.write_text("the quick brown fox jumps over the lazy dog.\n" * 200, encoding="utf-8")
    return p
