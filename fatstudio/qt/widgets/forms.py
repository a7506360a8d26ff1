"""Small form helpers: a spin box for numbers like 3e-4, combo boxes that carry values, labelled rows."""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QLabel, QSpinBox, QWidget


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
        # never wider than the settings column because of one long item
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(12)
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
    label and field. Each field without an objectName gets ``{prefix}_{name}``; all are kept in ``fields``."""

    def __init__(self, parent: QWidget | None = None, prefix: str = ""):
        self.layout = QFormLayout(parent) if parent is not None else QFormLayout()
        self.layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.layout.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.prefix = prefix
        self.fields: dict[str, QWidget] = {}
        self.labels: dict[str, QLabel] = {}

    def add(self, name: str, label: str, widget: QWidget, tip: str) -> QWidget:
        if not widget.objectName():  # keep a name given by the caller (e.g. the public "archCombo")
            widget.setObjectName(f"{self.prefix}_{name}" if self.prefix else name)
        widget.setToolTip(tip)
        lab = QLabel(label)
        lab.setTextFormat(Qt.TextFormat.RichText)
        lab.setToolTip(tip)
        lab.setBuddy(widget)
        self.layout.addRow(lab, widget)
        self.fields[name] = widget
        self.labels[name] = lab
        return widget

    def set_row_visible(self, name: str, visible: bool) -> None:
        self.layout.setRowVisible(self.fields[name], visible)


def section(title: str) -> QLabel:
    lab = QLabel(f"<b>{title}</b>")
    lab.setTextFormat(Qt.TextFormat.RichText)
    return lab


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


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
