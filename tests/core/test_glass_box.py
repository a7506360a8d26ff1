"""Glass-box models (`runs.glass_box`): run folders of hand-set weights that open like any run, and whose
construction the inspection tools find: the ablation and head scores the induction model's two heads, an SAE the
superposition model's known features."""
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from fatstudio.core.inspect.ablation import ablator_for
from fatstudio.core.inspect.head_scores import head_scores
from fatstudio.core.model.hooks import hooked
from fatstudio.core.names import MapName
from fatstudio.core.runs.folder import Run, list_runs
from fatstudio.core.runs.glass_box import FEATURES, build_glass_box, known_features, recovered_features

PREV, INDUCTION = "self/0/0", "self/1/0"  # the constructed heads: layer 1 head 1, layer 2 head 1


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    return Run.open(build_glass_box("induction", tmp_path_factory.mktemp("runs") / "induction").run_dir)


def test_a_glass_box_is_a_run_like_any_with_its_construction_in_its_description(induction_run):
    run = induction_run
    assert [r.path for r in list_runs(run.path.parent)] == [run.path]  # listed
    assert run.meta["glass_box"] == "induction" and run.info.status == "finished"
    assert "previous-token head" in run.info.description and "induction head" in run.info.description
    assert run.check_agreement().vocab_size == run.config.model.vocab_size  # tokenizer, config and weights agree
    assert run.checksummed and run.load_model().step == 0  # the weights' checksum verified as they load


def test_the_description_gives_an_example_prompt_of_its_letters_whose_second_copy_is_predicted(induction_run):
    import re

    loaded = induction_run.load_model()
    prompt = re.search(r'"([a-z]+)"', induction_run.info.description).group(1)
    ids = loaded.tokenizer.encode(prompt)
    assert loaded.tokenizer.decode(ids) == prompt and len(ids) <= loaded.config.model.l_max
    with torch.no_grad():
        logp = loaded.model(torch.tensor([ids]))[0].log_softmax(-1)
    nll = -logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    half = len(ids) // 2
    assert prompt[:half] == prompt[half:] and nll[half - 1:].mean() < 1.0 < 2.0 < nll[:half - 1].mean()


def test_ablating_a_constructed_head_costs_over_a_nat_and_any_other_head_nothing(induction_run):
    loaded = induction_run.load_model()
    torch.manual_seed(0)
    table = ablator_for(loaded, second_copy=True).table("zero")  # the loss where induction predicts: second copies
    cost = {str(r.component): r.delta_loss for r in table.rows}
    assert table.baseline_loss < 1.0
    assert cost[PREV] >= 1.0 and cost[INDUCTION] >= 1.0
    assert all(abs(c) <= 0.01 for name, c in cost.items() if name not in (PREV, INDUCTION))
    everywhere = {str(r.component): r.delta_loss for r in ablator_for(loaded).table("mean").rows}
    assert everywhere[PREV] > 0.1 and everywhere[INDUCTION] > 0.1  # on the whole validation loss too
    assert all(abs(c) <= 0.01 for name, c in everywhere.items() if name not in (PREV, INDUCTION))


def test_the_head_scores_rank_the_constructed_heads_first(induction_run):
    loaded = induction_run.load_model()
    scores = head_scores(loaded.model, loaded.tokenizer)

    def ranking(score):
        heads = [(float(v), f"{name}/{h}") for name in scores.names() for h, v in enumerate(scores.get(name, score))]
        return [head for _, head in sorted(heads, reverse=True)]

    assert ranking("prev")[0] == PREV and ranking("induction")[0] == INDUCTION
    assert scores.get(MapName.parse("self/0"), "prev")[0] > 0.99
    assert scores.get(MapName.parse("self/1"), "induction")[0] > 0.5


def test_a_superposition_run_keeps_more_known_features_than_dimensions_with_their_checksum(tmp_path):
    run = Run.open(build_glass_box("superposition", tmp_path / "sup").run_dir)
    u = known_features(run)
    assert u.shape[0] > u.shape[1] == run.config.model.d_e  # in superposition
    assert torch.allclose(u.norm(dim=1), torch.ones(len(u)))
    with safe_open(str(run.path / FEATURES), "pt") as f:
        assert f.metadata()["point"] == "mlp/0/out" and f.metadata()["sha256"]
    data = bytearray((run.path / FEATURES).read_bytes())
    data[-1] ^= 1
    (run.path / FEATURES).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged"):
        known_features(run)
    save_file({"directions": u}, str(run.path / FEATURES))  # another program's file, without the checksum
    with pytest.raises(ValueError, match="no checksum"):
        known_features(run)


def test_the_superposition_model_writes_exactly_its_known_features(tmp_path):
    run = Run.open(build_glass_box("superposition", tmp_path / "sup").run_dir)
    loaded = run.load_model()
    known = load_file(str(run.path / FEATURES))
    text = "qwkdmqwkdmxbxbzyz"
    ids = torch.tensor([loaded.tokenizer.encode(text)])
    out = []
    with torch.no_grad(), hooked(loaded.model, {"mlp/0/out": out.append}):
        loaded.model(ids)
    prev = torch.cat([ids[:, :1], ids[:, :-1]], 1)  # the first token is its own previous one
    letters = torch.tensor(loaded.tokenizer.encode("abcdefghijklmnopqrstuvwxyz"))
    index = {int(t): i for i, t in enumerate(letters)}
    a = torch.tensor([[index[int(t)] for t in row] for row in prev])
    b = torch.tensor([[index[int(t)] for t in row] for row in ids])
    acts = known["activations"][a, b]  # (1, T, K)
    assert ((acts > 0).sum(-1) == 3).all()  # sparse: 3 of K features at each token
    np.testing.assert_allclose(out[0], acts @ known["directions"], atol=1e-4)


def test_an_sae_trained_on_the_mlp_output_recovers_the_known_features_and_a_random_one_does_not(tmp_path):
    from fatstudio.core.inspect.features.dictionary import Dictionary
    from fatstudio.core.inspect.features.training import train_dictionary

    run = Run.open(build_glass_box("superposition", tmp_path / "sup").run_dir)
    loaded = run.load_model()
    torch.manual_seed(0)
    *_, done = train_dictionary(loaded, "mlp/0/out", d_f_mult=2, k=4, tokens=40_000, batch_tokens=128, lr=1e-2,
                                held_out_tokens=1024, seed=1)
    found = recovered_features(done.dictionary, run)
    assert found.fraction >= 0.8 and found.point == "mlp/0/out"
    assert sorted(found.found + found.missed) == list(range(len(found.cosine)))
    assert all(found.cosine[i] >= 0.9 for i in found.found) and all(found.cosine[i] < 0.9 for i in found.missed)
    random = Dictionary("sae", "mlp/0/out", "mlp/0/out", 96, 96, 192, 4)
    with torch.no_grad():
        random.W_dec.copy_(torch.randn(96, 192))
    assert recovered_features(random, run.path).fraction == 0.0  # random directions are far from every known one
    with pytest.raises(ValueError, match="width"):
        recovered_features(Dictionary("sae", "embed", "embed", 8, 8, 16, 4), run)


def test_recovered_features_needs_a_run_with_known_features(induction_run):
    from fatstudio.core.inspect.features.dictionary import Dictionary

    with pytest.raises(ValueError, match="no known features"):
        recovered_features(Dictionary("sae", "embed", "embed", 128, 128, 256, 4), induction_run)
