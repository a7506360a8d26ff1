"""Attribution graphs and feature interventions on tiny float64 models with random transcoders (whose
decode(encode(x)) misses much of the MLP's output, so the error nodes matter): the replacement model is the
model on its prompt; the edges into the logit sum to logit − baseline (the logit with every source zero, the
biases alone); pruning keeps what it says; zeroing a feature in the replacement model moves the logit by exactly
its edge; a live edit that changes nothing changes nothing; bert and edt are told no."""
import pytest
import torch
from interventions_helpers import tiny

from fatstudio.core.config import RunConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.scoring import score_text
from fatstudio.core.inspect.features.dictionary import Dictionary
from fatstudio.core.inspect.features.graph import attribution_graph, graph_for_text, influence, prune, threshold
from fatstudio.core.inspect.features.interventions import FeatureEdit, edited_logits, intervene
from fatstudio.core.inspect.features.replacement import Replacement
from fatstudio.core.model.hooks import recorded

IDS = [1, 5, 3, 7, 2, 9, 4, 4, 8]
DECODERS = {"gpt": {}, "gopher": {},  # gopher: RMSnorm, relative positions
            "gpt-gqa-rope-swiglu": dict(H=4, H_kv=2, positions="rope", activation="swiglu")}


def transcoders(model, d_f=24, k=4, seed=1):
    """A random TopK transcoder for each MLP layer of ``model``."""
    torch.manual_seed(seed)
    d_e, out = model.config.d_e, []
    for l in range(model.config.L):
        d = Dictionary("transcoder", f"mlp/{l}/in", f"mlp/{l}/out", d_e, d_e, d_f, k)
        with torch.no_grad():
            for p in d.parameters():
                p.normal_(0.0, 0.5)
            d.normalize_decoder()
        out.append(d.requires_grad_(False))
    return out


@pytest.fixture(scope="module", params=list(DECODERS))
def traced(request):
    model = tiny(request.param.split("-")[0], **DECODERS[request.param])
    tcs = transcoders(model)
    return model, tcs, attribution_graph(model, tcs, IDS)


def test_the_replacement_model_on_its_own_prompt_is_the_model(traced):
    model, tcs, _ = traced
    rep = Replacement(model, tcs, IDS)
    with torch.no_grad():
        clean = model(torch.tensor([IDS]))[0]
        logits, _ = rep.run(*rep.sources(2))
    assert (logits - clean).abs().max() < 1e-10
    assert min(float(e.norm()) for e in rep.error) > 0.1  # the transcoders are far from exact: errors matter


def test_the_edges_into_the_logit_sum_to_the_logit_minus_the_biases_alone(traced):
    model, tcs, g = traced
    with torch.no_grad():
        logits = model(torch.tensor([IDS]))[0, -1]
    assert g.target == int(logits.argmax()) and g.logit == pytest.approx(float(logits[g.target]), abs=1e-10)
    assert g.probability == pytest.approx(float(logits.softmax(-1)[g.target]), abs=1e-10)
    row = g.adjacency[g.target_index]
    assert float(row.sum()) == pytest.approx(g.change, abs=1e-9)
    assert abs(g.change) > 0.1 and abs(g.baseline) > 0.01  # both sides are something
    kinds = {g.nodes[i].kind for i in row.nonzero()[:, 0].tolist()}
    assert kinds == {"embedding", "feature", "error"}


def test_the_edges_into_a_feature_sum_to_its_pre_activation_minus_the_biases_alone(traced):
    model, tcs, g = traced
    rep = Replacement(model, tcs, IDS)
    with torch.no_grad():
        zero = rep.sources(1)
        _, ins = rep.run(torch.zeros_like(zero[0]), zero[1], [0 * v for v in zero[2]], [0 * e for e in zero[3]])
    features = [i for i, n in enumerate(g.nodes) if n.kind == "feature"]
    assert len(features) == sum(int((f != 0).sum()) for f in rep.f) > len(IDS)  # one node per active feature
    for i in features:
        n, t = g.nodes[i], rep.transcoders[g.nodes[i].layer]  # in the model's dtype
        pre = t.pre_acts(rep.mlp_in[n.layer][n.position])[n.feature]
        base = t.pre_acts(ins[n.layer][0, n.position])[n.feature]
        assert float(g.adjacency[i].sum()) == pytest.approx(float(pre - base), abs=1e-9)
        assert n.activation == pytest.approx(float(pre), abs=1e-10)  # TopK keeps it as it is
        later = [j for j, m in enumerate(g.nodes) if m.layer >= n.layer and m.kind in ("feature", "error")]
        assert not g.adjacency[i, later].any()  # only earlier layers reach its input


