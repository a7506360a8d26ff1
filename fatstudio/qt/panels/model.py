"""Model panel: presets (what each teaches, its walkthrough, its measurements behind a fold), the architecture
and every ModelConfig field as a control in the paper's notation (bound to the window's Settings), with the live
cost summary (parameters per component, FLOPs per token, memory). The pseudocode lives in the Paper tab;
`highlight_fields` marks the rows a line of it uses. The preset list shows the settings' preset, "(custom)" once any
setting differs from it; the description stays that preset's, so that no field moves while the person edits. What
is wrong with the model is said once, under the settings column (the main window's ``validationLabel``); this panel
marks the row of the field it names."""
from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QLabel, QToolButton, QVBoxLayout, QWidget

from fatstudio.core import costs
from fatstudio.core.config import (
    ACTIVATIONS,
    ARCH_DEFAULTS,
    ARCH_NAMES,
    ARCHS,
    NORM_POSITIONS,
    NORMS,
    POSITIONS,
    Arch,
    ModelConfig,
)
from fatstudio.core.memory import human_bytes
from fatstudio.core.runs.presets import Preset
from fatstudio.qt.binding import DERIVED, Binding, Change
from fatstudio.qt.widgets.forms import (
    Form,
    SciSpinBox,
    ValueCombo,
    WrappedLabel,
    check,
    float_spin,
    human_count,
    int_spin,
)

if TYPE_CHECKING:
    from fatstudio.core.app.workspace import Workspace

_ARCH_SHORT = {"edt": "EDTransformer · encoder-decoder (Alg. 8)", "bert": "ETransformer · BERT (Alg. 9)",
               "gpt": "DTransformer · GPT-2 (Alg. 10)", "gopher": "Gopher · DTransformer + RMSnorm"}
_NORM_LABELS = {"layer": "layer_norm (Alg. 6)", "rms": "RMSnorm (Gopher)"}
_POSITION_LABELS = {"pre": "pre-LN (GPT-2)", "post": "post-LN (original)"}
_ACT_LABELS = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh approx.)", "swiglu": "SwiGLU"}
_POS_LABELS = {"learned": "learned W_p (Alg. 2)", "sinusoidal": "sinusoidal (fixed)", "rope": "rotary (RoPE)",
               "alibi": "ALiBi", "relative": "relative (Transformer-XL)", "none": "none"}

