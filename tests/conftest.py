import gc
import os

import pytest

# Qt must find no display: set before anything imports Qt.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The Prompt panel compiles a loaded model's decode step in the background; tests inject a compiler instead.
os.environ.setdefault("FATSTUDIO_COMPILE_DECODE", "0")


@pytest.fixture(autouse=True)
def _window_state(tmp_path_factory, monkeypatch):
    """Each test's window remembers into a file of its own (fatstudio.qt.state), never the user's."""
    monkeypatch.setenv("FATSTUDIO_STATE", str(tmp_path_factory.mktemp("state") / "state.ini"))


@pytest.fixture(scope="session", autouse=True)
def _collect_in_the_main_thread():
    """As the app does (fatstudio.qt.gc): no automatic collection, which could run in a worker thread and hand
    Qt objects' deletion to the GUI thread mid-destructor (a deadlock we saw); the tests collect between tests."""
    gc.disable()
    yield
    gc.enable()


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    yield
    from fatstudio.qt.gc import collect_due

    collect_due()


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(folder, …)``: those folders behave as on a read-only disk for this process (read_only_disk.py);
    its ``refused`` lists what was tried."""
    from read_only_disk import ReadOnlyDisk

    return lambda *folders: ReadOnlyDisk(monkeypatch, *folders)
