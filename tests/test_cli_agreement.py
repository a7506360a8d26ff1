"""Run folders that disagree with themselves (issue 26, item 6): a tokenizer whose vocabulary is not the
weights', a config.json that is not model.safetensors', a probe file whose tokens are not its maps', a meta.json
of another run. Each is refused naming both files, by the core, by every command (one line, exit 2, nothing
written) and by training's resume; runs written before meta.json recorded a run id still open."""
import json
import shutil

import pytest
import safetensors.numpy
import safetensors.torch
from safetensors import safe_open

from fatstudio.cli import main
from fatstudio.core.config import RunConfig
from fatstudio.core.inspect.probes import load_probe_file, probe_path
from fatstudio.core.runs.folder import Run, list_runs
from fatstudio.core.training import train

TINY = dict(l_max=16, L=1, H=2, d_e=16, d_mlp=32)
TRAIN = dict(batch_size=4, eval_interval=10, eval_iters=2, checkpoint_interval=10, warmup=2, sample_tokens=4,
             device="cpu")


def trained_run(folder, text: str, steps: int = 10, **model):
    corpus = folder / "c.txt"
    corpus.write_text(text * 100, encoding="utf-8")
    cfg = RunConfig.from_dict({"model": {**TINY, **model}, "data": {"corpus": str(corpus)},
                               "train": {**TRAIN, "steps": steps}})
    assert list(train(cfg, run_dir=folder / "run"))[-1].status == "finished"
    return folder / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A (the run the tests damage a copy of), B (same model, another corpus: another N_V), C (same corpus and
    N_V as A: another run of the same shapes), D (another H)."""
    out = {}
    for name, text, model in (("a", "hello world, hello transformers.\n", {}),
                              ("b", "the quick brown fox jumps over the lazy dog!\n", {}),
                              ("c", "hello world, hello transformers.\n", {}),
                              ("d", "hello world, hello transformers.\n", {"H": 4})):
        out[name] = trained_run(tmp_path_factory.mktemp(name), text, **model)
    return out


def files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def run(runs, tmp_path):
    shutil.copytree(runs["a"], tmp_path / "runs" / "run")
    return tmp_path / "runs" / "run"


def commands(run, tmp_path):
    out = tmp_path / "out"
    return {
        "generate": ["generate", run, "--prompt", "hello", "--tokens", "3"],
        "attention": ["attention", run, "--prompt", "hello", "--out", f"{out}.json"],
        "ablate": ["ablate", run, "--out", f"{out}.json"],
        "patch": ["patch", run, "--clean", "hello", "--corrupt", "jello", "--out", f"{out}.json"],
        "lens": ["lens", run, "--prompt", "hello", "--out", f"{out}.json"],
        "token-loss": ["token-loss", run, "--out", f"{out}.json"],
        "export": ["export", run, "--format", "hf", "--out", f"{out}-hf"],
        "resume": ["train", "--resume", run, "--set", "train.steps=20", "--quiet"],
    }


def refused_everywhere(run, tmp_path, capsys, *names):
    """Every command refuses the run in a line naming ``names``, writing nothing anywhere."""
    before = files(run)
    for command, argv in commands(run, tmp_path).items():
        assert main([str(a) for a in argv]) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (command, err)
        for name in names:
            assert f"run/{name}" in err, (command, err)
        assert files(run) == before, command
        assert not list(tmp_path.glob("out*")), command
    with pytest.raises(ValueError) as e:
        Run.open(run).load_model()
    return str(e.value)


def test_a_tokenizer_of_another_vocabulary_is_refused_naming_both_files(run, runs, tmp_path, capsys):
    shutil.copy(runs["b"] / "tokenizer.json", run / "tokenizer.json")
    message = refused_everywhere(run, tmp_path, capsys, "tokenizer.json", "config.json")
    assert "tokens, config.json's model (and its weights) N_V" in message
    assert [r.name for r in list_runs(run.parent)] == ["run"]  # still listed: opening it says why


def test_a_tokenizer_of_another_run_with_the_same_vocabulary_is_refused(run, runs, tmp_path, capsys):
    other = json.loads((runs["b"] / "tokenizer.json").read_text())
    mine = json.loads((run / "tokenizer.json").read_text())
    assert len(other["model"]["vocab"]) != len(mine["model"]["vocab"])
    vocab = mine["model"]["vocab"]  # the same size, another mapping: two ids swapped
    a, b = list(vocab)[5:7]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (run / "tokenizer.json").write_text(json.dumps(mine))
    assert "not the tokenizer meta.json records" in refused_everywhere(run, tmp_path, capsys, "tokenizer.json",
                                                                       "meta.json")


def test_a_config_that_does_not_match_the_weights_is_refused_by_every_command(run, tmp_path, capsys):
    d = json.loads((run / "config.json").read_text())
    d["model"]["d_mlp"] = 48
    (run / "config.json").write_text(json.dumps(d))
    assert "does not match the run's config.json" in refused_everywhere(run, tmp_path, capsys, "model.safetensors")


@pytest.mark.parametrize("source", ["c", "b"])
def test_a_meta_of_another_run_is_refused_naming_both_files(run, runs, tmp_path, capsys, source):
    shutil.copy(runs[source] / "meta.json", run / "meta.json")
    message = refused_everywhere(run, tmp_path, capsys, "meta.json")
    assert "disagree" in message


def test_an_older_run_without_ids_is_checked_by_what_it_records(run, runs, tmp_path, capsys):
    """Runs made before meta.json recorded a run id and the tokenizer's digest still open; their meta.json is
    checked against config.json by architecture, task and parameter count."""
    meta = json.loads((run / "meta.json").read_text())
    for key in ("run_id", "tokenizer_sha256", "format_version"):  # older: format 1, no checksums either
        meta.pop(key)
    (run / "meta.json").write_text(json.dumps(meta))
    tensors = safetensors.torch.load_file(run / "model.safetensors")
    with safe_open(str(run / "model.safetensors"), framework="pt") as f:
        metadata = {k: v for k, v in f.metadata().items() if k not in ("run_id", "sha256")}
    safetensors.torch.save_file(tensors, run / "model.safetensors", metadata=metadata)
    assert Run.open(run).load_model().step == 10
    assert main(["generate", str(run), "--prompt", "hello", "--tokens", "2"]) == 0
    capsys.readouterr()
    (run / "meta.json").write_text(json.dumps({**meta, "arch": "gopher"}))
    assert "meta.json records arch 'gopher', config.json 'gpt'" in refused_everywhere(run, tmp_path, capsys,
                                                                                       "meta.json", "config.json")
    d4 = json.loads((runs["d"] / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "n_parameters": d4["n_parameters"] + 1}))
    assert "parameters" in refused_everywhere(run, tmp_path, capsys, "meta.json", "config.json")


def test_a_probe_whose_tokens_do_not_match_its_maps_is_refused(run, tmp_path, capsys):
    path = probe_path(run, 10)
    with safe_open(str(path), framework="np") as f:
        metadata, maps = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    tokens = json.loads(metadata["tokens"])
    path.write_bytes(safetensors.numpy.save(maps, metadata={**metadata, "tokens": json.dumps(tokens[:-2])}))
    with pytest.raises(ValueError, match="its tokens and its maps disagree"):
        load_probe_file(path)
    before = files(run)
    assert main(["attention", str(run), "--step", "10", "--out", str(tmp_path / "m.json")]) != 0
    assert "tokens and its maps disagree" in capsys.readouterr().err
    assert files(run) == before


def test_a_probe_of_another_model_is_refused_naming_it_and_the_config(run, runs, tmp_path, capsys):
    shutil.copy(probe_path(runs["d"], 10), probe_path(run, 10))  # 4 heads; this run's model has 2
    with pytest.raises(ValueError, match=r"probes/step-00000010.safetensors and .*run/config.json disagree: map "
                                         r"self/0 has 4 heads, config.json's model H = 2"):
        Run.open(run).load_probe(10)
    assert main(["attention", str(run), "--step", "10", "--out", str(tmp_path / "m.json")]) == 2
    assert "config.json disagree" in capsys.readouterr().err


def test_a_probe_of_another_input_is_refused_naming_it_and_the_meta(run, tmp_path):
    meta = json.loads((run / "meta.json").read_text())
    meta["probe"] = {"text": "another probe text"}
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"step-00000010.safetensors and .*run/meta.json disagree: the probe is of "
                                         r"another input"):
        Run.open(run).load_probe(10)


def test_optimizer_state_of_another_run_is_refused_on_resume(run, runs, tmp_path, capsys):
    shutil.copy(runs["c"] / "optimizer.pt", run / "optimizer.pt")  # same shapes and step, another run
    before = files(run)
    assert main(["train", "--resume", str(run), "--set", "train.steps=20", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "run/optimizer.pt and" in err and "meta.json disagree" in err, err
    assert files(run) == before
