"""Right-click a head in the Attention panel's grid: "Ablate this head (zero)" or "(mean)" (`HeadAblationView.menu`)
knocks it out of the weights chosen in the knock-out table (the model loaded, or a step the run keeps:
`AblationView.chosen_weights`, handed over with `set_weights`) and scores the text shown with and without it
(`core.inspect.ablation.text_ablation`, in a worker thread on a copy of the weights). Weights other than the focus's
are said before the click: in the menu's items and in ``headAblationFocusLabel``. ``headAblationView`` shows each
token's probability before and after and the change Δp (`widgets.token_changes`: the text coloured by Δp, red a
rise, blue a fall, and a table, position by position); CSV export."""
from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ....core.data.tokenization import SPECIALS
from ....core.inference.attention_maps import AttentionMaps
from ....core.inference.prompting import display_token
from ....core.names import ComponentName
from ...widgets.focus_label import FocusLabel
from ...widgets.saving import save_with_dialog, show_message
from ...widgets.token_changes import TokenChangeView, p_text
from .ablation import Where, weights_at, weights_words

if TYPE_CHECKING:
    from ....core.app.jobs import Job
    from ....core.app.workspace import Workspace
    from ....core.inference.loaded import LoadedModel
    from ....core.inspect.ablation import AblationKind, TextAblation

MENU_KINDS: tuple[tuple[AblationKind, str], ...] = (("zero", "Ablate this head (zero)"),
                                                    ("mean", "Ablate this head (mean over the validation batch)"))


def text_of(maps: AttentionMaps) -> tuple[str, str | None]:
    """The text the maps were made of, without the special tokens: (the text, and an edt's source; else None)."""
    plain = lambda tokens: "".join(t for t in tokens if t not in SPECIALS)
    return plain(maps.tokens), plain(maps.context_tokens) if maps.context_tokens else None


def ablate_on_text(loaded, name: ComponentName, text: str, kind: AblationKind, source: str | None,
                   where: Where = None) -> TextAblation:
    """In a worker: `text_ablation` with the weights `weights_at` ``where`` (a copy of ``loaded`` for None: the
    hooks touch no model the app prompts)."""
    from ....core.inspect.ablation import text_ablation

    return text_ablation(weights_at(loaded, where), name, text, kind, source)


