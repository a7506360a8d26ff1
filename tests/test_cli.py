"""The command line as a user runs it: train, generate, attention, resume after SIGKILL, clear errors."""
import gc
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from cli_helpers import train_tiny, write_config

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.inference import decode_step, generation
from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.names import MapName
from fatstudio.core.training.events import Finished


@pytest.fixture
def cfg_file(tmp_path):
    return lambda steps=20: write_config(tmp_path, steps)


def cli(*args, timeout=120):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fatstudio", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_train_generate_attention(cfg_file, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", str(cfg_file()), "--out", str(run), "--set", "model.H=4", "--quiet"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["H"] == 4 and cfg["train"]["steps"] == 20
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 20 and "val_loss" in rows[-1]
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "hello", "--tokens", "12", "--temperature", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("hello") and len(out.strip()) > len("hello")
    for ext in ("json", "npz", "png"):
        assert main(["attention", str(run), "--prompt", "hello world", "--out", str(tmp_path / f"a.{ext}")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())
    assert np.load(tmp_path / "a.npz")["self/0"].shape == (4, 11, 11)
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_labelled_png(tmp_path / "a.png", AttentionMaps.load(tmp_path / "a.npz"))


def assert_labelled_png(path, maps):
    """``path`` is the labelled picture of ``maps`` (the Qt layer's `attention_png`), not a bare grid."""
    from PySide6.QtGui import QImage

    from fatstudio.qt.widgets.attention_png import render_attention_maps

    image = QImage(str(path))
    _, layout = render_attention_maps(maps)
    assert not image.isNull() and (image.width(), image.height()) == (layout.width, layout.height)
    assert set(layout.titles) == {(n, h) for n in maps.maps for h in range(maps.n_heads(n))}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("trained"), steps=10)


class CountingOut(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, s):
        self.writes += 1
        return super().write(s)


def test_generate_writes_a_line_at_a_time_and_asks_for_no_alternatives(trained_run, monkeypatch):
    asked = {}
    generate = generation.generate
    monkeypatch.setattr(generation, "generate", lambda *a, **kw: asked.update(kw) or generate(*a, **kw))
    monkeypatch.setattr(sys, "stdout", out := CountingOut())
    assert main(["generate", str(trained_run), "--prompt", "hello", "--tokens", "60", "--seed", "1"]) == 0
    text = out.getvalue()
    assert text.startswith("hello") and text.endswith("\n") and len(text) > len("hello\n")
    assert out.writes <= text.count("\n") + 1  # not one write (and flush) per token
    assert asked["alternatives"] == 0  # the CLI shows no alternatives, so none are computed


def test_generate_uses_a_compiled_step_an_earlier_compile_left_and_never_compiles(trained_run, monkeypatch, capsys):
    args = ["generate", str(trained_run), "--prompt", "hello", "--tokens", "40", "--seed", "1"]
    assert main(args) == 0  # FATSTUDIO_COMPILE_DECODE=0 (the tests'): eager
    eager = capsys.readouterr().out
    monkeypatch.setenv("FATSTUDIO_COMPILE_DECODE", "1")
    monkeypatch.setattr(decode_step, "aot_compile", lambda *parts, cancel: pytest.fail("compiled"))
    monkeypatch.setattr(decode_step, "cached_steps", lambda *parts: None)  # nothing in the cache folder
    assert main(args) == 0 and capsys.readouterr().out == eager
    calls = []
    monkeypatch.setattr(decode_step, "is_cached", lambda model, lengths: True)
    monkeypatch.setattr(decode_step, "cached_steps", lambda model, cache, lengths: dict.fromkeys(
        lengths, lambda x: calls.append(x) or model(x, cache=cache)))
    assert main(args) == 0 and capsys.readouterr().out == eager and len(calls) == 39  # the prefill is eager


