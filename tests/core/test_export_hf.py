"""Export to Hugging Face transformers (core/export_hf.py): GPT-2-style and Llama-style runs load with
AutoModelForCausalLM / AutoTokenizer and give fatstudio's logits (within 1e-4) and token ids; variations
no standard class expresses are refused naming the field; the command line's exit codes.

The round trips need ``transformers`` (in the ``test`` extra); the refusals do not."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from hf_checkpoints import run_of_random_weights
from training_helpers import TINY, tiny_config

from fatstudio import ModelConfig
from fatstudio.cli import EXIT_ERROR, main
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.runs.export_hf import GPT2, LLAMA, export_hf, hf_class
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import train

TEXT = "the quick brown fox jumps over the lazy dog.\nthe dog sleeps; the fox runs!\n"
PROMPTS = ["the lazy fox", "dog.\nthe <mask> brown", "the <bos>fox"]


# transformers is loaded in a child process: imported into the suite's process, it left a later Qt training
# test's parallel tokenizer encoding (tokenizers' Rust thread pool) hanging.
LOAD = r"""
import json, sys
import torch, transformers
prompts, out = json.loads(sys.argv[1]), {}
for folder in sys.argv[2:]:
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    rows = []
    for text in prompts:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].tolist()
        rows.append(dict(ids=ids, decoded=tok.decode(ids), logits=logits))
    out[folder] = dict(cls=type(model).__name__, tie=model.config.tie_word_embeddings, rows=rows)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def transformers():
    """A function: folders -> what AutoModelForCausalLM and AutoTokenizer make of each (in a child process)."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install -e '.[test]')")

    def load(*folders):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1"}
        done = subprocess.run([sys.executable, "-c", LOAD, json.dumps(PROMPTS), *map(str, folders)], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    return load


def random_run(tmp_path, tokenizer="char", **model):
    """A run folder whose checkpoint holds random weights far from the initialisation (biases ≠ 0, γ ≠ 1),
    so a transposed, swapped or missing tensor shows in the logits."""
    tok = train_tokenizer(tokenizer, [TEXT * 20], vocab_size=300 if tokenizer == "bpe" else 40)
    cfg = RunConfig(ModelConfig(**{**TINY, "l_max": 32, "vocab_size": tok.vocab_size, **model}),
                    DataConfig(corpus="corpus.txt", tokenizer=tokenizer), TrainConfig(device="cpu"))
    return run_of_random_weights(cfg, tok, tmp_path, "run", scale=0.3, optimizer=True)


def compare(run, hf):
    """The max |logit difference| between the run's model and transformers' (``hf``: one folder of the
    ``transformers`` fixture's answer) over PROMPTS, asserting the same token ids and decoded text."""
    loaded = run.load_model()
    diff = 0.0
    for text, row in zip(PROMPTS, hf["rows"]):
        ids = loaded.tokenizer.encode(text)
        assert row["ids"] == ids, text
        assert row["decoded"] == loaded.tokenizer.backend.decode(ids, skip_special_tokens=False)
        with torch.no_grad():
            ours = loaded.model(torch.tensor([ids]))[0]
        diff = max(diff, (torch.tensor(row["logits"]) - ours).abs().max().item())
    return diff


CASES = {
    "gpt2": ("char", dict(), GPT2),
    "gpt2-no-bias-tied-gelu-tanh-gqa": ("word", dict(bias=False, tie_embeddings=True, activation="gelu_tanh",
                                                     H=4, H_kv=2), GPT2),
    "gpt2-sinusoidal-relu": ("bpe", dict(positions="sinusoidal", activation="relu", norm_eps=1e-3), GPT2),
    "llama": ("char", dict(norm="rms", positions="rope", activation="swiglu", bias=False, H=4, H_kv=2,
                           position_base=500.0), LLAMA),
    "llama-bias-tied-mqa": ("bpe", dict(arch="gopher", positions="rope", activation="swiglu", H=4, H_kv=1,
                                        tie_embeddings=True), LLAMA),
}


@pytest.fixture(scope="module")
def exported(transformers, tmp_path_factory):
    """Each case's run, exported, and what transformers loads from it: {case: (run, folder's answer)}."""
    runs = {}
    for case, (kind, model, cls) in CASES.items():
        tmp = tmp_path_factory.mktemp(case)
        runs[case] = random_run(tmp, kind, **model)
        assert export_hf(runs[case].path, tmp / "hf").model_class == cls
    answers = transformers(*(run.path.parent / "hf" for run in runs.values()))
    return {case: (run, answers[str(run.path.parent / "hf")]) for case, run in runs.items()}


@pytest.mark.parametrize("case", CASES)
def test_round_trip_logits_and_ids(exported, case):
    run, hf = exported[case]
    assert hf["cls"] == CASES[case][2]
    diff = compare(run, hf)
    assert diff <= 1e-4, f"{case}: max |Δlogit| = {diff:.2e}"
    assert hf["tie"] == run.config.model.tie_embeddings


def test_trained_run_exports_by_the_command_line(transformers, text_file, tmp_path, capsys):
    run_dir = tmp_path / "run"
    for _ in train(tiny_config(text_file, steps=10), run_dir=run_dir):
        pass
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == 0
    assert "GPT2LMHeadModel" in capsys.readouterr().out
    assert compare(Run.open(run_dir), transformers(out)[str(out)]) <= 1e-4
    # a second export into the same (now full) folder is refused, in one line
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "not an empty folder" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model, field", [
    (dict(positions="alibi"), "model.positions = 'alibi'"),
    (dict(arch="gopher"), "model.positions = 'relative'"),
    (dict(norm_position="post"), "model.norm_position = 'post'"),
    (dict(arch="bert"), "model.arch = 'bert'"),
    (dict(arch="edt"), "model.arch = 'edt'"),
    (dict(norm="rms"), "model.norm = 'rms'"),
    (dict(activation="swiglu"), "model.activation = 'swiglu'"),
    (dict(positions="rope", norm="rms"), "model.activation = 'gelu'"),
    (dict(positions="rope", activation="swiglu"), "model.norm = 'layer'"),
    (dict(d_attn=4), "model.d_attn = 4"),
    (dict(positions="rope", norm="rms", activation="swiglu", d_mid=4), "model.d_mid = 4"),
    (dict(H=3, d_attn=4, d_mid=4), "model.H = 3"),
])
def test_variations_without_a_class_are_refused_naming_the_field(model, field):
    with pytest.raises(ValueError, match="Hugging Face|does not fit") as e:
        hf_class(ModelConfig(**{**TINY, **model}).resolved())
    assert field in str(e.value)


