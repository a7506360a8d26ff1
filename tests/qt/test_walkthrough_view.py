"""The walkthrough in the Paper tab (qt/panels/walkthrough.py): Walk through runs in a worker, Next / Previous step
forward and backward, the pseudocode's highlighted line follows each step (MHAttention's parts included), the
backward pass shows its gradient checks, the query token and head choose what is read, the header names the run
and step, and another model drops the walk."""
from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QWidget

from fatstudio import ModelConfig, RunConfig
from fatstudio.core.app.workspace import Workspace
from fatstudio.core.config import TrainConfig
from fatstudio.qt.binding import Settings
from fatstudio.qt.jobs import new_jobs
from fatstudio.qt.panels.paper import PaperPanel

LONG = 60_000
TINY = dict(vocab_size=29, l_max=16, L=2, L_enc=2, L_dec=2, H=2, d_e=12, d_mlp=16)


@pytest.fixture
def make_panel(qtbot):
    made = []

    def make(arch="gpt", **kw):
        settings = Settings(RunConfig(model=ModelConfig(arch=arch, **{**TINY, **kw}), train=TrainConfig(seed=7)))
        panel = PaperPanel(Workspace(settings, jobs=new_jobs()))
        made.append(panel)
        qtbot.addWidget(panel)
        panel.resize(1440, 900)
        panel.show()
        panel.tabs.setCurrentWidget(panel.walkthrough)
        return panel
    yield make
    for panel in made:
        panel.workspace.jobs.shutdown()


def walked(qtbot, panel, click=True):
    view = panel.walkthrough
    before = view.walk
    if click:
        qtbot.mouseClick(view.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.walk is not None and view.walk is not before and not panel.busy(), timeout=LONG)
    return view


def test_the_view_and_its_header(make_panel):
    panel = make_panel()
    view = panel.findChild(QWidget, "walkthroughView")
    assert view is panel.walkthrough and panel.tabs.indexOf(view) >= 0
    for cls, name in ((QPushButton, "walkthroughRunButton"), (QPushButton, "walkthroughNextButton"),
                      (QPushButton, "walkthroughPrevButton"), (QComboBox, "walkthroughQueryCombo"),
                      (QComboBox, "walkthroughDirectionCombo"), (QComboBox, "walkthroughHeadCombo")):
        assert view.findChild(cls, name) is not None, name
    label = view.findChild(QLabel, "walkthroughFocusLabel")
    assert label.words().startswith("Run: ") and "a fresh model built from the settings (seed 7)" in label.words()
    assert not view.nextButton.isEnabled() and not view.prevButton.isEnabled()  # nothing walked yet


@pytest.mark.parametrize("arch", ["gpt", "edt"])
def test_next_and_previous_move_the_highlighted_line(qtbot, make_panel, arch):
    panel = make_panel(arch)
    view = walked(qtbot, panel)
    steps = view.walk.forward
    assert view.index == 0 and panel.line == steps[0].line and not view.prevButton.isEnabled()
    seen_parts = set()
    for i in range(1, len(steps)):
        qtbot.mouseClick(view.nextButton, Qt.MouseButton.LeftButton)
        assert view.index == i
        assert panel.line == steps[i].line, steps[i].title  # the pseudocode's highlighted line follows
        if steps[i].layer is not None and panel.code.lines[steps[i].line].stack:
            assert panel.layer == steps[i].layer
        assert steps[i].title in view.title.text()
        seen_parts.add(steps[i].part)
        visible = [p for p in view.panes if not p.isHidden()]
        assert len(visible) == len(steps[i].shown)
        assert all(html.escape(s.name) in p.caption.text() for p, s in zip(visible, steps[i].shown))
    assert not view.nextButton.isEnabled() and {"qkv", "scores", "mask", "softmax", "weighted", "out"} <= seen_parts
    qtbot.mouseClick(view.prevButton, Qt.MouseButton.LeftButton)
    assert view.index == len(steps) - 2 and panel.line == steps[-2].line
    text = panel.pseudocodeView.document().findBlockByNumber(panel.line).text()
    assert steps[-2].text in text


