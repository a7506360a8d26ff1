"""Which attention the Attention tab shows: the user's text (the Prompt tab's last forward pass) or the
training probe at the slider's step. Two exclusive buttons side by side (a segmented switch), each enabled
when its maps exist, and a caption that says what is shown."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QLabel, QPushButton, QWidget

TEXT, PROBE = "text", "probe"


class SourceSwitch(QWidget):
    """``textButton`` ("Your text") and ``probeButton`` ("Training probe, step N"); ``chosen(source)`` on a
    click (`TEXT` or `PROBE`); ``caption`` says what the maps shown are."""

    chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        self.textButton = QPushButton("Your text", objectName="attentionSourceText")
        self.textButton.setToolTip("The attention of what you typed in the Prompt tab (its last Generate, "
                                   "Translate, Predict or Classify): the prompt and as much of the output as "
                                   "l_max allows.")
        self.probeButton = QPushButton("Training probe", objectName="attentionSourceProbe")
        self.probeButton.setToolTip("The attention of the run's probe input, saved at each evaluation while it "
                                    "trained: the slider below picks the step.")
        self.group = QButtonGroup(self)
        for b in (self.textButton, self.probeButton):
            b.setCheckable(True)
            self.group.addButton(b)
            row.addWidget(b)
        row.addSpacing(10)
        self.caption = QLabel(objectName="attentionSourceLabel")
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.caption.setWordWrap(True)
        row.addWidget(self.caption, 1)
        self.textButton.clicked.connect(lambda: self.chosen.emit(TEXT))
        self.probeButton.clicked.connect(lambda: self.chosen.emit(PROBE))

    def set_state(self, current: str | None, text: bool, probe_step: int | None, caption: str) -> None:
        """``current`` source shown (None: none), whether the user's text has maps, the slider's probe step
        (None: no probe maps saved), and the caption."""
        self.textButton.setEnabled(text)
        self.probeButton.setEnabled(probe_step is not None)
        self.probeButton.setText("Training probe" if probe_step is None else f"Training probe, step {probe_step:,}")
        self.group.setExclusive(current is not None)  # none checked while nothing is shown
        self.textButton.setChecked(current == TEXT)
        self.probeButton.setChecked(current == PROBE)
        self.group.setExclusive(True)
        self.caption.setText(caption)

    def current(self) -> str | None:
        return TEXT if self.textButton.isChecked() else PROBE if self.probeButton.isChecked() else None
