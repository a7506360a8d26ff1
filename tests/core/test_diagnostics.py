"""The "is this normal?" rules (`core.diagnostics`): each fires on a synthetic curve made to show its problem
and stays silent on healthy ones."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from fatstudio.core import diagnostics as d
from fatstudio.core.attention_maps import AttentionMaps


def healthy(n=1000, seed=0, start=4.2, end=1.6, noise=0.05, grad=0.6, evals=100):
    """A loss decaying from ``start`` to ``end`` with minibatch noise, gradients under the clip, and an
    evaluation every ``evals`` steps with both losses falling."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, n + 1):
        mean = end + (start - end) * math.exp(-s / 150)
        row = {"step": s, "train_loss": mean + noise * rng.standard_normal(), "lr": 1e-3,
               "grad_norm": grad * (1 + 0.2 * rng.random())}
        if s % evals == 0:
            row.update(eval_train_loss=mean, val_loss=mean + 0.05)
        rows.append(row)
    return rows


def kinds(findings):
    return [f.kind for f in findings]


def test_healthy_curves_raise_nothing():
    for seed in range(5):
        assert d.diagnose(healthy(seed=seed), grad_clip=1.0, unigram=3.3, warmup=100) == []
    assert d.diagnose([]) == []
    assert d.diagnose(healthy(n=5)) == []


def test_non_finite_loss_or_gradient():
    rows = healthy(n=50)
    rows[30]["train_loss"] = float("nan")
    found = d.diagnose(rows)
    assert kinds(found) == ["non_finite"] and found[0].step == 31
    assert found[0].line.startswith("step 31 · the loss became nan")
    rows = healthy(n=50)
    rows[40]["grad_norm"] = math.inf
    assert kinds(d.non_finite(rows)) == ["non_finite"]
    rows[40]["grad_norm"] = None  # loss scaling skipped the step: nothing wrong
    assert d.non_finite(rows) == []


def test_spike():
    rows = healthy(n=600)
    rows[400]["train_loss"] += 2.0
    rows[401]["train_loss"] += 1.5  # the same spike, counted once
    found = d.spikes(rows)
    assert kinds(found) == ["spike"] and found[0].step == 401
    small = healthy(n=600)
    small[400]["train_loss"] += 0.5  # far above 5 MADs of a smooth curve, but under the 1-nat floor
    assert d.spikes(small) == []
    noisy = healthy(n=600, noise=0.4)  # noisy minibatches: no spike
    assert d.spikes(noisy) == []


def test_overfitting():
    rows = healthy(n=1000)
    evals = [r for r in rows if "val_loss" in r]
    for k, r in enumerate(evals[5:]):  # from the 6th evaluation on, validation rises
        r["val_loss"] = 1.8 + 0.05 * (k + 1)
    found = d.overfitting(rows)
    assert kinds(found) == ["overfitting"] and found[0].step == 1000
    assert "dropout" in found[0].advice
    two = healthy(n=1000)
    evals = [r for r in two if "val_loss" in r]
    for k, r in enumerate(evals[7:9]):  # only two rises in a row
        r["val_loss"] += 0.1 * (k + 1)
    assert d.overfitting(two) == []


def test_unigram_plateau():
    rng = np.random.default_rng(0)
    rows = [{"step": s, "train_loss": 3.3 + 0.03 * rng.standard_normal(), "grad_norm": 0.5, "lr": 1e-3}
            for s in range(1, 400)]
    found = d.unigram_plateau(rows, 3.3, warmup=100)
    assert kinds(found) == ["unigram_plateau"] and found[0].step == 399
    assert d.unigram_plateau(rows, None) == []  # no entropy known: no rule
    assert d.unigram_plateau(rows, 2.5) == []  # somewhere else
    assert d.unigram_plateau(rows[:150], 3.3, warmup=100) == []  # within warm-up
    passing = healthy(n=400)  # passing through the unigram level on the way down is no plateau
    assert d.unigram_plateau(passing, 2.2) == []


def test_clipping_on_almost_every_step():
    rows = healthy(n=400, grad=2.0)
    found = d.clipping(rows, grad_clip=1.0)
    assert kinds(found) == ["clipping"] and found[0].step == 400
    assert d.clipping(rows, grad_clip=0.0) == []  # no clipping configured
    assert d.clipping(rows[:100], grad_clip=1.0) == []  # the start of training is left out
    some = healthy(n=400, grad=0.9)  # clipped on some steps only
    assert d.clipping(some, grad_clip=1.0) == []


def test_unigram_entropy():
    assert d.unigram_entropy(np.array([3, 3, 3])) == 0.0
    assert d.unigram_entropy(np.arange(8)) == pytest.approx(math.log(8))
    assert d.unigram_entropy(np.array([[0, 1], [1, 1]])) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    with pytest.raises(ValueError):
        d.unigram_entropy(np.array([], dtype=np.int64))


