"""The wheel holds every package: pyproject's explicit list names each folder of fatstudio/ with an __init__.py
(an editable install finds a package missing from it; a built wheel, and so the standalone app, does not)."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "fatstudio").rglob("__init__.py")}
    assert found - listed == set()
    assert {"fatstudio.resources", "fatstudio.resources.presets"} <= listed
