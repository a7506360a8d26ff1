"""Scoring a text: each token's loss is exactly the training loss's term for it (Algorithms 13, 12, 11), windows
keep at least ⌈l_max/2⌉ tokens of context, bad input is refused in words, and a model that learned to copy finds
the second copy of a random sequence predictable."""
import math
import random

import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core import training
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import scoring
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.runs.folder import Run

TASKS = {"gpt": "next_token", "gopher": "next_token", "bert": "masked_lm", "edt": "seq2seq", "cls": "classification"}
TOK = train_tokenizer("char", ["the quick brown fox jumps over the lazy dog.\n"])


def loaded(kind="gpt", l_max=12, positions=None):
    arch = "bert" if kind == "cls" else kind
    extra = {"n_classes": 2} if kind == "cls" else {}
    if positions:
        extra["positions"] = positions
    cfg = ModelConfig(arch=arch, vocab_size=TOK.vocab_size, l_max=l_max, L=2, L_enc=1, L_dec=1, H=2, d_e=16,
                      d_mlp=32, **extra)
    torch.manual_seed(0)
    model = build_model(cfg).double().eval()  # float64: the comparisons below are exact to 1e-9
    return LoadedModel(model, TOK, RunConfig(model=cfg, data=DataConfig(task=TASKS[kind])))


def log_softmax(logits):
    return logits.double().log_softmax(-1)


@pytest.mark.parametrize("kind", ["gpt", "gopher"])
def test_next_token_losses_are_the_training_loss_terms(kind):
    lm = loaded(kind)
    text = "the lazy fox."  # 13 tokens: one window of l_max = 12 predicts the last 12
    s = scoring.score_text(lm, text)
    ids = TOK.encode(text)
    assert s.ids == ids and s.task == "next_token" and s.algorithm == 13 and s.windows == 1 and not s.windowed
    assert s.tokens[0].loss is None and s.tokens[0].prob is None  # the first token has no prefix
    x, y = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
    logp = log_softmax(lm.model(x))[0]
    expected = [-logp[t - 1, ids[t]].item() for t in range(1, len(ids))]
    assert s.losses == pytest.approx(expected, abs=1e-9)
    assert [t.context for t in s.tokens] == list(range(len(ids)))
    loss, _, _ = training.task_loss(lm.model, {"x": x, "y": y}, "next_token")
    assert s.mean_loss == pytest.approx(loss.item(), abs=1e-9)
    assert s.bits_per_char == pytest.approx(sum(expected) / math.log(2) / (len(text) - 1))
    tok3 = s.tokens[3]
    best, p_best = tok3.alternatives[0]
    assert len(tok3.alternatives) == 8 and p_best == pytest.approx(logp[2].exp().max().item())
    assert best == TOK.token_strings([int(logp[2].argmax())])[0]
    assert tok3.prob == pytest.approx(math.exp(-expected[2]))


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_a_long_text_is_scored_in_windows_that_keep_half_the_context(positions):
    l_max = 8
    lm = loaded("gpt", l_max=l_max, positions=positions)
    text = "the quick brown fox jumps over the lazy dog."
    ids = TOK.encode(text)
    s = scoring.score_text(lm, text)
    assert s.windowed and s.windows == 8  # starts 0, 5, …, 30 (a stride of 8 + 1 - 4) and 35, the last ending at the end
    assert len(s.scored) == len(ids) - 1  # every token but the first, once
    for t, tok in enumerate(s.tokens[1:], start=1):
        c = tok.context
        assert c == t if t <= l_max else c >= scoring.context_kept(l_max) == 4
        start = t - c  # the window that scored it: x = ids[start:start + l_max]
        logp = log_softmax(lm.model(torch.tensor([ids[start:start + l_max]])))[0]
        assert tok.loss == pytest.approx(-logp[c - 1, ids[t]].item(), abs=1e-9)