def test_zeroing_each_of_the_five_strongest_features_moves_the_logit_by_its_direct_effect(traced):
    """In the replacement model (attention, norms, the other features and errors frozen) the logit is affine in
    the activations: zeroing feature s moves it by −A[logit, s], well within the 10% asked for."""
    model, tcs, g = traced
    strongest = g.strongest(5)
    assert len(strongest) == 5
    for i in strongest:
        n = g.nodes[i]
        moved = g.logit - float(edited_logits(model, IDS, [FeatureEdit(tcs[n.layer], n.feature, 0.0, n.position)],
                                              frozen=True, transcoders=tcs)[-1, g.target])
        edge = float(g.adjacency[g.target_index, i])
        assert moved == pytest.approx(edge, rel=1e-6, abs=1e-9), n.label()
        assert abs(edge) > 1e-3


def test_pruning_keeps_the_nodes_and_edges_it_says(traced):
    _, _, g = traced
    p = prune(g)
    full = {n: i for i, n in enumerate(g.nodes)}
    at = [full[n] for n in p.nodes]
    assert all(n.kind in {m.kind for m in p.nodes} for n in g.nodes if n.kind in ("embedding", "logit"))
    assert sum(n.kind == "embedding" for n in p.nodes) == len(IDS) and p.nodes[-1] == g.nodes[-1]
    infl = g.influence.clone()
    infl[g.target_index] = 0
    cut = threshold(infl, 0.8)
    for i, n in zip(at, p.nodes):
        if n.kind in ("feature", "error"):
            assert float(infl[i]) >= cut  # among the most influential
    on = infl >= cut
    assert float(infl[on].sum() / infl.sum()) >= 0.8 and p.stats["node_influence"] >= 0.8
    assert p.stats["edge_score"] >= 0.98
    assert len(p.nodes) < len(g.nodes)
    edges = p.adjacency != 0
    for j, n in enumerate(p.nodes):
        if n.kind in ("feature", "error"):
            assert edges[:, j].any(), n.label()  # an edge out
        if n.kind == "feature":
            assert edges[j].any(), n.label()  # an edge in
    full_w = g.adjacency[at][:, at]
    assert torch.equal(p.adjacency[edges], full_w[edges])  # kept edges keep their weights
    for s, t, w in p.edges():  # (source, target, weight), upwards
        assert float(p.adjacency[t, s]) == w != 0 and p.nodes[s].layer < p.nodes[t].layer
    everything = prune(g, 1.0, 1.0)
    assert len(everything.nodes) >= len(p.nodes) and len(everything.edges()) > len(p.edges())
    with pytest.raises(ValueError, match="node threshold"):
        prune(g, 0.0)


def test_influence_counts_every_path():
    # 0 → 1 → 2 (the target) and 0 → 2: 0 has half of 2's input directly and all of 1's, which has the other half
    A = torch.zeros(3, 3, dtype=torch.float64)
    A[1, 0], A[2, 0], A[2, 1] = 2.0, -1.0, 1.0
    assert influence(A, 2).tolist() == [1.0, 0.5, 1.0]


def test_bert_edt_post_ln_and_missing_transcoders_get_a_clear_message():
    for arch in ("bert", "edt"):
        model = tiny(arch)
        with pytest.raises(ValueError, match="decoder-only models"):
            attribution_graph(model, [], IDS)
    with pytest.raises(ValueError, match="pre-LN"):
        attribution_graph(tiny("gpt", norm_position="post"), [], IDS)
    model = tiny("gpt")
    with pytest.raises(ValueError, match="no transcoder for mlp/1"):
        attribution_graph(model, transcoders(model)[:1], IDS)
    sae = Dictionary("sae", "self/0/resid_post", "self/0/resid_post", 8, 8, 16, 2)
    with pytest.raises(ValueError, match="not a transcoder"):
        attribution_graph(model, [sae], IDS)


