"""The Features tab's state, outside any window: the focused run's saved dictionaries (SAEs and transcoders,
`inspect.features.dictionary`), the one chosen with its feature statistics, the feature in question and its
dashboard, the last training's events and quality, an attribution graph of a prompt and an intervention's result.

It follows the focus (`Focus`): other weights in focus and everything computed from the previous ones goes (its
jobs are cancelled, ``cleared`` says so; a training goes on, saving into its own run) and the new run's
dictionaries are listed. All work runs in the one job
system (`Jobs`) under the keys below, so a newer request supersedes an older one of its kind; the heavy modules
(torch, the features' core) are imported in the jobs' threads only.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psygnal import Signal

from ..inspect.features.points import trainable
from .focus import Focus
from .jobs import Jobs, Status

if TYPE_CHECKING:
    from ..inference.loaded import LoadedModel
    from ..inspect.features.dictionary import Dictionary

LIST, TRAIN, DASHBOARD, GRAPH, EDIT = ("features-list", "features-train", "features-dashboard", "features-graph",
                                       "features-edit")
KEYS = (LIST, TRAIN, DASHBOARD, GRAPH, EDIT)


@dataclass(frozen=True)
class Saved:
    """A dictionary saved in the run's features/ folder: its ``folder``, its ``point`` (`points_of`'s NAME:
    "mlp/1", "self/1/resid_post"), the ``step`` of the weights it was trained on, its kind, its one-line
    description and quality (None: not measured), or why it cannot be read (``error``)."""

    folder: str
    point: str = ""
    step: int = 0
    kind: str = ""
    words: str = ""
    quality: dict | None = None
    error: str = ""


@dataclass
class Trained:
    """A training's last event: the dictionary, saved in ``folder``."""

    dictionary: Dictionary
    folder: str

    @property
    def quality(self) -> dict:
        return dict(self.dictionary.info.get("quality") or {})


@dataclass
class Chosen:
    """The dictionary in question: ``saved`` (its listing), the ``dictionary``, the weights it was trained on
    (``loaded``), the feature statistics of the validation split (``stats``, the dashboard core's cache) and, for a
    glass-box run with known features, which it recovered (``recovered``; None for any other run)."""

    saved: Saved
    dictionary: Dictionary
    loaded: LoadedModel
    stats: Any
    recovered: Any = None


@dataclass
class Shown:
    """A feature's dashboard (0-based ``feature``; the dashboard core's `Dashboard`) and its activations on the
    focus's text (``on_text``: `TextActivations`; None without one, ``note`` saying why)."""

    feature: int
    dashboard: Any
    on_text: Any
    note: str = ""


@dataclass(frozen=True)
class EditTarget:
    """What an intervention acts on: feature ``feature`` (0-based) of the dictionary in ``folder`` at
    ``position`` (None: every position) of ``prompt``, with the run's weights of ``step``; ``words`` names it.
    From a graph's node: the graph's ``target`` token and the node's ``direct_effect`` A[logit, s] on its logit."""

    folder: str
    feature: int
    prompt: str
    position: int | None
    step: int
    words: str
    target: int | None = None
    direct_effect: float | None = None


@dataclass(frozen=True)
class GraphRequest:
    """What a graph was asked for: the prompt, the target token (None: the model's top prediction), and the
    run's weights of ``step`` with its transcoders of that step for every MLP layer (`saved_transcoders`)."""

    prompt: str
    target: str | None
    step: int


def trainable_points(names: list[str]) -> list[tuple[str, str]]:
    """(label, point) of what a dictionary can be trained on, given a model's hook point names: each MLP as a
    transcoder ("mlp/1", from its in to its out), then each point of the residual stream (`points.trainable`:
    resid_*, in, out, sum, embed, final) as an SAE."""
    mlps = dict.fromkeys(n.rsplit("/", 1)[0] for n in names if n.endswith("/in") and "mlp" in n.split("/")[0])
    points = [(f"{m} · transcoder (in → out)", m) for m in mlps]
    return points + [(f"{n} · SAE", n) for n in names if trainable(n)]


