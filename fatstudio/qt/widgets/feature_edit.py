"""The result of a feature edit (`core.inspect.features.interventions.FeatureIntervention`), shown as the head
ablation shows its: a line saying what was edited, the most likely tokens after the prompt with their
probability before and after (``featureEditNextTable``), and the prompt's own tokens coloured by Δp with their
table (`token_changes.TokenChangeView`: ``featureEditText``, ``featureEditTable``)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from ...core.inference.prompting import display_token
from .token_changes import TokenChangeView, p_text
from .token_view import signed_tint

if TYPE_CHECKING:
    from ...core.inspect.features.interventions import FeatureIntervention

NEXT_COLUMNS = ("next token", "p before", "p after", "Δp")


class FeatureEditView(QWidget):
    """``summary``, ``nextTable`` and ``changes``; `show_result`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("featureEditView")
        self.result: FeatureIntervention | None = None
        self.summary = QLabel(objectName="featureEditSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.nextTable = QTableWidget(0, len(NEXT_COLUMNS), objectName="featureEditNextTable")
        self.nextTable.setHorizontalHeaderLabels(list(NEXT_COLUMNS))
        self.nextTable.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.nextTable.verticalHeader().setVisible(False)
        self.nextTable.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.nextTable.horizontalHeader().setStretchLastSection(True)
        self.changes = TokenChangeView("featureEdit")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.summary)
        lay.addWidget(self.nextTable, 1)
        lay.addWidget(self.changes, 2)
        self.show_result(None)

    def show_result(self, result: FeatureIntervention | None,
                    empty: str = "Click a feature in the graph or the dashboard to zero or clamp it.") -> None:
        """Show ``result``, or ``empty`` and nothing else for None."""
        self.result = result
        if result is None:
            self.summary.setText(html.escape(empty))
            self.nextTable.setRowCount(0)
            self.changes.clear()
            return
        self.changes.show_change(result)
        deltas = [a - b for b, a in zip(result.next_before, result.next_after)]
        scale = max((abs(d) for d in deltas), default=0.0)
        t = self.nextTable
        t.setRowCount(len(deltas))
        for i, (tok, b, a, d) in enumerate(zip(result.next_tokens, result.next_before, result.next_after, deltas)):
            for c, text in enumerate((display_token(tok), p_text(b), p_text(a), f"{d:+.4f}")):
                item = QTableWidgetItem(text)
                if c == 3:
                    item.setBackground(signed_tint(d, scale))
                t.setItem(i, c, item)
        top = result.next_tokens[0]
        self.summary.setText(f"<b>{html.escape(result.describe())}</b>: the most likely next token before, "
                             f"<code>{html.escape(display_token(top))}</code>, goes from "
                             f"{p_text(result.next_before[0])} to {p_text(result.next_after[0])}. "
                             f"Red: p rose, blue: p fell.{logit_line(result)}")


def logit_line(result: FeatureIntervention) -> str:
    """The target token's logit before and after the edit (live), and the graph's direct effect of the edited
    node beside it when the edit came from a graph ("" for a result without a target token)."""
    if not result.target:
        return ""
    tok = html.escape(display_token(result.target))
    line = (f"<br>Logit of <code>{tok}</code>: {result.logit_before:.3f} → {result.logit_after:.3f} "
            f"(Δ {result.logit_after - result.logit_before:+.3f}, live).")
    if result.direct_effect is not None:
        line += (f" The graph's direct effect of this feature on it: {result.direct_effect:+.3f}, so zeroing it "
                 f"moves the logit by {-result.direct_effect:+.3f} in the graph's frozen model; live, attention, "
                 "norms and later layers respond too, and p depends on every logit.")
    return line


__all__ = ["FeatureEditView", "NEXT_COLUMNS", "logit_line"]
