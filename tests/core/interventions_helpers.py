"""Tiny float64 models with weights large enough that every head and MLP matters, for the intervention tests."""
import torch

from fatstudio.core.config import ModelConfig
from fatstudio.core.model import build_model

ARCHS = {  # every architecture, and the variations that change what a head's or an MLP's output is
    "gpt": dict(arch="gpt"),
    "gopher": dict(arch="gopher"),
    "bert": dict(arch="bert"),
    "edt": dict(arch="edt"),
    "gpt-post-swiglu-gqa-rope": dict(arch="gpt", norm_position="post", activation="swiglu", H_kv=1, positions="rope"),
}
N_V = 13


def tiny(name="gpt", seed=0, **over):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=N_V, l_max=12, L=2, L_enc=2, L_dec=2, H=2, d_e=8, d_mlp=16, **ARCHS[name])
    cfg.update(over)
    model = build_model(ModelConfig(**cfg)).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.6)
            else:
                p.normal_(0.0, 0.3)  # biases, γ and β away from 0 and 1, so that each is seen
    return model


def inputs(model, B=3, T=7, seed=1):
    """(x, kwargs of the forward) for ``model``: a source for an encoder-decoder."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(N_V, (B, T), generator=g)
    kw = {"context": torch.randint(N_V, (B, T + 2), generator=g)} if model.config.arch == "edt" else {}
    return x, kw