def test_a_live_edit_adds_the_change_of_the_feature_times_its_decoder_column():
    model = tiny("gpt")
    tcs = transcoders(model)
    rep = Replacement(model, tcs, IDS)
    with torch.no_grad():
        clean = model(torch.tensor([IDS]))[0]
    f = rep.f[1]
    idle = int((f[3] == 0).nonzero()[0, 0])
    same = edited_logits(model, IDS, [FeatureEdit(tcs[1], idle, 0.0, 3)])
    assert torch.equal(same, clean)  # nothing changed: exactly the model
    live = int(f[3].argmax())
    out = "self/1/resid_post"  # the stream after mlp/1 adds its output (an edit's hook runs after a reading one)
    with recorded(model, [out]) as got:
        edited_logits(model, IDS, [FeatureEdit(tcs[1], live, 2.5, 3)])
    want = torch.zeros_like(got[out][0])
    want[0, 3] = (2.5 - f[3, live]) * tcs[1].W_dec[:, live].double()
    with recorded(model, [out]) as clean_out, torch.no_grad():
        model(torch.tensor([IDS]))
    assert torch.allclose(got[out][0] - clean_out[out][0], want, atol=1e-6)
    everywhere = edited_logits(model, IDS, [FeatureEdit(tcs[1], live, 0.0)])
    assert (everywhere - clean).abs().max() > 1e-3
    sae = Dictionary("sae", "self/0/resid_post", "self/0/resid_post", 8, 8, 16, 2)
    with torch.no_grad():
        for p in sae.parameters():
            p.normal_(0.0, 0.5)
    with recorded(model, ["self/0/resid_post"]) as read, torch.no_grad():
        model(torch.tensor([IDS]))
    x = read["self/0/resid_post"][0][0]
    i = int(sae.encode(x.float())[2].argmax())
    with recorded(model, ["self/1/resid_pre"]) as got:
        edited_logits(model, IDS, [FeatureEdit(sae, i, 0.0, 2)])
    moved = got["self/1/resid_pre"][0][0] - x
    assert torch.allclose(moved[2], -(sae.encode(x.float())[2, i] * sae.W_dec[:, i]).double(), atol=1e-6)
    assert not moved[[0, 1, 3]].any()
    with pytest.raises(ValueError, match="feature 17 is not one of"):
        edited_logits(model, IDS, [FeatureEdit(sae, 16)])
    with pytest.raises(ValueError, match="position 10 is not in the prompt"):
        edited_logits(model, IDS, [FeatureEdit(sae, 1, 0.0, 9)])


@pytest.fixture(scope="module")
def loaded():
    tok = train_tokenizer("char", ["the quick brown fox jumps over the lazy dog. "])
    return LoadedModel(tiny("gpt", vocab_size=tok.vocab_size), tok, RunConfig())


def test_an_intervention_gives_the_probabilities_as_the_head_ablation_does(loaded):
    tcs = transcoders(loaded.model)
    text = "the lazy fox"
    g = graph_for_text(loaded, tcs, text)
    assert [n.token for n in g.nodes if n.kind == "embedding"] == list(text)
    assert g.nodes[-1].token == loaded.tokenizer.token_strings([g.target])[0]
    node = g.nodes[g.strongest(1)[0]]
    got = intervene(loaded, text, [FeatureEdit(tcs[node.layer], node.feature, 0.0)])
    before = score_text(loaded, text, alternatives=0)
    assert got.tokens == list(text) and got.before == [t.prob for t in before.tokens]
    assert got.before[0] is None and got.delta[0] is None
    assert max(abs(d) for d in got.delta[1:]) > 1e-4
    assert got.csv().splitlines()[0] == "position,token,p_before,p_after,delta_p"
    assert len(got.next_tokens) >= 5 and got.next_before[0] == pytest.approx(g.probability, abs=1e-9)
    assert got.describe() == f"feature {node.feature + 1} of mlp/{node.layer} zeroed at every position"
    last = intervene(loaded, text, [FeatureEdit(tcs[node.layer], node.feature, 0.0, len(text) - 1)])
    assert last.after == last.before  # the last token is read only to predict the one after the text
    assert last.next_after != last.next_before
    t = graph_for_text(loaded, tcs, text, target="q")
    assert t.target == loaded.tokenizer.encode("q")[0]
    with pytest.raises(ValueError, match="give one token"):
        graph_for_text(loaded, tcs, text, target="qu")
    with pytest.raises(ValueError, match="write a prompt"):
        graph_for_text(loaded, tcs, "")
    with pytest.raises(ValueError, match="the prompt is 13 tokens long; it must have 1 to l_max = 12"):
        graph_for_text(loaded, tcs, "the lazy dogs")
    with pytest.raises(ValueError, match="the prompt is 13 tokens long; an edit reruns a prompt of 2 to l_max = 12"):
        intervene(loaded, "the lazy dogs", [FeatureEdit(tcs[0], 0)])
    with pytest.raises(ValueError, match="choose a feature"):
        intervene(loaded, text, [])


def test_a_run_s_saved_transcoders_are_found_by_layer_or_the_missing_ones_named(tmp_path):
    from fatstudio.core.inspect.features.dictionary import dictionary_folder
    from fatstudio.core.inspect.features.graph import saved_transcoders

    model = tiny("gpt")
    tcs = transcoders(model)
    tcs[1].save(dictionary_folder(tmp_path, "mlp/1", 30))
    with pytest.raises(ValueError, match="no transcoder of mlp/0 at step 30"):
        saved_transcoders(tmp_path, 30, 2)
    tcs[0].save(dictionary_folder(tmp_path, "mlp/0", 30))
    got = saved_transcoders(tmp_path, 30, 2)
    assert [d.point_in for d in got] == ["mlp/0/in", "mlp/1/in"] and torch.equal(got[1].W_dec, tcs[1].W_dec)
