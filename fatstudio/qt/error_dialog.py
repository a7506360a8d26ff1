"""What went wrong, told to the user in words: in a non-blocking box over the window (one at a time), with "Train
anyway" when a run was refused for memory."""
from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from ..core.memory import OVERRIDE


class ErrorDialog(QObject):
    """Opens the box (``errorDialog``) over ``window``; ``anyway`` starts the run refused for memory again (None: no
    run was refused)."""

    def __init__(self, window: QWidget, anyway: Callable[[], Callable[[], None] | None]):
        super().__init__(window)
        self.window, self.anyway = window, anyway
        self.box: QMessageBox | None = None

    def show(self, message: str) -> None:
        if self.box is not None:
            self.box.close()
        box = QMessageBox(QMessageBox.Icon.Warning, "fatstudio", message, QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("errorDialog")
        retry = self.anyway() if OVERRIDE in message else None
        if retry is not None:  # a run refused for memory
            button = box.addButton("Train anyway", QMessageBox.ButtonRole.AcceptRole)
            button.setObjectName("trainAnywayButton")
            button.clicked.connect(retry)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.box = box
        box.destroyed.connect(self._gone)

    def close(self) -> None:
        if self.box is not None:
            self.box.close()

    def _gone(self, *_args) -> None:
        self.box = None
