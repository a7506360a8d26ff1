"""The Model, Corpus and Train panels on their own and on one Settings: round trips of the configuration, the
binding of every form to it, notation and tooltips, the live cost summary and the tokenized preview. (The
pseudocode is the Paper panel's: tests/qt/test_paper.py.)"""
from __future__ import annotations

import dataclasses
import sys

import pytest

pytest.importorskip("PySide6")

from fatstudio.core import costs
from fatstudio.core.config import ModelConfig, TrainConfig
from fatstudio.core.data.preview import Piece
from fatstudio.core.runs.presets import load_presets
from fatstudio.qt.panels.corpus.panel import tokens_html
from fatstudio.qt.panels.model import ModelPanel, preset_html
from fatstudio.qt.panels.train.panel import TrainPanel


@pytest.mark.parametrize("preset", load_presets(), ids=lambda p: p.key)
def test_model_panel_round_trips_presets(qtbot, preset, workspace):
    panel = ModelPanel(workspace, load_presets())
    qtbot.addWidget(panel)
    panel.set_config(preset.config.model)
    got = panel.config()
    want = preset.config.model.resolved()
    for name in ("arch", "l_max", "L", "L_enc", "L_dec", "H", "d_e", "d_mlp", "norm", "norm_position", "activation",
                 "positions", "position_base", "tie_embeddings", "bias", "dropout", "norm_eps"):
        assert getattr(got.resolved(), name) == getattr(want, name), name


def test_every_preset_leads_with_a_short_walkthrough_and_folds_its_measurements():
    presets = load_presets()
    assert len({p.description for p in presets}) == len(presets)  # each its own, none left empty
    views = ("▶ Train", "Training tab", "Prompt tab", "Attention tab", "status line")
    for p in presets:
        assert p.description.strip() and "\n" not in p.description, p.key
        assert 1 <= len(p.walkthrough) <= 3, p.key  # at most three "do this, look here" steps
        assert all(any(v in step for v in views) for step in p.walkthrough), p.key  # each says where to look
        lead = " ".join((p.description, *p.walkthrough))
        assert "Measured" not in lead and "OMP_NUM_THREADS" not in lead, p.key  # measurements go in the fold
        assert "Measured" in p.details, p.key
        assert p.demo_steps > 0, p.key
    induction = next(p for p in presets if p.key.endswith("gpt-induction"))
    assert 0 < induction.demo_steps <= induction.config.train.steps  # the shipped steps are enough


# What a walkthrough may point at, and where it is in the window: a tab's title or a control's text
WALKTHROUGH_VIEWS = {"Training tab": "Training", "Prompt tab": "Prompt", "Attention tab": "Attention",
                     "▶ Train": "▶ Train", "Score text": "Score text", "Overlay": "Overlay",
                     "Knock-out table": "Knock-out table", "Head knocked out": "Head knocked out",
                     "status line": "(the status bar)"}


def test_each_walkthrough_names_the_views_it_points_at_and_they_are_in_the_window(window):
    from PySide6.QtWidgets import QAbstractButton, QTabWidget

    assert window.prompt_panel is not None and window.attention_panel is not None  # made, as when first shown
    shown = {b.text() for b in window.findChildren(QAbstractButton)}
    shown |= {t.tabText(i) for t in window.findChildren(QTabWidget) for i in range(t.count())}
    shown |= {"(the status bar)"} if window.statusBar().isVisible() else set()
    walkthroughs = {p.key: p.walkthrough for p in load_presets()}
    for key, steps in walkthroughs.items():
        for step in steps:
            named = [v for v in WALKTHROUGH_VIEWS if v in step]
            assert named, (key, step)  # each step says where to look…
            assert all(WALKTHROUGH_VIEWS[v] in shown for v in named), (key, named)  # …and the window has it
    # the best views: what a character model's heads do, and a string written twice scored
    assert any("Attention tab" in step and "head" in step for step in walkthroughs["gpt-char"])
    assert any(all(w in step for w in ("Prompt tab", "Score text", "twice", "second copy"))
               for step in walkthroughs["gpt-induction"])


