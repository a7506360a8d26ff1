"""Prompt panel: talk to a trained model (or a snapshot taken during training).

One panel, four modes: the core's `prompting.prompt_mode` chooses one from the model's architecture and the
run's task (the command line chooses the same way):

- ``generate`` (gpt, gopher; next_token): DInference (Algorithm 14) with ℓ_gen, τ (0 = greedy), top-k,
  top-p and a seed. Tokens stream into the output as they are sampled, each coloured by the model's
  probability of it; hovering a token shows the top alternatives and the top-k / top-p cut-offs.
- ``fill_mask`` (bert; masked_lm): a text with ``[MASK]`` (or ``<mask>``) markers; the top predictions at
  each mask.
- ``translate`` (edt; seq2seq): EDInference (Algorithm 15) from a source text until eos, streamed the same way.
- ``classify`` (bert with a class head; classification): P(c | x) as bars.

Beside the mode's button, ``scoreButton`` ("Score text") scores the user's own text (`core.inspect.scoring`): every token
coloured by the model's probability of it given its context, with its loss −ln p in nats and the most likely
tokens at its place on hover, a summary (mean loss per token, bits per character) and ``lossStrip``, a bar of
loss per position. gpt/gopher score each token given the tokens before it (Algorithm 13), bert each token as if
it were the masked one (Algorithm 12), an edt the target in ``targetEdit`` given the source in the prompt box
(Algorithm 11); a classifier has nothing to score (the button says why).

Sampling draws with a fresh random seed unless one is set; the result line names the seed a sample used, and
``reuseSeedButton`` puts it in the seed box to draw the same sample again.

The text is encoded once, in the GUI thread (`prompting.encode_prompt`: cheap, so bad input is reported at
once, in words), and that `EncodedPrompt` is what the inference call reads. All model work runs as the job
"prompt" (`core.app.jobs`); the GUI thread only appends what it yields (batched to at most ~30 updates a second).
Each run ends with the attention maps of its text, which the panel emits with ``attentionReady``: fill-mask
and classify return those of their own forward pass; generate and translate make one more pass over the text
they end with (`generation.Generation.attention`: prompt + output, or source and output).
"""
from __future__ import annotations

import html
import random
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ...core.app.jobs import Job, describe_error
from ...core.inference import generation, prompting, scoring
from ...core.inference.attention_maps import AttentionMaps
from ...core.inference.decode_step import compiling_enabled, decode_step_of
from ...core.inference.generation import MaskPrediction, TokenChoice
from ...core.inference.prompt_events import (
    Attention,
    AttentionFailed,
    ClassProbabilities,
    Finished,
    MaskPredictions,
    PromptEvent,
    Scored,
    Tokens,
    prompt_events,
    score_events,
)
from ...core.inference.prompting import EncodedPrompt, Mode, prompt_mode
from ...core.inference.scoring import TextScore
from ..widgets.focus_label import FocusLabel
from ..widgets.prediction_tables import ClassTable, MaskTable, ProbabilityLegend
from ..widgets.prompt_controls import PromptControls
from ..widgets.score_view import ScoreView
from ..widgets.token_tooltips import candidates_tooltip, character_note, choice_tooltip
from ..widgets.token_view import TokenView, probability_color

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ...core.app.workspace import Workspace
    from ...core.records import EndStatus
    from ...core.runs.folder import LoadedModel

PROMPT = "prompt"  # the prompt's job


class _Sampling(TypedDict):
    """How Generate and Translate draw tokens (the last run's, for the tooltips)."""

    temperature: float
    top_k: int
    top_p: float

mode_for = prompt_mode  # the mode of a LoadedModel (None: no model), decided in the core
BATCH_SECONDS = 0.03  # the worker hands tokens to the GUI at most this often (the first one at once)
N_ALTERNATIVES = 8

_BUTTON_TEXT = {"generate": "Generate", "fill_mask": "Predict masks", "translate": "Translate",
                "classify": "Classify", None: "Generate"}