def _maps(A):
    return AttentionMaps(tokens=[str(i) for i in range(A.shape[-2])], context_tokens=None, maps={"self/0": A})


def _heads(T=8):
    """(T, T) causal maps of three heads: uniform over the past, all weight on the first token, and looking."""
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    first_token = np.zeros((T, T))
    first_token[:, 0] = 1.0
    looking = np.tril(np.random.default_rng(0).random((T, T)) ** 4)
    return uniform, first_token, looking / looking.sum(-1, keepdims=True)


def test_dead_and_uniform_heads():
    T = 8
    causal_uniform, first_token, looking = _heads(T)
    found = d.dead_heads(_maps(np.stack([causal_uniform, first_token, looking])), step=200)
    assert [(f.kind, f.advice.split()[1]) for f in found] == [("uniform_head", "1"), ("dead_head", "2")]  # from 1
    assert all(f.step == 200 for f in found)
    assert d.dead_heads(_maps(looking[None])) == []
    bidirectional = np.full((1, T, T), 1 / T)  # BERT-like: uniform over all keys
    assert kinds(d.dead_heads(_maps(bidirectional))) == ["uniform_head"]


def test_head_findings_of_a_runs_latest_probe_step(tmp_path):
    """Uniform heads are how heads start: listed only from step UNIFORM_AFTER on; a dead head always. A run
    folder's findings are those of its latest saved probe step."""
    from fatstudio.core.probes import save_probe

    uniform, dead, looking = _heads()
    early = d.head_findings(_maps(np.stack([uniform, dead])), step=d.UNIFORM_AFTER - 1)
    assert [(f.kind, f.step) for f in early] == [("dead_head", d.UNIFORM_AFTER - 1)]
    assert kinds(d.head_findings(_maps(np.stack([uniform, dead])), step=d.UNIFORM_AFTER)) == ["uniform_head",
                                                                                               "dead_head"]
    assert d.latest_head_findings(tmp_path) == []  # no probes saved
    save_probe(tmp_path, 100, _maps(np.stack([looking, dead])))
    save_probe(tmp_path, 200, _maps(np.stack([looking, looking])))
    assert d.latest_head_findings(tmp_path) == []  # the head died at step 100 and recovered
    save_probe(tmp_path, 300, _maps(np.stack([dead, looking])))
    (found,) = d.latest_head_findings(tmp_path)
    assert found.kind == "dead_head" and found.line.startswith("step 300 · head 1 of self/0 always attends to one key")


def test_fast_enough_for_the_gui():
    rows = healthy(n=10_000)
    t = time.perf_counter()
    d.diagnose(rows, grad_clip=1.0, unigram=3.3, warmup=100)
    assert time.perf_counter() - t < 0.5  # the GUI recomputes it at most twice a second


def test_a_growing_run_is_diagnosed_as_if_all_its_rows_were_read_each_time(monkeypatch):
    """`Diagnosis`, fed a run as the GUI gets it (windows of steps, an evaluation's numbers joining its row
    afterwards), finds at every call what every rule finds over all the rows, while the spike rule reads
    only the new rows and the window before them."""
    rows = healthy(n=3000, seed=3, evals=100)
    for i in (700, 1500, 1501, 2600):
        rows[i]["train_loss"] += 2.5  # spikes, one of them two steps long
    for r in rows[2000:2400]:
        r["grad_norm"] = 3.0  # clipped on every step
    for k, r in enumerate(rows[1899:2300:100]):
        r["val_loss"] = 2.0 + 0.05 * k  # validation loss rising while the training loss falls
    evals = {i: (r.pop("eval_train_loss"), r.pop("val_loss")) for i, r in enumerate(rows) if "val_loss" in r}
    read = []
    spikes = d.spikes
    monkeypatch.setattr(d, "spikes", lambda rs: read.append(len(rs)) or spikes(rs))
    grown: list[dict] = []
    seen = set()
    diagnosis = d.Diagnosis(grad_clip=1.0, unigram=1.7, warmup=100)
    for start in range(0, len(rows), 37):
        for i in range(start, min(start + 37, len(rows))):
            grown.append(rows[i])
            if i - 3 in evals:  # an evaluation arrives a few rows after its step's numbers
                rows[i - 3]["eval_train_loss"], rows[i - 3]["val_loss"] = evals[i - 3]
        expected = sorted([*d.non_finite(grown), *spikes(grown), *d.overfitting(grown),
                           *d.unigram_plateau(grown, 1.7, 100), *d.clipping(grown, 1.0, 100)], key=lambda f: f.step)
        assert diagnosis(grown[start:]) == expected, start  # given the new rows only
        seen.update(kinds(expected))
    assert {"spike", "clipping", "overfitting"} <= seen
    assert max(read) <= d.SPIKE_CONTEXT + 37
    assert len(diagnosis._recent) == d.KEEP_ROWS < len(rows)  # what it keeps is bounded
