"""Small form helpers: a spin box for numbers like 3e-4, combo boxes that carry values, labelled rows, read-only
tables."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

W = TypeVar("W", bound=QWidget)  # the widget of a Form row, returned as given


class SciSpinBox(QDoubleSpinBox):
    """A spin box for positive numbers over many orders of magnitude (learning rates): shows ``3e-04``,
    accepts any float syntax, and steps by multiplying (up) or dividing (down) by ``factor``."""

    def __init__(self, parent=None, minimum: float = 0.0, maximum: float = 10.0, factor: float = 2.0):
        super().__init__(parent)
        self.factor = factor
        self.setDecimals(15)
        self.setRange(minimum, maximum)
        self.setKeyboardTracking(False)

    def textFromValue(self, value: float) -> str:
        return sci(value)

    def valueFromText(self, text: str) -> float:
        try:
            return float(text.strip())
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int):
        t = text.strip()
        if not t:
            return QValidator.State.Intermediate, text, pos
        try:
            v = float(t)
        except ValueError:
            if all(c in "0123456789.eE+-" for c in t):
                return QValidator.State.Intermediate, text, pos
            return QValidator.State.Invalid, text, pos
        ok = math.isfinite(v) and self.minimum() <= v <= self.maximum()
        return (QValidator.State.Acceptable if ok else QValidator.State.Intermediate), text, pos

    WIDEST = "8.888e-10"  # the widest text it shows, for its size (Qt measures the range's ends: "0", "10")

    def sizeHint(self) -> QSize:
        return self._fitted(super().sizeHint())

    def minimumSizeHint(self) -> QSize:
        return self._fitted(super().minimumSizeHint())

    def _fitted(self, hint: QSize) -> QSize:
        fm = self.fontMetrics()
        measured = max(fm.horizontalAdvance(t) for t in (self.textFromValue(self.minimum()),
                                                          self.textFromValue(self.maximum()), self.specialValueText()))
        return QSize(hint.width() + max(0, fm.horizontalAdvance(self.WIDEST) - measured), hint.height())

    def stepBy(self, steps: int) -> None:
        v = self.value()
        if v <= 0:
            v = max(self.minimum(), 1e-6) if steps > 0 else v
        else:
            v = v * self.factor ** steps
        self.setValue(min(max(v, self.minimum()), self.maximum()))


def sci(value: float) -> str:
    """3e-4 rather than 0.0003 or 3.000e-04; plain decimals between 0.001 and 10000."""
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    mant, exp = f"{value:.3e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


class ValueCombo(QComboBox):
    """A combo box of (label, value) items; ``value()`` / ``set_value()`` speak values, not indices."""

    valueChanged = Signal(object)

    def __init__(self, items: Iterable[tuple[str, Any]] = (), parent=None):
        super().__init__(parent)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # no item clipped: the column fits
        self.set_items(items)
        self.currentIndexChanged.connect(lambda _i: self.valueChanged.emit(self.value()))

    def set_items(self, items: Iterable[tuple[str, Any]]) -> None:
        current = self.value() if self.count() else None
        self.blockSignals(True)
        self.clear()
        for label, value in items:
            self.addItem(label, value)
        if current is not None:
            i = self.findData(current)
            self.setCurrentIndex(i if i >= 0 else 0)
        self.blockSignals(False)

    def value(self) -> Any:
        return self.currentData()

    def set_value(self, value: Any) -> bool:
        i = self.findData(value)
        if i < 0:
            return False
        self.setCurrentIndex(i)
        return True

    def values(self) -> list[Any]:
        return [self.itemData(i) for i in range(self.count())]


def int_spin(lo: int, hi: int, value: int = 0, special: str | None = None, step: int = 1) -> QSpinBox:
    """An integer spin box; with ``special`` its minimum shows that text (e.g. "auto")."""
    w = QSpinBox()
    w.setRange(lo, hi)
    w.setSingleStep(step)
    w.setValue(value)
    w.setKeyboardTracking(False)
    w.setAccelerated(True)
    if special:
        w.setSpecialValueText(special)
    return w


def float_spin(lo: float, hi: float, value: float = 0.0, decimals: int = 3, step: float = 0.01,
               special: str | None = None) -> QDoubleSpinBox:
    """A decimal spin box; with ``special`` its minimum shows that text (e.g. "auto")."""
    w = QDoubleSpinBox()
    w.setRange(lo, hi)
    w.setDecimals(decimals)
    w.setSingleStep(step)
    w.setValue(value)
    w.setKeyboardTracking(False)
    if special:
        w.setSpecialValueText(special)
    return w


def check(text: str = "") -> QCheckBox:
    return QCheckBox(text)


class Form:
    """Builds a QFormLayout whose rows have a rich-text label (the paper's notation) and a tooltip on both
    label and field; all fields are kept in ``fields``, their labels in ``labels``.

    With a ``section`` ("model", "data", "train") every field added is named by its config key,
    ``{section}.{name}`` (``train.steps``), for tests and assistive tools: the editor itself, or, where the
    editor keeps a fixed public name given by the caller (``archCombo``), a `KeyedField` around it."""

    def __init__(self, parent: QWidget | None = None, section: str = ""):
        self.layout = QFormLayout(parent) if parent is not None else QFormLayout()
        self.layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.layout.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.section = section
        self.fields: dict[str, QWidget] = {}
        self.labels: dict[str, QLabel] = {}
        self._rows: dict[str, QWidget] = {}  # what each row holds: the field, or its KeyedField

    def add(self, name: str, label: str, widget: W, tip: str, keyed: bool = True) -> W:
        """A row for the field ``name``; ``keyed=False`` for a row that is no config field (the preset)."""
        row: QWidget = widget
        if self.section and keyed:
            key = f"{self.section}.{name}"
            if widget.objectName():
                row = KeyedField(key, widget)
            else:
                widget.setObjectName(key)
        row.setToolTip(tip)
        widget.setToolTip(tip)
        lab = QLabel(label)
        lab.setTextFormat(Qt.TextFormat.RichText)
        lab.setToolTip(tip)
        lab.setBuddy(widget)
        self.layout.addRow(lab, row)
        self.fields[name] = widget
        self.labels[name] = lab
        self._rows[name] = row
        return widget

    def set_row_visible(self, name: str, visible: bool) -> None:
        self.layout.setRowVisible(self._rows[name], visible)

    def set_row_applies(self, name: str, applies: bool) -> None:
        """Enable the row of ``name`` where it applies, grey it out where not: it keeps its place, so that no
        other row moves when an edit makes it apply or not."""
        self.labels[name].setEnabled(applies)
        self._rows[name].setEnabled(applies)


class ElidedLabel(QLabel):
    """One line of plain text, elided in the middle to the width it is given (the whole text in its tooltip), so
    that a long text neither wraps (moving what is under it) nor widens its column."""

    def __init__(self, text: str = "", objectName: str = "", parent: QWidget | None = None):
        super().__init__(parent, objectName=objectName)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.full = ""
        self.setText(text)

    def setText(self, text: str) -> None:
        self.full = text
        self.setToolTip(text)
        self._elide()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        super().setText(self.fontMetrics().elidedText(self.full, Qt.TextElideMode.ElideMiddle, max(self.width(), 1)))


class WrappedLabel(QLabel):
    """Word-wrapped rich text that is never given less height than its text needs at its width. A form in a
    scrolling column otherwise squeezes it to its size hint whenever a row elsewhere comes or goes, and every
    row under it moves while the person edits."""

    def __init__(self, objectName: str = "", parent: QWidget | None = None):
        super().__init__(parent, objectName=objectName, wordWrap=True, textFormat=Qt.TextFormat.RichText)

    def setText(self, text: str) -> None:
        super().setText(text)
        self._pin()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._pin()

    def _pin(self) -> None:
        needed = self.heightForWidth(max(self.width(), 1))
        if needed > 0 and needed != self.minimumHeight():
            self.setMinimumHeight(needed)


class KeyedField(QWidget):
    """A frameless holder named by a config key (``model.arch``) around an editor that keeps its own fixed
    public name (``archCombo``), so that both names find it: the holder's ``focusProxy()`` and ``editor`` are
    the editor. (Qt gives a widget one objectName.)"""

    def __init__(self, key: str, editor: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName(key)
        self.editor = editor
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(editor)
        self.setFocusProxy(editor)
        self.setSizePolicy(editor.sizePolicy())


class ColumnScrollArea(QScrollArea):
    """A vertically scrolling column that is never narrower than its widget needs (with no sideways scrolling,
    a narrower one would clip its fields): its minimum width follows the widget's, as rows and items come
    and go."""

    def __init__(self, widget: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWidget(widget)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        widget.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:
        widget = self.widget()
        inner = widget.minimumSizeHint().width() if widget is not None else 0
        return QSize(inner + self.verticalScrollBar().sizeHint().width(), super().minimumSizeHint().height())

    def eventFilter(self, watched, event) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # its rows or items changed: the column may need to widen
        return super().eventFilter(watched, event)


def keyed_editor(root: QWidget, key: str) -> QWidget | None:
    """The editor of the settings field ``key`` (``"model.arch"``) under ``root``: the widget named by the key,
    or the editor a `KeyedField` of that name holds; None if there is none."""
    found = root.findChild(QWidget, key)
    return found.editor if isinstance(found, KeyedField) else found


def section(title: str) -> QLabel:
    lab = QLabel(f"<b>{title}</b>")
    lab.setTextFormat(Qt.TextFormat.RichText)
    return lab


def human_count(n: float) -> str:
    for unit, f in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= f:
            return f"{n / f:.2f} {unit}"
    return f"{n:.0f}"


def human_duration(s: float) -> str:
    if not math.isfinite(s) or s < 0:
        return "–"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def set_header_tip(table: QTableWidget, col: int, tip: str) -> None:
    """The tooltip of ``table``'s column header ``col`` (one its header labels made)."""
    item = table.horizontalHeaderItem(col)
    if item is not None:
        item.setToolTip(tip)


def table_item(text: str, tip: str = "", align_right: bool = True) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if tip:
        item.setToolTip(tip)
    return item


def read_only_table(name: str, columns: tuple[str, ...]) -> QTableWidget:
    t = QTableWidget(0, len(columns), objectName=name)
    t.setHorizontalHeaderLabels(columns)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.verticalHeader().hide()
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    return t