# field -> what it means, the tooltip of its row
_TIPS = {
    "L": "L: the number of layers (transformer blocks) of the decoder-only or encoder-only stack.",
    "L_enc": "L_enc: the number of encoder layers of the encoder-decoder transformer (Algorithm 8).",
    "L_dec": "L_dec: the number of decoder layers of the encoder-decoder transformer (Algorithm 8).",
    "H": "H: attention heads per layer (Algorithm 5, MHAttention). Each head has its own W_q, W_k, W_v.",
    "H_kv": "H_kv: key/value heads. H_kv = H is ordinary multi-head attention, 1 is multi-query attention, "
            "anything between is grouped-query; it must divide H. 'auto' = H.",
    "d_e": "d_e: the embedding width, the size of every token's vector in the residual stream.",
    "d_mlp": "d_mlp: the hidden width of each layer's MLP (usually 4·d_e).",
    "l_max": "ℓ_max: the maximum context length, the longest sequence the model sees; sets W_p's size "
             "for learned positions.",
    "d_attn": "d_attn: the query/key width of each head. 'auto' = d_e / H. The scores are divided by √d_attn.",
    "d_mid": "d_mid: the value width of each head (the output of each head before W_o). 'auto' = d_e / H.",
    "d_f": "d_f: the width of BERT's final projection W_f (Algorithm 9, line 11). 'auto' = d_e.",
    "norm": "Which normalisation: layer_norm (Algorithm 6, with scale γ and offset β) or RMSnorm "
            "(Gopher: scale only, no mean subtraction).",
    "norm_position": "Where the norm sits: pre-LN normalises the input of each sub-layer (GPT-2, stable to "
                     "train); post-LN normalises after the residual addition (the original transformer, BERT).",
    "activation": "The MLP non-linearity: ReLU (original), GELU (BERT, GPT), GELU's tanh approximation, or "
                  "SwiGLU (a gated unit with a third matrix W_gate: W_mlp2 (Swish(W_gate e) ⊙ W_mlp1 e)).",
    "positions": "How the model knows token positions: a learned W_p added to the embedding (Algorithm 2), "
                 "a fixed sinusoidal table, rotary (RoPE), ALiBi distance biases, Transformer-XL relative "
                 "positions (Gopher), or none.",
    "position_base": "b: the base of every fixed position frequency: the sinusoidal table W_p, the rotary angles "
                     "(RoPE) and the sinusoids of Transformer-XL relative positions (Gopher). 'paper': ℓ_max for "
                     "the sinusoidal W_p, as Algorithm 2 writes it, and 10000 (Vaswani et al.'s base) for RoPE and "
                     "Transformer-XL, as their papers do. Type 10000 for Vaswani et al.'s sinusoidal table.",
    "tie_embeddings": "Tie the unembedding to the embedding: W_u = W_eᵀ, saving N_V·d_e parameters.",
    "bias": "Biases b_q, b_k, b_v, b_o and b_mlp on the attention and MLP projections (norms keep β).",
    "embed_norm": "Normalise the initial embedding e_t before the first layer, as BERT checkpoints do (not in the "
                  "paper's Algorithm 9; an imported BERT has it).",
    "unembed_bias": "A bias b_u in the unembedding: P = softmax(W_u X + b_u), as BERT's MLM head has (not in the "
                    "paper's Algorithm 7; an imported BERT has it).",
    "dropout": "Dropout probability applied while training (0 = off).",
    "norm_eps": "ε: the small constant under the square root of layer_norm / RMSnorm.",
}


# positions whose fixed frequencies have the base b = position_base
_BASED_POSITIONS = ("sinusoidal", "rope", "relative")
_FIELD_NAMED = re.compile(r"(\w+) = ")  # a ModelConfig message starts with the field it is about


def _form_rows() -> list[tuple[str, str, QWidget]]:
    """(field, label in the paper's notation, editor) for every ModelConfig field but arch and N_V."""
    return [
        ("L", "L", int_spin(1, 256, 4)),
        ("L_enc", "L<sub>enc</sub>", int_spin(1, 256, 2)),
        ("L_dec", "L<sub>dec</sub>", int_spin(1, 256, 2)),
        ("H", "H", int_spin(1, 256, 4)),
        ("H_kv", "H<sub>kv</sub>", int_spin(0, 256, 0, special="auto (= H)")),
        ("d_e", "d<sub>e</sub>", int_spin(1, 16384, 128, step=16)),
        ("d_mlp", "d<sub>mlp</sub>", int_spin(1, 65536, 512, step=64)),
        ("l_max", "ℓ<sub>max</sub>", int_spin(1, 65536, 64, step=16)),
        ("d_attn", "d<sub>attn</sub>", int_spin(0, 4096, 0, special="auto (d_e / H)")),
        ("d_mid", "d<sub>mid</sub>", int_spin(0, 4096, 0, special="auto (d_e / H)")),
        ("d_f", "d<sub>f</sub>", int_spin(0, 16384, 0, special="auto (= d_e)")),
        ("norm", "norm", ValueCombo([(_NORM_LABELS[n], n) for n in NORMS])),
        ("norm_position", "pre / post", ValueCombo([(_POSITION_LABELS[n], n) for n in NORM_POSITIONS])),
        ("activation", "activation", ValueCombo([(_ACT_LABELS.get(a, a), a) for a in ACTIVATIONS])),
        ("positions", "positions", ValueCombo([(_POS_LABELS.get(p, p), p) for p in POSITIONS])),
        ("position_base", "b", float_spin(0.0, 1e9, 0.0, decimals=0, step=1000.0,
                                          special="paper (ℓ_max or 10000)")),
        ("tie_embeddings", "tie", check("W_u = W_eᵀ")),
        ("bias", "biases", check("b_q, b_k, b_v, b_o, b_mlp")),
        ("embed_norm", "embed norm", check("norm(e_t) (BERT's)")),
        ("unembed_bias", "b<sub>u</sub>", check("W_u X + b_u (BERT's)")),
        ("dropout", "dropout", float_spin(0.0, 0.95, 0.0, decimals=2, step=0.05)),
        ("norm_eps", "ε", SciSpinBox(minimum=1e-12, maximum=0.5, factor=10.0)),
    ]


