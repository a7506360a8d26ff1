"""How a change to the model (a head knocked out, a feature zeroed or clamped) changes each token's probability
(`core.inspect.ablation.TokenChange`): the text coloured by Δp (red a rise, blue a fall), each token's tooltip
its p before and after, and a table position by position (position, token, p before, p after, Δp)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from ...core.inference.prompting import display_token
from .token_view import TokenView, signed_tint

if TYPE_CHECKING:
    from ...core.inspect.ablation import TokenChange

COLUMNS = ("position", "token", "p before", "p after", "Δp")


class TokenChangeView(QWidget):
    """``text`` (a `TokenView`, objectName ``<name>Text``) above ``table`` (``<name>Table``); `show_change`."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.change: TokenChange | None = None
        self.text = TokenView()
        self.text.setObjectName(f"{name}Text")
        self.text.setMaximumHeight(80)
        self.table = QTableWidget(0, len(COLUMNS), objectName=f"{name}Table")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.text)
        lay.addWidget(self.table, 1)

    def clear(self) -> None:
        self.change = None
        self.text.clear_tokens()
        self.table.setRowCount(0)

    def show_change(self, change: TokenChange) -> None:
        """Colour the text and fill the table with ``change``."""
        self.change = change
        deltas = change.delta
        scale = max((abs(d) for d in deltas if d is not None), default=0.0)
        self.text.set_tokens(change.tokens, [None if d is None else signed_tint(d, scale) for d in deltas],
                             [self._tip(i) for i in range(len(change.tokens))])
        t = self.table
        t.setRowCount(len(change.tokens))
        for i, (tok, b, a, d) in enumerate(zip(change.tokens, change.before, change.after, deltas)):
            cells = (f"{i + 1}", display_token(tok), p_text(b), p_text(a), "" if d is None else f"{d:+.4f}")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 4 and d is not None:
                    item.setBackground(signed_tint(d, scale))
                t.setItem(i, c, item)

    def _tip(self, i: int) -> str:
        r = self.change
        b, a = (None, None) if r is None else (r.before[i], r.after[i])
        if b is None or a is None:
            return "context only: not scored"
        return f"p before {b:.4f} · after {a:.4f} · Δp {a - b:+.4f}"


def p_text(v: float | None) -> str:
    """A probability as the table shows it ("" for none)."""
    return "" if v is None else f"{v:.4f}"


__all__ = ["COLUMNS", "TokenChangeView", "p_text"]
