"""The loss of every validation token: each scored once (next-token: with at least l_max/2 tokens of context;
masked LM: masked exactly once; seq2seq: every target token of every pair), their mean the validation loss of the
same rows, a diff whose Δs sum to N × the difference of the means, and the classes of tokens."""
import math

import numpy as np
import pytest
import torch
from interventions_helpers import tiny

from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.corpora import IGNORE
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.scoring import window_starts
from fatstudio.core.inspect.token_classes import (
    KINDS,
    UNSEEN,
    breakdown,
    context_before,
    frequency_buckets,
    kind_of,
    report,
    text_lines,
    worst,
)
from fatstudio.core.inspect.token_loss import diff, token_losses, validation_split
from fatstudio.core.training import task_loss

TEXT = "".join(f"line {i}: the fox {i * 7 % 13} jumps.\n" for i in range(60))


@pytest.fixture
def loaded(tmp_path):
    def make(seed=0, l_max=12, arch="gpt", task="next_token", p_mask=0.15):
        if task == "seq2seq":
            p = tmp_path / "pairs.tsv"
            p.write_text("".join(f"{w}{i}\t{w[::-1]}{i % 7}\n" for i, w in enumerate(["abc", "hello", "xyz!"] * 30)),
                         encoding="utf-8")
            texts = [line.replace("\t", " ") for line in p.read_text().splitlines()]
        else:
            p = tmp_path / "c.txt"
            p.write_text(TEXT, encoding="utf-8")
            texts = [TEXT]
        tok = train_tokenizer("char", texts)
        model = tiny(arch, seed=seed, vocab_size=tok.vocab_size, l_max=l_max).float()
        data = DataConfig(corpus=str(p), val_fraction=0.1, task=task, p_mask=p_mask, split="tail")  # the last 10%
        cfg = RunConfig(model.config, data,
                        TrainConfig(seed=3))
        return LoadedModel(model, tok, cfg, label=f"seed {seed}")
    return make


def _validation_loss(run, rows, task):
    with torch.no_grad():
        loss, _, _ = task_loss(run.model, rows, task)
    return float(loss)


def test_every_validation_token_once_and_the_mean_is_the_loss_of_the_windows(loaded):
    run = loaded()
    split = validation_split(run)
    val = split.ids
    l_max = run.model.config.l_max
    result = token_losses(run, split)
    assert result.n_tokens == len(val) > 100 and result.tokens == run.tokenizer.token_strings(val.tolist())
    assert result.train_counts is not None and result.train_counts.sum() == int(len(TEXT) * 0.9)
    # the same windows, rebuilt here, counting each target once, through the training loss
    context = np.asarray(run.tokenizer.encode(TEXT))[:int(len(TEXT) * 0.9)][-l_max:]
    ids = torch.tensor([*context.tolist(), *val.tolist()])
    starts = window_starts(len(ids), l_max)
    x = torch.stack([ids[s:s + l_max] for s in starts])
    y = torch.stack([ids[s + 1:s + l_max + 1] for s in starts])
    done = len(context) - 1  # targets 1 … done are context only (the train split's tail)
    for row, s in enumerate(starts):
        y[row, :max(0, done - s)] = IGNORE
        done = max(done, s + l_max)
    counted = y != IGNORE
    first = [int(r.nonzero()[0]) for r in counted if r.any()]  # each window's first counted target…
    assert min(first) + 1 >= math.ceil(l_max / 2)  # …is predicted from at least l_max/2 tokens
    assert int((y != IGNORE).sum()) == len(val)
    assert abs(result.mean - _validation_loss(run, {"x": x, "y": y}, "next_token")) <= 1e-5
    assert abs(result.mean - float(np.mean(result.loss))) <= 1e-9


