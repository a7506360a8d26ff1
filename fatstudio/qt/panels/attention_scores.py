"""The Attention panel's head scores, measured in a worker thread (`core.head_scores`): prev, diag and sink
on the maps shown, and induction with a loaded model; for a probe step, the scores the trainer saved with it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.inference.attention_maps import AttentionMaps
from ...core.inspect.head_scores import HeadScores, head_scores, map_scores  # torch-free at import
from .attention_export import show_message

if TYPE_CHECKING:
    from .attention import AttentionPanel


def request_scores(panel: AttentionPanel) -> None:
    """Measure the scores of the maps shown in a worker thread (`core.head_scores.head_scores`); the table
    and the grid show them when they arrive, if those maps are still shown."""
    if panel._scores_call is not None:
        panel._scores_call.cancel()  # its result is for maps no longer shown
        panel._scores_call = None
    maps, loaded = panel.maps, panel.loaded
    if maps is None or saved_scores(panel) is not None:
        return  # nothing shown, or a probe step's scores, saved as it trained
    panel._scores_for = maps
    def on_result(scores: HeadScores, m: AttentionMaps = maps) -> None:
        on_scores(panel, m, scores)

    # a probe's maps are of a past step's weights: the loaded model's induction score would not be theirs
    if loaded is None or getattr(loaded, "model", None) is None or getattr(panel, "showing_probe", False):
        panel._scores_call = panel.workspace.jobs.submit(  # prev, diag, sink: no model
            "head-scores", map_scores, maps, on_result=on_result, on_error=lambda message: on_scores_failed(panel, message))
    else:
        panel._scores_call = panel.workspace.jobs.submit(
            "head-scores", head_scores, loaded.model, loaded.tokenizer, maps, on_result=on_result,
            on_error=lambda message: on_scores_failed(panel, message))


def saved_scores(panel: AttentionPanel) -> HeadScores | None:
    """The scores saved with the probe step shown (None: a prompt's maps, or none saved)."""
    return panel.score_history.get(panel.probe_step) if panel.showing_probe and panel.probe_step is not None else None


def on_scores(panel: AttentionPanel, maps, scores: HeadScores) -> None:
    panel._scores_call = None
    if maps is not panel.maps:
        return
    panel.scores = scores
    if panel.kind is not None:
        panel._draw_grid()


def on_scores_failed(panel: AttentionPanel, message: str) -> None:
    panel._scores_call = None
    show_message(panel.messageLabel, f"Could not measure the head scores: {message}", error=True)
