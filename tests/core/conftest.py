"""Fixtures the core's tests share."""
import signal

import pytest


@pytest.fixture
def text_file(tmp_path):
    """A small text corpus: one sentence, 200 times."""
    p = tmp_path / "corpus.txt"
    p.write_text("the quick brown fox jumps over the lazy dog.\n" * 200, encoding="utf-8")
    return p


@pytest.fixture
def no_hang():
    """Fail, rather than hang, if anything opens a FIFO for reading (it waits for a writer)."""
    def timeout(*_):
        raise TimeoutError("reading blocked")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
