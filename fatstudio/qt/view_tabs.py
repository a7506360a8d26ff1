"""The views beside the settings column: Training | Prompt | Attention | Paper | Exercises | Token loss | Features |
Experiments. The Prompt and Attention panels are made once their modules are imported (in a job: the prompt panel
imports torch) or when first shown; until then their tabs say "Loading…"."""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QTabWidget, QVBoxLayout, QWidget

from . import state

if TYPE_CHECKING:
    from ..core.app.workspace import Workspace
    from .panels.attention.panel import AttentionPanel
    from .panels.prompt import PromptPanel


def _import_view_panels() -> bool:
    """In a job: import the Prompt and Attention panels off the GUI thread."""
    import fatstudio.qt.panels.attention.panel
    import fatstudio.qt.panels.prompt  # noqa: F401
    return True


class ViewTabs(QTabWidget):
    """``viewTabs``: ``views`` (title → widget) with the Prompt and Attention tabs after the first; ``panelsMade``
    once those two panels exist (`prompt_panel`, `attention_panel`); ``attentionShown(bool)`` as that tab is
    shown or left."""

    panelsMade = Signal()
    attentionShown = Signal(bool)

    def __init__(self, workspace: Workspace, views: dict[str, QWidget], parent=None):
        super().__init__(parent, objectName="viewTabs")
        self.workspace = workspace
        self.prompt_panel: PromptPanel | None = None
        self.attention_panel: AttentionPanel | None = None
        self.prompt_host, self.attention_host = _host("promptHost"), _host("attentionHost")
        first, *rest = views.items()
        for widget, title in ((first[1], first[0]), (self.prompt_host, "Prompt"), (self.attention_host, "Attention"),
                              *((w, t) for t, w in rest)):
            self.addTab(widget, title)
        self.currentChanged.connect(lambda i: self.make_panels() if i > 0 else None)
        self.currentChanged.connect(lambda *_: self.attentionShown.emit(self.currentWidget() is self.attention_host))

    def make_panels_soon(self) -> None:
        """Import the two panels' modules in a job, then make them."""
        if self.prompt_panel is None:
            self.workspace.jobs.submit("import-views", _import_view_panels, on_result=lambda _ok: self.make_panels())

    def make_panels(self) -> None:
        if self.prompt_panel is not None:
            return
        from .panels.attention.panel import AttentionPanel
        from .panels.prompt import PromptPanel

        self.prompt_panel = PromptPanel(self.workspace, self.prompt_host)
        self.attention_panel = AttentionPanel(self.workspace, self.attention_host)
        for host, panel in ((self.prompt_host, self.prompt_panel), (self.attention_host, self.attention_panel)):
            lay = host.layout()
            assert lay is not None  # each host is made with its layout (`_host`)
            while (item := lay.takeAt(0)) is not None:
                if (placeholder := item.widget()) is not None:
                    placeholder.deleteLater()
            lay.addWidget(panel)
        # made after the window, shown later: its splitters as the user left them, at their size (restored while
        # unshown, the parts' least sizes would squeeze them)
        self.attention_panel.shownSized.connect(partial(state.restore_splitters, self.attention_panel))
        self.panelsMade.emit()


def _host(name: str) -> QWidget:
    """A tab's place, saying "Loading…" until its panel is made."""
    host = QWidget(objectName=name)
    lay = QVBoxLayout(host)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(QLabel("Loading…", alignment=Qt.AlignmentFlag.AlignCenter))
    return host