def test_command_line_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    run = random_run(tmp_path, positions="alibi")
    out = tmp_path / "hf"
    assert main(["export", str(run.path), "--format", "hf", "--out", str(out)]) == EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert err.startswith("fatstudio export: error: model.positions = 'alibi'") and "\n" not in err
    assert not out.exists()
    assert main(["export", str(tmp_path / "nope"), "--format", "hf", "--out", str(out)]) == EXIT_ERROR
    assert "not a fatstudio run" in capsys.readouterr().err


def test_export_needs_no_transformers_and_writes_the_config(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it would fail
    run = random_run(tmp_path, norm="rms", positions="rope", activation="swiglu", H_kv=1, norm_eps=1e-6)
    export_hf(run.path, tmp_path / "hf")
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["num_key_value_heads"] == 1 and cfg["rms_norm_eps"] == 1e-6
    assert cfg["rope_parameters"]["rope_theta"] == 10000.0
    tok = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "PreTrainedTokenizerFast" and tok["mask_token"] == "<mask>"


def test_the_export_says_how_l_max_limits_transformers_generate(tmp_path, capsys):
    gpt2 = random_run(tmp_path / "gpt2")  # l_max = 32
    assert main(["export", str(gpt2.path), "--format", "hf", "--out", str(tmp_path / "gpt2-hf")]) == 0
    wrote, note = capsys.readouterr().out.strip().splitlines()
    assert "GPT2LMHeadModel" in wrote
    assert note.startswith("note: transformers' generate stops at n_positions = 32 tokens, prompt included: "
                           "ℓ_max of this run")
    assert json.loads((tmp_path / "gpt2-hf" / "config.json").read_text())["n_positions"] == 32
    llama = random_run(tmp_path / "llama", norm="rms", positions="rope", activation="swiglu", l_max=24)
    export = export_hf(llama.path, tmp_path / "llama-hf")
    assert export.note.startswith("max_position_embeddings = 24 is ℓ_max of this run: transformers' generate goes "
                                  "past 24 tokens") and export.note in export.summary()
