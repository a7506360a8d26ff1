"""fatstudio: a playground for the transformer algorithms of "Formal Algorithms for Transformers".

``from fatstudio import ModelConfig, build_model``. Importing fatstudio imports neither Qt nor torch;
``build_model`` imports torch when first used.
"""
from typing import Any

from .core.config import DataConfig, ModelConfig, RunConfig, TrainConfig

__version__ = "0.1.0"
__all__ = ["ModelConfig", "DataConfig", "TrainConfig", "RunConfig", "build_model", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "build_model":
        from .core.model import build_model
        return build_model
    raise AttributeError(f"module 'fatstudio' has no attribute {name!r}")