def test_masked_lm_masks_each_token_once_with_the_validation_rule_and_the_mean_is_their_loss(loaded):
    run = loaded(arch="bert", task="masked_lm", p_mask=0.25)
    split = validation_split(run)
    x, y, mask_id = split.rows["x"], split.rows["y"], run.tokenizer.mask_id
    counted = y != IGNORE
    assert int(counted.sum()) == len(split.ids)  # every validation token counted once…
    assert sorted(split.order.tolist()) == list(range(len(split.ids)))  # …each at its own place
    assert np.array_equal(y[counted].numpy(), split.ids[split.order])
    assert bool((x[counted] == mask_id).all())  # a scored token is masked (replaced by mask_id, as validation does)
    rate = float((x == mask_id).float().mean())
    assert 0.15 < rate < 0.35  # about p_mask of every window is masked, context included
    result = token_losses(run, split)
    assert result.tokens == run.tokenizer.token_strings(split.ids.tolist())
    assert abs(result.mean - _validation_loss(run, split.rows, "masked_lm")) <= 1e-5
    # one token by hand: the row that masks it, its loss there
    t = len(split.ids) // 2
    r, c = [int(v) for v in counted.nonzero()[int(np.nonzero(split.order == t)[0][0])]]
    with torch.no_grad():
        logp = run.model(x[r:r + 1]).log_softmax(-1)[0, c]
    assert abs(-float(logp[split.ids[t]]) - result.loss[t]) <= 1e-5
    # each scored token reads l_max/4 tokens on each side where the split has them
    l_max = run.model.config.l_max
    cols = counted.nonzero()[:, 1]
    inner = (split.order >= l_max // 4) & (split.order < len(split.ids) - l_max)
    assert bool(((cols >= l_max // 4) & (cols < l_max - l_max // 4 + 1)).numpy()[np.argsort(split.order)][inner].all())


def test_seq2seq_scores_every_target_token_and_eos_of_every_pair(loaded):
    run = loaded(arch="edt", task="seq2seq")
    split = validation_split(run)
    result = token_losses(run, split)
    pairs = split.sources
    assert pairs is not None and len(pairs) == len(split.pair_starts) == round(90 * 0.1)
    assert result.tokens.count("<eos>") == len(pairs)  # each pair's target ends with eos
    assert all(result.tokens[int(s) - 1] == "<eos>" for s in split.pair_starts[1:])
    assert abs(result.mean - _validation_loss(run, split.rows, "seq2seq")) <= 1e-5
    assert context_before(result, int(split.pair_starts[1]) + 2).startswith(f"{pairs[1]} → ")
    assert len(text_lines(result)) - 1 == len(pairs)  # a pair a line


def test_a_diff_s_deltas_sum_to_n_times_the_difference_of_the_means(loaded):
    a, b = token_losses(loaded(seed=0)), token_losses(loaded(seed=1, l_max=10))
    d = diff(a, b)
    assert abs(math.fsum(d.delta) - a.n_tokens * (a.mean - b.mean)) <= 1e-6
    assert max(map(abs, d.delta)) > 1e-3
    out = report(d)
    assert out["delta_mean"] == pytest.approx(a.mean - b.mean) and out["against"]["loss"] == b.loss.tolist()
    assert d.csv().splitlines()[0] == "position,token,loss,against_loss,delta_loss"
    # per class: the Δs of a family's classes, weighted by their counts, sum to N × Δ of the means
    for family in ("kind", "frequency"):
        rows = [r for r in breakdown(a, b) if r.family == family]
        assert abs(sum(r.count * r.delta for r in rows) - a.n_tokens * d.delta_mean) <= 1e-6
    other = token_losses(loaded(seed=1))
    other.ids = other.ids[1:]
    with pytest.raises(ValueError, match="different tokens"):
        diff(a, other)


def test_the_classes_cover_every_token_once_and_their_losses_sum_to_the_total(loaded):
    result = token_losses(loaded())
    rows = breakdown(result)
    assert {r.family for r in rows} == {"kind", "frequency"}
    for family in ("kind", "frequency"):
        mine = [r for r in rows if r.family == family]
        assert sum(r.count for r in mine) == result.n_tokens
        assert abs(sum(r.count * r.mean_loss for r in mine) - math.fsum(result.loss)) <= 1e-6
    kinds = {r.name: r for r in rows if r.family == "kind"}
    assert kinds["digits"].count == sum(t.isdigit() for t in result.tokens)
    assert kinds["space and newline"].count == sum(t in " \n" for t in result.tokens)
    assert kinds["punctuation"].count == sum(t in ":." for t in result.tokens)
    assert kinds["letters"].mean_loss == pytest.approx(np.mean([l for t, l in zip(result.tokens, result.loss)
                                                                 if t.isalpha()]))
    assert report(result)["classes"][0]["family"] == "kind"


def test_kinds_and_frequency_buckets():
    assert [kind_of(t) for t in ("a", " the", "7", "12", " ", "\n", ",", "==", "ing,", "<eos>")] == \
        ["letters", "letters", "digits", "digits", "space and newline", "space and newline", "punctuation",
         "punctuation", "other", "other"]
    assert set(KINDS) >= {"letters", "digits", "space and newline", "punctuation", "other"}
    counts = np.array([50, 0, 20, 20, 5, 5])  # 100 training tokens
    bucket, names = frequency_buckets(counts)
    assert bucket.tolist() == [0, 4, 2, 2, 3, 3]  # Q1: token 0 alone (half the mass), none in Q2; 1 never seen
    assert names[0].startswith("Q1") and "rank 1)" in names[0] and names[-1] == UNSEEN


def test_the_worst_tokens_are_the_largest_losses_with_the_text_before_them(loaded):
    result = token_losses(loaded())
    top = worst(result, 5, context=6)
    assert [w.value for w in top] == sorted(result.loss, reverse=True)[:5]
    for w in top:
        assert w.context == "".join(result.tokens[max(0, w.position - 6):w.position])
        assert result.tokens[w.position] == w.token
    lines = text_lines(result, width=30)
    assert lines[0] == 0 and lines[-1] == result.n_tokens and all(np.diff(lines) > 0)
    assert all(sum(len(t) for t in result.tokens[a:b]) <= 30 for a, b in zip(lines[:-1], lines[1:]))


def test_a_run_of_another_task_is_refused(loaded):
    run = loaded()
    run.config = run.config.with_overrides(["data.task=classification"])
    with pytest.raises(ValueError, match="classification"):
        token_losses(run)


def test_the_repeat_corpus_is_cut_into_first_copies_and_second_copies():
    from fatstudio.core.data.builtin import COPIES, repeat_lookback, repeat_sequences, text_parts

    text = "".join(r + r for r in repeat_sequences(5))
    family, names, part = text_parts("repeat", text, 5)
    assert (family, names) == ("copy", COPIES) and len(part) == len(text)
    assert np.array_equal(part == 2, repeat_lookback(5) > 0)  # the rest of a second copy: what induction predicts
    starts = np.cumsum([0] + [2 * len(r) for r in repeat_sequences(5)])[:-1]
    seconds = starts + np.array([len(r) for r in repeat_sequences(5)])
    assert np.flatnonzero(part == 1).tolist() == seconds.tolist()  # each second copy's first letter
    assert text_parts("repeat", text[:-1], 5) is None  # not this seed's text
    assert text_parts("python-stdlib", "def f(): pass\n", 0) is None


def test_a_synthetic_task_s_text_is_cut_into_question_separator_answer_and_end_of_line():
    from fatstudio.core.data.builtin import PARTS, text_parts

    family, names, part = text_parts("add", "12+34=46\n1+1=2\n", 0)
    assert (family, names) == ("part", PARTS)
    assert part.tolist() == [0] * 5 + [1] + [2] * 2 + [3] + [0] * 3 + [1, 2, 3]


def test_a_repeat_run_s_tokens_are_classed_by_copy_and_a_bpe_run_s_are_not(tmp_path):
    from fatstudio.core.data.builtin import COPIES, text_parts
    from fatstudio.core.data.corpora import build_dataset, load_corpus
    from fatstudio.core.inspect.token_loss import task_classes

    corpus = load_corpus("repeat", seed=2)
    tok = train_tokenizer("char", [corpus.text])
    model = tiny("gpt", vocab_size=tok.vocab_size, l_max=12).float()
    config = RunConfig(model.config, DataConfig(corpus="repeat", val_fraction=0.05), TrainConfig(seed=2))
    result = token_losses(LoadedModel(model, tok, config, label="repeat"))
    _, _, part = text_parts("repeat", corpus.text, 2)
    dataset = build_dataset(corpus, tok, "next_token", 12, 0.05, seed=2)
    expected = part[dataset.positions("val", np.arange(result.n_tokens))]
    assert result.task_classes is not None and np.array_equal(result.task_classes.of, expected)
    rows = [r for r in breakdown(result) if r.family == "copy"]
    assert [r.name for r in rows] == list(COPIES) and sum(r.count for r in rows) == result.n_tokens
    assert rows[2].mean_loss == pytest.approx(float(result.loss[expected == 2].mean()))
    assert report(result)["classes"][0]["family"] == "copy"  # the task's own classes come first
    bpe = train_tokenizer("bpe", [corpus.text[:20_000]], vocab_size=300)
    assert task_classes(config, corpus, build_dataset(corpus, bpe, "next_token", 12, 0.05, seed=2)) is None


def test_seq2seq_tokens_are_classed_by_their_place_in_the_target(loaded):
    result = token_losses(loaded(arch="edt", task="seq2seq"))
    starts = result.pair_starts
    rows = {r.name: r for r in breakdown(result) if r.family == "target"}
    assert [r.family for r in breakdown(result)][0] == "target"
    assert rows["first target token"].count == rows["eos (the end)"].count == len(starts)
    assert rows["later target tokens"].count == result.n_tokens - 2 * len(starts)
    ends = np.append(starts[1:], result.n_tokens) - 1
    assert rows["eos (the end)"].mean_loss == pytest.approx(float(result.loss[ends].mean()))
    assert all(result.tokens[int(e)] == "<eos>" for e in ends)
