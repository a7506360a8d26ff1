"""The cache folder's entries of both kinds, token files and compiled decode steps, bounded together by
FATSTUDIO_CACHE_MB, least recently used first (`fatstudio.core.cache`). Fake entries of known sizes: no real
compile."""
import os
import subprocess
import time

import pytest
import torch
from held_work import held_by_another_process, left_by_a_killed_process
from test_inference import tiny

from fatstudio.cli import main
from fatstudio.core import cache
from fatstudio.core.cache import DECODE, TOKENS, entries, prune
from fatstudio.core.data import streaming
from fatstudio.core.data.corpora import load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import decode_export
from fatstudio.core.model.attention import StaticKVCache

LENGTHS = [1, 15]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    monkeypatch.delenv("FATSTUDIO_CACHE_MB", raising=False)


def token_entry(key, size, used):
    folder = TOKENS.root() / key
    folder.mkdir(parents=True)
    (folder / "tokens.bin").write_bytes(b"\0" * (size - 2))
    (folder / "meta.json").write_text("{}")
    os.utime(folder / "meta.json", (used, used))
    return folder


def decode_entry(key, size, used, lengths=LENGTHS):
    folder = DECODE.root() / key
    folder.mkdir(parents=True)
    for T in lengths:
        decode_export.package_path(folder, T).write_bytes(b"x" * (size // len(lengths)))
    os.utime(folder, (used, used))
    return folder


def names(kind):
    return [e.folder.name for e in entries(kind)]


def test_the_least_recently_used_go_first_whatever_their_kind_never_the_one_in_use(monkeypatch):
    old_tokens, steps, new_tokens = token_entry("t1", 400, 100), decode_entry("d1", 400, 200), token_entry("t2", 400, 300)
    (TOKENS.root() / ".t3.work").mkdir()  # a build under way is not an entry
    assert [tuple(e) for e in entries(TOKENS)] == [(old_tokens, 400, 100), (new_tokens, 400, 300)]
    assert [tuple(e) for e in entries(DECODE)] == [(steps, 400, 200)]
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "0.0009")  # 900 bytes: room for two of them
    assert prune(keep=new_tokens) == [old_tokens]
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "0.0005")
    assert prune(keep=steps) == [new_tokens]  # the one in use stays, though it is the older
    assert names(TOKENS) == [] and names(DECODE) == ["d1"]
    assert prune(keep=steps, cap=0) == [] and prune(cap=0) == [steps]


def test_an_entry_removed_part_way_is_no_longer_listed(monkeypatch):
    steps, tokens = decode_entry("d1", 400, 100), token_entry("t1", 400, 200)

    def part_way(path, ignore_errors=False):  # a process killed after the first file, or a file held open
        min(path.iterdir()).unlink()

    monkeypatch.setattr(cache.shutil, "rmtree", part_way)
    assert prune(cap=0) == [steps, tokens]
    assert entries(DECODE) == entries(TOKENS) == []  # not a decode step without its packages
    assert not steps.exists() and not tokens.exists()  # the key is free for the next compile's rename


def test_the_cap_is_read_from_fatstudio_cache_mb(monkeypatch):
    assert cache.cache_cap() == cache.CACHE_MB * 10**6
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", " 1.5 ")
    assert cache.cache_cap() == 1_500_000
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="FATSTUDIO_CACHE_MB = 'lots' is not allowed; it must be a number of megabytes"):
        cache.cache_cap()


