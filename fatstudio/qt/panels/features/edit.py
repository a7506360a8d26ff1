"""The Features tab's intervention (``featuresEdit``): the feature clicked in the graph or the dashboard, zeroed
(``featuresZeroButton``) or clamped to a value (``featuresClampValue``, ``featuresClampButton``) at its position
or at every one, and the prompt rerun (`Features.intervene`); shown as the head ablation shows its result: the
prompt's tokens coloured by the change of their probability (``featuresEditText``), and the next token's most
likely before and after (``featuresEditTable``)."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ....core.app.features import EDIT
from ....core.inference.prompting import display_token
from ...widgets.forms import float_spin
from ...widgets.token_view import TokenView, signed_tint

if TYPE_CHECKING:
    from ....core.app.features import EditTarget, Features
    from ....core.inspect.features.interventions import FeatureIntervention

COLUMNS = ("next token", "p before", "p after", "Δp")


class EditSection(QWidget):
    """See the module. `set_target` chooses the feature; `zero` and `clamp` rerun the prompt."""

    def __init__(self, features: Features, parent=None):
        super().__init__(parent, objectName="featuresEdit")
        self.features = features
        self.target: EditTarget | None = None
        self.title = QLabel(objectName="featuresEditTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.zeroButton = QPushButton("Zero it", objectName="featuresZeroButton")
        self.clampValue = float_spin(-1000.0, 1000.0, 5.0, decimals=2, step=0.5)
        self.clampValue.setObjectName("featuresClampValue")
        self.clampButton = QPushButton("Clamp to", objectName="featuresClampButton")
        self.everywhere = QCheckBox("at every position", objectName="featuresEditEverywhere")
        self.everywhere.setToolTip("Set the feature at every position of the prompt, not only at the one clicked.")
        bar = QHBoxLayout()
        bar.addWidget(self.title, 1)
        bar.addWidget(self.zeroButton)
        bar.addWidget(self.clampButton)
        bar.addWidget(self.clampValue)
        bar.addWidget(self.everywhere)
        self.summary = QLabel(objectName="featuresEditSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.text = TokenView()
        self.text.setObjectName("featuresEditText")
        self.text.setMaximumHeight(4 * self.fontMetrics().height())
        self.table = QTableWidget(0, len(COLUMNS), objectName="featuresEditTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(False)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(bar)
        lay.addWidget(self.summary)
        lay.addWidget(self.text)
        lay.addWidget(self.table, 1)
        self.zeroButton.clicked.connect(self.zero)
        self.clampButton.clicked.connect(lambda: self.clamp(self.clampValue.value()))
        features.cleared.connect(lambda: self.set_target(None))
        features.chosen_changed.connect(lambda _chosen: self.set_target(None))
        features.edit_ready.connect(self._show)
        features.failed.connect(lambda key, message: self.say(message, True) if key == EDIT else None)
        self.set_target(None)

    def set_target(self, target: EditTarget | None) -> None:
        self.target = target
        self.text.clear_tokens()
        self.table.setRowCount(0)
        for button in (self.zeroButton, self.clampButton, self.clampValue, self.everywhere):
            button.setEnabled(target is not None)
        self.everywhere.setChecked(target is None or target.position is None)
        self.everywhere.setEnabled(target is not None and target.position is not None)
        self.title.setText(f"<b>Intervene:</b> {html.escape(target.words)} on “{html.escape(target.prompt)}”"
                           if target is not None else
                           "<b>Intervene:</b> click a feature in the graph or choose one in the list.")
        self.say("")

    def zero(self) -> bool:
        return self.clamp(0.0)

    def clamp(self, value: float) -> bool:
        """Rerun the target's prompt with its feature set to ``value``."""
        t = self.target
        if t is None:
            return False
        everywhere = self.everywhere.isChecked()
        started = self.features.intervene(t, value, everywhere)
        if started:
            how = "zeroed" if value == 0 else f"clamped to {value:g}"
            where = "at every position" if everywhere or t.position is None else f"at position {t.position + 1}"
            self.say(f"Rerunning the prompt with feature {t.feature + 1} {how} {where}…")
        return started

    def _show(self, result: FeatureIntervention) -> None:
        """The text coloured by each token's Δp and the next token's most likely values before and after."""
        deltas = result.delta
        scale = max((abs(d) for d in deltas if d is not None), default=0.0)
        self.text.set_tokens(result.tokens, [None if d is None else signed_tint(d, scale) for d in deltas],
                             [None if b is None or a is None else f"p {b:.4f} → {a:.4f} (Δp {a - b:+.4f})"
                              for b, a in zip(result.before, result.after)])
        rows = list(zip(result.next_tokens, result.next_before, result.next_after))
        self.table.setRowCount(len(rows))
        for r, (token, b, a) in enumerate(rows):
            for c, value in enumerate((display_token(token), f"{b:.4f}", f"{a:.4f}", f"{a - b:+.4f}")):
                item = QTableWidgetItem(value)
                if c == 3:
                    item.setBackground(signed_tint(a - b, max(abs(x - y) for _t, y, x in rows) or 1.0))
                self.table.setItem(r, c, item)
        top = max(range(len(rows)), key=lambda r: rows[r][2]) if rows else None
        after = f"; now most likely <code>{html.escape(display_token(rows[top][0]))}</code>" if top is not None else ""
        self.say(f"<b>{html.escape(result.describe())}</b>{after}. The prompt's tokens: red, p rose; blue, p fell "
                 "(hover one for its p before and after). The table: the next token's most likely, before and after.")

    def say(self, text: str, error: bool = False) -> None:
        self.summary.setText(text)
        self.summary.setStyleSheet("color: #b00020;" if error else "")
