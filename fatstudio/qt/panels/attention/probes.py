"""The Attention tab's probe maps over training time: the run's saved probe files by step on the slider
(`widgets.probe_timeline`), a new one as it is saved while training, the head scores saved with them
(`widgets.head_score_history`, its marker at the slider's step) and the maps of the step the slider is at."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from ....core.inference.attention_maps import AttentionMaps
from ....core.inspect.probes import load_probe_file, score_history
from ...widgets.head_score_history import HeadScoreHistory
from ...widgets.probe_timeline import ProbeTimeline


class ProbeMaps(QObject):
    """The probe files listed on ``timeline`` (`set_paths`, `add`), their scores in ``history``, and the maps read
    last: ``maps`` of ``step`` in the run's ``folder``.

    Signals: ``listed(another)`` a run's files are listed anew (``another``: another run's than before), before
    any is shown; ``shown(maps, fresh)`` a step's maps were read for the slider (``fresh``: the run's newest, which
    open on their most informative head); ``stepsChanged()`` the steps listed changed; ``failed(message)`` a
    step's file could not be read."""

    listed = Signal(bool)
    shown = Signal(object, bool)
    stepsChanged = Signal()
    failed = Signal(str)

    def __init__(self, timeline: ProbeTimeline, history: HeadScoreHistory, parent: QObject | None = None):
        super().__init__(parent)
        self.timeline, self.history = timeline, history
        self.folder: Path | None = None  # the folder of the probe files listed
        self.step: int | None = None  # the step whose maps were read last
        self.maps: AttentionMaps | None = None
        timeline.indexChanged.connect(self.show_index)
        timeline.stepChanged.connect(history.set_marker)

    @property
    def paths(self) -> dict[int, Path]:
        return self.timeline.probe_paths

    def steps(self) -> list[int]:
        """The saved evaluation steps the slider runs over, ascending."""
        return self.timeline.probe_steps()

    def set_paths(self, paths: Mapping[int, str | Path]) -> None:
        """The run's saved probe files by step (`probes.list_probes`): the slider runs over them and the newest
        step's maps are shown. Empty: no probe maps."""
        self.timeline.stop()
        probe_paths = {int(k): Path(v) for k, v in sorted(paths.items())}
        folder = next(iter(probe_paths.values())).parent if probe_paths else None
        another, self.folder = folder != self.folder, folder
        self.listed.emit(another)
        self.history.set_history(score_history(probe_paths))  # another run: its own most moving score
        self._list(probe_paths)
        if probe_paths:
            self.show_newest()
        else:
            self.maps = self.step = None

    def add(self, step: int, path: str | Path, scores: dict | None = None, follow: bool = True) -> None:
        """A new evaluation's probe maps (the trainer's Probe event) and head ``scores`` (the event's,
        `HeadScores.to_dict`; None: read from the file). The slider, at the last step and not playing, moves to it;
        its maps are shown if ``follow`` (the maps shown are a probe's, or there are none)."""
        timeline = self.timeline
        waiting = timeline.at_end() and not timeline.playing()
        self.history.add_step(step, path, scores)
        self._list(dict(sorted({**timeline.probe_paths, int(step): Path(path)}.items())))
        if waiting and follow:
            self.show_newest()
        elif waiting:  # the user's text stays; the slider waits at the newest
            timeline.wait_at(len(self.paths) - 1)

    def _list(self, probe_paths: dict[int, Path]) -> None:
        self.timeline.set_paths(probe_paths)
        steps = self.steps()
        self.history.steps_changed(steps[-1] if steps else None)
        self.stepsChanged.emit()

    def show_newest(self) -> None:
        """Move the slider to the newest step and show its maps as new ones (a step the slider is moved to keeps
        the head shown)."""
        last = len(self.paths) - 1
        self.timeline.wait_at(last)
        self.show_index(last, fresh=True)

    def show_index(self, i: int, fresh: bool = False) -> None:
        """Read the maps of the slider's ``i``-th step (`shown`)."""
        steps = self.steps()
        if not 0 <= i < len(steps):
            return
        try:  # a small file (L·H·T² float16 numbers): read on the GUI thread in about a millisecond
            maps = load_probe_file(self.paths[steps[i]])
        except ValueError as e:
            self.failed.emit(f"Cannot show the probe maps of step {steps[i]}: {e}")
            return
        self.maps, self.step = maps, steps[i]
        self.shown.emit(maps, fresh)
