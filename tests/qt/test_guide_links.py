"""Help → Guide and the "?" beside every tab's title open the guide's page for what is on screen, offline."""
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QTabBar, QToolButton

from fatstudio.core import guide
from fatstudio.qt import guide_links

LONG = 60_000


@pytest.fixture
def opened(monkeypatch, tmp_path):
    """The URLs the browser was asked to show; a built guide in tmp_path/site."""
    urls = []
    monkeypatch.setattr(guide_links.QDesktopServices, "openUrl", lambda url: urls.append(url.toString()))
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html></html>", encoding="utf-8")
    monkeypatch.setattr(guide, "PACKAGED_SITE", site)
    return urls


def _titles(tabs):
    return [tabs.tabText(i) for i in range(tabs.count())]


def test_every_tab_has_a_page_and_a_question_mark_that_opens_it(window, opened, tmp_path):
    tabs = [window.settingsTabs, window.viewTabs]
    titles = [t for w in tabs for t in _titles(w)]
    assert set(titles) <= set(guide.PAGES), f"tabs without a guide page: {set(titles) - set(guide.PAGES)}"
    for widget in tabs:
        for i, title in enumerate(_titles(widget)):
            button = widget.tabBar().tabButton(i, QTabBar.ButtonPosition.RightSide)
            assert isinstance(button, QToolButton) and button.objectName() == guide_links.button_name(title)
            button.click()
            name, _, anchor = guide.html_of(guide.PAGES[title]).partition("#")
            assert opened[-1] == (tmp_path / "site" / name).as_uri() + "#" + anchor
    assert window.findChild(QToolButton, "guideTokenLossButton") is not None


def test_help_guide_opens_the_shown_views_page(window, opened, tmp_path):
    window.viewTabs.setCurrentIndex(_titles(window.viewTabs).index("Paper"))
    window.findChild(guide_links.QAction, "guideAction").trigger()
    assert opened == [(tmp_path / "site" / "paper.html").as_uri() + "#paper"]
    assert window.guide.action.shortcut().toString() == "F1"


def test_a_checkout_without_a_built_guide_builds_it_once_then_opens_it(window, opened, tmp_path, monkeypatch, qtbot):
    monkeypatch.setattr(guide, "PACKAGED_SITE", tmp_path / "none")
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(guide, "can_build", lambda: True)
    built = []

    def build():  # what mkdocs would leave
        built.append(1)
        site = guide.cached_site()
        site.mkdir(parents=True)
        (site / "index.html").write_text("<html></html>", encoding="utf-8")
        return site

    monkeypatch.setattr(guide, "build_site", build)
    window.guide.open("Corpus")
    qtbot.waitUntil(lambda: bool(opened), timeout=LONG)
    assert opened == [(guide.cached_site() / "corpus.html").as_uri() + "#corpus"]
    window.guide.open("Model")
    assert built == [1] and opened[-1].endswith("first-run.html#model")  # built once
