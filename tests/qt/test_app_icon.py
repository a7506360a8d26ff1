"""The application icon: shipped in resources/ (and as package data), set on the app and so on its windows."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from fatstudio.core.resources import resource_path

ROOT = Path(__file__).resolve().parents[2]


def test_icon_files_are_resources_and_package_data():
    assert resource_path("fatstudio.png").is_file()
    assert resource_path("fatstudio.svg").read_text().lstrip().startswith("<?xml")
    if sys.version_info >= (3, 11):
        import tomllib

        package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
        assert {"fatstudio.png", "fatstudio.svg"} <= set(package_data["fatstudio.resources"])
    desktop = (ROOT / "packaging" / "fatstudio.desktop").read_text().splitlines()
    assert "Icon=fatstudio" in desktop and "Exec=fatstudio" in desktop


def test_the_app_and_its_window_get_the_icon(qapp, runs_root):
    from PySide6.QtGui import QIcon

    from fatstudio.app import MainWindow
    from fatstudio.qt.app import app_icon, configure

    icon = app_icon()
    assert not icon.isNull() and max(s.width() for s in icon.availableSizes()) == 256
    before = qapp.windowIcon()
    try:
        configure(qapp)
        assert qapp.windowIcon().cacheKey() != QIcon().cacheKey()
        assert not qapp.windowIcon().isNull()
        w = MainWindow()
        try:
            assert not w.windowIcon().isNull()  # a window without its own icon shows the application's
            # Qt shows "title — display name": the name must not be in the title as well
            assert qapp.applicationDisplayName() == "fatstudio" and "fatstudio" not in w.windowTitle()
        finally:
            w.confirm_close = lambda: True
            w.close()
            w.deleteLater()
    finally:
        qapp.setWindowIcon(before)