_SCORE_TIP = {
    "generate": "Colour every token of your text by the model's probability of it given the tokens before it, with "
                "its loss −ln p in nats (Algorithm 13's loss). The second copy of a repeated random sequence "
                "turns blue once the model has an induction head. Ctrl+Shift+Enter.",
    "fill_mask": "Colour every token of your text by the model's probability of it with that token masked "
                 "(pseudo-log-likelihood, Algorithm 12's loss at every position). Ctrl+Shift+Enter.",
    "translate": "Colour every token of the target below by the model's probability of it given the source above "
                 "and the target before it (Algorithm 11's loss). Ctrl+Shift+Enter.",
}
_PLACEHOLDER = {
    "generate": "A prompt to continue (empty: start from bos). Ctrl+Enter generates; Score text (Ctrl+Shift+Enter) "
                "colours each token of it by the model's probability.",
    "fill_mask": f"A text with {prompting.MASK_MARKER} where a token should be predicted, "
                 f"e.g. 'the cat {prompting.MASK_MARKER} on the mat'. Ctrl+Enter predicts.",
    "translate": "A source text; the model writes its output until eos. Ctrl+Enter translates; Score text scores "
                 "the target below given this source.",
    "classify": "A text to classify. Ctrl+Enter classifies.",
    None: "Open a run, or take a snapshot while training, to prompt a model.",
}


def _unknown_note(words: list[str], what: str) -> list[str]:
    """The note on the words a word tokenizer does not know (none: no note)."""
    words = list(dict.fromkeys(words))
    if not words:
        return []
    shown = ", ".join(repr(w) for w in words[:5]) + (" …" if len(words) > 5 else "")
    return [f"Not in the vocabulary, {what}: {shown}."]


def _target_editor() -> tuple[QPlainTextEdit, QWidget]:
    """``targetEdit`` (an edt's target to score) and its box with its label."""
    edit = QPlainTextEdit()
    edit.setObjectName("targetEdit")
    edit.setMaximumHeight(56)
    edit.setTabChangesFocus(True)
    edit.setPlaceholderText("The target to score given the source above (Score text), e.g. its translation.")
    box = QWidget()
    tb = QHBoxLayout(box)
    tb.setContentsMargins(0, 0, 0, 0)
    target_label = QLabel("target")
    target_label.setBuddy(edit)
    tb.addWidget(target_label, 0, Qt.AlignmentFlag.AlignTop)
    tb.addWidget(edit, 1)
    return edit, box


def _model_label(loaded: LoadedModel | None) -> str:
    """The line saying what the model prompted is (its run and step are the focus label's): its architecture,
    task, ℓ_max and N_V."""
    if loaded is None:
        return "<i>No model to prompt.</i> Open a finished run, or take a snapshot while training, to prompt it here."
    cfg = loaded.model.config
    task = getattr(loaded.config.data, "task", "?")
    return f"{cfg.arch} · {task} · ℓ_max = {cfg.l_max} · N_V = {cfg.vocab_size}"


def _shortcuts(edits, run, score) -> None:
    """Ctrl+Enter runs, Ctrl+Shift+Enter scores, in each of ``edits``."""
    for seq, slot in (("Ctrl+Return", run), ("Ctrl+Enter", run), ("Ctrl+Shift+Return", score),
                      ("Ctrl+Shift+Enter", score)):
        for edit in edits:
            sc = QShortcut(QKeySequence(seq), edit)
            sc.setContext(Qt.ShortcutContext.WidgetShortcut)
            sc.activated.connect(slot)


def _prompt_notes(tokenizer, prompt: EncodedPrompt) -> list[str]:
    """The notes on a prompt as the model reads it: unknown words, a prompt longer than ℓ_max."""
    notes = _unknown_note(prompting.unknown_words(tokenizer, prompt), "read as <unk>")
    if prompt.cropped:
        notes.append(f"The prompt is {len(prompt.ids)} tokens long and ℓ_max = {prompt.l_max}: the model sees "
                     f"only its last {prompt.l_max} tokens.")
    return notes


