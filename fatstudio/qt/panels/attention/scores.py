"""The Attention tab's head scores of the maps shown, measured in a worker (`core.head_scores`): prev, diag and sink
on the maps, and induction with the model in focus. A probe step's scores are not measured here: the trainer saved
them with its maps (the panel takes them from the score history)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from ....core.inspect.head_scores import HeadScores, head_scores, map_scores  # torch-free at import
from ....core.threads import lower_priority

if TYPE_CHECKING:
    from ....core.app.jobs import Job
    from ....core.app.workspace import Workspace
    from ....core.inference.attention_maps import AttentionMaps

KEY = "head-scores"  # the job's key: a newer measurement supersedes an older one


def _head_scores(model, tokenizer, maps: AttentionMaps) -> HeadScores:
    """In a worker, at the lowest CPU priority: a generation started meanwhile goes first (`head_scores`)."""
    lower_priority()
    return head_scores(model, tokenizer, maps)


class HeadScoreMeter(QObject):
    """Measures the scores of the maps it is given (`measure`), one set of maps at a time, with the workspace's
    jobs. ``measured(maps, scores)``: the `HeadScores` of those maps (the receiver checks they are still shown);
    ``failed(message)``: why they could not be measured."""

    measured = Signal(object, object)
    failed = Signal(str)

    def __init__(self, workspace: Workspace, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace = workspace
        self._call: Job | None = None
        self._maps: AttentionMaps | None = None  # the maps being measured

    def measure(self, maps: AttentionMaps, loaded=None) -> None:
        """Measure ``maps``' scores, with ``loaded``'s model for induction (None: the maps' scores alone, as for a
        probe's maps, which are a past step's weights); what was being measured before is dropped."""
        self.cancel()
        self._maps = maps
        if loaded is None or getattr(loaded, "model", None) is None:
            self._call = self.workspace.jobs.submit(KEY, map_scores, maps, on_result=self._done, on_error=self._failed)
        else:
            self._call = self.workspace.jobs.submit(KEY, _head_scores, loaded.model, loaded.tokenizer, maps,
                                                    on_result=self._done, on_error=self._failed)

    def cancel(self) -> None:
        """Nothing being measured arrives any more."""
        if self._call is not None:
            self._call.cancel()
            self._call = None

    def pending(self) -> bool:
        return self._call is not None and self._call.running

    def _done(self, scores: HeadScores) -> None:
        self._call = None
        self.measured.emit(self._maps, scores)  # the latest submission's: the job system delivers no other

    def _failed(self, message: str) -> None:
        self._call = None
        self.failed.emit(message)
