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
once, in words), and that `EncodedPrompt` is what the inference call reads. All model work runs in a superqt
worker thread; the GUI thread only appends what the worker yields (batched to at most ~30 updates a second).
Each run ends with the attention maps of its text, which the panel emits with ``attentionReady``: fill-mask
and classify return those of their own forward pass; generate and translate make one more pass over the text
they end with (`inference.Generation.attention`: prompt + output, or source and output).
"""
from __future__ import annotations

import html
import math
import random
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from PySide6.QtCore import QCoreApplication, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from superqt.utils import GeneratorWorker

from ...core.inspect import inference, prompting, scoring
from ...core.inspect.attention_maps import AttentionMaps
from ...core.inspect.inference import Generation, MaskPrediction, TokenChoice
from ...core.inspect.prompting import EncodedPrompt, display_token, prompt_mode
from ...core.inspect.scoring import ScoredToken, ScoreInput, TextScore
from ..widgets.token_view import LossStrip, TokenView, probability_color, probability_gradient_css
from ..workers import describe_error, start_now

if TYPE_CHECKING:
    from ...core.runs.folder import LoadedModel


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


# ------------------------------------------------------------------------------------ the worker's jobs
# Each job is a generator run in a worker thread. It yields (kind, value) events: ("tokens", [TokenChoice]),
# ("masks", [MaskPrediction]), ("classes", [(name, p)]), ("score", TextScore), ("attention", AttentionMaps), ("note", str),
# ("error", str), ("status", "finished" | "stopped" | "failed"). It catches every exception itself, so the
# user always gets words, never a traceback.

def _stream_job(generation: Generation, stop: threading.Event):
    buf: list[TokenChoice] = []
    last = -math.inf
    status = "finished"
    try:
        for ch in generation:
            buf.append(ch)
            now = time.perf_counter()
            if now - last >= BATCH_SECONDS:
                yield ("tokens", buf)
                buf, last = [], now
            if stop.is_set():
                status = "stopped"
                break
    except Exception as e:
        if buf:
            yield ("tokens", buf)
        yield ("error", describe_error(e))
        yield ("status", "failed")
        return
    finally:
        generation.close()
    if buf:
        yield ("tokens", buf)
    event: tuple[str, object]
    try:
        event = ("attention", generation.attention())
    except Exception as e:
        event = ("note", f"No attention maps: {describe_error(e)}")
    yield event
    yield ("status", status)


def _fill_mask_job(loaded, prompt: EncodedPrompt, top: int):
    try:
        preds, maps = inference.fill_mask(loaded.model, loaded.tokenizer, prompt, top=top, return_attention=True)
    except Exception as e:
        yield ("error", describe_error(e))
        yield ("status", "failed")
        return
    yield ("masks", preds)
    yield ("attention", maps)
    yield ("status", "finished")


def _classify_job(loaded, prompt: EncodedPrompt):
    try:
        probs, maps = inference.classify(loaded.model, loaded.tokenizer, prompt, loaded.class_names or None,
                                         return_attention=True)
    except Exception as e:
        yield ("error", describe_error(e))
        yield ("status", "failed")
        return
    yield ("classes", probs)
    yield ("attention", maps)
    yield ("status", "finished")


def _score_job(loaded, inp: ScoreInput):
    try:
        result = scoring.score(loaded.model, loaded.tokenizer, inp, alternatives=N_ALTERNATIVES)
    except Exception as e:
        yield ("error", describe_error(e))
        yield ("status", "failed")
        return
    yield ("score", result)
    event: tuple[str, object]
    try:
        maps = inference.attention_maps_for_ids(loaded.model, loaded.tokenizer,
                                                *inp.attention_input(loaded.tokenizer.bos_id))
        event = ("attention", inference.TextAttention(maps.tokens, maps.context_tokens, maps.maps,
                                                      inp.attention_caption()))
    except Exception as e:
        event = ("note", f"No attention maps: {describe_error(e)}")
    yield event
    yield ("status", "finished")


def _guarded(job, run_id: int):
    """Tag ``job``'s events with ``run_id``, turn any escaped exception into words, and end with "done"."""
    try:
        for kind, value in job:
            yield (run_id, kind, value)
    except Exception as e:
        yield (run_id, "error", describe_error(e))
        yield (run_id, "status", "failed")
    yield (run_id, "done", None)


