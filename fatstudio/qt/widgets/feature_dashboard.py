"""One feature's dashboard (`dashboard.Dashboard`): a title (its number, counted from 1, how often and how strongly
it is active), its top-activating validation contexts — each on a line, the activating token bold and underlined,
every token tinted by the feature's activation on it — a histogram of its nonzero activations, the tokens it
promotes and suppresses through the unembedding, and its activation on the Prompt text as tinted tokens
(`show_text`). It shows the data it is given; it loads nothing and starts no work."""
from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QTextCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from ...core.inspect.features.dashboard import Dashboard, LogitEffects, TextActivations
from .token_view import TokenView, weight_tint

_TINT = np.array([255, 140, 0], np.float64)  # `weight_tint`'s orange, blended onto white for the contexts' HTML
_VISIBLE = {"\n": "↵", "\t": "⇥", "\r": "␍"}  # a context is one line: its line breaks show as marks


def tint_css(share: float) -> str:
    """The background of a token whose activation is ``share`` of the largest: white at 0, orange at 1."""
    a = min(max(float(share), 0.0), 1.0) * 0.85
    r, g, b = (255 + (_TINT - 255) * a).round().astype(int)
    return f"#{r:02x}{g:02x}{b:02x}"


def shown_token(token: str) -> str:
    """A token as a context shows it: line breaks and tabs as visible marks (a context is one line), ∅ if empty."""
    return "".join(_VISIBLE.get(c, c) for c in token) or "∅"


def context_html(tokens: Sequence[str], acts: Sequence[float], marked: int, scale: float, pad: int = 0) -> str:
    """One context as HTML: ``pad`` spaces (to line the marked tokens of several contexts up), then each token
    on the tint of its activation / ``scale``, token ``marked`` bold and underlined (a space in it as ␣)."""
    out = ["&nbsp;" * pad]
    for i, (t, a) in enumerate(zip(tokens, acts)):
        text = shown_token(t)
        if i == marked:  # a marked space shows as ␣, so that the mark has something to underline
            text = f"<b><u>{html.escape(text.replace(' ', '␣'))}</u></b>"
        else:
            text = html.escape(text).replace(" ", "&nbsp;")
        share = a / scale if scale > 0 else 0.0
        out.append(f'<span style="background-color:{tint_css(share)}" title="activation {a:.3g}">{text}</span>')
    return "".join(out)


