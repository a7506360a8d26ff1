"""The header of a view that computes from a model: which run and which weights it shows (`core.app.focus.Focus`),
in the words the runs list uses, and what the view looks at instead when it does so on purpose."""
from __future__ import annotations

import html

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from ...core.app.focus import Focus


class FocusLabel(QLabel):
    """``Run: <run name> · step N`` for ``focus``, kept current; `set_own` adds what the view shows instead of the
    focus's weights (an earlier checkpoint chosen in it), None takes it back. ``objectName`` ends in FocusLabel."""

    def __init__(self, focus: Focus, name: str, parent=None):
        super().__init__(parent)
        if not name.endswith("FocusLabel"):
            raise ValueError(f"a focus label's objectName ends in FocusLabel, not {name!r}.")
        self.setObjectName(name)
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setStyleSheet("color: #333; padding: 2px 0;")
        self.focus = focus
        self._own: str | None = None
        focus.changed.connect(self._show)
        self._show()

    def set_own(self, words: str | None) -> None:
        """What this view shows instead of the focus's weights, in words (None: the focus's)."""
        if words != self._own:
            self._own = words
            self._show()

    def words(self) -> str:
        """The label's text without markup."""
        own = f" — this view: {self._own}" if self._own else ""
        return f"Run: {self.focus.words()}{own}"

    def _show(self, *_args) -> None:
        if not shiboken6.isValid(self):  # deleted with its view: it listens no more
            self.focus.changed.disconnect(self._show)
            return
        own = f" <span style='color:#7a5d00'>— this view: {html.escape(self._own)}</span>" if self._own else ""
        self.setText(f"<b>Run:</b> {html.escape(self.focus.words())}{own}")
        self.setToolTip("What this view computes from: the run (as the runs list names it) and the step of its weights. "
                        "Opening, importing, training or taking a snapshot changes it for every view at once.")
