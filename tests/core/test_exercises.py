"""The exercises (issue 37): each solution passes, three typical mistakes each fail with the message that names
them, learner code that loops or crashes is stopped in its child process, Train with my code gives the reference's
curve for a right function and parts from it for a wrong one, and progress survives a new session."""
import math

import pytest
import torch

from fatstudio.core.config import ModelConfig
from fatstudio.core.model.transformers import build_model
from fatstudio.core.paper import reference as ref
from fatstudio.core.paper.exercises import kit, sandbox
from fatstudio.core.paper.exercises.cases import Weights
from fatstudio.core.paper.exercises.catalog import BY_NAME, EXERCISES
from fatstudio.core.paper.exercises.checking import check
from fatstudio.core.paper.exercises.progress import Progress
from fatstudio.core.paper.exercises.training import SWAPS, train_with

# exercise: three (the solution's text, what a typical mistake writes instead, what the message must say)
WRONG = {
    "token_embedding": [("W_e[:, v]", "W_e[v]", "e has shape (9,); it should be d_e = (5,)"),
                        ("W_e[:, v]", "W_e[:, v - 1]", "e[0] is"),
                        ("W_e[:, v]", "W_e[:, v:v + 1]", "e has shape (5, 1)")],
    "positional_embedding": [("W_p[:, t]", "W_p[t]", "e_p has shape (7,)"),
                             ("W_p[:, t]", "W_p[:, t - 1]", "t = 0: e_p[0] is"),
                             ("W_p[:, t]", "W_p[:, t + 1]", "t = 0: e_p[0] is")],
    "embed": [("W_e[:, x] + W_p[:, :len(x)]", "W_e[:, x]", "X[0, 0] is"),
              ("W_p[:, :len(x)]", "W_p[:, 1:len(x) + 1]", "X[0, 0] is"),
              ("return W_e[:, x] + W_p[:, :len(x)]", "return (W_e[:, x] + W_p[:, :len(x)]).T",
               "X has shape (5, 6) (transposed?); it should be d_e × ℓ = (6, 5)")],
    "basic_attention": [(" / W_q.shape[0] ** 0.5", "", "ṽ[0] is"),
                        ("return V @ alpha", "return alpha", "ṽ has shape (6,); it should be d_out = (2,)"),
                        ("V = W_v @ Z + b_v[:, None]", "V = W_v @ Z", "ṽ[0] is")],
    "attention": [("/ W_q.shape[0] ** 0.5", "", "bidirectional Mask (every entry 1): Ṽ[0, 0] is"),
                  ("~Mask", "~Mask.T", "unidirectional Mask (Mask[t_z, t_x] = [t_z ≤ t_x]): Ṽ[0, 0] is"),
                  ("/ W_q.shape[0] ** 0.5, 0)", "/ W_q.shape[0] ** 0.5, 1)", "bidirectional Mask (every entry 1)")],
    "mh_attention": [("W_o @ Y + b_o[:, None]", "W_o @ Y", "Ṽ[0, 0] is"),
                     ("b_v[h*m:(h+1)*m], Mask)", "b_v[h*m:(h+1)*m], torch.ones_like(Mask))",
                      "unidirectional Mask (Mask[t_z, t_x] = [t_z ≤ t_x])"),
                     ("W_q[h*a:(h+1)*a], b_q", "W_q[:a], b_q", "Ṽ[0, 0] is")],
    "layer_norm": [("((e - m) ** 2).mean()", "((e - m) ** 2).sum() / (len(e) - 1)", "random e (7), γ, β: ê[0] is"),
                   ("(v + eps) ** 0.5", "v ** 0.5 + eps", "ê[0] is"),
                   ("* gamma + beta", "* beta + gamma", "ê[0] is")],
    "unembedding": [("s = torch.exp(s - s.max())", "s = torch.exp(s)", "large logits (max W_u e = 1000"),
                    ("W_u @ e", "W_u.T @ e", "your function raised RuntimeError"),
                    ("    s = torch.exp(s - s.max())\n    return s / s.sum()", "    return s", "p[0] is")],
    "dtransformer": [("X = layer_norm_columns(X, theta['gamma'], theta['beta'])\n", "", "P[0, 0] is"),
                     ("Mask = unidirectional_mask(len(x))", "Mask = torch.ones(len(x), len(x), dtype=torch.bool)",
                      "P[0, 0] is"),
                     ("Xn = layer_norm_columns(X, w['gamma2'], w['beta2'])", "Xn = X", "P[0, 0] is")],
    "etransformer": [("Mask = torch.ones(len(x), len(x), dtype=torch.bool)",
                      "Mask = torch.ones(len(x), len(x), dtype=torch.bool).triu()", "P[0, 0] is"),
                     ("gelu(theta['W_f'] @ X + theta['b_f'][:, None])", "X", "P[0, 0] is"),
                     ("w['gamma1'], w['beta1'])", "w['gamma2'], w['beta2'])", "P[0, 0] is")],
    "d_loss": [("P[x[t + 1], t]", "P[x[t], t]", "random P (7 × 6): loss is"),
               ("return -sum", "return sum", "loss is -"),
               ("for t in range(len(x) - 1))", "for t in range(len(x) - 1)) / (len(x) - 1)", "loss is")],
    "e_loss": [("P[x[t], t]", "P[x[t + 1], t]", "T̃ = [1, 4]: loss is"),
               ("for t in masked)", "for t in range(len(x)))", "loss is"),
               ("return -sum", "return sum", "loss is -")],
    "training_step": [("v - eta * v.grad", "v + eta * v.grad", "θ['W_e'][0, 1] is"),
                      ("P[x[t + 1], t]", "P[x[t], t]", "θ['W_e']"),
                      ("for k, v in theta.items()}\n", "for k, v in theta.items() if k != 'W_u'}\n",
                       "θ should be a dict with the names ['W_e', 'W_p', 'W_u']")],
    "sampling_distribution": [("p[keep] ** (1 / tau)", "p[keep] / tau", "τ = 0.5, k = 3: q["),
                              ("keep = torch.topk(p, k).indices", "keep = torch.topk(p, len(p)).indices",
                               "τ = 0.5, k = 3: q["),
                              ("    return q / q.sum()", "    return q", "q[")],
    "dinference": [("forward(x)[:, -1]", "forward(x)[:, 0]", "y[0] is"),
                   ("return x[len(x) - l_gen:]", "return x", "y[0] is"),
                   ("forward(x)[:, -1]", "forward(x[:1])[:, -1]", "ℓ_gen = 4: y[0] is 3 where the reference gives 0")],
    "bpe_merges": [("pair = next(p for p in counts if counts[p] == best)",
                    "pair = min(p for p in counts if counts[p] == best)",
                    "merges[2] is ('e', 'we') where the reference gives ('lo', 'we')"),
                   ("words = [list(w) for w in text.split()]", "words = [list(text)]",  # pairs across words
                    "merges[2] is (' ', 'lo') where the reference gives ('lo', 'we')"),
                   ("        if not counts:\n            break\n", "",
                    "your function raised ValueError: max() arg is an empty sequence")],
}


