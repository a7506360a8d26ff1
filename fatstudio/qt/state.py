"""What the window remembers from one session to the next, in Qt's QSettings (the platform's own store: an
INI file under ~/.config on Linux, the registry on Windows, a plist on macOS): the window's geometry, its
splitters' positions, the last preset and corpus, and the runs opened or trained most recently.

``$FATSTUDIO_STATE`` names an INI file to use instead (the tests give each test its own).
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMainWindow, QSplitter, QWidget

from ..core.environment import STATE

RECENT_RUNS = 10  # how many run folders are remembered


def store() -> QSettings:
    path = STATE.value()
    return QSettings(str(path), QSettings.Format.IniFormat) if path else QSettings("fatstudio", "fatstudio")


def save_window(window: QMainWindow) -> None:
    """The window's geometry and the state of every named splitter in it laid out in this session, but those
    whose panel lays them out until the user moves them (the property ``userSized`` False): theirs is forgotten."""
    s = store()
    s.setValue("window/geometry", window.saveGeometry())
    for splitter in window.findChildren(QSplitter):
        key = f"splitters/{splitter.objectName()}"
        if not splitter.objectName() or not sum(splitter.sizes()):  # never laid out this session: kept as saved
            continue
        if splitter.property("userSized") is False:
            s.remove(key)
        else:
            s.setValue(key, splitter.saveState())


def restore_window(window: QMainWindow) -> None:
    """Put back what `save_window` saved (nothing, the first time)."""
    geometry = store().value("window/geometry")
    if geometry is not None:
        window.restoreGeometry(geometry)
    restore_splitters(window)


def restore_splitters(root: QWidget) -> None:
    """Put back the saved state of every named splitter under ``root`` (a part made after the window, such as
    the Attention tab, restores its own when it is made), each marked ``userSized``: as the user left it."""
    s = store()
    for splitter in root.findChildren(QSplitter):
        saved = s.value(f"splitters/{splitter.objectName()}") if splitter.objectName() else None
        if saved is not None and splitter.restoreState(saved):
            splitter.setProperty("userSized", True)


def remember_choice(preset_key: str | None, corpus: str) -> None:
    """The preset the settings were set from (None: none) and the corpus chosen when the window closed: a file or
    folder, or the name of a built-in (one that is not a path here)."""
    s = store()
    s.setValue("last/preset", preset_key or "")
    s.setValue("last/corpus", corpus)
    s.setValue("last/corpus_is_path", Path(corpus).exists())


def last_choice() -> tuple[str | None, str | None]:
    """(preset key, corpus) remembered by `remember_choice`; None for what was not, or for a corpus file or
    folder that is gone since."""
    s = store()
    corpus = s.value("last/corpus") or None
    if corpus and s.value("last/corpus_is_path", False, type=bool) and not Path(corpus).exists():
        corpus = None
    return s.value("last/preset") or None, corpus


def add_recent_run(path: str) -> None:
    """``path`` becomes the most recent run (at most `RECENT_RUNS` are kept)."""
    runs = [path, *(p for p in recent_runs() if p != path)][:RECENT_RUNS]
    store().setValue("runs/recent", runs)


def recent_runs() -> list[str]:
    """Run folders, most recent first (they may since have been deleted)."""
    value = store().value("runs/recent") or []
    return [value] if isinstance(value, str) else [str(v) for v in value]
