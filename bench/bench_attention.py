"""Benchmark: the fused attention kernel (scaled_dot_product_attention, used when attention weights are not
requested) against the explicit softmax path (used for return_attention=True), forward + backward of the
whole model, B=12, H=4, d_attn=32, at T=64 and T=256; then greedy decoding with the KV cache (one token per
forward) against without it (the whole sequence per token) on the recipe-size GPT (L=4, H=4, d_e=128,
ℓ_max=64). Interleaves A B A B and prints medians.
    OMP_NUM_THREADS=1 python bench/bench_attention.py"""
import statistics
import time

import torch

from fatstudio import ModelConfig, build_model
from fatstudio.core.model import KVCache


def step(model, x, explicit: bool) -> None:
    out = model(x, return_attention=True)[0] if explicit else model(x)
    out.float().logsumexp(-1).mean().backward()


@torch.no_grad()
def decode(model, cached: bool) -> float:
    """Seconds per token to greedily extend a 1-token prompt to ℓ_max tokens."""
    x = torch.zeros(1, 1, dtype=torch.long)
    cache = KVCache() if cached else None
    logits = model(x, cache=cache)
    t0 = time.perf_counter()
    while x.shape[1] < model.config.l_max:
        y = logits[:, -1:].argmax(-1)
        x = torch.cat([x, y], 1)
        logits = model(y if cached else x, cache=cache)
    return (time.perf_counter() - t0) / (x.shape[1] - 1)


def main() -> None:
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    for T in (64, 256):
        model = build_model(ModelConfig(vocab_size=65, l_max=T, L=4, H=4, d_e=128, d_mlp=512, bias=False))
        x = torch.randint(0, 65, (12, T))
        times = {False: [], True: []}
        for i in range(24):
            for explicit in (False, True):
                t0 = time.perf_counter()
                step(model, x, explicit)
                if i >= 4:
                    times[explicit].append(time.perf_counter() - t0)
        fused, expl = statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3
        print(f"T={T}: fused {fused:.1f} ms, explicit {expl:.1f} ms, fused is {expl / fused:.2f}x faster")
    model = build_model(ModelConfig(vocab_size=65, l_max=64, L=4, H=4, d_e=128, d_mlp=512, bias=False,
                                    tie_embeddings=True)).eval()
    times = {True: [], False: []}
    for i in range(24):
        for cached in (True, False):
            t = decode(model, cached)
            if i >= 4:
                times[cached].append(t)
    with_cache, without = statistics.median(times[True]) * 1e3, statistics.median(times[False]) * 1e3
    print(f"decoding: {with_cache:.3f} ms/token with the KV cache, {without:.3f} without, "
          f"the cache is {without / with_cache:.2f}x faster")


if __name__ == "__main__":
    main()
