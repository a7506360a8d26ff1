"""``fatstudio import SOURCE --out RUN_DIR``: a transformers folder (here one that ``fatstudio export`` wrote, so no
transformers is needed) or a Hub id through huggingface_hub (stood in for: no network in tests) becomes a run
that ``generate`` prompts like the run it came from; refusals are one line, and nothing is written."""
import json
import sys
import types

import pytest
import torch

from fatstudio import ModelConfig, build_model
from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.runs.export_hf import export_hf
from fatstudio.core.runs.folder import Run

TEXT = "the quick brown fox jumps over the lazy dog.\nthe dog sleeps; the fox runs!\n" * 20


@pytest.fixture
def hf_folder(tmp_path):
    """A Llama-style transformers folder (written by fatstudio's export from a run with random weights)."""
    tok = train_tokenizer("bpe", [TEXT], vocab_size=300)
    cfg = RunConfig(ModelConfig(l_max=32, L=2, H=4, H_kv=2, d_e=32, d_mlp=48, vocab_size=tok.vocab_size, norm="rms",
                                activation="swiglu", positions="rope", bias=False),
                    DataConfig(corpus="corpus.txt", tokenizer="bpe"), TrainConfig(device="cpu"))
    run = Run.create(cfg.validate(), root=tmp_path, name="source-run")
    run.save_tokenizer(tok)
    torch.manual_seed(0)
    net = build_model(cfg.model)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1 if p.dim() == 1 else 0))
    run.save_checkpoint(net, None, 1, {})
    export_hf(run.path, tmp_path / "hf")
    return tmp_path / "hf"


def generated(run_dir, capsys) -> str:
    assert main(["generate", str(run_dir), "--prompt", "the lazy", "--tokens", "12", "--temperature", "0"]) == 0
    return capsys.readouterr().out


def test_import_then_generate_as_the_source_run(hf_folder, tmp_path, capsys):
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    out = capsys.readouterr().out
    assert "imported a LlamaForCausalLM" in out and "fatstudio generate" in out
    run = Run.open(tmp_path / "imported")
    assert run.config.model.positions == "rope" and run.config.model.H_kv == 2
    assert generated(tmp_path / "imported", capsys) == generated(tmp_path / "source-run", capsys)


def test_refusals_are_one_line_and_write_nothing(hf_folder, tmp_path, capsys):
    cfg = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps({**cfg, "sliding_window": 8}))
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sliding_window" in err[0]
    assert not (tmp_path / "r").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("mine")
    assert main(["import", str(hf_folder), "--out", str(taken)]) == EXIT_ERROR
    assert "already exists" in capsys.readouterr().err and [p.name for p in taken.iterdir()] == ["x"]
    assert main(["import", str(tmp_path / "nowhere" / "x" / "y"), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    assert "not a folder" in capsys.readouterr().err


def test_a_model_that_cannot_fit_is_refused_before_its_weights_are_read(hf_folder, tmp_path, capsys, monkeypatch):
    from fatstudio.core import memory
    from fatstudio.core.runs import import_hf

    monkeypatch.setattr(memory, "ram_available", lambda: 1000)  # 1 kB free
    monkeypatch.setattr(import_hf, "read_tensors", lambda folder: pytest.fail("the weights were read"))
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RAM" in err[0] and not (tmp_path / "r").exists()


def test_weights_of_another_shape_than_config_json_are_refused_in_words(hf_folder, tmp_path, capsys):
    cfg = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps({**cfg, "intermediate_size": cfg["intermediate_size"] + 8}))
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()  # the progress lines, then the error in one line
    assert "Traceback" not in "".join(err) and err[-1].startswith("fatstudio import: error: ")
    assert "do not match its config.json: size mismatch for layers.0.mlp" in err[-1], err
    assert not (tmp_path / "r").exists()


def test_a_hub_id_goes_through_huggingface_hub(hf_folder, tmp_path, capsys, monkeypatch):
    asked = []

    def snapshot_download(repo_id, allow_patterns=None):
        asked.append((repo_id, allow_patterns))
        if repo_id == "nobody/missing":
            raise OSError("We have no connection and the files are not in the cache (HF_HUB_OFFLINE=1)")
        return str(hf_folder)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert main(["import", "someone/tiny-llama", "--out", str(tmp_path / "r"), "--dtype", "bfloat16"]) == 0
    assert asked[0][0] == "someone/tiny-llama" and "*.safetensors" in asked[0][1]
    assert Run.open(tmp_path / "r").meta["imported_from"] == "someone/tiny-llama"
    capsys.readouterr()
    assert main(["import", "nobody/missing", "--out", str(tmp_path / "r2")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()  # a progress line, then the error in one line
    assert err[-1].startswith("fatstudio import: error: cannot fetch nobody/missing") and len(err) == 2


def test_a_hub_id_without_huggingface_hub_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    assert main(["import", "gpt2", "--out", str(tmp_path / "r")]) == EXIT_ERROR
    assert "fatstudio[hub]" in capsys.readouterr().err


FINE_TUNE = """
[data]
corpus = "{corpus}"
[train]
steps = {steps}
batch_size = 8
lr = {lr}
warmup = 2
eval_interval = 10
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 5
device = "cpu"
{extra}
"""


def fine_tune_file(tmp_path, steps=40, lr=3e-3, extra=""):
    corpus = tmp_path / "mine.txt"
    corpus.write_text("the fox runs to the dog. the dog runs to the fox.\n" * 60, encoding="utf-8")
    path = tmp_path / f"fine-{steps}.toml"
    path.write_text(FINE_TUNE.format(corpus=corpus, steps=steps, lr=lr, extra=extra), encoding="utf-8")
    return path


def test_fine_tuning_an_imported_model_starts_from_its_weights_and_lowers_the_loss(hf_folder, tmp_path):
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    source = Run.open(tmp_path / "imported")
    assert main(["train", str(fine_tune_file(tmp_path)), "--init-from", str(source.path), "--out",
                 str(tmp_path / "tuned"), "--quiet"]) == 0
    tuned = Run.open(tmp_path / "tuned")
    assert tuned.config.model == source.config.model  # the model settings are the source's
    assert (tuned.path / "tokenizer.json").read_text() == (source.path / "tokenizer.json").read_text()
    assert tuned.meta["init_from"] == str(source.path)
    losses = [r["train_loss"] for r in tuned.metrics()]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5


def test_fine_tuning_starts_at_the_source_weights(hf_folder, tmp_path):
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    assert main(["train", str(fine_tune_file(tmp_path, steps=1, lr=1e-9)), "--init-from", str(tmp_path / "imported"),
                 "--out", str(tmp_path / "tuned"), "--quiet"]) == 0
    a, b = Run.open(tmp_path / "imported").load_model(), Run.open(tmp_path / "tuned").load_model()
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_a_model_setting_that_conflicts_with_the_source_is_refused_by_name(hf_folder, tmp_path, capsys):
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    capsys.readouterr()
    toml = fine_tune_file(tmp_path, extra="[model]\nL = 6\ndropout = 0.1\n")
    assert main(["train", str(toml), "--init-from", str(tmp_path / "imported"), "--out", str(tmp_path / "t")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.L = 6" in err[0] and "dropout" not in err[0]
    assert not (tmp_path / "t").exists()
