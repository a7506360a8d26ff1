"""The Prompt panel's page for a scored text (Score text): a summary, every token coloured by the model's
probability of it (``scoreView``) and the loss per position (``lossStrip``); a click on a token in either marks
it in both."""
from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from ...core.inference import scoring
from ...core.inference.prompting import display_token
from ...core.inference.scoring import TextScore
from .token_tooltips import score_tooltip
from .token_view import LossStrip, TokenView, probability_color


class ScoreView(QWidget):
    """``scoreSummary`` over ``scoreView`` over ``lossStrip``; `show_score` fills them, `clear` empties them."""

    def __init__(self, parent=None):
        super().__init__(parent)
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
        sl = QVBoxLayout(self)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(self.scoreSummary)
        sl.addWidget(self.scoreView, 1)
        sl.addWidget(self.lossStrip)
        self.lossStrip.positionClicked.connect(self.mark_token)
        self.scoreView.tokenClicked.connect(self.mark_token)

    def clear(self) -> None:
        self.scoreView.clear_tokens()
        self.scoreSummary.clear()
        self.lossStrip.set_losses([], [], 1.0)

    def show_score(self, score: TextScore, vocab_size: int | None) -> None:
        """Every token coloured by p (neighbours in two shades, an unscored one plain), its tooltip; with the
        model's ``vocab_size`` (None: the model has gone) the summary and the loss strip."""
        toks = score.tokens
        colors = [None if t.prob is None else probability_color(t.prob).darker(112 if i % 2 else 100)
                  for i, t in enumerate(toks)]
        self.scoreView.set_tokens([t.text for t in toks], colors, [score_tooltip(t, score.task) for t in toks])
        if vocab_size is None:
            return
        self.lossStrip.set_losses([t.loss for t in toks], [display_token(t.text, 20) for t in toks],
                                  top=math.log(vocab_size), top_label="uniform", mean=score.mean_loss)
        self.scoreSummary.setText(score_summary(score, vocab_size))

    def mark_token(self, index: int) -> None:
        """Mark one scored token in the text and in the strip (a click on either)."""
        self.scoreView.set_marked(index)
        self.lossStrip.set_marked(index)


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
