"""The "is this normal?" rules (`core.inspect.diagnostics`): each fires on a synthetic curve made to show its problem
and stays silent on healthy ones."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from fatstudio.core.inference.attention_maps import AttentionMaps
from fatstudio.core.names import MapName
from fatstudio.core.training import diagnostics as d


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


def test_clipping_on_almost_every_step_is_a_note():
    """A tight clip on purpose (the BERT presets clip on every step) is no sign of too high a learning rate
    by itself: the finding is a note, which says when to lower it."""
    rows = healthy(n=400, grad=2.0)
    found = d.clipping(rows, grad_clip=1.0)
    assert kinds(found) == ["clipping"] and found[0].step == 400
    assert not found[0].warning and "too high" not in found[0].advice
    assert "grad_clip = 1 on 100 of the last 100 steps" in found[0].advice
    assert "only if the loss also spikes or stalls" in found[0].advice
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
    return AttentionMaps(tokens=[str(i) for i in range(A.shape[-2])], context_tokens=None, maps={MapName("self", 0): A})


def _heads(T=8):
    """(T, T) causal maps of three heads: uniform over the past, all weight on the first token, and looking."""
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    first_token = np.zeros((T, T))
    first_token[:, 0] = 1.0
    looking = np.tril(np.random.default_rng(0).random((T, T)) ** 4)
    return uniform, first_token, looking / looking.sum(-1, keepdims=True)


def test_dead_and_uniform_heads():
    """One line per kind naming every such head, numbered from 1 as the app does; a head as sharp on a
    different key per query (the previous token) looks: only one that always picks the same key is dead."""
    T = 8
    causal_uniform, first_token, looking = _heads(T)
    previous = np.eye(T, k=-1)
    previous[0, 0] = 1.0
    found = d.dead_heads(_maps(np.stack([causal_uniform, first_token, looking, previous])), step=200)
    assert [(f.kind, f.warning, f.heads) for f in found] == [("dead_head", True, ((MapName("self", 0), 1),)),
                                                             ("uniform_head", False, ((MapName("self", 0), 0),))]
    assert found[0].line.startswith("step 200 · head 2 of layer 1 always attends to the same key")
    assert found[1].advice.startswith("head 1 of layer 1 attends uniformly")
    assert d.dead_heads(_maps(looking[None])) == []
    assert d.dead_heads(_maps(previous[None])) == []
    bidirectional = np.full((1, T, T), 1 / T)  # BERT-like: uniform over all keys
    assert kinds(d.dead_heads(_maps(bidirectional))) == ["uniform_head"]


def test_uniform_heads_are_one_line():
    """Heads 1 and 3 of layer 2 and head 4 of layer 3 uniform: one line that names them so, no map names."""
    T = 6
    uniform, _, looking = _heads(T)
    maps = {MapName("self", layer): np.stack([looking] * 4) for layer in range(3)}
    for layer, h in ((MapName("self", 1), 0), (MapName("self", 1), 2), (MapName("self", 2), 3)):
        maps[layer][h] = uniform
    (found,) = d.dead_heads(AttentionMaps(list("abcdef"), None, maps), step=900)
    assert found.advice.startswith("heads 1 and 3 of layer 2 and head 4 of layer 3 attend uniformly: ")
    assert "self/" not in found.advice
    edt = {MapName("enc", 0): np.full((4, T, T), 1 / T), MapName("dec", 0): np.stack([looking] * 4),
           MapName("cross", 1): np.stack([np.full((T, T), 1 / T), *[looking] * 3])}
    (found,) = d.dead_heads(AttentionMaps(list("abcdef"), list("abcdef"), edt))
    assert found.advice.startswith("all 4 heads of encoder layer 1 and head 1 of cross-attention layer 2 attend")


def test_head_findings_of_a_runs_latest_probe_step(tmp_path):
    """Uniform heads are how heads start: listed only from step UNIFORM_AFTER on; a dead head always. A run
    folder's findings are those of its latest saved probe step."""
    from fatstudio.core.inspect.probes import save_probe

    uniform, dead, looking = _heads()
    early = d.head_findings(_maps(np.stack([uniform, dead])), step=d.UNIFORM_AFTER - 1)
    assert [(f.kind, f.step) for f in early] == [("dead_head", d.UNIFORM_AFTER - 1)]
    assert kinds(d.head_findings(_maps(np.stack([uniform, dead])), step=d.UNIFORM_AFTER)) == ["dead_head",
                                                                                               "uniform_head"]
    assert d.latest_head_findings(tmp_path) is None  # no probes saved
    save_probe(tmp_path, 100, _maps(np.stack([looking, dead])))
    save_probe(tmp_path, 200, _maps(np.stack([looking, looking])))
    assert d.latest_head_findings(tmp_path) == (200, [])  # the head died at step 100 and recovered
    save_probe(tmp_path, 300, _maps(np.stack([dead, looking])))
    step, (found,) = d.latest_head_findings(tmp_path)
    assert step == 300 and found.kind == "dead_head"
    assert found.line.startswith("step 300 · head 1 of layer 1 always attends to the same key")


