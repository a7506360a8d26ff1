"""The focus: what every view that computes from a model shows (napari's viewer model has its layers; ours has one
model in question). It says which run, which weights (a step; "live" while the run trains) and which text.

Opening, importing, training, fine-tuning and sweeping change it here, in one place (`Workspace`), and the views
follow its ``changed`` signal: the Prompt tab, the Attention tab with its lens, attribution, knock-out table,
patching and head ablation, the Token loss tab and the Paper tab's forward pass all compute from `loaded`, and
each says `words` in its header (a label whose objectName ends in ``FocusLabel``). A view that looks at something
else on purpose (an earlier checkpoint chosen in it) says so beside those words.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from psygnal import Signal

if TYPE_CHECKING:
    from ..inference.loaded import LoadedModel


def run_name(run: str) -> str:
    """A run as the runs list shows it: its folder's name."""
    return Path(run).name


class Focus:
    """The run (``run``, its folder; None: no run), its weights (``loaded``, the `LoadedModel` the views compute
    from; None: none yet) at ``step``, whether they are a snapshot of the run still training (``live``) or
    imported (``imported``), and the text in question (``text``, the Prompt tab's).

    Signals: ``changed(focus)`` when the run or the weights change, ``text_changed(text)`` when the text does."""

    changed = Signal(object)
    text_changed = Signal(str)

    def __init__(self) -> None:
        self.run: str | None = None
        self.loaded: LoadedModel | None = None
        self.live = False
        self.imported = False
        self.training = False  # the run trains now (its weights: a snapshot, or none yet)
        self.loading = False  # the run's weights are being read
        self.text = ""

    # ---- what it is --------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The run's name as the runs list shows it ("" for none)."""
        return run_name(self.run) if self.run else ""

    @property
    def step(self) -> int | None:
        """The step of the weights in focus (None: no weights)."""
        return self.loaded.step if self.loaded is not None else None

    def weights_words(self) -> str:
        """The weights in words: "step 1,500", "live weights of step 900 (training goes on)", …"""
        if self.loaded is None:
            if self.training:
                return "training: no weights taken yet (Prompt current weights takes them)"
            return "loading its weights…" if self.loading else "no weights"
        if self.imported:
            return f"imported weights (step {self.loaded.step:,})" if self.loaded.step else "imported weights"
        if self.live:
            return f"live weights of step {self.loaded.step:,}" + (" (training goes on)" if self.training else "")
        return f"step {self.loaded.step:,}"

    def words(self) -> str:
        """The focus in words a user reads: the run as the runs list shows it and the step."""
        if self.run is None:
            if self.loaded is None:
                return "No model: open a run in the runs list, or train one."
            return f"{self.loaded.label or 'a model'} · {self.weights_words()}"
        return f"{self.name} · {self.weights_words()}"

    def is_run(self, run: str | None) -> bool:
        return run is not None and self.run is not None and Path(run) == Path(self.run)

    # ---- changing it (the workspace's commands call these) ------------------------------------------------
    def show(self, loaded: LoadedModel | None, run: str | None = None, *, live: bool = False,
             imported: bool = False) -> None:
        """The views show ``loaded``, the weights of ``run`` (None: a model of no run folder, or nothing)."""
        self.run = run if run is not None or loaded is not None else None
        self.loaded, self.live, self.imported, self.loading = loaded, live, imported, False
        self.changed.emit(self)

    def open(self, run: str, imported: bool = False) -> None:
        """The views show ``run``, whose weights are being read (`show` brings them)."""
        self.run, self.loaded, self.live, self.imported, self.loading = run, None, False, imported, True
        self.training = False
        self.changed.emit(self)

    def train(self, run: str) -> None:
        """The views show ``run``, which trains now: no weights until a snapshot or its end."""
        self.run, self.loaded, self.live, self.imported, self.loading, self.training = run, None, False, False, False, True
        self.changed.emit(self)

    def trained(self) -> None:
        """The run in focus has stopped training (its weights come with `show`)."""
        if self.training:
            self.training = False
            self.changed.emit(self)

    def clear(self) -> None:
        """Nothing in focus (the run was deleted)."""
        self.run, self.loaded, self.live, self.imported, self.loading, self.training = None, None, False, False, False, False
        self.changed.emit(self)

    def set_text(self, text: str) -> None:
        if text != self.text:
            self.text = text
            self.text_changed.emit(text)
