"""The prompt's typed events (`core.inspect.prompt_events`): their order and contents in each mode, a stop, and
an error after tokens were sampled. Tiny untrained models: the protocol, not the model."""
import threading

import pytest
import torch

from fatstudio import ModelConfig, RunConfig, build_model
from fatstudio.core.config import DataConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import generation, prompting
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.prompt_events import (
    Attention,
    ClassProbabilities,
    Finished,
    MaskPredictions,
    Tokens,
    generation_events,
    prompt_events,
)

CORPUS = ["the quick brown fox jumps over the lazy dog.\n"]


def loaded(arch, task, n_classes=0):
    tok = train_tokenizer("char", CORPUS)
    cfg = ModelConfig(arch=arch, vocab_size=tok.vocab_size, l_max=24, L=1, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32,
                      n_classes=n_classes)
    torch.manual_seed(0)
    return LoadedModel(build_model(cfg).eval(), tok, RunConfig(model=cfg, data=DataConfig(task=task)),
                       ["a", "b"] if n_classes else [])


def encoded(m, text):
    return prompting.encode_prompt(m.tokenizer, text, prompting.prompt_mode(m), l_max=m.model.config.l_max)


def test_generate_yields_the_sampled_tokens_then_attention_then_finished():
    m = loaded("gpt", "next_token")
    events = list(prompt_events(m, encoded(m, "the"), tokens=5, seed=1, alternatives=2))
    assert [type(e) for e in events] == [Tokens] * 5 + [Attention, Finished]
    choices = [c for e in events[:5] for c in e.choices]
    expected = list(generation.generate(m.model, m.tokenizer, "the", tokens=5, seed=1, alternatives=2))
    assert [c.id for c in choices] == [c.id for c in expected]
    assert events[-1] == Finished("finished")
    assert events[-2].maps.tokens[:3] == m.tokenizer.token_strings(m.tokenizer.encode("the"))


def test_a_stop_ends_after_the_token_being_sampled_and_batches_keep_every_token():
    m = loaded("gpt", "next_token")
    stop = threading.Event()
    stop.set()
    events = list(prompt_events(m, encoded(m, "the"), tokens=50, seed=1, stop=stop, attention=False))
    assert [type(e) for e in events] == [Tokens, Finished] and len(events[0].choices) == 1
    assert events[-1].status == "stopped"
    batched = list(prompt_events(m, encoded(m, "the"), tokens=6, seed=1, batch_s=60.0, attention=False))
    assert [len(e.choices) for e in batched if isinstance(e, Tokens)] == [1, 5]  # the first at once, then the rest


def test_tokens_sampled_before_an_error_come_before_it():
    m = loaded("gpt", "next_token")
    running = generation.generate(m.model, m.tokenizer, encoded(m, "the"), tokens=5, seed=1)

    class Broken:  # the generation fails at its third token
        def __init__(self):
            self.n = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.n += 1
            if self.n == 3:
                raise RuntimeError("boom")
            return next(running)

        close = running.close

    events = generation_events(Broken())
    assert [len(next(events).choices), len(next(events).choices)] == [1, 1]
    with pytest.raises(RuntimeError, match="boom"):
        next(events)


def test_fill_mask_and_classify_yield_their_results():
    m = loaded("bert", "masked_lm")
    events = list(prompt_events(m, encoded(m, "the [MASK]ox"), top=3))
    assert [type(e) for e in events] == [MaskPredictions, Attention, Finished]
    assert [len(p.candidates) for p in events[0].predictions] == [3] and events[0].predictions[0].position == 5
    c = loaded("bert", "classification", n_classes=2)
    events = list(prompt_events(c, encoded(c, "the fox"), attention=False))
    assert [type(e) for e in events] == [ClassProbabilities, Finished]
    assert sorted(name for name, _ in events[0].probabilities) == ["a", "b"]
    assert sum(p for _, p in events[0].probabilities) == pytest.approx(1.0)
