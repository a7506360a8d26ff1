"""Where the shipped resources are: a checkout's top-level resources/, an installed wheel's
fatstudio.resources package, or a frozen bundle's resources folder — found the same way in each; and where this
copy of fatstudio is (`PACKAGE_ROOT`, what a child process imports: `children.child_env`)."""
from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where ``import fatstudio`` finds this copy


def resources_dir() -> Path:
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "resources"]  # a checkout (also an editable install)
    if hasattr(sys, "_MEIPASS"):  # a frozen bundle
        candidates.insert(0, Path(sys._MEIPASS) / "resources")
    try:  # an installed wheel
        import fatstudio.resources as pkg
        candidates.append(Path(pkg.__file__).parent)
    except ImportError:
        pass
    for c in candidates:
        if (c / "presets").is_dir():
            return c
    raise FileNotFoundError("fatstudio's resources folder is missing; reinstall fatstudio.")


def resource_path(*parts: str) -> Path:
    return resources_dir().joinpath(*parts)
