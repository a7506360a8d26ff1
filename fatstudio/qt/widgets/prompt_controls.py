"""The Prompt panel's row of controls: ℓ_gen, τ, top-k, top-p and the seed (generate, translate), predictions
per mask (fill_mask), and the buttons Generate, Score text and Stop. Each setting is in a box with its label
(``tokens_box`` …), which the panel shows for the modes that use it."""
from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QPushButton, QSpinBox, QWidget


class PromptControls(QWidget):
    """The settings and buttons of a prompt, one row."""

    def __init__(self, parent=None):
        super().__init__(parent)
        controls = QHBoxLayout(self)
        controls.setContentsMargins(0, 0, 0, 0)

        def spin(name, label, tip, widget):
            widget.setObjectName(name)
            widget.setToolTip(tip)
            lab = QLabel(label)
            lab.setObjectName(name + "Label")
            lab.setToolTip(tip)
            lab.setBuddy(widget)
            box = QWidget()
            lay = QHBoxLayout(box)
            lay.setContentsMargins(0, 0, 0, 0)
            lay.addWidget(lab)
            lay.addWidget(widget)
            controls.addWidget(box)
            return box

        self.tokensSpin = QSpinBox()
        self.tokensSpin.setRange(1, 100000)
        self.tokensSpin.setValue(200)
        self.tokens_box = spin("tokensSpin", "ℓ_gen", "ℓ_gen: how many tokens to sample (Algorithm 14 "
                                "repeats its step ℓ_gen times). For a seq2seq model: the most output tokens "
                                "before eos.", self.tokensSpin)
        self.temperatureSpin = QDoubleSpinBox()
        self.temperatureSpin.setRange(0.0, 10.0)
        self.temperatureSpin.setSingleStep(0.1)
        self.temperatureSpin.setDecimals(2)
        self.temperatureSpin.setValue(1.0)
        self.temp_box = spin("temperatureSpin", "τ", "Temperature τ: the next token is drawn ∝ p^(1/τ). τ = 0 is "
                              "greedy (always the most likely token), τ = 1 the model's own distribution, a large "
                              "τ nearly uniform.", self.temperatureSpin)
        self.topKSpin = QSpinBox()
        self.topKSpin.setRange(0, 1000000)
        self.topKSpin.setSpecialValueText("off")
        self.topk_box = spin("topKSpin", "top-k", "Keep only the k most likely tokens before drawing (off = all).",
                              self.topKSpin)
        self.topPSpin = QDoubleSpinBox()
        self.topPSpin.setRange(0.01, 1.0)
        self.topPSpin.setSingleStep(0.05)
        self.topPSpin.setDecimals(2)
        self.topPSpin.setValue(1.0)
        self.topp_box = spin("topPSpin", "top-p", "Nucleus sampling: keep the smallest set of most likely tokens "
                              "whose probability reaches p (1 = off).", self.topPSpin)
        self.seedSpin = QSpinBox()
        self.seedSpin.setRange(-1, 2 ** 31 - 1)
        self.seedSpin.setSpecialValueText("random")
        self.seedSpin.setValue(-1)
        self.seed_box = spin("seedSpin", "seed", "Seed of the random draws: the same seed, settings and model give "
                              "the same text. 'random' (the default) draws a fresh seed each time; the result line "
                              "names the seed a sample used.", self.seedSpin)
        self.topSpin = QSpinBox()
        self.topSpin.setRange(1, 50)
        self.topSpin.setValue(5)
        self.top_box = spin("topPredictionsSpin", "predictions per mask",
                             "How many of the most likely tokens to list at each mask.", self.topSpin)
        self.top_box.setVisible(False)  # a fill-mask model's (set_model); hidden, it widens nothing
        controls.addStretch(1)
        self.generateButton = QPushButton("Generate")
        self.generateButton.setObjectName("generateButton")
        self.generateButton.setDefault(True)
        self.stopButton = QPushButton("Stop")
        self.stopButton.setObjectName("stopGenerationButton")
        self.stopButton.setToolTip("Stop after the token being sampled now.")
        self.scoreButton = QPushButton("Score text")
        self.scoreButton.setObjectName("scoreButton")
        controls.addWidget(self.generateButton)
        controls.addWidget(self.scoreButton)
        controls.addWidget(self.stopButton)
