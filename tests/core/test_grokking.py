"""The grokking lab's core: the "modadd" task (a + b mod p; its split, its answer-only loss, its settings), the
embedding's Fourier energy, the weights' norm, and what a run records at each evaluation."""
import math

import pytest
import torch

from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.data.corpora import IGNORE, build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.grokking import fourier_energy, number_embedding, weight_norm
from fatstudio.core.model import build_model
from fatstudio.core.records import (
    ACCURACY,
    EMBED_FOURIER,
    TRAIN_ACCURACY,
    WEIGHT_NORM,
    MetricsRow,
    grokked_step,
    read_jsonl,
    with_evaluation,
)


def _modadd(p=11, val_fraction=0.7, seed=0):
    corpus = load_corpus("modadd", "next_token", seed=seed, modadd_p=p)
    tok = train_tokenizer("word", corpus.texts(), p + 8)
    return corpus, tok, build_dataset(corpus, tok, "next_token", l_max=4, val_fraction=val_fraction, seed=seed)


def _pairs(tok, batch):
    """(a, b, c) of each row: x = a + b =, y = the answer at the last position."""
    out = set()
    for x, y in zip(batch["x"].tolist(), batch["y"].tolist()):
        a, plus, b, eq = tok.token_strings(x)
        assert (plus, eq) == ("+", "=")
        out.add((int(a), int(b), int(tok.token_strings([y[-1]])[0])))
    return out


def test_modadd_is_every_sum_mod_p_split_at_random_without_overlap():
    p = 11
    corpus, tok, ds = _modadd(p, val_fraction=0.7)
    assert corpus.modulus == p and len(corpus.pairs) == p * p and corpus.text.count("\n") == p * p
    assert tok.vocab_size == p + 8  # one token per number, '+', '=', newline, <unk> and the four specials
    n_val = round(p * p * 0.7)
    assert ds.sizes() == {"train_examples": p * p - n_val, "val_examples": n_val}
    full = {split: ds.batch(split, 10_000, torch.Generator()) for split in ("train", "val")}  # ≥ the split: all of it
    train, val = _pairs(tok, full["train"]), _pairs(tok, full["val"])
    assert len(train) == p * p - n_val and len(val) == n_val and not train & val
    assert {(a, b) for a, b, _ in train | val} == {(a, b) for a in range(p) for b in range(p)}
    assert all(c == (a + b) % p for a, b, c in train | val)
    other = _pairs(tok, _modadd(p, 0.7, seed=1)[2].batch("train", 10_000, torch.Generator()))
    assert other != train  # the split is random, per seed
    small = ds.batch("train", 5, torch.Generator().manual_seed(0))
    assert small["x"].shape == (5, 4)  # a smaller batch: random rows


def test_modadd_loss_counts_the_answer_only():
    _, tok, ds = _modadd()
    b = ds.batch("train", 10_000, torch.Generator())
    assert "x_pad_mask" not in b  # every row is a + b =, no padding
    assert (b["y"][:, :-1] == IGNORE).all() and (b["y"][:, -1] != IGNORE).all()
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, l_max=4, L=1, H=2, d_e=16, d_mlp=32))
    logits = model(b["x"])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), b["y"].flatten(), ignore_index=IGNORE)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits[:, -1], b["y"][:, -1]))


@pytest.mark.parametrize("change, message", [
    (dict(modadd_p=1), r"data.modadd_p = 1 is not allowed"),
    (dict(modadd_p=501), r"data.modadd_p = 501 is not allowed"),
    (dict(modadd_p=9.5), r"data.modadd_p = 9.5 is not allowed"),
    (dict(tokenizer="char"), r"modadd corpus needs data.tokenizer = 'word'"),
    (dict(vocab_size=100), r"data.vocab_size ≥ 105"),
    (dict(val_fraction=0.0), r"data.val_fraction = 0.0 is not allowed for modadd"),
    (dict(val_fraction=1.0), r"data.val_fraction = 1.0 is not allowed"),
])
def test_modadd_settings_are_validated(change, message):
    ok = dict(corpus="modadd", tokenizer="word", vocab_size=1000, modadd_p=97, val_fraction=0.7)
    DataConfig(**ok).validate()
    with pytest.raises(ValueError, match=message):
        DataConfig(**{**ok, **change}).validate()


