"""The static decode step (`StaticKVCache`) gives today's eager probabilities, and `DecodeStep` switches from
eager to compiled only once compiling is done, staying eager (with a note, once) where it cannot compile.
The compiler is injected: the static step itself runs eagerly here (a real torch.compile takes tens of seconds
on a CPU; bench/bench_generate_app.py compiles it and checks the tokens)."""
import threading

import pytest
import torch
from test_inference import TOK, tiny

from fatstudio.core.inspect.decode_step import DecodeStep, Unavailable
from fatstudio.core.inspect.inference import generate


def eager_compiler(step, device):
    return step


def ready(decoder):
    assert decoder.wait(10)
    return decoder


def run(model, decoder=None, prompt="ab", tokens=40, seed=3):
    """40 tokens from a 2-token prompt with l_max 16: the window slides (and the cache is refilled) twice."""
    return list(generate(model, TOK, prompt, tokens=tokens, temperature=1.0, top_k=8, seed=seed, slide=3,
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

    def no_compiler(step, device):
        raise Unavailable("torch.compile needs a C++ compiler for the CPU, and none was found")
    decoder = ready(DecodeStep(tiny("gpt"), compiler=no_compiler))
    assert not decoder.ready and decoder.take_note().endswith("C++ compiler for the CPU, and none was found.")

    def broken(step, device):
        raise RuntimeError("inductor blew up\nline 2")
    decoder = ready(DecodeStep(tiny("gpt"), compiler=broken))
    assert decoder.take_note() == "Generation runs eagerly (not compiled): compiling failed (RuntimeError: inductor blew up)."
    assert [c.id for c in run(decoder.model, decoder)] == [c.id for c in run(decoder.model)]


def test_generation_is_eager_while_compiling_then_compiled_and_one_generation_at_a_time():
    model = tiny("gpt", positions="rope")
    release, calls = threading.Event(), []

    def slow(step, device):
        release.wait(10)

        def counted(x):
            calls.append(x)
            return step(x)
        return counted
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


def test_torch_compile_uses_cuda_graphs_on_cuda_and_says_when_it_cannot_compile(monkeypatch):
    from fatstudio.core.inspect import decode_step

    kwargs = {}
    monkeypatch.setattr(decode_step, "compile_problem", lambda dev: None)
    monkeypatch.setattr(torch, "compile", lambda step, **kw: kwargs.setdefault(str(kw.pop("mode", None)), kw))
    decode_step.torch_compile(eager_compiler, torch.device("cuda"))
    decode_step.torch_compile(eager_compiler, torch.device("cpu"))
    assert kwargs == {"reduce-overhead": {"fullgraph": True, "dynamic": False},
                      "None": {"fullgraph": True, "dynamic": False, "options": {"cpp_wrapper": True}}}
    monkeypatch.setattr(decode_step, "compile_problem", lambda dev: "no C++ compiler")
    with pytest.raises(Unavailable, match="no C"):
        decode_step.torch_compile(eager_compiler, torch.device("cpu"))
