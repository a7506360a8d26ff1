"""The Paper tab: the linked pseudocode (click a line: the Model panel marks the settings it uses, the details
show its parameters and, after a forward pass, its tensor), a head clicked in the Attention tab highlights the
line that made it, "Check against the paper" runs the literal reference in a worker, and the deviations from
the paper are listed. Every architecture (bert with a class head too), tiny models, offscreen."""
from __future__ import annotations

import html
import re

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import torch
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton, QTextBrowser, QWidget

from fatstudio import ModelConfig, RunConfig, build_model
from fatstudio.core.app.workspace import Workspace
from fatstudio.core.config import DataConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import generation
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.names import MapName
from fatstudio.core.paper import fidelity
from fatstudio.core.paper.pseudocode import tensor_stats
from fatstudio.qt.binding import Settings
from fatstudio.qt.jobs import new_jobs
from fatstudio.qt.panels.model import ModelPanel
from fatstudio.qt.panels.paper import PaperPanel

LONG = 60_000
EXP = re.compile(r"\d\.\de[-+]\d\d")  # a number written with an exponent, e.g. 3.1e-16
TINY = dict(vocab_size=29, l_max=16, L=2, L_enc=2, L_dec=2, H=3, d_e=12, d_mlp=16)
ARCHS = [("gpt", {}), ("gopher", {}), ("bert", {}), ("bert", {"n_classes": 3}), ("edt", {})]
ARCH_IDS = ["gpt", "gopher", "bert", "bert-class_head", "edt"]
CORPUS = ["the quick brown fox jumps over the lazy dog.\n", "hello world"]
TASKS = {"gpt": "next_token", "gopher": "next_token", "bert": "masked_lm", "edt": "seq2seq"}


@pytest.fixture
def make_panel(qtbot):
    made = []

    def make(arch="gpt", **kw):
        settings = Settings(RunConfig(model=ModelConfig(arch=arch, **{**TINY, **kw}), train=TrainConfig(seed=7)))
        panel = PaperPanel(Workspace(settings, jobs=new_jobs()))
        made.append(panel)
        qtbot.addWidget(panel)
        panel.resize(1500, 1000)
        panel.show()
        return panel
    yield make
    for panel in made:
        panel.workspace.jobs.shutdown()


def line_index(panel, pred) -> int:
    return next(i for i, line in enumerate(panel.code.lines) if pred(line))


def click_line(qtbot, panel, index):
    """Click the middle of line ``index`` of the pseudocode view, as a person would."""
    view = panel.pseudocodeView
    block = view.document().findBlockByNumber(index)
    rect = view.blockBoundingGeometry(block).translated(view.contentOffset())
    assert view.viewport().rect().contains(rect.center().toPoint()), "the line is not on screen"
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(40, int(rect.center().y())))


def run_forward(qtbot, panel):
    assert panel.run_forward()
    qtbot.waitUntil(lambda: panel.trace is not None and not panel.busy(), timeout=LONG)


def test_the_widgets_have_their_names(make_panel):
    panel = make_panel()
    assert panel.findChild(QPlainTextEdit, "pseudocodeView") is panel.pseudocodeView
    assert panel.findChild(QPushButton, "checkPaperButton") is panel.checkPaperButton
    assert panel.findChild(QLabel, "checkPaperLabel") is panel.checkPaperLabel
    assert isinstance(panel.findChild(QTextBrowser, "deviationsView"), QTextBrowser)


def test_pseudocode_follows_the_settings(make_panel):
    panel = make_panel("gpt", d_e=128, H=4)
    view = panel.pseudocodeView
    assert "Algorithm 10: P ← DTransformer" in view.toPlainText() and "√32" in view.toPlainText()
    panel.settings.update("model", H=3)  # 128 / 3 → d_attn 42: the shapes change
    assert "√42" in view.toPlainText()
    panel.settings.update("model", vocab_size=77)
    assert "ℝ^(77×128)" in view.toPlainText()
    panel.settings.update("model", arch="edt")
    assert "Algorithm 8: P ← EDTransformer" in view.toPlainText()
    panel.settings.update("model", H_kv=2)  # does not divide 3
    assert "(fix the configuration" in view.toPlainText()
    assert not panel.checkPaperButton.isEnabled() and not panel.forwardButton.isEnabled()