def test_model_panel_describes_the_chosen_preset_with_its_details_folded(qtbot, workspace):
    presets = load_presets()
    panel = ModelPanel(workspace, presets)
    qtbot.addWidget(panel)
    panel.show()
    label, fold, details = panel.presetDescription, panel.presetDetailsButton, panel.presetDetails
    assert label.wordWrap() and panel.presetCombo.currentText() == "(custom)"  # settings from no preset
    picked = []
    panel.presetChosen.connect(picked.append)
    panel.presetCombo.setCurrentIndex(panel.presetCombo.findData(presets[1].key))  # the person picks one…
    panel.presetCombo.activated.emit(panel.presetCombo.currentIndex())
    assert picked == [presets[1]]  # …for the settings column to take
    for p in presets:  # the settings are taken from one
        workspace.settings.take(p.config, p)
        assert panel.presetCombo.currentText() == p.name
        assert label.text() == preset_html(p) and label.isVisible()
        assert label.text().count("<li>") == len(p.walkthrough)  # the steps, numbered
        assert fold.isVisible() and not details.isVisible()  # the measurements behind the fold…
        fold.click()
        assert details.isVisible() and "Measured" in details.text()  # …open on a click
        fold.click()
        assert not details.isVisible()
    panel.fields["d_e"].setValue(panel.settings.model.d_e + 16)  # an edit leaves the preset behind
    assert panel.presetCombo.currentText() == "(custom)" and panel.chosen_preset() is None
    assert label.text() == preset_html(presets[-1]) and fold.isEnabled()  # what it came from, in its place
    workspace.settings.take(presets[0].config)  # a run's settings, from no preset
    assert "custom" in label.text().lower() and not fold.isEnabled() and fold.isVisible()
    bare = ModelPanel(workspace)  # a panel without presets has no description to show
    qtbot.addWidget(bare)
    assert bare.presetDescription.text() == "" and bare.presetDescription.isHidden()


def test_a_preset_says_when_its_steps_are_too_few_for_its_walkthrough():
    induction = next(p for p in load_presets() if p.key.endswith("gpt-induction"))
    shipped = induction.config
    assert induction.steps_note(shipped) == ""  # as shipped: nothing to say
    few = induction.demo_steps // 2
    note = induction.steps_note(shipped.with_overrides([f"train.steps={few}", "model.vocab_size=27"]))
    assert f"{induction.demo_steps:,} steps" in note and f"train.steps = {few:,}" in note
    assert induction.steps_note(shipped.with_overrides([f"train.steps={few}", "model.L=1"])) == ""  # not its model


def test_model_panel_costs_and_notation(qtbot, workspace):
    panel = ModelPanel(workspace)
    qtbot.addWidget(panel)
    cfg = ModelConfig(arch="gpt", vocab_size=65, l_max=64, L=4, H=4, d_e=128, d_mlp=512)
    panel.set_config(cfg)
    total = sum(costs.parameter_counts(cfg).values())
    assert f"{total:,}" in panel.costLabel.text()
    assert "FLOPs" in panel.costLabel.text()
    labels = {name: lab.text() for name, lab in panel.form.labels.items()}
    assert labels["d_e"] == "d<sub>e</sub>" and labels["l_max"] == "ℓ<sub>max</sub>" and labels["H_kv"] == "H<sub>kv</sub>"
    assert labels["position_base"] == "b"
    for name, w in panel.fields.items():
        assert w.toolTip(), name
    panel.fields["H_kv"].setValue(3)  # does not divide H = 4
    assert "(fix the configuration" in panel.costLabel.text()


def test_position_base_defaults_to_the_paper_and_takes_vaswanis(qtbot, workspace):
    panel = ModelPanel(workspace)
    qtbot.addWidget(panel)
    panel.fields["positions"].set_value("sinusoidal")
    b = panel.fields["position_base"]
    assert b.isVisibleTo(panel) and b.text() == b.specialValueText() and "ℓ_max" in b.text()
    assert panel.config().position_base is None and panel.config().resolved().position_base == panel.config().l_max
    b.setValue(10000)
    assert panel.config().position_base == 10000.0
    panel.set_config(panel.config().replace(position_base=None))
    assert b.value() == b.minimum()


def test_arch_change_resets_variations_to_the_paper(qtbot, workspace):
    panel = ModelPanel(workspace)
    qtbot.addWidget(panel)
    panel.archCombo.set_value("gopher")
    c = panel.config()
    assert (c.norm, c.positions, c.norm_position) == ("rms", "relative", "pre")
    panel.archCombo.set_value("edt")
    c = panel.config()
    assert (c.norm, c.positions, c.norm_position, c.activation) == ("layer", "learned", "post", "relu")


