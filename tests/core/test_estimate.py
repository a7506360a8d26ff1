"""The measured estimate of a run's time: real steps timed, nothing written, the run's arithmetic."""
import pytest
from training_helpers import tiny_config

from fatstudio.core.data import corpora as data
from fatstudio.core.training import estimate
from fatstudio.core.training.estimate import TIMED_STEPS, WARMUP_STEPS, duration


def test_estimate_times_real_steps_and_adds_them_up(text_file, tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_RUNS", str(tmp_path / "runs"))
    from fatstudio.core import training

    stepped, messages = [], []
    real_step = training.Trainer.step
    monkeypatch.setattr(training.Trainer, "step", lambda self, step: stepped.append(step) or real_step(self, step))
    e = estimate.estimate(tiny_config(text_file, steps=25), progress=lambda f, m: messages.append((f, m)))
    assert stepped == list(range(1, WARMUP_STEPS + TIMED_STEPS + 1))
    assert e.evaluations == 3  # at steps 10, 20 and the last, 25
    assert e.step_s > 0 and e.evaluation_s > 0
    assert e.total_s == pytest.approx(25 * e.step_s + 3 * e.evaluation_s)
    assert e.describe() == f"25 steps ≈ {duration(e.total_s)} on cpu"
    assert "ms a step" in e.details() and "3 evaluations" in e.details()
    assert (0.6, "timing steps") in messages and any("tokenizing" in m for _, m in messages)
    assert [f for f, _ in messages] == sorted(f for f, _ in messages) and all(0 <= f < 1 for f, _ in messages)
    assert not (tmp_path / "runs").exists() and list(tmp_path.iterdir()) == [text_file]  # nothing written


def test_estimate_uses_the_prepared_corpus_and_refuses_bad_settings(text_file, monkeypatch):
    cfg = tiny_config(text_file, steps=10)
    corpus = data.load_corpus(str(text_file))
    from fatstudio.core.data.tokenization import train_tokenizer

    d = cfg.data
    prepared = data.Prepared(d.corpus, d.task, d.tokenizer, d.vocab_size, cfg.train.seed, corpus,
                             train_tokenizer(d.tokenizer, corpus.texts(), d.vocab_size))
    monkeypatch.setattr(data, "load_corpus", lambda *a, **k: pytest.fail("the prepared corpus was loaded again"))
    assert estimate.estimate(cfg, prepared).evaluations == 1
    with pytest.raises(ValueError, match="batch_size"):
        estimate.estimate(cfg.with_overrides(["train.batch_size=0"]), prepared)


def test_duration_reads_as_a_person_says_it():
    assert [duration(s) for s in (4.4, 59.6, 130, 3599, 3600 + 5 * 60 + 20)] == [
        "4 s", "1 min 00 s", "2 min 10 s", "59 min 59 s", "1 h 05 min"]



def test_estimate_without_a_validation_split_times_no_evaluation(text_file):
    """As the trainer does: with val_fraction = 0 there is nothing to evaluate, only the sample to write."""
    cfg = tiny_config(text_file, steps=10).with_overrides(["data.val_fraction=0.0"])
    e = estimate.estimate(cfg)
    assert e.evaluations == 1 and e.total_s == pytest.approx(10 * e.step_s + e.evaluation_s)
