"""Issue 35: nothing in the settings column moves while the person edits it (the description stays the preset's
the settings came from, a field that does not apply is greyed out in its place), and the preset list says
"(custom)" as soon as any setting is not the preset's, the preset again once set back; a corpus folder is the one
source shown."""
from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QCheckBox, QComboBox, QLineEdit

from fatstudio.qt.widgets.forms import keyed_editor

LONG = 60_000
EDITORS = (QAbstractSpinBox, QComboBox, QCheckBox, QLineEdit)


def editors(tabs, i):
    """The editable fields of the settings tab ``i`` that show (a spin box's or combo's own line edit aside)."""
    panel = tabs.widget(i).widget()
    found = [x for cls in EDITORS for x in panel.findChildren(cls) if x.isVisibleTo(panel)
             and not isinstance(x.parent(), (QAbstractSpinBox, QComboBox))]
    return sorted(found, key=lambda x: x.mapTo(panel, QPoint(0, 0)).y())


def places(tabs, i) -> dict:
    """Where each field of tab ``i`` is, relative to its scroll area's viewport."""
    viewport = tabs.widget(i).viewport()
    return {id(x): x.mapTo(viewport, QPoint(0, 0)) for x in editors(tabs, i)}


def edit(x) -> None:
    """What a person's edit does: a step of a spin box, a click of a check box, another entry of a combo box."""
    if isinstance(x, QAbstractSpinBox):
        x.stepBy(1)
    elif isinstance(x, QCheckBox):
        x.toggle()
    elif isinstance(x, QComboBox):
        j = next(j for j in range(1, x.count() + 1) if x.model().flags(x.model().index((x.currentIndex() + j)
                                                                                         % x.count(), 0)))
        x.setCurrentIndex((x.currentIndex() + j) % x.count())
        x.activated.emit(x.currentIndex())
    else:
        x.setText(x.text() + "x")
        x.editingFinished.emit()


@pytest.mark.parametrize("arch", ["gpt", "edt"])
def test_no_field_of_the_settings_column_moves_while_any_of_them_is_edited(qtbot, window, wait_for_jobs, arch):
    w = window
    preset = next(p for p in w.presets if p.config.model.arch == arch)
    tabs = w.settingsColumn.settingsTabs
    wait_for_jobs(w.workspace)  # the built-in corpora are known
    edited = 0
    for i in range(tabs.count()):
        tabs.setCurrentIndex(i)
        for k in range(len(editors(tabs, i))):
            w.apply_preset(preset)
            QApplication.processEvents()
            x = editors(tabs, i)[k]
            if not x.isEnabled() or x is w.model_panel.presetCombo:  # a preset replaces every setting, its text too
                continue
            before = places(tabs, i)
            edit(x)
            QApplication.processEvents()
            assert places(tabs, i) == before, f"editing {x.objectName() or x.parent().objectName()} moved fields"
            edited += 1
    assert edited >= 40  # the Model, Corpus and Train fields, the built-in list among them
    wait_for_jobs(w.workspace)


@pytest.mark.parametrize("key, value", [("model.d_e", 48), ("model.L", 3), ("data.tokenizer", "word"),
                                        ("data.val_fraction", 0.2), ("train.lr", 1e-2), ("train.steps", 77)])
def test_the_preset_list_says_custom_once_any_setting_differs_and_the_preset_again_once_set_back(window, key, value):
    w = window
    preset = w.presets[0]
    w.apply_preset(preset)
    panel, combo = w.model_panel, w.model_panel.presetCombo
    description = panel.presetDescription.text()
    field = keyed_editor(w, key)
    was = field.value()
    field.set_value(value) if isinstance(field, QComboBox) else field.setValue(value)
    assert combo.currentText() == "(custom)" and preset.name in combo.itemData(combo.currentIndex(), 3)  # its tip
    assert panel.presetDescription.text() == description  # what the preset it came from teaches, in its place
    field.set_value(was) if isinstance(field, QComboBox) else field.setValue(was)
    assert combo.currentText() == preset.name


def test_a_folder_is_the_one_source_shown_and_the_settings_are_custom(qtbot, window, wait_for_jobs, tmp_path):
    w = window
    preset = w.presets[0]
    w.apply_preset(preset)
    wait_for_jobs(w.workspace)
    corpus, combo = w.corpus_panel, w.corpus_panel.builtinCombo
    folder = tmp_path / "my texts"
    folder.mkdir()
    (folder / "a.txt").write_text("the cat sat on the mat\n" * 200, encoding="utf-8")
    builtin = preset.config.data.corpus
    assert combo.value() == builtin and builtin in corpus.sourceLabel.full
    corpus.set_corpus(str(folder))
    wait_for_jobs(w.workspace)
    assert corpus.error is None and "my texts" in corpus.sourceLabel.full
    assert combo.value() is None and combo.currentIndex() == 0  # not the built-in it said before
    assert w.model_panel.presetCombo.currentText() == "(custom)"
    combo.setCurrentIndex(combo.findData(builtin))  # the preset's corpus again, from the list
    combo.activated.emit(combo.currentIndex())
    wait_for_jobs(w.workspace)
    assert w.model_panel.presetCombo.currentText() == preset.name and builtin in corpus.sourceLabel.full


def test_every_preset_s_description_keeps_the_height_its_text_needs_through_an_edit(qtbot, window, wait_for_jobs):
    """The form squeezed a long walkthrough to its size hint when a row came (the vocabulary's, after an edit):
    the text was clipped and every field under it moved up."""
    w = window
    wait_for_jobs(w.workspace)
    d = w.model_panel.presetDescription
    for preset in w.presets:
        w.apply_preset(preset)
        QApplication.processEvents()
        w.model_panel.fields["tie_embeddings"].toggle()
        QApplication.processEvents()
        assert d.height() >= d.heightForWidth(d.width()) > 0, preset.key
    wait_for_jobs(w.workspace)
