"""The prompt panel for each task type: generate (streaming, stop), fill a mask, translate, classify,
and bad input shown in words. Tiny untrained models: these test the plumbing, not the model."""
import html
import threading

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPlainTextEdit, QPushButton

from fatstudio import ModelConfig, RunConfig, build_model
from fatstudio.core.config import DataConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.inference import generation, scoring
from fatstudio.core.inference.decode_export import CompileCancelled
from fatstudio.core.inference.decode_step import DecodeStep, decode_step_of
from fatstudio.core.inference.loaded import LoadedModel
from fatstudio.core.inference.prompting import display_token
from fatstudio.core.names import MapName
from fatstudio.qt.panels import prompt as prompt_module
from fatstudio.qt.panels.prompt import PromptPanel, mode_for
from fatstudio.qt.widgets.token_view import LossStrip, TokenView

CORPUS = ["the quick brown fox jumps over the lazy dog.\n", "hello world, 0123456789"]
TASKS = {"gpt": "next_token", "gopher": "next_token", "bert": "masked_lm", "edt": "seq2seq",
         "cls": "classification"}


def make_loaded(kind="gpt", l_max=24, dtype=torch.float32, seed=0):
    tok = train_tokenizer("char", CORPUS)
    arch = "bert" if kind == "cls" else kind
    extra = dict(n_classes=3) if kind == "cls" else {}
    cfg = ModelConfig(arch=arch, vocab_size=tok.vocab_size, l_max=l_max, L=2, L_enc=2, L_dec=2, H=2, d_e=16,
                      d_mlp=32, **extra)
    torch.manual_seed(seed)
    model = build_model(cfg).to(dtype).eval()
    names = ["negative", "neutral", "positive"] if kind == "cls" else []
    return LoadedModel(model, tok, RunConfig(model=cfg, data=DataConfig(task=TASKS[kind])), names, f"tiny {kind}", 7)


@pytest.fixture
def panel(qtbot, workspace):
    p = PromptPanel(workspace)
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def run_and_wait(qtbot, panel, timeout=10000):
    with qtbot.waitSignal(panel.runFinished, timeout=timeout) as blocker:
        assert panel.run(), panel.messageLabel.text()
    return blocker.args[0]


def test_modes():
    assert mode_for(None) is None
    assert mode_for(make_loaded("gpt")) == "generate"
    assert mode_for(make_loaded("gopher")) == "generate"
    assert mode_for(make_loaded("bert")) == "fill_mask"
    assert mode_for(make_loaded("edt")) == "translate"
    assert mode_for(make_loaded("cls")) == "classify"


def test_no_model(panel):
    assert not panel.generateButton.isEnabled()
    assert panel.run() is False
    assert panel.messageLabel.isVisibleTo(panel)


def test_generate_streams_tokens_and_emits_attention(qtbot, panel, monkeypatch):
    monkeypatch.setattr(prompt_module, "BATCH_SECONDS", 0.0)  # one GUI update per token
    loaded = make_loaded("gpt")
    panel.set_model(loaded)
    assert panel.generateButton.text() == "Generate" and panel.generateButton.isEnabled()
    panel.promptEdit.setPlainText("the fox")
    panel.tokensSpin.setValue(40)
    panel.seedSpin.setValue(3)
    batches = []
    orig = panel._append_choices
    monkeypatch.setattr(panel, "_append_choices", lambda cs: (batches.append(len(cs)), orig(cs)))
    maps = []
    panel.attentionReady.connect(maps.append)
    status = run_and_wait(qtbot, panel)
    assert status == "finished"
    assert len(batches) == 40  # streamed one by one, not all at the end
    assert panel.outputView.token_count() == 40
    expected = list(generation.generate(loaded.model, loaded.tokenizer, "the fox", tokens=40, seed=3,
                                       temperature=1.0, top_k=0, top_p=1.0))
    assert [c.id for c in panel.generated] == [c.id for c in expected]
    assert panel.output_text() == "".join(c.text for c in expected)
    assert panel.outputView.text() == "the fox" + panel.output_text()
    # the attention of the user's text: the prompt, then as much of the output as l_max = 24 allows
    assert len(maps) == 1 and maps[0] is panel.last_maps
    ids = (loaded.tokenizer.encode("the fox") + [c.id for c in expected])[:24]
    assert maps[0].tokens == loaded.tokenizer.token_strings(ids)
    assert set(maps[0].maps) == {MapName("self", 0), MapName("self", 1)}
    assert maps[0].maps[MapName("self", 1)].shape == (2, 24, 24)