def test_generate_compile_compiles_the_step_once_then_uses_it_with_the_same_text(trained_run, monkeypatch, capsys):
    """--compile: the step from the cache folder, else compiled (even where the tests turn the background compile
    off), said on stderr; the text is the eager one's."""
    args = ["generate", str(trained_run), "--prompt", "hello", "--tokens", "40", "--seed", "1"]
    assert main(args) == 0
    eager = capsys.readouterr().out
    calls, compiles = [], []

    def steps(model, cache, lengths):
        return dict.fromkeys(lengths, lambda x: calls.append(x) or model(x, cache=cache))
    monkeypatch.setattr(decode_step, "cpp_compiler_problem", lambda: None)
    monkeypatch.setattr(decode_step, "cached_steps", lambda *parts: None)  # nothing in the cache folder
    monkeypatch.setattr(decode_step, "aot_compile", lambda *parts, cancel: compiles.append(1) or steps(*parts))
    assert main([*args, "--compile"]) == 0
    out, err = capsys.readouterr()
    assert out == eager and compiles == [1] and len(calls) == 39 + 2  # the prefill is eager; a first call per length
    assert "the compiled decode step is ready" in err
    monkeypatch.setattr(decode_step, "aot_compile", lambda *parts, cancel: pytest.fail("compiled again"))
    monkeypatch.setattr(decode_step, "cached_steps", steps)
    assert main([*args, "--compile"]) == 0 and capsys.readouterr().out == eager
    monkeypatch.setattr(decode_step, "cached_steps", lambda *parts: None)
    monkeypatch.setattr(decode_step, "cpp_compiler_problem", lambda: "no C++ compiler (g++) was found")
    assert main([*args, "--compile"]) == 0
    out, err = capsys.readouterr()
    assert out == eager and "Generation runs eagerly (not compiled): no C++ compiler (g++) was found." in err


def test_generate_compile_says_no_compile_is_starting_for_a_model_that_has_no_step(trained_run, monkeypatch, capsys):
    """A model whose step cannot be compiled (a gopher's relative positions): --compile says why generation stays
    eager, and not that it is compiling."""
    monkeypatch.setattr(decode_step.DecodeStep, "problem", lambda self: "relative positions slice their table")
    monkeypatch.setattr(decode_step, "aot_compile", lambda *parts, cancel: pytest.fail("compiled"))
    assert main(["generate", str(trained_run), "--prompt", "hello", "--tokens", "5", "--seed", "1", "--compile"]) == 0
    err = capsys.readouterr().err
    assert "compiling" not in err and "Generation runs eagerly (not compiled): relative positions" in err, err


