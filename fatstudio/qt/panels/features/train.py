"""The Features tab's Train section (``featuresTrain``): a dictionary on a hook point of the focused run at one of
its saved steps (an MLP: a transcoder from its input to its output; any other point: an SAE), its size (d_f a
multiple of d_e), k and the tokens to train on; Train and Cancel, a progress bar, live curves of the batches'
explained variance (1 − the normalized MSE loss the dictionary is trained on), L0 and the fraction of dead
features, and the quality numbers at the end. The training is `Features.train`'s job."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout

from ....core.app.features import TRAIN, Trained, default_point, trainable_points
from ....core.app.focus import run_name
from ....core.app.jobs import Status
from ...widgets.curves import Series, new_curve
from ...widgets.forms import Form, ValueCombo, int_spin

if TYPE_CHECKING:
    from ....core.app.features import Features

CURVES = (("explained_variance", "explained variance (1 − loss)", (44, 160, 44)),
          ("l0", "L0 (active per token)", (31, 119, 180)),
          ("dead_fraction", "dead fraction (in training: not active lately)", (214, 39, 40)))  # (attribute, title, colour)
QUALITY = (("explained_variance", "explained variance", "{:.3f}"), ("ce_loss_score", "CE loss score", "{:.3f}"),
           ("l0", "mean L0", "{:.1f}"), ("dead_fraction", "dead features", "{:.1%}"))


def quality_words(quality: dict) -> str:
    """The quality numbers in one line: "explained variance 0.912 · CE loss score 0.95 · …", with the held-out
    tokens they are measured on (the dead features: those never active on them)."""
    words = " · ".join(f"{title} <b>{fmt.format(quality[key])}</b>" for key, title, fmt in QUALITY
                       if isinstance(quality.get(key), (int, float)))
    tokens = quality.get("tokens")
    return f"{words} (on {tokens:,} held-out validation tokens)" if isinstance(tokens, int) and words else words


class TrainSection(QGroupBox):
    """See the module. ``train()`` starts with the fields' values; ``cancel()`` stops it."""

    def __init__(self, features: Features, parent=None):
        super().__init__("Train a dictionary", parent, objectName="featuresTrain")
        self.features = features
        form = Form()
        self.pointCombo = form.add("point", "point", ValueCombo(), "The hook point: an MLP trains a transcoder from "
                                   "its input to its output (as attribution graphs need); any other point an SAE "
                                   "that reconstructs it.", keyed=False)
        self.pointCombo.setObjectName("featuresPoint")
        self.stepCombo = form.add("step", "step", ValueCombo(), "The run's weights the dictionary is trained on: "
                                  "any step whose weights the run saved.", keyed=False)
        self.stepCombo.setObjectName("featuresStep")
        self.multSpin = form.add("mult", "d<sub>f</sub> / d<sub>e</sub>", int_spin(1, 64, 8), "Features per "
                                 "dimension of the point: d_f = this × d_in.", keyed=False)
        self.multSpin.setObjectName("featuresDfMult")
        self.kSpin = form.add("k", "k", int_spin(1, 512, 16), "Active features per token (TopK).", keyed=False)
        self.kSpin.setObjectName("featuresK")
        self.tokensSpin = form.add("tokens", "tokens", int_spin(1_000, 100_000_000, 1_000_000, step=100_000),
                                   "Training tokens, streamed from the run's training split.", keyed=False)
        self.tokensSpin.setObjectName("featuresTokens")
        self.tokensSpin.setGroupSeparatorShown(True)
        self.trainButton = QPushButton("Train", objectName="featuresTrainButton")
        self.cancelButton = QPushButton("Cancel", objectName="featuresCancelButton")
        self.progressBar = QProgressBar(objectName="featuresProgress")
        self.progressBar.setRange(0, 1000)
        buttons = QHBoxLayout()
        buttons.addWidget(self.trainButton)
        buttons.addWidget(self.cancelButton)
        buttons.addWidget(self.progressBar, 1)
        self.curves = pg.GraphicsLayoutWidget()
        self.curves.setObjectName("featuresCurves")
        self.curves.setToolTip("Each training batch: the explained variance (1 − the normalized MSE loss the "
                               "dictionary is trained on), L0 (features active per token: k at most) and the fraction "
                               "of features dead (not active on the recent training tokens; AuxK revives them), against tokens "
                               "seen. The quality line's dead share counts, instead, the features never active on "
                               "the held-out tokens it is measured on.")
        self.curves.setBackground("w")
        line = self.fontMetrics().height()
        self.curves.setMinimumHeight(14 * line)
        self.curves.setMaximumHeight(24 * line)
        self.series: dict[str, Series] = {}
        self.plots: dict[str, pg.PlotItem] = {}
        self._lines: dict[str, Any] = {}
        for row, (key, title, color) in enumerate(CURVES):
            plot = self.curves.addPlot(row=row, col=0)
            plot.setTitle(title, size="8pt", color="#333")
            plot.hideAxis("bottom") if row < len(CURVES) - 1 else plot.setLabel("bottom", "tokens")
            plot.getAxis("bottom").enableAutoSIPrefix(True)
            self.series[key] = Series()
            self._lines[key] = new_curve(plot, color)
            self.plots[key] = plot
        self.summary = QLabel(objectName="featuresTrainSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay = QVBoxLayout(self)
        lay.addLayout(form.layout)
        lay.addLayout(buttons)
        lay.addWidget(self.curves, 1)
        lay.addWidget(self.summary)
        lay.addStretch(0)
        self.trainButton.clicked.connect(self.train)
        self.cancelButton.clicked.connect(self.cancel)
        features.cleared.connect(self._cleared)
        features.listed.connect(lambda _saved: self._listed())
        features.train_event.connect(self._event)
        features.train_ended.connect(self._ended)
        features.failed.connect(lambda key, message: self.say(message, True) if key == TRAIN else None)
        self._cleared()

    # ---- the choices -------------------------------------------------------------------------------------
    def _cleared(self) -> None:
        loaded = self.features.loaded
        if loaded is None:
            self.pointCombo.set_items([])
        else:
            from ....core.model.hooks import point_names  # the model is loaded: torch is imported already

            points = trainable_points(point_names(loaded.model))
            self.pointCombo.set_items(points)
            self.pointCombo.set_value(default_point([p for _label, p in points]))
        self._fill_steps()
        f = self.features
        if f.training is not None:  # it goes on, for its own run
            self.say(f"Training a dictionary for {html.escape(run_name(f.training))}: it goes on, and is saved "
                     "in that run's features/ folder.")
            return
        self._clear_curves()
        self.curves.hide()  # until a training draws them
        self.progressBar.setValue(0)
        self.say(f.no_weights() or "" if f.loaded is None or f.run is None else "")

    def _fill_steps(self) -> None:
        f = self.features
        self.stepCombo.set_items([(f"{s:,}", s) for s in reversed(f.steps)])
        if f.loaded is not None:
            self.stepCombo.set_value(f.loaded.step)
        self._update_buttons()

    def _listed(self) -> None:
        self._fill_steps()
        if self.features.training is None and self.features.quality is None:
            self.say(self.features.no_weights() or "")

    def _update_buttons(self) -> None:
        f = self.features
        self.trainButton.setEnabled(f.training is None and f.no_weights() is None and self.pointCombo.count() > 0)
        self.cancelButton.setEnabled(f.training is not None)

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text if "<" in text else html.escape(text))
        self.summary.setStyleSheet("color: #b00020;" if error else "")

    # ---- training ----------------------------------------------------------------------------------------
    def options(self) -> dict[str, int]:
        """`train_dictionary`'s options from the fields."""
        return {"d_f_mult": self.multSpin.value(), "k": self.kSpin.value(), "tokens": self.tokensSpin.value()}

    def train(self) -> bool:
        point, step = self.pointCombo.value(), self.stepCombo.value()
        if point is None or step is None:
            self.say(self.features.no_weights() or "Choose a point and a step.", True)
            return False
        self._clear_curves()
        started = self.features.train(point, step, **self.options())
        if started:
            for key, top in (("explained_variance", 1.0), ("l0", self.kSpin.value() * 1.1), ("dead_fraction", 1.0)):
                self.plots[key].setYRange(0, top)  # fractions, and L0 ≤ k (TopK)
            self.curves.show()
            self.progressBar.setValue(0)
            self.say(f"Training a dictionary on {point} at step {step:,}…")
        self._update_buttons()
        return started

    def cancel(self) -> None:
        self.features.cancel_training()
        self._update_buttons()

    def _event(self, event: Any) -> None:
        if isinstance(event, Trained):
            self.progressBar.setValue(1000)
            self.say(f"{html.escape(event.dictionary.describe())}: {quality_words(event.quality)}<br>"
                     f"<span style='color:#555'>saved in {html.escape(event.folder)}</span>")
            return
        self.progressBar.setValue(round(event.fraction * 1000))
        if event.kind == "measuring":
            self.say("Measuring its quality on held-out validation tokens (the CE loss score runs the model with "
                     "the dictionary spliced in)…")
        if event.kind != "progress":
            return
        for key, series in self.series.items():
            series.extend([event.tokens], [getattr(event, key)])
            self._lines[key].setData(series.x, series.y)

    def _ended(self, status: Status, words: str) -> None:
        if status is Status.CANCELLED:
            self.progressBar.setValue(0)
            self.say(words)
        self._update_buttons()

    def _clear_curves(self) -> None:
        for key, series in self.series.items():
            series.clear()
            self._lines[key].setData([], [])