class FeatureDashboard(QWidget):
    """See the module: `show_dashboard` a feature's `Dashboard`, `show_text` its activations on a text, `clear`."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("featureDashboard")
        self.dashboard: Dashboard | None = None
        self.title = QLabel("Choose a feature.", objectName="featureTitle")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.contexts = QTextBrowser(objectName="featureContexts")
        font = QFont("monospace")
        font.setStyleHint(QFont.StyleHint.TypeWriter)
        self.contexts.setFont(font)
        self.contexts.setLineWrapMode(QTextBrowser.LineWrapMode.NoWrap)
        self.contexts.setToolTip("The validation contexts it is most active on, strongest first: the activation, "
                                 "then the tokens the model read up to the marked one (from its window's start) "
                                 "and a few after it; each token tinted by the feature's activation on it.")

        self.histogram = pg.PlotWidget(background="w")
        self.histogram.setObjectName("featureHistogram")
        item = self.histogram.getPlotItem()
        item.setLabel("bottom", "activation when active")
        item.setLabel("left", "tokens")
        item.setMouseEnabled(False, False)
        item.hideButtons()
        for side in ("left", "bottom"):
            item.getAxis(side).setTextPen("#333")
            item.getAxis(side).enableAutoSIPrefix(False)
        self.histogram.setMinimumHeight(self.fontMetrics().height() * 8)
        self.bars: pg.BarGraphItem | None = None

        self.promoted = self._token_table("featurePromoted", "promotes")
        self.suppressed = self._token_table("featureSuppressed", "suppresses")
        self.logitNote = QLabel("", objectName="featureLogitNote")
        self.logitNote.setWordWrap(True)
        self.logitNote.setStyleSheet("color: #555;")

        self.promptLabel = QLabel("On the Prompt text:", objectName="featurePromptLabel")
        self.promptTokens = TokenView()
        self.promptTokens.setObjectName("featurePromptTokens")
        self.promptTokens.setMaximumHeight(self.fontMetrics().height() * 5)

        tables = QHBoxLayout()
        tables.setContentsMargins(0, 0, 0, 0)
        tables.addWidget(self.promoted)
        tables.addWidget(self.suppressed)
        em = self.fontMetrics().horizontalAdvance("m")
        self.histogram.setMinimumWidth(16 * em)  # its axis and title readable
        self.contexts.setMinimumWidth(16 * em)
        column = QWidget()
        right = QVBoxLayout(column)
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(self.histogram, 1)
        right.addLayout(tables, 1)
        right.addWidget(self.logitNote)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.contexts)
        split.addWidget(column)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([48 * em, 32 * em])  # the contexts the wider
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.title)
        lay.addWidget(split, 1)
        lay.addWidget(self.promptLabel)
        lay.addWidget(self.promptTokens)

    @staticmethod
    def _token_table(name: str, heading: str) -> QTableWidget:
        t = QTableWidget(0, 2, objectName=name)
        t.setHorizontalHeaderLabels([heading, "logit"])
        t.horizontalHeaderItem(1).setToolTip("The change of the token's logit per unit of the feature's activation "
                                             "(its direct effect through the unembedding).")
        t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        t.verticalHeader().setVisible(False)
        t.verticalHeader().setDefaultSectionSize(t.fontMetrics().height() + 4)
        t.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        t.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        fm = t.fontMetrics()  # the heading and a logit, with the cells' padding and the scroll bar
        t.setMinimumWidth(fm.horizontalAdvance(f"{heading} +0.000") + 4 * fm.horizontalAdvance("m"))
        return t

    # ---- content -------------------------------------------------------------------------------------------
    def clear(self, message: str = "Choose a feature.") -> None:
        self.dashboard = None
        self.title.setText(html.escape(message))
        self.contexts.clear()
        self._show_histogram(None)
        self._show_effects(LogitEffects([], [], ""))
        self.promptTokens.clear_tokens()

    def show_dashboard(self, d: Dashboard) -> None:
        """Show feature ``d.stats.index``'s dashboard (numbered from 1)."""
        self.dashboard = d
        s = d.stats
        if s.frequency:
            what = (f"active on {s.frequency:.2%} of the validation tokens, mean activation {s.mean_act:.3g} "
                    f"when active · top tokens <code>{html.escape(s.label)}</code>")
        else:
            what = "never active on the validation split (a dead feature)"
        self.title.setText(f"<b>Feature {s.index + 1}</b> · {what}")
        scale = max((c.activation for c in d.contexts), default=0.0)
        left = [sum(len(shown_token(t)) for t in c.tokens[:c.marked]) for c in d.contexts]  # the marked tokens
        rows = [f'<tr><td align="right" style="color:#555">{c.activation:.3g}&nbsp;</td>'  # in one column
                f"<td>{context_html(c.tokens, c.acts, c.marked, scale, max(left) - n)}</td></tr>"
                for c, n in zip(d.contexts, left)]
        self.contexts.setHtml(f"<table cellspacing='0' cellpadding='1'>{''.join(rows)}</table>" if rows else
                              "<p style='color:#555'>No validation token activates this feature.</p>")
        self.show_marked()
        self._show_histogram(d)
        self._show_effects(d.effects)

    def show_marked(self) -> None:
        """Scroll the contexts sideways so that the column of marked tokens is in view, two thirds across (the
        tokens read before it matter more than those after)."""
        doc = self.contexts.document()
        cursor = QTextCursor(doc)
        for pos in range(1, doc.characterCount()):
            cursor.setPosition(pos)
            if cursor.charFormat().fontUnderline():  # the first marked token's first character
                bar = self.contexts.horizontalScrollBar()
                x = self.contexts.cursorRect(cursor).left() + bar.value()
                bar.setValue(max(0, x - self.contexts.viewport().width() * 2 // 3))
                return

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.show_marked()

    def _show_histogram(self, d: Dashboard | None) -> None:
        if self.bars is not None:
            self.histogram.removeItem(self.bars)
            self.bars = None
        item = self.histogram.getPlotItem()
        if d is None:
            item.setTitle("")
            return
        h = d.histogram
        edges, counts = np.asarray(h.edges), np.asarray(h.counts, np.float64)
        item.setTitle(f"{sum(h.counts):,} tokens active · {h.inactive:,} inactive", size="9pt",
                      color="#333")
        width = float(edges[1] - edges[0]) if len(edges) > 1 and edges[1] > edges[0] else 1.0
        self.bars = pg.BarGraphItem(x=(edges[:-1] + edges[1:]) / 2, height=counts, width=width * 0.9,
                                    brush=pg.mkBrush(255, 140, 0, 200), pen=pg.mkPen(None))
        self.histogram.addItem(self.bars)
        item.autoRange()

    def histogram_counts(self) -> list[int]:
        """The bar heights drawn (empty when none)."""
        return [int(h) for h in self.bars.opts["height"]] if self.bars is not None else []

    def _show_effects(self, e: LogitEffects) -> None:
        for table, rows, color in ((self.promoted, e.promoted, QColor(33, 102, 172)),
                                   (self.suppressed, e.suppressed, QColor(178, 24, 43))):
            table.setRowCount(len(rows))
            for r, (token, value) in enumerate(rows):
                table.setItem(r, 0, QTableWidgetItem(token))
                v = QTableWidgetItem(f"{value:+.3f}")
                v.setForeground(color)
                v.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                table.setItem(r, 1, v)
        self.logitNote.setText(e.note)

    def show_text(self, text: TextActivations | None) -> None:
        """The shown feature's activation on each token of ``text`` (`text_activations`; None: nothing), tinted
        against the largest of its top contexts' (or the text's own largest)."""
        self.promptTokens.clear_tokens()
        if text is None or self.dashboard is None:
            return
        acts = text.of(self.dashboard.stats.index)
        scale = max([c.activation for c in self.dashboard.contexts] + acts + [0.0])
        colors = [weight_tint(a / scale) if a > 0 and scale > 0 else None for a in acts]
        self.promptTokens.set_tokens(text.tokens, colors, [f"activation {a:.3g}" for a in acts])
