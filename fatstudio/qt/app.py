"""Start the desktop app: ``fatstudio`` with no arguments calls ``main()``."""
from __future__ import annotations

import os
import sys

from .platform_libraries import problem


def _style() -> str:
    try:
        from fatstudio.core.resources import resource_path
        path = resource_path("style.qss")
        return path.read_text(encoding="utf-8") if path.exists() else ""
    except OSError:
        return ""


def app_icon():
    """fatstudio's icon (resources/fatstudio.png, drawn from fatstudio.svg); a null QIcon if it is missing."""
    from PySide6.QtGui import QIcon

    try:
        from fatstudio.core.resources import resource_path
        path = resource_path("fatstudio.png")
    except OSError:
        return QIcon()
    return QIcon(str(path)) if path.is_file() else QIcon()


def configure(app) -> None:
    """The application's names, icon (every window's, unless it sets its own) and style sheet."""
    app.setApplicationName("fatstudio")
    app.setApplicationDisplayName("fatstudio")
    app.setOrganizationName("fatstudio")
    app.setDesktopFileName("fatstudio")  # Wayland: the compositor takes the icon from fatstudio.desktop
    app.setWindowIcon(app_icon())
    style = _style()
    if style:
        app.setStyleSheet(style)


def _close_on_sigint(window) -> None:
    """Ctrl+C in the terminal closes the window the normal way (asking first if a run is training)."""
    import signal

    from PySide6.QtCore import QTimer

    try:
        signal.signal(signal.SIGINT, lambda *_: window.close())
    except ValueError:  # not the main thread
        return
    timer = QTimer(window)
    timer.timeout.connect(lambda: None)  # let the interpreter run its signal handlers now and then
    timer.start(250)


def _cannot_start() -> bool:
    """Say which system libraries Qt's xcb plugin lacks and the command that installs them, before Qt aborts with
    its own message; True when that leaves no platform to try (no Wayland display either)."""
    message = problem(os.environ)
    if message:
        print(message, file=sys.stderr, flush=True)
    return message is not None and not os.environ.get("WAYLAND_DISPLAY")


def main(argv: list[str] | None = None) -> int:
    """Create the QApplication (or reuse one), show the main window, run the event loop; return its exit code."""
    from PySide6.QtWidgets import QApplication

    if QApplication.instance() is None and _cannot_start():
        return 1
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "fatstudio", *(argv or [])])
    configure(app)

    from .gc import MainThreadCollector
    from .main_window import MainWindow

    MainThreadCollector(app)  # Qt objects are collected in the GUI thread only
    window = MainWindow()
    window.show()
    _close_on_sigint(window)
    return int(app.exec())  # the jobs still running are stopped and waited for on aboutToQuit (`qt.jobs.shutdown`)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
