"""``fatstudio.app.MainWindow``: the desktop app's window (imports Qt only when the name is used)."""
from __future__ import annotations

__all__ = ["MainWindow", "main"]  # noqa: F822 (provided by __getattr__)


def __getattr__(name):
    if name == "MainWindow":
        from fatstudio.qt.main_window import MainWindow
        return MainWindow
    if name == "main":
        from fatstudio.qt.app import main
        return main
    raise AttributeError(f"module 'fatstudio.app' has no attribute {name!r}")
