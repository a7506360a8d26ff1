"""Before Qt starts: the libraries the xcb plugin lacks, and the one command that installs them."""
from pathlib import Path

from fatstudio.qt import app as app_module
from fatstudio.qt import platform_libraries as pl

LDD = """\tlinux-vdso.so.1 (0x00007f2423b85000)
\tlibGL.so.1 => /lib/x86_64-linux-gnu/libGL.so.1 (0x00007f2423a27000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f2423000000)
\tlibxcb-icccm.so.4 => not found
\tlibfoo.so.9 => not found
"""
DISPLAY = {"DISPLAY": ":0"}


def _problem(environ, platform="linux", output=LDD):
    return pl.problem(environ, platform, ldd=lambda _path: output, plugin=lambda: Path("/qt/libqxcb.so"))


def test_not_found_names_each_missing_library_once():
    assert pl.not_found(LDD) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libfoo.so.9"]


def test_the_message_names_the_libraries_and_the_apt_command(monkeypatch):
    monkeypatch.setattr(pl.shutil, "which", lambda tool: "/usr/bin/apt-get" if tool == "apt-get" else None)
    message = _problem(DISPLAY)
    assert message is not None
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1, libfoo.so.9 are missing" in message
    assert message.splitlines()[-1].strip() == "sudo apt-get install libxcb-icccm4 libxcb-keysyms1 libfoo.so.9"


def test_fedora_gets_dnf_and_its_package_names(monkeypatch):
    monkeypatch.setattr(pl.shutil, "which", lambda tool: "/usr/bin/dnf" if tool == "dnf" else None)
    message = _problem(DISPLAY, output="\tlibxcb-icccm.so.4 => not found\n\tlibxcb-cursor.so.0 => not found\n")
    assert message is not None and message.splitlines()[-1].strip() == "sudo dnf install xcb-util-wm xcb-util-cursor"


def test_nothing_to_say_off_an_x_display_or_with_a_platform_chosen_or_nothing_missing():
    assert _problem({}) is None  # no display
    assert _problem({**DISPLAY, "QT_QPA_PLATFORM": "offscreen"}) is None
    assert _problem(DISPLAY, platform="darwin") is None
    assert _problem(DISPLAY, output="\tlibGL.so.1 => /lib/libGL.so.1 (0x1)\n") is None
    assert pl.problem(DISPLAY, "linux", ldd=lambda _p: LDD, plugin=lambda: None) is None  # no xcb plugin


def test_every_library_has_a_package_on_both_systems():
    assert all(debian and fedora for debian, fedora in pl.PACKAGES.values())
    assert {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0"} <= set(pl.PACKAGES)


def test_the_app_says_it_and_stops_when_no_platform_is_left(monkeypatch, capsys):
    monkeypatch.setattr(app_module, "problem", lambda _env: "fatstudio: … missing\n    sudo apt-get install x")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert app_module._cannot_start() is True
    assert "sudo apt-get install x" in capsys.readouterr().err
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")  # Qt may still open a Wayland window: it tries
    assert app_module._cannot_start() is False
    assert "sudo apt-get install x" in capsys.readouterr().err
    monkeypatch.setattr(app_module, "problem", lambda _env: None)
    assert app_module._cannot_start() is False
    assert capsys.readouterr().err == ""
