"""The static decode step (`StaticKVCache`) gives today's eager probabilities, and `DecodeStep` switches from
eager to compiled only once compiling is done, staying eager (with a note, once) where it cannot compile.
The compiler is injected in most tests: the static step itself runs eagerly there. One test compiles for real
(ahead of time, in a child process: `decode_export`), for a tiny model."""
import subprocess
import sys
import threading
import types

import pytest
import torch
from test_inference import TOK, tiny

from fatstudio.core.device import compile_problem
from fatstudio.core.inference import decode_step
from fatstudio.core.inference.decode_step import DecodeStep, Unavailable
from fatstudio.core.inference.generation import generate
from fatstudio.core.model.attention import StaticKVCache


def eager_compiler(decoder):
    return dict.fromkeys(decoder.lengths, decoder.eager_step)


def ready(decoder):
    assert decoder.wait(10)
    return decoder


def run(model, decoder=None, prompt="ab", tokens=40, seed=3, slide=3):
    """40 tokens from a 2-token prompt with l_max 16: the window slides by 3 (and the cache is refilled) 10
    times (with the default slide, 2: 13 times)."""
    return list(generate(model, TOK, prompt, tokens=tokens, temperature=1.0, top_k=8, seed=seed, slide=slide,
                         decoder=decoder))


@pytest.mark.parametrize("arch,positions", [("gpt", "learned"), ("gpt", "sinusoidal"), ("gpt", "rope"),
                                            ("gpt", "none"), ("gpt", "alibi"), ("gopher", "rope"),
                                            ("gopher", "alibi")])
def test_the_static_step_gives_the_eager_tokens_and_probabilities(arch, positions):
    model = tiny(arch, positions=positions, H_kv=1 if positions == "alibi" else None)
    decoder = ready(DecodeStep(model, compiler=eager_compiler))
    assert decoder.ready and decoder.take_note() is None
    eager, static = run(model), run(model, decoder)
    assert [c.id for c in static] == [c.id for c in eager]
    assert max(abs(a.prob - b.prob) for a, b in zip(static, eager)) < 1e-5


def test_relative_positions_and_a_missing_compiler_stay_eager_and_say_why_once():
    model = tiny("gopher")  # relative positions
    decoder = ready(DecodeStep(model, compiler=eager_compiler))
    with decoder.session() as compiled:
        assert compiled is None
    assert "relative positions" in decoder.take_note() and decoder.take_note() is None

    def no_compiler(decoder):
        raise Unavailable("torch.compile needs a C++ compiler for the CPU, and none was found")
    decoder = ready(DecodeStep(tiny("gpt"), compiler=no_compiler))
    assert not decoder.ready and decoder.take_note().endswith("C++ compiler for the CPU, and none was found.")

    def broken(decoder):
        raise RuntimeError("inductor blew up\nline 2")
    decoder = ready(DecodeStep(tiny("gpt"), compiler=broken))
    assert decoder.take_note() == "Generation runs eagerly (not compiled): compiling failed (RuntimeError: inductor blew up)."
    assert [c.id for c in run(decoder.model, decoder)] == [c.id for c in run(decoder.model)]


def test_generation_is_eager_while_compiling_then_compiled_and_one_generation_at_a_time():
    model = tiny("gpt", positions="rope")
    release, calls = threading.Event(), []

    def slow(decoder):
        release.wait(10)

        def counted(x):
            calls.append(x)
            return decoder.eager_step(x)
        return dict.fromkeys(decoder.lengths, counted)
    decoder = DecodeStep(model, compiler=slow)
    expected = [c.id for c in run(model)]
    assert [c.id for c in run(model, decoder)] == expected and not decoder.ready  # compiling: eager
    release.set()
    ready(decoder)
    n_warmup = len(calls)
    assert [c.id for c in run(model, decoder)] == expected
    assert len(calls) - n_warmup == 30  # 40 tokens: 10 prefills (at the start, then every 3 once full)
    first = generate(model, TOK, "ab", tokens=5, seed=1, decoder=decoder)
    next(first)  # holds the static cache
    with decoder.session() as compiled:
        assert compiled is None  # a second generation meanwhile runs eagerly
    first.close()
    with decoder.session() as compiled:
        assert compiled is not None


def test_the_cpu_compiles_ahead_of_time_and_cuda_with_cuda_graphs_and_each_says_when_it_cannot(monkeypatch):
    asked = []
    monkeypatch.setattr(decode_step, "compile_problem", lambda dev: None)
    monkeypatch.setattr(decode_step, "cpp_compiler_problem", lambda: None)
    monkeypatch.setattr(decode_step, "cached_steps", lambda *parts: None)
    monkeypatch.setattr(decode_step, "aot_compile", lambda *parts, cancel: asked.append("aot") or {})
    monkeypatch.setattr(torch, "compile", lambda step, **kw: asked.append(kw) or step)
    cache = StaticKVCache(torch.device("cpu"))
    tiny("gpt")(torch.zeros((1, 1), dtype=torch.long), cache=cache)
    on = lambda device: types.SimpleNamespace(device=torch.device(device), cache=cache, lengths=[1, 13], cancelling=None,
                                              own_step=lambda: eager_compiler, parts=lambda: (None, cache, [1, 13]))
    assert decode_step.default_compiler(on("cpu")) == {} and asked == ["aot"]
    assert sorted(decode_step.default_compiler(on("cuda"))) == [1, 13]
    assert asked[1:] == [{"fullgraph": True, "dynamic": False, "mode": "reduce-overhead"}] * 2
    with pytest.raises(Unavailable, match="not for mps"):
        decode_step.default_compiler(on("mps"))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(Unavailable, match="standalone bundle"):
        decode_step.default_compiler(on("cpu"))
    assert asked[0] == "aot" and len(asked) == 3  # the bundle did not try
    monkeypatch.setattr(decode_step, "cpp_compiler_problem", lambda: "no C++ compiler")  # the CPU's only check here
    with pytest.raises(Unavailable, match="no C"):
        decode_step.default_compiler(on("cpu"))


