"""The Attention tab's view bar: which attention (``kindCombo``, edt models: encoder self-, decoder self-
and cross-attention), ``layerCombo`` and ``headCombo`` (the heads and "mean over heads") are shown large, and
the Fit, Export PNG and Export CSV buttons."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QWidget

from ...core.inference.attention_maps import KIND_TITLES, MEAN_HEAD
from ...core.names import AttentionKind


class ViewBar(QWidget):
    """``kindChosen(kind)``, ``layerChosen(layer)``, ``headChosen(head)`` (0-based; `MEAN_HEAD`: the mean)
    when the user picks one; ``fitClicked``, ``exportPngClicked``, ``exportCsvClicked``."""

    kindChosen = Signal(str)  # an AttentionKind
    layerChosen = Signal(int)
    headChosen = Signal(int)
    fitClicked = Signal()
    exportPngClicked = Signal()
    exportCsvClicked = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self._updating = False
        bar = QHBoxLayout(self)
        bar.setContentsMargins(0, 0, 0, 0)
        self.kindCombo = QComboBox()
        self.kindCombo.setObjectName("kindCombo")
        self.kindCombo.setToolTip("Which attention of an encoder-decoder: the encoder's self-attention over the "
                                  "source, the decoder's causal self-attention, or the decoder's cross-attention "
                                  "to the encoder's output.")
        self.layerCombo = QComboBox()
        self.layerCombo.setObjectName("layerCombo")
        self.layerCombo.setToolTip("Layer l of the stack (1 = the first, as the paper counts).")
        self.headCombo = QComboBox()
        self.headCombo.setObjectName("headCombo")
        self.headCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.kindCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.headCombo.setToolTip("Head h of MHAttention (Algorithm 5), or the mean of the layer's heads. "
                                  "H = entropy of the attention rows, averaged over queries, in nats.")
        self.kindLabel = QLabel("attention")
        bar.addWidget(self.kindLabel)
        bar.addWidget(self.kindCombo)
        bar.addWidget(QLabel("layer"))
        bar.addWidget(self.layerCombo)
        bar.addWidget(QLabel("head"))
        bar.addWidget(self.headCombo)
        bar.addStretch(1)
        self.fitButton = QPushButton("Fit")
        self.fitButton.setObjectName("attentionFitButton")
        self.fitButton.setToolTip("Show the whole matrix again (zoom with the mouse wheel, pan by dragging).")
        self.exportPngButton = QPushButton("PNG…")  # short: an encoder-decoder's three combos keep their text
        self.exportPngButton.setObjectName("exportPngButton")
        self.exportPngButton.setToolTip("Save the large map (the head, or the mean, shown) as a PNG heatmap: one "
                                        "square of pixels per weight on the fixed 0-1 colour scale, drawn as "
                                        "'fatstudio attention --out FILE.png' draws maps.")
        self.exportCsvButton = QPushButton("CSV…")
        self.exportCsvButton.setObjectName("exportCsvButton")
        self.exportCsvButton.setToolTip("Save the numbers of the large map: one row per query token, the key "
                                        "tokens as the header.")
        for b in (self.fitButton, self.exportPngButton, self.exportCsvButton):
            bar.addWidget(b)
        self.kindCombo.currentIndexChanged.connect(lambda i: self._chosen(self.kindCombo, i, self.kindChosen))
        self.layerCombo.currentIndexChanged.connect(lambda i: self._chosen(self.layerCombo, i, self.layerChosen))
        self.headCombo.currentIndexChanged.connect(lambda i: self._chosen(self.headCombo, i, self.headChosen))
        self.fitButton.clicked.connect(self.fitClicked)
        self.exportPngButton.clicked.connect(self.exportPngClicked)
        self.exportCsvButton.clicked.connect(self.exportCsvClicked)

    def _chosen(self, combo: QComboBox, index: int, signal) -> None:
        if not self._updating and index >= 0:
            signal.emit(combo.itemData(index))

    def set_choices(self, kinds: list[AttentionKind], kind: AttentionKind, layers: list[int], layer: int, entropies: list[float],
                    mean_entropy: float, head: int) -> None:
        """The kinds, the layers of ``kind`` and the heads of its ``layer`` (their ``entropies`` and the mean's
        in nats), ``kind``, ``layer`` and ``head`` chosen; counted from 1 as the paper does."""
        self._updating = True
        try:
            self.kindCombo.clear()
            for k in kinds:
                self.kindCombo.addItem(KIND_TITLES[k], k)
            self.kindCombo.setCurrentIndex(kinds.index(kind))
            multi = len(kinds) > 1
            self.kindCombo.setVisible(multi)
            self.kindLabel.setVisible(multi)
            self.layerCombo.clear()
            for l in layers:
                self.layerCombo.addItem(f"{l + 1}", l)  # as the paper counts
            self.layerCombo.setCurrentIndex(layers.index(layer))
            self.headCombo.clear()
            for h in range(len(entropies)):
                self.headCombo.addItem(f"{h + 1}  (H = {entropies[h]:.2f} nats)", h)
            self.headCombo.addItem(f"mean  (H = {mean_entropy:.2f} nats)", MEAN_HEAD)  # as the grid's column says
            self.headCombo.setCurrentIndex(len(entropies) if head == MEAN_HEAD else head)
            for combo in (self.kindCombo, self.layerCombo, self.headCombo):  # the bar shrinks none below its text
                fm = combo.fontMetrics()
                combo.setMinimumWidth(max((fm.horizontalAdvance(combo.itemText(i)) for i in range(combo.count())),
                                          default=0) + 40)
        finally:
            self._updating = False
