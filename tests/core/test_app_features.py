"""The Features tab's state (`core.app.features.Features`): it follows the focus, lists the focused run's saved
dictionaries, says in words what it cannot do (no weights, no run folder, a missing transcoder, an architecture
the graph does not support), and runs its work in the one job system."""
from __future__ import annotations

import time

import pytest
import torch
from training_helpers import trained_run

from fatstudio.core.app.features import GRAPH, TRAIN, Features, GraphRequest, default_point, trainable_points
from fatstudio.core.app.focus import Focus
from fatstudio.core.app.jobs import Jobs, Mailbox
from fatstudio.core.inspect.features.dictionary import Dictionary, dictionary_folder
from fatstudio.core.model.hooks import point_names
from fatstudio.core.runs.folder import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained_run(tmp_path_factory, 20)  # weights of steps 10 and 20


def drain(mailbox: Mailbox, jobs: Jobs, timeout: float = 60.0) -> None:
    """Deliver everything the jobs post, until they have all ended."""
    end = time.monotonic() + timeout
    while not jobs.idle or mailbox.drain():
        assert time.monotonic() < end, "the jobs did not end"
        mailbox.drain()
        time.sleep(0.01)


@pytest.fixture
def state():
    mailbox = Mailbox()
    jobs = Jobs(mailbox.post)
    focus = Focus()
    yield Features(focus, jobs), focus, mailbox
    jobs.shutdown()


def save_dictionary(run, point: str, step: int, kind="transcoder") -> Dictionary:
    p_in, p_out = (f"{point}/in", f"{point}/out") if kind == "transcoder" else (point, point)
    d = Dictionary(kind, p_in, p_out, 16, 16, 32, 4, info={"step": step, "quality": {"explained_variance": 0.9}})
    torch.manual_seed(0)
    torch.nn.init.normal_(d.W_dec)
    d.normalize_decoder()
    with torch.no_grad():
        d.W_enc.copy_(d.W_dec.T)
    d.save(dictionary_folder(run, point, step))
    return d


def test_the_points_offered_are_each_mlp_as_a_transcoder_then_the_stream_as_saes(run):
    names = point_names(Run.open(run).load_model().model)
    points = trainable_points(names)
    assert points[0] == ("mlp/0 · transcoder (in → out)", "mlp/0")
    assert ("self/0/resid_post · SAE", "self/0/resid_post") in points
    assert not any(p.endswith(("/pattern", "/z", "/mask", "/scores", "norm-stats", "/q")) for _label, p in points)
    assert {"embed", "final", "self/0/in", "self/0/out", "mlp/0/out"} <= {p for _label, p in points}
    assert default_point([p for _l, p in points]) == "self/0/resid_post"
    assert default_point(["self/0/resid_post", "self/1/resid_post", "self/2/resid_post", "self/3/resid_post"]) == \
        "self/1/resid_post"


def test_it_lists_the_focused_runs_dictionaries_and_steps_and_a_damaged_one_with_why(state, run, tmp_path):
    features, focus, mailbox = state
    save_dictionary(run, "mlp/0", 20)
    broken = dictionary_folder(run, "self/0/resid_post", 10)
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "dictionary.json").write_text("{not json", encoding="utf-8")
    seen = []
    features.listed.connect(seen.append)
    focus.show(Run.open(run).load_model(), str(run))
    drain(mailbox, features.jobs)
    assert features.steps == [10, 20] and features.no_weights() is None
    by_point = {s.point: s for s in features.saved if not s.error}
    assert by_point["mlp/0"].step == 20 and by_point["mlp/0"].kind == "transcoder"
    assert "k = 4" in by_point["mlp/0"].words and by_point["mlp/0"].quality == {"explained_variance": 0.9}
    damaged = [s for s in features.saved if s.error]
    assert len(damaged) == 1 and "has no dictionary.safetensors" in damaged[0].error
    assert seen[-1] == features.saved


def test_another_focus_clears_what_was_shown_and_says_why_nothing_can_be_done(state, run):
    features, focus, mailbox = state
    loaded = Run.open(run).load_model()
    focus.show(loaded, str(run))
    drain(mailbox, features.jobs)
    features.quality = {"explained_variance": 0.9}
    cleared = []
    features.cleared.connect(lambda: cleared.append(True))
    focus.show(loaded)  # the same weights, of no run folder
    assert cleared and features.quality is None and features.saved == []
    assert "no run folder" in (features.no_weights() or "")
    failed = []
    features.failed.connect(lambda key, message: failed.append((key, message)))
    assert not features.train("mlp/0", 20)
    assert failed[-1][0] == TRAIN and "no run folder" in failed[-1][1]
    focus.clear()
    assert "Open a run" in (features.no_weights() or "")


