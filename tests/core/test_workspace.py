"""The application's model outside the window (`core.app`): the training state as an enum through a run's
commands and events, what it announces, the diagnostics it keeps, and that it needs no Qt."""
from __future__ import annotations

import subprocess
import sys

import pytest

from fatstudio.core.app.settings import Change, Settings
from fatstudio.core.app.workspace import TrainingState, Workspace
from fatstudio.core.config import RunConfig, TrainConfig
from fatstudio.core.training import Evaluation, Finished, Paused, Probe, Resumed, Snapshot, Started, Steps

S = TrainingState


class FakeRunner:
    """Records the commands a workspace gives; holds one snapshot."""

    def __init__(self, snapshot=None):
        self.calls: list[tuple] = []
        self.snapshot = snapshot

    def __getattr__(self, name):
        if name in ("pause", "resume", "step_once", "set_lr", "stop", "request_snapshot"):
            return lambda *args: self.calls.append((name, *args))
        raise AttributeError(name)

    def take_snapshot(self):
        snapshot, self.snapshot = self.snapshot, None
        return snapshot


def record(ws: Workspace) -> dict[str, list]:
    """Everything ``ws`` announces, by signal."""
    seen: dict[str, list] = {}
    for name in ("state_changed", "event", "ended", "run_changed", "probe_added", "probes_listed",
                 "diagnostics_due", "diagnosed"):
        getattr(ws, name).connect(lambda *args, _n=name: seen.setdefault(_n, []).append(args))
    ws.focus.changed.connect(lambda f: seen.setdefault("focus", []).append((f.run, f.loaded, f.live, f.training)))
    ws.focus.text_changed.connect(lambda text: seen.setdefault("text", []).append(text))
    return seen


def started(run_dir="/runs/a", grad_clip=1.0, warmup=5) -> Started:
    cfg = RunConfig(train=TrainConfig(grad_clip=grad_clip, warmup=warmup, lr=3e-4))
    return Started(run_dir, 0, 100, 1000, "cpu", "fp32", True, cfg, unigram_entropy=2.0)


def steps(first: int, n: int, loss=1.0) -> Steps:
    ss = list(range(first, first + n))
    return Steps(ss, [loss] * n, [1e-3] * n, [0.5] * n, 100.0, ss[-1], 100, 1.0, 1.0)


def test_a_run_goes_through_the_states_by_its_commands_and_events():
    ws, runner = Workspace(), FakeRunner()
    seen = record(ws)
    assert ws.state is S.IDLE and not ws.busy
    assert not ws.toggle_pause() and not ws.stop()  # nothing to pause or stop
    assert ws.start(runner) and ws.state is S.STARTING
    assert not ws.start(FakeRunner())  # one run at a time
    assert not ws.toggle_pause()  # not before it runs
    ws.take(started())
    assert ws.state is S.RUNNING and ws.run_dir == "/runs/a"
    assert ws.toggle_pause() and runner.calls[-1] == ("pause",)
    ws.take(Paused(10))
    assert ws.state is S.PAUSED
    assert ws.step_once() and runner.calls[-1] == ("step_once",)
    assert ws.set_lr(0.01) and runner.calls[-1] == ("set_lr", 0.01)
    assert ws.toggle_pause() and runner.calls[-1] == ("resume",)
    ws.take(Resumed(11))
    assert ws.state is S.RUNNING and not ws.step_once()  # one step only while paused
    assert ws.stop() and ws.state is S.STOPPING and runner.calls[-1] == ("stop",)
    ws.take(Paused(12))  # a pause that crosses the stop does not undo it
    assert ws.state is S.STOPPING and not ws.stop()
    ws.take(Finished(12, "stopped", "stopped by the user"))
    ws.end()
    assert ws.state is S.IDLE and ws.runner is None and ws.last_status == "stopped"
    assert [s for (s,) in seen["state_changed"]] == [S.STARTING, S.RUNNING, S.PAUSED, S.RUNNING, S.STOPPING, S.IDLE]
    assert seen["ended"] == [("stopped",)]
    assert [type(e).__name__ for (e,) in seen["event"]] == ["Started", "Paused", "Resumed", "Paused", "Finished"]


def test_the_state_is_an_enum_that_still_reads_as_its_word():
    assert S.RUNNING == "running" and str(S.PAUSED) == "paused" and f"{S.IDLE.value}" == "idle"
    assert S.RUNNING.live and S.PAUSED.live and not S.STARTING.live and not S.STOPPING.live