def _marked_up(text: str) -> str:
    """Plain preset text as rich text: `code` in a monospace font."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def preset_html(p: Preset) -> str:
    """What a preset teaches, then its walkthrough as numbered steps."""
    steps = "".join(f"<li>{_marked_up(step)}</li>" for step in p.walkthrough)
    return f"<p>{_marked_up(p.description)}</p>" + (f"<ol>{steps}</ol>" if steps else "")


def shown(m: ModelConfig) -> ModelConfig:
    """What the form shows of ``m``: a variation left to the paper (None) as the architecture's choice."""
    return m.replace(**{k: v for k, v in ARCH_DEFAULTS.get(m.arch, {}).items() if getattr(m, k) is None})


def arch_resets(arch: Arch) -> dict:
    """Choosing an architecture starts from the paper's choices for it (and a class head only on BERT)."""
    return {**ARCH_DEFAULTS.get(arch, {}), **({} if arch == "bert" else {"n_classes": 0})}


class ModelPanel(QWidget):
    """Presets, the architecture and every ModelConfig field, bound to ``settings.model``; the cost of the
    current settings (the workspace's). Signals ``presetChosen(Preset)`` when the user picks a preset (the settings
    column then applies it). The preset list shows ``settings.preset`` ("(custom)": None), the description and
    Details the preset they were set from (``settings.base``)."""

    presetChosen = Signal(object)

    def __init__(self, workspace: Workspace, presets=(), parent=None):
        super().__init__(parent)
        self._presets = list(presets)
        self.workspace, self.settings = workspace, workspace.settings
        self.highlighted: list[str] = []  # the rows `highlight_fields` marked
        self.invalid: str | None = None  # the field the model's error names, its row marked
        outer = QVBoxLayout(self)
        outer.addWidget(self._build_form())
        outer.addWidget(self._build_costs())
        outer.addStretch(1)
        self.binding = Binding(self.settings, "model", self.fields, shown=shown, also={"arch": arch_resets})
        self.settings.changed.connect(self._on_settings)
        self._show_preset()
        self._show_model()

    # -- building --------------------------------------------------------------------------------------------
    def _build_form(self) -> QWidget:
        self.presetCombo = QComboBox(objectName="presetCombo")
        self.presetCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # the names whole
        self.presetCombo.setToolTip("Ready-made configurations: model, corpus and training settings together.")
        for p in self._presets:
            self.presetCombo.addItem(p.name, p.key)
            self.presetCombo.setItemData(self.presetCombo.count() - 1, p.name, Qt.ItemDataRole.ToolTipRole)
        self.presetCombo.addItem("(custom)", None)
        self.presetCombo.activated.connect(self._preset_activated)
        self.presetDescription = WrappedLabel(objectName="presetDescription")
        self.presetDescription.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.presetDetailsButton = QToolButton(objectName="presetDetailsButton", text="Details", checkable=True)
        self.presetDetailsButton.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.presetDetailsButton.setAutoRaise(True)
        self.presetDetailsButton.setToolTip("What was measured: times on a CPU, seeds, what else was tried.")
        self.presetDetails = QLabel(objectName="presetDetails", wordWrap=True, textFormat=Qt.TextFormat.RichText)
        self.presetDetails.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.presetDetails.setStyleSheet("color: #444;")
        self.presetDetailsButton.toggled.connect(self._show_details)

        self.archCombo = ValueCombo([(_ARCH_SHORT.get(a, a), a) for a in ARCHS])
        self.archCombo.setObjectName("archCombo")
        for i, a in enumerate(ARCHS):
            self.archCombo.setItemData(i, ARCH_NAMES.get(a, a), Qt.ItemDataRole.ToolTipRole)
        self.archCombo.setToolTip("The transformer: EDTransformer (Algorithm 8), ETransformer/BERT (Algorithm 9), "
                                  "DTransformer/GPT (Algorithm 10), or Gopher (Algorithm 10 with RMSnorm and "
                                  "relative positions). Changing it resets the variations to the paper's choices.")
        self.vocabLabel = QLabel()

        f = Form(section="model")
        self.form = f
        preset_label = QLabel("<b>Preset</b>")  # the combo has the whole row: the presets' names are long
        preset_label.setBuddy(self.presetCombo)
        f.layout.addRow(preset_label)
        f.layout.addRow(self.presetCombo)
        f.layout.addRow(self.presetDescription)
        f.layout.addRow(self.presetDetailsButton)
        f.layout.addRow(self.presetDetails)
        f.add("arch", "Architecture", self.archCombo, self.archCombo.toolTip())
        f.add("vocab_size", "N<sub>V</sub>", self.vocabLabel,
              "N_V: the vocabulary size; it comes from the tokenizer chosen in the Corpus panel.")
        for name, label, widget in _form_rows():
            f.add(name, label, widget, _TIPS[name])
        self.fields = f.fields
        box = QWidget()
        box.setLayout(f.layout)
        return box

    def _build_costs(self) -> QGroupBox:
        box = QGroupBox("Cost")
        self.costLabel = QLabel(objectName="costLabel")
        self.costLabel.setTextFormat(Qt.TextFormat.RichText)
        self.costLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        QVBoxLayout(box).addWidget(self.costLabel)
        return box

    # -- the settings -----------------------------------------------------------------------------------------
    def config(self) -> ModelConfig:
        """The model settings (a copy)."""
        return self.settings.model.replace()

    def set_config(self, cfg: ModelConfig) -> None:
        self.settings.set_section("model", cfg)

    CUSTOM = "Custom settings, from no preset (pick one to start from its settings)."

    def chosen_preset(self) -> Preset | None:
        """The preset the settings are (None: custom settings, as the list says)."""
        return self.settings.preset

    def _show_preset(self) -> None:
        """The list on the settings' preset, "(custom)" once they differ from it; what the preset they were set from
        teaches and its walkthrough under it, its measurements behind the Details fold: an edit changes none of
        them, so that nothing under them moves."""
        chosen, base = self.settings.preset, self.settings.base
        i = self.presetCombo.findData(chosen.key) if chosen is not None else -1
        custom = self.presetCombo.count() - 1
        self.presetCombo.setCurrentIndex(i if i >= 0 else custom)
        self.presetCombo.setItemData(custom, f"Changed from the {base.name} preset: pick it to start from its settings "
                                     "again." if base is not None else self.CUSTOM, Qt.ItemDataRole.ToolTipRole)
        if self._presets:  # a panel without presets has nothing to say
            self.presetDescription.setText(preset_html(base) if base is not None else self.CUSTOM)
        self.presetDescription.setVisible(bool(self._presets))
        self.presetDetails.setText(_marked_up(base.details) if base is not None else "")
        self.presetDetailsButton.setVisible(bool(self._presets))
        self.presetDetailsButton.setEnabled(bool(self.presetDetails.text()))
        self._show_details()

    def _show_details(self, *_args) -> None:
        """The Details fold: open or closed, with its arrow."""
        button = self.presetDetailsButton
        button.setArrowType(Qt.ArrowType.DownArrow if button.isChecked() else Qt.ArrowType.RightArrow)
        self.presetDetails.setVisible(button.isChecked() and bool(self.presetDetails.text()))

    def _preset_activated(self, index: int) -> None:
        key = self.presetCombo.itemData(index)
        chosen = next((p for p in self._presets if p.key == key), None)
        if chosen is not None:
            self.presetChosen.emit(chosen)
        self._show_preset()  # "(custom)" picked: the list says what the settings are

    def _on_settings(self, change: Change) -> None:
        self.binding.show(change)
        self._show_preset()
        if change.touches("model"):
            self._show_model()
        elif change.touches("train", "batch_size", "optimizer") or change.touches(DERIVED, "precision"):
            self._show_costs()  # the memory estimate depends on them

    # -- showing -----------------------------------------------------------------------------------------------
    def _show_model(self) -> None:
        m = shown(self.settings.model)
        self.vocabLabel.setText(f"{m.vocab_size} (from the tokenizer)")
        edt = m.arch == "edt"
        self.form.set_row_applies("L", not edt)
        self.form.set_row_applies("L_enc", edt)
        self.form.set_row_applies("L_dec", edt)
        self.form.set_row_applies("d_f", m.arch == "bert")
        self.form.set_row_applies("position_base", m.positions in _BASED_POSITIONS)
        named = _FIELD_NAMED.match(self.settings.model_error or "")
        self.invalid = named.group(1) if named and named.group(1) in self.form.labels else None
        self._style_labels()
        self._show_costs()

    HIGHLIGHT = "background: #ffe08a; border-radius: 3px;"  # a row a pseudocode line uses
    INVALID = "color: #b00020; font-weight: bold;"  # the row of the field the model's error names

    def highlight_fields(self, names) -> None:
        """Mark the rows of these ModelConfig fields (those a clicked pseudocode line uses) and unmark the
        others; ``highlighted`` lists the marked rows in form order."""
        wanted = set(names)
        self.highlighted = [name for name in self.form.labels if name in wanted]
        self._style_labels()

    def preset_key(self) -> str | None:
        """The key of the preset the settings were set from (None: none), to start from again."""
        return self.settings.base.key if self.settings.base is not None else None

    def first_highlighted_row(self) -> QWidget | None:
        """The label of the first row `highlight_fields` marked, to scroll to; None when none is."""
        return self.form.labels[self.highlighted[0]] if self.highlighted else None

    def _style_labels(self) -> None:
        for name, label in self.form.labels.items():
            label.setStyleSheet((self.HIGHLIGHT if name in self.highlighted else "")
                                + (self.INVALID if name == self.invalid else ""))

    def _show_costs(self) -> None:
        if self.settings.model_error is not None:
            self.costLabel.setText("<i>(fix the configuration to see its cost)</i>")
            return
        cfg, t, precision = self.settings.model, self.settings.train, self.settings.derived["precision"]
        counts = costs.parameter_counts(cfg)
        total = sum(counts.values())
        fl = costs.flops_per_token(cfg)
        mem = costs.memory_estimate(cfg, t.batch_size, t.optimizer, precision)
        rows = "".join(f"<tr><td>{k}</td><td align='right'>{v:,}</td></tr>" for k, v in counts.items() if v)
        self.costLabel.setText(
            f"<table cellspacing='0' cellpadding='1'>{rows}"
            f"<tr><td><b>parameters</b></td><td align='right'><b>{total:,}</b></td></tr>"
            f"<tr><td>FLOPs / token (forward)</td><td align='right'>{human_count(fl['forward'])}</td></tr>"
            f"<tr><td>FLOPs / token (training)</td><td align='right'>{human_count(fl['training'])}</td></tr>"
            f"<tr><td>training memory (batch {t.batch_size}, {precision})</td>"
            f"<td align='right'>{human_bytes(mem['total'])}</td></tr>"
            f"</table>"
            f"<small>weights {human_bytes(mem['weights'])}, optimizer {human_bytes(mem['optimizer'])}, "
            f"activations {human_bytes(mem['activations'])}</small>")
