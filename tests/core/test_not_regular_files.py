"""Files that are not regular files (issue 26, item 3): devices, FIFOs, sockets and links to them, given as a
corpus, a tokenizer or any file of a run folder, are refused without being read (a FIFO opened for reading
would block; /dev/zero never ends), as is a file whose size is not known in advance (a /proc file says 0)."""
import os
import shutil

import pytest
from special_files import KINDS, WORDS, make
from training_helpers import tiny_config as config
from training_helpers import trained_run

from fatstudio.core import files
from fatstudio.core.data import corpora, streaming
from fatstudio.core.data.tokenization import Tokenizer
from fatstudio.core.inspect.probes import load_probe_file, probe_path
from fatstudio.core.runs.folder import Run, list_runs
from fatstudio.core.training import train

PROC = "/proc/self/status"  # a regular file whose st_size is 0, yet it has content
pytestmark = pytest.mark.usefixtures("no_hang")


@pytest.mark.parametrize("kind", KINDS)
def test_the_shared_reader_refuses_without_reading(tmp_path, kind):
    p = make(tmp_path / "x.txt", kind, tmp_path)
    with pytest.raises(files.NotAFile, match=f"x.txt.* is .*{WORDS[kind]}.*not a regular file"):
        files.read_bytes(p)


def test_a_size_that_is_not_known_in_advance_is_refused(tmp_path):
    assert os.stat(PROC).st_size == 0
    with pytest.raises(files.NotAFile, match="says it is empty but is not"):
        files.read_bytes(PROC)
    (tmp_path / "empty.txt").write_bytes(b"")
    assert files.read_bytes(tmp_path / "empty.txt") == b""


@pytest.mark.parametrize("kind", KINDS)
def test_a_corpus_that_is_not_a_file_is_refused(tmp_path, kind):
    p = make(tmp_path / "corpus.txt", kind, tmp_path)
    with pytest.raises(ValueError, match=f"corpus .*corpus.txt.*{WORDS[kind]}"):
        corpora.load_corpus(str(p))


def test_a_corpus_of_unknown_size_is_refused_in_memory_and_streamed(tmp_path, monkeypatch):
    link = tmp_path / "status.txt"
    link.symlink_to(PROC)
    with pytest.raises(ValueError, match="says it is empty but is not"):
        corpora.load_corpus(str(link))
    monkeypatch.setattr(streaming, "STREAM_BYTES", -1)  # every corpus streamed: st_size 0 is not trusted there
    with pytest.raises(ValueError, match="says it is empty but is not"):
        corpora.load_corpus(str(link))


def test_a_streamed_file_is_read_up_to_its_size_when_opened(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("abc\n" * 10)
    chunks = streaming._decoded(p, "utf-8", "strict")
    first = next(chunks)
    with open(p, "a") as f:  # it grows while read: what was there when opened is read
        f.write("more\n" * 10)
    assert first + "".join(chunks) == "abc\n" * 10


def test_a_folder_corpus_skips_what_is_not_a_file(tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n" * 50)
    make(tmp_path / "b.txt", "fifo", tmp_path)
    make(tmp_path / "c.txt", "device", tmp_path)
    assert corpora.load_corpus(str(tmp_path)).text == "hello world\n" * 50


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_tokenizer_file_that_is_not_a_file_is_refused(tmp_path, kind):
    with pytest.raises(ValueError, match=WORDS[kind]):
        Tokenizer.load(make(tmp_path / "tok.json", kind, tmp_path))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, steps=10)


@pytest.mark.parametrize("name", ["config.json", "meta.json", "tokenizer.json", "model.safetensors", "optimizer.pt",
                                  "metrics.jsonl", "samples.jsonl"])
@pytest.mark.parametrize("kind", ["fifo", "link to device"])
def test_a_run_file_that_is_not_a_file_is_refused_by_every_reader(trained, tmp_path, name, kind):
    run = tmp_path / "runs" / "run"
    shutil.copytree(trained, run)
    make(run / name, kind, tmp_path)
    match = f"run/{name}.* is .*{WORDS[kind]}"
    with pytest.raises(ValueError, match=match):
        Run.open(run).load_model()
    with pytest.raises(ValueError, match=match):
        list(train(config("unused.txt", steps=20), run_dir=run, resume=True))
    assert list_runs(run.parent) == []  # left out of the list, never read


@pytest.mark.parametrize("kind", ["fifo", "link to device"])
def test_a_probe_file_that_is_not_a_file_is_refused(trained, tmp_path, kind):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    p = make(probe_path(run, 10), kind, tmp_path)
    with pytest.raises(ValueError, match=WORDS[kind]):
        load_probe_file(p)
    with pytest.raises(ValueError, match=WORDS[kind]):
        Run.open(run).load_probe(10)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    from hf_checkpoints import exported

    return exported(tmp_path_factory.mktemp("hf"))


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                  "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json"])
@pytest.mark.parametrize("kind", ["fifo", "device", "link to device"])
def test_a_file_of_a_folder_to_import_that_is_not_a_file_is_refused(hf_folder, tmp_path, name, kind):
    from fatstudio.core.runs.import_hf import import_hf

    folder = tmp_path / "hf"
    shutil.copytree(hf_folder, folder)
    if name == "pytorch_model.bin":
        (folder / "model.safetensors").unlink()
    make(folder / name, kind, tmp_path)
    with pytest.raises(ValueError, match=f"hf/{name}.* is .*{WORDS[kind]}.*not a regular file"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()