class HeadAblationView(QWidget):
    """A summary line, the text coloured by Δp (``headAblationText``) and the per-position table
    (``headAblationTable``); `menu` offers a head's ablations on the weights `set_weights` gave.
    ``showRequested``: an ablation was asked for (the view wants to be seen)."""

    showRequested = Signal()

    def __init__(self, workspace: Workspace, parent=None):
        super().__init__(parent)
        self.workspace = workspace
        self.setObjectName("headAblationView")
        self.result: TextAblation | None = None
        self.where: Where | Literal[False] = False  # the weights ablated (`set_weights`; False: none)
        self.loaded = None  # the model loaded (the weights for ``where`` None)
        self._call: Job | None = None
        self._step = 0  # the step of the weights ablated
        self._of: LoadedModel | None = None  # the focus's weights when the result was asked for: other weights in focus, it goes
        self.summary = QLabel(objectName="headAblationSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.csvButton = QPushButton("Export CSV…", objectName="headAblationCsvButton")
        self.csvButton.clicked.connect(self._export)
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.csvButton, 0, Qt.AlignmentFlag.AlignTop)
        self.changes = TokenChangeView("headAblation")  # headAblationText, headAblationTable
        self.text, self.table = self.changes.text, self.changes.table
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.focusLabel = FocusLabel(self.workspace.focus, "headAblationFocusLabel")
        lay.addWidget(self.focusLabel)
        lay.addLayout(top)
        lay.addWidget(self.changes, 1)
        self._clear()
        workspace.focus.changed.connect(self._focus_changed)

    def _clear(self) -> None:
        self.result = None
        self.changes.clear()
        self.say("Right-click a head in the grid and choose “Ablate this head” to see how the text's token "
                 "probabilities change without it.")

    def _focus_changed(self, focus) -> None:
        """Other weights in focus: the result (and one being measured) was of the text the previous model was
        shown, so it goes, as that text's maps do."""
        if focus.loaded is self._of:
            return
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self._of = None
        self._clear()

    # ---- the weights and the menu ---------------------------------------------------------------------------
    def set_weights(self, where: Where | Literal[False], loaded) -> None:
        """The weights a head is knocked out of (`AblationView.chosen_weights`; None: ``loaded``, False: none),
        said in the header when they are not the focus's."""
        self.where, self.loaded = where, loaded
        whose = self._whose()
        self.focusLabel.set_own(None if whose is None else f"{whose}, chosen in the knock-out table")

    def _whose(self) -> str | None:
        """The weights ablated in words when they are not the focus's (None: they are, or there are none)."""
        return None if self.where is False else weights_words(self.where, self.loaded, self.workspace.focus)

    def menu(self, name: ComponentName, maps: AttentionMaps, parent: QWidget) -> QMenu:
        """The context menu of head ``name`` ("self/0/1") of ``maps`` (the text shown): its ablations, each saying
        whose weights it uses when they are not the focus's."""
        menu = QMenu(parent)
        menu.setObjectName("headMenu")
        whose = self._whose()
        for kind, words in MENU_KINDS:
            action = menu.addAction(words + (f" · {whose}" if whose else ""))
            action.setEnabled(self.where is not False)
            action.setToolTip("" if self.where is not False else "Load a model first.")
            action.triggered.connect(lambda _checked=False, k=kind: self.ablate(name, k, maps))
        return menu

    def ablate(self, name: ComponentName, kind: AblationKind, maps: AttentionMaps | None) -> None:
        """Knock head ``name`` out by ``kind`` and score the text of ``maps``, in a worker thread."""
        self.showRequested.emit()
        if self.where is False or maps is None:
            self.say("Load a model and show a text's attention first.", error=True)
            return
        text, source = text_of(maps)
        self.start(self.loaded, name, text, kind, source, self.where)

    # ---- measuring ----------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._call is not None and self._call.running

    def start(self, loaded, name: ComponentName, text: str, kind: AblationKind, source: str | None, where: Where = None) -> None:
        """Score ``text`` with head ``name`` knocked out, with the weights `weights_at` ``where``, in a worker."""
        if self._call is not None:
            self._call.cancel()  # a newer ablation supersedes it
        self._step = where[1] if where else loaded.step
        self._of = self.workspace.focus.loaded
        self.say(f"Scoring the text with {name.label} knocked out ({kind})…")
        self._call = self.workspace.jobs.submit("head-ablation", ablate_on_text, loaded, name, text, kind, source, where,
                                                on_result=self._on_result, on_error=self._on_error)

    def _on_result(self, result: TextAblation) -> None:
        self._call, self.result = None, result
        self.changes.show_change(result)
        deltas = result.delta
        scored = [d for d in deltas if d is not None]
        worst = max(range(len(deltas)), key=lambda i: abs(deltas[i] or 0.0))
        mean = sum(scored) / len(scored) if scored else 0.0
        self.say(f"<b>{result.component.label}</b> knocked out ({result.kind}, weights of step {self._step:,}): "
                 f"the text's {len(scored)} scored tokens change by Δp = {mean:+.4f} on average; most at position "
                 f"{worst + 1} "
                 f"(<code>{html.escape(display_token(result.tokens[worst]))}</code>, {p_text(result.before[worst])} → "
                 f"{p_text(result.after[worst])}). Red: p rose, blue: p fell.")

    def _on_error(self, message: str) -> None:
        self._call = None
        self.say(f"Could not ablate the head: {message}", error=True)

    def say(self, text: str, error: bool = False) -> None:
        show_message(self.summary, text, error)

    def export_csv(self, path) -> Path:
        """The per-position table (`TextAblation.csv`)."""
        if self.result is None:
            raise ValueError("no head has been ablated yet.")
        from ....core.files import atomic_write

        atomic_write(Path(path), self.result.csv())
        return Path(path)

    def _export(self) -> None:
        if self.result is not None:
            save_with_dialog(self, f"ablate-{str(self.result.component).replace('/', '-')}", "CSV table (*.csv)", ".csv",
                             self.export_csv, self.summary)
