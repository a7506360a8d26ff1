"""The Exercises tab (``exerciseView``): write the paper's algorithms yourself (`core.paper.exercises`). The list of
exercises with a mark for each passed; the chosen one's stub in a Python editor; Check runs the code against the
float64 reference, on the model in focus's weights too, in a child process (a job: the window never waits) and says
what is wrong; hints unfold one at a time; the solution opens after a first try; Train with my code overlays the
loss curve of a short run with the learner's function in the model on the reference run's. The code, the hints
opened and the marks are kept across sessions (`progress.Progress`)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ...core.paper.exercises.catalog import BY_NAME, EXERCISES, Exercise
from ...core.paper.exercises.progress import Progress
from ..widgets.focus_label import FocusLabel
from ..widgets.python_editor import PythonEditor

if TYPE_CHECKING:
    from ...core.app.workspace import Workspace

CHECK, TRAIN = "exercise-check", "exercise-train"
PASSED, TRIED, NEW = "✓", "•", "  "
INTRO = ("Replace <code>raise NotImplementedError</code> with the body, then <b>Check</b>. Vectors are columns "
         "(X is d × ℓ, one token per column), indices are 0-based, and torch is imported. Your code runs in a "
         "separate process with a time limit, so a mistake never stops the app. Stuck? <b>Hint</b> opens one hint "
         "at a time; the <b>Solution</b> opens after your first Check.")


def _check(name: str, source: str, model: Any) -> dict[str, Any]:
    """In a job: the check in a child process, on the model in focus (``model``: (config, state) or None)."""
    from ...core.paper.exercises import sandbox

    return sandbox.check(name, source, *(model or (None, None)))


def _train(name: str, source: str) -> dict[str, Any]:
    from ...core.paper.exercises import sandbox

    return sandbox.train(name, source)


def _without_docstring(source: str) -> str:
    """``source`` less its function's docstring (the editor shows it)."""
    start = source.find('    """')
    end = source.find('"""\n', start + 7)
    return source if start < 0 or end < 0 else source[:start] + source[end + 4:]


