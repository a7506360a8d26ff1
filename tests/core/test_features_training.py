"""Training a sparse dictionary on a tiny run's hook points (`features.training`), its quality (`features.quality`)
and its export to SAELens's folder (`features.saelens`)."""
import json

import pytest
import torch
from safetensors.torch import load_file
from training_helpers import trained_run

from fatstudio.core.inspect.features import training
from fatstudio.core.inspect.features.activations import held_out, run_data
from fatstudio.core.inspect.features.dictionary import Dictionary, load
from fatstudio.core.inspect.features.quality import measure
from fatstudio.core.inspect.features.saelens import export
from fatstudio.core.inspect.features.training import train_dictionary
from fatstudio.core.runs.folder import Run

FAST = dict(tokens=8_192, batch_tokens=256, held_out_tokens=1_024, lr=1e-2)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return Run.open(trained_run(tmp_path_factory, steps=30)).load_model()


def _done(events):
    events = list(events)
    assert [e.kind for e in events[-2:]] == ["measuring", "done"]
    return events


def test_an_sae_trains_on_a_residual_point_and_carries_its_quality(loaded, tmp_path):
    events = _done(train_dictionary(loaded, "self/0/resid_post", d_f_mult=2, k=4, **FAST))
    progress = [e for e in events if e.kind == "progress"]
    assert [e.fraction for e in progress] == sorted(e.fraction for e in progress) and progress[-1].fraction == 1
    assert all(e.l0 <= 4 for e in progress)
    d, q = events[-1].dictionary, events[-1].quality
    assert (d.kind, d.point_in, d.d_in, d.d_f, d.k) == ("sae", "self/0/resid_post", 16, 32, 4)
    assert torch.allclose(d.W_dec.norm(dim=0), torch.ones(32), atol=1e-5)  # unit decoder columns
    assert q.explained_variance > 0.7 and 0 < q.ce_loss_score <= 1.05 and q.l0 <= 4
    assert q.loss_zero > q.loss_clean
    assert d.info["quality"] == q.to_dict() and "AuxK" in d.info["training"]["dead_revival"]
    assert d.info["training"]["tokens"] == events[-1].tokens >= FAST["tokens"]
    again = load(d.save(tmp_path / "d"))
    assert again.info["quality"] == q.to_dict() and torch.equal(again.W_enc, d.W_enc)


def test_an_mlp_trains_a_transcoder_from_its_input_to_its_output(loaded):
    d = _done(train_dictionary(loaded, "mlp/0", d_f_mult=2, k=4, **FAST))[-1].dictionary
    assert (d.kind, d.point_in, d.point_out) == ("transcoder", "mlp/0/in", "mlp/0/out")
    q = d.info["quality"]
    assert q["explained_variance"] > 0 and q["loss_spliced"] < q["loss_zero"]


def test_a_batch_larger_than_the_shuffling_buffer_is_drawn_from_more_passes(loaded):
    """8 passes of 32 windows of l_max = 16 tokens hold 4,096 tokens; a batch of 5,000 takes a ninth."""
    done = _done(train_dictionary(loaded, "self/0/resid_post", d_f_mult=1, k=2, tokens=10_000, batch_tokens=5_000,
                                  held_out_tokens=256))[-1]
    assert (done.step, done.tokens) == (2, 10_000)


def test_the_same_seed_trains_the_same_dictionary(loaded):
    a, b, c = (_done(train_dictionary(loaded, "self/0/resid_mid", d_f_mult=1, k=2, seed=s, tokens=1_024,
                                      batch_tokens=256, held_out_tokens=256))[-1].dictionary for s in (3, 3, 4))
    assert torch.equal(a.W_enc, b.W_enc) and not torch.equal(a.W_enc, c.W_enc)


def test_quality_is_exact_for_a_dictionary_that_reconstructs_exactly(loaded):
    """f = (ReLU(x), ReLU(−x)) and x̂ = ReLU(x) − ReLU(−x) = x: explained variance 1 and a CE loss score of 1."""
    point, n = "self/0/resid_post", 16
    d = Dictionary("sae", point, point, n, n, 2 * n, n)
    eye = torch.eye(n)
    with torch.no_grad():
        d.W_enc.copy_(torch.cat([eye, -eye]))
        d.W_dec.copy_(torch.cat([eye, -eye], 1))
    q = measure(loaded, d, held_out(loaded, run_data(loaded), [point], 512, seed=0))
    assert q.explained_variance == pytest.approx(1, abs=1e-6) and q.ce_loss_score == pytest.approx(1, abs=1e-5)
    assert q.loss_spliced == pytest.approx(q.loss_clean, abs=1e-5) and q.l0 <= n


