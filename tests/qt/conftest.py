"""Fixtures the Qt tests share: a runs folder of the test's own, a workspace whose jobs report on the GUI thread,
and a main window on it."""
import pytest

LONG = 60_000  # ms: generous ceilings for waits on a slow, shared 2-CPU machine


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("FATSTUDIO_RUNS", str(root))
    return root


@pytest.fixture
def workspace(qapp):
    """An application model for a panel on its own; its jobs are waited for at the end."""
    from fatstudio.core.app.workspace import Workspace
    from fatstudio.qt.jobs import new_jobs

    ws = Workspace(jobs=new_jobs())
    yield ws
    ws.jobs.shutdown()


@pytest.fixture
def wait_for_jobs(qtbot):
    """``wait_for_jobs(workspace)``: until every job of ``workspace`` has ended and what it posted has been delivered."""
    def wait(workspace, timeout: int = LONG) -> None:
        qtbot.waitUntil(lambda: workspace.jobs.idle, timeout=timeout)
    return wait


@pytest.fixture
def window(qtbot, runs_root):
    """The main window, shown; closing, deleting and fine-tuning answer yes; a run still training is stopped at the end."""
    from fatstudio.app import MainWindow

    w = MainWindow()
    w.resize(1440, 920)  # the size the tests lay out at (the offscreen screen, 800×800, made the window fit it)
    w.confirm_close = lambda: True  # the questions a person would answer
    w.confirm_delete = lambda run: True
    w.runs.confirm_fine_tune = lambda question: True
    qtbot.addWidget(w)
    w.show()
    yield w
    if w.job is not None:
        w.job.stop()
        qtbot.waitUntil(lambda: w.job is None, timeout=LONG)
    w.workspace.jobs.shutdown()
