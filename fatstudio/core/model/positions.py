"""Positional information (Algorithm 2 and the variations): sinusoidal tables, rotary positions (RoPE),
ALiBi slopes and the sinusoids of Transformer-XL relative distances (Gopher).

The tables are computed once, in float64 on the CPU (even inside ``with torch.device("meta")``, where a model is
built without memory to be loaded from a file), and kept as buffers in the model's dtype and device
(`FixedTables`), so a forward pass never computes them again nor touches float64 (Apple MPS has none)."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

CPU = torch.device("cpu")  # where the tables are computed, also while a model is built on the meta device


def sinusoids(t: torch.Tensor, d: int, base: float) -> torch.Tensor:
    """Rows [sin(t/b^{2i/d}), cos(t/b^{2i/d})] interleaved, i = 1..d/2 (Algorithm 2): (len(t), d), float64.

    Row ``2i-1`` (1-based) holds the sine and row ``2i`` the cosine, exactly as the paper's W_p[:, t].
    """
    i = torch.arange(1, d // 2 + 1, dtype=torch.float64, device=t.device)
    angle = t.to(torch.float64)[:, None] / base ** (2 * i / d)  # (T, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (T, d)


def rope_angles(n: int, d: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles t·b^{-2i/d} of positions t = 0..n-1, i = 0..d/2-1: each (n, d/2)."""
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=CPU) / d)
    angle = torch.arange(n, dtype=torch.float64, device=CPU)[:, None] * inv_freq
    return angle.cos(), angle.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_{2i}, x_{2i+1}) of the last axis by its angle. x: (..., T, d); cos, sin: (T, d/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # x is lower precision under autocast
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rows(table: torch.Tensor, offset: int | torch.Tensor, T: int) -> torch.Tensor:
    """Rows offset..offset+T-1 of ``table``. ``offset`` is an int, or a 0-d tensor (the position of a static
    decode step, `attention.StaticKVCache`), read on the device so that one compiled graph serves every position."""
    if isinstance(offset, int):
        return table[offset:offset + T]
    return table.index_select(0, offset + torch.arange(T, device=table.device))


def alibi_slopes(H: int) -> torch.Tensor:
    """ALiBi's head slopes m_h = 2^{-8h/H}, h = 1..H (Press et al.), float64."""
    return torch.tensor([2.0 ** (-8.0 * h / H) for h in range(1, H + 1)], dtype=torch.float64, device=CPU)


def scale(d_attn: int) -> float:
    """The 1/√d_attn of Algorithms 3-4."""
    return 1.0 / math.sqrt(d_attn)


class FixedTables(nn.Module):
    """A module with fixed tables: non-persistent buffers in the module's dtype and device whose float64
    master copies stay on the CPU. Casting or moving the module (``.to``, ``.double()``, ``.half()``, …)
    re-derives each buffer from its master, so a float64 model gets the tables exact, not float32 upcast."""

    def __init__(self) -> None:
        super().__init__()
        self._masters: dict[str, torch.Tensor] = {}

    def register_table(self, name: str, master: torch.Tensor) -> None:
        self._masters[name] = master
        self.register_buffer(name, master.to(torch.get_default_dtype()), persistent=False)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> FixedTables:
        super()._apply(fn, recurse)
        for name, master in self._masters.items():
            now = self._buffers[name]
            assert now is not None  # a table is registered as a tensor, never as None
            self._buffers[name] = master.to(now.dtype).to(now.device)  # cast on the CPU: MPS takes no float64
        return self
