"""The settings a new run starts with (one ``RunConfig``), validated after every change and announced by a psygnal
signal; the window's forms are bound to them field by field (`qt.binding`). They know the preset they were set
from and whether they still are its."""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psygnal import Signal

from ..config import DataConfig, ModelConfig, RunConfig, TrainConfig
from ..runs.presets import Preset

SECTIONS = tuple(f.name for f in dataclasses.fields(RunConfig))  # "model", "data", "train"
DERIVED = "derived"
PRESET = "preset"  # a Change of the preset the settings were set from (``Settings.base``), the config unchanged


@dataclass(frozen=True)
class Change:
    """What one change changed: section -> the names of its fields that now hold other values."""

    names: Mapping[str, frozenset[str]]

    def of(self, section: str) -> frozenset[str]:
        return self.names.get(section, frozenset())

    def touches(self, section: str, *names: str) -> bool:
        """Whether ``section`` changed (any of ``names`` if given)."""
        changed = self.of(section)
        return bool(changed) and (not names or not changed.isdisjoint(names))


def _differences(old: Any, new: Any) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(old) if getattr(old, f.name) != getattr(new, f.name))


class Settings:
    """The run's settings (a ``RunConfig``), validated after every change, announced by ``changed(Change)``.

    ``model``, ``data``, ``train`` are the current sections (read them, never change them in place);
    ``config`` is a copy of the whole. ``error`` is what is wrong with them in a sentence (None if nothing),
    ``model_error`` what is wrong with the model alone. ``derived`` holds facts worked out from the settings
    ("precision": what train.precision resolves to on the chosen device). ``base`` is the preset they were last
    set from (None: none), ``preset`` that preset while they are still all its settings, else None ("(custom)").
    """

    changed = Signal(object)  # a Change

    def __init__(self, config: RunConfig | None = None):
        self._config = copy.deepcopy(config) if config is not None else RunConfig()
        self.derived: dict[str, Any] = {"precision": "fp32"}
        self.error: str | None = None
        self.model_error: str | None = None
        self.base: Preset | None = None
        self._validate()

    @property
    def model(self) -> ModelConfig:
        return self._config.model

    @property
    def data(self) -> DataConfig:
        return self._config.data

    @property
    def train(self) -> TrainConfig:
        return self._config.train

    @property
    def preset(self) -> Preset | None:
        """The preset these settings are: ``base`` while every setting is still its (N_V and the class count
        aside: the data's), else None. A setting changed back makes them the preset's again."""
        return self.base if self.base is not None and self.base.is_of(self._config) else None

    def section(self, name: str) -> Any:
        return getattr(self._config, name)

    @property
    def config(self) -> RunConfig:
        """A copy of the settings, for a run to keep."""
        return copy.deepcopy(self._config)

    def update(self, section: str, **values: Any) -> bool:
        """Set some fields of one section; False if nothing changed."""
        old = self.section(section)
        new = dataclasses.replace(old, **values)
        changed = _differences(old, new)
        if changed:
            setattr(self._config, section, new)
            self._announce({section: changed})
        return bool(changed)

    def allows(self, section: str, **values: Any) -> bool:
        """Whether setting these fields of ``section`` would leave the settings valid; nothing is set."""
        config = self.config
        setattr(config, section, dataclasses.replace(self.section(section), **values))
        try:
            config.validate()
        except ValueError:
            return False
        return True

    def take(self, config: RunConfig, preset: Preset | None = None) -> bool:
        """Set every setting from ``config`` (a preset's, a run's) but N_V, which is the tokenizer's: it stays until
        the corpus panel has trained ``config``'s tokenizer; ``preset`` the preset that is (None: none). One
        validation, one announcement (of the preset alone when no setting changed)."""
        new_base, self.base = preset is not self.base, preset
        changed = self.replace(config.replace(model=config.model.replace(vocab_size=self.model.vocab_size)))
        if new_base and not changed:
            self.changed.emit(Change({PRESET: frozenset({"base"})}))
        return changed

    def set_section(self, section: str, value: Any) -> bool:
        """Set a whole section (a ModelConfig, DataConfig or TrainConfig)."""
        return self.update(section, **{f.name: getattr(value, f.name) for f in dataclasses.fields(value)})

    def replace(self, config: RunConfig) -> bool:
        """Set everything at once (a preset): one validation, one announcement."""
        names = {s: _differences(self.section(s), getattr(config, s)) for s in SECTIONS}
        names = {s: changed for s, changed in names.items() if changed}
        if names:
            self._config = copy.deepcopy(config)
            self._announce(names)
        return bool(names)

    def set_derived(self, name: str, value: Any) -> None:
        """Record a fact worked out from the settings (no validation: it is not a setting)."""
        if self.derived.get(name) != value:
            self.derived[name] = value
            self.changed.emit(Change({DERIVED: frozenset({name})}))

    def _announce(self, names: dict[str, frozenset[str]]) -> None:
        self._validate()
        self.changed.emit(Change(names))

    def _validate(self) -> None:
        self.model_error = self.error = None
        try:
            self._config.model.validate()
        except ValueError as e:
            self.model_error = str(e)
            self.error = f"Model: {e}"
            return
        try:
            self._config.validate()
        except ValueError as e:
            self.error = str(e)
