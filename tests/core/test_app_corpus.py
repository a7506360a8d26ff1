"""The corpus in the application model (`core.app.corpus`): read as a job when the settings name it, what each
change of the settings asks of it, and its error in words."""
from __future__ import annotations

import time

from fatstudio.core.app.corpus import Reading
from fatstudio.core.app.settings import Change
from fatstudio.core.app.workspace import Workspace


def settle(ws: Workspace, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ws.jobs.idle:
        ws.jobs.wait(0.05)
        ws.mailbox.drain()
        assert time.monotonic() < deadline
    ws.mailbox.drain()


def test_the_corpus_named_is_read_and_its_tokenizer_sets_n_v():
    ws = Workspace()
    heard = []
    ws.corpus.changed.connect(lambda: heard.append(ws.corpus.loading))
    ws.corpus.use("copy")
    assert ws.corpus.loading and ws.prepared is None  # nothing to reuse while it reads
    settle(ws)
    c = ws.corpus
    assert not c.loading and c.error is None and c.preview.spec == "copy"
    assert ws.prepared is c.preview.prepared and ws.settings.model.vocab_size == c.preview.vocab_size
    assert "copy" in c.builtins and heard[0] is True and heard[-1] is False


def test_a_corpus_that_cannot_be_read_says_why_and_prepares_nothing(tmp_path):
    ws = Workspace()
    ws.corpus.use(str(tmp_path / "nowhere.txt"))
    settle(ws)
    assert ws.corpus.error and "nowhere.txt" in ws.corpus.error and ws.prepared is None and not ws.corpus.loading


def test_what_each_change_asks_of_the_corpus():
    ws = Workspace()
    ask = lambda **names: ws.corpus.reading_for(Change({k: frozenset(v) for k, v in names.items()}))
    assert ask(data={"corpus"}) is Reading.RELOAD and ask(data={"task"}) is Reading.RELOAD
    assert ask(data={"tokenizer"}) is Reading.RETOKENIZE
    ws.settings.update("data", tokenizer="bpe")
    assert ask(data={"vocab_size"}) is Reading.RETOKENIZE_LATER  # typed digit by digit
    assert ask(data={"val_fraction"}) is None and ask(model={"L"}) is None
    assert ask(train={"seed"}) is None  # no synthetic corpus read: nothing depends on the seed


def test_bpe_takes_at_least_its_bytes_and_a_task_follows_the_architecture():
    ws = Workspace()
    ws.settings.update("data", vocab_size=100)
    assert ws.corpus.tokenizer_resets("bpe") == {"vocab_size": 1000} and ws.corpus.tokenizer_resets("word") == {}
    ws.settings.update("data", task="next_token")
    ws.settings.update("model", arch="bert")
    assert ws.corpus.follow_arch() == ["masked_lm", "classification"] and ws.settings.data.task == "masked_lm"
