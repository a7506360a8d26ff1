"""Train panel: the training settings (``TrainPanel``, a form in the settings column) and the training view
(``TrainView``: Train and Estimate time, Pause / Step / Stop, the learning rate η changed while training, the
progress bar with ETA, the live plots (exported as CSV or PNG), the sample text of each evaluation and the list
of runs to reopen, resume, overlay or delete)."""
from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStyle,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from fatstudio.core.config import Device, Precision, TrainConfig
from fatstudio.core.inspect.probes import ProbeInput
from fatstudio.qt.binding import Binding, Change
from fatstudio.qt.panels.train.runs_list import RunsList
from fatstudio.qt.widgets.forms import (
    Form,
    SciSpinBox,
    ValueCombo,
    check,
    float_spin,
    human_count,
    human_duration,
    int_spin,
    sci,
)
from fatstudio.qt.widgets.plots import TrainingPlots

if TYPE_CHECKING:
    from fatstudio.core.app.workspace import Workspace

DEVICES = [("auto (GPU if there is one)", "auto"), ("CPU", "cpu"), ("CUDA GPU", "cuda"), ("Apple MPS", "mps")]
PROBE_HINTS = {  # the probe edit's placeholder per task: what the default is, what to type
    "next_token": "default: the start of a validation window; or any text",
    "masked_lm": "default: a validation window with [MASK]s; or text with [MASK], e.g. def f([MASK]):",
    "seq2seq": "default: a validation pair's target (the decoder's text)",
    "classification": "default: a validation text; or any text to classify",
}
ESTIMATE_TIP = ("Time a few real steps and an evaluation of the current settings on the chosen device, and "
                "estimate how long the whole run takes.")
PRECISIONS = [("auto", "auto"), ("fp32", "fp32"), ("bf16 (autocast)", "bf16"),
              ("fp16 (autocast + loss scaling, GPU)", "fp16")]


