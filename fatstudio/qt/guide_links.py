"""The guide from the window: a "?" beside each tab's title and Help → Guide (F1, the shown view's page) open the
page for what is on screen (`core.guide.PAGES`), offline, in the system browser. A checkout's guide is built
once, in a job, the first time it is asked for (`core.guide.build_site`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QTabBar, QTabWidget, QToolButton

from ..core import guide

if TYPE_CHECKING:
    from ..core.app.workspace import Workspace


def button_name(tab: str) -> str:
    """The "?" button's objectName: ``Token loss`` → ``guideTokenLossButton``."""
    return "guide" + tab.title().replace(" ", "") + "Button"


class GuideLinks(QObject):
    """``action`` (Help → Guide, ``guideAction``) opens the page of ``views``' shown tab; each tab of ``tab_widgets``
    gets its "?" (`button_name`). ``message(text, ms)`` for the status bar; ``opened(url)`` once the browser is
    asked to show it."""

    message = Signal(str, int)
    opened = Signal(str)

    def __init__(self, workspace: Workspace, views: QTabWidget, tab_widgets: list[QTabWidget], parent=None):
        super().__init__(parent)
        self.workspace, self.views = workspace, views
        self.action = QAction("&Guide", self, shortcut="F1", objectName="guideAction",
                              triggered=lambda: self.open(views.tabText(views.currentIndex())))
        for tabs in tab_widgets:
            for i in range(tabs.count()):
                title = tabs.tabText(i)
                button = QToolButton(text="?", autoRaise=True, objectName=button_name(title),
                                     toolTip=f"The guide on the {title} tab (offline, in your browser)")
                button.clicked.connect(lambda _=False, t=title: self.open(t))
                tabs.tabBar().setTabButton(i, QTabBar.ButtonPosition.RightSide, button)

    def open(self, tab: str) -> None:
        """Show the guide's page for ``tab``: built, or built first (once) where MkDocs can, else its source."""
        page = guide.PAGES[tab]
        if guide.built_site() is None and guide.can_build():
            self.message.emit("Building the guide (once)…", 0)
            self.workspace.jobs.submit("guide", guide.build_site, on_result=lambda _site: self._show(page),
                                       on_error=lambda e: self.message.emit(e, 15000))
            return
        self._show(page)

    def _show(self, page: str) -> None:
        url = guide.location(page)
        if url is None:
            self.message.emit("This copy of fatstudio has no guide: reinstall it, or read docs/ in its source.", 15000)
            return
        self.message.emit(f"Opening the guide: {page.partition('#')[0]}", 5000)
        QDesktopServices.openUrl(QUrl(url))
        self.opened.emit(url)
