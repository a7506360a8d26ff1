"""Closing the main window: while a run trains, ask, stop it (it is checkpointed and kept) and close when it has
ended; then close what is still open, stop the window's jobs and remember the window and the settings' choice."""
from __future__ import annotations

from typing import TYPE_CHECKING

from fatstudio.qt import state

if TYPE_CHECKING:
    from fatstudio.qt.main_window import MainWindow


def may_close(window: MainWindow, event) -> bool:
    """Whether ``window`` closes now (the close ``event`` is ignored otherwise)."""
    if window.workspace.busy:
        if not window._close_pending:
            if not window.confirm_close():
                event.ignore()
                return False
            window._close_pending = True
            window.workspace.stop()
            central = window.centralWidget()
            if central is not None:
                central.setEnabled(False)
            window.statusBar().showMessage("Stopping the training and saving the run; closing when done…")
        event.ignore()  # closes itself when the worker has finished (see _ended)
        return False
    if window._error_box is not None:
        window._error_box.close()
    if window.corpus_panel.tokenizer_lab is not None:
        window.corpus_panel.tokenizer_lab.close()  # its comparison's result is dropped
    window.workspace.jobs.shutdown(0)  # a generation stops after its token, no result lands on a closed window; no wait
    state.save_window(window)
    state.remember_choice(window.model_panel.preset_key(), window.settings.data.corpus)
    return True
