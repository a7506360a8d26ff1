"""The "repeat" corpus's second copies: `repeat_lookback` marks exactly the characters that follow by induction,
and `second_copy_mask` the validation batch's targets whose first copy is in the row."""
import numpy as np
import pytest

from fatstudio.core.config import RunConfig
from fatstudio.core.data.builtin import repeat_lookback, repeat_sequences
from fatstudio.core.data.corpora import build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inspect.ablation import second_copy_mask, validation_batch


def test_the_lookback_marks_each_second_copy_after_its_first_token():
    text, back = load_corpus("repeat", seed=3).text, repeat_lookback(3)
    assert len(back) == len(text)
    j = np.flatnonzero(back)
    n = back[j]
    chars = np.frombuffer(text.encode("ascii"), np.uint8)
    assert (chars[j] == chars[j - n]).all() and (chars[j - 1] == chars[j - 1 - n]).all()  # induction's rule
    assert len(j) == sum(len(r) - 1 for r in repeat_sequences(3))  # every second copy, less its first token
    first = np.cumsum([0] + [2 * len(r) for r in repeat_sequences(3)])[:-1]  # where each r + r begins
    assert not back[first].any() and not back[first + [len(r) for r in repeat_sequences(3)]].any()


def test_the_mask_keeps_the_targets_an_induction_head_can_read_off_the_row():
    cfg = RunConfig.from_dict({"model": {"l_max": 26}, "data": {"corpus": "repeat", "tokenizer": "char"},
                               "train": {"batch_size": 16, "eval_iters": 3, "seed": 4}})
    corpus = load_corpus("repeat", seed=4)
    tok = train_tokenizer("char", corpus.texts())
    data = build_dataset(corpus, tok, "next_token", 26, cfg.data.val_fraction, 0.15, 4)
    val = validation_batch(data, "next_token", 16, 3, 4, tok.pad_id)
    mask = second_copy_mask(cfg, data)
    assert mask.shape == val.rows["y"].shape and 0.25 < mask.float().mean() < 0.6
    x, y = val.rows["x"].numpy(), val.rows["y"].numpy()
    for b, t in zip(*np.nonzero(mask.numpy())):  # x_t came before, followed by y_t
        assert any(x[b, t - m] == x[b, t] and x[b, t - m + 1] == y[b, t] for m in range(1, t + 1)), (b, t)
    assert not mask[:, 0].any()  # the first target has no earlier token to look at
    with pytest.raises(ValueError, match="repeat"):
        second_copy_mask(RunConfig.from_dict({"data": {"corpus": "reverse"}}), data)
