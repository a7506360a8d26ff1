"""The guide (docs/, mkdocs.yml) builds strictly, so a broken link, a missing page or anchor fails the suite; every
tab's page and section exist in it; and a checkout finds its built copy in the cache."""
import re
from pathlib import Path

import pytest

from fatstudio.core import guide


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return guide.build_site(into=tmp_path_factory.mktemp("guide") / "site", strict=True)


def test_the_guide_builds_strictly_with_every_page_of_docs_in_its_nav(site):
    nav = re.findall(r":\s*(\S+\.md)\s*$", guide.CONFIG.read_text(encoding="utf-8"), flags=re.M)
    pages = sorted(str(p.relative_to(guide.DOCS)) for p in guide.DOCS.rglob("*.md"))
    assert sorted(nav) == pages  # none left out of the guide's navigation, none named twice
    for page in pages:
        assert (site / guide.html_of(page)).is_file()


def test_every_tab_page_and_section_is_in_the_built_guide(site):
    for tab, page in guide.PAGES.items():
        name, _, anchor = guide.html_of(page).partition("#")
        html = (site / name).read_text(encoding="utf-8")
        assert f'id="{anchor}"' in html, f"{tab}: {page} has no section #{anchor}"


def test_a_broken_link_fails_the_strict_build(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Guide\n\nSee [the missing page](missing.md).\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: t\ndocs_dir: docs\ntheme: {name: material, font: false}\n", encoding="utf-8")
    monkeypatch.setattr(guide, "CONFIG", config)
    with pytest.raises(RuntimeError, match="missing.md"):
        guide.build_site(into=tmp_path / "site", strict=True)
    assert not (tmp_path / "site").exists()


def test_a_checkout_opens_its_guide_built_into_the_cache_else_the_page_source(tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(guide, "PACKAGED_SITE", tmp_path / "no-wheel")
    assert guide.built_site() is None
    assert guide.location("corpus.md#corpus") == (guide.DOCS / "corpus.md").as_uri()  # the source, offline
    site = guide.cached_site()
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html></html>", encoding="utf-8")
    assert guide.built_site() == site
    assert guide.location("corpus.md#corpus") == (site / "corpus.html").as_uri() + "#corpus"
    assert guide.location("index.md") == (site / "index.html").as_uri()


def test_a_wheel_opens_the_guide_it_carries(tmp_path, monkeypatch):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text("<html></html>", encoding="utf-8")
    monkeypatch.setattr(guide, "PACKAGED_SITE", tmp_path / "guide")
    assert guide.location("paper.md#exercises") == Path(tmp_path / "guide" / "paper.html").as_uri() + "#exercises"


def test_the_wheels_build_step_puts_the_built_guide_in_the_package(tmp_path, monkeypatch):
    import runpy

    from setuptools.dist import Distribution

    build_py = runpy.run_path(str(guide.PACKAGE_ROOT / "setup.py"), run_name="setup")["BuildPyWithGuide"]
    monkeypatch.chdir(guide.PACKAGE_ROOT)
    command = build_py(Distribution({"name": "fatstudio", "packages": []}))
    command.initialize_options()
    command.build_lib = str(tmp_path)
    command.finalize_options()
    command.run()
    site = tmp_path / "fatstudio" / "guide"
    assert all((site / guide.html_of(page).partition("#")[0]).is_file() for page in guide.PAGES.values())


def test_a_checkout_keeps_one_guide_in_the_cache_the_one_of_its_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_CACHE", str(tmp_path / "cache"))
    for key in ("before", "after"):  # the sources changed between the two
        monkeypatch.setattr(guide, "_sources_key", lambda key=key: key)
        assert guide.build_site() == tmp_path / "cache" / "guide" / key
    assert [p.name for p in (tmp_path / "cache" / "guide").iterdir()] == ["after"]
    assert guide.location("index.md") == (tmp_path / "cache" / "guide" / "after" / "index.html").as_uri()


def test_no_page_loads_anything_from_the_network(site):
    """Offline: no script, style sheet, font or image from a CDN (links to read elsewhere are fine)."""
    loads = re.compile(r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')
    for html in site.rglob("*.html"):
        assert not loads.findall(html.read_text(encoding="utf-8")), html.name