def test_auxk_gives_gradient_to_dead_features_only_when_some_are_dead():
    """Without dead features only the k active ones of each token learn; with features counted dead, the
    k_aux largest dead ones of each token are trained to reconstruct the error too (Gao et al.'s AuxK)."""
    torch.manual_seed(0)
    d = Dictionary("sae", "p", "p", 8, 8, 64, 2)
    with torch.no_grad():
        d.W_dec.normal_()
        d.normalize_decoder()
        d.W_enc.copy_(d.W_dec.T)
    x = torch.randn(32, 8)

    def learning(dead):
        d.zero_grad()
        main, total, values, at = training.losses(d, x, x, dead, k_aux=4, aux_coeff=1 / 8)
        total.backward()
        return set(torch.nonzero(d.W_enc.grad.abs().sum(1)).flatten().tolist()), set(at[values > 0].tolist()), main
    live, active, main = learning(torch.zeros(64, dtype=torch.bool))
    assert live == active
    dead = torch.ones(64, dtype=torch.bool)
    dead[list(active)] = False
    revived, _, same = learning(dead)
    assert revived > active and revived - active <= set(torch.nonzero(dead).flatten().tolist())
    assert torch.equal(main, same)  # AuxK adds to the loss; it does not change the reconstruction


def test_a_control_that_stops_ends_training_with_the_dictionary_so_far(loaded):
    class Stop:
        stopping = True
    events = _done(train_dictionary(loaded, "mlp/0", d_f_mult=1, k=2, control=Stop(), **FAST))
    done = events[-1]
    assert done.stopped and done.step == 1 and done.dictionary.info["training"]["stopped"] is True


@pytest.mark.parametrize("point, said", [("self/9/resid_post", "no hook point"), ("mlp/7", "no hook point")])
def test_a_point_the_model_lacks_is_refused_before_any_work(loaded, point, said):
    with pytest.raises(ValueError, match=said):
        next(train_dictionary(loaded, point))


@pytest.mark.parametrize("point", ["self/0/mask", "self/0/scores", "self/0/norm-stats", "final-norm-stats",
                                   "self/0/pattern", "self/0/q"])
def test_a_point_that_is_not_the_residual_stream_is_refused_before_any_work(loaded, point):
    with pytest.raises(ValueError, match="cannot be trained on"):
        next(train_dictionary(loaded, point))


def test_a_dictionary_that_is_not_finite_is_not_saved_and_its_quality_says_why(tmp_path):
    d = Dictionary("sae", "self/0/resid_post", "self/0/resid_post", 4, 4, 8, 2)
    with torch.no_grad():
        d.W_enc[0, 0] = float("nan")
    with pytest.raises(ValueError, match="not saved: W_enc"):
        d.save(tmp_path / "d")
    assert not (tmp_path / "d").exists()
    nan = float("nan")
    assert "a loss is not finite" in training.Quality(0.5, 2.0, 0.0, nan, 1.559, nan, 3.396, 10).line()
    assert "does not change the loss" in training.Quality(0.5, 2.0, 0.0, nan, 1.5, 1.5, 1.5, 10).line()
    assert training.Quality(0.5, 2.0, 0.013, 0.9, 1.5, 1.6, 3.0, 32_768).line().endswith(
        "dead 1.3% (all on 32,768 held-out tokens)")


def test_k_larger_than_d_f_is_refused(loaded):
    with pytest.raises(ValueError, match="k = 40"):
        next(train_dictionary(loaded, "mlp/0", d_f_mult=2, k=40))


def _trained(loaded, point):
    return _done(train_dictionary(loaded, point, d_f_mult=2, k=4, tokens=1_024, batch_tokens=256,
                                  held_out_tokens=256))[-1].dictionary