def test_backward_starts_at_the_loss_and_checks_gradients(qtbot, make_panel):
    panel = make_panel("gpt")
    view = walked(qtbot, panel)
    view.directionCombo.setCurrentIndex(1)
    first = view.walk.backward[0]
    assert view.index == 0 and "The loss" in view.title.text() and "ln 29" in view.words.text()
    assert "step 0" in view.words.text()
    qtbot.mouseClick(view.nextButton, Qt.MouseButton.LeftButton)
    step = view.walk.backward[1]
    assert panel.line == step.line == first.line  # back through the unembedding: the return line
    assert "gradient check" in view.checkLabel.text() and "relative error" in view.checkLabel.text()
    assert f"{step.check.entries[0][3]:.1e}" in view.checkLabel.text()
    assert "backward step 2 of" in view.stepLabel.text()


def test_the_header_gives_the_loss_per_token_as_the_rest_of_the_app(qtbot, make_panel):
    view = walked(qtbot, make_panel("gpt"))
    n = len(view.walk.x) - 1  # Algorithm 13 predicts every token but the first
    assert f"loss {view.walk.loss / n:.4f} nats/token (sum {view.walk.loss:.4f} over {n} positions)" \
        in view.inputLabel.text()


def test_the_query_token_and_head_walk_again_at_the_same_step(qtbot, make_panel):
    panel = make_panel("gpt")
    view = walked(qtbot, panel)
    assert view.queryCombo.count() == len(view.walk.x) and view.headCombo.count() == 2
    for _ in range(5):
        qtbot.mouseClick(view.nextButton, Qt.MouseButton.LeftButton)
    view.queryCombo.setCurrentIndex(1)
    view.queryCombo.activated.emit(1)
    walked(qtbot, panel, click=False)
    assert view.walk.query == 1 and view.index == 5
    framed = [p for p in view.panes if not p.isHidden() and p.frame[0].isVisible()]
    assert all(p.frame[0].value() == pytest.approx(1.5) for p in framed)  # column t = 2 framed
    view.headCombo.setCurrentIndex(1)
    view.headCombo.activated.emit(1)
    walked(qtbot, panel, click=False)
    assert view.walk.head == 1


def test_another_model_drops_the_walk(qtbot, make_panel):
    panel = make_panel("gpt")
    view = walked(qtbot, panel)
    panel.settings.update("model", d_e=16)
    assert view.walk is None and not view.nextButton.isEnabled() and view.runButton.text() == "Walk through"


def test_while_training_a_fresh_model_is_not_walked_and_the_view_says_why(qtbot, make_panel):
    panel = make_panel("gpt")
    panel.set_training(True)
    assert not panel.run_walk()
    assert "While training runs" in panel.walkthrough.title.text() and panel.walkthrough.walk is None


def test_a_small_attention_map_has_square_cells_token_labels_and_its_largest_weights_listed_first(qtbot, make_panel):
    panel = make_panel("gpt")
    panel.workspace.set_prompt_text("abcabcabcab")
    view = walked(qtbot, panel)
    i = next(k for k, s in enumerate(view.steps()) if s.shown and s.shown[0].name == "softmax(S)")
    view.go(i)
    pane, shown = view.panes[0], view.steps()[i].shown[0]
    qtbot.waitUntil(lambda: pane.plot.height() > 120)
    vb = pane.plot.getPlotItem().getViewBox()
    corner, far = vb.mapViewToScene(pg.Point(0.5, 0.5)), vb.mapViewToScene(pg.Point(1.5, 1.5))
    w, h = abs(far.x() - corner.x()), abs(far.y() - corner.y())
    assert w > 10 and abs(w - h) <= 0.1 * w  # square cells, not a squashed strip
    tokens = view.tokens
    rows = [label for _, label in pane.plot.getPlotItem().getAxis("left")._tickLevels[0]]
    assert rows == [f"{t + 1} {tok!r}" for t, tok in enumerate(tokens)]
    q = shown.query
    col = shown.values[:, q]
    top = int(np.argmax(col))
    text = pane.values.text()
    assert text.startswith(f"column t = {q + 1} {tokens[q]!r}, largest first: {col[top]:+.3g} (t_z {top + 1} "
                           f"{tokens[top]!r})")