def test_work_folders_no_process_holds_are_removed_held_ones_and_entries_kept_whatever_their_age():
    """A work folder is held by the process making it: one that process left when it was killed goes at the next
    work folder made, at once; one a live process holds stays, however long it has worked. A folder of an earlier
    fatstudio's work (not a temporary) goes once untouched for STALE_S."""
    long_ago = time.time() - cache.STALE_S - 10
    kept = [token_entry("t1", 100, long_ago), decode_entry("d1", 100, long_ago)]
    abandoned = [left_by_a_killed_process(kind.root() / "dead") for kind in (TOKENS, DECODE)]
    legacy = [TOKENS.root() / "t0.partial-1-1", DECODE.root() / ".d0.x1y2"]  # as builds used to leave them
    fresh_legacy = TOKENS.root() / ".t9.z3"
    for folder in [*legacy, fresh_legacy]:
        folder.mkdir()
    for folder in legacy:
        os.utime(folder, (long_ago, long_ago))
    with held_by_another_process(TOKENS.root() / "alive") as alive, \
            held_by_another_process(DECODE.root() / "alive") as alive_too:
        for folder in (alive, alive_too):
            os.utime(folder / "part", (long_ago, long_ago))
        with cache.work_folder(DECODE, "d2") as work:
            assert work.parent == DECODE.root() and work.name.startswith(".d2.") and work.is_dir()
            assert not any(p.exists() for p in [*abandoned, *legacy])
            assert all(p.exists() for p in [*kept, alive, alive_too, fresh_legacy])
        assert not work.exists()  # not renamed into place: removed


def test_loading_a_compiled_step_marks_it_used(monkeypatch):
    model = tiny("gpt", L=1)
    folder = decode_export._folder(model, LENGTHS)
    monkeypatch.setattr(decode_export, "load_steps", lambda *args: {1: "step"})
    assert decode_export.cached_steps(model, StaticKVCache(torch.device("cpu")), LENGTHS) is None
    decode_entry(folder.name, 400, 100)
    other = token_entry("t1", 400, 200)
    assert decode_export.cached_steps(model, StaticKVCache(torch.device("cpu")), LENGTHS) == {1: "step"}
    assert names(DECODE) == [folder.name] and entries(DECODE)[0].used > time.time() - 60
    assert prune(cap=400) == [other]  # used now: the token file goes first


def test_a_compile_prunes_the_cache_keeping_what_it_made(monkeypatch):
    model = tiny("gpt", L=1)
    older = [decode_entry("d1", 400, 100), token_entry("t1", 400, 200)]
    stale = DECODE.root() / ".killed.x"
    stale.mkdir()
    os.utime(stale, (100, 100))

    class Child:  # writes the packages as the real child does, in its work folder
        returncode = 0

        def __init__(self, args, **kwargs):
            self.out = args[-1]

        def communicate(self, timeout=None):
            for T in LENGTHS:
                decode_export.package_path(decode_export.Path(self.out), T).write_bytes(b"x" * 300)
            return None, ""

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(subprocess, "Popen", Child)
    monkeypatch.setattr(decode_export, "load_steps", lambda *args: {1: "step"})
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "0.0005")  # less than the new one alone
    assert decode_export.aot_compile(model, StaticKVCache(torch.device("cpu")), LENGTHS) == {1: "step"}
    made = decode_export._folder(model, LENGTHS)
    assert names(DECODE) == [made.name] and names(TOKENS) == [] and not any(p.exists() for p in [*older, stale])


def test_a_token_file_made_prunes_the_compiled_steps_used_before(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(streaming, "STREAM_BYTES", 1000)
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("the quick brown fox jumps over the lazy dog\n" * 100)
    steps = decode_entry("d1", 3_000_000, 100)
    monkeypatch.setenv("FATSTUDIO_CACHE_MB", "2")  # the token file (~10 kB) and not the steps beside it
    corpus = load_corpus(str(corpus_file))
    tokens = corpus.source.tokens(train_tokenizer("char", corpus.texts()))
    assert names(TOKENS) == [tokens.folder.name] and not steps.exists()

    decode_entry("d2", 1000, time.time())
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert "1 token file(s)" in out and "1 compiled decode step(s)" in out
    assert "MB of at most 2 MB (FATSTUDIO_CACHE_MB; the least recently used go first)" in out
    assert main(["cache", "--clear"]) == 0
    assert "removed 1 token file(s)" in capsys.readouterr().out and names(TOKENS) == names(DECODE) == []