@pytest.mark.parametrize("arch,kw", ARCHS, ids=ARCH_IDS)
def test_clicking_a_line_names_its_fields_and_parameters(qtbot, make_panel, arch, kw):
    panel = make_panel(arch, **kw)
    chosen = []
    panel.fieldsChosen.connect(chosen.append)
    i = line_index(panel, lambda line: line.number is not None and "W_mlp1^l" in line.text)  # the first MLP
    click_line(qtbot, panel, i)
    line = panel.selected_line()
    assert panel.line == i and line.number in (7, 8)  # Algorithm 8 line 7, 9 line 7, 10 line 8
    assert chosen == [list(line.fields)] and "d_mlp" in chosen[0] and "activation" in chosen[0]
    stack = "encoder" if arch == "edt" else "layers"
    assert f"{stack}.0.mlp.W_mlp1.weight" in panel.paramsLabel.text()
    assert "Forward pass" in panel.tensorLabel.text()  # no tensor before a forward pass
    sel = panel.pseudocodeView.extraSelections()
    assert len(sel) == 1 and sel[0].cursor.blockNumber() == i  # the line is highlighted
    panel.layerCombo.setCurrentIndex(1)
    panel.layerCombo.activated.emit(1)  # the second layer: its parameters
    assert f"{stack}.1.mlp.W_mlp1.weight" in panel.paramsLabel.text() and "layer l = 2" in panel.lineTitle.text()


def test_the_histogram_shows_only_when_a_line_has_a_tensor(qtbot, make_panel):
    panel = make_panel()
    hist = panel.histogram
    assert not hist.isVisibleTo(panel)  # no line clicked: no empty axes
    i = line_index(panel, lambda line: line.text == "return P = softmax(W_u X)")
    click_line(qtbot, panel, i)
    assert not hist.isVisibleTo(panel)  # a line, but no forward pass yet
    run_forward(qtbot, panel)
    click_line(qtbot, panel, i)
    assert hist.isVisibleTo(panel) and panel.histogram_counts()


@pytest.mark.parametrize("arch,kw", ARCHS, ids=ARCH_IDS)
def test_forward_pass_shows_each_lines_tensor(qtbot, make_panel, arch, kw):
    panel = make_panel(arch, **kw)
    run_forward(qtbot, panel)
    assert "random token ids" in panel.traced  # no corpus: random ids, and it says so
    for pred in (lambda line: line.text == "return P = softmax(W_u X)",
                 lambda line: line.attention is not None and line.number is not None):
        i = line_index(panel, pred)
        click_line(qtbot, panel, i)
        tap = panel.selected_line().tap_at(panel.layer)
        want = tensor_stats(panel.trace.tensors[tap])
        text = panel.tensorLabel.text()
        for words in (f"shape {want.shape}", f"mean {want.mean:.4g}", f"std {want.std:.4g}", f"‖·‖ {want.norm:.4g}"):
            assert words in text, words
        counts = panel.histogram_counts()
        assert counts == list(want.counts) and sum(counts) == int(np.prod(want.shape))
    text_before = panel.tensorLabel.text()
    panel.layerCombo.activated.emit(1)  # layer 2 of the attention line: another tensor
    assert panel.tensorLabel.text() != text_before and "layer l = 2" in panel.lineTitle.text()
    if kw.get("n_classes"):
        click_line(qtbot, panel, line_index(panel, lambda line: "P(c | x)" in line.text))
        assert "shape (3,)" in panel.tensorLabel.text()


def test_forward_pass_reads_the_prompt(qtbot, make_panel, monkeypatch):
    tok = train_tokenizer("char", CORPUS)
    panel = make_panel("gpt", vocab_size=tok.vocab_size)

    class Prepared:  # what the corpus panel gives: a corpus and its tokenizer
        tokenizer = tok
        corpus = None
    # the corpus the workspace has read, with its tokenizer
    monkeypatch.setattr(type(panel.workspace.corpus), "prepared", property(lambda _corpus: Prepared))
    panel.workspace.set_prompt_text("the fox")  # what the Prompt tab writes there
    run_forward(qtbot, panel)
    assert panel.trace.x == tok.encode("the fox") and "'the fox'" in panel.traced
    panel.workspace.set_prompt_text("the fox ☃")  # a symbol the tokenizer does not know: said in words
    assert panel.run_forward()
    qtbot.waitUntil(lambda: not panel.busy(), timeout=LONG)
    assert "☃" in panel.tensorLabel.text() or "unknown" in panel.tensorLabel.text().lower()


@pytest.mark.parametrize("arch,kind,number,words", [("gpt", "self", 6, "layer 2"), ("bert", "self", 5, "layer 2"),
                                                    ("edt", "enc", 5, "encoder layer 2"),
                                                    ("edt", "dec", 14, "decoder layer 2"),
                                                    ("edt", "cross", 16, "cross-attention layer 2")])
