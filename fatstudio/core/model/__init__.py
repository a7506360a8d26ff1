"""The model: Algorithms 1-10 and their variations."""
from .attention import KVCache, KVSlot, MHAttention
from .transformers import (
    AttentionWeights,
    DTransformer,
    EDTransformer,
    ETransformer,
    Transformer,
    build_empty,
    build_model,
)

__all__ = ["AttentionWeights", "KVCache", "KVSlot", "MHAttention", "Transformer", "DTransformer", "EDTransformer",
           "ETransformer", "build_empty", "build_model"]
