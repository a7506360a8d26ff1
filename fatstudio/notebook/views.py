"""The notebook views: anywidget widgets of one run (`NotebookRun`), drawn by ``js/views.js``.

Each widget holds what it shows as synced traits (`state`); a change made in the page (``step``, ``layer`` and
``head``, ``kind``) comes back to Python, which reads or computes that step's numbers again. A file that cannot be
read shows its message in the view (``error``), never a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from ..core.inference.attention_maps import AttentionMaps
from ..core.inference.loaded import LoadedModel
from ..core.inspect.ablation import KINDS, knockout_table
from ..core.inspect.probes import load_probe_lens, probe_path, probe_scores
from ..core.inspect.token_loss import token_losses
from ..core.names import MapName
from ..core.runs.folder import Run, load_at_step
from . import state

JS = Path(__file__).parent / "js"
TOKENS_SHOWN = 2000  # the validation tokens the loss-per-token view holds by default (the mean is over all)


class View(anywidget.AnyWidget):
    """What every view has: its kind (``view``, which drawing of `JS` it is), a title and an error message."""

    _esm = JS / "views.js"
    _css = JS / "views.css"
    view = t.Unicode().tag(sync=True)
    title = t.Unicode().tag(sync=True)
    error = t.Unicode().tag(sync=True)
    palette: t.List[Any] = t.List(default_value=state.PALETTE).tag(sync=True)


class LossCurves(View):
    """The training loss at every step and the validation loss at every evaluation (metrics.jsonl)."""

    train: t.List[Any] = t.List().tag(sync=True)
    val: t.List[Any] = t.List().tag(sync=True)

    def __init__(self, run: Run):
        super().__init__(view="loss", title=f"{run.name}: loss (nats)", **state.loss_curves(run.metrics()))


class StepView(View):
    """A view of one of the run's probe steps (``steps``; the slider sets ``step``, and Python reads it)."""

    steps = t.List(t.Int()).tag(sync=True)
    step = t.Int().tag(sync=True)

    def __init__(self, run: Run, view: str, step: int | None = None, **kw: Any):
        steps = run.probe_steps()
        super().__init__(view=view, steps=steps, **kw)
        self.run = run
        if not steps:
            self.error = f"{run.name} has no probe maps saved (none of its evaluations ran yet)."
            return
        self.observe(lambda change: self.show(change["new"]), "step")
        first = steps[-1] if step is None else step
        if first == self.step:
            self.show(first)
        self.step = first

    def show(self, step: int) -> None:
        try:
            self.error = ""
            self.read(step)
        except ValueError as e:
            self.error = str(e)

    def read(self, step: int) -> None:
        raise NotImplementedError


class AttentionView(StepView):
    """The attention grid (layers × heads and their mean, as thumbnails titled with entropy and head scores)
    and one head large, for the probe step ``step``; clicking a thumbnail sets ``layer`` and ``head``
    (`MEAN_HEAD`: the mean). It opens on the most informative head (`AttentionMaps.focused_head`) of the step it
    first shows."""

    kind = t.Unicode().tag(sync=True)
    layer = t.Int().tag(sync=True)
    head = t.Int().tag(sync=True)
    grid: t.List[Any] = t.List().tag(sync=True)
    matrix: t.List[Any] = t.List().tag(sync=True)
    query_tokens = t.List(t.Unicode()).tag(sync=True)
    key_tokens = t.List(t.Unicode()).tag(sync=True)

    def __init__(self, run: Run, step: int | None = None):
        self.maps: AttentionMaps | None = None
        super().__init__(run, "attention", step, title=f"{run.name}: attention of the training probe")
        self.observe(lambda change: self.show_head(), ["layer", "head"])

    def read(self, step: int) -> None:
        maps = self.run.load_probe(step)
        kind = maps.lesson_kind()
        first = self.maps is None
        self.maps = maps
        with self.hold_sync():
            self.kind = kind
            self.grid = state.attention_grid(maps, kind, probe_scores(probe_path(self.run.path, step)))
            if first:
                self.layer, self.head = maps.focused_head(kind)
            self.show_head()

    def show_head(self) -> None:
        if self.maps is None:
            return
        name = MapName(self.kind, self.layer)  # type: ignore[arg-type]
        with self.hold_sync():
            self.matrix = self.maps.matrix(name, self.head).tolist()
            self.query_tokens = state.labels(self.maps.query_tokens(name))
            self.key_tokens = state.labels(self.maps.key_tokens(name))


