"""The Attention tab's token strips under the maps: the text (the keys) with the chosen query's attention row
laid over it as token backgrounds, and, where the queries are not the keys (cross-attention), the queries
above it. Click a token to choose another query. The text strip asks for the height of its text, two to four
lines (``heightWanted``): a generation of code is not squeezed to two lines by the maps and the lens. A line is
as high as the strip lays it out (`lines_height`), not as its font's metrics say: a glyph drawn from another
font (the ↵ of a newline, in a monospace font without it) makes its line taller."""
from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QEvent, Signal
from PySide6.QtWidgets import QLabel, QTextEdit, QVBoxLayout, QWidget

from ...core.inference.prompting import display_token
from .token_view import TokenView, weight_tint


def lines_height(view: QTextEdit, n: int) -> float:
    """The height of a text view's document that shows its first ``n`` lines as laid out (wrapped at the view's
    width), its margins included; lines it has not are as high as its last (or its font's line spacing)."""
    doc = view.document()
    margin = doc.documentMargin()
    doc.documentLayout()  # laid out, if it was not yet
    bottoms: list[float] = []  # each line's bottom, in the document
    block = doc.begin()
    while block.isValid() and len(bottoms) < n:
        layout = block.layout()
        top = layout.position().y()
        bottoms += [top + layout.lineAt(i).y() + layout.lineAt(i).height() for i in range(layout.lineCount())]
        block = block.next()
    if not bottoms:
        return n * view.fontMetrics().lineSpacing() + 2 * margin
    bottoms = bottoms[:n]
    last = bottoms[-1] - (bottoms[-2] if len(bottoms) > 1 else margin)
    return bottoms[-1] + (n - len(bottoms)) * last + margin


class QueryStrips(QWidget):
    """``attentionQueries`` (shown when the queries are not the keys) and ``attentionTokens`` (the keys).
    ``queryClicked(query)``: a query was clicked (a token of the text strip when the queries are the keys);
    ``heightWanted(px)``: the height that shows the text's lines, `TEXT_LINES` at least and at most."""

    queryClicked = Signal(int)
    heightWanted = Signal(int)
    TEXT_LINES = (2, 4)  # the text strip's lines shown without scrolling: its text's, within these

    def __init__(self, parent=None):
        super().__init__(parent)
        self.cross = False  # the queries are not the keys: a separate query strip is shown
        sl = QVBoxLayout(self)
        sl.setContentsMargins(0, 0, 0, 0)
        self.queryCaption = QLabel("queries (decoder): click one")
        self.queryStrip = TokenView()
        self.queryStrip.setObjectName("attentionQueries")
        self.stripCaption = QLabel()
        self.stripCaption.setWordWrap(True)
        self.tokenStrip = TokenView()
        self.tokenStrip.setObjectName("attentionTokens")
        self._bound_heights()
        sl.addWidget(self.queryCaption)
        sl.addWidget(self.queryStrip)
        sl.addWidget(self.stripCaption)
        sl.addWidget(self.tokenStrip)
        self.tokenStrip.tokenClicked.connect(self._on_strip_clicked)
        self.queryStrip.tokenClicked.connect(self.queryClicked)
        self.tokenStrip.document().documentLayout().documentSizeChanged.connect(self._ask_height)

    QUERY_LINES = (2, 3)  # the query strip's lines shown (cross-attention)
    MOST_LINES = 8  # the text strip's lines at most, when the user gives it more height

    def _bound_heights(self) -> None:
        """Each strip two lines high at least (scrolling: the maps keep the height), as its text lays them out."""
        for view, (least, most) in ((self.queryStrip, self.QUERY_LINES), (self.tokenStrip, (2, self.MOST_LINES))):
            frame = 2 * view.frameWidth()
            view.setMinimumHeight(int(lines_height(view, least)) + frame + 1)
            view.setMaximumHeight(int(lines_height(view, most)) + frame + 1)

    def _ask_height(self, *_args) -> None:
        """Ask for the height that shows the caption whole and the text's lines (within `TEXT_LINES`, as laid out
        at the strip's width), the query strip (cross-attention) at its least, where they have another."""
        view, caption = self.tokenStrip, self.stripCaption
        self._bound_heights()
        least, most = (lines_height(view, n) for n in self.TEXT_LINES)
        text = int(min(max(view.document().size().height(), least), most)) + 1 + 2 * view.frameWidth()
        parts = [caption.heightForWidth(caption.width()), text]
        if self.cross:
            parts += [self.queryCaption.sizeHint().height(), self.queryStrip.minimumHeight()]
        lay = self.layout()
        want = sum(parts) + (lay.spacing() if lay is not None else 0) * (len(parts) - 1)
        if self.isVisible() and want != self.height():
            self.heightWanted.emit(want)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._ask_height()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._ask_height()  # a text set while the tab was hidden

    def set_tokens(self, queries: list[str], keys: list[str], cross: bool) -> None:
        """The tokens of the kind shown (the same for all its layers and heads)."""
        self.cross = cross
        self.queryCaption.setVisible(cross)
        self.queryStrip.setVisible(cross)
        if cross:
            self.queryStrip.set_tokens(queries)
        self.tokenStrip.set_tokens(keys)

    def show_row(self, q: int, row: np.ndarray, queries: list[str], keys: list[str], over: str) -> None:
        """Token backgrounds of the text strip = query ``q``'s attention ``row`` over the keys; ``over``: what
        the keys are, in words ("source", "text")."""
        tips = [f"key {j + 1} <code>{html.escape(display_token(keys[j]))}</code>: weight {row[j]:.4f}"
                for j in range(len(keys))]
        # the fixed 0-1 scale of the heatmaps, through a square root so that weights of a few percent show
        self.tokenStrip.set_colors([weight_tint(np.sqrt(max(w, 0.0))) for w in row], tips)
        if self.cross:  # not isVisible(): that is False for all while the panel is hidden
            self.queryStrip.set_marked(q)
            self.tokenStrip.set_marked(None)
        else:
            self.tokenStrip.set_marked(q)
        self.stripCaption.setText(
            f"Attention of query {q + 1} “<b><code>{html.escape(display_token(queries[q]))}</code></b>” over the "
            f"{over}: the more orange, the larger (largest {row.max():.3f}). Click a token for another query.")
        self.stripCaption.setToolTip("The token backgrounds are the chosen query's attention row on the fixed 0-1 "
                                     "scale, through a square root so that weights of a few percent show; hover a "
                                     "token for its weight.")
        self._ask_height()  # the caption's lines

    def _on_strip_clicked(self, i: int) -> None:
        if not self.cross:
            self.queryClicked.emit(i)
