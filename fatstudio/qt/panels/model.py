"""Model panel: presets, the architecture and every ModelConfig field as a control in the paper's notation,
with the live cost summary (parameters per component, FLOPs per token, memory) and the pseudocode."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QComboBox, QGroupBox, QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout, QWidget

from fatstudio.core import costs
from fatstudio.core.config import (
    ACTIVATIONS,
    ARCH_DEFAULTS,
    ARCH_NAMES,
    ARCHS,
    NORM_POSITIONS,
    NORMS,
    POSITIONS,
    ModelConfig,
)
from fatstudio.qt.widgets.forms import (
    Form,
    SciSpinBox,
    ValueCombo,
    check,
    float_spin,
    human_bytes,
    human_count,
    int_spin,
)
from fatstudio.qt.widgets.pseudocode import pseudocode

_ARCH_SHORT = {"edt": "EDTransformer · encoder-decoder (Alg. 8)", "bert": "ETransformer · BERT (Alg. 9)",
               "gpt": "DTransformer · GPT-2 (Alg. 10)", "gopher": "Gopher · DTransformer + RMSnorm"}
_NORM_LABELS = {"layer": "layer_norm (Alg. 6)", "rms": "RMSnorm (Gopher)"}
_POSITION_LABELS = {"pre": "pre-LN (GPT-2)", "post": "post-LN (original)"}
_ACT_LABELS = {"relu": "ReLU", "gelu": "GELU", "gelu_tanh": "GELU (tanh approx.)", "swiglu": "SwiGLU"}
_POS_LABELS = {"learned": "learned W_p (Alg. 2)", "sinusoidal": "sinusoidal (fixed)", "rope": "rotary (RoPE)",
               "alibi": "ALiBi", "relative": "relative (Transformer-XL)", "none": "none"}

# (field, label in the paper's notation, tooltip)
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
    "activation": "The MLP non-linearity: ReLU (original), GELU (BERT, GPT), or SwiGLU (a gated unit with "
                  "a third matrix W_mlp3).",
    "positions": "How the model knows token positions: a learned W_p added to the embedding (Algorithm 2), "
                 "a fixed sinusoidal table, rotary (RoPE), ALiBi distance biases, Transformer-XL relative "
                 "positions (Gopher), or none.",
    "position_base": "b: the base of the sinusoidal (and rotary) frequencies, 10000 in Vaswani et al.",
    "tie_embeddings": "Tie the unembedding to the embedding: W_u = W_eᵀ, saving N_V·d_e parameters.",
    "bias": "Biases b_q, b_k, b_v, b_o and b_mlp on the attention and MLP projections (norms keep β).",
    "dropout": "Dropout probability applied while training (0 = off).",
    "norm_eps": "ε: the small constant under the square root of layer_norm / RMSnorm.",
}


class ModelPanel(QWidget):
    """Signals ``changed`` whenever the model configuration changes and ``presetChosen(Preset)`` when the
    user picks a preset (the main window then sets the corpus and training panels too)."""

    changed = Signal()
    presetChosen = Signal(object)

    def __init__(self, presets=(), parent=None):
        super().__init__(parent)
        self._presets = list(presets)
        self._updating = False
        self._n_classes = 0
        self._vocab_size = 65
        self._batch_size, self._optimizer, self._precision = 12, "adamw", "fp32"

        outer = QVBoxLayout(self)
        self.presetCombo = QComboBox(objectName="presetCombo")
        self.presetCombo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.presetCombo.setMinimumContentsLength(12)
        self.presetCombo.setToolTip("Ready-made configurations: model, corpus and training settings together.")
        for p in self._presets:
            self.presetCombo.addItem(p.name, p.key)
        self.presetCombo.addItem("(custom)", None)
        self.presetCombo.activated.connect(self._preset_activated)

        self.archCombo = ValueCombo([(_ARCH_SHORT.get(a, a), a) for a in ARCHS])
        self.archCombo.setObjectName("archCombo")
        for i, a in enumerate(ARCHS):
            self.archCombo.setItemData(i, ARCH_NAMES.get(a, a), Qt.ItemDataRole.ToolTipRole)
        self.archCombo.setToolTip("The transformer: EDTransformer (Algorithm 8), ETransformer/BERT (Algorithm 9), "
                                  "DTransformer/GPT (Algorithm 10), or Gopher (Algorithm 10 with RMSnorm and "
                                  "relative positions). Changing it resets the variations to the paper's choices.")
        self.archCombo.valueChanged.connect(self._arch_changed)

        f = Form(prefix="model")
        self.form = f
        f.add("preset", "Preset", self.presetCombo, self.presetCombo.toolTip())
        f.add("arch", "Architecture", self.archCombo, self.archCombo.toolTip())
        self.vocabLabel = QLabel("65 (from the tokenizer)")
        f.add("vocab_size", "N<sub>V</sub>", self.vocabLabel,
              "N_V: the vocabulary size; it comes from the tokenizer chosen in the Corpus panel.")
        f.add("L", "L", int_spin(1, 256, 4), _TIPS["L"])
        f.add("L_enc", "L<sub>enc</sub>", int_spin(1, 256, 2), _TIPS["L_enc"])
        f.add("L_dec", "L<sub>dec</sub>", int_spin(1, 256, 2), _TIPS["L_dec"])
        f.add("H", "H", int_spin(1, 256, 4), _TIPS["H"])
        f.add("H_kv", "H<sub>kv</sub>", int_spin(0, 256, 0, special="auto (= H)"), _TIPS["H_kv"])
        f.add("d_e", "d<sub>e</sub>", int_spin(1, 16384, 128, step=16), _TIPS["d_e"])
        f.add("d_mlp", "d<sub>mlp</sub>", int_spin(1, 65536, 512, step=64), _TIPS["d_mlp"])
        f.add("l_max", "ℓ<sub>max</sub>", int_spin(1, 65536, 64, step=16), _TIPS["l_max"])
        f.add("d_attn", "d<sub>attn</sub>", int_spin(0, 4096, 0, special="auto (d_e / H)"), _TIPS["d_attn"])
        f.add("d_mid", "d<sub>mid</sub>", int_spin(0, 4096, 0, special="auto (d_e / H)"), _TIPS["d_mid"])
        f.add("d_f", "d<sub>f</sub>", int_spin(0, 16384, 0, special="auto (= d_e)"), _TIPS["d_f"])
        f.add("norm", "norm", ValueCombo([(_NORM_LABELS[n], n) for n in NORMS]), _TIPS["norm"])
        f.add("norm_position", "pre / post", ValueCombo([(_POSITION_LABELS[n], n) for n in NORM_POSITIONS]),
              _TIPS["norm_position"])
        f.add("activation", "activation", ValueCombo([(_ACT_LABELS.get(a, a), a) for a in ACTIVATIONS]),
              _TIPS["activation"])
        f.add("positions", "positions", ValueCombo([(_POS_LABELS.get(p, p), p) for p in POSITIONS]), _TIPS["positions"])
        pb = float_spin(1.0, 1e9, 10000.0, decimals=0, step=1000.0)
        f.add("position_base", "b", pb, _TIPS["position_base"])
        f.add("tie_embeddings", "tie", check("W_u = W_eᵀ"), _TIPS["tie_embeddings"])
        f.add("bias", "biases", check("b_q, b_k, b_v, b_o, b_mlp"), _TIPS["bias"])
        f.add("dropout", "dropout", float_spin(0.0, 0.95, 0.0, decimals=2, step=0.05), _TIPS["dropout"])
        eps = SciSpinBox(minimum=1e-12, maximum=0.5, factor=10.0)
        f.add("norm_eps", "ε", eps, _TIPS["norm_eps"])
        self.fields = f.fields
        for name, w in f.fields.items():
            if name in ("preset", "arch", "vocab_size"):
                continue
            sig = getattr(w, "valueChanged", None) or w.toggled
            sig.connect(self._field_changed)

        box = QWidget()
        box.setLayout(f.layout)
        outer.addWidget(box)

        self.errorLabel = QLabel(objectName="modelErrorLabel")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.setStyleSheet("color: #b00020; font-weight: bold;")
        self.errorLabel.hide()
        outer.addWidget(self.errorLabel)

        costs_box = QGroupBox("Cost")
        cl = QVBoxLayout(costs_box)
        self.costLabel = QLabel(objectName="costLabel")
        self.costLabel.setTextFormat(Qt.TextFormat.RichText)
        self.costLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        cl.addWidget(self.costLabel)
        outer.addWidget(costs_box)

        code_box = QGroupBox("Pseudocode")
        pl = QVBoxLayout(code_box)
        self.pseudocodeView = QPlainTextEdit(objectName="pseudocodeView")
        self.pseudocodeView.setReadOnly(True)
        self.pseudocodeView.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPointSizeF(max(7.5, mono.pointSizeF() * 0.9))
        self.pseudocodeView.setFont(mono)
        self.pseudocodeView.setMinimumHeight(260)
        self.pseudocodeView.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        pl.addWidget(self.pseudocodeView)
        outer.addWidget(code_box, 1)

        self._update_visibility()
        self._refresh()

    # -- the configuration -------------------------------------------------------------------------------
    def config(self) -> ModelConfig:
        g = self.fields

        def opt(name):
            v = g[name].value()
            return None if v == 0 else v

        return ModelConfig(
            arch=self.archCombo.value(), vocab_size=self._vocab_size, l_max=g["l_max"].value(), L=g["L"].value(),
            L_enc=g["L_enc"].value(), L_dec=g["L_dec"].value(), H=g["H"].value(), d_e=g["d_e"].value(),
            d_mlp=g["d_mlp"].value(), d_attn=opt("d_attn"), d_mid=opt("d_mid"), d_f=opt("d_f"),
            norm=g["norm"].value(), norm_position=g["norm_position"].value(), activation=g["activation"].value(),
            positions=g["positions"].value(), position_base=float(g["position_base"].value()),
            tie_embeddings=g["tie_embeddings"].isChecked(), bias=g["bias"].isChecked(),
            H_kv=opt("H_kv"), dropout=round(g["dropout"].value(), 4), norm_eps=float(g["norm_eps"].value()),
            n_classes=self._n_classes)

    def set_config(self, cfg: ModelConfig) -> None:
        """Show ``cfg`` (its None variations as the architecture's paper defaults)."""
        self._updating = True
        try:
            r = cfg.resolved() if cfg.arch in ARCHS else cfg
            self.archCombo.set_value(cfg.arch)
            g = self.fields
            for name in ("l_max", "L", "L_enc", "L_dec", "H", "d_e", "d_mlp"):
                g[name].setValue(getattr(cfg, name))
            for name in ("d_attn", "d_mid", "d_f", "H_kv"):
                g[name].setValue(getattr(cfg, name) or 0)
            for name in ("norm", "norm_position", "activation", "positions"):
                g[name].set_value(getattr(r, name))
            g["position_base"].setValue(cfg.position_base)
            g["tie_embeddings"].setChecked(bool(cfg.tie_embeddings))
            g["bias"].setChecked(bool(cfg.bias))
            g["dropout"].setValue(cfg.dropout)
            g["norm_eps"].setValue(cfg.norm_eps)
            self._n_classes = cfg.n_classes
        finally:
            self._updating = False
        self._update_visibility()
        self._refresh()
        self.changed.emit()

    def select_preset(self, key: str | None) -> None:
        i = self.presetCombo.findData(key)
        self.presetCombo.setCurrentIndex(i if i >= 0 else self.presetCombo.count() - 1)

    def set_vocab_size(self, n: int | None) -> None:
        if n:
            self._vocab_size = int(n)
            self.vocabLabel.setText(f"{n} (from the tokenizer)")
            self._refresh()

    def set_training_context(self, batch_size: int, optimizer: str) -> None:
        """The memory estimate depends on the train panel's batch size and optimizer."""
        self._batch_size, self._optimizer = batch_size, optimizer
        self._refresh()

    def set_precision(self, precision: str) -> None:
        """…and on the precision training will use (what "auto" resolved to on the chosen device)."""
        self._precision = precision
        self._refresh()

    def show_error(self, message: str | None) -> None:
        self.errorLabel.setText(message or "")
        self.errorLabel.setVisible(bool(message))

    # -- reactions -------------------------------------------------------------------------------------------
    def _preset_activated(self, index: int) -> None:
        key = self.presetCombo.itemData(index)
        for p in self._presets:
            if p.key == key:
                self.presetChosen.emit(p)
                return

    def _arch_changed(self, arch) -> None:
        if self._updating:
            return
        self._updating = True
        try:  # a new architecture starts from the paper's choices for it
            for name, value in ARCH_DEFAULTS.get(arch, {}).items():
                self.fields[name].set_value(value)
            if arch != "bert":
                self._n_classes = 0
        finally:
            self._updating = False
        self._update_visibility()
        self._user_changed()

    def _field_changed(self, *_):
        if not self._updating:
            self._update_visibility()
            self._user_changed()

    def _user_changed(self) -> None:
        self.presetCombo.setCurrentIndex(self.presetCombo.count() - 1)  # (custom)
        self._refresh()
        self.changed.emit()

    def _update_visibility(self) -> None:
        arch = self.archCombo.value()
        edt = arch == "edt"
        self.form.set_row_visible("L", not edt)
        self.form.set_row_visible("L_enc", edt)
        self.form.set_row_visible("L_dec", edt)
        self.form.set_row_visible("d_f", arch == "bert")
        self.form.set_row_visible("position_base", self.fields["positions"].value() in ("sinusoidal", "rope"))

    def _refresh(self) -> None:
        cfg = self.config()
        try:
            cfg.validate()
        except ValueError:
            self.costLabel.setText("<i>(fix the configuration to see its cost)</i>")
            self.pseudocodeView.setPlainText("(fix the configuration to see the pseudocode)")
            return
        counts = costs.parameter_counts(cfg)
        total = sum(counts.values())
        fl = costs.flops_per_token(cfg)
        mem = costs.memory_estimate(cfg, self._batch_size, self._optimizer, self._precision)
        rows = "".join(f"<tr><td>{k}</td><td align='right'>{v:,}</td></tr>" for k, v in counts.items() if v)
        self.costLabel.setText(
            f"<table cellspacing='0' cellpadding='1'>{rows}"
            f"<tr><td><b>parameters</b></td><td align='right'><b>{total:,}</b></td></tr>"
            f"<tr><td>FLOPs / token (forward)</td><td align='right'>{human_count(fl['forward'])}</td></tr>"
            f"<tr><td>FLOPs / token (training)</td><td align='right'>{human_count(fl['training'])}</td></tr>"
            f"<tr><td>training memory (batch {self._batch_size}, {self._precision})</td>"
            f"<td align='right'>{human_bytes(mem['total'])}</td></tr>"
            f"</table>"
            f"<small>weights {human_bytes(mem['weights'])}, optimizer {human_bytes(mem['optimizer'])}, "
            f"activations {human_bytes(mem['activations'])}</small>")
        self.pseudocodeView.setPlainText(pseudocode(cfg))
