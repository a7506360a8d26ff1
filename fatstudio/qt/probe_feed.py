"""``ProbeFeed`` hands the Attention tab the probe maps of the workspace's run: the ones saved in its folder
when it is listed, and each new one as a training run saves it, held back while the tab is hidden (a panel
draws a new step's maps and head scores as it gets them: 0.1-0.3 s of the GUI thread at each evaluation when
that ran hidden). The Diagnostics tab gets the dead heads of a listed run's latest probe (read in a worker)."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject

from fatstudio.core.app.workspace import Workspace


class ProbeFeed(QObject):
    """Between ``workspace`` (`probes_listed`, `probe_added`) and the Attention panel (`attach`)."""

    def __init__(self, workspace: Workspace, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace = workspace
        self.panel: Any = None  # the AttentionPanel, once made (making it imports torch, which opening a run does not need)
        self.visible = False
        self.pending: list[tuple] = []  # probes (step, path, scores) kept for the Attention tab while hidden
        workspace.probes_listed.connect(self._listed)
        workspace.probe_added.connect(self._added)

    def attach(self, panel) -> None:
        self.panel = panel
        if self.workspace.probe_dir is not None:
            self._show_folder(self.workspace.probe_dir)

    def set_visible(self, visible: bool) -> None:
        """Whether the Attention tab is shown: the probes held back go to it when it is."""
        self.visible = visible
        self.deliver()

    def _listed(self, run_dir: str) -> None:
        from fatstudio.core.training.diagnostics import latest_head_findings

        self.pending = []  # the folder lists them all
        ws = self.workspace
        ws.jobs.submit("head-findings", latest_head_findings, run_dir, on_result=lambda heads: ws.set_heads(run_dir, heads))
        if self.panel is not None:
            self._show_folder(run_dir)

    def _show_folder(self, run_dir: str) -> None:
        from fatstudio.core.inspect.probes import list_probes
        self.panel.set_probes(list_probes(run_dir))

    def _added(self, step: int, path: str, scores) -> None:
        if self.panel is not None:  # else listed from the folder when the panel is made
            self.pending.append((step, path, scores))
            self.deliver()

    def deliver(self) -> None:
        """Hand the shown Attention tab the probe steps that arrived while it was hidden. Several steps go at
        once (`set_probes`, one drawing) when the panel follows the latest step; one by one (no map drawn) when
        it shows an earlier step or a prompt's maps."""
        panel = self.panel
        if not self.pending or panel is None or not self.visible:
            return
        pending, self.pending = self.pending, []
        steps = panel.probe_steps()
        following = panel.maps is None or (panel.showing_probe and panel.probe_step == (steps[-1] if steps else None))
        if len(pending) > 1 and following and self.workspace.probe_dir is not None:
            self._show_folder(self.workspace.probe_dir)
            return
        for step, path, scores in pending:
            panel.add_probe(step, path, scores)