def test_a_graph_needs_a_transcoder_for_every_mlp_at_one_step_and_a_pre_ln_decoder(state, run):
    features, focus, mailbox = state
    loaded = Run.open(run).load_model(step=10)
    focus.show(loaded, str(run))
    drain(mailbox, features.jobs)
    failed = []
    features.failed.connect(lambda key, message: failed.append((key, message)))
    assert features.build_graph("the quick")  # no transcoder at step 10 yet: the job says so
    drain(mailbox, features.jobs)
    assert failed[-1][0] == GRAPH and "no transcoder of mlp/0 at step 10" in failed[-1][1]
    assert features.graph_request("", None) == "Write a prompt to trace."
    request = features.graph_request("the quick", " ")
    assert request == GraphRequest("the quick", " ", 10)
    loaded.model.config.arch = "bert"  # a model the graph's method does not fit
    assert not features.build_graph("the quick")
    assert failed[-1] == (GRAPH, "Attribution graphs and feature edits are for decoder-only models (gpt, gopher); "
                          "this is a 'bert' model.")


def test_a_dashboard_a_graph_and_an_intervention_arrive_through_the_jobs(state, run):
    features, focus, mailbox = state
    focus.show(Run.open(run).load_model(step=20), str(run))
    focus.set_text("the quick brown fox")
    save_dictionary(run, "mlp/0", 20)
    features.refresh()
    drain(mailbox, features.jobs)
    saved = next(s for s in features.saved if s.point == "mlp/0" and s.step == 20)
    features.choose(saved)
    drain(mailbox, features.jobs)
    assert features.chosen is not None and features.chosen.saved == saved
    assert len(features.chosen.stats.stats()) == 32  # every feature listed
    shown, failed = [], []
    features.dashboard_ready.connect(shown.append)
    features.failed.connect(lambda key, message: failed.append(message))
    features.choose_feature(3)
    drain(mailbox, features.jobs)
    assert shown, failed
    assert shown[0].feature == 3 and shown[0].dashboard.stats.index == 3
    assert shown[0].on_text is None and "more than this model's l_max = 16" in shown[0].note  # said, not failed
    focus.set_text("the quick")
    features.choose_feature(3)
    drain(mailbox, features.jobs)
    assert shown[-1].on_text.tokens[:3] == ["t", "h", "e"] and shown[-1].on_text.acts.shape == (9, 32)
    assert features.build_graph("the quick brown")
    drain(mailbox, features.jobs)
    graph = features.graph
    assert graph is not None and graph.nodes[graph.target_index].kind == "logit"
    node = next(n for n in graph.nodes if n.kind == "feature")  # at the last position, where the logit is
    edits = []
    features.edit_ready.connect(edits.append)
    target = features.node_target(node)
    assert target.folder == saved.folder and target.prompt == "the quick brown" and target.step == 20
    assert features.intervene(target)
    drain(mailbox, features.jobs)
    assert edits[-1].describe() == f"feature {node.feature + 1} of mlp/0 zeroed at position {node.position + 1}"
    s = graph.nodes.index(node)
    assert edits[-1].direct_effect == pytest.approx(float(graph.adjacency[graph.target_index, s]))
    assert edits[-1].target == graph.nodes[graph.target_index].token
    assert edits[-1].logit_before == pytest.approx(graph.logit, abs=1e-3) and edits[-1].logit_after != edits[-1].logit_before
    assert features.node_target(graph.nodes[0]) is None  # an embedding
    assert features.intervene(features.feature_target(5, "the quick brown"), value=3.0)
    drain(mailbox, features.jobs)
    assert edits[-1].describe() == "feature 6 of mlp/0 clamped to 3 at every position"
    assert edits[-1].direct_effect is None and edits[-1].target == edits[-1].next_tokens[0]
    assert edits[-1].tokens[:3] == ["t", "h", "e"] and len(edits[-1].next_tokens) >= 5


def test_a_training_goes_on_for_its_run_when_the_focus_moves_and_cancel_saves_nothing(state, run):
    features, focus, mailbox = state
    focus.show(Run.open(run).load_model(step=10), str(run))
    drain(mailbox, features.jobs)
    events = []
    features.train_event.connect(events.append)
    assert features.train("self/0/resid_post", 20, tokens=50_000_000, d_f_mult=2, k=4)  # weights of another step
    assert not features.train("mlp/0", 20)  # one at a time
    end = time.monotonic() + 60
    while len(events) < 2 and time.monotonic() < end:  # it has begun
        mailbox.drain()
        time.sleep(0.01)
    assert len(events) >= 2 and events[-1].kind == "progress"
    focus.show(Run.open(run).load_model(step=20), str(run))  # other weights: the training goes on
    assert features.training == str(run) and features.jobs.busy(TRAIN) and features.chosen is None
    assert features.cancel_training() and features.training is None
    drain(mailbox, features.jobs)
    assert not dictionary_folder(run, "self/0/resid_post", 20).exists()
