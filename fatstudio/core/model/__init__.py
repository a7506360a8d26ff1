"""The model: Algorithms 1-10 and their variations."""
from .attention import KVCache, MHAttention
from .transformers import DTransformer, EDTransformer, ETransformer, build_model

__all__ = ["KVCache", "MHAttention", "DTransformer", "EDTransformer", "ETransformer", "build_model"]
