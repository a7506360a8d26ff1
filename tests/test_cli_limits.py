"""Limits met before they hurt: a model that cannot fit is refused before anything is allocated; Ctrl-C or
SIGTERM while a run is prepared ends it at once, leaving no run folder, and says so."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import write_config

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core import memory
from fatstudio.core.config import ModelConfig, RunConfig

HUGE = ["--set", "model.d_e=65536", "--set", "model.d_mlp=262144", "--set", "model.L=512", "--set", "model.H=64"]


@pytest.fixture
def cfg(tmp_path) -> Path:
    return write_config(tmp_path, 4)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- memory before allocating ------------------------------------------------------------------------------
def test_a_model_that_cannot_fit_is_refused_before_anything_is_allocated(cfg, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    from fatstudio.core.data import corpora

    read: list[str] = []
    monkeypatch.setattr(corpora, "load_corpus", lambda *a, **k: read.append("corpus") or pytest.fail("read"))
    before = peak_rss_mb()
    code = main(["train", str(cfg), "--out", str(tmp_path / "run"), *HUGE])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR and "Traceback" not in err and not read  # refused before the corpus is read
    assert "needs about" in err and "optimizer state" in err and "activations at batch 4 and l_max 16" in err
    assert "RAM is free" in err and "--force-memory" in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "run").exists()
    assert peak_rss_mb() - before < 100  # nothing of the model's terabytes was allocated


@pytest.mark.parametrize("training", [True, False])
def test_the_estimate_is_the_model_panels_against_the_memory_free(monkeypatch, training):
    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    cfg = ModelConfig(d_e=1024, d_mlp=4096, L=8, H=8, l_max=512, vocab_size=50_000)
    need = memory.needs(cfg, 32, training=training)
    from fatstudio.core.costs import memory_estimate
    full = memory_estimate(cfg, 32)
    assert need["total"] == (full["total"] if training else full["weights"] + full["activations"])
    monkeypatch.setattr(memory, "ram_available", lambda: need["total"] + 1)
    memory.check_fits(cfg, 32, "cpu", training=training)  # fits: nothing said
    monkeypatch.setattr(memory, "ram_available", lambda: need["total"] - 1)
    with pytest.raises(memory.DoesNotFit, match=r"needs about .* but only .* of RAM is free"):
        memory.check_fits(cfg, 32, "cpu", training=training)
    monkeypatch.setenv(memory.IGNORE_ENV, "1")  # the override
    memory.check_fits(cfg, 32, "cpu", training=training)


def test_ram_available_reads_meminfo_and_a_cgroup_limit(monkeypatch, tmp_path):
    free = memory.ram_available()
    if free is None:
        pytest.skip("no /proc/meminfo here")
    assert 0 < free < 1 << 50
    files = {"/sys/fs/cgroup/memory.max": "1073741824\n", "/sys/fs/cgroup/memory.current": "73741824\n"}
    real = memory._read_int
    monkeypatch.setattr(memory, "_read_int", lambda p: int(files[p]) if p in files else real(p))
    assert memory.ram_available() == min(free, 1_000_000_000)


def test_force_memory_lets_a_model_past_the_check(cfg, tmp_path, monkeypatch):
    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    monkeypatch.setattr(memory, "ram_available", lambda: 1000)  # 1 kB free: every model is refused …
    assert main(["train", str(cfg), "--out", str(tmp_path / "a"), "--quiet"]) == EXIT_ERROR
    assert not (tmp_path / "a").exists()
    assert main(["train", str(cfg), "--out", str(tmp_path / "b"), "--quiet", "--force-memory"]) == 0  # … unless forced
    assert json.loads((tmp_path / "b" / "meta.json").read_text())["status"] == "finished"


def test_opening_a_run_whose_config_asks_for_an_impossible_model_is_refused(cfg, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(run), "--quiet"]) == 0
    c = json.loads((run / "config.json").read_text())
    c["model"].update(d_e=65536, d_mlp=262144, L=512, H=64)
    (run / "config.json").write_text(json.dumps(c))
    before = peak_rss_mb()
    for command in (["generate", str(run), "--prompt", "hello"], ["lens", str(run), "--prompt", "hello", "--out",
                    str(tmp_path / "l.json")], ["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")],
                    ["train", "--resume", str(run), "--set", "train.steps=8"]):
        capsys.readouterr()
        assert main(command) == EXIT_ERROR, command
        err = capsys.readouterr().err
        assert "needs about" in err and "Traceback" not in err, (command, err)
    assert peak_rss_mb() - before < 100
    assert not (tmp_path / "l.json").exists() and not (tmp_path / "hf").exists()


def test_the_estimate_refuses_before_preparing_or_building(monkeypatch):
    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    from fatstudio.core.training import estimate as est

    monkeypatch.setattr(est, "prepare", lambda *a, **k: pytest.fail("prepared a corpus for a model that cannot fit"))
    config = RunConfig().with_overrides(["model.d_e=65536", "model.d_mlp=262144", "model.L=512", "model.H=64",
                                         'train.device="cpu"'])
    with pytest.raises(memory.DoesNotFit, match="estimating this run"):
        est.estimate(config)


# ---- signals while a run is prepared -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    """About 24 MB of text: tokenizing it takes seconds, long enough to be interrupted."""
    path = tmp_path_factory.mktemp("big") / "big.txt"
    words = [f"w{i}x" for i in range(500)]
    line = " ".join(words) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(10_000):
            f.write(line[i % 97:] + line[: i % 97])
    return path


class Reader(threading.Thread):
    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.text = stream, ""

    def run(self):
        while chunk := os.read(self.stream.fileno(), 4096):
            self.text += chunk.decode("utf-8", "replace")


@pytest.mark.parametrize("sig,phase", [(signal.SIGTERM, "tokenizing the corpus"),
                                       (signal.SIGINT, "tokenizing the corpus"),
                                       (signal.SIGTERM, "training the char tokenizer")])
def test_a_signal_while_the_corpus_is_prepared_ends_at_once_and_leaves_no_run(big_corpus, cfg, tmp_path, sig, phase):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "fatstudio", "train", str(cfg), "--out", str(run), "--set",
                          f"data.corpus={json.dumps(str(big_corpus))}", "--set", "train.steps=100000"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reader = Reader(p.stderr)
    reader.start()
    deadline = time.monotonic() + 240
    while phase not in reader.text and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert phase in reader.text, reader.text[-2000:]
    p.send_signal(sig)
    sent = time.monotonic()
    p.wait(timeout=60)
    took = time.monotonic() - sent
    reader.join(5)
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig, reader.text[-2000:]
    assert f"interrupted ({name}) while {phase}; no run folder was left." in reader.text
    assert "Traceback" not in reader.text and not run.exists()
    assert took < 10, took  # within a second or two on an idle machine (generous: a loaded 2-core one)


def test_a_new_run_closed_before_its_first_step_leaves_no_folder(cfg, tmp_path):
    from fatstudio.core.training import Started, train

    for out, existed in ((tmp_path / "new", False), (tmp_path / "empty", True)):
        if existed:
            out.mkdir()
        events = train(RunConfig.load(cfg), run_dir=out)
        for ev in events:
            if isinstance(ev, Started):
                assert (out / "config.json").exists()
                break
        events.close()  # the consumer leaves (the app closing, a signal) before a step was taken
        assert out.exists() == existed and (not existed or not any(out.iterdir()))


# ---- corpora: memory, and too short to teach ------------------------------------------------------------------
def test_encoding_a_corpus_holds_little_more_than_its_tokens():
    import tracemalloc

    from fatstudio.core.data.tokenization import encode_corpus, train_tokenizer

    text = "the quick brown fox jumps over the lazy dog.\n" * 100_000  # 4.5 M characters
    tok = train_tokenizer("char", [text])
    tracemalloc.start()
    data = encode_corpus(tok, text)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(data) == len(text) and data.dtype.itemsize == 2
    assert peak < 1.25 * data.nbytes + (8 << 20), (peak, data.nbytes)  # before: the pieces and their copy, 2×


@pytest.mark.parametrize("text,l_max", [("hello world!", 64), ("abcdefgh\n" * 30, 64)])
def test_a_corpus_too_short_for_l_max_trains_with_a_note_saying_what_the_numbers_mean(text, l_max, tmp_path, capsys):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text(text, encoding="utf-8")
    code = main(["train", "--preset", "gpt-char", "--out", str(tmp_path / "run"), "--set",
                 f"data.corpus={json.dumps(str(corpus))}", "--set", f"model.l_max={l_max}", "--set", "train.steps=2",
                 "--set", "model.L=1", "--set", "model.d_e=16", "--set", "model.d_mlp=16", "--set", "model.H=2",
                 "--set", "train.eval_interval=2", "--set", "train.sample_tokens=0"])
    err = capsys.readouterr().err
    assert code == 0 and f"the corpus is too short for l_max = {l_max}" in err and "say little" in err, err


def test_a_corpus_long_enough_has_no_such_note(cfg, tmp_path, capsys):
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 0
    assert "too short" not in capsys.readouterr().err


def test_sigterm_during_an_export_ends_it_leaving_no_folder(cfg, tmp_path, capsys, monkeypatch):
    import safetensors.torch

    run, out = tmp_path / "run", tmp_path / "hf"
    assert main(["train", str(cfg), "--out", str(run), "--quiet"]) == 0

    def save_file(tensors, path, metadata=None):  # the weights half written when the signal comes
        Path(path).write_bytes(b"half")
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        capsys.readouterr()
        assert main(["export", str(run), "--format", "hf", "--out", str(out)]) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert "fatstudio export: interrupted (SIGTERM); nothing was written." in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]


def test_on_cuda_the_gpus_free_memory_is_what_counts(monkeypatch):
    import torch

    monkeypatch.delenv(memory.IGNORE_ENV, raising=False)
    asked: list = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: asked.append(i) or (2 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(memory, "ram_available", lambda: 1 << 40)  # plenty of RAM: the GPU decides
    cfg = ModelConfig(d_e=2048, d_mlp=8192, L=24, H=16, l_max=1024, vocab_size=50_000)  # ~1.3 B parameters
    assert memory.device_available("cuda:1") == 2 << 30 and asked == [1]
    with pytest.raises(memory.DoesNotFit, match="of GPU memory is free"):
        memory.check_fits(cfg, 8, torch.device("cuda", 0))
    monkeypatch.setattr(memory, "ram_available", lambda: 1 << 20)  # the weights are made in RAM first
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (1 << 45, 1 << 45))
    with pytest.raises(memory.DoesNotFit, match="of RAM is free"):
        memory.check_fits(cfg, 8, "cuda")