class LensView(StepView):
    """The logit lens saved with the probe step ``step``: each layer's top token and its probability."""

    tokens = t.List(t.Unicode()).tag(sync=True)
    rows: t.List[Any] = t.List().tag(sync=True)

    def __init__(self, run: Run, step: int | None = None):
        super().__init__(run, "lens", step, title=f"{run.name}: logit lens of the training probe")

    def read(self, step: int) -> None:
        found = state.lens(load_probe_lens(probe_path(self.run.path, step)))
        if not found["rows"]:
            self.error = (f"no logit lens is saved with step {step:,} (a run trained before it was saved, or a "
                          "classifier).")
        self.set_trait("tokens", found["tokens"])
        self.rows = found["rows"]


class TokenLossView(View):
    """Every validation token's loss in nats, as coloured text (the first ``limit`` tokens; the mean is over
    all), of the weights at ``step``."""

    step = t.Int().tag(sync=True)
    tokens = t.List(t.Unicode()).tag(sync=True)
    loss = t.List(t.Float()).tag(sync=True)
    mean = t.Float().tag(sync=True)
    n_tokens = t.Int().tag(sync=True)

    def __init__(self, loaded: LoadedModel, name: str, limit: int = TOKENS_SHOWN):
        super().__init__(view="token_loss", title=f"{name}: loss per validation token at step {loaded.step:,}",
                         step=loaded.step, **state.token_loss(token_losses(loaded), limit))


class KnockoutView(View):
    """Every head and MLP knocked out alone (``kind``: zero, mean or resample, chosen in the page), the
    validation loss and its rise, of the weights at ``step``."""

    step = t.Int().tag(sync=True)
    kind = t.Unicode().tag(sync=True)
    kinds: t.List[Any] = t.List(default_value=list(KINDS)).tag(sync=True)
    baseline = t.Float().tag(sync=True)
    rows: t.List[Any] = t.List().tag(sync=True)

    def __init__(self, loaded: LoadedModel, name: str, kind: str = "zero"):
        self.loaded = loaded
        super().__init__(view="knockout", title=f"{name}: heads and MLPs knocked out at step {loaded.step:,}",
                         step=loaded.step)
        self.observe(lambda change: self.measure(), "kind")
        self.kind = kind

    def measure(self) -> None:
        try:
            found = state.knockout(knockout_table(self.loaded, self.kind))  # type: ignore[arg-type]
        except ValueError as e:
            self.error = str(e)
            return
        with self.hold_sync():
            self.error, self.baseline, self.rows = "", found["baseline"], found["rows"]


class NotebookRun:
    """A run folder's views for a notebook: ``run.loss_curves()``, ``run.attention(step)``, ``run.lens(step)``,
    ``run.token_loss(step)``, ``run.knockout(step, kind)``. A step None is the run's last probe step (attention,
    lens) or its last checkpoint (token loss, knock-out: the weights of a saved snapshot or checkpoint)."""

    def __init__(self, path: str | Path):
        self.run = Run.open(path)
        self._loaded: dict[int | None, LoadedModel] = {}

    @property
    def probe_steps(self) -> list[int]:
        return self.run.probe_steps()

    def model(self, step: int | None = None) -> LoadedModel:
        """The run's model at ``step`` (`load_at_step`), loaded once."""
        if step not in self._loaded:
            self._loaded[step] = load_at_step(self.run, step)
        return self._loaded[step]

    def loss_curves(self) -> LossCurves:
        return LossCurves(self.run)

    def attention(self, step: int | None = None) -> AttentionView:
        return AttentionView(self.run, step)

    def lens(self, step: int | None = None) -> LensView:
        return LensView(self.run, step)

    def token_loss(self, step: int | None = None, limit: int = TOKENS_SHOWN) -> TokenLossView:
        return TokenLossView(self.model(step), self.run.name, limit)

    def knockout(self, step: int | None = None, kind: str = "zero") -> KnockoutView:
        return KnockoutView(self.model(step), self.run.name, kind)

    def __repr__(self) -> str:
        return f"NotebookRun({str(self.run.path)!r}, probe steps {self.probe_steps})"


__all__ = ["NotebookRun", "LossCurves", "AttentionView", "LensView", "TokenLossView", "KnockoutView", "TOKENS_SHOWN"]
