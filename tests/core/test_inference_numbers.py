"""Generation's sliding window and the induction score, pinned against definitions written out here: the
windows the model reads (cached or not) are the last tokens, full ℓ_max windows before each slide; the
induction score is the mean of A[h, p, p-n+1] over the second copy's queries p = n+1 … 2n."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference.generation import generate
from fatstudio.core.inspect import head_scores as hs
from fatstudio.core.names import MapName

TOK = train_tokenizer("char", ["abcdefghijklmnopqrstuvwxyz .,"])
L_MAX = 16


def tiny(l_max: int = L_MAX, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(ModelConfig(arch="gpt", vocab_size=TOK.vocab_size, l_max=l_max, L=2, H=2, d_e=16, d_mlp=32))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.4)
    return model.eval()


class Recording(torch.nn.Module):
    """The model, with each call's input ids and whether it started a new KV cache (a fresh window)."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config
        self.calls: list[tuple[list[int], bool]] = []

    def forward(self, x, cache=None):
        self.calls.append((x[0].tolist(), cache is None or cache.length == 0))
        return self.inner(x, cache=cache)


def expected_windows(prompt: list[int], output: list[int], l_max: int, slide: int) -> list[list[int]]:
    """What the model reads before each new token: the prompt's last l_max tokens, growing by each token
    drawn until it is l_max long; one more token and the oldest ``slide`` are dropped."""
    window, windows = prompt[-l_max:], []
    for y in output:
        if len(window) > l_max:
            window = window[slide:]
        windows.append(list(window))
        window = window + [y]
    return windows


@pytest.mark.parametrize("slide", [None, 1, 5, L_MAX])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_reads_full_l_max_windows_sliding_by_slide(slide, use_cache):
    model = Recording(tiny())
    prompt = "the quick brown fox jumps"  # longer than l_max: its last l_max tokens
    out = [c.id for c in generate(model, TOK, prompt, tokens=3 * L_MAX, temperature=0, slide=slide,
                                  use_cache=use_cache)]
    want = expected_windows(TOK.encode(prompt), out, L_MAX, max(1, L_MAX // 8) if slide is None else slide)
    assert max(map(len, want)) == L_MAX  # the window fills before it slides
    read: list[list[int]] = []  # what the model holds at each token: the cache's tokens and the new ones
    for ids, fresh in model.calls:
        read.append(ids if fresh else read[-1] + ids)
        assert fresh or len(ids) == 1  # a cached step reads one token
        assert fresh or use_cache
    assert read == want
    never = torch.tensor([TOK.pad_id, TOK.mask_id, TOK.bos_id])  # never drawn
    with torch.no_grad():  # and each token is the model's argmax on its window
        greedy = [int(model.inner(torch.tensor([w]))[0, -1].index_fill(0, never, -torch.inf).argmax()) for w in want]
    assert greedy == out


# ---- induction -------------------------------------------------------------------------------------------
def test_induction_score_is_the_mean_over_the_second_copy_of_the_weight_after_the_earlier_occurrence():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5):
        T = 2 * n + 1
        A = rng.random((3, T, T))
        A /= A.sum(-1, keepdims=True)
        want = [np.mean([A[h, p, p - n + 1] for p in range(n + 1, 2 * n + 1)]) for h in range(3)]
        np.testing.assert_allclose(hs.induction_score(A, n), want, rtol=1e-12)
        longer = np.pad(A, ((0, 0), (0, 2), (0, 2)))  # maps longer than 2n+1: the same queries and keys
        np.testing.assert_allclose(hs.induction_score(longer, n), want, rtol=1e-12)


@pytest.mark.parametrize("l_max, n", [(3, 1), (16, 7), (17, 8), (120, 50)])
def test_head_scores_measure_induction_on_bos_r_r_of_length_n(l_max, n):
    """n = min(50, (l_max - 1) // 2); the model reads [bos] + r + r, r = n ordinary tokens; each head's
    induction score is the definition above on the model's own attention for that sequence."""
    model = tiny(l_max)
    scores = hs.head_scores(model, TOK, seed=4)
    assert scores.n == n
    ids = hs.repeated_tokens(TOK, n, seed=4)
    assert len(ids) == 2 * n + 1 and ids[0] == TOK.bos_id and ids[1:n + 1] == ids[n + 1:]
    with torch.no_grad():
        _, attn = model(torch.tensor([ids]), return_attention=True)
    for name, A in attn.items():
        A = A[0].double().numpy()
        want = [np.mean([A[h, p, p - n + 1] for p in range(n + 1, 2 * n + 1)]) for h in range(A.shape[0])]
        np.testing.assert_allclose(scores.get(MapName.parse(name), "induction"), want, rtol=1e-6)
