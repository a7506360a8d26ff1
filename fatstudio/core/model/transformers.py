"""The architectures: EDTransformer (Algorithm 8), ETransformer/BERT (Algorithm 9) and DTransformer/GPT-2
(Algorithm 10; Gopher is this with RMSnorm and relative positions). Each returns the logits W_u X whose
softmax is the paper's P; ``return_attention=True`` also returns every head's softmax(S/√d_attn):
(logits, attention maps), read at the hook points ``…/pattern`` (`hooks`)."""
from __future__ import annotations

import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..config import ModelConfig, ResolvedModelConfig
from ..names import StackKind, of_stack
from .attention import KVCache
from .embedding import Embedding, Unembedding
from .hooks import HookPoint, attending
from .layers import Layer
from .norm import Norm

AttentionWeights = dict[str, torch.Tensor]  # "self/l", "enc/l", "dec/l", "cross/l" -> (B, H, T_query, T_key)
Output = torch.Tensor | tuple[torch.Tensor, AttentionWeights]  # logits, or (logits, maps) with return_attention


class Transformer(nn.Module):
    """What the architectures share: the embedding, running a stack of layers, the unembedding, init.

    Built from a resolved configuration (`build_model` resolves it); ``config`` is that configuration as a
    ModelConfig, every paper default filled in.
    """

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__()
        self.config: ModelConfig = cfg.as_config()
        self.pre = cfg.norm_position == "pre"
        self.embed = Embedding(cfg)

    def hook_points(self) -> dict[str, HookPoint]:
        """Every hook point (`hooks`) by name, in the order a forward pass reaches them."""
        return {p.name: p for p in self._points()}

    def _points(self) -> list[HookPoint]:
        raise NotImplementedError

    @staticmethod
    def _stack(cfg: ResolvedModelConfig, kind: StackKind, n: int, causal: bool,
               cross: bool = False) -> tuple[nn.ModuleList, HookPoint, HookPoint, HookPoint | None]:
        """The n layers of a stack whose self-attention is ``kind`` ("self", "enc", "dec"), and the hook points of
        its embedding, of its output after the final norm ("embed", "final"; "enc-embed", …) and of the
        statistics of its embedding's norm ("embed-norm-stats"; None without ``embed_norm``)."""
        layers = nn.ModuleList(Layer(cfg, kind, l, causal, cross) for l in range(n))
        embed_norm = HookPoint(of_stack(kind, "embed-norm-stats")) if cfg.embed_norm else None
        return layers, HookPoint(of_stack(kind, "embed")), HookPoint(of_stack(kind, "final")), embed_norm

    @staticmethod
    def _stack_points(layers: nn.ModuleList, embed: HookPoint, embed_norm: HookPoint | None, final_norm: nn.Module,
                      final: HookPoint) -> list[HookPoint]:
        points = [embed, embed_norm, *(p for layer in layers for p in cast(Layer, layer).hook_points()),
                  final_norm.hook_stats if isinstance(final_norm, Norm) else None, final]
        return [p for p in points if p is not None]

    def _final_norm(self, cfg: ResolvedModelConfig, kind: StackKind) -> nn.Module:
        """Pre-LN stacks end with a norm (Algorithm 10's γ, β; its statistics "final-norm-stats", …); post-LN
        stacks are already normed."""
        return Norm(cfg.d_e, cfg.norm, cfg.norm_eps, of_stack(kind, "final-norm-stats")) if self.pre else nn.Identity()

    def _unembedding(self, cfg: ResolvedModelConfig, d: int) -> Unembedding:
        u = Unembedding(d, cfg.vocab_size, cfg.unembed_bias)
        if cfg.tie_embeddings:  # W_u = W_eᵀ
            u.W_u.weight = self.embed.W_e.weight
        return u

    def tie_unembedding(self) -> None:
        """W_u = W_eᵀ again, after the parameters were replaced (``load_state_dict(..., assign=True)``)."""
        unembed = self.unembed
        assert isinstance(unembed, Unembedding)
        unembed.W_u.weight = self.embed.W_e.weight

    @staticmethod
    def _run(layers: nn.ModuleList, X: torch.Tensor, **kw: Any) -> torch.Tensor:
        """X through each layer of the stack."""
        for layer in layers:
            X = layer(X, **kw)
        return X

    def _init_weights(self, n_layers: int) -> None:
        """N(0, 0.02) for matrices (Transformer-XL's per-head u and v, H × d_attn, among them), 0.02/√(2·layers)
        for the residual projections W_o and W_mlp2 (GPT-2); γ = 1; biases and β = 0."""
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("gamma"):
                    nn.init.ones_(p)
                elif p.dim() >= 2:
                    std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("W_o.weight", "W_mlp2.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)
                else:
                    nn.init.zeros_(p)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class DTransformer(Transformer):
    """Algorithm 10: decoder-only, causal. Column t of softmax(logits) is P̂(x[t+1] | x[1:t])."""

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__(cfg)
        self.layers, self.hook_embed, self.hook_final, self.hook_embed_norm = self._stack(cfg, "self", cfg.L,
                                                                                          causal=True)
        self.norm_final = self._final_norm(cfg, "self")
        self.unembed = self._unembedding(cfg, cfg.d_e)
        self._init_weights(cfg.L)

    def _points(self) -> list[HookPoint]:
        return self._stack_points(self.layers, self.hook_embed, self.hook_embed_norm, self.norm_final, self.hook_final)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, *, return_attention: bool = False,
                mask: torch.Tensor | None = None, cache: KVCache | None = None) -> Output:
        """x: (B, T) ids -> logits (B, T, N_V) [, {"self/l": (B, H, T, T_past + T)}]. mask: (B, T) bool, False
        at padding. cache: a KVCache to continue from (positions start at cache.length)."""
        if context is not None:
            raise ValueError(f"a {self.config.arch!r} model takes no context; only 'edt' models do.")
        if return_attention:
            return attending(self, lambda: self._logits(x, mask, cache))
        return self._logits(x, mask, cache)

    def _logits(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None) -> torch.Tensor:
        X = self.embed(x, cache.length if cache else 0, self.hook_embed, self.hook_embed_norm)
        X = self.hook_final(self.norm_final(self._run(self.layers, X, mask=mask, cache=cache)))
        if cache is not None:
            cache.length += x.shape[1]
        return self.unembed(X)


