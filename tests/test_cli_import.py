"""``fatstudio import SOURCE --out RUN_DIR``: a transformers folder (here one that ``fatstudio export`` wrote, so no
transformers is needed) or a Hub id through huggingface_hub (stood in for: no network in tests) becomes a run
that ``generate`` prompts like the run it came from; refusals are one line, and nothing is written."""
import fractions
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.runs.folder import Run

sys.path.insert(0, str(Path(__file__).parent / "core"))
from hf_checkpoints import exported


@pytest.fixture
def hf_folder(tmp_path):
    """A Llama-style transformers folder (written by fatstudio's export from a run with random weights)."""
    return exported(tmp_path)


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
    monkeypatch.setattr(import_hf, "read_tensors", lambda *a, **kw: pytest.fail("the weights were read"))
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


# ---- a folder that is not what it says (issue 34, kind 1) ------------------------------------------------------
def _config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    for k in [k for k, v in changes.items() if v is None]:
        del cfg[k]
    (folder / "config.json").write_text(json.dumps(cfg))


def _tensors(folder, change):
    """Rewrite model.safetensors through ``change(tensors) -> tensors``."""
    tensors = change(load_file(folder / "model.safetensors"))
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _int8(tensors):
    """bitsandbytes' 8-bit layout: every projection's weight as int8 rows, with each row's scale beside it."""
    out = {}
    for k, v in tensors.items():
        if k.endswith("proj.weight"):
            scale = v.abs().amax(dim=1) / 127
            out[k], out[k.replace(".weight", ".SCB")] = (v / scale[:, None]).round().to(torch.int8), scale
        else:
            out[k] = v
    return out


def _pickle_only(folder):
    state = load_file(folder / "model.safetensors")
    state["lr_scheduler"] = fractions.Fraction(1, 3)  # any Python object: loading it would run code
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def _shards(folder, name):
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    keys = load_file(folder / "model-00001-of-00001.safetensors")
    weight_map = dict.fromkeys(keys, name)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


HOSTILE = {  # what is done to a good folder -> what the one line of the refusal says
    "config.json a list": (lambda f: (f / "config.json").write_text("[1, 2]"), r"hf/config.json holds list"),
    "config.json not JSON": (lambda f: (f / "config.json").write_text('{"hidden_size": 3'), r"hf/config.json is not valid JSON"),
    "a size missing": (lambda f: _config(f, hidden_size=None), r"config.json has no hidden_size"),
    "a size a string": (lambda f: _config(f, num_hidden_layers="2"), r"config.json: num_hidden_layers = \"2\" cannot"),
    "a size negative": (lambda f: _config(f, intermediate_size=-48), r"config.json: intermediate_size = -48 cannot"),
    "rope_scaling a string": (lambda f: _config(f, rope_scaling="linear"), r"config.json: rope_scaling = \"linear\""),
    "eps a list": (lambda f: _config(f, rms_norm_eps=[1e-6]), r"config.json: rms_norm_eps = \[1e-06\]"),
    "architectures a string": (lambda f: _config(f, architectures="LlamaForCausalLM"), r"config.json: architectures"),
    "a token id past the vocabulary": (lambda f: _config(f, bos_token_id=10**6), r"config.json: bos_token_id = 1000000"),
    "8-bit quantized": (lambda f: (_tensors(f, _int8), _config(f, quantization_config={
        "quant_method": "bitsandbytes", "load_in_8bit": True})), r"config.json: quantization_config = .*quantized"),
    "int8 weights without quantization_config": (lambda f: _tensors(f, _int8),
                                                 r"hf/model.safetensors: model.layers.0.\S+ is int8: not floating point"),
    "float64 weights": (lambda f: _tensors(f, lambda t: {k: v.double() for k, v in t.items()}),
                        r"hf/model.safetensors: \S+ is float64, which float32 would round"),
    "scales beside float weights": (lambda f: _tensors(f, lambda t: {**t, "model.layers.0.mlp.up_proj.weight_scale":
                                                                      torch.ones(1)}),
                                    r"hf/model.safetensors holds 1 tensor\(s\) .* no place for "
                                    r"\(model.layers.0.mlp.up_proj.weight_scale\)"),
    "lm_head not the tied embedding": (lambda f: (_config(f, tie_word_embeddings=True), _tensors(
        f, lambda t: {**t, "lm_head.weight": t["model.embed_tokens.weight"] + 1})),
        r"config.json: tie_word_embeddings = true cannot be imported: the checkpoint's lm_head.weight differs"),
    "tokenizer.json not JSON": (lambda f: (f / "tokenizer.json").write_text('{"model": '),
                                r"hf/tokenizer.json is not a tokenizer the tokenizers library reads"),
    "tokenizer.json another kind of JSON": (lambda f: (f / "tokenizer.json").write_text('{"model": 3}'),
                                            r"hf/tokenizer.json is not a tokenizer"),
    "tokenizer_config.json a list": (lambda f: (f / "tokenizer_config.json").write_text("[]"),
                                     r"hf/tokenizer_config.json holds list"),
    "pickle-only checkpoint": (_pickle_only, r"hf/pytorch_model.bin is in PyTorch's pickle format, which fatstudio "
                                             r"does not read \(unpickling can run code\); save the model with "
                                             r"safetensors"),
    "torn safetensors": (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:500]),
                         r"hf/model.safetensors is damaged or not a safetensors file"),
    "a shard outside the folder": (lambda f: _shards(f, "../source-run/model.safetensors"),
                                   r"hf/model.safetensors.index.json: weight_map names \"../source-run/"),
    "a shard missing": (lambda f: _shards(f, "model-00002-of-00002.safetensors"),
                        r"index.json: weight_map names model-00002-of-00002.safetensors, which the folder does not have"),
    "a sparse 8 GB config.json": (lambda f: os.truncate(f / "config.json", 8 << 30),
                                  r"hf/config.json is 8.0 GB, more than such a file can hold"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_folder_that_is_not_what_it_says_is_refused_in_a_line_naming_the_file_and_field(hf_folder, tmp_path,
                                                                                          capsys, case):
    edit, says = HOSTILE[case]
    edit(hf_folder)
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if not line.endswith("…")]  # the progress lines end in …
    assert len(errors) == 1 and errors[0].startswith("fatstudio import: error: "), err
    assert re.search(says, errors[0]), errors[0]
    assert "weights_only" not in errors[0] and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "r").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["hf", "source-run"]