def test_train_panel_round_trip(qtbot, workspace):
    panel = TrainPanel(workspace)
    qtbot.addWidget(panel)
    t = TrainConfig(steps=123, batch_size=7, optimizer="sgd", lr=3e-4, warmup=5, lr_schedule="constant", min_lr=1e-5,
                    weight_decay=0.05, grad_clip=0.5, eval_interval=11, eval_iters=3, checkpoint_interval=50,
                    sample_tokens=0, seed=9, device="cpu", precision="bf16", compile=True, tensorboard=True)
    panel.set_config(t)
    assert panel.config() == t
    assert panel.fields["lr"].text() == "3e-4"
    panel.set_config(t.replace(lr_schedule="wsd"))  # the grokking preset's schedule
    assert panel.config().lr_schedule == panel.fields["lr_schedule"].value() == "wsd"  # the combo shows it


def test_train_panel_turns_tensorboard_on(qtbot, monkeypatch, workspace):
    from PySide6.QtWidgets import QCheckBox

    from fatstudio.core.config import TENSORBOARD_MISSING

    panel = TrainPanel(workspace)
    qtbot.addWidget(panel)
    box = panel.fields["tensorboard"]
    assert isinstance(box, QCheckBox) and box.objectName() == "train.tensorboard"
    assert box.text() == "TensorBoard event files" and not box.isChecked() and not panel.config().tensorboard
    assert "tensorboard --logdir" in box.toolTip() and "pip install tensorboard" in box.toolTip()
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    box.click()  # the person ticks it
    assert panel.config().tensorboard is True and panel.settings.train.tensorboard is True
    assert panel.settings.error == TENSORBOARD_MISSING  # said where the settings' problems are said
    panel.set_config(panel.config().replace(tensorboard=False))  # a preset or a run's config
    assert not box.isChecked() and panel.settings.error is None


def test_tokens_html_shows_boundaries():
    html = tokens_html([Piece("ab", 0), Piece(" c", 1), Piece("\n", 2), Piece("d", 3), Piece("  →  "), Piece("e", 4),
                        Piece("\n")])
    assert html.count("background-color") == 5  # one span per token, none for separators
    assert "↵" in html and "→" in html


def test_train_panel_says_what_auto_precision_chooses_here(qtbot, workspace):
    panel = TrainPanel(workspace)
    qtbot.addWidget(panel)
    assert panel.config().precision == "auto"  # the default
    with qtbot.waitSignal(panel.precisionResolved, timeout=30000) as resolved:
        pass
    from fatstudio.core.device import describe_choice, deterministic, resolve_device
    here, _ = describe_choice("auto", "auto")  # bf16 on a CPU with AVX-512 BF16 or a GPU that has it, else fp32
    assert resolved.args == [here]
    qtbot.waitUntil(lambda: f"auto → {here}" in panel.choiceLabel.text(), timeout=30000)
    dev = resolve_device("auto")
    same = "same seed → same run" if deterministic(dev) else "not bit-for-bit deterministic"
    assert same in panel.choiceLabel.text()
    if dev.type == "cpu":  # a GPU has fp16
        panel.fields["precision"].set_value("fp16")
        qtbot.waitUntil(lambda: "needs a GPU" in panel.choiceLabel.text(), timeout=30000)


def test_model_panel_memory_follows_the_precision(qtbot, workspace):
    panel = ModelPanel(workspace, load_presets())
    qtbot.addWidget(panel)
    panel.settings.set_derived("precision", "bf16")  # what the Train panel found "auto" means here
    assert "bf16" in panel.costLabel.text()
    cfg = panel.config()
    want = costs.memory_estimate(cfg, 12, "adamw", "bf16")["activations"]
    assert costs.memory_estimate(cfg, 12, "adamw", "fp32")["activations"] == 2 * want