@pytest.mark.parametrize("point", ["self/0/resid_post", "mlp/0"])
def test_the_saelens_folder_encodes_the_same_features_by_saelens_s_formula(loaded, tmp_path, point):
    """SAELens's TopK SAE (apply_b_dec_to_input off): f = TopK(ReLU(x W_enc + b_enc)), x̂ = f W_dec + b_dec."""
    d = _trained(loaded, point)
    export(d, tmp_path / "sl")
    cfg = json.loads((tmp_path / "sl" / "cfg.json").read_text())
    w = load_file(tmp_path / "sl" / "sae_weights.safetensors")
    assert (cfg["architecture"], cfg["d_in"], cfg["d_sae"], cfg["k"]) == ("topk", 16, 32, 4)
    assert cfg["metadata"]["hook_name"] == d.point_in and cfg["apply_b_dec_to_input"] is False
    x = held_out(loaded, run_data(loaded), [d.point_in], 256, seed=1).acts[0]
    pre = x @ w["W_enc"] + w["b_enc"]
    values, at = pre.topk(4, dim=-1)
    f = torch.zeros_like(pre).scatter(-1, at, values.relu())
    assert torch.allclose(f, d.encode(x), atol=1e-5)
    assert torch.allclose(f @ w["W_dec"] + w["b_dec"], d(x), atol=1e-4)


def test_sae_lens_loads_the_export_and_encodes_the_same_features(loaded, tmp_path):
    sae_lens = pytest.importorskip("sae_lens")  # the optional extra "saelens"
    d = _trained(loaded, "self/0/resid_post")
    sae = sae_lens.SAE.load_from_disk(export(d, tmp_path / "sl"))
    x = held_out(loaded, run_data(loaded), [d.point_in], 256, seed=1).acts[0].clone()
    with torch.no_grad():
        assert torch.allclose(sae.encode(x), d.encode(x), atol=1e-5)
        assert torch.allclose(sae.decode(sae.encode(x)), d(x), atol=1e-4)
    assert sae.cfg.metadata.hook_name == d.point_in and (sae.cfg.architecture(), sae.cfg.k) == ("topk", 4)


def test_resampling_restarts_dead_features_on_badly_reconstructed_tokens():
    """Features that never fire (zero encoder rows, b_enc −10) restart toward tokens drawn by their error
    (Anthropic 2023): afterwards they fire among the TopK, the live ones are untouched, and Adam forgets them."""
    torch.manual_seed(0)
    d = Dictionary("sae", "p", "p", 8, 8, 64, 4)
    with torch.no_grad():
        d.W_dec.normal_()
        d.normalize_decoder()
        d.W_enc.copy_(d.W_dec.T)
        dead = torch.zeros(64, dtype=torch.bool)
        dead[:16] = True
        d.W_enc[dead] = 0
        d.b_enc[dead] = -10
    x = torch.randn(256, 8)
    opt = torch.optim.Adam(d.parameters())
    d.pre_acts(x).relu().sum().backward()
    opt.step()
    assert not set(d.encode(x).nonzero()[:, 1].tolist()) & set(range(16))
    live = d.W_enc[~dead].clone()
    training.resample(d, opt, x, x, dead, torch.Generator().manual_seed(0))
    assert set(d.encode(x).nonzero()[:, 1].tolist()) & set(range(16))
    assert torch.equal(d.W_enc[~dead], live) and torch.allclose(d.W_dec.norm(dim=0), torch.ones(64), atol=1e-5)
    assert torch.all(d.b_enc[dead] == 0) and torch.all(opt.state[d.W_enc]["exp_avg"][dead] == 0)


def test_each_kind_trains_by_its_recipe_the_sae_without_resampling(loaded):
    """An SAE keeps the rate and AuxK that keep the residual stream's features alive; a transcoder resamples."""
    fast = {k: v for k, v in FAST.items() if k != "lr"}
    sae = _done(train_dictionary(loaded, "self/0/resid_post", d_f_mult=2, k=4, **fast))[-1].dictionary
    tc = _done(train_dictionary(loaded, "mlp/0", d_f_mult=2, k=4, **fast))[-1].dictionary
    assert sae.info["training"]["lr"] == 1e-3 and tc.info["training"]["lr"] == 3e-3
    assert "resampling" not in sae.info["training"]["dead_revival"]
    assert "1/32" in sae.info["training"]["dead_revival"] and "50,000" in sae.info["training"]["dead_revival"]
    assert "resampling" in tc.info["training"]["dead_revival"] and "1/8" in tc.info["training"]["dead_revival"]