@pytest.mark.parametrize("p", [11, 12])
def test_one_cosine_puts_all_its_energy_at_its_frequency(p):
    n = torch.arange(p, dtype=torch.float64)
    for k in range(1, p // 2 + 1):
        W = torch.stack([torch.cos(2 * math.pi * k * n / p + phase) for phase in (0.0, 1.0, 2.5)], 1)  # (p, 3)
        energy = fourier_energy(W)
        assert len(energy) == p // 2
        assert energy[k - 1] == pytest.approx(1.0) and sum(energy) == pytest.approx(1.0)
    assert sum(fourier_energy(torch.ones(p, 4))) == pytest.approx(0.0)  # a constant: all at k = 0


def test_number_embedding_reads_the_rows_of_the_numbers_and_the_norm_all_weights():
    p = 11
    _, tok, _ = _modadd(p)
    model = build_model(ModelConfig(vocab_size=tok.vocab_size, l_max=4, L=1, H=2, d_e=16, d_mlp=32))
    W = number_embedding(model, tok, p)
    assert W.shape == (p, 16) and torch.equal(W[7], model.embed.W_e.weight[tok.encode("7")[0]])
    with torch.no_grad():
        for q in model.parameters():
            q.fill_(0.5)
    assert weight_norm(model) == pytest.approx(0.5 * math.sqrt(model.num_parameters()), rel=1e-5)


def test_grokked_step_is_the_first_evaluation_at_95_percent():
    rows = [{"step": 1, "train_loss": 1.0}, {"step": 100, ACCURACY: 0.5}, {"step": 200, ACCURACY: 0.96},
            {"step": 300, ACCURACY: 0.99}]
    assert grokked_step(rows) == 200 and grokked_step(rows[:2]) is None and grokked_step(rows, 0.98) == 300


def test_an_evaluation_row_holds_the_grokking_numbers():
    row: MetricsRow = {"step": 5, "train_loss": 1.0, "lr": 1e-3, "grad_norm": 1.0}
    with_evaluation(row, 0.5, 0.7, 0.25, 0.75, 12.5, (0.5, 0.25))
    assert (row[ACCURACY], row[TRAIN_ACCURACY], row[WEIGHT_NORM], row[EMBED_FOURIER]) == (0.25, 0.75, 12.5, [0.5, 0.25])
    older: MetricsRow = {"step": 5}
    with_evaluation(older, 0.5, 0.7, None)
    assert set(older) == {"step", "eval_train_loss", "val_loss", "accuracy"}


def test_a_few_steps_on_modadd_record_accuracies_norm_and_spectrum(tmp_path):
    from fatstudio.core import training

    p = 7
    cfg = RunConfig(ModelConfig(l_max=4, L=1, H=2, d_e=16, d_mlp=32),
                    DataConfig(corpus="modadd", tokenizer="word", modadd_p=p, val_fraction=0.5),
                    TrainConfig(steps=4, batch_size=1000, eval_interval=2, eval_iters=1, checkpoint_interval=4,
                                warmup=0, sample_tokens=1, device="cpu", weight_decay=1.0))
    events = list(training.train(cfg, run_dir=tmp_path / "run"))
    evaluations = [e for e in events if isinstance(e, training.Evaluation)]
    assert [e.step for e in evaluations] == [2, 4]
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if ACCURACY in r]
    assert [r["step"] for r in rows] == [2, 4]
    for e, r in zip(evaluations, rows):
        assert 0 <= r[TRAIN_ACCURACY] <= 1 and 0 <= r[ACCURACY] <= 1 and r[TRAIN_ACCURACY] == e.train_accuracy
        assert len(r[EMBED_FOURIER]) == p // 2 and 0 < sum(r[EMBED_FOURIER]) <= 1
        assert r[WEIGHT_NORM] == pytest.approx(e.weight_norm) and r[WEIGHT_NORM] > 0
    assert evaluations[0].weight_norm != evaluations[1].weight_norm  # it moves as training does
    from fatstudio.core.inspect.token_loss import token_losses
    from fatstudio.core.runs.folder import Run

    with pytest.raises(ValueError, match="modadd"):  # its loss is the answer's: no per-token map of a text stream
        token_losses(Run.open(tmp_path / "run").load_model())