class ETransformer(Transformer):
    """Algorithm 9 (BERT): bidirectional encoder, then X ← layer_norm(GELU(W_f X + b_f)), logits W_u X.

    With ``n_classes`` > 0 a class head reads the final vector of the first token (bos) for P(c | x).
    """

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__(cfg)
        self.layers, self.hook_embed, self.hook_final, self.hook_embed_norm = self._stack(cfg, "self", cfg.L,
                                                                                          causal=False)
        self.norm_final = self._final_norm(cfg, "self")
        self.W_f = nn.Linear(cfg.d_e, cfg.d_f)
        self.norm_f = Norm(cfg.d_f, cfg.norm, cfg.norm_eps, "proj-norm-stats")
        self.unembed = self._unembedding(cfg, cfg.d_f)
        self.class_head = nn.Linear(cfg.d_f, cfg.n_classes) if cfg.n_classes else None
        self.hook_proj, self.hook_proj_norm = HookPoint("proj"), HookPoint("proj-norm")
        self._init_weights(cfg.L)

    def _points(self) -> list[HookPoint]:
        return [*self._stack_points(self.layers, self.hook_embed, self.hook_embed_norm, self.norm_final,
                                    self.hook_final), self.hook_proj, cast(HookPoint, self.norm_f.hook_stats),
                self.hook_proj_norm]

    def features(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The final representations (B, T, d_f)."""
        X = self.embed(x, 0, self.hook_embed, self.hook_embed_norm)
        X = self.hook_final(self.norm_final(self._run(self.layers, X, mask=mask)))
        return self.hook_proj_norm(self.norm_f(self.hook_proj(F.gelu(self.W_f(X)))))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, *, return_attention: bool = False,
                mask: torch.Tensor | None = None, cache: KVCache | None = None) -> Output:
        """x: (B, T) ids (with mask tokens) -> logits (B, T, N_V): column t predicts the token at t.
        ``cache`` is accepted for a common signature and unused: every position attends to every other."""
        if context is not None:
            raise ValueError("a 'bert' model takes no context; only 'edt' models do.")
        if return_attention:
            return attending(self, lambda: self.unembed(self.features(x, mask)))
        return self.unembed(self.features(x, mask))

    def classify(self, x: torch.Tensor, *, mask: torch.Tensor | None = None, return_attention: bool = False) -> Output:
        """Class logits (B, n_classes) from the first position's final vector [, attention maps]."""
        class_head = self.class_head
        if class_head is None:
            raise ValueError("this model has no class head; build it with n_classes > 0.")
        if return_attention:
            return attending(self, lambda: class_head(self.features(x, mask)[:, 0]))
        return class_head(self.features(x, mask)[:, 0])


class EDTransformer(Transformer):
    """Algorithm 8: an encoder over the context z and a causal decoder over x with cross-attention to it.

    Column t of softmax(logits) is P̂(x[t+1] | x[1:t], z). Attention keys: "enc/l", "dec/l", "cross/l".
    """

    def __init__(self, cfg: ResolvedModelConfig) -> None:
        super().__init__(cfg)
        self.encoder, self.hook_enc_embed, self.hook_enc_final, self.hook_enc_embed_norm = self._stack(
            cfg, "enc", cfg.L_enc, causal=False)
        self.norm_enc = self._final_norm(cfg, "enc")
        self.decoder, self.hook_dec_embed, self.hook_dec_final, self.hook_dec_embed_norm = self._stack(
            cfg, "dec", cfg.L_dec, causal=True, cross=True)
        self.norm_dec = self._final_norm(cfg, "dec")
        self.unembed = self._unembedding(cfg, cfg.d_e)
        self._init_weights(cfg.L_enc + cfg.L_dec)

    def _points(self) -> list[HookPoint]:
        return [*self._stack_points(self.encoder, self.hook_enc_embed, self.hook_enc_embed_norm, self.norm_enc,
                                    self.hook_enc_final),
                *self._stack_points(self.decoder, self.hook_dec_embed, self.hook_dec_embed_norm, self.norm_dec,
                                    self.hook_dec_final)]

    def encode(self, z: torch.Tensor, *, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Z = the encoder's output (B, T_z, d_e)."""
        Z = self._run(self.encoder, self.embed(z, 0, self.hook_enc_embed, self.hook_enc_embed_norm), mask=context_mask)
        return self.hook_enc_final(self.norm_enc(Z))

    def decode(self, x: torch.Tensor, Z: torch.Tensor, *, mask: torch.Tensor | None = None,
               context_mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """Logits (B, T_x, N_V) of the decoder on x attending to the encoded Z."""
        X = self.embed(x, cache.length if cache else 0, self.hook_dec_embed, self.hook_dec_embed_norm)
        X = self._run(self.decoder, X, mask=mask, Z=Z, z_mask=context_mask, cache=cache)
        if cache is not None:
            cache.length += x.shape[1]
        return self.unembed(self.hook_dec_final(self.norm_dec(X)))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, *, return_attention: bool = False,
                mask: torch.Tensor | None = None, context_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> Output:
        """x: (B, T_x) target ids, context: (B, T_z) source ids z -> logits (B, T_x, N_V) [, attention maps].
        mask, context_mask: (B, T_x), (B, T_z) bool, False at padding. cache: the decoder's KVCache."""
        if context is None:
            raise ValueError("an 'edt' model needs the source sequence: call model(x, context=z).")

        def logits() -> torch.Tensor:
            Z = self.encode(context, context_mask=context_mask)
            return self.decode(x, Z, mask=mask, context_mask=context_mask, cache=cache)
        return attending(self, logits) if return_attention else logits()


ARCHITECTURES: dict[str, type[Transformer]] = {"edt": EDTransformer, "bert": ETransformer, "gpt": DTransformer,
                                               "gopher": DTransformer}


def build_model(cfg: ModelConfig) -> Transformer:
    """Validate ``cfg`` and build its architecture with the paper's defaults filled in."""
    resolved = cfg.validate().resolved()
    return ARCHITECTURES[resolved.arch](resolved)


class _SkipInit(TorchFunctionMode):
    """torch.nn.init's functions leave their tensor as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def build_empty(cfg: ModelConfig, device: torch.device | str = "cpu") -> Transformer:
    """`build_model` with uninitialised memory on ``device``, for weights that are assigned next (every one).
    Built on the meta device with torch.nn.init switched off, then given storage: on the meta device torch's
    random fills and empty_like run its Python reference ops, whose imports (its compiler) take ~1.5 s."""
    with torch.device("meta"), _SkipInit():
        model = build_model(cfg)
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