def test_masked_lm_is_the_pseudo_log_likelihood(monkeypatch):
    lm = loaded("bert")
    text = "the fox"
    ids = TOK.encode(text)
    expected = []
    for i in range(len(ids)):  # one forward pass per position, that position masked
        x = list(ids)
        x[i] = TOK.mask_id
        expected.append(-log_softmax(lm.model(torch.tensor([x])))[0, i, ids[i]].item())
    s = scoring.score_text(lm, text)
    assert s.task == "masked_lm" and s.algorithm == 12 and s.ids == ids  # no bos or eos, as training windows
    assert s.losses == pytest.approx(expected, abs=1e-9)
    monkeypatch.setattr(scoring, "LOGIT_BUDGET", 2 * len(ids) * TOK.vocab_size)  # two rows per forward pass
    assert scoring.score_text(lm, text).losses == pytest.approx(expected, abs=1e-9)
    assert s.bits_per_char == pytest.approx(sum(expected) / math.log(2) / len(text))


def test_seq2seq_scores_the_target_given_the_source():
    lm = loaded("edt")
    source, target = "fox", "the dog"
    s = scoring.score_text(lm, target, source=source)
    z = [TOK.bos_id, *TOK.encode(source), TOK.eos_id]
    t_ids = TOK.encode(target)
    x, y = torch.tensor([[TOK.bos_id, *t_ids]]), torch.tensor([[*t_ids, TOK.eos_id]])
    logp = log_softmax(lm.model(x, context=torch.tensor([z])))[0]
    assert s.task == "seq2seq" and s.algorithm == 11 and s.ids == [*t_ids, TOK.eos_id]
    assert s.tokens[-1].text == "<eos>"
    assert s.losses == pytest.approx([-logp[t, y[0, t]].item() for t in range(y.shape[1])], abs=1e-9)
    batch = {"z": torch.tensor([z]), "z_pad_mask": torch.ones(1, len(z), dtype=torch.bool), "x": x,
             "x_pad_mask": torch.ones_like(x, dtype=torch.bool), "y": y}
    loss, _, _ = training.task_loss(lm.model, batch, "seq2seq")
    assert s.mean_loss == pytest.approx(loss.item(), abs=1e-9)


@pytest.mark.parametrize(("kind", "text", "source", "words"), [
    ("cls", "the fox", None, "classifier"),
    ("gpt", "t", None, "at least two tokens"),
    ("gpt", "héllo", None, "'é'"),
    ("bert", "the [MASK] fox", None, "without mask markers"),
    ("bert", "the quick brown fox", None, "l_max = 12"),
    ("edt", "the dog", "", "write the source"),
    ("edt", "", "fox", "write the target"),
    ("edt", "the quick brown", "fox", "target with bos"),
])
def test_what_cannot_be_scored_is_said_in_words(kind, text, source, words):
    with pytest.raises(ValueError) as err:
        scoring.score_text(loaded(kind), text, source=source)
    assert words in str(err.value)


def test_unscorable_reason():
    assert scoring.unscorable_reason("generate") is None and scoring.unscorable_reason("translate") is None
    assert "classifier" in scoring.unscorable_reason("classify")
    assert "open a run" in scoring.unscorable_reason(None)


def test_a_model_that_learned_to_copy_predicts_the_second_copy(tmp_path):
    """A one-layer GPT trained 300 steps (a few seconds) on random 6-letter sequences each written twice: the
    second copy is predictable from the first, the first not at all (the induction preset's lesson)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    corpus = tmp_path / "copies.txt"
    corpus.write_text("".join(r + r for r in ("".join(rng.choices(letters, k=6)) for _ in range(3000))))
    cfg = RunConfig(ModelConfig(arch="gpt", l_max=12, L=1, H=1, d_e=32, d_mlp=64, positions="rope"),
                    DataConfig(corpus=str(corpus), tokenizer="char"),
                    TrainConfig(steps=300, batch_size=32, lr=1e-2, warmup=10, min_lr=1e-3, weight_decay=0.0,
                                eval_interval=300, eval_iters=1, checkpoint_interval=300, sample_tokens=0,
                                device="cpu", seed=1))
    for _ in training.train(cfg, run_dir=tmp_path / "run"):
        pass
    lm = Run.open(tmp_path / "run").load_model()
    rng = random.Random(5)
    for _ in range(3):
        r = "".join(rng.choices(letters, k=6))
        s = scoring.score_text(lm, r + r)
        first = [t.loss for t in s.tokens[1:6]]
        second = [t.loss for t in s.tokens[6:]]
        assert sum(second) / 6 < 0.5 * sum(first) / 5, (first, second)
        assert sum(first) / 5 > 2.5  # a first copy is a guess among 26 letters (ln 26 = 3.26)