def test_a_solved_task_has_its_heads_left_alone():
    """Once the latest evaluation shows the task solved (accuracy ≥ 99%, or validation loss ≈ 0), how its
    heads attend is not listed, and the summary says why."""
    uniform, dead, _ = _heads()
    heads = (600, d.head_findings(_maps(np.stack([uniform, dead])), 600))
    rows = healthy(n=600)
    for r in rows:
        if "val_loss" in r:
            r["accuracy"] = 0.9
    diagnosis = d.Diagnosis(grad_clip=1.0)
    assert kinds(diagnosis(rows, heads)) == ["dead_head", "uniform_head"]
    rows[-1]["accuracy"] = 0.999  # the last evaluation: solved
    found = diagnosis([], heads)
    assert found == [] and "task solved (accuracy 99.9%), so heads are not judged" in diagnosis.summary(found)
    by_loss = d.Diagnosis()
    by_loss([*healthy(n=100), {"step": 100, "val_loss": 0.002, "eval_train_loss": 0.002}])
    assert by_loss.solved() is not None and by_loss([], heads) == []


def test_nothing_unusual_says_what_was_checked():
    rows = healthy(n=1000)
    diagnosis = d.Diagnosis(grad_clip=1.0, unigram=3.3, warmup=100)
    found = diagnosis(rows, (1000, []))
    assert found == []
    assert diagnosis.summary(found) == (
        f"Nothing unusual at step 1,000: loss finite and falling ({np.median([r['train_loss'] for r in rows[:20]]):.2f}"
        f" → {np.median([r['train_loss'] for r in rows[-20:]]):.2f}), no spikes, no overfitting over 10 evaluations, "
        "not stuck at the unigram entropy (3.30 nats), gradient clipped on 0 of the last 100 steps, no dead or "
        "uniform heads at step 1,000.")
    assert d.Diagnosis().summary([]) == ""  # nothing to say before the first step
    rows[500]["train_loss"] += 3.0
    spiked = d.Diagnosis()
    assert kinds(found := spiked(rows)) == ["spike"] and spiked.summary(found) == ""  # a warning: no all-clear
    clipped = d.Diagnosis(grad_clip=0.1)
    assert kinds(found := clipped(healthy(n=400))) == ["clipping"]  # a note: still nothing unusual
    assert clipped.summary(found).startswith("Nothing unusual at step 400")


