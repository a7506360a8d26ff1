"""Weight snapshots: the weights of every evaluation saved in the run folder, each loading bit for bit the model that
training to that step alone gives; kept consistent on resume; bounded in size; old runs without them still load."""
import pytest
import torch

from fatstudio import ModelConfig
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig
from fatstudio.core.runs import snapshots
from fatstudio.core.runs.folder import Run, load_at_step
from fatstudio.core.training import Evaluation, train

TINY = dict(l_max=16, L=2, H=2, d_e=16, d_mlp=32)


def config(corpus, steps=30, **train_kw):
    t = dict(steps=steps, batch_size=4, eval_interval=10, eval_iters=1, checkpoint_interval=1000, warmup=0,
             lr_schedule="constant", sample_tokens=0, device="cpu")
    return RunConfig(ModelConfig(**TINY), DataConfig(corpus=str(corpus)), TrainConfig(**{**t, **train_kw}))


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text("the quick brown fox jumps over the lazy dog.\n" * 100, encoding="utf-8")
    return p


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_weights_saved_at_every_evaluation_load_as_the_run_trained_to_that_step(text_file, tmp_path):
    events = list(train(config(text_file, steps=25), run_dir=tmp_path / "long"))
    evals = [e.step for e in events if isinstance(e, Evaluation)]
    assert evals == [10, 20, 25]
    long = Run.open(tmp_path / "long")
    assert list(snapshots.list_snapshots(long.path)) == evals == long.probe_steps() == long.weight_steps()
    list(train(config(text_file, steps=10), run_dir=tmp_path / "short"))
    middle, alone = load_at_step(long, 10), load_at_step(Run.open(tmp_path / "short"), None)
    assert middle.step == alone.step == 10 and "step 10" in middle.label
    assert _same(middle.model, alone.model)  # bit for bit
    assert not _same(middle.model, load_at_step(long, 20).model)
    assert _same(load_at_step(long, 25).model, long.load_model().model)  # the last evaluation: the checkpoint's
    with pytest.raises(ValueError, match=r"no weights of step 15; saved steps: 10, 20, 25\.$"):
        load_at_step(long, 15)


def test_resuming_after_a_crash_writes_each_evaluation_s_weights_once(text_file, tmp_path):
    events = train(config(text_file, steps=30, checkpoint_interval=15), run_dir=tmp_path / "run")
    for e in events:
        if isinstance(e, Evaluation) and e.step == 20:
            break  # killed after the weights of step 20 were saved, its checkpoint being step 15's
    events.close()
    run = Run.open(tmp_path / "run")
    assert list(snapshots.list_snapshots(run.path)) == [10, 20] and run.weight_steps() == [10, 15, 20]
    before = {s: p.read_bytes() for s, p in snapshots.list_snapshots(run.path).items()}
    list(train(config(text_file, steps=30, checkpoint_interval=15), run_dir=run.path, resume=True))
    again = snapshots.list_snapshots(run.path)
    assert list(again) == [10, 20, 30] == Run.open(run.path).weight_steps()
    assert again[10].read_bytes() == before[10]  # before the checkpoint: kept
    assert again[20].stat().st_mtime_ns > run.path.joinpath("snapshots", "step-00000010.safetensors").stat().st_mtime_ns
    assert not list(run.path.glob("snapshots/.*"))  # no temporary files left


def test_last_only_writes_none_and_old_runs_load_their_checkpoint(text_file, tmp_path):
    list(train(config(text_file, steps=20, keep_weights="last"), run_dir=tmp_path / "run"))
    run = Run.open(tmp_path / "run")
    assert not (run.path / snapshots.SNAPSHOTS).exists() and run.weight_steps() == [20]
    assert load_at_step(run, 20).step == load_at_step(run, None).step == 20
    with pytest.raises(ValueError, match=r"no weights of step 10; saved steps: 20\."):
        load_at_step(run, 10)
    with pytest.raises(ValueError, match="keep_weights"):
        TrainConfig(keep_weights="all").validate()


def test_the_cap_thins_the_snapshots_to_every_2nd_4th_evaluation():
    mb = 1_000_000
    assert snapshots.stride(3 * mb, 2000, 250, cap_mb=100) == 1  # 8 of 3 MB
    assert snapshots.stride(30 * mb, 2000, 250, cap_mb=100) == 4  # 2 of 30 MB fit, not 4
    assert snapshots.stride(300 * mb, 2000, 250, cap_mb=100) == 0  # not one
    assert [s for s in range(250, 2001, 250) if snapshots.due(s, 250, 4)] == [1000, 2000]
    assert not any(snapshots.due(s, 250, 0) for s in range(250, 2001, 250))


def test_a_snapshot_is_four_bytes_a_parameter_tied_weights_once_and_loads_back(tmp_path):
    from fatstudio import build_model

    for tied in (False, True):
        model = build_model(ModelConfig(vocab_size=20, tie_embeddings=tied, **TINY))
        assert snapshots.snapshot_bytes(model) == 4 * model.num_parameters()
        (tmp_path / str(tied)).mkdir()
        path = snapshots.save_snapshot(tmp_path / str(tied), model, 7)
        assert abs(path.stat().st_size - 4 * model.num_parameters()) < 20_000  # tensors, and a header
        run = Run(tmp_path, RunConfig(ModelConfig(vocab_size=20, tie_embeddings=tied, **TINY)), {})
        twin = build_model(ModelConfig(vocab_size=20, tie_embeddings=tied, **TINY))
        assert run.load_weights(twin, path) == 7 and _same(model, twin)


def test_a_full_disk_at_a_snapshot_ends_the_run_in_a_line_leaving_no_file(text_file, tmp_path, monkeypatch):
    import errno

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(snapshots, "atomic_write", full)
    with pytest.raises(ValueError, match=r"cannot save the weights of step 10 in .*snapshots: the disk is full\.$"):
        list(train(config(text_file, steps=20), run_dir=tmp_path / "run"))
    run = Run.open(tmp_path / "run")
    assert run.meta["status"] == "failed" and snapshots.list_snapshots(run.path) == {}
