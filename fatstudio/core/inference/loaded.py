"""A trained model with what prompting it needs: its tokenizer, its run's config and class names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..data.tokenization import Tokenizer
    from ..model import Transformer


@dataclass
class LoadedModel:
    """A model ready for prompting: in eval mode (on the CPU unless `Run.load_model` was asked for another
    device), never the live training model."""

    model: Transformer  # built by `model.build_model` from config.model
    tokenizer: Tokenizer
    config: RunConfig
    class_names: list[str] = field(default_factory=list)
    label: str = ""
    step: int = 0
    # its `decode_step.DecodeStep`, once asked for; not an init field, so a copy (dataclasses.replace) has none
    decoder: Any = field(default=None, init=False, repr=False, compare=False)
