"""Benchmark: the fused attention kernel (scaled_dot_product_attention, used when attention weights are not
requested) against the explicit softmax path (used for return_attention=True), forward + backward of the
whole model, B=12, H=4, d_attn=32, at T=64 and T=256. Interleaves A B A B and prints medians.
    OMP_NUM_THREADS=1 python bench/bench_attention.py"""
import statistics
import time

import torch

from fatstudio import ModelConfig, build_model


def step(model, x, explicit: bool) -> None:
    out = model(x, return_attention=True)[0] if explicit else model(x)
    out.float().logsumexp(-1).mean().backward()


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


if __name__ == "__main__":
    main()
