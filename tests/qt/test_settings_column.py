"""The settings column and the Training view as a newcomer meets them (issue 21): every settings field found
by its config key, an invalid setting said once, Estimate time beside Train, a preset's note when its steps are
too few, the plan before the first run, the finished status line keeping the last evaluation, a samples pane
wide enough for a line of code, and settings widgets that fit at 1366×740 and 1440×900."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLabel,
    QPushButton,
    QStyle,
    QStyleOptionComboBox,
    QWidget,
)

from fatstudio.core.config import RunConfig
from fatstudio.qt.widgets.forms import KeyedField, keyed_editor

LONG = 60_000
NOT_SHOWN = {"model.n_classes"}  # follows from the data when a run starts; no field shows it
SIZES = ((1366, 740), (1440, 900))


def keys() -> list[str]:
    """Every config key of a RunConfig: "model.L", "data.tokenizer", "train.steps", …"""
    config = RunConfig()
    return [f"{s.name}.{f.name}" for s in dataclasses.fields(config) for f in dataclasses.fields(getattr(config, s.name))]


def tiny(w, steps=20) -> None:
    """A tiny model and a short run on the copy corpus, set through the fields a person would touch."""
    for name, value in (("L", 1), ("H", 2), ("d_e", 16), ("d_mlp", 32), ("l_max", 16)):
        keyed_editor(w, f"model.{name}").setValue(value)
    for name, value in (("steps", steps), ("batch_size", 4), ("eval_interval", 10), ("eval_iters", 2),
                        ("warmup", 2), ("sample_tokens", 16)):
        keyed_editor(w, f"train.{name}").setValue(value)
    w.corpus_panel.set_corpus("copy")


def shown_labels(w, text: str) -> list[QLabel]:
    return [lab for lab in w.findChildren(QLabel) if lab.isVisible() and text in lab.text()]


def test_every_settings_field_is_found_by_its_config_key(window):
    w = window
    for key in keys():
        if key in NOT_SHOWN:
            assert w.findChild(QWidget, key) is None, key
            continue
        assert w.findChild(QWidget, key) is not None, key
    settings = w.settings
    for panel, section in ((w.model_panel, "model"), (w.corpus_panel, "data"), (w.train_panel, "train")):
        for name, ed in panel.binding.editors.items():  # the editor bound to the field is the one found
            assert keyed_editor(w, f"{section}.{name}") is ed.widget, name
            assert ed.read() == getattr(panel.binding._shown(settings.section(section)), name), name
    # the public names of api.md stay on the same widgets: a holder named by the key keeps the editor
    assert keyed_editor(w, "model.arch") is w.findChild(QComboBox, "archCombo") is w.model_panel.archCombo
    assert keyed_editor(w, "data.tokenizer") is w.findChild(QComboBox, "tokenizerCombo")
    holder = w.findChild(QWidget, "model.arch")
    assert isinstance(holder, KeyedField) and holder.focusProxy() is w.model_panel.archCombo
    assert w.model_panel.form.labels["arch"].buddy() is w.model_panel.archCombo  # Alt+letter focuses the combo
    assert "N_V" in w.findChild(QWidget, "model.vocab_size").toolTip()  # shown, not edited: the tokenizer's
    assert w.findChild(QWidget, "data.corpus").focusProxy() is w.corpus_panel.builtinCombo
    keyed_editor(w, "train.steps").setValue(1234)  # found by its key, it edits the settings
    assert settings.train.steps == 1234
    assert w.findChild(QWidget, "probeEdit") is not None and w.findChild(QWidget, "probe.text") is None  # no key


def test_an_invalid_setting_is_said_once(qtbot, window, tmp_path):
    w = window
    keyed_editor(w, "model.H").setValue(4)
    keyed_editor(w, "model.H_kv").setValue(3)  # does not divide H
    said = shown_labels(w, "H_kv = 3")
    assert said == [w.validationLabel], [lab.objectName() for lab in said]  # under the settings, once
    assert "#b00020" in w.model_panel.form.labels["H_kv"].styleSheet()  # its row is marked, not repeated
    assert not w.train_view.estimateButton.isEnabled() and "H_kv" in w.train_view.estimateButton.toolTip()
    keyed_editor(w, "model.H_kv").setValue(2)
    assert w.validationLabel.isHidden() and not w.model_panel.form.labels["H_kv"].styleSheet()
    assert w.train_view.estimateButton.isEnabled()
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    w.corpus_panel.set_corpus(str(empty))
    qtbot.waitUntil(lambda: w.corpus_panel.error is not None and not w.corpus_panel.loading, timeout=LONG)
    w.settingsTabs.setCurrentIndex(1)  # the Corpus tab
    message = w.corpus_panel.error
    assert shown_labels(w, message) == [w.validationLabel]
    assert "cannot be used" in w.corpus_panel.sourceLabel.full


def test_estimate_time_sits_beside_train(window):
    w = window
    tv = w.train_view
    row = tv.layout().itemAt(0).layout()  # the first row of the Training view
    assert row.indexOf(tv.estimateButton) == row.indexOf(tv.trainButton) + 1
    assert w.findChild(QPushButton, "estimateButton") is tv.estimateButton
    assert w.model_panel.findChild(QPushButton, "estimateButton") is None
    assert w.findChild(QLabel, "estimateLabel") is tv.estimateLabel
    tv.show_estimate("2,000 steps ≈ 1 min 10 s on cpu", "measured")
    keyed_editor(w, "train.steps").setValue(2500)  # an estimate of other settings goes
    assert tv.estimateLabel.text() == ""


def test_a_preset_with_too_few_steps_for_its_walkthrough_says_so(window):
    w = window
    induction = next(p for p in w.presets if p.key.endswith("gpt-induction"))
    w.apply_preset(induction)
    note = w.settingsNoteLabel
    assert note.isHidden()  # as shipped
    keyed_editor(w, "train.steps").setValue(induction.demo_steps - 100)
    assert not note.isHidden() and f"{induction.demo_steps:,} steps" in note.text()
    assert f"{induction.demo_steps - 100:,}" in note.text()
    keyed_editor(w, "train.steps").setValue(induction.demo_steps)
    assert note.isHidden()


def test_before_the_first_run_the_loss_plot_shows_the_presets_band_and_says_press_train(qtbot, window):
    w = window
    plots = w.plots
    assert plots.reference is not None  # the default preset's reference band, before any run
    assert "Press ▶ Train" in plots.plan_text() and "grey band" in plots.plan_text()
    view = plots.lossPlot.getPlotItem().getViewBox()
    assert view.viewRange()[0][1] >= 0.9 * w.settings.train.steps  # over the steps to train
    keyed_editor(w, "train.lr").setValue(0.01)  # settings nobody measured: no band, still "press Train"
    assert plots.reference is None and "Press ▶ Train" in plots.plan_text()


def test_before_a_run_the_live_learning_rate_shows_the_settings_eta(window):
    w = window
    spin = w.train_view.lrSpin
    assert not spin.isEnabled() and spin.value() == w.settings.train.lr == w.presets[0].config.train.lr
    grokking = next(p for p in w.presets if p.config.train.lr != w.presets[0].config.train.lr)
    w.apply_preset(grokking)  # another preset: its η
    assert spin.value() == grokking.config.train.lr
    keyed_editor(w, "train.lr").setValue(5e-4)  # the Train settings' field: the η the next run starts at
    assert spin.value() == 5e-4


def test_the_finished_status_line_keeps_the_last_evaluation(qtbot, window):
    w = window
    tiny(w, steps=20)
    qtbot.waitUntil(lambda: w.corpus_panel.info is not None and not w.corpus_panel.loading, timeout=LONG)
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "idle" and w.job is None, timeout=LONG)
    assert w.last_status == "finished", w.last_error
    status = w.train_view.statusLabel.text()
    assert status.startswith("Run finished") and "last evaluation, step 20" in status, status
    assert "validation loss" in status
    assert w.plots.plan_text() == ""  # the run's curves, not the plan


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_line_of_code_fits_the_samples_pane(qtbot, window, size):
    w = window
    w.resize(*size)
    qtbot.waitUntil(lambda: w.width() == size[0], timeout=5000)
    QApplication.processEvents()
    view = w.train_view.samplesView
    columns = 60 if size[0] < 1440 else 80
    w.train_view.add_sample(250, "x" * columns)
    QApplication.processEvents()
    block = view.document().findBlockByNumber(1)
    assert block.text() == "x" * columns and block.layout().lineCount() == 1, view.viewport().width()


def _clipped(widget: QWidget) -> list[str]:
    """The texts of a combo box (any item) or a spin box (what it shows) wider than the room it has for them."""
    fm = widget.fontMetrics()
    if isinstance(widget, QComboBox):
        opt = QStyleOptionComboBox()
        widget.initStyleOption(opt)
        room = widget.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                             QStyle.SubControl.SC_ComboBoxEditField, widget).width()
        texts = [widget.itemText(i) for i in range(widget.count())]
        return [t for t in texts if fm.horizontalAdvance(t) > room]
    if isinstance(widget, QAbstractSpinBox):
        edit = widget.lineEdit()
        room = edit.width() - edit.textMargins().left() - edit.textMargins().right() - 4  # QLineEdit's own margin
        return [widget.text()] if fm.horizontalAdvance(widget.text()) > room else []
    return []


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_settings_widgets_and_headers_fit(qtbot, window, size):
    w = window
    w.resize(*size)
    qtbot.waitUntil(lambda: w.width() == size[0], timeout=5000)
    clipped = {}
    for preset in (w.presets[0], next(p for p in w.presets if p.config.model.positions == "rope")):  # the b row too
        w.apply_preset(preset)
        for tab, panel in enumerate((w.model_panel, w.corpus_panel, w.train_panel)):
            w.settingsTabs.setCurrentIndex(tab)
            QApplication.processEvents()
            QApplication.processEvents()  # the column widens to what the shown rows need
            assert panel.width() <= w.settingsTabs.widget(tab).viewport().width(), (preset.key, tab)
            for widget in panel.findChildren(QWidget):
                if widget.isVisible() and _clipped(widget):
                    clipped[widget.objectName()] = _clipped(widget)
    tv = w.train_view
    tv.lrSpin.setValue(3.333e-5)  # what a run's η looks like
    QApplication.processEvents()
    for widget in (tv.lrSpin, tv.runs.resumeSpin):
        if _clipped(widget):
            clipped[widget.objectName()] = _clipped(widget)
    assert not clipped, clipped
    from pathlib import Path

    from fatstudio.core.runs.folder import Run

    name = "20250101-120000-gpt-python-stdlib"  # a run as the runs list shows it
    tv.runs.set_runs([Run(Path("/runs") / name, RunConfig(), {"status": "finished", "step": 2000, "total_steps": 2000,
                                                               "best_val_loss": 1.54321, "created": 1.7e9})])
    QApplication.processEvents()
    tree = tv.runs.tree
    header = tree.header()
    model = header.model()
    for i in range(header.count()):
        label = str(model.headerData(i, header.orientation()))
        assert header.sectionSize(i) >= header.fontMetrics().horizontalAdvance(label) + 8, label
    for i in range(1, header.count()):  # every column but the run's name (elided, its folder in the tooltip)
        text = tree.topLevelItem(0).text(i)
        assert header.sectionSize(i) >= tree.fontMetrics().horizontalAdvance(text), text
    assert header.length() <= tree.viewport().width()  # no sideways scrolling


def test_runs_list_elides_names_in_the_middle_and_says_best_val(qtbot):
    """A sweep's runs differ only at the end of their names: the name column keeps the end; the loss column is
    the best validation loss and says so."""
    from pathlib import Path

    from PySide6.QtWidgets import QStyle

    from fatstudio.core.runs.folder import Run
    from fatstudio.qt.panels.train.runs_list import RunsList

    runs = RunsList()
    qtbot.addWidget(runs)
    names = [f"sweep-20261126-210159-v{v}-s{s}" for v, s in ((1, 1337), (2, 1338))]
    runs.set_runs([Run(Path("/runs") / n, RunConfig(), {"status": "finished", "step": 150, "total_steps": 150,
                                                        "best_val_loss": 4.5115, "created": 1.7e9}) for n in names])
    runs.resize(runs.minimumSizeHint().width(), 300)
    runs.show()
    tree = runs.tree
    room = tree.header().sectionSize(0) - 2 * tree.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) - 4
    shown = [tree.fontMetrics().elidedText(n, tree.textElideMode(), room) for n in names]
    assert all("…" in s for s in shown) and shown[0] != shown[1], shown  # cut, the ends that differ kept
    assert tree.headerItem().text(3) == "best val" and "best" in tree.headerItem().toolTip(3)


def test_a_warm_up_as_long_as_training_is_said_under_the_column(window):
    """100 steps with a 100-step warm-up: η rises every step and never reaches its value, and nothing said so."""
    w = window
    note = w.settingsNoteLabel
    keyed_editor(w, "train.warmup").setValue(100)
    keyed_editor(w, "train.steps").setValue(100)
    assert not note.isHidden() and "warm-up (100 steps) is as long as training (100 steps)" in note.text()
    keyed_editor(w, "train.steps").setValue(101)
    assert "warm-up" not in note.text()