class ExercisesPanel(QWidget):
    """``exerciseView``: the exercises of `EXERCISES`, the learner's marks and code kept in ``progress``."""

    def __init__(self, workspace: Workspace, progress: Progress | None = None, parent=None):
        super().__init__(parent, objectName="exerciseView")
        self.workspace = workspace
        self.progress = progress or Progress()
        self.exercise: Exercise = EXERCISES[0]
        self.list = QListWidget(objectName="exerciseList")
        for e in EXERCISES:
            self.list.addItem(QListWidgetItem(self._item_text(e)))
        self.list.setFixedWidth(self.list.sizeHintForColumn(0) + 2 * self.list.frameWidth() + 24)
        self.list.currentRowChanged.connect(self._show)

        self.titleLabel = QLabel(objectName="exerciseTitle", wordWrap=True)
        self.focusLabel = FocusLabel(workspace.focus, "exerciseFocusLabel")
        self.editor = PythonEditor(objectName="exerciseEditor")
        self.checkButton = QPushButton("Check", objectName="exerciseCheckButton", clicked=self.check)
        self.checkButton.setDefault(True)
        self.hintButton = QPushButton(objectName="exerciseHintButton", clicked=self.next_hint)
        self.solutionButton = QPushButton("Solution", objectName="exerciseSolutionButton", clicked=self.show_solution)
        self.trainButton = QPushButton("Train with my code", objectName="exerciseTrainButton", clicked=self.train)
        self.resetButton = QPushButton("Start again", objectName="exerciseResetButton", clicked=self.reset)
        buttons = QHBoxLayout()
        for b in (self.checkButton, self.hintButton, self.solutionButton, self.trainButton):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.resetButton)
        self.messageLabel = QLabel(objectName="exerciseMessage", wordWrap=True)
        self.messageLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hintsLabel = QLabel(objectName="exerciseHints", wordWrap=True)
        self.solutionView = PythonEditor(objectName="exerciseSolution", readOnly=True)
        self.solutionBox = QWidget(objectName="exerciseSolutionBox")
        box = QVBoxLayout(self.solutionBox)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("<b>Solution</b> (read-only: the answer, not your code)",
                             objectName="exerciseSolutionHeading"))
        box.addWidget(self.solutionView)
        self.curves = pg.PlotWidget(background="w", objectName="exerciseCurves")
        self.curves.setLabel("bottom", "step")
        self.curves.setLabel("left", "training loss (nats)")
        self.curves.addLegend(offset=(-10, 10))

        below = QWidget()
        lay = QVBoxLayout(below)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(buttons)
        lay.addWidget(self.messageLabel)
        lay.addWidget(self.hintsLabel)
        self.outputs = outputs = QSplitter(Qt.Orientation.Horizontal, objectName="exerciseOutputs",
                                           childrenCollapsible=False)
        outputs.addWidget(self.solutionBox)
        outputs.addWidget(self.curves)
        lay.addWidget(outputs, 1)
        self.split = split = QSplitter(Qt.Orientation.Vertical, objectName="exerciseSplitter", childrenCollapsible=False)
        split.addWidget(self.editor)
        split.addWidget(below)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        right = QWidget()
        col = QVBoxLayout(right)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.titleLabel)
        col.addWidget(self.focusLabel)
        col.addWidget(split, 1)
        outer = QHBoxLayout(self)
        outer.addWidget(self.list)
        outer.addWidget(right, 1)
        self.list.setCurrentRow(0)

    # ---- the exercise in view -------------------------------------------------------------------------------
    def _item_text(self, e: Exercise) -> str:
        mark = PASSED if self.progress.passed(e.name) else TRIED if self.progress.tried(e.name) else NEW
        return f"{mark} {e.algorithm.replace('Algorithm', 'Alg.')} · {e.title}"

    def _mark(self, e: Exercise) -> None:
        item = self.list.item(EXERCISES.index(e))
        if item is not None:
            item.setText(self._item_text(e))

    def choose(self, name: str) -> None:
        """Show the exercise ``name`` (`_show`, as the list's choice)."""
        self.list.setCurrentRow(EXERCISES.index(BY_NAME[name]))

    def _show(self, row: int) -> None:
        """Keep the code of the exercise left, show the one in ``row`` with the learner's last code (or its stub)."""
        self._keep_code()
        e = self.exercise = EXERCISES[row]
        trains = f" · Train with my code swaps it into {e.trains}" if e.trains else ""
        self.titleLabel.setText(f"<b>{html.escape(e.algorithm)} — {html.escape(e.title)}</b>: write the body of "
                                f"<code>{e.name}</code>, then Check: on random inputs, and on the weights of the model in "
                                f"focus where they fit{trains}.")
        self.editor.setPlainText(self.progress.of(e.name).get("code") or e.stub)
        self.trainButton.setEnabled(bool(e.trains))
        self.trainButton.setToolTip("A short run of a small GPT with your function in it, beside the same run "
                                    "with the model's own" if e.trains else
                                    "This exercise is not a part of the model that can be swapped")
        self.solutionBox.hide()
        self.curves.hide()
        self._say(INTRO)
        self._show_hints()

    def hideEvent(self, e) -> None:
        """The code typed is kept when the tab is left or the window closes, as when another exercise is chosen."""
        self._keep_code()
        super().hideEvent(e)

    def _keep_code(self) -> None:
        code = self.editor.toPlainText()
        if code and code != self.progress.of(self.exercise.name).get("code", self.exercise.stub):
            self.progress.update(self.exercise.name, code=code)

    def _say(self, text: str, ok: bool | None = None) -> None:
        color = {True: "#1a7f37", False: "#b3261e", None: "#333"}[ok]
        self.messageLabel.setStyleSheet(f"color: {color};")
        self.messageLabel.setText(text)

    def _show_hints(self) -> None:
        e, n = self.exercise, self.progress.of(self.exercise.name).get("hints", 0)
        self.hintsLabel.setText("<br>".join(f"<b>Hint {i + 1}.</b> {html.escape(h)}" for i, h in enumerate(e.hints[:n])))
        self.hintsLabel.setVisible(n > 0)
        self.hintButton.setText(f"Hint ({min(n + 1, len(e.hints))} of {len(e.hints)})" if n < len(e.hints)
                                else "No more hints")
        self.hintButton.setEnabled(n < len(e.hints))
        tried = self.progress.tried(e.name)
        self.solutionButton.setEnabled(tried)
        self.solutionButton.setToolTip("" if tried else "The solution opens after your first Check")

    def next_hint(self) -> None:
        n = self.progress.of(self.exercise.name).get("hints", 0)
        self.progress.update(self.exercise.name, hints=min(n + 1, len(self.exercise.hints)))
        self._show_hints()

    def _open_outputs(self) -> None:
        """Room for the solution or the curves: half the height below the editor."""
        sizes, wide = self.split.sizes(), sum(self.outputs.sizes())
        if sizes[1] < sum(sizes) // 2:
            self.split.setSizes([sum(sizes) // 2, sum(sizes) - sum(sizes) // 2])
        self.outputs.setSizes([wide // 2, wide - wide // 2])

    def show_solution(self) -> None:
        self.solutionView.setPlainText(_without_docstring(self.exercise.solution))
        self.solutionBox.show()
        self._open_outputs()

    def reset(self) -> None:
        self.editor.setPlainText(self.exercise.stub)

    # ---- Check and Train with my code (jobs) ----------------------------------------------------------------
    def _busy(self, busy: bool) -> None:
        self.checkButton.setEnabled(not busy)
        self.trainButton.setEnabled(not busy and bool(self.exercise.trains))

    def check(self) -> None:
        """Check the editor's code in a job; the answer comes to `_checked`."""
        e, code = self.exercise, self.editor.toPlainText()
        loaded = self.workspace.focus.loaded
        model = (loaded.config.model, loaded.model.state_dict()) if loaded is not None else None
        self._busy(True)
        self._say("Checking… (in a separate process; at most 10 s for your code)")
        self.workspace.jobs.submit(CHECK, _check, e.name, code, model, on_result=lambda r: self._checked(e, code, r),
                                   on_error=self._failed)

    def _checked(self, e: Exercise, code: str, result: dict[str, Any]) -> None:
        self._busy(False)
        self.progress.record(e.name, code, result["passed"])
        self._mark(e)
        if e is self.exercise:
            self._say(result["message"], result["passed"])
            self._show_hints()

    def _failed(self, message: str) -> None:
        self._busy(False)
        self._say(message, False)

    def train(self) -> None:
        """Train with my code in a job; the two curves come to `_trained`."""
        e = self.exercise
        self._busy(True)
        self._say("Training a small GPT twice (the model's own function, then yours)… about half a minute.")
        self.workspace.jobs.submit(TRAIN, _train, e.name, self.editor.toPlainText(),
                                   on_result=lambda r: self._trained(e, r), on_error=self._failed)

    def _trained(self, e: Exercise, result: dict[str, Any]) -> None:
        self._busy(False)
        if e is not self.exercise:
            return
        self._say(result["message"], result["passed"])
        self.curves.clear()
        if result.get("reference"):
            self.curves.plot(result["reference"], pen=pg.mkPen("#9aa0a6", width=5), name="the model's own")
        if result.get("mine"):
            self.curves.plot(result["mine"], pen=pg.mkPen("#d9480f", width=2), name=f"with your {e.name}")
        self.curves.setVisible(bool(result.get("reference")))
        self._open_outputs()
