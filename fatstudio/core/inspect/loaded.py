"""A trained model with what prompting it needs: its tokenizer, its run's config and class names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .decode_step import DecodeStep

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
    decoder: DecodeStep | None = field(default=None, repr=False, compare=False)  # see `decode_step`

    def decode_step(self) -> DecodeStep:
        """This model's compiled decode step for generating (`decode_step.DecodeStep`), made at the first call;
        it compiles, in the background, at its first use."""
        if self.decoder is None:
            self.decoder = DecodeStep(self.model)
        return self.decoder
