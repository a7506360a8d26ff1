"""fatstudio's views in a notebook: `open_run` opens a run folder and gives anywidget widgets of its loss curves,
attention over training time, logit lens, loss per token and knock-out table (`views.NotebookRun`).

The widgets carry their JavaScript in the package (``js/``: plain SVG and canvas, no library, no network) and
only draw: every number is computed in Python by the core functions the app uses (`state`), and what a person
changes in a view (the step of the probe slider, the head shown large, the way heads are knocked out) is
synced back to Python, which computes again. anywidget is an optional extra: ``import fatstudio`` never
imports it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .views import NotebookRun

INSTALL = 'fatstudio\'s notebook views need anywidget: pip install "fatstudio[notebook]"'


def open_run(path: str | Path) -> NotebookRun:
    """The run at ``path`` (a folder, or a name in the runs folder, as `Run.open` reads it) for a notebook.
    ImportError saying how to install the views when anywidget is missing; ValueError for a folder that is not
    a run."""
    try:
        import anywidget  # noqa: F401
    except ImportError:
        raise ImportError(INSTALL) from None
    from .views import NotebookRun

    return NotebookRun(path)


__all__ = ["open_run", "INSTALL"]
