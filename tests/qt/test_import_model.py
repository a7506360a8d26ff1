"""File → Import model… imports a transformers folder (the dialog is replaced) in a worker, with its progress in the
status bar, lists and opens the run; "Fine-tune…" on a run starts a new run from its weights and tokenizer on the
Corpus and Train settings; a refused model says why."""
import json
import time

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.runs.export_hf import export_hf
from fatstudio.core.runs.folder import Run

LONG = 60_000
TEXT = "the quick brown fox jumps over the lazy dog.\nthe dog sleeps; the fox runs!\n" * 20


def hf_folder(tmp_path):
    """A GPT-2 transformers folder, written by fatstudio's export from a run with random weights."""
    tok = train_tokenizer("bpe", [TEXT], vocab_size=300)
    cfg = RunConfig(ModelConfig(l_max=32, L=1, H=2, d_e=16, d_mlp=32, vocab_size=tok.vocab_size, activation="gelu_tanh"),
                    DataConfig(corpus="corpus.txt", tokenizer="bpe"), TrainConfig(device="cpu"))
    run = Run.create(cfg.validate(), root=tmp_path, name="source-run")
    run.save_tokenizer(tok)
    run.save_checkpoint(build_model(cfg.model), None, 1, {})
    export_hf(run.path, tmp_path / "tiny-gpt2")
    return tmp_path / "tiny-gpt2"


def test_import_model_then_fine_tune_it(qtbot, window, runs_root, tmp_path):
    w = window
    folder = hf_folder(tmp_path)
    w.runs.ask_import_folder = lambda: str(folder)
    progress = []
    w.statusBar().messageChanged.connect(progress.append)
    w.findChild(QAction, "importModelAction").trigger()
    imported = runs_root / "tiny-gpt2"
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)  # listed and opened: its model loaded
    assert Run.open(imported).meta["hf_class"] == "GPT2LMHeadModel"
    assert any("Importing tiny-gpt2: reading the GPT2LMHeadModel weights" in m for m in progress)
    assert w.loaded_model.tokenizer.kind == "imported"
    runs = w.train_view.runs
    qtbot.waitUntil(lambda: runs.selected() is not None and runs.selected().path == imported, timeout=LONG)
    row = runs.tree.currentItem()  # the runs list says what it is: no "finished · 0/2000"
    assert [row.text(1), row.text(2)] == ["imported", "–"] and "imported (GPT2LMHeadModel)" in row.toolTip(0)

    corpus = tmp_path / "mine.txt"
    corpus.write_text("the fox runs to the dog. the dog runs to the fox.\n" * 40, encoding="utf-8")
    settings = RunConfig(ModelConfig(L=3), DataConfig(corpus=str(corpus)),  # L: not the imported model's
                         TrainConfig(steps=6, batch_size=4, eval_interval=3, eval_iters=1, warmup=1, sample_tokens=4,
                                     device="cpu"))
    w.current_config = lambda: settings
    w.findChild(QPushButton, "fineTuneRunButton").click()
    qtbot.waitUntil(lambda: w.state == "idle" and w.job is None and w.last_status is not None, timeout=LONG)
    assert w.last_status == "finished", w.last_error
    tuned = Run.open(w.run_dir)
    assert tuned.meta["init_from"] == str(imported) and tuned.config.model.L == 1  # the model settings are the source's
    said = [m for m in progress if m.startswith("starting from the weights of tiny-gpt2")]  # not the settings' L, char
    assert said and "its model (gpt, L = 1, H = 2, d_e = 16, l_max = 32), its tokenizer (imported, N_V = " in said[0]
    assert json.loads((tuned.path / "tokenizer.json").read_text()) == json.loads((imported / "tokenizer.json").read_text())


def test_a_refused_import_says_why(qtbot, window, runs_root, tmp_path):
    w = window
    folder = hf_folder(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "scale_attn_by_inverse_layer_idx": True}))
    w.runs.ask_import_folder = lambda: str(folder)
    w.findChild(QAction, "importModelAction").trigger()
    qtbot.waitUntil(lambda: (w.last_error or "").startswith("Cannot import"), timeout=LONG)
    assert "scale_attn_by_inverse_layer_idx" in w.last_error
    assert not (runs_root / "tiny-gpt2").exists()


def test_fine_tune_asks_first_saying_what_it_uses_and_names_the_new_run(qtbot, window, runs_root, tmp_path):
    from test_main_window import set_tiny

    w = window
    tok = train_tokenizer("char", [TEXT])
    cfg = RunConfig(ModelConfig(l_max=16, L=1, H=2, d_e=16, d_mlp=32, vocab_size=tok.vocab_size),
                    DataConfig(corpus="corpus.txt"), TrainConfig(device="cpu"))
    source = Run.create(cfg.validate(), root=runs_root, name="20261126-223922-gpt-fox")
    source.save_tokenizer(tok)
    source.save_checkpoint(build_model(cfg.model), None, 40, {})
    corpus = tmp_path / "mine.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    set_tiny(w, steps=4, corpus=str(corpus), eval_interval=2)
    w.train_panel.fields["lr"].setValue(0.002)
    w.refresh_runs(select=str(source.path))
    runs = w.train_view.runs
    qtbot.waitUntil(lambda: runs.selected() is not None and runs.selected().path == source.path, timeout=LONG)

    asked = []
    w.runs.confirm_fine_tune = lambda question: asked.append(question) or False  # the user says no
    w.findChild(QPushButton, "fineTuneRunButton").click()
    assert len(asked) == 1 and w.state == "idle" and w.job is None
    assert sorted(p.name for p in runs_root.iterdir()) == [source.name]  # nothing started, no folder made
    question = asked[0]
    assert question.startswith(f"Start a new run from the weights of {source.name}?")
    assert f"Weights: {source.name} at step 40." in question
    assert "Model: 20261126-223922-gpt-fox's (gpt, L = 1, H = 2, d_e = 16, l_max = 16)" in question
    assert f"Tokenizer and task: {source.name}'s (char, N_V = {tok.vocab_size}; next_token)." in question
    assert f"Corpus: {corpus} (the Corpus tab's)." in question
    assert "Training: 4 steps of batch 4 with " in question and "η = 0.002" in question
    named = question.rsplit("The new run: ", 1)[1]
    assert named.endswith(f"-gpt-mine-finetuned-from-gpt-fox, in {runs_root}.")  # the source's time left out

    # yes, after a second's thought: the run is made in the folder the question named, not a later time's
    w.runs.confirm_fine_tune = lambda question: asked.append(question) or time.sleep(1.1) or True
    w.findChild(QPushButton, "fineTuneRunButton").click()
    qtbot.waitUntil(lambda: w.state == "idle" and w.job is None and w.last_status is not None, timeout=LONG)
    assert w.last_status == "finished", w.last_error
    tuned = Run.open(w.run_dir)
    assert tuned.name.endswith("-gpt-mine-finetuned-from-gpt-fox") and tuned.meta["init_from"] == str(source.path)
    assert asked[-1].endswith(f"The new run: {tuned.name}, in {runs_root}.")  # the run made is the one named
    qtbot.waitUntil(lambda: any(r.path == tuned.path for r in runs.runs), timeout=LONG)
    tree = runs.tree
    tips = [tree.topLevelItem(i).toolTip(0) for i in range(tree.topLevelItemCount())]
    assert any(f"fine-tuned from the weights of {source.path}" in tip for tip in tips), tips
