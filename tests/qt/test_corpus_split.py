"""The validation split as a person sees it: the Corpus tab says (and draws) which files or parts validate, the
rule is a field of its own (``data.split``), and the Diagnostics tab warns when the validation text is unlike the
training text (a folder of German then Russian files split at its tail)."""
from __future__ import annotations

import math
import random

from PySide6.QtWidgets import QListWidget

from fatstudio.qt.widgets.forms import keyed_editor

LONG = 60_000
GERMAN = "der die das und ist nicht ein eine zu mit auf für von dem schön groß Straße Mädchen Bücher hören".split()
RUSSIAN = "и в не на что он с как это по но она они мы вы был быть его для хорошо большой книга".split()


def languages(folder, files=3, lines=500):
    rng = random.Random(0)
    folder.mkdir()
    for lang, words in (("de", GERMAN), ("ru", RUSSIAN)):
        for i in range(files):
            text = "".join(" ".join(rng.choices(words, k=10)) + ".\n" for _ in range(lines))
            (folder / f"{lang}-{i}.txt").write_text(text, encoding="utf-8")
    return folder


def test_the_corpus_tab_shows_which_files_validate(qtbot, window, tmp_path):
    w, panel = window, window.corpus_panel
    w.settingsTabs.setCurrentWidget(w.settingsTabs.widget(1))  # the Corpus tab
    panel.set_corpus(str(languages(tmp_path / "de-ru")))
    qtbot.waitUntil(lambda: panel.info is not None and not panel.loading, timeout=LONG)
    combo = keyed_editor(w, "data.split")
    assert combo is panel.splitCombo and combo.value() == "blocks" and combo.isVisible()
    text = panel.splitLabel.text()
    assert "in 13 blocks" in text and "Every file gives" in text
    assert all(f"{lang}-{i}.txt" in text for lang in ("de", "ru") for i in range(3))
    strip = panel.splitStrip
    assert strip.isVisible() and len(strip.view.blocks) == 13 and len(strip.view.files) == 6
    assert strip.tip_at(1).startswith("de-0.txt: ") and strip.tip_at(strip.width() - 2).startswith("ru-2.txt: ")

    combo.set_value("tail")  # as a person choosing "the last part" does
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: w.settings.data.split == "tail", timeout=LONG)
    text = panel.splitLabel.text()
    assert "the last 10% of the text" in text and "It holds 1 of the 6 files: ru-2.txt" in text
    assert "de-0.txt" not in text and strip.view.blocks == ((0.9, 1.0),)
    assert strip.tip_at(strip.width() - 2) == "ru-2.txt: 67% of it validates"

    w.settings.update("model", arch="edt")  # seq2seq: examples are drawn at random whatever the rule
    qtbot.waitUntil(lambda: not panel.splitCombo.isEnabled(), timeout=LONG)  # greyed out in its place
    assert panel.splitCombo.isVisible()


def test_the_diagnostics_tab_warns_of_a_validation_text_unlike_training(qtbot, window):
    w = window
    rows = [{"step": s, "train_loss": 1.5 + 2.5 * math.exp(-s / 100), "lr": 1e-3, "grad_norm": 0.5}
            for s in range(1, 601)]
    gap = {"rule": "tail", "tv": 0.46, "chance": 0.02, "kl": 0.7, "n_train": 195903, "n_val": 21768}
    w.workspace.show_rows(rows, {"grad_clip": 1.0, "warmup": 100}, {"split_gap": gap})
    view = w.findChild(QListWidget, "diagnosticsView")
    shown = [view.item(i).text() for i in range(view.count())]
    assert len(shown) == 1 and shown[0].startswith("step 0 · the validation text is unlike the training text")
    assert "total variation of 0.46" in shown[0] and "0.70 nats a token" in shown[0]
    assert w.train_view.samplesTabs.tabText(1) == "Diagnostics (1)"
    w.workspace.show_rows(rows, {"grad_clip": 1.0, "warmup": 100}, {"split_gap": {**gap, "tv": 0.02, "kl": 0.002}})
    shown = [view.item(i).text() for i in range(view.count())]
    assert shown[0].startswith("Nothing unusual") and "validation text like the training text" in shown[0]
