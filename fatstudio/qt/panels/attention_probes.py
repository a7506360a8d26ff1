"""The Attention panel's probe maps over training time: the run's saved probe files by step, a new one as it
is saved while training, and the maps of the step the slider (`widgets.probe_timeline`) is at."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.inspect.probes import load_probe_file, score_history
from .attention_export import show_message

if TYPE_CHECKING:
    from .attention import AttentionPanel


def set_probes(panel: AttentionPanel, paths: Mapping[int, str | Path]) -> None:
    """The run's saved probe files by step (`probes.list_probes`): the slider runs over them and the last
    step's maps are shown. Empty: the slider hides, and probe maps shown give way to the user's text's."""
    panel.probeTimeline.stop()
    panel.lensView.forget_probes()
    probe_paths = {int(k): Path(v) for k, v in sorted(paths.items())}
    folder = next(iter(probe_paths.values())).parent if probe_paths else None
    if folder != panel.probe_folder:  # another run: its maps open on their most informative head again
        panel.probe_folder, panel.head_chosen = folder, False
    panel.scoreHistory.set_history(score_history(probe_paths))  # another run: its own most moving score
    sync_probe_slider(panel, probe_paths)
    if probe_paths:
        show_newest(panel)
    elif panel.showing_probe:
        panel._probe_maps = panel.probe_step = None
        panel.show_maps(panel.text_maps)


def add_probe(panel: AttentionPanel, step: int, path: str | Path, scores: dict | None = None) -> None:
    """A new evaluation's probe maps (the trainer's Probe event) and head ``scores`` (the event's,
    `HeadScores.to_dict`; None: read from the file). The slider follows it when it was at the last step
    and the maps shown are a probe's (or there are none)."""
    timeline = panel.probeTimeline
    at_end = timeline.at_end()
    follow = (panel.maps is None or panel.showing_probe) and at_end and not timeline.playing()
    probe_paths = dict(sorted({**timeline.probe_paths, int(step): Path(path)}.items()))
    panel.scoreHistory.add_step(step, path, scores)
    sync_probe_slider(panel, probe_paths)
    if follow:
        show_newest(panel)
    elif at_end and not timeline.playing():  # the user's text stays; the slider waits at the newest
        timeline.wait_at(len(probe_paths) - 1)
        panel._update_source()
        panel._move_score_marker()


def sync_probe_slider(panel: AttentionPanel, probe_paths: dict[int, Path]) -> None:
    panel.probeTimeline.set_paths(probe_paths)
    panel._update_source()
    panel._move_score_marker()
    steps = panel.probe_steps()
    panel.scoreHistory.steps_changed(steps[-1] if steps else None)
    panel._refresh_sources()  # the knock-out table lists the probe steps


def show_newest(panel: AttentionPanel) -> None:
    """Move the slider to the newest step and show its maps as new ones: on their most informative head unless
    the user chose one (a step the slider is moved to keeps the head shown)."""
    last = len(panel.probe_steps()) - 1
    panel.probeTimeline.wait_at(last)
    panel._move_score_marker()
    on_probe_slider(panel, last, fresh=True)


def on_probe_slider(panel: AttentionPanel, i: int, fresh: bool = False) -> None:
    steps = panel.probe_steps()
    if not 0 <= i < len(steps):
        return
    try:  # a small file (L·H·T² float16 numbers): read on the GUI thread in about a millisecond
        maps = load_probe_file(panel.probeTimeline.probe_paths[steps[i]])
    except ValueError as e:
        show_message(panel.messageLabel, f"Cannot show the probe maps of step {steps[i]}: {e}", error=True)
        return
    panel._probe_maps, panel.probe_step = maps, steps[i]
    panel._show(maps, fresh)
    panel._update_probe_label()
    panel.ablationView.follow_step(steps[i])  # the experiments' weights follow the slider's step
