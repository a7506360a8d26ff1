"""A learner's progress, kept across sessions: per exercise whether it was tried and passed, the last code and how
many hints are open, in ``exercises.json`` in fatstudio's user data folder (platformdirs), or beside the app's state
file where ``$FATSTUDIO_STATE`` names one (the tests give each test its own). A damaged file is started afresh."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import platformdirs

from ...environment import STATE
from ...files import atomic_write, read_text

LIMIT = 4 << 20  # bytes: a progress file larger than this is not read


def progress_path() -> Path:
    state = STATE.value()
    folder = state.parent if state else platformdirs.user_data_path("fatstudio", appauthor=False)
    return folder / "exercises.json"


class Progress:
    """``{exercise: {"tried": bool, "passed": bool, "code": str, "hints": int}}``, written at each change."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or progress_path()
        try:
            data = json.loads(read_text(self.path, limit=LIMIT))
            self.data: dict[str, dict[str, Any]] = {k: v for k, v in data.items() if isinstance(v, dict)}
        except (OSError, ValueError, AttributeError):
            self.data = {}

    def of(self, name: str) -> dict[str, Any]:
        return self.data.get(name, {})

    def passed(self, name: str) -> bool:
        return bool(self.of(name).get("passed"))

    def tried(self, name: str) -> bool:
        return bool(self.of(name).get("tried"))

    def update(self, name: str, **values: Any) -> None:
        """Set ``values`` (tried, passed, code, hints) of ``name`` and write the file (quietly not, where it
        cannot be written: progress is a convenience)."""
        self.data[name] = {**self.of(name), **values}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(self.data, indent=1))
        except OSError:
            pass

    def record(self, name: str, code: str, passed: bool) -> None:
        """A check of ``code``: tried, and passed if it ever passed."""
        self.update(name, tried=True, passed=passed or self.passed(name), code=code)