def _form_rows() -> list[tuple[str, str, QWidget, str]]:
    """(field, label, editor, tooltip) for every TrainConfig field."""
    return [
        ("steps", "steps", int_spin(1, 100_000_000, 2000, step=100),
         "How many optimisation steps (minibatches) to train for."),
        ("batch_size", "batch size", int_spin(1, 65536, 12),
         "Sequences per minibatch (paper §8: minibatch gradient descent)."),
        ("optimizer", "optimizer", ValueCombo([("AdamW", "adamw"), ("SGD (the paper's θ ← θ − η∇loss)", "sgd"),
                                                ("Muon (hidden matrices) + AdamW", "muon")]),
         "AdamW (Adam with decoupled weight decay), or the paper's plain stochastic gradient descent, or Muon: "
         "the hidden weight matrices (W_q, W_k, W_v, W_o, W_mlp1, W_mlp2) step by their momentum orthogonalised "
         "(Newton-Schulz) at Muon's own η and weight decay, while embeddings, unembedding, norms and biases "
         "keep AdamW at η. The schedule scales both η alike; Muon reaches a loss in fewer steps."),
        ("lr", "η (learning rate)", SciSpinBox(minimum=1e-8, maximum=10.0),
         "The peak learning rate η. Type any number, e.g. 3e-4; the arrows double or halve it."),
        ("warmup", "warm-up steps", int_spin(0, 10_000_000, 100, step=10),
         "η rises linearly from ~0 to its peak over these first steps."),
        ("lr_schedule", "schedule", ValueCombo([("cosine decay to min η", "cosine"), ("constant", "constant"),
                                                ("constant, then decay", "wsd")]),
         "After warm-up, η follows a cosine down to min η at the last step, or stays constant, or stays constant "
         "until the last 20% of the steps and then follows a cosine down to min η (warm-up, stable, decay: a run "
         "that learns at full η and still ends settled)."),
        ("min_lr", "min η", SciSpinBox(minimum=0.0, maximum=10.0),
         "The learning rate the cosine schedule ends at."),
        ("weight_decay", "weight decay", float_spin(0.0, 10.0, 0.1, decimals=4, step=0.01),
         "Decoupled weight decay (AdamW) on matrices only, never on biases, norms' γ and β."),
        ("beta1", "β<sub>1</sub>", float_spin(0.0, 0.9999, 0.9, decimals=4, step=0.01),
         "AdamW's decay rate of the first moment (the momentum)."),
        ("beta2", "β<sub>2</sub>", float_spin(0.0, 0.9999, 0.99, decimals=4, step=0.001),
         "AdamW's decay rate of the second moment."),
        ("muon_lr", "Muon η", SciSpinBox(minimum=1e-8, maximum=10.0),
         "Optimizer Muon: the hidden matrices' peak learning rate (η stays AdamW's for the rest); the "
         "warm-up and cosine schedule scale it as they scale η."),
        ("muon_weight_decay", "Muon weight decay", float_spin(0.0, 10.0, 0.0, decimals=4, step=0.01),
         "Optimizer Muon: the hidden matrices' decoupled weight decay (θ ← θ − η·λ·θ at Muon's η)."),
        ("grad_clip", "gradient clipping", float_spin(0.0, 1e6, 1.0, decimals=3, step=0.1),
         "Rescale the gradient when its norm exceeds this value (0 = off)."),
        ("eval_interval", "evaluate every", int_spin(1, 10_000_000, 250, step=50),
         "Measure the train and validation loss (and write a sample) every this many steps."),
        ("eval_iters", "evaluation batches", int_spin(1, 100_000, 20),
         "Minibatches averaged for each evaluation."),
        ("checkpoint_interval", "checkpoint every", int_spin(1, 10_000_000, 500, step=50),
         "Save the weights and optimizer state every this many steps (and always at the end)."),
        ("keep_weights", "keep weights", ValueCombo([("at every evaluation", "evaluations"), ("last only", "last")]),
         "Also keep the weights of every evaluation (the steps of the attention maps), so experiments can load "
         "any of them: 4 bytes a parameter each, at most 2 GB a run (beyond, every 2nd, 4th, … evaluation's). "
         "Or keep only the last checkpoint's."),
        ("sample_tokens", "sample length", int_spin(0, 100_000, 200, step=50),
         "Tokens generated for the sample text at each evaluation (0 = no samples)."),
        ("seed", "seed", int_spin(0, 2_147_483_647, 1337),
         "The random seed: same seed, same config, same corpus → the same run on the CPU. On a GPU some "
         "kernels sum in a different order each time, so runs agree closely but not bit for bit."),
        ("device", "device", ValueCombo(DEVICES), "Where to train: auto picks CUDA, then MPS, then the CPU."),
        ("precision", "precision", ValueCombo(PRECISIONS),
         "auto: bf16 autocast on GPUs that do bf16 natively, else fp32 (TF32 matmuls on CUDA). Or choose "
         "fp32, bf16 autocast, or fp16 autocast with loss scaling (GPU only). The line below says what "
         "training will use here."),
        ("compile", "compile", check("torch.compile the model"),
         "Compile the model with torch.compile (slow start, faster steps on a GPU)."),
        ("tensorboard", "TensorBoard", check("TensorBoard event files"),
         "Also write TensorBoard event files into the run folder's tensorboard/ (losses, η, gradient norm, "
         "tokens/s, accuracy and the samples, at the run's steps); watch them with tensorboard --logdir and "
         "the runs folder. Needs the tensorboard package (pip install tensorboard)."),
    ]


