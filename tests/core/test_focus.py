"""The focus (`core.app.focus`): which run, which weights and which text every view that computes from a model
shows, in the words its header says."""
from __future__ import annotations

from dataclasses import dataclass

from fatstudio.core.app.focus import Focus


@dataclass
class Weights:  # what the focus reads of a LoadedModel
    step: int
    label: str = ""


RUN = "/runs/20261126-223922-gpt-python-stdlib"
NAME = "20261126-223922-gpt-python-stdlib"


def test_the_words_name_the_run_as_the_runs_list_does_and_the_step():
    f = Focus()
    assert f.words() == "No model: open a run in the runs list, or train one."
    f.open(RUN)
    assert f.words() == f"{NAME} · loading its weights…" and f.loading and f.name == NAME
    f.show(Weights(1500), RUN)
    assert f.words() == f"{NAME} · step 1,500" and f.step == 1500 and not f.loading


def test_a_training_run_has_no_weights_until_a_snapshot_then_live_ones():
    f = Focus()
    seen = []
    f.changed.connect(lambda focus: seen.append(focus.words()))
    f.train(RUN)
    assert "training: no weights taken yet" in f.words()
    f.show(Weights(900), RUN, live=True)
    f.training = True  # a snapshot does not end the training
    assert f.words() == f"{NAME} · live weights of step 900 (training goes on)"
    f.trained()
    assert f.words() == f"{NAME} · live weights of step 900"
    assert len(seen) == 3


def test_imported_weights_say_so_and_no_step_zero():
    f = Focus()
    f.show(Weights(0), "/runs/tiny-gpt2", imported=True)
    assert f.words() == "tiny-gpt2 · imported weights"


def test_a_model_of_no_run_is_named_by_its_label_and_clearing_forgets_the_run():
    f = Focus()
    f.show(Weights(3, "seed 3"))
    assert f.words() == "seed 3 · step 3" and f.run is None
    f.show(Weights(3), RUN)
    assert f.is_run(RUN + "/") and not f.is_run("/runs/other")
    f.clear()
    assert f.run is None and f.loaded is None and f.words().startswith("No model")


def test_the_text_is_announced_on_its_own_and_only_when_it_changes():
    f = Focus()
    changed, texts = [], []
    f.changed.connect(changed.append)
    f.text_changed.connect(texts.append)
    f.set_text("def f")
    f.set_text("def f")
    assert texts == ["def f"] and changed == []  # the views keep their model: only the text is new
