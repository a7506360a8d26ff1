"""The guide: docs/*.md built by MkDocs (mkdocs.yml) into HTML that opens offline from file://. Which page tells
of each tab (`PAGES`) and where that page is (`location`): an installed wheel carries the built site
(``fatstudio/guide``, built when the wheel is, setup.py); a checkout builds it once into the cache folder
(``guide``, one folder per state of its sources, `build_site`) when MkDocs is installed, else points at the
page's Markdown source."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .files import cache_folder
from .resources import PACKAGE_ROOT

# Each tab's title → its page in docs/ and the section there ("page.md#anchor").
PAGES: dict[str, str] = {
    "Model": "first-run.md#model",
    "Corpus": "corpus.md#corpus",
    "Train": "training.md#train",
    "Training": "training.md#train",
    "Prompt": "experiment.md#prompt",
    "Attention": "training.md#attention",
    "Paper": "paper.md#paper",
    "Exercises": "paper.md#exercises",
    "Token loss": "experiment.md#token-loss",
    "Experiments": "experiment.md#experiments",
    "Features": "features.md#the-features-tab",
}
PACKAGED_SITE = Path(__file__).resolve().parents[1] / "guide"  # a wheel's built guide (setup.py builds it there)
CONFIG = PACKAGE_ROOT / "mkdocs.yml"  # a checkout's
DOCS = PACKAGE_ROOT / "docs"


def html_of(page: str) -> str:
    """``corpus.md#corpus`` → ``corpus.html#corpus`` (mkdocs.yml: use_directory_urls false)."""
    name, _, anchor = page.partition("#")
    return name.removesuffix(".md") + ".html" + (f"#{anchor}" if anchor else "")


def _sources_key() -> str:
    """The checkout's guide sources in one name: mkdocs.yml and every file under docs/, by path, size and time."""
    h = hashlib.sha256()
    for path in sorted([CONFIG, *(p for p in DOCS.rglob("*") if p.is_file())]):
        st = path.stat()
        h.update(f"{path.relative_to(PACKAGE_ROOT)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def cached_site() -> Path:
    """Where a checkout's guide is built (whether or not it is yet)."""
    return cache_folder("guide") / _sources_key()


def built_site() -> Path | None:
    """The built guide to open: the wheel's, else a checkout's built into the cache; None when neither is."""
    if (PACKAGED_SITE / "index.html").is_file():
        return PACKAGED_SITE
    if CONFIG.is_file() and (cached_site() / "index.html").is_file():
        return cached_site()
    return None


def can_build() -> bool:
    """A checkout with MkDocs and the Material theme installed (the ``test`` extra has both)."""
    return CONFIG.is_file() and all(importlib.util.find_spec(m) is not None for m in ("mkdocs", "material"))


def build_site(into: Path | None = None, strict: bool = False) -> Path:
    """Build the checkout's guide into ``into`` (default: `cached_site`, made under a temporary name and renamed
    when complete, the cache's older builds removed); return it. A failed build raises RuntimeError with MkDocs's
    last lines."""
    site = into or cached_site()
    work = site.with_name(site.name + f".building-{os.getpid()}")
    # not -q: it hides the warnings that --strict counts
    command = [sys.executable, "-m", "mkdocs", "build", "-f", str(CONFIG), "-d", str(work), *(["--strict"] * strict)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise RuntimeError("The guide did not build: " + "\n".join((done.stderr or done.stdout).splitlines()[-8:]))
    if site.exists():
        shutil.rmtree(site)
    work.rename(site)
    if into is None:  # the guides built from earlier sources go (~7 MB each)
        for old in site.parent.iterdir():
            if old != site and not old.name.startswith(site.name):
                shutil.rmtree(old, ignore_errors=True)
    return site


def location(page: str) -> str | None:
    """The file:// URL that shows ``page`` ("corpus.md#corpus") offline: in the built guide, else its Markdown
    source in a checkout; None when there is neither (build the site first: `can_build`)."""
    site = built_site()
    if site is not None:
        name, _, anchor = html_of(page).partition("#")
        return (site / name).as_uri() + (f"#{anchor}" if anchor else "")
    source = DOCS / page.partition("#")[0]
    return source.as_uri() if source.is_file() else None