def test_tooltip_shows_alternatives_and_cutoffs(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("hello")
    panel.tokensSpin.setValue(5)
    panel.topKSpin.setValue(3)
    panel.topPSpin.setValue(0.5)
    run_and_wait(qtbot, panel)
    tip = panel.outputView.tooltip(0)
    ch = panel.generated[0]
    assert "Top alternatives" in tip and f"{ch.prob:.4f}" in tip
    assert "top-k = 3" in tip and "top-p = 0.5" in tip
    assert ch.top_k_cutoff is not None and f"{ch.top_k_cutoff:.4f}" in tip
    assert panel.outputView.color(0) is not None  # coloured by probability


def test_greedy_is_deterministic(qtbot, panel):
    panel.set_model(make_loaded("gopher"))
    panel.promptEdit.setPlainText("lazy")
    panel.tokensSpin.setValue(12)
    panel.temperatureSpin.setValue(0.0)
    panel.seedSpin.setValue(-1)  # random seed: irrelevant at τ = 0
    run_and_wait(qtbot, panel)
    first = panel.output_text()
    run_and_wait(qtbot, panel)
    assert panel.output_text() == first and len(panel.generated) == 12


def test_generates_while_the_decode_step_compiles_then_through_it(qtbot, panel, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_COMPILE_DECODE", "1")
    release, calls = threading.Event(), []

    def slow_compiler(decoder):  # the GUI goes on while this waits
        release.wait(20)
        return dict.fromkeys(decoder.lengths, lambda x: calls.append(x) or decoder.eager_step(x))
    loaded = make_loaded("gpt")
    loaded.decoder = DecodeStep(loaded.model, compiler=slow_compiler)
    panel.set_model(loaded)
    panel.promptEdit.setPlainText("the ")
    panel.tokensSpin.setValue(30)
    panel.seedSpin.setValue(5)
    assert run_and_wait(qtbot, panel) == "finished" and not calls  # eager while compiling
    eager = [c.id for c in panel.generated]
    release.set()
    assert loaded.decoder.wait(10) and loaded.decoder.ready
    n_warmup = len(calls)
    assert run_and_wait(qtbot, panel) == "finished" and len(calls) > n_warmup
    assert [c.id for c in panel.generated] == eager


def test_closing_does_not_wait_for_the_decode_step_to_compile(qtbot, panel, monkeypatch):
    """The compile job a generation starts is cancelled with the rest when the window closes: the compile stops
    (on the CPU its child is killed) instead of the app waiting for it to end (83 s, bench/quit_time.py)."""
    monkeypatch.setenv("FATSTUDIO_COMPILE_DECODE", "1")

    def long_compiler(decoder):  # a compile that ends when cancelled, as `decode_export.aot_compile` does
        if decoder.cancelling.wait(20):
            raise CompileCancelled
        return {}
    loaded = make_loaded("gpt")
    loaded.decoder = DecodeStep(loaded.model, compiler=long_compiler)
    panel.set_model(loaded)
    panel.promptEdit.setPlainText("the ")
    panel.tokensSpin.setValue(3)
    assert run_and_wait(qtbot, panel) == "finished"
    qtbot.waitUntil(lambda: panel.workspace.jobs.busy("compile"))
    assert panel.workspace.jobs.shutdown(timeout=5)  # what closing the window and quitting do
    assert not loaded.decoder.ready and loaded.decoder.wanted  # a later generation would compile it again


def test_an_eager_generation_says_why_once(qtbot, panel, monkeypatch):
    monkeypatch.setenv("FATSTUDIO_COMPILE_DECODE", "1")
    loaded = make_loaded("gopher")  # relative positions: no static step
    panel.set_model(loaded)
    panel.promptEdit.setPlainText("the ")
    panel.tokensSpin.setValue(3)
    notes = []
    for _ in range(3):
        assert run_and_wait(qtbot, panel) == "finished"
        assert decode_step_of(loaded).wait(10)
        notes.append(panel.messageLabel.text())
    assert "relative positions" not in notes[0] and "relative positions" in notes[1]
    assert "relative positions" not in notes[2]


def test_stop(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("a")
    panel.tokensSpin.setValue(100000)
    maps = []
    panel.attentionReady.connect(maps.append)
    with qtbot.waitSignal(panel.runFinished, timeout=20000) as blocker:
        assert panel.run()
        assert panel.stopButton.isEnabled() and not panel.generateButton.isEnabled()
        qtbot.waitUntil(lambda: len(panel.generated) > 0, timeout=5000)
        qtbot.mouseClick(panel.stopButton, prompt_module.Qt.MouseButton.LeftButton)
    assert blocker.args == ["stopped"]
    assert 0 < len(panel.generated) < 100000
    assert len(maps) == 1  # the attention of what was generated before the stop
    assert panel.generateButton.isEnabled()


def test_unknown_symbol_is_a_message(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("héllo")
    assert panel.run() is False
    assert not panel.is_running()
    assert panel.messageLabel.isVisibleTo(panel)
    assert "'é'" in panel.messageLabel.text() and "Traceback" not in panel.messageLabel.text()


def test_long_prompt_is_cropped_with_a_note(qtbot, panel):
    panel.set_model(make_loaded("gpt", l_max=16))
    panel.promptEdit.setPlainText("the quick brown fox jumps over the lazy dog")
    panel.tokensSpin.setValue(4)
    maps = []
    panel.attentionReady.connect(maps.append)
    run_and_wait(qtbot, panel)
    assert "ℓ_max = 16" in panel.messageLabel.text()
    assert maps[0].maps[MapName("self", 0)].shape == (2, 16, 16)


def test_fill_mask(qtbot, panel):
    panel.set_model(make_loaded("bert"))
    assert panel.generateButton.text() == "Predict masks"
    panel.promptEdit.setPlainText("the [MASK]uick brown <mask>ox")
    panel.topSpin.setValue(4)
    maps = []
    panel.attentionReady.connect(maps.append)
    run_and_wait(qtbot, panel)
    assert len(panel.predictions) == 2
    assert panel.maskTable.rowCount() == 2 and panel.maskTable.columnCount() == 5
    best = [p.candidates[0][0] for p in panel.predictions]
    assert panel.outputView.text() == f"the {best[0]}uick brown {best[1]}ox"
    assert panel.outputView.token_count() == 2
    assert maps and maps[0].tokens.count("<mask>") == 2 and maps[0].tokens[0] == "<bos>"


def test_fill_mask_without_mask_is_a_message(qtbot, panel):
    panel.set_model(make_loaded("bert"))
    panel.promptEdit.setPlainText("no mask here")
    status = run_and_wait(qtbot, panel)
    assert status == "failed"
    assert "[MASK]" in panel.messageLabel.text()


def test_translate(qtbot, panel):
    loaded = make_loaded("edt")
    panel.set_model(loaded)
    assert panel.generateButton.text() == "Translate"
    assert panel.temperatureSpin.value() == 0.0
    panel.promptEdit.setPlainText("hello world")
    maps = []
    panel.attentionReady.connect(maps.append)
    run_and_wait(qtbot, panel)
    expected = list(generation.translate(loaded.model, loaded.tokenizer, "hello world", temperature=0.0,
                                        max_tokens=panel.tokensSpin.value()))
    assert panel.output_text() == "".join(c.text for c in expected)
    assert panel.outputView.token_count() == len(expected)
    m = maps[0]
    assert {n.kind for n in m.maps} == {"enc", "dec", "cross"}
    assert m.context_tokens == loaded.tokenizer.token_strings(
        [loaded.tokenizer.bos_id] + loaded.tokenizer.encode("hello world") + [loaded.tokenizer.eos_id])
    assert m.maps[MapName("cross", 0)].shape == (2, len(m.tokens), len(m.context_tokens))


def test_classify(qtbot, panel):
    loaded = make_loaded("cls")
    panel.set_model(loaded)
    assert panel.generateButton.text() == "Classify"
    panel.promptEdit.setPlainText("the lazy dog")
    maps = []
    panel.attentionReady.connect(maps.append)
    run_and_wait(qtbot, panel)
    probs = panel.class_probabilities
    assert sorted(n for n, _ in probs) == ["negative", "neutral", "positive"]
    assert abs(sum(p for _, p in probs) - 1) < 1e-5
    assert panel.classTable.rowCount() == 3
    assert panel.classTable.item(0, 0).text() == probs[0][0]
    assert panel.classTable.item(0, 1).text() == f"{probs[0][1]:.4f}"
    assert panel.outputView.text().endswith(probs[0][0])
    assert maps and maps[0].tokens[0] == "<bos>" and maps[0].tokens[-1] == "<eos>"


def test_classify_too_long_is_a_message(panel):
    panel.set_model(make_loaded("cls", l_max=8))
    panel.promptEdit.setPlainText("the quick brown fox")
    assert panel.run() is False
    assert "l_max = 8" in panel.messageLabel.text()  # the core's length check (the panel's own copy is gone)


def test_another_model_of_the_same_kind_clears_the_last_ones_output(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("lazy")
    panel.tokensSpin.setValue(5)
    run_and_wait(qtbot, panel)
    assert panel.output_text() and panel.statusLabel.text()
    temperature = panel.temperatureSpin.value()
    panel.set_model(make_loaded("gpt", seed=1))  # another run's model, prompted the same way
    assert panel.output_text() == "" and panel.statusLabel.text() == "" and panel.promptEdit.toPlainText() == "lazy"
    assert panel.temperatureSpin.value() == temperature  # the controls stay as they were


def test_new_model_while_generating(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("a")
    panel.tokensSpin.setValue(100000)
    assert panel.run()
    qtbot.waitUntil(lambda: len(panel.generated) > 0, timeout=5000)
    panel.set_model(make_loaded("bert"))  # the old run is stopped and its output dropped
    assert not panel.is_running() and panel.generateButton.isEnabled()
    panel.promptEdit.setPlainText("the [MASK]ox")
    run_and_wait(qtbot, panel)
    assert len(panel.predictions) == 1
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=5000)


def test_capture_attention_keeps_dtype():
    loaded = make_loaded("gpt", dtype=torch.float64)
    ids = loaded.tokenizer.encode("hello")
    maps = generation.attention_maps_for_ids(loaded.model, loaded.tokenizer, ids)
    assert maps.maps[MapName("self", 0)].dtype.name == "float64"
    assert maps.tokens == list("hello")


@pytest.mark.parametrize(("kind", "text"), [("gpt", "the fox"), ("edt", "hello"), ("bert", "the [MASK]ox"),
                                            ("cls", "the dog")])
def test_a_run_encodes_its_text_once(qtbot, panel, monkeypatch, kind, text):
    """The text is encoded once (in the GUI thread) for the answer and its attention; fill-mask and classify
    take their attention from the forward pass of the answer."""
    loaded = make_loaded(kind)
    encoded, passes = [], []
    encode = loaded.tokenizer.encode
    monkeypatch.setattr(loaded.tokenizer, "encode", lambda t: encoded.append(t) or encode(t))
    if kind in ("bert", "cls"):
        loaded.model.embed.register_forward_hook(lambda *_: passes.append(1))
    panel.set_model(loaded)
    panel.promptEdit.setPlainText(text)
    panel.tokensSpin.setValue(5)
    maps = []
    panel.attentionReady.connect(maps.append)
    assert run_and_wait(qtbot, panel) == "finished"
    assert "".join(encoded) == text.replace("[MASK]", "") and maps
    assert len(passes) == (1 if kind in ("bert", "cls") else 0)


# ------------------------------------------------------------------------------------------------- the seed
def test_the_seed_is_random_by_default_shown_and_repeatable(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("the")
    panel.tokensSpin.setValue(30)
    assert panel.seedSpin.value() == panel.seedSpin.minimum() and panel.seedSpin.text() == "random"
    run_and_wait(qtbot, panel)
    first_seed, first_text = panel.last_seed, panel.output_text()
    assert f"seed {first_seed}" in panel.statusLabel.text()
    run_and_wait(qtbot, panel)
    assert panel.last_seed != first_seed and f"seed {panel.last_seed}" in panel.statusLabel.text()
    # take the first sample's seed back: the button now offers the second's, so set the first by hand too
    assert panel.reuseSeedButton.isVisibleTo(panel) and str(panel.last_seed) in panel.reuseSeedButton.text()
    panel.reuseSeedButton.click()
    assert panel.seedSpin.value() == panel.last_seed
    panel.seedSpin.setValue(first_seed)
    run_and_wait(qtbot, panel)
    assert panel.last_seed == first_seed and panel.output_text() == first_text  # the same sample, exactly


def test_greedy_names_no_seed(qtbot, panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("the")
    panel.tokensSpin.setValue(5)
    panel.temperatureSpin.setValue(0.0)
    run_and_wait(qtbot, panel)
    assert panel.last_seed is None and "greedy" in panel.statusLabel.text()
    assert not panel.reuseSeedButton.isVisibleTo(panel)


# ------------------------------------------------------------------------------------------------ Score text
def score_and_wait(qtbot, panel, timeout=10000):
    with qtbot.waitSignal(panel.runFinished, timeout=timeout) as blocker:
        qtbot.mouseClick(panel.findChild(QPushButton, "scoreButton"), Qt.MouseButton.LeftButton)
    return blocker.args[0]


def test_score_text_colours_every_token_by_its_probability(qtbot, panel):
    loaded = make_loaded("gpt")
    panel.set_model(loaded)
    text = "the lazy fox"
    panel.promptEdit.setPlainText(text)
    maps = []
    panel.attentionReady.connect(maps.append)
    assert score_and_wait(qtbot, panel) == "finished"
    expected = scoring.score_text(loaded, text)
    s = panel.last_score
    assert s.losses == pytest.approx(expected.losses, abs=1e-6) and s.ids == loaded.tokenizer.encode(text)
    view = panel.findChild(TokenView, "scoreView")
    assert view.isVisibleTo(panel) and not panel.outputView.isVisibleTo(panel)
    assert view.text() == text and view.token_count() == len(text)
    assert view.color(0) is None and "not scored" in view.tooltip(0)  # the first token has no prefix
    tok = s.tokens[4]
    assert view.color(4) is not None
    tip = view.tooltip(4)
    assert f"loss −ln p = {tok.loss:.3f} nats" in tip and f"p = {tok.prob:.4f}" in tip
    assert "Most likely here" in tip and html.escape(display_token(tok.alternatives[0][0], 20)) in tip
    assert ("◀" in tip) == any(a == tok.text and abs(p - tok.prob) < 1e-12 for a, p in tok.alternatives)
    assert "given the 4 tokens before it" in tip
    strip = panel.findChild(LossStrip, "lossStrip")
    assert strip.isVisibleTo(panel) and strip.losses() == [t.loss for t in s.tokens]
    summary = panel.scoreSummary.text()
    assert f"mean loss {expected.mean_loss:.3f} nats/token" in summary and f"{expected.bits_per_char:.3f} bits/char" in summary
    assert "Algorithm 13" in summary and "windows" not in summary
    assert panel.statusLabel.text() == f"finished: {len(text) - 1} tokens scored"
    assert maps and maps[0].tokens == list(text) and "scored text" in maps[0].caption
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=strip.bar_rect(4).center().toPoint())
    assert strip.marked() == 4  # a bar clicked marks its token in the text too
    panel.run()  # Generate shows the generated text again
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=10000)
    assert panel.outputView.isVisibleTo(panel) and not view.isVisibleTo(panel)


def test_score_a_text_longer_than_l_max_in_windows(qtbot, panel):
    panel.set_model(make_loaded("gopher", l_max=8))
    panel.promptEdit.setPlainText("the quick brown fox jumps")
    score_and_wait(qtbot, panel)
    assert panel.last_score.windowed and len(panel.last_score.scored) == 24
    assert "windows of 8 tokens" in panel.scoreSummary.text() and "at least 4 tokens" in panel.scoreSummary.text()


def test_score_bert_masks_each_position(qtbot, panel):
    loaded = make_loaded("bert")
    panel.set_model(loaded)
    assert panel.scoreButton.isEnabled() and "Algorithm 12" in panel.scoreButton.toolTip()
    panel.promptEdit.setPlainText("lazy dog")
    score_and_wait(qtbot, panel)
    assert panel.last_score.losses == pytest.approx(scoring.score_text(loaded, "lazy dog").losses, abs=1e-6)
    assert panel.scoreView.color(0) is not None  # every position is scored
    assert "pseudo-log-likelihood" in panel.scoreSummary.text()


def test_score_the_target_given_the_source(qtbot, panel):
    loaded = make_loaded("edt")
    panel.set_model(loaded)
    target = panel.findChild(QPlainTextEdit, "targetEdit")
    assert target.isVisibleTo(panel)
    panel.promptEdit.setPlainText("hello")
    assert panel.score() is False and "target" in panel.messageLabel.text()  # no target yet: "nothing to score"
    target.setPlainText("olleh")
    score_and_wait(qtbot, panel)
    expected = scoring.score_text(loaded, "olleh", source="hello")
    assert panel.last_score.losses == pytest.approx(expected.losses, abs=1e-6)
    assert panel.scoreView.text() == "olleh<eos>" and "Algorithm 11" in panel.scoreSummary.text()
    panel.set_model(make_loaded("gpt"))
    assert not target.isVisibleTo(panel) and panel.scoreView.token_count() == 0


def test_a_classifier_offers_no_score_and_says_why(panel):
    panel.set_model(make_loaded("cls"))
    assert not panel.scoreButton.isEnabled() and "classifier" in panel.scoreButton.toolTip()
    panel.set_model(None)
    assert not panel.scoreButton.isEnabled() and "open a run" in panel.scoreButton.toolTip()


def test_bad_text_to_score_is_a_message(panel):
    panel.set_model(make_loaded("gpt"))
    panel.promptEdit.setPlainText("t")
    assert panel.score() is False and "at least two tokens" in panel.messageLabel.text()
    panel.promptEdit.setPlainText("héllo")
    assert panel.score() is False and "'é'" in panel.messageLabel.text() and not panel.is_running()


def test_score_a_snapshot_while_training(qtbot, window):
    from test_main_window import LONG, set_tiny, wait_idle

    w = window
    set_tiny(w, steps=100_000, corpus="copy")
    w.train_view.trainButton.click()
    qtbot.waitUntil(lambda: w.state == "running" and w.plots.n_points() > 2, timeout=LONG)
    w.findChild(QPushButton, "snapshotButton").click()
    qtbot.waitUntil(lambda: w.loaded_model is not None, timeout=LONG)
    panel = w.prompt_panel
    tok = w.loaded_model.tokenizer
    panel.promptEdit.setPlainText("".join(tok.token_strings(range(6))))  # six characters of the corpus
    assert score_and_wait(qtbot, panel, timeout=LONG) == "finished"
    assert len(panel.last_score.scored) == 5 and w.state == "running"  # training went on meanwhile
    w.stop_training()
    wait_idle(qtbot, w)


RUSSIAN = ["Привет мир, как дела? Всё хорошо. 中文字符 " * 3]


def test_a_character_split_into_byte_pieces_shows_once_in_the_output_and_its_tooltip_names_the_pieces(qtbot, panel):
    tok = train_tokenizer("bpe", RUSSIAN, vocab_size=300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, l_max=24, L=1, H=2, d_e=16, d_mlp=32)
    panel.set_model(LoadedModel(build_model(cfg).eval(), tok, RunConfig(model=cfg, data=DataConfig(tokenizer="bpe")),
                                [], "tiny bpe", 1))
    ids = tok.encode("Привет 中文")
    assert tok.token_strings(ids[:2]) == ["\\xd0", "\\x9fр"] and tok.token_strings(ids[-2:]) == ["\\xe6\\x96", "\\x87"]
    stream = generation._TextStream(tok, tok.encode("x"))  # what a generation streams: a piece of a character adds ""
    choices = [generation.TokenChoice(i, stream.push(i), 0.5, []) for i in [*ids, tok.eos_id]]
    assert [c.text for c in choices[:2]] == ["", "Пр"]
    panel.show()
    panel._append_choices(choices)
    view = panel.outputView
    assert view.text() == "Привет 中文"
    assert view.toPlainText() == "Привет 中文∅"  # no ∅ for a piece of a character; the eos drawn still shows
    assert view.token_count() == len(ids) + 1
    first = view.token_at(view.token_rect_center(1))  # П: the token that completes it
    assert first == 1
    tip = view.tooltip(1)
    assert tip.startswith("2 tokens make <code>Пр</code> (a character's bytes split between them): "
                          "<code>П‹1/2›</code> (p = 0.500) + <code>П‹2/2›р</code> (p = 0.500)<br>"), tip
    assert view.tooltip(len(ids) - 1).startswith("2 tokens make <code>文</code>")
    assert "tokens make" not in view.tooltip(2)  # a token of whole characters


def test_the_attention_of_a_text_labels_byte_pieces_by_their_character():
    tok = train_tokenizer("bpe", RUSSIAN, vocab_size=300)
    cfg = ModelConfig(vocab_size=tok.vocab_size, l_max=24, L=1, H=2, d_e=16, d_mlp=32)
    maps = generation.attention_maps(build_model(cfg).eval(), tok, "Привет 中文")
    assert maps.tokens[:2] == ["П‹1/2›", "П‹2/2›р"] and maps.tokens[-2:] == ["文‹1–2/3›", "文‹3/3›"]
    assert maps.query_tokens(MapName("self", 0)) == maps.tokens
    assert [display_token(t) for t in maps.tokens[:2]] == ["П‹1/2›", "П‹2/2›р"]
