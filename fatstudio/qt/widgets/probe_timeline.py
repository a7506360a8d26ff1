"""The Attention tab's probe timeline (``probeBar``): ``probeSlider`` runs over the evaluation steps whose probe
maps the run saved, with its step label and a play button (``probePlayButton``, a QTimer stepping it)."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSlider, QWidget


class ProbeTimeline(QWidget):
    """The run's saved probe files by step (`probe_paths`) and a slider over them. ``indexChanged(i)``: the
    slider moved to the ``i``-th step (or was asked to show it again, `set_index` with ``force``);
    ``stepChanged(step)``: the step at the slider changed however it came to (moved, `wait_at`, steps added or
    gone; None: no steps)."""

    indexChanged = Signal(int)
    stepChanged = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="probeBar")
        self.probe_paths: dict[int, Path] = {}  # the run's saved probe maps by step (`set_paths`)
        self._step: int | None = None  # the step last announced (`stepChanged`)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.probePlayButton = QPushButton("▶ Play", objectName="probePlayButton")
        self.probePlayButton.setCheckable(True)
        self.probePlayButton.setToolTip("Play the heads forming: step through the saved evaluations.")
        self.probeSlider = QSlider(Qt.Orientation.Horizontal, objectName="probeSlider")
        self.probeSlider.setRange(0, 0)  # one position per saved step (`_sync`)
        self.probeSlider.setPageStep(1)
        self.probeSlider.setToolTip("The run's probe input at each evaluation step: every head's attention "
                                    "map, saved while it trained. Drag to watch the heads form.")
        self.probeStepLabel = QLabel(objectName="probeStepLabel")
        self.probeStepLabel.setMinimumWidth(150)
        row.addWidget(QLabel("Over training:"))
        row.addWidget(self.probePlayButton)
        row.addWidget(self.probeSlider, 1)
        row.addWidget(self.probeStepLabel)
        self.probeTimer = QTimer(self)
        self.probeTimer.setInterval(400)
        self.probeTimer.timeout.connect(self._advance_probe)
        self.probeSlider.valueChanged.connect(self._moved)
        self.probePlayButton.toggled.connect(self._on_probe_play)
        self.setVisible(False)

    def probe_steps(self) -> list[int]:
        """The saved evaluation steps the slider runs over, ascending."""
        return list(self.probe_paths)

    def index(self) -> int:
        return self.probeSlider.value()

    def current_step(self) -> int | None:
        """The step at the slider (None: no steps)."""
        steps, i = self.probe_steps(), self.probeSlider.value()
        return steps[i] if 0 <= i < len(steps) else None

    def at_end(self) -> bool:
        return self.probeSlider.value() >= self.probeSlider.maximum()

    def playing(self) -> bool:
        return self.probeTimer.isActive()

    def stop(self) -> None:
        self.probePlayButton.setChecked(False)

    def set_paths(self, paths: dict[int, Path]) -> None:
        """The run's saved probe files by step, ascending; the slider's range follows."""
        self.probe_paths = paths
        self._sync()

    def _sync(self) -> None:
        n = len(self.probe_paths)
        self.probeSlider.blockSignals(True)
        self.probeSlider.setRange(0, max(0, n - 1))
        self.probeSlider.blockSignals(False)
        self.setVisible(n > 0)
        self.probePlayButton.setEnabled(n > 1)
        self._step_moved()

    def set_index(self, i: int, force: bool = False) -> None:
        """Move the slider to ``i``; ``force``: say so (`indexChanged`) even when it is there already."""
        if self.probeSlider.value() != i:
            self.probeSlider.setValue(i)  # → indexChanged
        elif force:
            self.indexChanged.emit(i)

    def wait_at(self, i: int) -> None:
        """Move the slider to ``i`` without showing that step's maps."""
        self.probeSlider.blockSignals(True)
        self.probeSlider.setValue(i)
        self.probeSlider.blockSignals(False)
        self._step_moved()

    def _moved(self, i: int) -> None:
        self.indexChanged.emit(i)
        self._step_moved()

    def _step_moved(self) -> None:
        """Say the slider's step in the label, and with `stepChanged` when it is another."""
        self._update_label()
        step = self.current_step()
        if step != self._step:
            self._step = step
            self.stepChanged.emit(step)

    def _update_label(self) -> None:
        steps = self.probe_steps()
        if not steps:
            self.probeStepLabel.setText("")
            return
        i = self.probeSlider.value()
        self.probeStepLabel.setText(f"step {steps[i]:,}  ({i + 1}/{len(steps)})")

    def _on_probe_play(self, playing: bool) -> None:
        self.probePlayButton.setText("❚❚ Pause" if playing else "▶ Play")
        if not playing:
            self.probeTimer.stop()
            return
        if self.probeSlider.value() >= self.probeSlider.maximum():
            self.set_index(0, force=True)  # from the start again
        self.probeTimer.start()

    def _advance_probe(self) -> None:
        i = self.probeSlider.value()
        if i >= self.probeSlider.maximum():
            self.probePlayButton.setChecked(False)
            return
        self.set_index(i + 1)
        if self.probeSlider.value() >= self.probeSlider.maximum():
            self.probePlayButton.setChecked(False)
