"""The Exercises tab (``exerciseView``): the list with its marks, the stub in a highlighted editor, Check in a job
(the window does not wait) on the model in focus too, hints one at a time, the solution after a try, Train with my
code's two curves, and the progress kept for the next session."""
import pytest
from conftest import LONG

from fatstudio.core.paper.exercises.catalog import BY_NAME, EXERCISES
from fatstudio.core.paper.exercises.progress import Progress
from fatstudio.qt.panels import exercises as view
from fatstudio.qt.panels.exercises import ExercisesPanel


@pytest.fixture
def panel(qtbot, workspace, wait_for_jobs, tmp_path):
    p = ExercisesPanel(workspace, Progress(tmp_path / "exercises.json"))
    p.resize(1100, 800)
    qtbot.addWidget(p)
    p.show()
    yield p
    wait_for_jobs(workspace)


def focus_on_a_small_gpt(workspace):
    import torch

    from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
    from fatstudio.core.data.tokenization import train_tokenizer
    from fatstudio.core.inference.loaded import LoadedModel
    from fatstudio.core.model.transformers import build_model

    tok = train_tokenizer("char", ["abcdefgh ijk"])
    torch.manual_seed(0)
    cfg = ModelConfig(arch="gpt", vocab_size=tok.vocab_size, l_max=8, L=1, H=2, d_e=8, d_mlp=16)
    workspace.focus.show(LoadedModel(build_model(cfg).eval(), tok, RunConfig(cfg, DataConfig(), TrainConfig())), "run")


def test_check_hints_solution_and_marks_kept_across_sessions(qtbot, panel, workspace, tmp_path):
    assert panel.objectName() == "exerciseView" and panel.list.count() == len(EXERCISES) >= 12
    panel.choose("layer_norm")
    e = BY_NAME["layer_norm"]
    assert panel.editor.toPlainText() == e.stub and not panel.solutionButton.isEnabled()
    assert panel.hintButton.text() == "Hint (1 of 3)" and not panel.hintsLabel.isVisibleTo(panel)
    panel.next_hint()
    assert "biased variance" in panel.hintsLabel.text() and "under the square root" not in panel.hintsLabel.text()
    assert panel.hintButton.text() == "Hint (2 of 3)"

    panel.editor.setPlainText(e.solution.replace("(v + eps) ** 0.5", "v ** 0.5 + eps"))
    panel.check()
    assert not panel.checkButton.isEnabled() and panel.messageLabel.text().startswith("Checking")  # not waited for
    qtbot.waitUntil(lambda: panel.checkButton.isEnabled(), timeout=LONG)
    assert "ê[0] is" in panel.messageLabel.text() and panel.list.item(6).text().startswith("•")
    assert panel.solutionButton.isEnabled()
    panel.show_solution()
    assert panel.solutionView.isVisibleTo(panel) and "(v + eps) ** 0.5" in panel.solutionView.toPlainText()
    assert '"""' not in panel.solutionView.toPlainText()  # the docstring is in the editor already

    focus_on_a_small_gpt(workspace)
    panel.editor.setPlainText(e.solution)
    panel.check()
    qtbot.waitUntil(lambda: panel.checkButton.isEnabled(), timeout=LONG)
    assert "Passed" in panel.messageLabel.text() and "model in focus's weights" in panel.messageLabel.text()
    assert panel.list.item(6).text().startswith("✓")

    panel.choose("attention")  # the code typed is kept on leaving
    panel.editor.setPlainText("# my attempt\n")
    panel.choose("layer_norm")
    again = ExercisesPanel(workspace, Progress(tmp_path / "exercises.json"))
    qtbot.addWidget(again)
    assert again.list.item(6).text().startswith("✓") and again.list.item(4).text().startswith(" ")
    again.choose("attention")
    assert again.editor.toPlainText() == "# my attempt\n"
    again.choose("layer_norm")
    assert again.editor.toPlainText() == e.solution and "biased variance" in again.hintsLabel.text()
    panel.editor.setPlainText("# typed, then the window closed\n")
    panel.hide()
    assert Progress(tmp_path / "exercises.json").of("layer_norm")["code"] == "# typed, then the window closed\n"


def test_the_editor_highlights_python_across_the_docstring(panel):
    panel.choose("attention")
    doc = panel.editor.document()

    def colours(line: int) -> set[str]:
        block = doc.findBlockByNumber(line)
        return {r.format.foreground().color().name() for r in block.layout().formats()}
    lines = panel.editor.toPlainText().splitlines()
    def_line = next(i for i, t in enumerate(lines) if t.startswith("def "))
    inside = def_line + 3  # a line of the docstring with no quotes of its own
    assert '"""' not in lines[inside] and len(colours(def_line)) >= 2
    assert len(colours(inside)) == 1 and colours(inside) <= colours(def_line + 1)  # the docstring's colour
    after = next(i for i, t in enumerate(lines) if "raise NotImplementedError" in t)  # code again after it
    assert not colours(after) & colours(inside) - {"#bbbbbb"}


def test_train_with_my_code_overlays_the_two_curves(qtbot, panel, monkeypatch):
    from fatstudio.core.paper.exercises.training import train_with

    monkeypatch.setattr(view, "_train", lambda name, source: train_with(BY_NAME[name], source, 3))  # no child
    panel.choose("bpe_merges")
    assert not panel.trainButton.isEnabled()
    panel.choose("attention")
    panel.editor.setPlainText(BY_NAME["attention"].solution)
    panel.train()
    qtbot.waitUntil(lambda: panel.checkButton.isEnabled(), timeout=LONG)
    assert panel.messageLabel.text().startswith("The same curve: 3 steps")
    items = panel.curves.getPlotItem().listDataItems()
    assert len(items) == 2 and panel.curves.isVisibleTo(panel)
    (_, ref), (_, mine) = items[0].getData(), items[1].getData()
    assert len(ref) == len(mine) == 3 and max(abs(ref - mine)) < 1e-5


def test_the_solution_has_a_heading_and_the_list_goes_by_algorithm_number(panel):
    import re

    from PySide6.QtWidgets import QLabel

    panel.choose("layer_norm")
    panel.show_solution()
    heading = panel.findChild(QLabel, "exerciseSolutionHeading")
    assert heading is not None and heading.isVisibleTo(panel) and "Solution" in heading.text()
    assert heading.geometry().bottom() <= panel.solutionView.geometry().top()
    numbers = [int(m.group(1)) for i in range(panel.list.count())
               if (m := re.search(r"Alg\. (\d+)", panel.list.item(i).text()))]
    assert len(numbers) >= 12 and numbers == sorted(numbers)
    panel.choose("attention")
    assert not heading.isVisibleTo(panel)