# ---------------------------------------------------------------------------------------------- tooltips
def _token_lines(text: str, prob: float, alternatives, heading: str, cut=lambda p: False) -> list[str]:
    """A token's tooltip head: the token and its p, then the top alternatives (the token itself marked ◀, those
    ``cut`` greyed)."""
    def row(tok: str, p: float, chosen: bool) -> str:
        is_cut = cut(p)
        style = ' style="color:#888"' if is_cut and not chosen else ""
        mark = " ◀" if chosen else (" (cut)" if is_cut else "")
        return (f"<tr{style}><td><code>{html.escape(display_token(tok, 20))}</code></td>"
                f"<td align='right'>&nbsp;{p:.3f}</td><td>{mark}</td></tr>")

    chosen_text = display_token(text if text else "", 20)
    lines = [f"<b><code>{html.escape(chosen_text)}</code></b> &nbsp; p = {prob:.4f}"]
    rows = []
    seen_chosen = False
    for tok, p in alternatives:
        is_chosen = not seen_chosen and abs(p - prob) < 1e-12 and display_token(tok, 20) == chosen_text
        seen_chosen |= is_chosen
        rows.append(row(tok, p, is_chosen))
    if rows:
        lines.append(f"{heading}<table>" + "".join(rows) + "</table>")
    return lines


def choice_tooltip(ch: TokenChoice, temperature: float, top_k: int, top_p: float) -> str:
    """Rich-text tooltip of a sampled token: its probability, the top alternatives, the cut-offs."""
    lines = _token_lines(ch.text, ch.prob, ch.alternatives, "Top alternatives (model p at τ = 1):",
                         lambda p: ((ch.top_k_cutoff is not None and p < ch.top_k_cutoff)
                                    or (ch.top_p_cutoff is not None and p < ch.top_p_cutoff)))
    if temperature == 0:
        lines.append("τ = 0: greedy, the most likely token is taken.")
    else:
        lines.append(f"τ = {temperature:g}: drawn from p<sup>1/τ</sup>.")
    if ch.top_k_cutoff is not None:
        lines.append(f"top-k = {top_k}: tokens with p &lt; {ch.top_k_cutoff:.4f} were cut.")
    if ch.top_p_cutoff is not None:
        lines.append(f"top-p = {top_p:g}: the nucleus kept tokens with p ≥ {ch.top_p_cutoff:.4f}.")
    return "<br>".join(lines)


_GIVEN = {  # what a scored token was predicted from, by task; {c} token{s}: how many tokens the model read
    "next_token": "given the {c} token{s} before it",
    "masked_lm": "with it masked, reading the other {c} token{s}",
    "seq2seq": "given the source and the {c} target token{s} before it",
}


def score_tooltip(tok: ScoredToken, task: str) -> str:
    """Rich-text tooltip of a scored token: p, its loss, what it was predicted from and the most likely tokens
    at its place (the layout of `choice_tooltip`)."""
    if tok.loss is None:
        return (f"<b><code>{html.escape(display_token(tok.text, 20))}</code></b>: not scored. It has no prefix: "
                "next-token training reads windows of the corpus without bos, so no token predicts a text's first.")
    lines = _token_lines(tok.text, tok.prob or 0.0, tok.alternatives, "Most likely here:")
    c = tok.context - (task == "seq2seq")
    given = _GIVEN[task].format(c=c, s="" if c == 1 else "s")
    lines.insert(1, f"loss −ln p = {tok.loss:.3f} nats ({tok.loss / math.log(2):.2f} bits), {given}")
    return "<br>".join(lines)