@pytest.fixture(scope="module")
def weights():
    """A small GPT's random weights: the model in focus."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="gpt", vocab_size=13, l_max=8, L=1, H=2, d_e=8, d_mlp=16)
    return Weights(cfg.resolved(), {k: v.to(torch.float64) for k, v in build_model(cfg).state_dict().items()})


def test_at_least_twelve_exercises_each_with_hints_and_a_stub_that_is_not_yet_a_pass():
    assert len(EXERCISES) >= 12 and set(WRONG) == set(BY_NAME)
    for e in EXERCISES:
        assert len(e.hints) >= 2 and e.algorithm and f"def {e.name}(" in e.stub
        result = check(e, e.stub)
        assert not result.passed and "not written yet" in result.message, e.name


@pytest.mark.parametrize("name", list(BY_NAME))
def test_the_solution_passes_on_random_inputs_and_the_model_in_focus(name, weights):
    e = BY_NAME[name]
    result = check(e, e.solution, weights)
    assert result.passed, result.message
    on_model = any("model in focus" in c.label for c in e.cases(torch.Generator().manual_seed(0), weights))
    assert on_model == ("model in focus" in result.message)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_three_typical_mistakes_fail_saying_what_is_wrong(name, weights):
    e = BY_NAME[name]
    assert len(WRONG[name]) == 3
    for right, wrong, said in WRONG[name]:
        assert right in e.solution, (name, right)
        result = check(e, e.solution.replace(right, wrong), weights)
        assert not result.passed and said in result.message, (name, wrong, result.message)
        assert "where the reference gives" in result.message or "shape" in result.message or "raised" in \
            result.message or "should be" in result.message


def test_the_first_differing_entry_is_given_with_both_values():
    e = BY_NAME["layer_norm"]
    result = check(e, e.solution.replace("* gamma + beta", "* gamma"))
    g = torch.Generator().manual_seed(0)
    x, gamma, beta, eps = e.cases(g, None)[0].args
    want = kit.layer_norm(x, gamma, beta, eps)
    assert f"ê[0] is {float(want[0] - beta[0]):.8g} where the reference gives {float(want[0]):.8g}" in result.message


def test_code_that_does_not_compile_or_define_the_function_says_so():
    e = BY_NAME["token_embedding"]
    assert "line 2 of your code" in check(e, "def token_embedding(v, W_e):\n    return W_e[:, v\n").message
    assert "defines no function token_embedding" in check(e, "def embedding(v, W_e):\n    return 0\n").message
    said = check(e, "import torch\n\ndef token_embedding(v, W_e):\n    return 1 / 0\n").message
    assert "ZeroDivisionError: division by zero (line 4)" in said


def test_the_kit_is_the_literal_reference():
    g = torch.Generator().manual_seed(1)
    X, Z = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    W = [torch.randn(*s, generator=g, dtype=torch.float64) for s in ((5, 6), (5,), (5, 6), (5,), (2, 6), (2,))]
    Mask = torch.rand(3, 4, generator=g) > 0.3
    Mask[0] = True
    want, _ = ref.attention(X, Z, dict(zip(["W_q", "b_q", "W_k", "b_k", "W_v", "b_v"], W)),
                            lambda t_z, t_x: bool(Mask[t_z, t_x]), {"kind": "none"})
    torch.testing.assert_close(kit.attention(X, Z, *W, Mask), want, rtol=1e-12, atol=1e-12)
    e = X[:5, 0] * 3 + 1
    torch.testing.assert_close(kit.layer_norm(e, W[1], W[3], 1e-5), ref.layer_norm(e, W[1], W[3], 1e-5))
    assert kit.d_loss([1, 2, 0], torch.full((3, 3), 1 / 3, dtype=torch.float64)).item() == pytest.approx(2 * math.log(3))
    for arch in ("gpt", "bert"):  # the decoder's and the encoder's θ, from a model's weights as from the focus
        torch.manual_seed(0)
        cfg = ModelConfig(arch=arch, vocab_size=13, l_max=8, L=2, H=2, d_e=8, d_mlp=16)
        state = {k: v.double() for k, v in build_model(cfg).state_dict().items()}
        w = Weights(cfg.resolved(), state)
        assert w.like(arch) and not w.like("bert" if arch == "gpt" else "gpt")
        P, _ = ref.ReferenceTransformer(cfg, state).forward([3, 1, 4, 1, 5])
        forward = kit.dtransformer if arch == "gpt" else kit.etransformer
        torch.testing.assert_close(forward([3, 1, 4, 1, 5], w.theta()), P, rtol=1e-10, atol=1e-12)


def test_endless_loops_and_crashes_are_stopped_in_the_child_with_a_message():
    loop = "def layer_norm(e, gamma, beta, eps=1e-5):\n    while True:\n        pass\n"
    said = sandbox.check("layer_norm", loop, limit_s=1)
    assert not said["passed"] and "ran longer than 1 s and was stopped" in said["message"]
    crash = "import ctypes\n\ndef layer_norm(e, gamma, beta, eps=1e-5):\n    return ctypes.string_at(0)\n"
    said = sandbox.check("layer_norm", crash)
    assert not said["passed"] and "SIGSEGV" in said["message"]
    fake = ("import os\n\ndef layer_norm(e, gamma, beta, eps=1e-5):\n"
            "    os.write(1, b'@@fatstudio-exercise {\"passed\": true, \"message\": \"Passed\"}\\n')\n"
            "    os._exit(0)\n")  # a pass written where the answer goes, then an end before the real one
    said = sandbox.check("layer_norm", fake)
    assert not said["passed"] and "ended (exit status 0) before it answered" in said["message"]


def test_a_check_in_the_child_uses_the_model_in_focus():
    torch.manual_seed(0)
    cfg = ModelConfig(arch="gpt", vocab_size=13, l_max=8, L=1, H=2, d_e=8, d_mlp=16)
    e = BY_NAME["mh_attention"]
    said = sandbox.check(e.name, e.solution, cfg, build_model(cfg).state_dict())
    assert said == {"passed": True, "message": "Passed: 6 of 6 cases agree with the float64 reference (random inputs "
                                               "and on the model in focus's weights)."}


def test_train_with_my_code_gives_the_same_curve_when_right_and_another_when_wrong():
    assert set(SWAPS) == {e.name for e in EXERCISES if e.trains} == {
        "token_embedding", "positional_embedding", "embed", "attention", "mh_attention", "layer_norm", "unembedding",
        "d_loss"}
    for name in ("attention", "d_loss"):
        e = BY_NAME[name]
        right = train_with(e, e.solution, 4)
        assert right["passed"] and right["message"].startswith("The same curve: 4 steps")
        assert max(abs(a - b) for a, b in zip(right["mine"], right["reference"])) < 1e-5
    e = BY_NAME["attention"]
    wrong = train_with(e, e.solution.replace("/ W_q.shape[0] ** 0.5", ""), 4)
    assert not wrong["passed"] and "The curves part at step" in wrong["message"]
    assert wrong["reference"] == right["reference"] and len(wrong["mine"]) == 4
    said = train_with(BY_NAME["bpe_merges"], BY_NAME["bpe_merges"].solution, 4)
    assert not said["passed"] and "cannot be trained with" in said["message"]


def test_progress_is_kept_across_sessions(tmp_path):
    path = tmp_path / "exercises.json"
    Progress(path).record("attention", "code 1", passed=True)
    again = Progress(path)
    again.record("attention", "code 2", passed=False)
    again.update("layer_norm", hints=2)
    third = Progress(path)
    assert third.passed("attention") and third.of("attention")["code"] == "code 2"
    assert third.of("layer_norm") == {"hints": 2} and not third.tried("layer_norm")
    path.write_text("{not json")
    assert Progress(path).data == {}


def test_a_large_model_in_focus_goes_to_a_check_as_its_first_layer(tmp_path, monkeypatch):
    torch.manual_seed(0)
    cfg = ModelConfig(arch="gpt", vocab_size=13, l_max=8, L=2, H=2, d_e=8, d_mlp=16, tie_embeddings=True)
    state = build_model(cfg).state_dict()  # W_u is W_eᵀ: one tensor under two names
    whole = sandbox.load_weights(sandbox.save_weights(cfg, state, tmp_path / "whole.safetensors"))
    assert whole.like("gpt") and set(whole.p) == set(state)
    torch.testing.assert_close(whole.p["layers.1.mlp.W_mlp1.weight"], state["layers.1.mlp.W_mlp1.weight"].double())
    monkeypatch.setattr(sandbox, "WHOLE_LIMIT", 100)
    first = sandbox.load_weights(sandbox.save_weights(cfg, state, tmp_path / "first.safetensors"))
    assert not first.like("gpt") and "layers.1.attn.W_q.weight" not in first.p and "layers.0.attn.W_q.weight" in first.p
    assert "model in focus" not in check(BY_NAME["dtransformer"], BY_NAME["dtransformer"].solution, first).message
    assert "model in focus" in check(BY_NAME["layer_norm"], BY_NAME["layer_norm"].solution, first).message


def test_basic_attention_cases_give_e_and_Z_one_d_in_as_its_docstring_says(weights):
    assert "Z = [e_1, …, e_ℓ_z] ∈ ℝ^{d_in×ℓ_z}" in BY_NAME["basic_attention"].stub
    for case in BY_NAME["basic_attention"].cases(torch.Generator().manual_seed(0), weights):
        e, Z = case.args[:2]
        assert e.shape[0] == Z.shape[0], case.label
        assert f"Z ({Z.shape[0]} × " in case.label or "model in focus" in case.label
