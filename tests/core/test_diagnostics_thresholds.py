"""Each "is this normal?" rule (`core.inspect.diagnostics`) at its threshold: just past it the rule fires, just short
of it the rule is silent. The inputs are built from the module's constants, so what is pinned is each
rule's definition (which comparison, which window, strict or not), whatever the constants' values; the
findings are checked by kind and step, never by their wording."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.names import MapName
from fatstudio.core.training import diagnostics as d


def rows_of(losses, grads=None, first=1):
    grads = [0.5] * len(losses) if grads is None else grads
    return [{"step": first + i, "train_loss": float(v), "grad_norm": g, "lr": 1e-3}
            for i, (v, g) in enumerate(zip(losses, grads))]


def found(findings):
    return [(f.kind, f.step) for f in findings]


# ---- non-finite --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["train_loss", "grad_norm"])
def test_non_finite_at_the_first_bad_row_only(bad, where):
    rows = rows_of([2.0] * 30)
    rows[11][where] = bad
    rows[20]["train_loss"] = math.nan  # a later one is not another finding
    assert found(d.diagnose(rows)) == [("non_finite", 12)]
    rows[11][where] = 1e308  # large but finite
    assert found(d.non_finite(rows)) == [("non_finite", 21)]


# ---- spikes ------------------------------------------------------------------------------------------------
def _window(m, a):
    """SPIKE_WINDOW losses of median m and median absolute deviation a, shuffled: a quarter below, half at
    and a quarter above m, so the middle two sorted values are m, and of |loss - m| both a."""
    q = d.SPIKE_WINDOW // 4 + 1
    values = [m - a] * q + [m] * (d.SPIKE_WINDOW - 2 * q) + [m + a] * q
    return [values[i] for i in np.random.default_rng(0).permutation(len(values))]


@pytest.mark.parametrize("mad", [0.1, 0.2, 0.0])
def test_a_spike_is_above_the_median_by_more_than_k_robust_sigmas_or_the_floor(mad):
    m = 2.0
    history = _window(m, mad)
    assert np.median(history) == m and np.median(np.abs(np.array(history) - m)) == pytest.approx(mad)
    threshold = max(d.SPIKE_MADS * d.MAD_TO_SIGMA * mad, d.SPIKE_MIN_NATS)
    for excess, fires in ((1e-6, True), (0.0, False), (-1e-6, False)):
        rows = rows_of([*history, m + threshold + excess, m])
        assert found(d.spikes(rows)) == ([("spike", len(history) + 1)] if fires else []), (mad, excess)
        assert found(d.diagnose(rows)) == found(d.spikes(rows))


def test_a_spike_is_judged_against_exactly_the_previous_spike_window_losses():
    """Older losses at the high level: a window one longer or shorter would have median H and MAD 0."""
    low, high = 2.0, 2.4
    window = [low, *[high, low] * (d.SPIKE_WINDOW // 2 - 1), high]  # oldest low; half low, half high
    assert len(window) == d.SPIKE_WINDOW
    threshold = max(d.SPIKE_MADS * d.MAD_TO_SIGMA * (high - low) / 2, d.SPIKE_MIN_NATS)
    median = (low + high) / 2
    between = (high + d.SPIKE_MIN_NATS + median + threshold) / 2  # a spike for the wrong windows, not this one
    assert high + d.SPIKE_MIN_NATS < between < median + threshold
    older = [high] * 60
    assert d.spikes(rows_of([*older, *window, between, median])) == []
    assert found(d.spikes(rows_of([*older, *window, median + threshold + 1e-6, median]))) == [("spike", 111)]


def test_a_spike_needs_spike_min_history_earlier_losses():
    n = d.SPIKE_MIN_HISTORY
    flat = [2.0] * n
    assert found(d.spikes(rows_of([*flat, 9.0, 2.0]))) == [("spike", n + 1)]  # n earlier steps
    assert d.spikes(rows_of([*flat[1:], 9.0, 2.0, 2.0])) == []  # n - 1 earlier steps


def test_consecutive_spiking_steps_count_once_and_only_the_latest_are_kept():
    losses = [2.0] * 400
    spiking = list(range(60, 400, 40))
    for i in spiking:
        losses[i] = losses[i + 1] = 9.0  # two steps long: one finding, at the first
    assert len(spiking) > d.SPIKE_MAX_FINDINGS
    assert found(d.spikes(rows_of(losses))) == [("spike", i + 1) for i in spiking[-d.SPIKE_MAX_FINDINGS:]]


# ---- overfitting -------------------------------------------------------------------------------------------
def eval_rows(val, train):
    return [{"step": 100 * (i + 1), "train_loss": t, "val_loss": v, "eval_train_loss": t, "grad_norm": 0.5}
            for i, (v, t) in enumerate(zip(val, train))]


def test_overfitting_is_overfit_evals_rises_in_a_row_by_the_minimum_in_all():
    k, rise = d.OVERFIT_EVALS, d.OVERFIT_MIN_RISE
    train = [3.0 - 0.1 * i for i in range(k + 3)]

    def val(total):  # falling, then k even rises adding up to ``total``, then falling again
        return [2.0, 1.9, *[1.9 + total * (j + 1) / k for j in range(k)], 1.0]

    assert found(d.diagnose(eval_rows(val(rise), train))) == [("overfitting", 100 * (k + 2))]
    assert d.overfitting(eval_rows(val(rise * 0.99), train)) == []
    shorter = [2.0, 1.9, *[1.9 + 1.0 * (j + 1) for j in range(k - 1)], 1.0]  # k - 1 rises, however large
    assert d.overfitting(eval_rows(shorter, train[:k + 2])) == []
    flat_train = [3.0, 2.9, *[2.9] * k, 2.0]  # the training loss did not fall
    assert d.overfitting(eval_rows(val(1.0), flat_train)) == []
    longer = [2.0, 1.9, *[1.9 + 0.1 * (j + 1) for j in range(k + 2)]]  # a longer streak: one finding, at its end
    assert found(d.overfitting(eval_rows(longer, [3.0 - 0.1 * i for i in range(k + 4)]))) == [("overfitting",
                                                                                               100 * (k + 4))]


# ---- unigram plateau ---------------------------------------------------------------------------------------
def test_unigram_plateau_within_plateau_nats_flat_and_after_warmup():
    H, n, eps = 3.0, d.PLATEAU_STEPS, d.PLATEAU_NATS
    early = [5.0] * n  # steps 1…n, then the plateau at steps n+1…2n

    def plateau(level, half_gap=0.0):
        return rows_of([*early, *[level - half_gap / 2] * (n // 2), *[level + half_gap / 2] * (n // 2)])

    assert found(d.diagnose(plateau(H + eps * 0.99), unigram=H, warmup=n)) == [("unigram_plateau", 2 * n)]
    assert found(d.unigram_plateau(plateau(H - eps * 0.99), H, warmup=n)) == [("unigram_plateau", 2 * n)]
    assert d.unigram_plateau(plateau(H + eps * 1.01), H, warmup=n) == []
    assert found(d.unigram_plateau(plateau(H, eps * 0.99), H, warmup=n)) == [("unigram_plateau", 2 * n)]
    assert d.unigram_plateau(plateau(H, eps * 1.01), H, warmup=n) == []  # not flat
    assert d.unigram_plateau(plateau(H), H, warmup=n + 1) == []  # its first step within warm-up
    assert d.unigram_plateau(plateau(H)[n + 1:], H) == []  # fewer than PLATEAU_STEPS steps
    assert d.diagnose(plateau(H), unigram=None) == []


# ---- clipping ----------------------------------------------------------------------------------------------
def test_clipping_on_clip_fraction_of_the_last_clip_steps_after_both_starts():
    clip, n = 1.0, d.CLIP_STEPS
    need = math.ceil(d.CLIP_FRACTION * n)

    def run(clipped, total=2 * n, at=clip * 1.01):
        grads = [0.5] * (total - n) + [at] * clipped + [0.5] * (n - clipped)
        return rows_of([2.0] * total, grads)

    assert found(d.diagnose(run(need), grad_clip=clip)) == [("clipping", 2 * n)]
    assert d.clipping(run(need - 1), clip) == []
    assert d.clipping(run(n, at=clip), clip) == []  # a norm equal to grad_clip is not clipped
    assert d.clipping(run(n, total=2 * n - 1), clip) == []  # the window starts at step CLIP_STEPS: too early
    assert found(d.clipping(run(n), clip, warmup=n)) == [("clipping", 2 * n)]
    assert d.clipping(run(n), clip, warmup=n + 1) == []  # within warm-up
    assert d.clipping(run(n), 0.0) == []  # no clipping configured
    skipped = run(n)
    for r in skipped[-10:]:
        r["grad_norm"] = None  # steps loss scaling skipped have no norm: the window reaches further back
    assert d.clipping(skipped, clip) == []


# ---- dead and uniform heads ----------------------------------------------------------------------------------
def _solve(f, target, lo=0.0, hi=1.0):
    """x in [lo, hi] with f(x) = target, f monotonic (bisection)."""
    rising = f(hi) > f(lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _entropy(p):
    p = np.asarray(p, dtype=np.float64)
    return float(-(p[p > 0] * np.log(p[p > 0])).sum())


def _row(k: int, target: float) -> np.ndarray:
    """(k,): a mix of the uniform distribution and all weight on key 0, whose entropy is ``target`` nats."""
    def mix(lam):
        return (1 - lam) * np.full(k, 1 / k) + lam * np.eye(k)[0]

    return mix(_solve(lambda lam: _entropy(mix(lam)), target))


def _causal_head(nats: float = 0.0, fraction: float = 0.0, T: int = 8) -> np.ndarray:
    """A causal (T, T) map whose query i (i+1 visible keys) has entropy ``nats`` + ``fraction``·log(i+1)."""
    A = np.zeros((T, T))
    A[0, 0] = 1.0
    for i in range(1, T):
        A[i, :i + 1] = _row(i + 1, nats + fraction * math.log(i + 1))
    return A


def _maps(*heads):
    A = np.stack(heads)
    return AttentionMaps([str(i) for i in range(A.shape[-2])], None, {MapName("self", 0): A})


def test_a_dead_head_has_every_query_below_dead_entropy_nats():
    for factor, dead in ((0.99, True), (1.01, False)):
        A = _causal_head(nats=d.DEAD_ENTROPY_NATS * factor)
        assert found(d.dead_heads(_maps(A), step=7)) == ([("dead_head", 7)] if dead else []), factor
    A = _causal_head(nats=d.DEAD_ENTROPY_NATS * 0.99)
    A[5] = np.tril(np.ones(8))[5] / 6  # one query that looks around: not dead
    assert d.dead_heads(_maps(A)) == []


def test_a_uniform_head_has_every_query_at_uniform_fraction_of_log_its_visible_keys():
    for factor, uniform in ((1.001, True), (0.999, False)):
        A = _causal_head(fraction=d.UNIFORM_FRACTION * factor)
        assert found(d.dead_heads(_maps(A), step=3)) == ([("uniform_head", 3)] if uniform else []), factor
    T = 6  # bidirectional: every query sees all T keys
    for factor, uniform in ((1.001, True), (0.999, False)):
        A = np.tile(_row(T, d.UNIFORM_FRACTION * factor * math.log(T)), (T, 1))
        assert found(d.dead_heads(_maps(A), step=3)) == ([("uniform_head", 3)] if uniform else []), factor
        assert d.head_findings(_maps(A), d.UNIFORM_AFTER - 1) == []  # how heads start: not listed early
        assert found(d.head_findings(_maps(A), d.UNIFORM_AFTER)) == ([("uniform_head", d.UNIFORM_AFTER)]
                                                                     if uniform else [])
