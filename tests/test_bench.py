"""bench/bench_gpu.py --smoke runs end to end on the CPU, as in CI: without the nanoGPT checkout and without
the tinyshakespeare corpus, it measures fatstudio's side, says the peer is missing, and prints numbers.
(A check that the benchmark runs, not a timing.) And the pieces of its part (b) that need no nanoGPT: both
programs scored on the same validation windows, the time to the target judged on those, and the runner that
keeps each of nanoGPT's checkpoints (checked on a stand-in script)."""
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_gpu.py"
sys.path.insert(0, str(BENCH.parent))
import peers  # noqa: E402


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
    assert re.search(r"fatstudio\s*: whole process [\d.]+ s; not reached in 4 steps; best at step [24], [\d.]+ s: "
                     r"[\d.]+ on the same windows, own estimate [\d.]+ \(own estimate first ≤ 1.47: never\)", out), out
    from fatstudio.core.runs.presets import load_presets
    presets = re.findall(r"^\s+(\S+)\s+cpu\s+([\d.]+) steps/s", out, re.MULTILINE)
    assert [k for k, _ in presets] == [p.key for p in load_presets()]
    assert all(float(v) > 0 for _, v in presets)


TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7919 % 1000}.\n" for i in range(200))


def test_both_programs_are_scored_on_the_same_windows():
    """A stand-in for nanoGPT: fatstudio's model behind another vocabulary (a permutation of the characters' ids,
    as nanoGPT's meta.pkl numbers them) scores what fatstudio's side scores only when both read the same windows."""
    import torch
    import torch.nn.functional as F

    from fatstudio import ModelConfig, build_model
    from fatstudio.core.data.tokenization import train_tokenizer

    torch.manual_seed(0)
    tok = train_tokenizer("char", [TEXT])
    model = build_model(ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=16, L=1, H=2, d_e=16, d_mlp=32)).eval()
    chars = sorted(set(TEXT), reverse=True)
    stoi = {c: i for i, c in enumerate(chars)}
    to_fat = torch.tensor([tok.encode(c)[0] for c in chars])

    def nano(x, y):
        return None, F.cross_entropy(model(to_fat[x]).flatten(0, 1), to_fat[y].flatten())
    loaded = SimpleNamespace(model=model, tokenizer=tok)
    windows = peers.SameWindows.draw(TEXT, batches=3, B=4, T=16)
    assert windows.starts.shape == (3, 4) and int(windows.starts.max()) <= len(windows.val) - 17
    fat = windows.fatstudio(loaded)
    assert fat == pytest.approx(windows.nanogpt(nano, stoi), abs=1e-5)
    other = peers.SameWindows(windows.val, windows.starts + 1, 16)
    assert abs(other.nanogpt(nano, stoi) - fat) > 1e-4  # other windows, another loss: the check can fail


def test_time_to_target_is_judged_on_the_same_windows(capsys):
    """The first evaluation whose same-window loss is at or under the target counts, whatever the program's own
    estimate said; the later ones are not scored; its seconds are those of its evaluation line."""
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    bench_gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gpu)
    lines = ["step 0: train loss 4.0, val loss 4.0", "step 2: train loss 1.5, val loss 1.40", "iter 3: loss 1.4, time 5.0ms",
             "step 4: train loss 1.4, val loss 1.45", "step 6: train loss 1.3, val loss 1.30"]
    proc = peers.Proc(9.0, 0, lines, [0.5, 2.0, 2.5, 4.0, 6.0])
    same = {2: 1.52, 4: 1.47, 6: 1.40}
    scored = []

    def scorer(step):
        return lambda: scored.append(step) or same[step]
    assert bench_gpu.time_to_target("fatstudio", proc, {s: scorer(s) for s in same}, 1.47) == 4.0
    assert scored == [2, 4]
    out = capsys.readouterr().out
    assert "reached at step 4, 4.0 s: 1.4700 on the same windows, own estimate 1.4500" in out
    assert "(own estimate first ≤ 1.47: step 2, 2.0 s)" in out
    assert bench_gpu.time_to_target("nanoGPT", proc, {s: scorer(s) for s in same}, 1.3) is None
    assert "not reached in 6 steps; best at step 6, 6.0 s: 1.4000 on the same windows" in capsys.readouterr().out


FAKE_TRAIN = """import os, torch
torch.manual_seed(1337)
print(f"random {torch.rand(1).item():.6f}")
os.makedirs("out", exist_ok=True)
for it in (2, 4):
    torch.save({"iter_num": it, "model": {}}, os.path.join("out", "ckpt.pt"))
"""


def first_random(seed: int) -> str:
    import torch

    torch.manual_seed(seed)
    return f"random {torch.rand(1).item():.6f}"


@pytest.mark.slow
def test_the_runner_keeps_each_checkpoint_and_shifts_the_seed(tmp_path):
    import torch

    (tmp_path / "train.py").write_text(FAKE_TRAIN)
    (tmp_path / "model.py").write_text("")
    with peers.NanoGPT(tmp_path) as nano:
        p = nano.run("train.py", [], seed=1338, keep_checkpoints=True).check("the stand-in")
        assert {s: torch.load(c)["iter_num"] for s, c in nano.checkpoints("out").items()} == {2: 2, 4: 4}
        assert not (nano.out_dir("out") / "ckpt.pt").exists()
        assert p.lines == [first_random(1338)]
        assert nano.run("train.py", []).check("the stand-in").lines == [first_random(1337)]  # nanoGPT unchanged
        assert list(nano.checkpoints("out")) == [2, 4] and (nano.out_dir("out") / "ckpt.pt").exists()
