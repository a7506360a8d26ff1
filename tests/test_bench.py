"""bench/bench_gpu.py --smoke runs end to end on the CPU, as in CI: without the nanoGPT checkout and without
the tinyshakespeare corpus, it measures fatstudio's side, says the peer is missing, and prints numbers.
(A check that the benchmark runs, not a timing.)"""
import importlib.util
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu.py"


@pytest.mark.slow
def test_bench_gpu_smoke_without_the_peer(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOGPT_DIR", str(tmp_path / "no-nanoGPT"))
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    bench_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gpu)

    assert bench_gpu.main(["--smoke", "--corpus", str(tmp_path / "no-corpus.txt")]) == 0

    out = capsys.readouterr().out
    assert "peer missing: nanoGPT not found" in out
    assert re.search(r"fatstudio\s+eager\s*:\s+[\d.]+ ms/iter,\s+[\d,]+ tokens/s", out), out
    assert re.search(r"fatstudio\s*:\s+[\d.]+ s, ended \(exit 0\)", out), out
    from fatstudio.core.runs.presets import load_presets
    presets = re.findall(r"^\s+(\S+)\s+cpu\s+([\d.]+) steps/s", out, re.MULTILINE)
    assert [k for k, _ in presets] == [p.key for p in load_presets()]
    assert all(float(v) > 0 for _, v in presets)
