"""Presets: ready-made run configurations shipped as TOML files in resources/presets.

Beside the [model], [data] and [train] tables a preset file has ``name`` (what a person reads), ``description``
(what it teaches, a sentence or two), ``walkthrough`` (at most three "do this, look here" steps), ``details``
(measurements: times, seeds, what else was tried), ``demo_steps`` (the fewest train.steps at which the
walkthrough holds) and an ``[expected]`` table: what Diagnostics finds at the preset's settings that is normal
there, a finding kind (`diagnostics.FindingKind`) and why, e.g. ``spike = "full-batch AdamW …"``; a run of the
preset's model and data (`Preset.has_model_and_data_of`) lists those findings as notes with the reason
(`expected_findings`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import tomllib

from ..config import PRESET_KEYS, RunConfig
from ..data import splits
from ..resources import resource_path

MAX_WALKTHROUGH = 3  # steps a walkthrough may have


def key_of(name: str) -> str:
    """A preset's key from its file stem or an older key: without the number that orders the files
    ("7-grokking" → "grokking")."""
    return re.sub(r"^\d+-", "", name)


@dataclass(frozen=True)
class Preset:
    key: str  # the file stem without its order number (`key_of`), e.g. "gpt-char", "grokking"
    name: str  # what a person reads
    config: RunConfig
    description: str = ""  # what it teaches
    walkthrough: tuple[str, ...] = ()  # at most MAX_WALKTHROUGH "do this, look here" steps
    details: str = ""  # measurements, behind a fold
    demo_steps: int = 0  # the fewest train.steps the walkthrough needs (0: any)
    expected: tuple[tuple[str, str], ...] = ()  # (finding kind, why it is normal here): Diagnostics' notes

    def steps_note(self, config: RunConfig) -> str:
        """What to say before training ``config``, this preset's model and data with train.steps perhaps
        fewer than `demo_steps`: "" when they are enough, or when the model or data are no longer the preset's
        (its walkthrough does not speak of them)."""
        steps = config.train.steps
        if steps >= self.demo_steps or not self.has_model_and_data_of(config):
            return ""
        return (f"The {self.name} walkthrough needs about {self.demo_steps:,} steps; with train.steps = {steps:,} "
                f"what it describes may not happen yet.")

    def is_of(self, config: RunConfig) -> bool:
        """Whether ``config`` is this preset's settings, every one of them (N_V and the class count aside: the
        data's)."""
        return self.has_model_and_data_of(config) and config.train == self.config.train

    def has_model_and_data_of(self, config: RunConfig) -> bool:
        """Whether ``config`` has this preset's model (N_V and the class count aside: the data's) and data,
        data.split aside where it says nothing (`splits.applies`: examples, as a modadd run made before that key
        reads "tail"). Its train settings may differ (the walkthrough itself changes them)."""
        data = self.config.data
        if not splits.applies(config.data) and not splits.applies(data):
            data = data.replace(split=config.data.split)
        mine = self.config.model.replace(vocab_size=config.model.vocab_size, n_classes=config.model.n_classes)
        return config.model == mine and config.data == data


def expected_findings(config: RunConfig | None, presets: list[Preset] | None = None) -> dict[str, str]:
    """What a run of ``config`` is expected to show, by its preset (`Preset.has_model_and_data_of`; default: the
    shipped presets): finding kind → why it is normal there; {} for a run of no preset's model and data."""
    if config is None:
        return {}
    for p in load_presets() if presets is None else presets:
        if p.expected and p.has_model_and_data_of(config):
            return dict(p.expected)
    return {}


def preset_of(config: RunConfig, presets: list[Preset]) -> Preset | None:
    """The preset whose settings ``config`` has (N_V and the class count aside), or None."""
    return next((p for p in presets if p.is_of(config)), None)


def _paragraph(text: object) -> str:
    return " ".join(str(text).split())  # one paragraph, however the TOML wraps it


def load_presets() -> list[Preset]:
    """Every preset, in file-name order (the first is the app's default), keyed by `key_of` its file stem."""
    out: list[Preset] = []
    for path in sorted(resource_path("presets").glob("*.toml")):
        d = tomllib.loads(path.read_text(encoding="utf-8"))
        info = {key: d.pop(key) for key in PRESET_KEYS if key in d}
        walkthrough = tuple(_paragraph(step) for step in info.get("walkthrough", ()))
        if len(walkthrough) > MAX_WALKTHROUGH:
            raise ValueError(f"preset {path.stem}: a walkthrough has at most {MAX_WALKTHROUGH} steps, not "
                             f"{len(walkthrough)}.")
        expected = info.get("expected", {})
        if not isinstance(expected, dict) or not all(isinstance(v, str) for v in expected.values()):
            raise ValueError(f"preset {path.stem}: [expected] holds finding kinds and why each is normal, as text.")
        out.append(Preset(key_of(path.stem), str(info.get("name") or path.stem), RunConfig.from_dict(d),
                          _paragraph(info.get("description", "")), walkthrough, _paragraph(info.get("details", "")),
                          int(info.get("demo_steps", 0)), tuple((k, _paragraph(v)) for k, v in expected.items())))
    return out


def preset(key_or_name: str) -> Preset:
    for p in load_presets():
        if key_or_name == p.name or key_of(key_or_name) == p.key:  # "7-grokking": the file stem, an older key
            return p
    raise ValueError(f"no preset {key_or_name!r}; presets are: {', '.join(p.key for p in load_presets())}.")