@pytest.mark.skipif(compile_problem(torch.device("cpu")) is not None, reason="no C++ compiler here")
def test_compiled_ahead_of_time_once_per_shape_it_gives_the_eager_tokens_of_any_weights(tmp_path, monkeypatch):
    """The real compiler: the packages are made by a child process into the cache folder, then a model of the
    same shape with other weights (a snapshot; and another dropout, which is off in the step) uses them without
    compiling again, on its own weights."""
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    model = tiny("gpt", positions="rope", L=1)
    decoder = DecodeStep(model)
    assert decoder.wait(300) and decoder.take_note() is None and decoder.ready
    assert sorted(p.name for p in tmp_path.glob("decode/*/*.pt2")) == ["step-1.pt2", "step-15.pt2"]
    eager, compiled = run(model, slide=None), run(model, decoder, slide=None)  # the refilled window: 15 tokens
    assert [c.id for c in compiled] == [c.id for c in eager]
    assert max(abs(a.prob - b.prob) for a, b in zip(compiled, eager)) < 1e-5

    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: pytest.fail("compiled again"))
    other = tiny("gpt", seed=1, positions="rope", L=1, dropout=0.1)
    decoder = DecodeStep(other)
    assert decoder.wait(60) and decoder.take_note() is None and decoder.ready
    eager, compiled = run(other, slide=None), run(other, decoder, slide=None)
    assert [c.id for c in compiled] == [c.id for c in eager] != [c.id for c in run(model, slide=None)]
    cached = DecodeStep(other)
    assert cached.load_cached() and [c.id for c in run(other, cached, slide=None)] == [c.id for c in eager]
    assert not DecodeStep(tiny("gpt", L=2)).load_cached()  # another shape: none there, and none compiled


def test_a_failed_child_compile_leaves_no_package_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    monkeypatch.setattr(decode_step, "compile_problem", lambda dev: None)
    class Failing:
        returncode = 1

        def __init__(self, *args, **kwargs):
            pass

        def communicate(self, timeout=None):
            return None, "Traceback …\nRuntimeError: inductor blew up in the child"

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass
    monkeypatch.setattr(subprocess, "Popen", Failing)
    decoder = ready(DecodeStep(tiny("gpt")))
    assert not decoder.ready
    assert decoder.take_note() == ("Generation runs eagerly (not compiled): compiling failed (RuntimeError: in a "
                                   "child process, RuntimeError: inductor blew up in the child).")
    assert list(tmp_path.glob("decode/*")) == []  # the child's folder is removed


def test_cancelling_a_child_compile_kills_it_keeps_nothing_and_leaves_the_step_to_compile_later(tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path))
    monkeypatch.setattr(decode_step, "cpp_compiler_problem", lambda: None)
    killed = threading.Event()

    class Compiling:  # a child that compiles until it is killed
        returncode = None

        def __init__(self, *args, **kwargs):
            pass

        def communicate(self, timeout=None):
            if killed.is_set():
                return None, ""
            decoder.cancel()  # the app closes while the child compiles
            raise subprocess.TimeoutExpired("python", timeout)

        def kill(self):
            killed.set()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass
    monkeypatch.setattr(subprocess, "Popen", Compiling)
    decoder = DecodeStep(tiny("gpt"))
    with decoder.session():
        pass  # a generation ran eagerly: the step is wanted
    decoder.compile()
    assert killed.is_set() and not decoder.ready and not decoder.done and decoder.take_note() is None
    assert decoder.wanted and not decoder.cancelling.is_set()  # the next generation compiles it again
    assert list(tmp_path.glob("decode/*")) == []  # the child's folder is removed
    decoder.compiler = eager_compiler
    assert ready(decoder).ready


def test_a_copy_of_a_loaded_model_with_another_model_gets_a_decode_step_of_its_own():
    """The knock-out table prompts a deep copy (dataclasses.replace with model=…): its steps run its model."""
    import dataclasses

    from fatstudio.core.inference.decode_step import decode_step_of
    from fatstudio.core.inference.loaded import LoadedModel

    loaded = LoadedModel(tiny("gpt"), TOK, None)
    first = decode_step_of(loaded)
    assert decode_step_of(loaded) is first and first.model is loaded.model
    other = dataclasses.replace(loaded, model=tiny("gpt", seed=1))
    assert decode_step_of(other) is not first and decode_step_of(other).model is other.model
