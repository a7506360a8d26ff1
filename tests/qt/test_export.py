"""The runs list offers the Hugging Face export: runsExportButton asks for a folder (the dialog is replaced),
exports in a worker and shows the result in the status bar, or the refusal naming the field."""
from PySide6.QtWidgets import QFileDialog, QPushButton

from fatstudio import ModelConfig
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig

LONG = 60_000


def tiny_run(runs_root, tmp_path, name, **model):
    from fatstudio.core.training import train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog.\n" * 50, encoding="utf-8")
    cfg = RunConfig(ModelConfig(l_max=16, L=1, H=2, d_e=16, d_mlp=32, **model), DataConfig(corpus=str(corpus)),
                    TrainConfig(steps=3, batch_size=4, eval_interval=10, eval_iters=1, warmup=1, sample_tokens=0,
                                device="cpu"))
    for _ in train(cfg, run_dir=runs_root / name):
        pass
    return runs_root / name


def test_runs_list_exports_and_shows_refusals(qtbot, window, runs_root, tmp_path, monkeypatch):
    w = window
    good = tiny_run(runs_root, tmp_path, "gpt")
    alibi = tiny_run(runs_root, tmp_path, "alibi", positions="alibi")
    dest = tmp_path / "exports"
    dest.mkdir()
    asked = []

    def choose(*args, **kwargs):
        asked.append(args)
        return str(dest) if len(asked) > 1 else ""  # the first time the person cancels

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(choose))
    w.refresh_runs()  # read in a worker thread
    qtbot.waitUntil(lambda: not w.runs_loading and w.train_view.runs.tree.topLevelItemCount() == 2, timeout=LONG)
    runs, button = w.train_view.runs, w.findChild(QPushButton, "runsExportButton")
    runs.tree.clearSelection()
    assert not button.isEnabled()  # nothing selected
    runs.select_path(good)
    assert button.isEnabled()
    button.click()  # cancelled: nothing written
    assert len(asked) == 1 and not any(dest.iterdir())
    button.click()
    out = dest / "gpt-hf"
    qtbot.waitUntil(lambda: "Exported gpt" in w.statusBar().currentMessage(), timeout=LONG)
    assert "GPT2LMHeadModel" in w.statusBar().currentMessage()
    assert "generate stops at n_positions = 16 tokens, prompt included" in w.statusBar().currentMessage()  # ℓ_max
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    runs.select_path(alibi)
    button.click()
    qtbot.waitUntil(lambda: (w.last_error or "").startswith("Cannot export alibi"), timeout=LONG)
    assert "model.positions = 'alibi'" in w.last_error
    assert not (dest / "alibi-hf").exists()