def score_summary(score: TextScore, vocab_size: int) -> str:
    """The summary line of a score: mean loss, bits per character, what was scored from what, and the windows."""
    n = len(score.scored)
    bpc = f" · {score.bits_per_char:.3f} bits/char" if score.bits_per_char is not None else ""
    head = (f"<b>mean loss {score.mean_loss:.3f} nats/token</b>{bpc} · {n} token{'s' if n != 1 else ''} scored · "
            f"a uniform guess: ln N_V = {math.log(vocab_size):.2f}")
    alg = f"Algorithm {score.algorithm}"
    if score.task == "next_token":
        how = (f"Each token given the tokens before it ({alg}'s loss); the first token has no prefix and is not "
               "scored.")
        if score.windowed:
            how += (f" The text is {len(score.tokens)} tokens, longer than ℓ_max + 1 = {score.l_max + 1}: scored in "
                    f"{score.windows} windows of {score.l_max} tokens, so that after the first window every token is "
                    f"predicted from at least {scoring.context_kept(score.l_max)} tokens before it.")
    elif score.task == "masked_lm":
        how = (f"Each token predicted as if it were the masked one, reading all the others (the pseudo-log-likelihood:"
               f" {alg}'s loss at every position, {n} forward passes).")
    else:
        how = (f"Each target token given the source and the target before it, and last the end of the target (eos), "
               f"as {alg}'s loss counts them.")
    return f"{head}<br>{how}"


def _candidates_tooltip(cands: list[tuple[str, float]]) -> str:
    rows = "".join(f"<tr><td><code>{html.escape(display_token(t, 20))}</code></td>"
                   f"<td align='right'>&nbsp;{p:.3f}</td></tr>" for t, p in cands)
    return f"Top predictions at this mask:<table>{rows}</table>"


def _unknown_note(words: list[str], what: str) -> list[str]:
    """The note on the words a word tokenizer does not know (none: no note)."""
    words = list(dict.fromkeys(words))
    if not words:
        return []
    shown = ", ".join(repr(w) for w in words[:5]) + (" …" if len(words) > 5 else "")
    return [f"Not in the vocabulary, {what}: {shown}."]