class TrainPanel(QWidget):
    """The [train] table as a form bound to ``settings.train``, and a line saying what the chosen device
    and precision mean on this machine. Signals ``precisionResolved(str)`` with what the precision ("auto"
    too) resolves to, which it also records in the Settings (``derived["precision"]``)."""

    precisionResolved = Signal(str)  # what the chosen precision ("auto" too) means on the chosen device

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace, self.settings = workspace, workspace.settings
        self._described: tuple[Device, Precision] | None = None
        lay = QVBoxLayout(self)
        lay.addWidget(self._build_form())
        lay.addWidget(self._build_probe())
        lay.addStretch(1)
        self.binding = Binding(self.settings, "train", self.fields)
        self.settings.changed.connect(self._on_settings)
        QTimer.singleShot(0, self.describe_choice)  # once the event loop runs: the window opens first

    def _build_form(self) -> QWidget:
        f = Form(section="train")
        self.form = f
        for name, label, widget, tip in _form_rows():
            f.add(name, label, widget, tip)
        self.choiceLabel = QLabel()
        self.choiceLabel.setObjectName("precisionChoice")
        self.choiceLabel.setWordWrap(True)
        f.layout.addRow(self.choiceLabel)
        self.fields = f.fields
        box = QWidget()
        box.setLayout(f.layout)
        return box

    def _build_probe(self) -> QGroupBox:
        box = QGroupBox("Probe (attention over training)")
        box.setToolTip("At every evaluation every head's attention map for this input is saved with the run; "
                       "the Attention tab's step slider scrubs through them.")
        f = Form()  # not settings of the run's config: the fields keep their names
        self.probeEdit = QLineEdit(objectName="probeEdit")
        self.probeEdit.setClearButtonEnabled(True)
        self.probeSourceEdit = QLineEdit(objectName="probeSourceEdit")
        self.probeSourceEdit.setClearButtonEnabled(True)
        f.add("text", "text", self.probeEdit, "What the model reads at each evaluation. Empty: a default "
              "taken from the validation split.")
        f.add("source", "source", self.probeSourceEdit, "An encoder-decoder's probe: the source its encoder "
              "reads (the text is then the target its decoder reads). Give both or neither.")
        box.setLayout(f.layout)
        self._probe_form = f
        self._show_probe_kind()
        return box

    def _show_probe_kind(self) -> None:
        """The probe's fields and hints for the chosen architecture and task."""
        arch, task = self.settings.model.arch, self.settings.data.task
        self._probe_form.set_row_visible("source", arch == "edt")
        self.probeEdit.setPlaceholderText(PROBE_HINTS.get(task, PROBE_HINTS["next_token"]))
        self.probeSourceEdit.setPlaceholderText("default: a validation pair's source")

    def probe(self) -> ProbeInput | None:
        """The probe input asked for, or None for the task's default (`probes.default_probe`); ValueError in
        words for an encoder-decoder's probe with only one of its two texts."""
        arch = self.settings.model.arch
        return ProbeInput.asked(self.probeEdit.text(), self.probeSourceEdit.text() if arch == "edt" else None, arch)

    def config(self) -> TrainConfig:
        """The training settings (a copy)."""
        return self.settings.train.replace()

    def set_config(self, t: TrainConfig) -> None:
        self.settings.set_section("train", t)

    def _on_settings(self, change: Change) -> None:
        self.binding.show(change)
        if change.touches("model", "arch") or change.touches("data", "task"):
            self._show_probe_kind()
        if change.touches("train", "device", "precision"):
            QTimer.singleShot(0, self.describe_choice)

    def describe_choice(self) -> None:
        """Ask the core (in a worker: it imports torch) what the device and precision resolve to here."""
        choice = (self.settings.train.device, self.settings.train.precision)
        if choice == self._described:
            return
        self._described = choice
        self.workspace.jobs.submit("describe-choice", _describe_choice, choice, on_result=self._show_choice)

    def _show_choice(self, answer: tuple[tuple[Device, Precision], str, str]) -> None:
        choice, precision, text = answer
        if choice != self._described:
            return  # an answer for settings changed since
        self.choiceLabel.setText(f"<small>{'' if precision else '⚠ '}{html.escape(text)}</small>")
        if precision:
            self.settings.set_derived("precision", precision)
            self.precisionResolved.emit(precision)


def _describe_choice(choice: tuple[Device, Precision]) -> tuple[tuple[Device, Precision], str, str]:
    """(device, precision) → (the same, what the precision resolves to or "" if it cannot, the words)."""
    from fatstudio.core.device import describe_choice  # in the worker: it imports torch
    try:
        return (choice, *describe_choice(*choice))
    except ValueError as e:
        return choice, "", str(e)