def test_cache_lists_and_clears_the_compiled_decode_steps(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    for key in ("a1", "b2", ".c3.work"):  # two packages of model shapes, one compile under way
        (tmp_path / "decode" / key).mkdir(parents=True)
        (tmp_path / "decode" / key / "step-1.pt2").write_bytes(b"x" * 500_000)
    assert main(["cache"]) == 0
    assert "2 compiled decode step(s) (one per model shape), 1.0 MB" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "and 2 compiled decode step(s)" in capsys.readouterr().out
    assert [p.name for p in (tmp_path / "decode").iterdir()] == [".c3.work"]


def test_generate_imports_no_gui_and_not_torchs_compiler(trained_run):
    """Neither the GUI nor torch's compiler (~1.5 s to import; the model is built without initialising it,
    `build_empty`) is imported by a generation from the command line."""
    code = ("import sys\n"
            "import fatstudio\n"
            "print('TORCH', 'torch' in sys.modules)\n"
            "from fatstudio import ModelConfig, build_model\n"
            "from fatstudio.cli import main\n"
            f"main(['generate', {str(trained_run)!r}, '--prompt', 'hello', '--tokens', '5'])\n"
            "print('GUI', [m for m in ('PySide6', 'pyqtgraph', 'fatstudio.qt') if m in sys.modules])\n"
            "print('COMPILER', [m for m in ('torch._dynamo', 'torch.fx.experimental.symbolic_shapes') "
            "if m in sys.modules])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert "TORCH False" in r.stdout and "GUI []" in r.stdout, r.stdout + r.stderr
    assert "COMPILER []" in r.stdout, r.stdout + r.stderr


def test_the_process_imports_torch_with_the_collector_paused_and_freezes_what_is_left_at_exit(tmp_path, monkeypatch):
    """`fatstudio …` as a process: torch is imported with the collector paused and what it made is frozen, and
    at exit everything is (the interpreter's last collections would walk it all, ~0.5 s); commands that do not
    import torch, and the app, only freeze at exit, and a call from Python does neither."""
    calls = []
    for name in ("disable", "enable", "freeze"):
        monkeypatch.setattr(gc, name, lambda name=name: calls.append(name))
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["fatstudio", "generate", str(tmp_path), "--prompt", "x"])
    assert main() == EXIT_ERROR and calls == ["disable", "freeze", "enable", "freeze"]
    calls.clear()
    monkeypatch.setattr(sys, "argv", ["fatstudio", "cache"])
    assert main() == 0 and calls == ["freeze"]
    calls.clear()
    monkeypatch.setattr("fatstudio.qt.app.main", lambda argv: 0)  # the app, closed: ~1 s less to quit
    monkeypatch.setattr(sys, "argv", ["fatstudio"])
    assert main() == 0 and calls == ["freeze"]
    calls.clear()
    assert main(["generate", str(tmp_path), "--prompt", "x"]) == EXIT_ERROR and calls == []


@pytest.mark.parametrize("args,words", [
    (["train", "missing.toml"], "missing.toml"),
    (["train", "{cfg}", "--set", "model.H_kv=3"], "H_kv = 3"),
    (["train", "{cfg}", "--set", "model.layers=3"], "no key 'layers'"),
    (["train", "{cfg}", "--set", "train.lr=-1"], "train.lr"),
    (["train", "{cfg}", "--set", "data.corpus=/no/such/file.txt"], "/no/such/file.txt"),
    (["generate", "{tmp}", "--prompt", "x"], "not a fatstudio run"),
    (["train"], "give a config file"),
    (["train", "{cfg}", "--probe", "hi", "--probe-source", "x"], "encoder-decoder's (model.arch = edt)"),
    (["train", "{cfg}", "--quiet", "--probe", "\u0394"], "the probe input"),
])
def test_errors_are_one_or_two_lines_without_traceback(args, words, cfg_file, tmp_path, monkeypatch):
    """... and a refused command leaves no run folder behind (a probe the model cannot read made one)."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("FATSTUDIO_RUNS", str(runs))
    args = [a.replace("{cfg}", str(cfg_file())).replace("{tmp}", str(tmp_path)) for a in args]
    r = cli(*args)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and words in r.stderr
    assert 1 <= len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert not runs.exists() or not any(runs.iterdir()), sorted(p.name for p in runs.iterdir())


def test_a_run_is_found_by_the_name_the_runs_list_shows(trained_run, tmp_path, monkeypatch, capsys):
    """A bare name that is no folder here is the run of that name in the runs folder; else the message says where
    it was looked for, and a file is said to be one."""
    monkeypatch.setenv("FATSTUDIO_RUNS", str(trained_run.parent))
    monkeypatch.chdir(tmp_path)
    args = ["--prompt", "hello", "--tokens", "5", "--seed", "1"]
    assert main(["generate", trained_run.name, *args]) == 0
    by_name = capsys.readouterr().out
    assert main(["generate", str(trained_run), *args]) == 0 and capsys.readouterr().out == by_name
    assert main(["generate", "no-such-run", *args]) == EXIT_ERROR
    assert f"no-such-run is not a fatstudio run: no such folder here or in the runs folder {trained_run.parent}." \
        in capsys.readouterr().err
    assert main(["generate", str(trained_run / "metrics.jsonl"), *args]) == EXIT_ERROR
    assert "metrics.jsonl is not a fatstudio run: a file, not a run folder." in capsys.readouterr().err


def test_attention_on_a_text_longer_than_l_max_is_refused_in_a_line(trained_run, tmp_path, capsys):
    assert main(["attention", str(trained_run), "--prompt", "hello " * 10, "--out", str(tmp_path / "m.json")]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "more than this model's l_max = 16" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()


def test_sigkill_then_resume(cfg_file, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "fatstudio", "train", str(cfg_file(100000)), "--out", str(run), "--quiet"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while time.time() < deadline and not (run / "model.safetensors").exists():
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "running"  # killed: never marked finished
    ckpt = meta["checkpoint_step"]
    r = cli("train", "--resume", run, "--set", f"train.steps={ckpt + 15}", "--quiet")
    assert r.returncode == 0, r.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "finished" and meta["step"] == ckpt + 15
    steps = [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, ckpt + 16))  # rows past the checkpoint were dropped, then continued


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_after_the_step_checkpoints_and_says_so(sig, cfg_file, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "fatstudio", "train", str(cfg_file(100000)), "--out", str(run)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while time.time() < deadline and not (run / "model.safetensors").exists():
        time.sleep(0.05)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "Traceback" not in err, err
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "stopped" and meta["checkpoint_step"] == meta["step"] > 0  # nothing lost
    assert f"stopped at step {meta['step']}, checkpoint saved" in err.splitlines()  # the status said once
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert json.loads(rows[-1])["step"] == meta["step"]


def test_train_prints_the_precision_and_notes(tmp_path, monkeypatch, capsys):
    """The run line says what precision "auto" chose; a note (here: compile unavailable) reaches the terminal."""
    import torch

    from fatstudio import cli
    from fatstudio.core import device, training

    monkeypatch.setattr(training.trainer, "compile_problem", lambda dev: "torch.compile needs a C++ compiler")
    code = cli.main(["train", "--preset", "gpt-char", "--set", "train.steps=2", "--set", "train.eval_interval=2",
                     "--set", "train.sample_tokens=0", "--set", "model.L=1", "--set", "model.d_e=16",
                     "--set", "model.d_mlp=16", "--set", "model.H=2", "--set", "train.compile=true",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    here = device.resolve_precision("auto", torch.device("cpu"))  # bf16 on a CPU with AVX-512 BF16, else fp32
    assert code == 0 and f"in {here}" in err and "C++ compiler" in err


PROMPT_OF_PROBE = {  # the text `generate` is shown with: a line of the probe, its line with [MASK], its source
    "gpt": lambda probe: next(line.strip() for line in probe.text.splitlines() if line.strip()),
    "bert": lambda probe: next(line.strip() for line in probe.text.splitlines() if "[MASK]" in line),
    "edt": lambda probe: probe.source,
}


@pytest.mark.parametrize("arch,task,corpus", [("gpt", "next_token", None), ("bert", "masked_lm", None),
                                              ("edt", "seq2seq", "reverse")])
def test_train_ends_with_the_next_commands_and_they_work(arch, task, corpus, cfg_file, tmp_path, capsys):
    """After train: the generate command the run's task prompts with (its probe's text: a line, the line with
    [MASK], an encoder-decoder's source) and the attention of the last evaluation; both run as printed."""
    import shlex

    from fatstudio.core.runs.folder import Run

    run = tmp_path / "my run"  # a space: the commands quote the path
    sets = ["--set", f"model.arch={arch}", "--set", f"data.task={task}"]
    if corpus:
        sets += ["--set", f"data.corpus={corpus}"]
    assert main(["train", str(cfg_file()), "--out", str(run), "--quiet", *sets]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("next: fatstudio generate ") and out[-1].startswith("      fatstudio attention ")
    generate, attention = (shlex.split(line.removeprefix("next:")) for line in out[-2:])
    assert generate[:3] == ["fatstudio", "generate", str(run)] and attention[:3] == ["fatstudio", "attention", str(run)]
    assert generate[3:] == ["--prompt", PROMPT_OF_PROBE[arch](Run.open(run).probe_input())]
    assert attention[3:5] == ["--step", "20"] and attention[6] == "my run-step-20.png"
    assert main(generate[1:] + ["--tokens", "3"]) == 0
    assert main(attention[1:-1] + [str(tmp_path / attention[-1])]) == 0 and (tmp_path / attention[-1]).exists()


def test_train_with_a_probe_of_ones_own(cfg_file, tmp_path):
    from fatstudio.core.runs.folder import Run

    run = tmp_path / "run"
    assert main(["train", str(cfg_file()), "--out", str(run), "--probe", "hello hello", "--quiet"]) == 0
    maps = Run.open(run).load_probe(20)
    assert "".join(maps.tokens) == "hello hello" and maps.maps[MapName("self", 0)].shape[-1] == len("hello hello")
    assert main(["train", "--resume", str(run), "--set", "train.steps=30", "--probe", "x"]) == EXIT_ERROR


def test_attention_step_writes_the_saved_probe_maps(trained_run, tmp_path, capsys):
    from fatstudio.core.runs.folder import Run

    run = Run.open(trained_run)
    assert run.probe_steps() == [10]
    want = run.load_probe(10)
    for suffix in (".npz", ".json", ".png", ".csv"):
        out = tmp_path / f"maps{suffix}"
        assert main(["attention", str(trained_run), "--step", "10", "--out", str(out)]) == 0
        assert out.stat().st_size > 0
    assert_labelled_png(tmp_path / "maps.png", want)
    got = np.load(tmp_path / "maps.npz")
    assert got["tokens"].tolist() == want.tokens
    np.testing.assert_array_equal(got["self/0"], want.maps[MapName("self", 0)])
    printed = capsys.readouterr().out
    assert "step 10" in printed
    # what a person reads counts from 1, as the paper does: no map names such as self/0
    assert "(layer 1)" in printed and "layer 1 · head 2" in printed and "self/" not in printed
    assert main(["attention", str(trained_run), "--prompt", "hello", "--out", str(tmp_path / "p.json")]) == 0
    printed = capsys.readouterr().out
    assert "wrote 1 attention maps (layer 1) to" in printed and "self/" not in printed
    r = cli("attention", trained_run, "--step", "7", "--out", tmp_path / "x.png")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "step 7" in r.stderr and "saved steps: 10" in r.stderr
    assert not (tmp_path / "x.png").exists()


# ---- the progress bar ---------------------------------------------------------------------------------------
def _train_events():
    from types import SimpleNamespace as E

    def steps(step):
        return E(step=step, total_steps=4, train_loss=[2.0 / step], tokens_per_s=12345.0, eta_s=65.0)

    return E, steps


def _show(bar):
    E, steps = _train_events()
    bar.prepare(E(message="Tokenizing"))
    bar.start(E(run_dir="r", n_parameters=1234, device="cpu", precision="fp32", start_step=0, total_steps=4))
    bar.update(steps(1))
    bar.update(steps(2))
    bar.evaluation(E(step=2, eval_train_loss=1.25, val_loss=1.5, accuracy=None))
    bar.update(steps(4))
    bar.finish(Finished(step=4, status="finished", message="trained 4 steps"))


def test_progress_off_a_terminal_is_plain_lines(capsys):
    from fatstudio.cli_train import ProgressBar

    _show(ProgressBar())
    assert capsys.readouterr().err.splitlines() == [
        "Tokenizing…", "run r: 1,234 parameters on cpu in fp32, steps 0→4",
        "1/4 loss 2.0000 12.3k tok/s ETA 1m05s",  # then at most one progress line every 10 s
        "step 2: train loss 1.2500, val loss 1.5000", "finished: trained 4 steps"]
    _show(ProgressBar(enabled=False))  # --quiet
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_a_tqdm_bar(monkeypatch):
    from fatstudio.cli_train import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    bar = ProgressBar()
    _show(bar)
    out = term.getvalue()
    assert bar.bar is None  # closed at the end
    assert "\r" in out and "4/4" in out and "loss 0.5000 val 1.5000 12.3k tok/s ETA 1m05s" in out
    lines = [l.strip() for l in out.replace("\r", "\n").splitlines() if l.strip()]
    assert lines[:2] == ["Tokenizing…", "run r: 1,234 parameters on cpu in fp32, steps 0→4"]
    assert "step 2: train loss 1.2500, val loss 1.5000" in lines and lines[-1] == "finished: trained 4 steps"
