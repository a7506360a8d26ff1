"""Presets: ready-made run configurations shipped as TOML files in resources/presets."""
from __future__ import annotations

from dataclasses import dataclass

import tomllib

from .config import PRESET_KEYS, RunConfig
from .resources import resource_path


@dataclass(frozen=True)
class Preset:
    key: str  # the file stem, e.g. "1-gpt-char"
    name: str  # what a person reads
    config: RunConfig
    description: str = ""  # what it teaches, what to look at and when, how long it takes on a CPU


def load_presets() -> list[Preset]:
    """Every preset, in file-name order (the first is the app's default)."""
    out: list[Preset] = []
    for path in sorted(resource_path("presets").glob("*.toml")):
        d = tomllib.loads(path.read_text(encoding="utf-8"))
        name, description = (d.pop(key, "") for key in PRESET_KEYS)
        description = " ".join(str(description).split())  # one paragraph, however the TOML wraps it
        out.append(Preset(path.stem, name or path.stem, RunConfig.from_dict(d), description))
    return out


def preset(key_or_name: str) -> Preset:
    for p in load_presets():
        if key_or_name in (p.key, p.name, p.key.split("-", 1)[-1]):
            return p
    raise ValueError(f"no preset {key_or_name!r}; presets are: {', '.join(p.key for p in load_presets())}.")