# ------------------------------------------------------------------------------------------------ panel
class PromptPanel(QWidget):
    """Prompt a LoadedModel. Given a ``workspace`` (`core.workspace.Workspace`), it prompts the workspace's
    model and writes its text there; the main window connects `attentionReady`."""

    attentionReady = Signal(object)  # an inference.AttentionMaps of the last forward pass
    openOfferedRun = Signal()  # the user takes the run `offer_run` offered
    runStarted = Signal()
    runFinished = Signal(str)  # "finished" | "stopped" | "failed"

    def __init__(self, parent=None, workspace=None):
        super().__init__(parent)
        self.loaded: LoadedModel | None = None
        self.mode: str | None = None
        self.generated: list[TokenChoice] = []
        self.predictions: list[MaskPrediction] = []  # of the last fill-mask
        self.class_probabilities: list[tuple[str, float]] = []
        self.last_prompt: EncodedPrompt | None = None  # the text of the last run, as the model read it
        self.last_maps: AttentionMaps | None = None
        self.last_status: str | None = None
        self.last_score: TextScore | None = None  # of the last Score text
        self.last_seed: int | None = None  # the seed the last sampled generation used (None: greedy or none yet)
        self._scoring = False  # whether the last run scored (else it ran the mode's call)
        self._worker: GeneratorWorker | None = None
        self._active: set[int] = set()  # runs whose worker has not yet said "done"
        self._stop = threading.Event()
        self._run_id = 0
        self._sampling = _Sampling(temperature=1.0, top_k=0, top_p=1.0)
        self._build()
        self.set_model(None)
        if workspace is not None:
            self.promptEdit.textChanged.connect(lambda: workspace.set_prompt_text(self.promptEdit.toPlainText()))
            workspace.set_prompt_text(self.promptEdit.toPlainText())
            workspace.model_changed.connect(self.set_model)
            if workspace.loaded is not None:
                self.set_model(workspace.loaded)

    # ---- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
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

        controls = QHBoxLayout()

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
        self._tokens_box = spin("tokensSpin", "ℓ_gen", "ℓ_gen: how many tokens to sample (Algorithm 14 "
                                "repeats its step ℓ_gen times). For a seq2seq model: the most output tokens "
                                "before eos.", self.tokensSpin)
        self.temperatureSpin = QDoubleSpinBox()
        self.temperatureSpin.setRange(0.0, 10.0)
        self.temperatureSpin.setSingleStep(0.1)
        self.temperatureSpin.setDecimals(2)
        self.temperatureSpin.setValue(1.0)
        self._temp_box = spin("temperatureSpin", "τ", "Temperature τ: the next token is drawn ∝ p^(1/τ). τ = 0 is "
                              "greedy (always the most likely token), τ = 1 the model's own distribution, a large "
                              "τ nearly uniform.", self.temperatureSpin)
        self.topKSpin = QSpinBox()
        self.topKSpin.setRange(0, 1000000)
        self.topKSpin.setSpecialValueText("off")
        self._topk_box = spin("topKSpin", "top-k", "Keep only the k most likely tokens before drawing (off = all).",
                              self.topKSpin)
        self.topPSpin = QDoubleSpinBox()
        self.topPSpin.setRange(0.01, 1.0)
        self.topPSpin.setSingleStep(0.05)
        self.topPSpin.setDecimals(2)
        self.topPSpin.setValue(1.0)
        self._topp_box = spin("topPSpin", "top-p", "Nucleus sampling: keep the smallest set of most likely tokens "
                              "whose probability reaches p (1 = off).", self.topPSpin)
        self.seedSpin = QSpinBox()
        self.seedSpin.setRange(-1, 2 ** 31 - 1)
        self.seedSpin.setSpecialValueText("random")
        self.seedSpin.setValue(-1)
        self._seed_box = spin("seedSpin", "seed", "Seed of the random draws: the same seed, settings and model give "
                              "the same text. 'random' (the default) draws a fresh seed each time; the result line "
                              "names the seed a sample used.", self.seedSpin)
        self.topSpin = QSpinBox()
        self.topSpin.setRange(1, 50)
        self.topSpin.setValue(5)
        self._top_box = spin("topPredictionsSpin", "predictions per mask",
                             "How many of the most likely tokens to list at each mask.", self.topSpin)
        self._top_box.setVisible(False)  # a fill-mask model's (set_model); hidden, it widens nothing
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

        self.targetEdit = QPlainTextEdit()
        self.targetEdit.setObjectName("targetEdit")
        self.targetEdit.setMaximumHeight(56)
        self.targetEdit.setTabChangesFocus(True)
        self.targetEdit.setPlaceholderText("The target to score given the source above (Score text), e.g. its "
                                           "translation.")
        self._target_box = QWidget()
        tb = QHBoxLayout(self._target_box)
        tb.setContentsMargins(0, 0, 0, 0)
        target_label = QLabel("target")
        target_label.setBuddy(self.targetEdit)
        tb.addWidget(target_label, 0, Qt.AlignmentFlag.AlignTop)
        tb.addWidget(self.targetEdit, 1)

        self.messageLabel = QLabel()
        self.messageLabel.setObjectName("promptMessage")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.messageLabel.setVisible(False)

        self.outputView = TokenView()
        self.outputView.setObjectName("outputView")
        self.outputView.setMinimumHeight(80)

        legend = QHBoxLayout()
        self.legendLabel = QLabel("token probability p:")
        bar = QLabel()
        bar.setFixedSize(140, 12)
        bar.setStyleSheet(f"background: {probability_gradient_css()}; border: 1px solid #999;")
        bar.setToolTip("Each output token's background shows the model's probability of it (τ = 1): "
                       "orange = unlikely, yellow = 0.5, blue = likely. Hover a token for the alternatives.")
        self._legend = QWidget()
        ll = QHBoxLayout(self._legend)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.legendLabel)
        ll.addWidget(QLabel("0"))
        ll.addWidget(bar)
        ll.addWidget(QLabel("1"))
        ll.addStretch(1)
        self.statusLabel = QLabel()
        self.statusLabel.setObjectName("promptStatus")
        self.statusLabel.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ll.addWidget(self.statusLabel)
        self.reuseSeedButton = QPushButton(objectName="reuseSeedButton")
        self.reuseSeedButton.setToolTip("Put this seed in the seed box: Generate then draws the same sample again "
                                        "(with the same prompt, settings and model). Set the box back to "
                                        "'random' for fresh samples.")
        self.reuseSeedButton.hide()
        ll.addWidget(self.reuseSeedButton)
        legend.addWidget(self._legend)

        self.maskTable = QTableWidget(0, 0)
        self.maskTable.setObjectName("maskTable")
        self.maskTable.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.maskTable.verticalHeader().setVisible(False)

        self.classTable = QTableWidget(0, 3)
        self.classTable.setObjectName("classTable")
        self.classTable.setHorizontalHeaderLabels(["class", "P(c | x)", ""])
        self.classTable.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.classTable.verticalHeader().setVisible(False)
        self.classTable.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)

        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.promptEdit)
        tl.addWidget(self._target_box)
        tl.addLayout(controls)
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
        self.scoreSummary = QLabel(objectName="scoreSummary")
        self.scoreSummary.setWordWrap(True)
        self.scoreSummary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.scoreView = TokenView()
        self.scoreView.setObjectName("scoreView")
        self.scoreView.setMinimumHeight(60)
        font = self.scoreView.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)  # the text is the point here: large enough to read each token
        self.scoreView.setFont(font)
        self.lossStrip = LossStrip()
        self.lossStrip.setObjectName("lossStrip")
        self.lossStrip.setToolTip("Each token's loss −ln p in nats, one bar per position (dashed: the mean; dotted: "
                                  "ln N_V, the loss of a uniform guess). Hover a bar for its token; click it to mark "
                                  "the token in the text.")
        score_page = QWidget()
        sl = QVBoxLayout(score_page)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(self.scoreSummary)
        sl.addWidget(self.scoreView, 1)
        sl.addWidget(self.lossStrip)
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
        self.lossStrip.positionClicked.connect(self._mark_scored_token)
        self.scoreView.tokenClicked.connect(self._mark_scored_token)
        for seq, slot in (("Ctrl+Return", self.run), ("Ctrl+Enter", self.run), ("Ctrl+Shift+Return", self.score),
                          ("Ctrl+Shift+Enter", self.score)):
            for edit in (self.promptEdit, self.targetEdit):
                sc = QShortcut(QKeySequence(seq), edit)
                sc.setContext(Qt.ShortcutContext.WidgetShortcut)
                sc.activated.connect(slot)

    # ---- model -------------------------------------------------------------------------------------------
    def offer_run(self, name: str | None) -> None:
        """While there is no model, offer to open the run ``name`` (None: offer nothing)."""
        self.openRunButton.setText(f"Open {name}" if name else "")
        self.openRunButton.setToolTip("The latest finished run: load its model here to prompt it." if name else "")
        self.openRunButton.setVisible(bool(name) and self.loaded is None)

    def set_model(self, loaded) -> None:
        """Prompt ``loaded`` (a runs.LoadedModel: CPU, eval mode) from now on; None: nothing to prompt.

        A generation still running on the previous model is asked to stop; its output is discarded."""
        if self.is_running():
            self._stop.set()
            self._run_id += 1  # what the old run still yields is ignored
        old_mode = self.mode
        self.loaded = loaded
        self.mode = prompt_mode(loaded)
        m = self.mode
        decoderish = m in ("generate", "translate")
        for box in (self._tokens_box, self._temp_box, self._topk_box, self._topp_box, self._seed_box):
            box.setVisible(decoderish)
        self._top_box.setVisible(m == "fill_mask")
        self.stopButton.setVisible(decoderish)
        self._target_box.setVisible(m == "translate")
        self.scoreButton.setToolTip(scoring.unscorable_reason(m) or (_SCORE_TIP[m] if m is not None else ""))
        self.maskTable.setVisible(m == "fill_mask")
        self.classTable.setVisible(m == "classify")
        self._legend.setVisible(m is not None)
        self.generateButton.setText(_BUTTON_TEXT[m])
        self.promptEdit.setPlaceholderText(_PLACEHOLDER[m])
        tokens_label = self._tokens_box.findChild(QLabel, "tokensSpinLabel")
        tokens_label.setText("max length" if m == "translate" else "ℓ_gen")
        if m != old_mode:
            if m == "translate":
                self.temperatureSpin.setValue(0.0)  # EDInference is greedy by default
            elif m == "generate":
                self.temperatureSpin.setValue(1.0)
            self.outputView.clear_tokens()
            self.maskTable.setRowCount(0)
            self.classTable.setRowCount(0)
            self._clear_score()
            self.resultStack.setCurrentIndex(0)
            self.reuseSeedButton.hide()
            self.statusLabel.clear()
        self.openRunButton.setVisible(loaded is None and bool(self.openRunButton.text()))
        if loaded is None:
            self.modelLabel.setText("<i>No model.</i> Open a finished run, or take a snapshot while training, "
                                    "to prompt it here.")
        else:
            cfg = loaded.model.config
            name = html.escape(loaded.label or "model")
            task = getattr(loaded.config.data, "task", "?")
            step = f" · step {loaded.step}" if loaded.step and f"step {loaded.step}" not in (loaded.label or "") else ""
            self.modelLabel.setText(f"<b>{name}</b> · {cfg.arch} · {task}{step} · ℓ_max = {cfg.l_max} · "
                                    f"N_V = {cfg.vocab_size}")
            if m == "translate":
                self.tokensSpin.setMaximum(cfg.l_max)
                self.tokensSpin.setValue(min(self.tokensSpin.value(), cfg.l_max - 1) or cfg.l_max - 1)
            else:
                self.tokensSpin.setMaximum(100000)
        self._show_message("")
        self._update_buttons()

    # ---- state -------------------------------------------------------------------------------------------
    def is_running(self) -> bool:
        """Whether a run for the current model is still going."""
        return self._run_id in self._active

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
        if self.last_seed is not None:
            self.seedSpin.setValue(self.last_seed)

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
        return _score_job(loaded, inp), notes

    def _clear_score(self) -> None:
        self.last_score = None
        self.scoreView.clear_tokens()
        self.scoreSummary.clear()
        self.lossStrip.set_losses([], [], 1.0)

    def _make_job(self, loaded: LoadedModel, text: str):
        """Encode the text once, in the GUI thread (cheap; bad input raises here, in words), and return (the
        worker's job, notes for the user)."""
        m = self.mode
        model, tok = loaded.model, loaded.tokenizer
        prompt = prompting.encode_prompt(tok, text, m, l_max=model.config.l_max)
        notes = _unknown_note(prompting.unknown_words(tok, prompt), "read as <unk>")
        if prompt.cropped:
            notes.append(f"The prompt is {len(prompt.ids)} tokens long and ℓ_max = {prompt.l_max}: the model sees "
                         f"only its last {prompt.l_max} tokens.")
        self.last_prompt = prompt
        self.generated, self.predictions, self.class_probabilities = [], [], []
        self._scoring = False
        self.resultStack.setCurrentIndex(0)
        if m == "fill_mask":
            return _fill_mask_job(loaded, prompt, int(self.topSpin.value())), notes
        if m == "classify":
            return _classify_job(loaded, prompt), notes
        seed = self.seedSpin.value()
        seed = random.randrange(2 ** 31) if seed < 0 else seed
        self._sampling = _Sampling(temperature=float(self.temperatureSpin.value()), top_k=int(self.topKSpin.value()),
                              top_p=float(self.topPSpin.value()))
        self.last_seed = seed if self._sampling["temperature"] > 0 else None  # greedy draws nothing
        if m == "generate":
            generation = inference.generate(model, tok, prompt, tokens=int(self.tokensSpin.value()), seed=seed,
                                            alternatives=N_ALTERNATIVES, **self._sampling)
        else:
            generation = inference.translate(model, tok, prompt, max_tokens=int(self.tokensSpin.value()), seed=seed,
                                             alternatives=N_ALTERNATIVES, **self._sampling)
        self.outputView.clear_tokens()
        if m == "generate":
            self.outputView.append_text(text, QColor(110, 110, 110))
        return _stream_job(generation, self._stop), notes

    def _start(self, job) -> None:
        self._run_id += 1
        run_id = self._run_id
        self._active.add(run_id)
        worker = GeneratorWorker(_guarded, job, run_id)
        worker.yielded.connect(self._on_event)  # a bound method: disconnected if the panel is deleted
        self._worker = worker
        self.last_status = None
        self.statusLabel.setText("running…")
        self.reuseSeedButton.hide()
        self._update_buttons()
        self.runStarted.emit()
        start_now(worker)

    def stop(self) -> None:
        """Ask the running generation to stop after the current token (the attention of what was generated
        so far is still computed and emitted)."""
        if self.is_running():
            self._stop.set()
            self._update_buttons()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop and wait (up to ``timeout_s``, processing events) until no worker of this panel runs, e.g.
        before the window closes. Returns whether they all ended."""
        self.stop()
        deadline = time.monotonic() + timeout_s
        while self._active and time.monotonic() < deadline:
            QCoreApplication.processEvents()
            time.sleep(0.005)
        return not self._active

    # ---- events from the worker (GUI thread) ---------------------------------------------------------------
    def _on_event(self, event) -> None:
        run_id, kind, value = event
        if kind == "done":
            self._active.discard(run_id)
            if run_id == self._run_id:
                self._worker = None
                self._finish()
            return
        if run_id != self._run_id:
            return  # a run on a model that has since been replaced
        if kind == "tokens":
            self._append_choices(value)
        elif kind == "masks":
            self._show_masks(value)
        elif kind == "classes":
            self._show_classes(value)
        elif kind == "score":
            self._show_score(value)
        elif kind == "attention":
            self.last_maps = value
            self.attentionReady.emit(value)
        elif kind == "note":
            self._show_message(value, "info")
        elif kind == "error":
            self._show_message(value)
        elif kind == "status":
            self.last_status = value

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
        self.outputView.append_tokens([c.text for c in choices], colors,
                                      [choice_tooltip(c, s["temperature"], s["top_k"], s["top_p"]) for c in choices])
        self.statusLabel.setText(f"running… {len(self.generated)} tokens")

    def _show_score(self, score: TextScore) -> None:
        """Every token coloured by p (neighbours in two shades, an unscored one plain), its tooltip, the
        summary and the loss strip."""
        self.last_score = score
        toks = score.tokens
        colors = [None if t.prob is None else probability_color(t.prob).darker(112 if i % 2 else 100)
                  for i, t in enumerate(toks)]
        self.scoreView.set_tokens([t.text for t in toks], colors, [score_tooltip(t, score.task) for t in toks])
        if self.loaded is None:  # the model was closed while it scored
            return
        n_v = self.loaded.model.config.vocab_size
        self.lossStrip.set_losses([t.loss for t in toks], [display_token(t.text, 20) for t in toks],
                                  top=math.log(n_v), top_label="uniform", mean=score.mean_loss)
        self.scoreSummary.setText(score_summary(score, n_v))

    def _mark_scored_token(self, index: int) -> None:
        """Mark one scored token in the text and in the strip (a click on either)."""
        self.scoreView.set_marked(index)
        self.lossStrip.set_marked(index)

    def _show_masks(self, preds: list[MaskPrediction]) -> None:
        """The text with each marker replaced by its best candidate (hover for the others), and the table."""
        self.predictions = list(preds)
        view = self.outputView
        view.clear_tokens()
        for piece in inference.fill_in(self.last_prompt.text if self.last_prompt is not None else "", self.predictions):
            if isinstance(piece, str):
                view.append_text(piece)
            else:
                best, prob = piece.candidates[0] if piece.candidates else ("?", 0.0)
                view.append_tokens([best], [probability_color(prob)], [_candidates_tooltip(piece.candidates)])
        n = max((len(p.candidates) for p in self.predictions), default=0)
        t = self.maskTable
        t.clear()
        t.setColumnCount(1 + n)
        t.setHorizontalHeaderLabels(["mask (position)"] + [f"#{i + 1}" for i in range(n)])
        t.setRowCount(len(self.predictions))
        for r, p in enumerate(self.predictions):
            t.setItem(r, 0, QTableWidgetItem(f"{r + 1} (t = {p.position})"))
            for c, (tk, prob) in enumerate(p.candidates):
                item = QTableWidgetItem(f"{display_token(tk)}   {prob:.3f}")
                item.setBackground(probability_color(prob))
                item.setForeground(QColor(0, 0, 0))
                item.setToolTip(f"{tk!r}: p = {prob:.6f}")
                t.setItem(r, 1 + c, item)
        t.resizeColumnsToContents()

    def _show_classes(self, probs) -> None:
        self.class_probabilities = list(probs)
        t = self.classTable
        t.setRowCount(len(probs))
        for r, (name, p) in enumerate(probs):
            t.setItem(r, 0, QTableWidgetItem(str(name)))
            item = QTableWidgetItem(f"{p:.4f}")
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            t.setItem(r, 1, item)
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setValue(round(p * 1000))
            bar.setTextVisible(False)
            bar.setToolTip(f"P({name} | x) = {p:.6f}")
            t.setCellWidget(r, 2, bar)
        t.resizeColumnToContents(0)
        self.outputView.clear_tokens()
        if self.last_prompt is not None:
            self.outputView.append_text(self.last_prompt.text + "  →  ")
        if probs:
            name, p = probs[0]
            self.outputView.append_tokens([str(name)], [probability_color(p)], [f"P({html.escape(str(name))} | x) = {p:.4f}"])
