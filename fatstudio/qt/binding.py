"""One source of truth for the settings, and one binding of every settings form to it.

``Settings`` (Qt-free: `core.app.settings.Settings`) holds the one ``RunConfig`` the window trains with. Every
change goes through it: ``update`` (some fields of one section: "model", "data" or "train"), ``set_section`` (a
whole section) or ``replace`` (the whole config, e.g. a preset). Each change is validated once, then announced
once by ``changed(Change)``, which names the fields that changed. The panels listen to it for what they depend
on (the memory estimate for the batch size, the corpus for the seed, …) and never push values to each other.
Facts worked out from the settings on this machine (what precision "auto" means here) are announced the same
way, in the section "derived".

``Binding`` ties the editors of a form to one section through ``dataclasses.fields``: the form's keys are
the field names, so no panel has field-by-field code. An edit writes its field (and any field that goes
with it, see ``also``) to the Settings; a change shows the section in the editors again.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QSpinBox, QWidget

from fatstudio.core.app.settings import DERIVED, SECTIONS, Change, Settings
from fatstudio.qt.widgets.forms import ValueCombo

__all__ = ["DERIVED", "SECTIONS", "Binding", "Change", "Editor", "Settings", "editor"]  # the settings are the core's


# ---- editors: reading and showing one field in one widget ---------------------------------------------------
@dataclass(frozen=True)
class Editor:
    """How a widget shows a field's value (``show``), reads it back (``read``) and says it was edited."""

    widget: QWidget
    read: Callable[[], Any]
    show: Callable[[Any], Any]
    edited: Any  # the widget's signal


def editor(widget: QWidget, optional: bool = False) -> Editor | None:
    """The Editor of a ValueCombo, check box or spin box; None for a widget that only shows (a label).
    For an ``optional`` field (default None), a spin box whose minimum shows a special text ("auto") means
    None."""
    if isinstance(widget, ValueCombo):
        return Editor(widget, widget.value, widget.set_value, widget.valueChanged)
    if isinstance(widget, QCheckBox):
        return Editor(widget, widget.isChecked, lambda v: widget.setChecked(bool(v)), widget.toggled)
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        none = widget.minimum() if optional and widget.specialValueText() else None
        shown: Callable[[], float]
        if isinstance(widget, QSpinBox):
            shown = widget.value
        else:  # what it shows, not the float noise of its arrows
            shown = lambda: round(widget.value(), widget.decimals())

        def put(v: Any) -> None:
            value = widget.minimum() if v is None else v  # None: the special value (optional), else the least
            if isinstance(widget, QSpinBox):
                widget.setValue(int(value))
            else:
                widget.setValue(float(value))

        return Editor(widget, lambda: None if shown() == none else shown(), put, widget.valueChanged)
    return None


class Binding:
    """The editors among ``widgets`` (form key -> widget) tied to the fields of the same names in one
    section of ``settings``.

    ``shown(section)`` is what the editors show (the model panel shows a variation left to the paper's
    default as that default); ``also`` maps a field to a function of its new value giving other fields an
    edit sets with it (the architecture resets the variations); ``on_edit(name)`` is called after an edit
    changed the settings. The owner calls ``show(change)`` from its listener, so that it decides the order
    (a combo box gets its items before its value).
    """

    def __init__(self, settings: Settings, section: str, widgets: Mapping[str, QWidget], *,
                 shown: Callable[[Any], Any] | None = None,
                 also: Mapping[str, Callable[[Any], dict[str, Any]]] | None = None,
                 on_edit: Callable[[str], None] | None = None):
        self.settings, self.section = settings, section
        self._shown = shown or (lambda value: value)
        self._also = dict(also or {})
        self._on_edit = on_edit
        self.editors: dict[str, Editor] = {}
        for f in dataclasses.fields(settings.section(section)):
            w = widgets.get(f.name)
            ed = editor(w, optional=f.default is None) if w is not None else None
            if ed is not None:
                self.editors[f.name] = ed
                ed.edited.connect(functools.partial(self._edited, f.name))
        self.show()

    def show(self, change: Change | None = None) -> None:
        """Show the section in the editors (after ``change``, if it touched the section)."""
        if change is not None and not change.touches(self.section):
            return
        shown = self._shown(self.settings.section(self.section))
        for name, ed in self.editors.items():  # all of them: what one shows may depend on another field
            value = getattr(shown, name)
            if ed.read() == value:
                continue  # untouched, so that text being typed into a spin box stays
            blocked = ed.widget.blockSignals(True)
            try:
                ed.show(value)
            finally:
                ed.widget.blockSignals(blocked)

    def _edited(self, name: str, *_args: Any) -> None:
        value = self.editors[name].read()
        values = {name: value}
        if name in self._also:
            values = {**self._also[name](value), name: value}
        if self.settings.update(self.section, **values) and self._on_edit is not None:
            self._on_edit(name)