def test_a_preset_that_expects_spikes_lists_those_that_come_back_as_notes():
    """A preset's [expected] spike (`presets.expected_findings`): a spike the loss comes back from is a note with
    the preset's reason, and the all-clear still comes; one it does not come back from within
    SPIKE_RECOVERY_STEPS is a warning, as it is without a preset; one too recent to tell is a note meanwhile."""
    why = "full-batch AdamW spikes now and then"
    rows = healthy(n=1000)
    rows[500]["train_loss"] += 3.0
    rows[501]["train_loss"] += 2.0
    plain = d.diagnose(rows)
    assert [f.warning for f in plain] == [True] and "lower the learning rate" in plain[0].advice
    diagnosis = d.Diagnosis(expected={"spike": why})
    found = diagnosis(rows)
    assert kinds(found) == ["spike"] and not found[0].warning and found[0].step == 501
    assert found[0].advice.startswith(found[0].seen + " and came back: expected with this preset (")
    assert why in found[0].advice and "lower the learning rate" not in found[0].advice
    assert "loss spikes that came back, as this preset expects" in diagnosis.summary(found)
    assert diagnosis.summary(found).startswith("Nothing unusual at step 1,000")

    stuck = healthy(n=1000)
    for r in stuck[500:]:
        r["train_loss"] += 3.0  # the loss jumps and stays up
    found = d.diagnose(stuck[:520], expected={"spike": why})
    assert [f.warning for f in found] == [False] and "came back" not in found[0].advice  # too soon to tell
    found = d.diagnose(stuck, expected={"spike": why})
    assert [f.warning for f in found] == [True]
    live = d.Diagnosis(expected={"spike": why})  # a live run: its rows come a window at a time
    for i in range(0, 4000, 100):
        rows_now = stuck[i:i + 100] if i < 1000 else [{**stuck[-1], "step": 1 + s} for s in range(i, i + 100)]
        found = live(rows_now)
    assert [(f.step, f.warning) for f in found] == [(501, True)]  # told once, kept after its rows are let go
    assert f"has not come back in {d.SPIKE_RECOVERY_STEPS} steps" in found[0].advice
    assert d.recovered(stuck, 501) is False and d.recovered(rows, 501) is True and d.recovered(rows, 5000) is None
    non_finite = healthy(n=300)
    non_finite[200]["train_loss"] = math.nan  # whatever a preset expects, a loss that is not finite is a warning
    assert [f.warning for f in d.diagnose(non_finite, expected={"spike": why})] == [True]


def test_the_shipped_presets_expect_only_kinds_of_finding():
    """Each preset's [expected] names rules that exist (`FindingKind`); the grokking preset expects spikes."""
    from typing import get_args

    from fatstudio.core.runs.presets import load_presets, preset

    for p in load_presets():
        assert {kind for kind, _ in p.expected} <= set(get_args(d.FindingKind)), p.key
    assert dict(preset("grokking").expected)["spike"]


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


# ---- the shipped presets, at their own settings ------------------------------------------------------------
RUNS = Path(__file__).parent / "data" / "preset-runs"  # measured by bench/diagnose_presets.py --save


def _replay(key):
    """A preset's measured run fed to `Diagnosis` as the main window feeds it: the steps in windows of 40,
    each evaluation's numbers joining its step's row a window later, the last probe's head findings with
    the last evaluation. Returns every call's findings, the diagnosis and the run's settings."""
    from fatstudio.core.config import RunConfig
    from fatstudio.core.inspect.probes import load_probe_file
    from fatstudio.core.runs.presets import expected_findings

    run = np.load(RUNS / f"{key}.npz")
    settings = json.loads(str(run["settings"]))
    train = settings["config"]["train"]
    diagnosis = d.Diagnosis(float(train["grad_clip"]), settings["unigram"], int(train["warmup"]), settings.get("split"),
                            expected_findings(RunConfig.from_record(settings["config"])))
    rows = [{"step": int(s), "train_loss": float(x), "grad_norm": None if np.isnan(g) else float(g)}
            for s, x, g in zip(run["step"], run["train_loss"], run["grad_norm"])]
    evals = {int(s): (t, v, None if np.isnan(a) else a) for s, t, v, a in run["evals"]}
    by_step = {r["step"]: r for r in rows}
    step = max(evals)
    heads = (step, d.head_findings(load_probe_file(RUNS / f"{key}.safetensors"), step))
    calls, pending = [], []
    for i in range(0, len(rows), 40):
        for s in pending:
            t, v, a = evals[s]
            by_step[s].update(eval_train_loss=t, val_loss=v, accuracy=a)
        window = rows[i:i + 40]
        pending = [r["step"] for r in window if r["step"] in evals]
        calls.append(diagnosis(window))
    for s in pending:
        t, v, a = evals[s]
        by_step[s].update(eval_train_loss=t, val_loss=v, accuracy=a)
    calls.append(diagnosis([], heads))
    return calls, diagnosis, settings