def test_a_head_highlights_the_line_that_made_it(qtbot, make_panel, arch, kind, number, words):
    panel = make_panel(arch)
    chosen = []
    panel.fieldsChosen.connect(chosen.append)
    panel.show_head(MapName(kind, 1), 2)
    line = panel.selected_line()
    assert line.attention == kind and line.number == number and "MHAttention" in line.text
    title = html.unescape(panel.lineTitle.text())
    assert f"{line.where()} · {words} · head 3<" in title  # counted from 1, the kind in words, as everywhere
    assert not re.search(r"\bl\d|\bh\d|/\d", title)  # no 0-based internal names (l1 h3, {kind}/1)
    assert chosen == []  # a head's line does not pull the settings column to the Model tab
    sel = panel.pseudocodeView.extraSelections()
    assert sel[0].cursor.blockNumber() == panel.line
    run_forward(qtbot, panel)  # then the head's own weights are shown
    assert f"softmax(S/√d_attn) of {words} · head 3" in panel.tensorLabel.text()
    A = panel.trace.attention[MapName(kind, 1)][2]
    assert f"shape {A.shape}" in panel.tensorLabel.text() and np.allclose(A.sum(-1), 1)


@pytest.mark.parametrize("arch,kw", ARCHS, ids=ARCH_IDS)
def test_check_against_the_paper(qtbot, make_panel, arch, kw):
    panel = make_panel(arch, **kw)
    qtbot.mouseClick(panel.checkPaperButton, Qt.MouseButton.LeftButton)
    assert not panel.checkPaperButton.isEnabled()  # off the GUI thread, one at a time
    qtbot.waitUntil(lambda: panel.check is not None and not panel.busy(), timeout=LONG)
    text = panel.checkPaperLabel.text()
    numbers = EXP.findall(text)
    assert len(numbers) == (3 if kw.get("n_classes") else 2), text
    assert all(float(n) <= 1e-9 for n in numbers) and text.startswith("✓")
    tip = panel.checkPaperLabel.toolTip()
    algorithm = {"edt": 8, "bert": 9}.get(arch, 10)
    for words in (f"Algorithm {algorithm}", "reference", "float64", "probabilities", "attention weights"):
        assert words in tip, words
    assert panel.checkPaperButton.isEnabled()


def test_a_fault_shows_in_the_label(qtbot, make_panel, monkeypatch):
    from fatstudio.core.model import attention

    monkeypatch.setattr(attention, "scale", lambda d_attn: (d_attn + 1) ** -0.5)
    panel = make_panel("gpt")
    assert panel.run_check()
    qtbot.waitUntil(lambda: panel.check is not None and not panel.busy(), timeout=LONG)
    assert panel.checkPaperLabel.text().startswith("✗")
    assert panel.check.differences.attention_max > 1e-6  # a fresh model: small scores


def test_deviations_are_listed_the_chosen_architectures_first(make_panel):
    panel = make_panel("edt")
    text = panel.deviationsView.toPlainText()
    for d in fidelity.deviations():
        assert d.topic in text and d.fatstudio[:40] in text
    assert panel.tabs.tabText(1) == "Deviations from the paper"
    order = [text.index(h) for h in ("For EDTransformer", "Erratum: the decoder's loop index", "For every architecture",
                                     "Initialisation", "For the other architectures", "Erratum: BERT")]
    assert order == sorted(order)
    panel.settings.update("model", arch="bert")  # the list follows the architecture chosen
    text = panel.deviationsView.toPlainText()
    assert text.index("For ETransformer / BERT") < text.index("Erratum: BERT") < text.index("For every architecture")
    assert text.index("For the other architectures") < text.index("Erratum: the decoder's loop index")


# ---- in the window -------------------------------------------------------------------------------------------
def make_loaded(arch, **kw):
    tok = train_tokenizer("char", CORPUS)
    cfg = ModelConfig(arch=arch, **{**TINY, "vocab_size": tok.vocab_size, **kw})
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.4)
    task = "classification" if kw.get("n_classes") else TASKS[arch]
    return LoadedModel(model, tok, RunConfig(model=cfg, data=DataConfig(task=task)), [], f"{arch} test run", 5)


def test_the_window_has_a_paper_tab(qtbot, window):
    w = window
    tabs = [w.viewTabs.tabText(i) for i in range(w.viewTabs.count())]
    assert "Paper" in tabs and w.viewTabs.widget(tabs.index("Paper")) is w.paper_panel
    assert w.findChild(QPlainTextEdit, "pseudocodeView") is w.paper_panel.pseudocodeView
    assert not w.model_panel.findChildren(QPlainTextEdit, "pseudocodeView")  # moved out of the Model panel
    w.viewTabs.setCurrentWidget(w.paper_panel)
    for name in ("checkPaperButton", "checkPaperLabel", "pseudocodeView"):
        assert w.findChild(QWidget, name).isVisible(), name