def test_a_failed_worker_ends_in_error_and_a_new_run_starts_afresh():
    ws = Workspace()
    ws.start(FakeRunner())
    ws.fail("out of memory")
    ws.end()
    assert ws.state is S.IDLE and ws.last_status == "error"
    ws.start(FakeRunner(), run_dir="/runs/b")
    assert ws.last_status is None and ws.run_dir == "/runs/b"


def test_a_run_that_trains_is_the_focus_and_a_snapshot_its_live_weights():
    ws, runner = Workspace(), FakeRunner(snapshot="weights at step 7")
    seen = record(ws)
    ws.start(runner)
    ws.take(started("/runs/a"))
    assert seen["focus"] == [("/runs/a", None, False, True)]  # every view follows the run that trains
    assert ws.request_snapshot() and runner.calls[-1] == ("request_snapshot",)
    ws.take(Snapshot(7))
    assert ws.loaded == "weights at step 7" and ws.loaded_dir is None  # a snapshot: no run folder's weights
    assert seen["focus"][-1] == ("/runs/a", "weights at step 7", True, True)
    ws.take(Snapshot(8, message="no weights yet"))  # none made: the model stays
    assert ws.loaded == "weights at step 7" and len(seen["focus"]) == 2
    ws.take(Finished(9, "stopped", "stopped at step 9"))
    ws.end()
    assert seen["focus"][-1] == ("/runs/a", "weights at step 7", True, False)
    ws.set_model("a run's model", "/runs/a")
    assert ws.loaded_dir == "/runs/a"
    ws.set_model(None, "/runs/a")
    assert ws.loaded is None and ws.loaded_dir is None and ws.focus.run == "/runs/a"


def test_steps_and_evaluations_are_diagnosed_with_the_runs_settings():
    ws = Workspace()
    seen = record(ws)
    ws.start(FakeRunner())
    ws.take(started(grad_clip=1.0, warmup=5))
    assert ws.diagnostics.diagnosis.grad_clip == 1.0 and ws.diagnostics.diagnosis.unigram == 2.0
    ws.take(steps(1, 20))
    ws.take(Evaluation(20, 1.0, 1.2, accuracy=0.5))
    assert len(seen["diagnostics_due"]) == 2
    row = ws.diagnostics.recent[-1]
    assert row["step"] == 20 and row["val_loss"] == 1.2 and row["train_loss"] == 1.0  # joined its step's row
    assert ws.last_evaluation == "step 20: train loss 1.0000, validation loss 1.2000, accuracy 50.0%"
    ws.diagnose()
    findings, summary = seen["diagnosed"][-1]
    assert not any(warning for _, warning in findings) and summary
    ws.take(Finished(21, "failed", "the loss is not finite", diverged={"step": "21", "train_loss": "nan"}))
    findings, _ = seen["diagnosed"][-1]  # diagnosed at once, the non-finite step flagged
    assert any(warning and "21" in line for line, warning in findings)


def test_probes_and_their_head_findings():
    ws = Workspace()
    seen = record(ws)
    ws.list_probes("/runs/a")
    assert seen["probes_listed"] == [("/runs/a",)] and ws.probe_dir == "/runs/a"
    ws.take(Probe(30, "/runs/a/probes/step-30", {"x": 1}, ()))
    assert seen["probe_added"] == [(30, "/runs/a/probes/step-30", {"x": 1})] and ws.diagnostics.heads == (30, [])
    ws.set_heads("/runs/a", (20, ["older"]))  # read in a worker, arriving after a newer probe: dropped
    ws.set_heads("/runs/b", (40, ["another run's"]))  # for a run no longer shown: dropped
    assert ws.diagnostics.heads == (30, [])
    ws.set_heads("/runs/a", (40, []))
    assert ws.diagnostics.heads == (40, [])


def test_showing_a_run_resets_its_rows_and_says_which():
    ws = Workspace()
    seen = record(ws)
    ws.show_run("/runs/a", [{"step": 1, "train_loss": float("nan")}], {"grad_clip": 1.0})
    findings, _ = seen["diagnosed"][-1]
    assert any(warning for _, warning in findings)
    ws.show_run(None, [], {})
    assert ws.run_dir is None and seen["run_changed"] == [("/runs/a",), (None,)]
    assert seen["diagnosed"][-1][0] == []


