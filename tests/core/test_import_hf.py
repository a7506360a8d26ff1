"""Import from Hugging Face transformers (core/runs/import_hf.py): checkpoints that transformers itself made
(tests/core/hf_checkpoints.py, in a child process) become runs that give transformers' token ids, logits
(within 1e-4), attention maps (within 1e-5), greedy generation and BERT's fill-mask top token; the export of an
imported run gives the original logits back; the float64 reference check runs on it; what the paper's models
cannot compute is refused naming the config field.

The round trips need ``transformers`` (in the ``test`` extra); the refusals of config.json fields do not."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fatstudio.core.inference.generation import fill_mask, generate
from fatstudio.core.paper.paper_check import check_against_paper
from fatstudio.core.runs.export_hf import export_hf
from fatstudio.core.runs.folder import Run
from fatstudio.core.runs.import_hf import BERT, GPT2, LLAMA, import_hf, model_config

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from hf_checkpoints import KINDS, MASKED, NEW_TOKENS, PROMPT  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1"}


def child(*args: str) -> str:
    done = subprocess.run([sys.executable, str(HERE / "hf_checkpoints.py"), *args], env=ENV, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{kind: (folder, expected)} for every checkpoint of `KINDS`, made by transformers in a child process."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("hf")
    child("make", str(root))
    return {k: (root / k, json.loads((root / k / "expected.json").read_text())) for k in KINDS}


@pytest.fixture(scope="module")
def imported(checkpoints, tmp_path_factory):
    """{kind: the loaded run imported from that checkpoint}."""
    root = tmp_path_factory.mktemp("runs")
    return {k: Run.open(import_hf(folder, root / k).run_dir).load_model() for k, (folder, _) in checkpoints.items()}


@pytest.mark.parametrize("kind", list(KINDS))
def test_imported_run_computes_what_transformers_does(checkpoints, imported, kind):
    _, want = checkpoints[kind]
    loaded = imported[kind]
    assert loaded.tokenizer.encode(PROMPT) == want["ids"]  # the checkpoint's own tokenizer, its own ids
    x = want["x"]
    assert x[0] == loaded.tokenizer.bos_id
    tied = loaded.model.config.tie_embeddings  # W_u = W_eᵀ, the same tensor, as the model was loaded
    assert (loaded.model.unembed.W_u.weight is loaded.model.embed.W_e.weight) == tied
    with torch.no_grad():
        logits, attn = loaded.model(torch.tensor([x]), return_attention=True)
    assert torch.allclose(logits[0], torch.tensor(want["logits"]), atol=1e-4, rtol=0)
    assert len(attn) == len(want["attentions"])
    for l, A in enumerate(want["attentions"]):
        A = torch.tensor(A)
        assert A.max() > 0.5  # far from uniform: a misplaced weight shows
        assert torch.allclose(attn[f"self/{l}"][0], A, atol=1e-5, rtol=0), l


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "bert"])
def test_greedy_generation_is_transformers_greedy_generate(checkpoints, imported, kind):
    _, want = checkpoints[kind]
    loaded = imported[kind]
    got = [c.id for c in generate(loaded.model, loaded.tokenizer, PROMPT, tokens=NEW_TOKENS, temperature=0,
                                  add_bos=True, stop_at_eos=True)]
    eos = loaded.tokenizer.eos_id  # transformers ends with eos, fatstudio ends before it
    stop = want["greedy"].index(eos) if eos in want["greedy"] else NEW_TOKENS
    assert got == want["greedy"][:stop] and len(got) >= 8


def test_bert_fill_mask_gives_transformers_top_token(checkpoints, imported):
    _, want = checkpoints["bert"]
    loaded = imported["bert"]
    (pred,) = fill_mask(loaded.model, loaded.tokenizer, MASKED)
    assert pred.candidates[0][0] == want["fill_mask"]


def test_export_of_an_imported_run_gives_the_original_logits(checkpoints, tmp_path):
    jobs, want = {}, {}
    for kind in ("gpt2", "llama", "llama-tied-bias"):
        folder, expected = checkpoints[kind]
        export_hf(import_hf(folder, tmp_path / kind).run_dir, tmp_path / f"{kind}-hf")
        jobs[str(tmp_path / f"{kind}-hf")], want[str(tmp_path / f"{kind}-hf")] = expected["x"], expected["logits"]
    got = json.loads(child("logits", json.dumps(jobs)).strip().splitlines()[-1])
    for folder, logits in want.items():
        np.testing.assert_allclose(got[folder]["logits"], logits, atol=1e-4, rtol=0)
        kind = Path(folder).name.removesuffix("-hf")
        assert got[folder]["ids"] == checkpoints[kind][1]["ids"]  # the same tokenizer, no token added to it
        assert got[folder]["n_tokens"] == len(logits[0])


@pytest.mark.parametrize("kind", list(KINDS))
def test_paper_check_works_on_an_imported_model(checkpoints, imported, kind):
    loaded = imported[kind]
    check = check_against_paper(loaded.model, checkpoints[kind][1]["x"][:5])
    d = check.differences
    assert d.worst < 1e-9, d


def test_imported_run_is_an_ordinary_run(checkpoints, imported, tmp_path):
    run = Run.open(import_hf(checkpoints["llama"][0], tmp_path / "r").run_dir)
    assert {"config.json", "meta.json", "tokenizer.json", "model.safetensors"} <= {p.name for p in run.path.iterdir()}
    assert run.meta["hf_class"] == LLAMA and run.meta["status"] == "finished"
    cfg = run.config.model.resolved()
    assert (cfg.positions, cfg.norm, cfg.activation, cfg.H_kv, cfg.position_base) == ("rope", "rms", "swiglu", 2, 500.0)
    with pytest.raises(ValueError, match="already exists"):  # never over an earlier run
        import_hf(checkpoints["llama"][0], run.path)


def test_bf16_import_takes_half_the_file_and_loads_in_bf16(checkpoints, tmp_path):
    folder, want = checkpoints["gpt2"]
    full, half = import_hf(folder, tmp_path / "f32").run_dir, import_hf(folder, tmp_path / "bf16", dtype="bfloat16").run_dir
    assert (half / "model.safetensors").stat().st_size < 0.6 * (full / "model.safetensors").stat().st_size
    loaded = Run.open(half).load_model()
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}  # half the memory too
    with torch.no_grad():
        logits = loaded.model(torch.tensor([want["x"]]))[0].float()
    assert torch.allclose(logits, torch.tensor(want["logits"]), atol=0.5)  # bf16 rounding only
    assert [c.id for c in generate(loaded.model, loaded.tokenizer, PROMPT, tokens=4, temperature=0, add_bos=True)]


@pytest.mark.parametrize("edit,field", [
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}), "rope_parameters"),
    (dict(sliding_window=16), "sliding_window"),
    (dict(attention_bias=True, mlp_bias=False), "attention_bias"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(architectures=["Qwen2ForCausalLM"]), "architectures"),
])
def test_llama_fields_the_paper_cannot_express_are_refused_by_name(edit, field):
    hf = dict(architectures=[LLAMA], vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
              num_attention_heads=2, max_position_embeddings=16)
    model_config(hf)  # as it is, it imports
    with pytest.raises(ValueError, match=f"^config.json: {field} = "):
        model_config({**hf, **edit})


@pytest.mark.parametrize("cls,edit,field", [
    (GPT2, dict(activation_function="silu"), "activation_function"),
    (GPT2, dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (BERT, dict(position_embedding_type="relative_key"), "position_embedding_type"),
    (BERT, dict(hidden_act="gelu_new"), "hidden_act"),
])
def test_gpt2_and_bert_fields_are_refused_by_name(cls, edit, field):
    hf = dict(architectures=[cls], vocab_size=50, n_embd=16, n_head=2, n_layer=1, n_positions=16, hidden_size=16,
              num_attention_heads=2, num_hidden_layers=1, intermediate_size=24, max_position_embeddings=16)
    model_config(hf)
    with pytest.raises(ValueError, match=f"^config.json: {field} = "):
        model_config({**hf, **edit})


def test_a_refused_checkpoint_writes_nothing(checkpoints, tmp_path):
    folder = tmp_path / "scaled"
    shutil.copytree(checkpoints["llama"][0], folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}))
    with pytest.raises(ValueError, match="rope_scaling"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists() and [p.name for p in tmp_path.iterdir()] == ["scaled"]


def test_an_older_config_without_architectures_is_read_by_its_model_type():
    hf = dict(model_type="gpt2", vocab_size=50, n_embd=16, n_head=2, n_layer=1, n_positions=16)
    assert model_config(hf).arch == "gpt" and model_config(hf).positions == "learned"
    with pytest.raises(ValueError, match="^config.json: architectures = "):
        model_config({**hf, "model_type": "t5"})