def test_settings_validate_once_and_announce_what_changed(qtbot, monkeypatch):
    from fatstudio.core.config import RunConfig
    from fatstudio.qt.binding import Settings

    settings = Settings()
    calls, changes = [], []
    real = RunConfig.validate
    monkeypatch.setattr(RunConfig, "validate", lambda self: calls.append(1) or real(self))
    settings.changed.connect(changes.append)
    assert settings.update("train", batch_size=7, seed=3)
    assert len(calls) == 1 and changes[-1].of("train") == {"batch_size", "seed"}
    assert not settings.update("train", batch_size=7) and len(changes) == 1  # no change, no news
    preset = load_presets()[3].config  # another architecture, corpus, task and batch size
    assert settings.replace(preset)
    assert len(calls) == 2 and changes[-1].touches("model", "arch") and changes[-1].touches("data", "task")
    settings.update("model", H_kv=3)
    assert "H_kv" in settings.model_error and settings.error.startswith("Model: ")
    assert settings.config.model.H_kv == 3 and settings.config is not settings.config  # copies to keep


def test_one_binding_over_the_fields(qtbot, workspace):
    settings = workspace.settings
    model, train = ModelPanel(workspace), TrainPanel(workspace)
    qtbot.addWidget(model)
    qtbot.addWidget(train)
    assert set(train.binding.editors) == {f.name for f in dataclasses.fields(TrainConfig)}  # every field, no code each
    model.fields["H_kv"].setValue(2)  # an edit writes the settings…
    assert settings.model.H_kv == 2
    model.fields["H_kv"].setValue(0)  # …"auto" is None
    assert settings.model.H_kv is None
    settings.update("train", lr=3e-4, optimizer="sgd")  # …and a change shows in the form
    assert train.fields["lr"].text() == "3e-4" and train.fields["optimizer"].value() == "sgd"
    settings.update("model", positions=None, arch="gopher")  # a variation left to the paper shows the paper's
    assert model.fields["positions"].value() == "relative" and settings.model.positions is None
    model.archCombo.set_value("edt")  # an architecture brings its variations along, in the same change
    assert (settings.model.norm_position, settings.model.positions) == ("post", "learned")
    assert model.presetCombo.currentText() == "(custom)"
    model.fields["d_e"].lineEdit().setText("256")  # being typed, not yet entered…
    settings.update("model", vocab_size=77)  # …when another field changes (the tokenizer trained)
    assert model.fields["d_e"].text() == "256" and settings.model.d_e == 128


def test_panels_follow_the_settings_not_each_other(qtbot, workspace):
    settings = workspace.settings
    model, train = ModelPanel(workspace), TrainPanel(workspace)
    qtbot.addWidget(model)
    qtbot.addWidget(train)
    train.fields["batch_size"].setValue(5)
    assert "training memory (batch 5," in model.costLabel.text()
    settings.update("model", vocab_size=77)  # what the corpus panel records from its tokenizer
    assert model.vocabLabel.text().startswith("77") and f"{costs.parameter_counts(settings.model)['embedding']:,}" \
        in model.costLabel.text()


def test_runs_list_fills_at_once_and_keeps_the_selected_run_across_refreshes(qtbot):
    from pathlib import Path

    from fatstudio.core.config import RunConfig
    from fatstudio.core.runs.folder import Run
    from fatstudio.qt.panels.train.runs_list import RunsList

    def run(name: str, step: int) -> Run:
        return Run(Path("/runs") / name, RunConfig(), {"status": "finished", "step": step, "total_steps": 500,
                                                        "val_loss": 1.23456, "created": 1.7e9})

    runs = RunsList()
    qtbot.addWidget(runs)
    a, b, c = run("a", 100), run("b", 200), run("c", 300)
    runs.set_runs([c, b, a], "/runs")
    tree = runs.tree
    assert [tree.topLevelItem(i).text(0) for i in range(3)] == ["c", "b", "a"]
    assert [tree.topLevelItem(1).text(i) for i in range(4)] == ["b", "finished", "200/500", "1.2346"]
    assert runs.selected() is None and not runs.openButton.isEnabled()
    runs.select_path("/runs/b")
    assert runs.selected() is b and runs.openButton.isEnabled() and runs.resumeSpin.value() == 500
    d = run("d", 400)
    runs.set_runs([d, c, run("b", 250), a])  # a newer run on top; b read again
    assert runs.selected().path == b.path and runs.selected().meta["step"] == 250
    assert len(tree.selectedItems()) == 1 and tree.selectedItems()[0].text(0) == "b"
    runs.set_runs([d, c, a])  # b deleted meanwhile
    assert runs.selected() is None and not runs.deleteButton.isEnabled()
