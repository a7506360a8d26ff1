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
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

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


# ---- a folder that is not what it says (issue 34, kind 1) ------------------------------------------------------
def _with_tensors(folder, tmp_path, extra):
    from safetensors.torch import load_file, save_file

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    tensors = load_file(copy / "model.safetensors")
    save_file({**tensors, **extra(tensors)}, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


@pytest.mark.parametrize("kind,extra", [
    ("gpt2", lambda t: {f"transformer.h.{l}.attn.{b}": torch.tril(torch.ones(1, 1, 48, 48)) for l in range(2)
                        for b in ("bias", "masked_bias")}),  # GPT-2's causal mask, saved by older transformers
    ("llama", lambda t: {"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)}),
    ("bert", lambda t: {"bert.pooler.dense.weight": torch.ones(32, 32), "bert.pooler.dense.bias": torch.ones(32),
                        "cls.seq_relationship.weight": torch.ones(2, 32), "cls.seq_relationship.bias": torch.ones(2),
                        "bert.embeddings.position_ids": torch.arange(48)[None],
                        "cls.predictions.decoder.bias": t["cls.predictions.bias"].clone()}),  # bert-base's heads
])
def test_tensors_the_class_does_not_compute_with_are_left_out_and_the_logits_stay(checkpoints, tmp_path, kind, extra):
    folder, want = checkpoints[kind]
    loaded = Run.open(import_hf(_with_tensors(folder, tmp_path, extra), tmp_path / "run").run_dir).load_model()
    with torch.no_grad():
        logits = loaded.model(torch.tensor([want["x"]]))[0]
    assert torch.allclose(logits, torch.tensor(want["logits"]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind,extra,says", [
    ("gpt2", lambda t: {"lm_head.weight": t["transformer.wte.weight"].flip(0)},
     "tie_word_embeddings = true cannot be imported: the checkpoint's lm_head.weight differs"),
    ("bert", lambda t: {"cls.predictions.decoder.bias": t["cls.predictions.bias"] + 1},
     "cls.predictions.decoder.bias differs from cls.predictions.bias"),
    ("bert", lambda t: {"bert.encoder.layer.0.attention.self.query.lora_A": torch.ones(4, 32)},
     r"holds 1 tensor\(s\) that fatstudio's BertForMaskedLM has no place for \(bert.encoder.layer.0.attention.self"),
])
def test_a_tensor_that_would_be_dropped_or_replaced_is_refused_by_name(checkpoints, tmp_path, kind, extra, says):
    with pytest.raises(ValueError, match=says):
        import_hf(_with_tensors(checkpoints[kind][0], tmp_path, extra), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_bert_folder_with_vocab_txt_in_place_of_tokenizer_json(checkpoints, tmp_path):
    from tokenizers import Tokenizer

    folder = tmp_path / "bert"
    shutil.copytree(checkpoints["bert"][0], folder)
    own = Tokenizer.from_file(str(folder / "tokenizer.json"))
    own.model.save(str(folder))  # vocab.txt
    (folder / "tokenizer.json").unlink()
    loaded = Run.open(import_hf(folder, tmp_path / "run").run_dir).load_tokenizer()
    assert loaded.vocab_size == own.get_vocab_size() and loaded.encode(PROMPT) == own.encode(PROMPT, add_special_tokens=False).ids
    os.truncate(folder / "vocab.txt", 2 << 30)  # a sparse file of 2 GB: refused before a byte is read
    with pytest.raises(ValueError, match="bert/vocab.txt is 2.0 GB, more than such a file can hold"):
        import_hf(folder, tmp_path / "run2")


# Hypothesis: any value for any field of config.json is a model config or a one-line refusal naming config.json
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
CONFIGS = {
    GPT2: dict(architectures=[GPT2], vocab_size=50, n_embd=16, n_head=2, n_layer=1, n_positions=16),
    LLAMA: dict(architectures=[LLAMA], vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                num_attention_heads=2, max_position_embeddings=16, num_key_value_heads=1, head_dim=8,
                rope_theta=1e4, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False),
    BERT: dict(architectures=[BERT], vocab_size=50, hidden_size=16, num_attention_heads=2, num_hidden_layers=1,
               intermediate_size=24, max_position_embeddings=16, type_vocab_size=2, layer_norm_eps=1e-12),
}
FIELDS = sorted({k for c in CONFIGS.values() for k in c} | {
    "n_inner", "activation_function", "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
    "rope_scaling", "rope_parameters", "sliding_window", "mlp_bias", "hidden_act", "position_embedding_type",
    "is_decoder", "add_cross_attention", "quantization_config", "model_type"})


def _model_config_or_refusal(hf) -> None:
    try:
        assert model_config(hf).validate()
    except ValueError as e:
        assert str(e).startswith("config.json") and "\n" not in str(e) and len(str(e)) < 600, str(e)


@settings(max_examples=300, deadline=None)
@given(cls=st.sampled_from(list(CONFIGS)), changes=st.dictionaries(st.sampled_from(FIELDS), JSON_VALUES, max_size=3),
       drop=st.sets(st.sampled_from(FIELDS), max_size=2))
def test_fuzz_any_config_json_is_a_model_config_or_a_refusal_naming_the_field(cls, changes, drop):
    hf = {k: v for k, v in {**CONFIGS[cls], **changes}.items() if k not in drop}
    _model_config_or_refusal(hf)


@settings(max_examples=50, deadline=None)
@given(doc=JSON_VALUES)
def test_fuzz_a_config_json_of_any_shape_is_refused_in_a_line(doc):
    _model_config_or_refusal(doc)


@pytest.fixture(scope="module")
def exported_folder(tmp_path_factory):
    from hf_checkpoints import exported

    return exported(tmp_path_factory.mktemp("exported"))


TOKENIZER_KEYS = ["bos_token_id", "eos_token_id", "pad_token_id", "vocab_size", "tie_word_embeddings", "bos_token",
                  "eos_token", "pad_token", "unk_token", "add_prefix_space", "weight_map"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["config.json", "tokenizer_config.json", "special_tokens_map.json",
                             "model.safetensors.index.json"]), key=st.sampled_from(TOKENIZER_KEYS), value=JSON_VALUES)
@example(name="model.safetensors.index.json", key="weight_map", value={})  # found by this test: no file named
@example(name="model.safetensors.index.json", key="weight_map", value={"x": ""})  # found by it: the folder itself
def test_fuzz_any_value_in_a_folders_json_files_imports_or_is_one_line_naming_the_file(exported_folder, tmp_path,
                                                                                        name, key, value):
    folder = tmp_path / "hf"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(exported_folder, folder)
    d = json.loads((folder / name).read_text()) if (folder / name).exists() else {}
    (folder / name).write_text(json.dumps({**d, key: value}))
    out = tmp_path / "run"
    shutil.rmtree(out, ignore_errors=True)
    try:
        run = Run.open(import_hf(folder, out).run_dir)
    except ValueError as e:
        assert "\n" not in str(e) and (name in str(e) or "config.json" in str(e) or "tokenizer" in str(e)), str(e)
        assert not out.exists()
        return
    loaded = run.load_model()
    assert loaded.tokenizer.vocab_size == loaded.model.config.vocab_size
    assert {loaded.tokenizer.bos_id, loaded.tokenizer.eos_id, loaded.tokenizer.pad_id} < set(range(300))