def test_a_clicked_line_marks_the_model_panels_rows(qtbot, window):
    w = window
    w.settingsTabs.setCurrentIndex(1)  # the Corpus tab: the click brings the Model tab forward
    w.viewTabs.setCurrentWidget(w.paper_panel)
    panel = w.paper_panel
    i = line_index(panel, lambda line: line.attention is not None and line.number is not None)
    click_line(qtbot, panel, i)
    fields = set(panel.selected_line().fields)
    assert {"H", "d_attn"} <= set(w.model_panel.highlighted) and set(w.model_panel.highlighted) <= fields
    assert "background" in w.model_panel.form.labels["H"].styleSheet()
    assert w.model_panel.form.labels["d_mlp"].styleSheet() == ""  # only the line's rows
    assert w.settingsTabs.currentIndex() == 0
    click_line(qtbot, panel, line_index(panel, lambda line: line.number is not None and "W_mlp1^l" in line.text))
    assert "d_mlp" in w.model_panel.highlighted and "H" not in w.model_panel.highlighted
    assert w.model_panel.form.labels["H"].styleSheet() == ""


def test_model_panel_highlights_alone(qtbot, workspace):
    panel = ModelPanel(workspace)
    qtbot.addWidget(panel)
    panel.highlight_fields(["d_e", "H", "not a field"])
    assert panel.highlighted == ["H", "d_e"]  # in form order, known rows only
    assert panel.form.labels["d_e"].styleSheet() == ModelPanel.HIGHLIGHT
    panel.highlight_fields([])
    assert panel.highlighted == [] and panel.form.labels["d_e"].styleSheet() == ""


@pytest.mark.parametrize("arch,kw", ARCHS, ids=ARCH_IDS)
def test_the_loaded_model_is_checked_and_traced(qtbot, window, arch, kw):
    w = window
    loaded = make_loaded(arch, **kw)
    w.workspace.set_model(loaded)  # what opening a run or taking a snapshot does
    panel = w.paper_panel
    assert panel.modelCombo.currentData() == "loaded" and "test run" in panel.modelCombo.currentText()
    assert panel.subject().loaded is loaded
    assert panel.code.config == loaded.model.config.resolved()
    panel.run_check()
    qtbot.waitUntil(lambda: panel.check is not None and not panel.busy(), timeout=LONG)
    assert all(float(n) <= 1e-9 for n in EXP.findall(panel.checkPaperLabel.text()))
    run_forward(qtbot, panel)
    assert panel.shapes["unembed.W_u.weight"] == (loaded.tokenizer.vocab_size, TINY["d_e"])  # shapes after a pass
    panel.modelCombo.setCurrentIndex(panel.modelCombo.findData("fresh"))
    panel.modelCombo.activated.emit(panel.modelCombo.currentIndex())
    assert panel.subject().loaded is None and panel.trace is None  # the trace was of the other model


def test_a_head_clicked_in_the_attention_grid_highlights_its_line(qtbot, window):
    w = window
    loaded = make_loaded("gpt")
    w.workspace.set_model(loaded)
    maps = generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("the fox"))
    w.attention_panel.show_maps(maps)
    w.attention_panel.headGrid.headClicked.emit(1, 2)  # a click on the thumbnail of layer 1, head 2 (0-based)
    line = w.paper_panel.selected_line()
    assert line.attention == "self" and line.number == 6
    assert w.paper_panel.layer == 1 and w.paper_panel.head == 2
    assert "layer 2 · head 3" in w.paper_panel.lineTitle.text()
    assert not w.model_panel.highlighted  # looking at a head does not pull the settings column to the Model tab


def test_the_prompt_text_and_the_loaded_model_reach_the_tabs_through_the_workspace(qtbot, window):
    w = window
    w.prompt_panel.promptEdit.setPlainText("the fox")  # the Prompt tab writes its text to the workspace
    assert w.workspace.prompt_text == "the fox"
    loaded = make_loaded("gpt")
    w.workspace.set_model(loaded)  # the Prompt, Attention and Paper tabs follow the workspace's model
    assert w.prompt_panel.loaded is loaded and w.attention_panel.loaded is loaded and w.paper_panel.loaded is loaded
    assert w.loaded_model is loaded