def test_a_fifo_in_place_of_the_weights_is_refused_at_once_not_waited_on(hf_folder, tmp_path):
    """A FIFO opened for reading blocks until a writer comes (and was deaf to SIGTERM): it is never opened."""
    (hf_folder / "model.safetensors").unlink()
    os.mkfifo(hf_folder / "model.safetensors")
    done = subprocess.run([sys.executable, "-m", "fatstudio", "import", str(hf_folder), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == EXIT_ERROR
    assert done.stderr.strip().splitlines()[-1].endswith("hf/model.safetensors is a FIFO (named pipe), not a regular "
                                                         "file; give a file.")
    assert not (tmp_path / "r").exists()


def test_a_checkpoint_with_its_buffers_and_another_heads_is_imported_without_them(hf_folder, tmp_path, capsys):
    """What the class does not compute with (saved buffers) is dropped; the logits are the same."""
    _tensors(hf_folder, lambda t: {**t, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)})
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    capsys.readouterr()
    assert generated(tmp_path / "imported", capsys) == generated(tmp_path / "source-run", capsys)


def test_a_folder_with_vocab_json_and_merges_txt_instead_of_tokenizer_json(hf_folder, tmp_path, capsys):
    shutil.move(hf_folder / "tokenizer.json", tmp_path / "tokenizer.json")
    from tokenizers import Tokenizer

    Tokenizer.from_file(str(tmp_path / "tokenizer.json")).model.save(str(hf_folder))  # vocab.json, merges.txt
    os.mkfifo(tmp_path / "fifo")
    (hf_folder / "merges.txt").rename(tmp_path / "merges.txt")
    (hf_folder / "merges.txt").symlink_to(tmp_path / "fifo")
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    assert "hf/merges.txt (a link to" in capsys.readouterr().err


def test_an_export_and_an_import_write_a_checksum_and_import_checks_it(hf_folder, tmp_path, capsys):
    from fatstudio.core.files import verify

    assert verify(hf_folder / "model.safetensors") is True  # export's, in the header: transformers reads it still
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "imported")]) == 0
    assert verify(tmp_path / "imported" / "model.safetensors") is True
    data = bytearray((hf_folder / "model.safetensors").read_bytes())
    data[-4096:] = bytes(4096)  # four kilobytes of zeros in the tensors' data
    (hf_folder / "model.safetensors").write_bytes(bytes(data))
    assert main(["import", str(hf_folder), "--out", str(tmp_path / "r")]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert "hf/model.safetensors is damaged: it does not match the checksum written into it" in err[-1]


