"""Damage nobody sees (issue 34, kind 5): every weight file fatstudio writes (the checkpoint, the snapshots, the
optimizer state, an import's and an export's weights) carries a checksum that loading verifies; a file that fails is
refused by name, saying which of the run's other weights still load, and the rest of the run stays usable. Runs of
the older format (none) open unverified and say so. Fuzzed (Hypothesis): any bytes changed anywhere in a weight file
are refused."""
import hashlib
import json
import shutil

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from training_helpers import trained_run

from fatstudio.core.files import Damaged, verify
from fatstudio.core.runs import snapshots
from fatstudio.core.runs.folder import Run, list_runs, load_at_step
from fatstudio.core.runs.weights import state_digest
from fatstudio.core.training import Note, train


def independent_check(path) -> bool:
    """The checksum as any reader can check it (the README's words): the SHA-256 of the file with its ``sha256``
    value written as 64 zeros."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    said = json.loads(data[8:8 + n])["__metadata__"]["sha256"]
    zeroed = data.replace(f'"sha256":"{said}"'.encode(), b'"sha256":"' + b"0" * 64 + b'"', 1)
    return hashlib.sha256(zeroed).hexdigest() == said


def zeros_in_the_data(path, size=4096) -> None:
    """Four kilobytes of zeros in the tensors' data (the end of the file), as a disk or a copy can leave them."""
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    assert len(data) - 8 - n > size
    data[-size:] = bytes(size)
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_run(tmp_path_factory, steps=30)


@pytest.fixture
def run(trained, tmp_path):
    shutil.copytree(trained, tmp_path / "runs" / "run")
    return tmp_path / "runs" / "run"


def weight_files(run):
    return [run / "model.safetensors", *snapshots.list_snapshots(run).values()]


def test_every_weight_file_carries_a_checksum_that_any_reader_can_check(trained):
    files = weight_files(trained)
    assert len(files) == 4 and Run.open(trained).meta["format_version"] == 2
    for path in files:
        assert independent_check(path) and verify(path) is True
        with safe_open(str(path), framework="pt") as f:  # still a safetensors file others read
            assert f.metadata()["step"] and len(list(f.keys())) > 4
    state = torch.load(trained / "optimizer.pt", weights_only=True)
    assert state.pop("sha256") == state_digest(state) and state["step"] == 30


def test_zeros_in_a_snapshot_are_refused_by_name_and_the_rest_of_the_run_loads(run):
    zeros_in_the_data(snapshots.snapshot_path(run, 20))
    opened = Run.open(run)
    with pytest.raises(Damaged, match=r"run/snapshots/step-00000020.safetensors is damaged: it does not match the "
                                      r"checksum written into it .*; the run's other weights \(step 10, 30\) still load"):
        load_at_step(opened, 20)
    assert load_at_step(opened, 10).step == 10 and opened.load_model().step == 30  # the other weights still open
    assert [r.name for r in list_runs(run.parent)] == ["run"] and opened.metrics() and opened.probe_steps()


def test_a_damaged_checkpoint_is_refused_by_every_reader_and_the_snapshots_still_load(run):
    zeros_in_the_data(run / "model.safetensors")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    says = r"run/model.safetensors is damaged: .*; the run's other weights \(step 10, 20\) still load"
    with pytest.raises(Damaged, match=says):
        Run.open(run).load_model()
    with pytest.raises(Damaged, match=says):
        list(train(Run.open(run).config.with_overrides(["train.steps=40"]), run_dir=run, resume=True))
    with pytest.raises(Damaged, match=says):
        list(train(Run.open(run).config, run_dir=run.parent / "tuned", init_from=run))
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing written
    assert load_at_step(Run.open(run), 20).step == 20


def test_a_damaged_optimizer_state_is_refused_and_resuming_without_it_is_said(run):
    data = bytearray((run / "optimizer.pt").read_bytes())
    at = data.find(b"data/0") + 200  # inside the first tensor's bytes (torch.save's zip stores them as they are)
    data[at:at + 64] = bytes(64)
    (run / "optimizer.pt").write_bytes(bytes(data))
    more = Run.open(run).config.with_overrides(["train.steps=40"])
    with pytest.raises(Damaged, match=r"run/optimizer.pt (is damaged|cannot be read).*; the weights still load; remove "
                                      r"optimizer.pt to resume with a fresh optimizer state"):
        list(train(more, run_dir=run, resume=True))
    assert Run.open(run).load_model().step == 30
    (run / "optimizer.pt").unlink()
    events = list(train(more, run_dir=run, resume=True))
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any("optimizer.pt is missing, the weights of step 30: the optimizer starts afresh at step 30" in n
               for n in notes), notes
    assert events[-1].status == "finished"


def strip_checksums(run) -> None:
    """The run as an older fatstudio wrote it: no checksums, format_version 1."""
    for path in weight_files(run):
        with safe_open(str(path), framework="pt") as f:
            metadata = {k: v for k, v in f.metadata().items() if k != "sha256"}
        save_file(load_file(path), path, metadata=metadata)
    state = torch.load(run / "optimizer.pt", weights_only=True)
    del state["sha256"]
    torch.save(state, run / "optimizer.pt")
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "format_version": 1}))


def test_an_older_run_without_checksums_opens_resumes_and_says_it_is_unverified(run):
    strip_checksums(run)
    opened = Run.open(run)
    assert "run was written by an older fatstudio (format 1): its weights carry no checksum" in opened.unverified()
    assert opened.load_model().step == 30 and load_at_step(opened, 10).step == 10
    events = list(train(opened.config.with_overrides(["train.steps=40"]), run_dir=run, resume=True))
    assert events[-1].status == "finished"
    assert any("carry no checksum" in e.message for e in events if isinstance(e, Note))
    assert independent_check(run / "model.safetensors")  # what it writes now carries one


def test_a_weight_file_without_its_checksum_in_a_run_that_writes_them_is_refused(run):
    path = snapshots.snapshot_path(run, 10)
    with safe_open(str(path), framework="pt") as f:
        metadata = {k: v for k, v in f.metadata().items() if k != "sha256"}
    save_file(load_file(path), path, metadata=metadata)  # rewritten by another program
    with pytest.raises(Damaged, match=r"step-00000010.safetensors carries no checksum, though every weight file of a "
                                      r"run of format 2 or later has one"):
        load_at_step(Run.open(run), 10)


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(where=st.floats(0, 1, exclude_max=True), length=st.integers(1, 4096),
       how=st.sampled_from(["zeros", "ones", "flip", "random"]), seed=st.integers(0, 2**32 - 1))
def test_fuzz_any_bytes_changed_anywhere_in_a_weight_file_are_refused(trained, tmp_path, where, length, how, seed):
    run = tmp_path / "runs" / "run"
    if not run.exists():
        shutil.copytree(trained, run)
    path = snapshots.snapshot_path(run, 20)
    good = (trained / path.relative_to(run)).read_bytes()
    data = bytearray(good)
    at = int(where * len(data))
    end = min(at + length, len(data))
    rng = torch.Generator().manual_seed(seed)
    new = {"zeros": bytes(end - at), "ones": b"\xff" * (end - at), "flip": bytes(b ^ 0x10 for b in data[at:end]),
           "random": bytes(torch.randint(0, 256, (end - at,), generator=rng, dtype=torch.uint8).tolist())}[how]
    data[at:end] = new
    assume(bytes(data) != good)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as e:
        load_at_step(Run.open(run), 20)
    assert "snapshots/step-00000020.safetensors" in str(e.value) and "\n" not in str(e.value), str(e.value)