# ------------------------------------------------------------------------------------------------ panel
class PromptPanel(QWidget):
    """Prompt a LoadedModel. Given a ``workspace`` (`core.app.workspace.Workspace`), it prompts the workspace's
    model, writes its text there and gives it the attention of its last forward pass (`Workspace.show_text_maps`);
    ``attentionReady`` says the maps are there."""

    attentionReady = Signal(object)  # an generation.AttentionMaps of the last forward pass
    openOfferedRun = Signal()  # the user takes the run `offer_run` offered
    runStarted = Signal()
    runFinished = Signal(str)  # "finished" | "stopped" | "failed"

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.loaded: LoadedModel | None = None
        self.mode: Mode | None = None
        self.generated: list[TokenChoice] = []
        self.predictions: list[MaskPrediction] = []  # of the last fill-mask
        self.class_probabilities: list[tuple[str, float]] = []
        self.last_prompt: EncodedPrompt | None = None  # the text of the last run, as the model read it
        self.last_maps: AttentionMaps | None = None
        self.last_status: EndStatus | None = None
        self.last_score: TextScore | None = None  # of the last Score text
        self.last_seed: int | None = None  # the seed the last sampled generation used (None: greedy or none yet)
        self._scoring = False  # whether the last run scored (else it ran the mode's call)
        self._job: Job | None = None  # the prompt's job ("prompt") while it runs
        self._stop = threading.Event()
        self._sampling = _Sampling(temperature=1.0, top_k=0, top_p=1.0)
        self._build()
        self.set_model(None)
        self.promptEdit.textChanged.connect(lambda: workspace.set_prompt_text(self.promptEdit.toPlainText()))
        workspace.set_prompt_text(self.promptEdit.toPlainText())
        workspace.focus.changed.connect(self._focus_changed)
        if workspace.loaded is not None:
            self.set_model(workspace.loaded)

    # ---- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        self.focusLabel = FocusLabel(self.workspace.focus, "promptFocusLabel")
        outer.addWidget(self.focusLabel)
        self.modelLabel = QLabel()
        self.modelLabel.setObjectName("promptModelLabel")
        self.modelLabel.setWordWrap(True)
        outer.addWidget(self.modelLabel)
        self.openRunButton = QPushButton(objectName="openLatestRunButton")
        self.openRunButton.clicked.connect(self.openOfferedRun)
        self.openRunButton.hide()
        outer.addWidget(self.openRunButton, 0, Qt.AlignmentFlag.AlignLeft)

        self.promptEdit = QPlainTextEdit()
        self.promptEdit.setObjectName("promptEdit")
        self.promptEdit.setMaximumHeight(110)
        self.promptEdit.setTabChangesFocus(True)

        controls = self.controls = PromptControls()
        c = controls  # the panel's names for the controls, which tests and the window use
        self.tokensSpin, self.temperatureSpin, self.topKSpin = c.tokensSpin, c.temperatureSpin, c.topKSpin
        self.topPSpin, self.seedSpin, self.topSpin = c.topPSpin, c.seedSpin, c.topSpin
        self.generateButton, self.scoreButton, self.stopButton = c.generateButton, c.scoreButton, c.stopButton

        self.targetEdit, self._target_box = _target_editor()

        self.messageLabel = QLabel()
        self.messageLabel.setObjectName("promptMessage")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.messageLabel.setVisible(False)

        self.outputView = TokenView()
        self.outputView.setObjectName("outputView")
        self.outputView.setMinimumHeight(80)

        legend = QHBoxLayout()
        self._legend = ProbabilityLegend()
        self.legendLabel, self.statusLabel = self._legend.legendLabel, self._legend.statusLabel
        self.reuseSeedButton = self._legend.reuseSeedButton
        legend.addWidget(self._legend)

        self.maskTable = MaskTable()
        self.classTable = ClassTable()

        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.promptEdit)
        tl.addWidget(self._target_box)
        tl.addWidget(controls)
        tl.addWidget(self.messageLabel)
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addLayout(legend)
        self.resultStack = QStackedWidget(objectName="promptResults")  # the mode's output | the score
        out_page = QWidget()
        ol = QVBoxLayout(out_page)
        ol.setContentsMargins(0, 0, 0, 0)
        ol.addWidget(self.outputView, 3)
        ol.addWidget(self.maskTable, 2)
        ol.addWidget(self.classTable, 2)
        self.resultStack.addWidget(out_page)
        score_page = self.scoreResult = ScoreView()
        self.scoreSummary, self.scoreView, self.lossStrip = score_page.scoreSummary, score_page.scoreView, score_page.lossStrip
        self.resultStack.addWidget(score_page)
        bl.addWidget(self.resultStack, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        outer.addWidget(split, 1)
        top.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

        self.generateButton.clicked.connect(self.run)
        self.scoreButton.clicked.connect(self.score)
        self.stopButton.clicked.connect(self.stop)
        self.reuseSeedButton.clicked.connect(self.reuse_seed)
        _shortcuts((self.promptEdit, self.targetEdit), self.run, self.score)

    # ---- model -------------------------------------------------------------------------------------------
    def offer_run(self, name: str | None) -> None:
        """While there is no model, offer to open the run ``name`` (None: offer nothing)."""
        self.openRunButton.setText(f"Open {name}" if name else "")
        self.openRunButton.setToolTip("The latest finished run: load its model here to prompt it." if name else "")
        self.openRunButton.setVisible(bool(name) and self.loaded is None)

    def _focus_changed(self, focus) -> None:
        if focus.loaded is not self.loaded:
            self.set_model(focus.loaded)

    def set_model(self, loaded) -> None:
        """Prompt ``loaded`` (a runs.LoadedModel: CPU, eval mode) from now on; None: nothing to prompt.

        A generation still running on the previous model is asked to stop; its output is discarded."""
        if self.is_running():
            self.workspace.jobs.cancel(PROMPT)  # it stops after its token; nothing more of it arrives
            self._job = None
        old_mode, old_loaded, self.loaded, self.mode = self.mode, self.loaded, loaded, prompt_mode(loaded)
        m = self.mode
        decoderish = m in ("generate", "translate")
        c = self.controls
        for box in (c.tokens_box, c.temp_box, c.topk_box, c.topp_box, c.seed_box):
            box.setVisible(decoderish)
        c.top_box.setVisible(m == "fill_mask")
        self.stopButton.setVisible(decoderish)
        self._target_box.setVisible(m == "translate")
        self.scoreButton.setToolTip(scoring.unscorable_reason(m) or (_SCORE_TIP[m] if m is not None else ""))
        self.maskTable.setVisible(m == "fill_mask")
        self.classTable.setVisible(m == "classify")
        self._legend.setVisible(m is not None)
        self.generateButton.setText(_BUTTON_TEXT[m])
        self.promptEdit.setPlaceholderText(_PLACEHOLDER[m])
        tokens_label = c.tokens_box.findChild(QLabel, "tokensSpinLabel")
        tokens_label.setText("max length" if m == "translate" else "ℓ_gen")
        if m != old_mode:
            if m == "translate":
                self.temperatureSpin.setValue(0.0)  # EDInference is greedy by default
            elif m == "generate":
                self.temperatureSpin.setValue(1.0)
        if m != old_mode or loaded is not old_loaded:  # another model's output would sit under this one's name
            self.generated, self.predictions, self.class_probabilities = [], [], []
            self.outputView.clear_tokens()
            self.maskTable.setRowCount(0)
            self.classTable.setRowCount(0)
            self._clear_score()
            self.resultStack.setCurrentIndex(0)
            self.reuseSeedButton.hide()
            self.statusLabel.clear()
        self.openRunButton.setVisible(loaded is None and bool(self.openRunButton.text()))
        self.modelLabel.setText(_model_label(loaded))
        if loaded is not None:
            l_max = loaded.model.config.l_max
            if m == "translate":
                self.tokensSpin.setMaximum(l_max)
                self.tokensSpin.setValue(min(self.tokensSpin.value(), l_max - 1) or l_max - 1)
            else:
                self.tokensSpin.setMaximum(100000)
        self._show_message("")
        self._update_buttons()

    # ---- state -------------------------------------------------------------------------------------------
    def is_running(self) -> bool:
        """Whether a run for the current model is still going."""
        return self._job is not None

    def output_text(self) -> str:
        """The text shown in the output (generated text without the prompt for generate/translate)."""
        if self.mode in ("generate", "translate"):
            return "".join(ch.text for ch in self.generated)
        return self.outputView.text()

    def _update_buttons(self) -> None:
        running = self.is_running()
        self.generateButton.setEnabled(self.loaded is not None and not running)
        self.scoreButton.setEnabled(self.loaded is not None and not running
                                    and scoring.unscorable_reason(self.mode) is None)
        self.stopButton.setEnabled(running and not self._stop.is_set())

    def show_note(self, text: str) -> None:
        """A note under the prompt (e.g. why the model went)."""
        self._show_message(text, "info")

    def _show_message(self, text: str, kind: str = "error") -> None:
        if not text:
            self.messageLabel.clear()
            self.messageLabel.setVisible(False)
            return
        text = text[:1].upper() + text[1:]
        color = {"error": "#c0392b", "info": "#7a5d00"}.get(kind, "#555")
        self.messageLabel.setStyleSheet(f"color: {color};")
        self.messageLabel.setText(text)
        self.messageLabel.setVisible(True)

    # ---- running ------------------------------------------------------------------------------------------
    def run(self) -> bool:
        """Generate / predict / translate / classify the text in promptEdit, in a worker thread.

        Returns False (with the reason shown in words under the prompt) when nothing was started."""
        return self._launch(self._make_job)

    def score(self) -> bool:
        """Score the text in promptEdit (an edt: the target in targetEdit, given promptEdit as its source), in a
        worker thread (`core.inspect.scoring`). Returns False (the reason shown in words) when nothing was started."""
        reason = scoring.unscorable_reason(self.mode)
        if self.loaded is not None and reason is not None:
            self._show_message(reason)
            return False
        return self._launch(self._make_score_job)

    def reuse_seed(self) -> None:
        """Put the seed of the last sample in the seed box, so that Generate draws it again."""
        self.seedSpin.setValue(self.last_seed if self.last_seed is not None else self.seedSpin.value())

    def _launch(self, make_job) -> bool:
        if self.is_running():
            return False
        if self.loaded is None:
            self._show_message("There is no model to prompt yet: open a run, or take a snapshot while training.")
            return False
        text = self.promptEdit.toPlainText()
        self._stop = threading.Event()  # the new job watches this one
        try:
            job, notes = make_job(self.loaded, text)
        except Exception as e:
            self._show_message(describe_error(e))
            return False
        self._show_message(" ".join(notes), "info")
        self._start(job)
        return True

    def _make_score_job(self, loaded: LoadedModel, text: str):
        """Encode the text to score (bad input raises here, in words) and return (the worker's job, notes)."""
        m = self.mode
        source = None
        if m == "translate":
            source, text = text, self.targetEdit.toPlainText()
        inp = scoring.prepare(loaded.tokenizer, text, m, l_max=loaded.model.config.l_max, source=source)
        unknown = [w for t in (source or "", text) for w in prompting.unknown_words(loaded.tokenizer, t)]
        notes = _unknown_note(unknown, "read (and scored) as <unk>")
        self._scoring = True
        self._clear_score()
        self.resultStack.setCurrentIndex(1)
        return score_events(loaded, inp, alternatives=N_ALTERNATIVES), notes

    def _clear_score(self) -> None:
        self.last_score = None
        self.scoreResult.clear()

    def _make_job(self, loaded: LoadedModel, text: str):
        """Encode the text once, in the GUI thread (cheap; bad input raises here, in words), and return (the
        worker's job, notes for the user)."""
        m = self.mode
        model, tok = loaded.model, loaded.tokenizer
        prompt = prompting.encode_prompt(tok, text, m, l_max=model.config.l_max)
        notes = _prompt_notes(tok, prompt)
        self.last_prompt = prompt
        self.generated, self.predictions, self.class_probabilities = [], [], []
        self._scoring = False
        self.resultStack.setCurrentIndex(0)
        seed = None
        if m in ("generate", "translate"):
            seed = self.seedSpin.value()
            seed = random.randrange(2 ** 31) if seed < 0 else seed
            self._sampling = _Sampling(temperature=float(self.temperatureSpin.value()),
                                       top_k=int(self.topKSpin.value()), top_p=float(self.topPSpin.value()))
            self.last_seed = seed if self._sampling["temperature"] > 0 else None  # greedy draws nothing
        compiled = m == "generate" and compiling_enabled()  # compiles in the background; eager until then
        if compiled and (note := decode_step_of(loaded).take_note()):
            notes.append(note)
        job = prompt_events(loaded, prompt, tokens=int(self.tokensSpin.value()), top=int(self.topSpin.value()),
                            seed=seed, alternatives=N_ALTERNATIVES, stop=self._stop, batch_s=BATCH_SECONDS,
                            compiled=compiled, **self._sampling)
        if m in ("generate", "translate"):
            self.outputView.clear_tokens()
        if m == "generate":
            self.outputView.append_text(text, QColor(110, 110, 110))
        return job, notes

    def _start(self, events: Iterator[PromptEvent]) -> None:
        """Run the prompt's events as the job "prompt" (its iterator is advanced in the job's thread)."""
        self.last_status = None
        self.statusLabel.setText("running…")
        self.reuseSeedButton.hide()
        stop = self._stop
        self._job = self.workspace.jobs.submit(PROMPT, lambda: events, on_item=self._show_event,
                                               on_error=self._on_failed, on_end=self._on_end, stop=stop.set)
        self._update_buttons()
        self.runStarted.emit()

    def stop(self) -> None:
        """Ask the running generation to stop after the current token (the attention of what was generated
        so far is still computed and emitted)."""
        if self.is_running():
            self._stop.set()
            self._update_buttons()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop and wait (up to ``timeout_s``, processing events) until this panel's job has ended, e.g. before
        the window closes. Returns whether it did."""
        self.stop()
        deadline = time.monotonic() + timeout_s
        while self._job is not None and time.monotonic() < deadline:
            QCoreApplication.processEvents()
            time.sleep(0.005)
        return self._job is None

    # ---- the job's events (GUI thread) ---------------------------------------------------------------------
    def _on_failed(self, message: str) -> None:
        self._show_message(message)
        self.last_status = "failed"

    def _on_end(self, _status) -> None:
        self._job = None
        decoder = self.loaded.decoder if self.loaded is not None else None
        if decoder is not None and decoder.wanted:  # it ran eagerly for want of the compiled step: compile it now
            self.workspace.jobs.submit("compile", decoder.compile, stop=decoder.cancel)  # closing need not wait
        self._finish()

    def _show_event(self, event: PromptEvent) -> None:
        if isinstance(event, Tokens):
            self._append_choices(list(event.choices))
        elif isinstance(event, MaskPredictions):
            self._show_masks(list(event.predictions))
        elif isinstance(event, ClassProbabilities):
            self._show_classes(list(event.probabilities))
        elif isinstance(event, Scored):
            self.last_score = event.score
            self.scoreResult.show_score(event.score, None if self.loaded is None else self.loaded.model.config.vocab_size)
        elif isinstance(event, Attention):
            self.last_maps = event.maps
            self.workspace.show_text_maps(event.maps)  # the attention of the text in focus, for the Attention tab
            self.attentionReady.emit(event.maps)
        elif isinstance(event, AttentionFailed):
            self._show_message(f"No attention maps: {describe_error(event.error)}", "info")
        elif isinstance(event, Finished):
            self.last_status = event.status

    def _finish(self) -> None:
        self._update_buttons()
        status = self.last_status or "finished"
        n = len(self.generated)
        if self._scoring:
            k = len(self.last_score.scored) if self.last_score is not None else 0
            self.statusLabel.setText(f"{status}: {k} token{'s' if k != 1 else ''} scored")
        elif self.mode in ("generate", "translate"):
            seed = "τ = 0: greedy" if self.last_seed is None else f"seed {self.last_seed}"
            self.statusLabel.setText(f"{status}: {n} token{'s' if n != 1 else ''} · {seed}")
            if self.last_seed is not None:
                self.reuseSeedButton.setText(f"Use seed {self.last_seed}")
                self.reuseSeedButton.show()
        else:
            self.statusLabel.setText(status)
        self.runFinished.emit(status)

    def _append_choices(self, choices: list[TokenChoice]) -> None:
        s = self._sampling
        first = len(self.generated)
        self.generated.extend(choices)
        # neighbouring tokens alternate between two shades of their colour, so boundaries stay visible
        colors = [probability_color(c.prob).darker(112 if (first + i) % 2 else 100) for i, c in enumerate(choices)]
        tips = [self._pieces_note(first + i) + choice_tooltip(c, s["temperature"], s["top_k"], s["top_p"])
                for i, c in enumerate(choices)]
        # a token that is only part of a character shows nothing: the token that completes it shows the character
        shown = ["" if self._part_of_character(c) else c.text or "∅" for c in choices]
        self.outputView.append_tokens([c.text for c in choices], colors, tips, shown=shown)
        self.statusLabel.setText(f"running… {len(self.generated)} tokens")

    def _part_of_character(self, choice: TokenChoice) -> bool:
        """Whether a generated token added no text because it is a byte of a character that a later token
        completes (a byte-level piece; a special such as eos adds none either)."""
        tok = self.loaded.tokenizer if self.loaded is not None else None
        return not choice.text and tok is not None and choice.id not in (tok.pad_id, tok.mask_id, tok.bos_id, tok.eos_id)

    def _pieces_note(self, k: int) -> str:
        """Where the ``k``-th generated token completes a character that tokens before it began (`_part_of_character`),
        a tooltip line that names them all; else ""."""
        j = k
        while j > 0 and self._part_of_character(self.generated[j - 1]):
            j -= 1
        group = self.generated[j:k + 1]
        if len(group) < 2 or not group[-1].text or self.loaded is None:
            return ""
        return character_note(group[-1].text, prompting.token_labels(self.loaded.tokenizer, [c.id for c in group]),
                              [c.prob for c in group]) + "<br>"

    def _show_masks(self, preds: list[MaskPrediction]) -> None:
        """The text with each marker replaced by its best candidate (hover for the others), and the table."""
        self.predictions = list(preds)
        view = self.outputView
        view.clear_tokens()
        for piece in generation.fill_in(self.last_prompt.text if self.last_prompt is not None else "", self.predictions):
            if isinstance(piece, str):
                view.append_text(piece)
            else:
                best, prob = piece.candidates[0] if piece.candidates else ("?", 0.0)
                view.append_tokens([best], [probability_color(prob)], [candidates_tooltip(piece.candidates)])
        self.maskTable.show_predictions(self.predictions)

    def _show_classes(self, probs) -> None:
        self.class_probabilities = list(probs)
        self.classTable.show_probabilities(probs)
        self.outputView.clear_tokens()
        if self.last_prompt is not None:
            self.outputView.append_text(self.last_prompt.text + "  →  ")
        if probs:
            name, p = probs[0]
            self.outputView.append_tokens([str(name)], [probability_color(p)], [f"P({html.escape(str(name))} | x) = {p:.4f}"])
