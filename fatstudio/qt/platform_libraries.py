"""Before Qt starts on Linux: are the system libraries its xcb platform plugin loads there? Qt itself only says
``Could not load the Qt platform plugin "xcb"`` and aborts; `problem` names the missing libraries and the one
command that installs them. Imports no Qt: PySide6 is found (`importlib.util.find_spec`), not loaded."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

# Every library outside Qt that libqxcb.so and the Qt libraries it loads need (`ldd` on PySide6 6.11's plugin),
# with the Debian/Ubuntu and the Fedora package that has it. The C and C++ runtimes and zlib are on every system.
PACKAGES: dict[str, tuple[str, str]] = {
    "libGL.so.1": ("libgl1", "mesa-libGL"),
    "libEGL.so.1": ("libegl1", "mesa-libEGL"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
}


def xcb_plugin() -> Path | None:
    """PySide6's libqxcb.so, or None where PySide6 has none (not Linux, not installed)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or spec.origin is None:
        return None
    plugin = Path(spec.origin).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def not_found(ldd_output: str) -> list[str]:
    """The libraries ``ldd`` says are ``not found``, once each, in its order."""
    names = [line.split("=>")[0].strip() for line in ldd_output.splitlines() if "=> not found" in line]
    return list(dict.fromkeys(names))


def install_command(missing: list[str], apt: bool = True) -> str:
    """The one command that installs ``missing`` (apt-get on Debian/Ubuntu, else dnf); a library this module does
    not know is named as it is."""
    packages = [PACKAGES[name][0 if apt else 1] if name in PACKAGES else name for name in missing]
    tool = "apt-get install" if apt else "dnf install"
    return f"sudo {tool} {' '.join(dict.fromkeys(packages))}"


def _ldd(plugin: Path) -> str:
    try:
        return subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""  # no ldd: nothing to say, Qt tries


def problem(environ: Mapping[str, str], platform: str = sys.platform,
            ldd: Callable[[Path], str] = _ldd, plugin: Callable[[], Path | None] = xcb_plugin) -> str | None:
    """What to say before Qt starts on a Linux display (``DISPLAY`` set, no ``QT_QPA_PLATFORM`` chosen) whose
    xcb plugin lacks system libraries: which, and the command that installs them; None when nothing is missing."""
    if not platform.startswith("linux") or not environ.get("DISPLAY") or environ.get("QT_QPA_PLATFORM"):
        return None
    path = plugin()
    missing = not_found(ldd(path)) if path is not None else []
    if not missing:
        return None
    apt = shutil.which("apt-get") is not None or shutil.which("dnf") is None
    return (f"fatstudio: Qt's xcb platform plugin cannot load: {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing. Install {'it' if len(missing) == 1 else 'them'} with:\n"
            f"    {install_command(missing, apt)}")