class TrainView(QWidget):
    """What a run looks like while it trains: buttons, progress, plots, samples, runs.

    ``plots`` (a TrainingPlots) and ``runs`` (a RunsList) may be handed in by the window that drives them.
    Signals ``trainRequested()``, ``pauseRequested()`` (Pause or Resume), ``stopRequested()``,
    ``snapshotRequested()`` (Prompt current weights), ``stepRequested()`` (Step, while paused),
    ``lrRequested(object)``: a learning rate (float) to train at from the next step on, or None to return to the
    schedule, and ``estimateRequested()``: time the settings (`show_estimate` shows the answer)."""

    trainRequested = Signal()
    pauseRequested = Signal()
    stopRequested = Signal()
    snapshotRequested = Signal()
    stepRequested = Signal()
    lrRequested = Signal(object)
    estimateRequested = Signal()
    SAMPLE_COLUMNS = 60  # characters of a sample's line the samples pane shows unwrapped, whatever the window

    def __init__(self, parent=None, plots: TrainingPlots | None = None, runs: RunsList | None = None):
        super().__init__(parent)
        self.plots = plots if plots is not None else TrainingPlots()
        self.runs = runs if runs is not None else RunsList()
        self._last_progress = -1e9
        self._pending_progress: tuple[int, int, float | None, float | None, str | None] | None = None
        self._shown_progress: tuple[int, int, str | None] = (0, 0, None)  # step, total, text on the bar
        self._progress_timer = QTimer(self, singleShot=True)
        self._progress_timer.timeout.connect(self.flush_progress)
        self._estimating = False
        self._estimate_allowed = True
        lay = QVBoxLayout(self)
        lay.addLayout(self._build_controls())
        lay.addLayout(self._build_lr_controls())
        lay.addWidget(self._build_status())
        lay.addWidget(self._build_error())
        lay.addWidget(self._build_panes(), 1)
        self.set_state("idle")

    def _build_controls(self) -> QHBoxLayout:
        """Train, Pause, Stop, Prompt current weights and the progress bar, in a row."""
        self.trainButton = QPushButton("▶ Train", objectName="trainButton")
        self.trainButton.setToolTip("Start a new run with the current Model, Corpus and Train settings.")
        self.trainButton.setDefault(True)
        self.trainButton.clicked.connect(self.trainRequested)
        self.estimateButton = QPushButton("Estimate time", objectName="estimateButton")
        self.estimateButton.setToolTip(ESTIMATE_TIP)
        self.estimateButton.clicked.connect(self.estimateRequested)
        self.pauseButton = QPushButton("Pause", objectName="pauseButton")
        self.pauseButton.setToolTip("Pause training after the current step (Resume continues).")
        self.pauseButton.clicked.connect(self.pauseRequested)
        self.stepButton = QPushButton("Step", objectName="stepButton")
        self.stepButton.setToolTip("While paused: train exactly one step (one minibatch update), show its "
                                   "numbers, and pause again.")
        self.stepButton.clicked.connect(self._step_clicked)
        self.stopButton = QPushButton("■ Stop", objectName="stopButton")
        self.stopButton.setToolTip("Stop after the current step; the run is checkpointed and kept.")
        self.stopButton.clicked.connect(self.stopRequested)
        self.snapshotButton = QPushButton("Prompt current weights", objectName="snapshotButton")
        self.snapshotButton.setToolTip("Copy the weights as they are now and open them in the Prompt tab; "
                                       "training goes on.")
        self.snapshotButton.clicked.connect(self.snapshotRequested)
        self.progressBar = QProgressBar(objectName="progressBar")
        self.progressBar.setRange(0, 1000)
        self.progressBar.setValue(0)
        self.progressBar.setFormat("ready")
        self.progressBar.setTextVisible(True)
        self.progressBar.setMinimumWidth(200)
        row = QHBoxLayout()
        for w in (self.trainButton, self.estimateButton, self.pauseButton, self.stepButton, self.stopButton,
                  self.snapshotButton):
            row.addWidget(w)
        row.addWidget(self.progressBar, 1)
        return row

    def _build_lr_controls(self) -> QHBoxLayout:
        """η for the running (or paused) run: a value, Set, and back to the schedule."""
        tip = ("Change the learning rate η of the run while it trains or is paused: Set trains at this fixed η "
               "from the next step on, replacing the schedule (warm-up, cosine); Schedule returns to it. "
               "metrics.jsonl and the η plot record the η each step used.")
        self.lrSpin = SciSpinBox(minimum=0.0, maximum=10.0)
        self.lrSpin.setObjectName("liveLrSpin")  # its value: `show_next_lr` until a run starts
        self.lrSpin.setToolTip(tip + " Type any number, e.g. 1e-4; the arrows double or halve it.")
        self.lrApplyButton = QPushButton("Set η", objectName="liveLrButton")
        self.lrApplyButton.setToolTip(tip)
        self.lrApplyButton.clicked.connect(lambda: self.lrRequested.emit(float(self.lrSpin.value())))
        self.lrScheduleButton = QPushButton("Schedule", objectName="liveLrScheduleButton")
        self.lrScheduleButton.setToolTip("Return to the learning-rate schedule of the Train settings from the "
                                         "next step on.")
        self.lrScheduleButton.clicked.connect(lambda: self.lrRequested.emit(None))
        self.lrLabel = QLabel("", objectName="liveLrLabel")
        label = QLabel("learning rate η:")
        label.setToolTip(tip)
        self.estimateLabel = QLabel(objectName="estimateLabel")  # under the progress bar: how long a run takes
        self.estimateLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row = QHBoxLayout()
        for w in (label, self.lrSpin, self.lrApplyButton, self.lrScheduleButton, self.lrLabel):
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.estimateLabel)
        return row

    def show_estimate(self, text: str, details: str = "", busy: bool = False) -> None:
        """Show an estimate (or a message, or "estimating…" while ``busy``) under the progress bar; the
        details as its tooltip."""
        self._estimating = busy
        self.estimateLabel.setText(text)
        self.estimateLabel.setToolTip(details)
        self._update_estimate_button()

    def allow_estimate(self, allowed: bool, why: str = "") -> None:
        """Whether the settings can be timed now (valid, no run training); ``why`` not, as the tooltip."""
        self._estimate_allowed = allowed
        self.estimateButton.setToolTip(ESTIMATE_TIP if allowed or not why else why)
        self._update_estimate_button()

    def _update_estimate_button(self) -> None:
        self.estimateButton.setEnabled(self._estimate_allowed and not self._estimating)

    def forget_estimate(self) -> None:
        """The settings changed: an estimate shown (not one being measured) was of others."""
        if not self._estimating and self.estimateLabel.text():
            self.show_estimate("")

    def _step_clicked(self) -> None:
        self.stepButton.setEnabled(False)  # until the trainer says Paused again: one click, one step
        self.stepRequested.emit()

    def show_lr_override(self, lr: float | None) -> None:
        """Say whether the run follows its schedule or a fixed η set here."""
        self.lrLabel.setText("following the schedule" if lr is None else f"fixed at {sci(lr)} (set here)")

    def show_next_lr(self, lr: float) -> None:
        """No run trains: the η the next run starts at (the settings'), shown in the disabled field."""
        self.lrSpin.setValue(lr)

    def start_live_lr(self, lr: float) -> None:
        """A run started at η = ``lr``, following its schedule."""
        self.lrSpin.setValue(lr)
        self.show_lr_override(None)

    def wait_for_trainer(self) -> None:
        """Pause (or Resume) was asked: no second click until the trainer says it paused (or resumed)."""
        self.pauseButton.setEnabled(False)

    def allow_train(self, allowed: bool, text: str, tip: str) -> None:
        """Whether Train can start a run now; what it says, and why not as its tooltip."""
        self.trainButton.setEnabled(allowed)
        self.trainButton.setText(text)
        self.trainButton.setToolTip(tip)

    def show_status(self, text: str) -> None:
        """The line under the buttons: what the run shown is doing or did."""
        self.statusLabel.setText(text)

    def show_complete(self) -> None:
        """The run finished: a full progress bar that says so, its last step and loss (no throughput, no ETA)."""
        self.flush_progress()
        step, total, text = self._shown_progress
        self.show_progress(step, total, text=" · ".join(t for t in (text, "finished") if t))
        self.progressBar.setValue(1000)

    def show_ended(self, label: str | None) -> None:
        """The run's worker has ended: the progress bar says how (``label``), or keeps its last text (None)."""
        self.flush_progress()
        if label is not None:
            self.progressBar.setFormat(label.replace("%", "%%"))

    def clear_run(self, label: str | None = None) -> None:
        """No run shown: no samples, no diagnostics; the progress bar empty, saying ``label`` if given."""
        self.samplesView.clear()
        if label is not None:
            self.progressBar.setValue(0)
            self.progressBar.setFormat(label.replace("%", "%%"))

    def _build_status(self) -> QLabel:
        self.statusLabel = QLabel("", objectName="statusLabel")
        self.statusLabel.setWordWrap(True)
        self.statusLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return self.statusLabel

    def _build_error(self) -> QLabel:
        self.errorLabel = QLabel("", objectName="errorLabel")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.setStyleSheet("color: #b00020; font-weight: bold;")
        self.errorLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.errorLabel.hide()
        return self.errorLabel

    def _build_panes(self) -> QSplitter:
        """The plots above, the samples and the runs side by side below."""
        self.lossPlot = self.plots.lossPlot
        self.samplesView = QPlainTextEdit(objectName="samplesView")
        self.samplesView.setReadOnly(True)
        self.samplesView.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.samplesView.setMaximumBlockCount(5000)
        self.samplesView.setMinimumWidth(self.sample_width(self.SAMPLE_COLUMNS))
        self.diagnosticsView = QListWidget(objectName="diagnosticsView")
        self.diagnosticsView.setWordWrap(True)
        self.diagnosticsView.setToolTip(
            "Is this normal? Warnings (⚠): a non-finite or spiking loss, overfitting, a plateau at the corpus's "
            "unigram entropy, a head stuck on one position. Notes (ℹ): clipping on almost every step, heads "
            "that attend uniformly. With no warning, a line (✓) says what was checked (core/diagnostics.py).")
        samples_box = QTabWidget(objectName="samplesTabs")
        samples_box.addTab(self.samplesView, "Samples at each evaluation")
        samples_box.addTab(self.diagnosticsView, "Diagnostics")
        self.samplesTabs = samples_box
        runs_box = QGroupBox("Runs")
        QVBoxLayout(runs_box).addWidget(self.runs)

        bottom = QSplitter(Qt.Orientation.Horizontal, objectName="samplesRunsSplitter")
        bottom.addWidget(samples_box)
        bottom.addWidget(runs_box)
        bottom.setStretchFactor(0, 1)  # the samples take the width: a line of code (the runs' names elide)
        bottom.setStretchFactor(1, 0)
        bottom.setChildrenCollapsible(False)
        split = QSplitter(Qt.Orientation.Vertical, objectName="trainSplitter")
        split.addWidget(self.plots)
        split.addWidget(bottom)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setChildrenCollapsible(False)
        return split

    def sample_width(self, columns: int) -> int:
        """The width the samples pane needs to show ``columns`` characters a line without wrapping."""
        view = self.samplesView
        text = view.fontMetrics().horizontalAdvance("m" * columns)
        margins = view.contentsMargins()
        chrome = (2 * int(view.document().documentMargin()) + margins.left() + margins.right()
                  + view.verticalScrollBar().sizeHint().width())
        return text + chrome + 2

    def set_state(self, state: str) -> None:
        """idle | starting | running | paused | stopping."""
        active = state != "idle"
        self.pauseButton.setEnabled(state in ("running", "paused"))
        self.pauseButton.setText("Resume" if state == "paused" else "Pause")
        self.stepButton.setEnabled(state == "paused")
        self.stopButton.setEnabled(state in ("starting", "running", "paused"))
        live = state in ("running", "paused")
        for w in (self.lrSpin, self.lrApplyButton, self.lrScheduleButton):
            w.setEnabled(live)
        if state == "idle":
            self.lrLabel.setText("")
        self.snapshotButton.setEnabled(state == "running")  # the trainer copies weights between steps
        if active:
            self.trainButton.setEnabled(False)

    PROGRESS_INTERVAL_S = 0.5

    def show_progress(self, step: int, total: int, tokens_per_s: float | None = None, eta_s: float | None = None,
                      text: str | None = None, throttle: bool = False) -> None:
        """Step, throughput and ETA on the progress bar. ``throttle``: at most every PROGRESS_INTERVAL_S (a
        QProgressBar repaints synchronously on every change), the latest values shown when the time comes."""
        if throttle:
            self._pending_progress = (step, total, tokens_per_s, eta_s, text)
            wait = self._last_progress + self.PROGRESS_INTERVAL_S - time.perf_counter()
            if wait > 0:
                if not self._progress_timer.isActive():
                    self._progress_timer.start(int(1000 * wait) + 1)
                return
        self._progress_timer.stop()
        self._pending_progress = None
        self._last_progress = time.perf_counter()
        self._shown_progress = (step, total, text)
        self.progressBar.setValue(int(1000 * step / total) if total else 0)
        parts = [f"step {step:,} / {total:,}"]
        if tokens_per_s:
            parts.append(f"{human_count(tokens_per_s)} tokens/s")
        if eta_s is not None:
            parts.append(f"ETA {human_duration(eta_s)}")
        if text:
            parts.append(text)
        self.progressBar.setFormat(" · ".join(parts).replace("%", "%%"))

    def flush_progress(self) -> None:
        if self._pending_progress is not None:
            self.show_progress(*self._pending_progress)

    def show_preparing(self, message: str, fraction: float) -> None:
        self._show_bar(fraction, f"preparing: {message}")

    def show_untrained(self, text: str) -> None:
        """A run whose weights were not trained here (an import): the bar says so, with no steps to count."""
        self._show_bar(0.0, text)

    def _show_bar(self, fraction: float, text: str) -> None:
        self._progress_timer.stop()
        self._pending_progress = None
        self.progressBar.setValue(int(1000 * max(0.0, min(1.0, fraction))))
        self.progressBar.setFormat(text.replace("%", "%%"))

    def add_sample(self, step: int, text: str) -> None:
        self._show_later(self._append_sample(step, text))

    def _append_sample(self, step: int, text: str) -> int:
        """Append a sample; return the number of its first block."""
        view = self.samplesView
        first = 0 if view.document().isEmpty() else view.blockCount()  # without copying out all the text
        view.appendPlainText(f"── step {step:,} ──\n{text}\n")
        return first

    def _show_later(self, first: int) -> None:
        # the newest sample from its first line (after the view has laid out the new text)
        QTimer.singleShot(0, self.samplesView, lambda: self._show_block(first))

    def _show_block(self, number: int) -> None:
        view = self.samplesView
        view.verticalScrollBar().setValue(view.verticalScrollBar().maximum())
        view.setTextCursor(QTextCursor(view.document().findBlockByNumber(number)))
        view.ensureCursorVisible()  # scrolling up to it puts it on the first line

    def set_samples(self, rows: list[dict]) -> None:
        self.samplesView.clear()
        first = None
        for r in rows:
            first = self._append_sample(int(r.get("step", 0)), str(r.get("text", "")))
        if first is not None:  # scroll once, to the newest
            self._show_later(first)

    def set_diagnostics(self, findings: list[tuple[str, bool]], summary: str = "") -> None:
        """One line per finding ("step N · advice", oldest first), each with whether it is a warning (⚠; else
        a note, ℹ), under ``summary`` (✓: what was checked, when no warning fired); the tab's title counts
        the warnings."""
        icons = {True: QStyle.StandardPixmap.SP_MessageBoxWarning, False: QStyle.StandardPixmap.SP_MessageBoxInformation,
                 None: QStyle.StandardPixmap.SP_DialogApplyButton}
        rows = ([(summary, None)] if summary else []) + [(line, bool(warning)) for line, warning in findings]
        view = self.diagnosticsView
        if [(view.item(i).text(), view.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(view.count())] != rows:
            view.clear()
            for text, warning in rows:
                item = QListWidgetItem(self.style().standardIcon(icons[warning]), text)
                item.setData(Qt.ItemDataRole.UserRole, warning)
                view.addItem(item)
        warnings = sum(bool(w) for _, w in findings)
        self.samplesTabs.setTabText(1, f"Diagnostics ({warnings})" if warnings else "Diagnostics")

    def show_error(self, message: str | None) -> None:
        self.errorLabel.setText(message or "")
        self.errorLabel.setVisible(bool(message))
