"""The Attention tab's head scores over training (``headScoresBox``): one head score (``headScoreCombo``,
opening on the one that moves most over the run) of every head of the kind shown against the step
(`core.probes.score_series`), a dashed line at the probe slider's step, the head shown large drawn bold
(click a line to show that head); when every line is flat it folds to a one-line note."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ...core.inference.attention_maps import KIND_TITLES, MEAN_HEAD
from ...core.inspect.head_scores import SCORE_TITLES, SCORES, HeadScores, score_movement
from ...core.inspect.probes import probe_scores, score_series
from ...core.names import AttentionKind, MapName
from .curves import new_curve, new_plot


class HeadScoreHistory(QWidget):
    """The plot of the head scores saved with each probe step (`score_history`); `set_view` says which head
    the panel shows large, `set_marker` the slider's step. ``headClicked(map name, head)``: a line clicked;
    ``heightWanted(px)``: folding or unfolding asks for this height."""

    headClicked = Signal(object, int)  # a MapName, a head
    heightWanted = Signal(int)

    FLAT = 0.05  # every head's score moves less than this over the run's probe steps: the plot folds away
    SCORE_PLOT_MAX = 220  # px: the score plot's box at most, so that the maps keep the height
    PLOT_MIN = 70  # px: the plot's least height (three ticks and the steps' axis)

    def __init__(self, parent=None):
        super().__init__(parent, objectName="headScoresBox")
        self.score_history: dict[int, HeadScores] = {}  # the head scores saved with each probe step
        self._score_curves: dict[tuple[MapName, int], pg.PlotDataItem] = {}  # (map name, head) → its line
        self._auto_score = True  # the plot picks the score that moves most, until the user picks one
        self.kind: AttentionKind | None = None  # the kind of attention shown large, its map and head (`set_view`)
        self.shown: MapName | None = None
        self.head = 0
        self.marker_step: int | None = None  # the probe slider's step (`set_marker`)
        self._build()

    def _build(self) -> None:
        """``headScoresPlot`` (one line per head, x = step, y = score in [0, 1]) and ``headScoreCombo``."""
        box = self._box = QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.headScoreCombo = QComboBox(objectName="headScoreCombo")
        for score in SCORES:
            self.headScoreCombo.addItem(SCORE_TITLES[score], score)
        self.headScoreCombo.setCurrentIndex(SCORES.index("induction"))
        self.headScoreCombo.activated.connect(self._on_score_picked)
        self.headScoreCombo.setToolTip("The head score plotted against the training step: the mean attention "
                                       "weight (0-1) to the previous token, to itself, to the first token (of the "
                                       "probe input), or induction (random tokens repeated twice), measured at "
                                       "every evaluation.")
        # the legend is a label outside the plot (as the loss plot's): inside, 16 heads would cover the lines
        self.headScoresLegend = QLabel(objectName="headScoresLegend")
        self.headScoresLegend.setTextFormat(Qt.TextFormat.RichText)
        self.headScoresLegend.setWordWrap(True)
        # every line flat: the box is one line, this note and a button that shows the plot anyway
        self.headScoresNote = QLabel(objectName="headScoresNote")
        self.headScoresNote.setWordWrap(True)
        self.headScoresToggle = QPushButton("Show plot", objectName="headScoresToggle")
        self.headScoresToggle.setCheckable(True)
        self.headScoresToggle.toggled.connect(self._fold_score_plot)
        self.headScoresTitle = QLabel("Head scores over training:")
        bar.addWidget(self.headScoresTitle)
        bar.addWidget(self.headScoreCombo)
        bar.addWidget(self.headScoresNote, 1)
        bar.addStretch(0)
        bar.addWidget(self.headScoresToggle)
        box.addLayout(bar)
        box.addWidget(self.headScoresLegend)  # under the bar, the column's width: it wraps to a line or two
        self.headScoresPlot = new_plot("", "headScoresPlot", "score")
        self.headScoresPlot.setToolTip("One line per head (L = layer, H = head, as in the grid); the head shown "
                                       "large is bold. Dashed: the step on the slider. Click a line to show its "
                                       "head.")
        self.headScoresPlot.setMinimumHeight(self.PLOT_MIN)
        item = self.headScoresPlot.getPlotItem()
        # low and wide: three y ticks, the x axis's ticks are the steps (its label would take a line)
        item.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])
        item.getAxis("bottom").showLabel(False)
        item.setYRange(0, 1, padding=0.02)
        item.getViewBox().enableAutoRange(y=False)
        self.scoreMarker = pg.InfiniteLine(angle=90, movable=False,
                                           pen=pg.mkPen((90, 90, 90), width=1, style=Qt.PenStyle.DashLine))
        item.addItem(self.scoreMarker, ignoreBounds=True)
        box.addWidget(self.headScoresPlot, 1)
        # Every change asks for a redraw; one runs on the next turn of the event loop, however many were asked
        # for (a new probe changed the steps, the slider and the view: one redraw, not one each, and not in the
        # same turn as the grid's).
        self._score_redraw = QTimer(self, singleShot=True, interval=0)
        self._score_redraw.timeout.connect(self._redraw_score_plot)
        self.headScoreCombo.currentIndexChanged.connect(self.draw)
        self.setVisible(False)

    # ---- the run's scores ------------------------------------------------------------------------------------
    def set_history(self, history: dict[int, HeadScores]) -> None:
        """Another run's scores by step: the plot opens on its own most moving score."""
        self.score_history = history
        self._auto_score = True

    def add_step(self, step: int, path: str | Path, scores: dict | None) -> None:
        """A new evaluation's head ``scores`` (`HeadScores.to_dict`; None: read from its probe file)."""
        try:
            self.score_history[int(step)] = HeadScores.from_dict(scores) if scores is not None else probe_scores(path)
        except ValueError:
            self.score_history.pop(int(step), None)  # the slider says why when the step is shown

    def steps_changed(self, last_step: int | None) -> None:
        """The probe steps changed (None: there are none): shown while there are, x from 0 to the last."""
        self.setVisible(last_step is not None)
        if self._auto_score:
            self._pick_score()
        self.draw()
        if last_step is not None:  # the steps from the start of training to the last evaluation
            self.headScoresPlot.getPlotItem().setXRange(0, last_step, padding=0.02)

    def set_view(self, kind: AttentionKind | None, shown: MapName | None, head: int) -> None:
        """The kind of attention, map name and head the panel shows large (its lines drawn bold)."""
        self.kind, self.shown, self.head = kind, shown, head

    def set_marker(self, step: int | None) -> None:
        """The dashed line at the slider's ``step`` (None: hidden)."""
        self.marker_step = step
        self._move_score_marker()

    def score_moves(self, rise: bool = False) -> dict[str, float]:
        """Per score, how far it moves over the saved probe steps: the largest (max - min) of any head of
        `score_kind`, or with ``rise`` its largest increase (`head_scores.score_movement`)."""
        names = self._names(self.score_kind())
        return {score: score_movement(self.score_history, names, score, rise) for score in SCORES}

    def _names(self, kind: AttentionKind | None) -> list[MapName]:
        """The maps of ``kind`` with scores saved at some step, in layer order."""
        names = {n for sc in self.score_history.values() for n in sc.names() if n.kind == kind}
        return sorted(names, key=lambda n: n.layer)

    def _pick_score(self) -> None:
        """Open the plot on the score that rises most over this run, a head forming (previous-token, typically,
        for a character model; induction where an induction head forms), not one that only falls (the
        default preset's first-token score falls about as far as its previous-token score rises)."""
        moves = self.score_moves(rise=True)
        best = max(SCORES, key=lambda sc: moves[sc])
        if moves[best] > 0:
            self.headScoreCombo.blockSignals(True)
            self.headScoreCombo.setCurrentIndex(SCORES.index(best))
            self.headScoreCombo.blockSignals(False)

    def _on_score_picked(self, _index: int) -> None:
        self._auto_score = False  # the user's choice stays, until another run's probes

    def score_plot_folded(self) -> bool:
        """Whether the plot is folded to its one-line note (every line flat, and not asked for)."""
        self._flush_score_plot()
        return not self.headScoresPlot.isVisibleTo(self)

    def _fold_score_plot(self, *_args) -> None:
        """Fold the plot to one line when every score of every head is flat (`FLAT`), unless asked for."""
        moves = self.score_moves()
        steps = len(self.score_history)
        flat = max(moves.values(), default=0.0) < self.FLAT
        fold = flat and not self.headScoresToggle.isChecked()
        self.headScoresToggle.setVisible(flat)
        self.headScoresToggle.setText("Hide plot" if self.headScoresToggle.isChecked() else "Show plot")
        self.headScoresNote.setVisible(fold)  # in place of the title, the combo, the legend and the plot
        self.headScoresNote.setText(
            f"Head scores over training: flat, none moved by {self.FLAT} in {steps} evaluation"
            f"{'s' if steps != 1 else ''}." if steps else "")
        if fold == self.score_plot_folded():
            if fold:
                self._fit_note()  # another number of evaluations: maybe another line
            return
        for part in (self.headScoresTitle, self.headScoreCombo, self.headScoresLegend, self.headScoresPlot):
            part.setVisible(not fold)
        self.setMaximumHeight(self._folded_height() if fold else self.SCORE_PLOT_MAX)
        self.heightWanted.emit(self.maximumHeight() if fold else self.sizeHint().height())

    def _folded_height(self) -> int:
        """The note's lines at the box's width beside the toggle (as the fonts lay them out)."""
        beside = self.headScoresToggle.sizeHint().width() + 12
        note = self.headScoresNote.heightForWidth(max(120, self.width() - beside))
        return max(self.headScoresToggle.sizeHint().height(), note) + 4

    def sizeHint(self) -> QSize:
        """The bar, the legend's lines at the box's width and the plot at a comfortable height."""
        return self._height_with(super().sizeHint().width(), self.PLOT_MIN + 20)

    def minimumSizeHint(self) -> QSize:
        """The bar, the legend's lines and the plot at its least."""
        return self._height_with(super().minimumSizeHint().width(), self.PLOT_MIN)

    def _height_with(self, width: int, plot: int) -> QSize:
        if not self.headScoresPlot.isVisibleTo(self):
            return QSize(width, self._folded_height())
        bar = max(self.headScoreCombo.sizeHint().height(), self.headScoresTitle.sizeHint().height())
        legend = self.headScoresLegend.heightForWidth(max(120, self.width())) if self.headScoresLegend.text() else 0
        return QSize(width, min(self.SCORE_PLOT_MAX, bar + legend + 2 * self._box.spacing() + plot))

    def _fit_note(self) -> None:
        """Folded: as high as the note's lines at this width, asked for where that changed."""
        if self.maximumHeight() != self._folded_height():
            self.setMaximumHeight(self._folded_height())
            self.heightWanted.emit(self.maximumHeight())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not self.headScoresPlot.isVisibleTo(self):
            self._fit_note()

    def score_kind(self) -> AttentionKind | None:
        """The kind of attention whose heads the plot draws: the one shown if it gets scores, else the
        decoder's (or the first) of the scores saved."""
        kinds = list(dict.fromkeys(n.kind for sc in self.score_history.values() for n in sc.names()))
        if self.kind in kinds:
            return self.kind
        return "dec" if "dec" in kinds else next(iter(kinds), None)

    def draw(self, *_args) -> None:
        """Redraw the score plot on the next turn of the event loop (once, however often asked)."""
        self._score_redraw.start()

    def _flush_score_plot(self) -> None:
        """Draw now what is asked for (the plot's accessors read it as the user will see it)."""
        if self._score_redraw.isActive():
            self._score_redraw.stop()
            self._redraw_score_plot()

    def _redraw_score_plot(self) -> None:
        """One line per head of `score_kind` for the chosen score (`core.probes.score_series`); dots on the
        bold line only (a scatter per line made each redraw cost ~25 ms with 16 heads)."""
        score, kind = self.headScoreCombo.currentData(), self.score_kind()
        series = {name: score_series(self.score_history, name, score) for name in self._names(kind)}
        keys = [(name, h) for name, (_, v) in series.items() for h in range(v.shape[1])]
        item = self.headScoresPlot.getPlotItem()
        if keys != list(self._score_curves):
            for curve in self._score_curves.values():
                item.removeItem(curve)
            self._score_curves = {}
            for i, (name, h) in enumerate(keys):
                color = pg.intColor(i, hues=max(len(keys), 1), maxValue=220).getRgb()[:3]
                curve = new_curve(self.headScoresPlot, color, symbolSize=5, symbolBrush=color, symbolPen=None)
                curve.setCurveClickable(True, width=6)
                curve.sigClicked.connect(lambda _c, _e, name=name, h=h: self._on_score_curve_clicked(name, h))
                self._score_curves[(name, h)] = curve
        shown = self.shown
        legend = []
        for (name, h), curve in self._score_curves.items():
            steps, values = series[name]
            bold = name == shown and self.head in (h, MEAN_HEAD)
            color = curve.opts["pen"].color()
            curve.setPen(pg.mkPen(color, width=3 if bold else 1.2))
            curve.setSymbol("o" if bold else None)
            curve.setData(steps, values[:, h])
            label = f"L{name.layer + 1}&nbsp;H{h + 1}"
            legend.append(f"<span style='color:{color.name()}'>━━</span>&nbsp;" + (f"<b>{label}</b>" if bold else label))
        self.headScoresLegend.setText("<small>" + "&nbsp; ".join(legend) + "</small>")
        title = f"{SCORE_TITLES[score]} score of each head"
        if kind is not None:
            title += f" · {KIND_TITLES[kind].lower()}"
        if self.score_history and not keys:
            title += " · not saved for this run"
        item.setTitle(title, size="9pt", color="#333")
        self._move_score_marker()
        self._fold_score_plot()

    def _move_score_marker(self) -> None:
        self.scoreMarker.setVisible(self.marker_step is not None)
        if self.marker_step is not None:
            self.scoreMarker.setValue(self.marker_step)

    def score_marker_step(self) -> int | None:
        """The step the plot's marker stands at (the slider's), None when hidden."""
        self._flush_score_plot()
        return int(self.scoreMarker.value()) if self.scoreMarker.isVisible() else None

    def score_curves(self) -> dict[str, tuple[np.ndarray, ...]]:
        """The plot's lines as drawn: label as in the legend ("L1 H1", from 1) → (steps, scores)."""
        self._flush_score_plot()
        return {f"L{name.layer + 1} H{h + 1}": tuple(np.asarray(a) for a in curve.getData())
                for (name, h), curve in self._score_curves.items()}

    def _on_score_curve_clicked(self, name: MapName, h: int) -> None:
        self.headClicked.emit(name, h)
