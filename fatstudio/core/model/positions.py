"""Positional information (Algorithm 2 and the variations): sinusoidal tables, rotary positions (RoPE),
ALiBi slopes and the sinusoids of Transformer-XL relative distances (Gopher)."""
import math

import torch


def sinusoids(t: torch.Tensor, d: int, base: float) -> torch.Tensor:
    """Rows [sin(t/b^{2i/d}), cos(t/b^{2i/d})] interleaved, i = 1..d/2 (Algorithm 2): (len(t), d).

    Row ``2i-1`` (1-based) holds the sine and row ``2i`` the cosine, exactly as the paper's W_p[:, t].
    """
    i = torch.arange(1, d // 2 + 1, dtype=torch.float64, device=t.device)
    angle = t.to(torch.float64)[:, None] / base ** (2 * i / d)  # (T, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (T, d)


def rope_angles(pos: torch.Tensor, d: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles pos·b^{-2i/d}, i = 0..d/2-1, each (T, d/2)."""
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=pos.device) / d)
    angle = pos.to(torch.float64)[:, None] * inv_freq
    return angle.cos(), angle.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_{2i}, x_{2i+1}) of the last axis by its angle. x: (..., T, d)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def alibi_slopes(H: int) -> torch.Tensor:
    """ALiBi's head slopes m_h = 2^{-8h/H}, h = 1..H (Press et al.)."""
    return torch.tensor([2.0 ** (-8.0 * h / H) for h in range(1, H + 1)], dtype=torch.float64)


def relative_distances(pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
    """i - j for every query position i and key position j: (T_q, T_k)."""
    return pos_q[:, None] - pos_k[None, :]


def scale(d_attn: int) -> float:
    """The 1/√d_attn of Algorithms 3-4."""
    return 1.0 / math.sqrt(d_attn)