def test_a_shown_run_of_a_preset_is_diagnosed_with_what_the_preset_expects():
    """The grokking preset expects loss spikes that come back ([expected] spike): a reopened run of its model and
    data (other train settings too) lists one as a note; the same rows of a run of another preset warn."""
    from fatstudio.core.runs.presets import preset

    rows = [{"step": s, "train_loss": 0.1 + 0.01 * (s % 3)} for s in range(300)]
    rows[200]["train_loss"] = 3.0  # a spike the loss comes back from at once
    ws = Workspace()
    seen = record(ws)
    grokking = preset("grokking").config.with_overrides(["train.weight_decay=1.0"])
    ws.show_run("/runs/a", rows, grokking.train.to_dict(), config=grokking)
    (line, warning), = seen["diagnosed"][-1][0]
    assert "spiked" in line and "expected with this preset" in line and not warning
    other = preset("gpt-char").config
    ws.show_run("/runs/b", rows, other.train.to_dict(), config=other)
    (line, warning), = seen["diagnosed"][-1][0]
    assert "lower the learning rate" in line and warning


def test_the_text_is_announced_only_when_it_changes():
    ws = Workspace()
    seen = record(ws)
    ws.set_prompt_text("def f")
    ws.set_prompt_text("def f")
    assert seen["text"] == ["def f"] and ws.prompt_text == "def f"


def test_settings_validate_and_announce_each_change_once():
    settings = Settings()
    ws = Workspace(settings)
    assert ws.settings is settings
    changes: list[Change] = []
    settings.changed.connect(changes.append)
    assert settings.update("model", H=0) and not settings.update("model", H=0)
    assert len(changes) == 1 and changes[0].touches("model", "H") and not changes[0].touches("train")
    assert settings.error is not None and settings.model_error  # H = 0 said in words
    settings.set_derived("precision", "bf16")
    assert changes[-1].touches("derived", "precision") and settings.derived["precision"] == "bf16"


@pytest.mark.parametrize("module", ["fatstudio.core.app.workspace"])
def test_the_workspace_imports_no_qt_and_no_torch(module):
    code = (f"import sys, {module}\n"
            "print(sorted(m for m in ('PySide6', 'pyqtgraph', 'fatstudio.qt', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_settings_say_whether_values_would_be_allowed_without_setting_them():
    s = Settings()
    heard = []
    s.changed.connect(heard.append)
    assert s.allows("train", lr=3e-3) and not s.allows("train", lr=-1.0)
    assert not s.allows("data", corpus="modadd")  # the char tokenizer: modadd needs word tokens
    assert s.train.lr != 3e-3 and s.data.corpus != "modadd" and heard == [] and s.error is None  # nothing set


def test_settings_take_a_presets_or_a_runs_config_but_keep_the_tokenizers_n_v():
    from fatstudio.core.config import DataConfig, ModelConfig

    s = Settings()
    s.update("model", vocab_size=77)
    heard = []
    s.changed.connect(heard.append)
    other = RunConfig(ModelConfig(arch="gpt", L=3, vocab_size=500), DataConfig(corpus="copy"), TrainConfig(lr=1e-2))
    assert s.take(other)
    assert (s.model.L, s.model.vocab_size, s.data.corpus, s.train.lr) == (3, 77, "copy", 1e-2)
    assert len(heard) == 1  # one announcement for the three sections


@pytest.mark.parametrize("section, name, value", [
    ("model", "d_e", 48), ("model", "L", 7),  # a model field
    ("data", "corpus", "/home/me/my folder"),  # a corpus of one's own in place of the preset's
    ("data", "tokenizer", "word"), ("data", "val_fraction", 0.25),
    ("train", "lr", 1e-2), ("train", "steps", 17)])
def test_the_settings_are_their_presets_until_any_setting_differs_and_again_once_set_back(section, name, value):
    from fatstudio.core.app.settings import PRESET
    from fatstudio.core.runs.presets import load_presets

    preset = load_presets()[0]
    s = Settings()
    heard: list[Change] = []
    s.changed.connect(heard.append)
    s.take(preset.config, preset)
    assert s.preset is preset and s.base is preset
    s.update("model", vocab_size=s.model.vocab_size + 5)  # N_V is the tokenizer's: still the preset
    assert s.preset is preset
    was = getattr(s.section(section), name)
    assert s.update(section, **{name: value})
    assert s.preset is None and s.base is preset  # custom, and from which preset
    s.update(section, **{name: was})  # set back by hand: the preset's again
    assert s.preset is preset
    heard.clear()
    assert not s.take(preset.config, None)  # the same settings, taken from no preset (a run's)…
    assert s.preset is None and [c.touches(PRESET) for c in heard] == [True]  # …are announced as such
