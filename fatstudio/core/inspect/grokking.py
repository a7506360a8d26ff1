"""What the grokking lab measures (Power et al. 2022; Nanda et al. 2023) on the "modadd" corpus: the token
embedding's energy per frequency over the numbers 0 … p-1, and the weights' norm. The trainer records both at
each evaluation (`records.EMBED_FOURIER`, `records.WEIGHT_NORM`); `records.grokked_step` reads the step at
which validation accuracy passed 95 %."""
from __future__ import annotations

import torch

from ..data.tokenization import TokenizerLike


def number_embedding(model: torch.nn.Module, tokenizer: TokenizerLike, p: int) -> torch.Tensor:
    """The rows of W_e (Algorithm 1) of the tokens "0" … "p-1", in that order: (p, d_e), float32 on the CPU."""
    ids = []
    for n in range(p):
        encoded = tokenizer.encode(str(n))
        if len(encoded) != 1:
            raise ValueError(f"the number {n} is not one token of this tokenizer, so its embedding has no row.")
        ids += encoded
    W_e = model.get_parameter("embed.W_e.weight")
    return W_e.detach()[ids].to("cpu", torch.float32)


def fourier_energy(W: torch.Tensor) -> list[float]:
    """The share of the energy of ``W`` (p, d) at each frequency k = 1 … p//2 of the discrete Fourier transform
    over its rows: Σ_d |F_k|² + |F_(p-k)|² (k = p/2 once), divided by Σ_k Σ_d |F_k|² over all k, 0 included.
    A row index encoded as cos(2πkn/p) puts all of it at k; the mean over rows (k = 0) is the rest."""
    F = torch.fft.fft(W.double(), dim=0)  # (p, d)
    power = (F.real ** 2 + F.imag ** 2).sum(1)  # (p,)
    p = W.shape[0]
    total = float(power.sum()) or 1.0
    return [float(power[k] + (power[p - k] if p - k != k else 0.0)) / total for k in range(1, p // 2 + 1)]


@torch.no_grad()
def weight_norm(model: torch.nn.Module) -> float:
    """‖θ‖₂: the Euclidean norm of every parameter together (a tied W_u counted once); weight decay shrinks it."""
    return float(torch.stack([(q.detach().float() ** 2).sum() for q in model.parameters()]).sum().sqrt().cpu())

