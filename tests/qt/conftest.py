"""Fixtures the Qt tests share: a runs folder of the test's own and a main window on it."""
import pytest

LONG = 60_000  # ms: generous ceilings for waits on a slow, shared 2-CPU machine


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("FATSTUDIO_RUNS", str(root))
    return root


@pytest.fixture
def window(qtbot, runs_root):
    """The main window, shown; closing and deleting answer yes; a run still training is stopped at the end."""
    from PySide6.QtCore import QThreadPool

    from fatstudio.app import MainWindow

    w = MainWindow()
    w.resize(1440, 920)  # the size the tests lay out at (the offscreen screen, 800×800, made the window fit it)
    w.confirm_close = lambda: True  # the questions a person would answer
    w.confirm_delete = lambda run: True
    qtbot.addWidget(w)
    w.show()
    yield w
    if w.job is not None:
        w.job.stop()
        qtbot.waitUntil(lambda: w.job is None, timeout=LONG)
    QThreadPool.globalInstance().waitForDone(LONG)