def default_point(points: list[str]) -> str | None:
    """The residual stream after the middle layer (self/1/resid_post of a 4-layer model), else the first point."""
    resid = [p for p in points if p.endswith("/resid_post")]
    return resid[(len(resid) - 1) // 2] if resid else (points[0] if points else None)


class Features:
    """See the module. State: ``run`` and ``loaded`` (the focus's), ``saved`` (`Saved`, listed), ``steps`` (the
    run's saved weight steps), ``picked`` (the `Saved` chosen), ``chosen`` (`Chosen` once read, or None),
    ``feature`` (0-based; None: none), ``dashboard``, ``graph``, ``edit`` (the latest results, or None),
    ``quality`` (the last training's), ``training`` (the run folder a dictionary is being trained for, None:
    none; a training goes on when the focus moves, and saves into its own run).

    Signals: ``cleared()`` (the focus changed: all of the above but the training went), ``listed(saved)``,
    ``train_event(event)`` (each event of the training), ``train_ended(status, words)`` (its end; the words say
    what a cancel left), ``chosen_changed(chosen)``, ``reading(fraction, message)`` (the chosen dictionary's
    features being read), ``dashboard_ready(dashboard)``, ``graph_ready(graph)``, ``edit_ready(result)``,
    ``failed(key, message)`` (a job failed, or cannot start: the message in words)."""

    cleared = Signal()
    listed = Signal(list)
    train_event = Signal(object)
    train_ended = Signal(object, str)
    chosen_changed = Signal(object)
    reading = Signal(float, str)
    dashboard_ready = Signal(object)
    graph_ready = Signal(object)
    edit_ready = Signal(object)
    failed = Signal(str, str)

    def __init__(self, focus: Focus, jobs: Jobs):
        self.focus, self.jobs = focus, jobs
        self.training: str | None = None  # the run a dictionary is being trained for (None: none)
        self._reset()
        focus.changed.connect(self._focus_changed)
        self._focus_changed(focus)

    def _reset(self) -> None:
        self.run: str | None = None
        self.loaded: LoadedModel | None = None
        self.saved: list[Saved] = []
        self.steps: list[int] = []
        self.picked: Saved | None = None  # the dictionary chosen (`choose`), read or being read
        self.chosen: Chosen | None = None
        self._trained: str | None = None  # the folder a training just saved into, chosen once listed
        self.feature: int | None = None
        self.dashboard: Any = None
        self.graph: Any = None
        self.graph_of: GraphRequest | None = None  # what the graph shown (or being built) was asked for
        self.edit: Any = None
        self.quality: dict | None = None

    # ---- the focus ---------------------------------------------------------------------------------------
    def _focus_changed(self, focus: Focus) -> None:
        if focus.loaded is self.loaded and focus.run == self.run:
            return
        for key in KEYS:
            if key != TRAIN:  # a training goes on, for its own run
                self.jobs.cancel(key)
        self._reset()
        self.run, self.loaded = focus.run, focus.loaded
        self.cleared.emit()
        self.refresh()

    def refresh(self) -> None:
        """List the focused run's saved dictionaries and weight steps (in a job; ``listed`` brings them)."""
        if self.run is None or self.loaded is None:
            self.saved, self.steps = [], []
            self.listed.emit([])
            return
        self.jobs.submit(LIST, _list, self.run, on_result=self._listed, on_error=lambda m: self.failed.emit(LIST, m))

    def _listed(self, found: tuple[list[Saved], list[int]]) -> None:
        self.saved, self.steps = found
        self.listed.emit(self.saved)
        trained, self._trained = self._trained, None
        saved = next((s for s in self.saved if s.folder == trained), None)
        if saved is not None:  # a training just saved it: it is the one in question
            self.choose(saved)

    def no_weights(self) -> str | None:
        """Why nothing can be trained or shown for the focus, in words (None: it can)."""
        if self.loaded is None:
            return "Open a run with saved weights (in the runs list) to train or look at its features."
        if self.run is None:
            return "These weights belong to no run folder: a dictionary is saved in its run's features/ folder."
        if not self.steps:
            return "This run has no saved weights yet: a dictionary is trained on a step whose weights are saved."
        return None

    # ---- training ----------------------------------------------------------------------------------------
    def train(self, point: str, step: int, **options: Any) -> bool:
        """Train a dictionary on ``point`` of the run's weights at ``step`` (`train_dictionary`'s ``options``:
        d_f_mult, k, tokens, seed…), saved into the run's features/ folder; False (and ``failed``) if it cannot
        start."""
        problem = self.no_weights()
        if problem is None and step not in self.steps:
            problem = f"The run has no saved weights of step {step:,}."
        if problem is not None or self.run is None:
            self.failed.emit(TRAIN, problem or "")
            return False
        if self.training is not None:
            self.failed.emit(TRAIN, "A dictionary is being trained: wait for it, or cancel it.")
            return False
        self.quality, self.training = None, self.run
        self.jobs.submit(TRAIN, _train, self.run, self.loaded, point, step, options, on_item=self._take,
                         on_error=lambda m: self.failed.emit(TRAIN, m), on_end=self._train_end)
        return True

    def cancel_training(self) -> bool:
        """Stop the training (nothing is saved)."""
        if self.training is None:
            return False
        self.jobs.cancel(TRAIN)
        self.training = None
        self.train_ended.emit(Status.CANCELLED, "Training cancelled: nothing was saved.")
        return True

    def _take(self, event: Any) -> None:
        if isinstance(event, Trained) and self.training == self.run:  # still the run in focus: choose it
            self.quality, self._trained = event.quality, event.folder
            self.refresh()
        self.train_event.emit(event)

    def _train_end(self, status: Status) -> None:
        self.training = None
        self.train_ended.emit(status, "")

    # ---- the dictionary and the feature --------------------------------------------------------------------
    def choose(self, saved: Saved | None) -> None:
        """The dictionary in question (None: none): loaded with its weights' feature statistics in a job."""
        self.picked, self.chosen, self.feature, self.dashboard, self.edit = saved, None, None, None, None
        self.chosen_changed.emit(None)
        if saved is None or self.run is None:
            return
        if saved.error:
            self.failed.emit(DASHBOARD, saved.error)
            return
        self.jobs.submit(DASHBOARD, _choose, self.run, self.loaded, saved, progress=True, on_result=self._chosen,
                         on_progress=lambda f, m: self.reading.emit(f, m),
                         on_error=lambda m: self.failed.emit(DASHBOARD, m))

    def _chosen(self, chosen: Chosen) -> None:
        self.chosen = chosen
        self.chosen_changed.emit(chosen)

    def choose_feature(self, feature: int | None) -> None:
        """The feature in question (0-based; None: none): its dashboard, with its activation on the focus's text."""
        self.feature, self.dashboard = feature, None
        if feature is None or self.chosen is None:
            return
        self.jobs.submit(DASHBOARD, _dashboard, self.chosen, feature, self.focus.text,
                         on_result=self._dashboard, on_error=lambda m: self.failed.emit(DASHBOARD, m))

    def _dashboard(self, dashboard: Any) -> None:
        self.dashboard = dashboard
        self.dashboard_ready.emit(dashboard)

    # ---- the graph and interventions ----------------------------------------------------------------------
    def graph_request(self, prompt: str, target: str | None) -> GraphRequest | str:
        """What a graph of ``prompt`` is built from (the weights of the chosen dictionary's step, else the
        focus's), or why it cannot be built, in words."""
        problem = self.no_weights()
        if problem is not None or self.loaded is None:
            return problem or ""
        from ..inspect.features.replacement import check_model  # a model is loaded: torch is imported

        try:
            check_model(self.loaded.model)
        except ValueError as e:
            return f"{str(e)[0].upper()}{str(e)[1:]}"
        if not prompt:
            return "Write a prompt to trace."
        return GraphRequest(prompt, target or None, self.chosen.saved.step if self.chosen else self.loaded.step)

    def build_graph(self, prompt: str, target: str | None = None) -> bool:
        """Trace ``prompt``'s ``target`` logit through the transcoders (in a job; ``graph_ready`` brings it)."""
        request = self.graph_request(prompt, target)
        self.graph = self.edit = None
        if isinstance(request, str):
            self.failed.emit(GRAPH, request)
            return False
        self.graph_of = request
        self.jobs.submit(GRAPH, _graph, self.run, self.loaded, request, on_result=self._graph,
                         on_error=lambda m: self.failed.emit(GRAPH, m))
        return True

    def _graph(self, graph: Any) -> None:
        self.graph = graph
        self.graph_ready.emit(graph)

    def node_target(self, node: Any) -> EditTarget | None:
        """What an intervention on a node of the graph shown acts on: a feature node's feature of its layer's
        transcoder at its position, on the graph's prompt and weights (None: not a feature node)."""
        request = self.graph_of
        if request is None or self.run is None or getattr(node, "kind", None) != "feature":
            return None
        from ..inspect.features.dictionary import dictionary_folder  # a graph is shown: torch is imported

        folder = str(dictionary_folder(self.run, f"mlp/{node.layer}", request.step))
        graph = self.graph
        index = next((i for i, n in enumerate(graph.nodes) if n is node), None) if graph is not None else None
        return EditTarget(folder, node.feature, request.prompt, node.position,
                          request.step, f"feature {node.feature + 1} of mlp/{node.layer} at position "
                          f"{node.position + 1} (“{node.token}”)",
                          None if index is None else graph.target,
                          None if index is None else float(graph.adjacency[graph.target_index, index]))

    def feature_target(self, feature: int, prompt: str) -> EditTarget | None:
        """What an intervention on feature ``feature`` of the chosen dictionary acts on: every position of
        ``prompt``, with the dictionary's weights (None: no dictionary chosen)."""
        c = self.chosen
        if c is None:
            return None
        return EditTarget(c.saved.folder, feature, prompt, None, c.saved.step,
                          f"feature {feature + 1} of {c.saved.point} (step {c.saved.step:,})")

    def intervene(self, target: EditTarget, value: float = 0.0, everywhere: bool = False) -> bool:
        """Set ``target``'s feature to ``value`` (0: zero it) at its position (every position if ``everywhere``
        or it has none) and rerun its prompt (in a job; ``edit_ready`` brings the probabilities before and
        after)."""
        if self.loaded is None or self.run is None or not target.prompt:
            self.failed.emit(EDIT, "Write a prompt, with a run's weights in focus, to intervene on a feature.")
            return False
        position = None if everywhere else target.position
        self.jobs.submit(EDIT, _intervene, self.run, self.loaded, target, value, position, on_result=self._edited,
                         on_error=lambda m: self.failed.emit(EDIT, m))
        return True

    def _edited(self, result: Any) -> None:
        self.edit = result
        self.edit_ready.emit(result)


# ---- in the jobs' threads ------------------------------------------------------------------------------------
def weights(run: str, loaded: LoadedModel | None, step: int) -> LoadedModel:
    """The run's weights of ``step``: those in focus if they are that step's, else read from the run folder."""
    if loaded is not None and loaded.step == step:
        return loaded
    from ..runs.folder import Run

    return Run.open(run).load_model(step=step)


def _list(run: str) -> tuple[list[Saved], list[int]]:
    """The run's saved dictionaries (a damaged one listed with why) and its weight steps."""
    from ..inspect.features.dictionary import load, saved_dictionaries
    from ..runs.folder import Run

    listed = []
    for folder in saved_dictionaries(run):
        try:
            d = load(folder)
        except ValueError as e:
            listed.append(Saved(str(folder), words=f"{folder.name}: cannot be read", error=str(e)))
            continue
        point = d.point_in.rsplit("/", 1)[0] if d.kind == "transcoder" else d.point_in
        listed.append(Saved(str(folder), point, int(d.info.get("step", 0)), d.kind, d.describe(),
                            d.info.get("quality")))
    try:
        steps = Run.open(run).weight_steps()
    except ValueError:  # the run went, or cannot be read: no steps to train on
        steps = []
    return listed, steps


def _train(run: str, loaded: LoadedModel | None, point: str, step: int, options: dict) -> Iterator[Any]:
    """`train_dictionary`'s events; the last, the dictionary, saved into the run's features/ folder (`Trained`)."""
    from ..inspect.features.dictionary import Dictionary, dictionary_folder
    from ..inspect.features.training import train_dictionary

    model = weights(run, loaded, step)
    for event in train_dictionary(model, point, **options):
        d = getattr(event, "dictionary", None)
        if isinstance(d, Dictionary):
            d.info.update(run=Path(run).name, step=step)
            yield event
            yield Trained(d, str(d.save(dictionary_folder(run, point, step))))
        else:
            yield event


def _choose(run: str, loaded: LoadedModel | None, saved: Saved, progress: Any = None) -> Chosen:
    """The dictionary of ``saved`` with every feature's activations on its weights' validation split, and for a
    glass-box run which of its known features it recovered."""
    from ..inspect.features.dashboard import feature_activations
    from ..inspect.features.dictionary import load

    d = load(saved.folder)
    model = weights(run, loaded, saved.step)
    stats = feature_activations(model, d, progress=progress)
    stats.stats()  # computed here once, the list's later calls a lookup
    return Chosen(saved, d, model, stats, _recovered(d, run))


def _recovered(d: Dictionary, run: str) -> Any:
    """Which of a glass-box run's known features ``d`` recovered (`glass_box.Recovery`; a dictionary that cannot
    be compared with them, why, in words); None for a run without known features."""
    from ..runs.folder import Run
    from ..runs.glass_box import known_features, recovered_features

    r = Run.open(run)
    if known_features(r) is None:
        return None
    try:
        return recovered_features(d, r)
    except ValueError as e:
        return str(e)


def _dashboard(chosen: Chosen, feature: int, text: str) -> Shown:
    """Feature ``feature``'s dashboard and its activations on ``text`` (a text the model cannot read, said why)."""
    from ..inspect.features.dashboard import text_activations

    dashboard = chosen.stats.dashboard(feature)
    if not text:
        return Shown(feature, dashboard, None, "Write a text in the Prompt tab to see this feature on it.")
    try:
        return Shown(feature, dashboard, text_activations(chosen.loaded, chosen.dictionary, text))
    except ValueError as e:
        return Shown(feature, dashboard, None, f"The Prompt text: {e}")


def _graph(run: str, loaded: LoadedModel | None, request: GraphRequest) -> Any:
    """The pruned attribution graph of the request, through the run's transcoders of its step."""
    from ..inspect.features.graph import graph_for_text, prune, saved_transcoders

    model = weights(run, loaded, request.step)
    transcoders = saved_transcoders(run, request.step, model.config.model.L)
    return prune(graph_for_text(model, transcoders, request.prompt, request.target))


def _intervene(run: str, loaded: LoadedModel | None, target: EditTarget, value: float,
               position: int | None) -> Any:
    """`interventions.intervene`: the target's prompt scored as the model is and with the feature set."""
    from ..inspect.features.dictionary import load
    from ..inspect.features.interventions import FeatureEdit, intervene

    edit = FeatureEdit(load(target.folder), target.feature, value, position)
    return intervene(weights(run, loaded, target.step), target.prompt, [edit], target.target, target.direct_effect)


__all__ = ["Features", "Saved", "Trained", "Chosen", "Shown", "EditTarget", "GraphRequest", "trainable_points", "default_point",
           "KEYS"]
