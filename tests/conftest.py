import os

import pytest

# Qt must find no display: set before anything imports Qt.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _window_state(tmp_path_factory, monkeypatch):
    """Each test's window remembers into a file of its own (fatstudio.qt.state), never the user's."""
    monkeypatch.setenv("FATSTUDIO_STATE", str(tmp_path_factory.mktemp("state") / "state.ini"))