def test_no_warning_on_any_shipped_preset_run_at_its_own_settings():
    """Every shipped preset, trained at its settings (measured rows, gradient norms and last probe maps):
    no call finds anything to warn about. BERT clips on every step (a note), the encoder-decoder solves its
    task (its uniform heads are not judged), the grokking preset's loss spikes now and then and comes back, as
    its [expected] table says (notes), and at the end the Diagnostics list says nothing is unusual."""
    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs.presets import load_presets
    from fatstudio.core.runs.reference_curves import same_settings

    presets = load_presets()
    assert sorted(p.stem for p in RUNS.glob("*.npz")) == sorted(p.key for p in presets)  # one run per preset
    notes = {}
    for preset in presets:
        calls, diagnosis, settings = _replay(preset.key)
        measured = RunConfig.from_record(settings["config"])  # recorded before data.split: the tail
        assert same_settings(measured, preset.config) and measured.train.steps == preset.config.train.steps, \
            f"{preset.key} changed: measure it again (bench/diagnose_presets.py --save {RUNS})"
        for found in calls:
            assert [f.line for f in found if f.warning] == [], preset.key
        assert diagnosis.summary(calls[-1]).startswith("Nothing unusual at step"), preset.key
        notes[preset.key] = kinds(calls[-1])
    assert notes["bert-mlm"][0] == "clipping"  # the intended clipping is said, as a note
    assert notes["edt-reverse"] == []  # solved: no head lines at all
    assert "spike" in notes["grokking"]  # its spikes are there, as notes


def test_the_shipped_reference_curves_raise_no_warning():
    """The reference curves (`reference_curves`: each preset's loss over seeds) read as metrics rows, the mean
    train loss of each window and the validation loss of each evaluation: no rule warns (the grokking preset's
    spikes are notes, as its [expected] table says)."""
    from fatstudio.core.runs.presets import expected_findings
    from fatstudio.core.runs.reference_curves import load_reference, reference_dir

    shipped = sorted(reference_dir().glob("*.json"))
    assert shipped
    for path in shipped:
        ref = load_reference(path)
        train = ref.train
        rows = [{"step": int(round(s)), "train_loss": m} for s, m in zip(train.step, train.mean)]
        for s, v in zip(ref.val.step, ref.val.mean):
            rows.append({"step": int(s), "val_loss": v, "eval_train_loss": float(np.interp(s, train.step, train.mean))})
        rows.sort(key=lambda r: r["step"])
        unigram = json.loads(str(np.load(RUNS / f"{ref.preset}.npz")["settings"]))["unigram"]
        found = d.diagnose(rows, ref.config.train.grad_clip, unigram, ref.config.train.warmup,
                           expected=expected_findings(ref.config))
        assert [f.line for f in found if f.warning] == [], ref.preset


def test_the_grokking_preset_ends_on_the_grokked_model():
    """A learner's last look is the grokked model, not a spike: the preset holds η, then decays it to min_lr over
    its last steps (train.lr_schedule "wsd"), and its run measured at its own settings (bench/diagnose_presets.py;
    the test above checks they are the preset's) passed 95% validation accuracy and is at ≥ 95% at the last
    evaluation (at step 800 a loss spike had taken it to 75%, measured with bf16 on a 2-core CPU)."""
    from fatstudio.core.runs.presets import preset
    from fatstudio.core.training import lr_at

    t = preset("grokking").config.train
    assert lr_at(t.steps // 2, t) == t.lr and lr_at(t.steps, t) == pytest.approx(t.min_lr)
    run = np.load(RUNS / "grokking.npz")
    assert json.loads(str(run["settings"]))["config"]["train"]["lr_schedule"] == "wsd"
    accuracy = run["evals"][:, 3]
    assert (accuracy[:-1] >= 0.95).any() and accuracy[-1] >= 0.95
