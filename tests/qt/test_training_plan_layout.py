"""The Training view before the first run, as the walk-through saw it at 1440×900 and 1366×740: the
"Press ▶ Train" hint clear of the preset's reference band, the legend above the loss plot on one line."""
from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")
pytest.importorskip("pyqtgraph")

from PySide6.QtWidgets import QApplication

SIZES = ((1366, 740), (1440, 900))


def _laid_out(qtbot, w, size) -> None:
    w.resize(*size)
    qtbot.waitUntil(lambda: w.width() == size[0], timeout=5000)
    for _ in range(3):
        QApplication.processEvents()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_press_train_hint_does_not_cover_the_reference_band(qtbot, window, size):
    w = window
    _laid_out(qtbot, w, size)
    plots = w.plots
    view = plots.lossPlot.getPlotItem().getViewBox()
    measured = 0
    for preset in w.presets:
        w.apply_preset(preset)
        QApplication.processEvents()
        ref = plots.reference
        if ref is None:
            continue
        measured += 1
        assert plots.plan_text()
        hint = view.mapSceneToView(plots.planHint.mapRectToScene(plots.planHint.boundingRect())).boundingRect()
        assert view.viewRect().contains(hint), preset.key  # all of it inside the plot
        band = ref.train
        covered = [(x, lo, hi) for x, lo, hi in zip(band.step, band.min, band.max)
                   if hint.left() <= x <= hint.right() and lo <= hint.bottom() and hi >= hint.top()]
        assert not covered, (preset.key, hint, covered[:3])
    assert measured == len(w.presets)  # every preset has its band

@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_loss_legend_with_the_reference_is_one_line(qtbot, window, size):
    w = window
    _laid_out(qtbot, w, size)
    legend = w.plots.legendLabel
    assert "reference (" in legend.text()
    assert legend.height() < 2 * legend.fontMetrics().lineSpacing(), legend.height()
