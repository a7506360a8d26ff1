"""The loss of every validation token: each scored once with at least l_max/2 tokens of context, their mean the
validation loss of the same windows, and a diff whose Δs sum to N × the difference of the means."""
import math

import numpy as np
import pytest
import torch
from interventions_helpers import tiny

from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.corpora import IGNORE
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.loaded import LoadedModel
from fatstudio.core.inspect.scoring import _window_starts
from fatstudio.core.inspect.token_loss import diff, token_losses, validation_stream
from fatstudio.core.training import task_loss


@pytest.fixture
def loaded(tmp_path):
    def make(seed=0, l_max=12):
        p = tmp_path / "c.txt"
        p.write_text("".join(f"line {i}: the fox {i * 7 % 13} jumps.\n" for i in range(60)), encoding="utf-8")
        tok = train_tokenizer("char", [p.read_text()])
        model = tiny("gpt", seed=seed, vocab_size=tok.vocab_size, l_max=l_max).float()
        cfg = RunConfig(model.config, DataConfig(corpus=str(p), val_fraction=0.1), TrainConfig())
        return LoadedModel(model, tok, cfg, label=f"seed {seed}")
    return make


def test_every_validation_token_once_and_the_mean_is_the_loss_of_the_windows(loaded):
    run = loaded()
    context, val = validation_stream(run)
    l_max = run.model.config.l_max
    result = token_losses(run, (context, val))
    assert result.n_tokens == len(val) > 100 and result.tokens == run.tokenizer.token_strings(val.tolist())
    # the same windows, counting each target once, through the training loss
    ids = torch.tensor([*context.tolist(), *val.tolist()])
    starts = _window_starts(len(ids), l_max)
    x = torch.stack([ids[s:s + l_max] for s in starts])
    y = torch.stack([ids[s + 1:s + l_max + 1] for s in starts])
    done = len(context) - 1  # targets 1 … done are context only (the train split's tail)
    for row, s in enumerate(starts):
        y[row, :max(0, done - s)] = IGNORE
        done = max(done, s + l_max)
    counted = y != IGNORE
    first = [int(r.nonzero()[0]) for r in counted if r.any()]  # each window's first counted target…
    assert min(first) + 1 >= math.ceil(l_max / 2)  # …is predicted from at least l_max/2 tokens
    assert int((y != IGNORE).sum()) == len(val)
    with torch.no_grad():
        loss, _, _ = task_loss(run.model, {"x": x, "y": y}, "next_token")
    assert abs(result.mean - float(loss)) <= 1e-5
    assert abs(result.mean - float(np.mean(result.loss))) <= 1e-9


def test_a_diff_s_deltas_sum_to_n_times_the_difference_of_the_means(loaded):
    a, b = token_losses(loaded(seed=0)), token_losses(loaded(seed=1, l_max=10))
    d = diff(a, b)
    assert abs(math.fsum(d.delta) - a.n_tokens * (a.mean - b.mean)) <= 1e-6
    assert max(map(abs, d.delta)) > 1e-3
    out = d.to_dict()
    assert out["delta_mean"] == pytest.approx(a.mean - b.mean) and out["against"]["loss"] == b.loss
    assert d.csv().splitlines()[0] == "position,token,loss,against_loss,delta_loss"
    other = token_losses(loaded(seed=1))
    other.ids = other.ids[1:]
    with pytest.raises(ValueError, match="different tokens"):
        diff(a, other)


def test_a_run_of_another_task_is_refused(loaded):
    run = loaded()
    run.config = run.config.with_overrides(["data.task=masked_lm"])
    with pytest.raises(ValueError, match="next-token runs.*masked_lm"):
        token_losses(run)
