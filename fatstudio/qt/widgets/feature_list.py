"""The feature list: a sortable table of a dictionary's features, one row each — its number (counted from 1, as
the app counts features), how often it is active on the validation split, its mean activation when active and
a label from its top tokens (`dashboard.FeatureStats`). Click a column's header to sort by it; selecting a row
emits ``featureChosen`` with the feature's 0-based index. It shows the rows it is given; it computes nothing."""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

from ...core.inspect.features.dashboard import FeatureStats

COLUMNS = ("#", "frequency", "mean act", "label")
_TIPS = ("The feature's number (features are counted from 1).",
         "The share of the validation split's tokens the feature is active on.",
         "Its mean activation on the tokens it is active on.",
         "Its top tokens: the distinct tokens of its strongest activations (␣ a space, ↵ a newline).")
_DEAD = QColor(150, 150, 150)
Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()


def _key(s: FeatureStats, column: int) -> float | str:
    return (s.index, s.frequency, s.mean_act, s.label)[column]


class FeatureTableModel(QAbstractTableModel):
    """The rows of `FeatureList`, in the order shown (`sort` reorders them)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[FeatureStats] = []

    def set_rows(self, rows: Sequence[FeatureStats]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent: Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return _TIPS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        s, c = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (str(s.index + 1), f"{s.frequency:.2%}" if s.frequency >= 1e-4 else f"{s.frequency:.1e}",
                    f"{s.mean_act:.3g}", s.label)[c]
        if role == Qt.ItemDataRole.TextAlignmentRole and c < 3:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and not s.frequency:
            return _DEAD
        if role == Qt.ItemDataRole.ToolTipRole:
            if not s.frequency:
                return f"Feature {s.index + 1} is never active on the validation split (a dead feature)."
            return (f"Feature {s.index + 1}: active on {s.frequency:.3%} of the validation tokens, mean activation "
                    f"{s.mean_act:.4g} there; top tokens {s.label}")
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(COLUMNS):
            return
        self.layoutAboutToBeChanged.emit()
        before = self.persistentIndexList()  # the selection and the current row follow their features
        features = [self.rows[i.row()].index for i in before]
        self.rows.sort(key=lambda s: (_key(s, column), s.index), reverse=order == Qt.SortOrder.DescendingOrder)
        row_of = {s.index: r for r, s in enumerate(self.rows)}
        self.changePersistentIndexList(before, [self.index(row_of[f], i.column()) for f, i in zip(features, before)])
        self.layoutChanged.emit()


class FeatureList(QTableView):
    """A dictionary's features (see the module); ``featureChosen(index)`` (0-based) when one is selected."""

    featureChosen = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("featureList")
        self.table = FeatureTableModel(self)
        self.setModel(self.table)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        header = self.horizontalHeader()
        for c in range(3):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        fm = self.fontMetrics()  # the number and its frequency in view (the label column scrolls)
        self.setMinimumWidth(fm.horizontalAdvance("# 1,024 frequency ▾") + 4 * fm.horizontalAdvance("m"))
        self.setSortingEnabled(True)
        self.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.selectionModel().currentRowChanged.connect(self._row_changed)

    def set_stats(self, stats: Sequence[FeatureStats]) -> None:
        """Show these features (`FeatureActivations.stats`), in the order the header's sort asks."""
        self.table.set_rows(stats)
        header = self.horizontalHeader()
        self.table.sort(header.sortIndicatorSection(), header.sortIndicatorOrder())

    def shown(self) -> list[int]:
        """The 0-based indices of the features in the order shown."""
        return [s.index for s in self.table.rows]

    def current_feature(self) -> int | None:
        row = self.currentIndex().row()
        return self.table.rows[row].index if 0 <= row < len(self.table.rows) else None

    def select_feature(self, index: int) -> None:
        """Select feature ``index`` (0-based) and scroll to it (emits ``featureChosen``)."""
        for row, s in enumerate(self.table.rows):
            if s.index == index:
                self.setCurrentIndex(self.table.index(row, 0))
                self.scrollTo(self.table.index(row, 0))
                return

    def _row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            self.featureChosen.emit(self.table.rows[current.row()].index)
