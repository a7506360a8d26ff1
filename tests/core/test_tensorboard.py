"""TensorBoard event files (``train.tensorboard``): what a run writes there equals its metrics.jsonl and
samples.jsonl at the same steps, TensorBoard sees each batch of rows as soon as it is written, nothing is
written when it is off and nothing of TensorBoard imported until a run asks for it, a resumed run continues
the curves (no step twice), the event file is closed however the run ends, and a missing package is one
clear ValueError before training starts."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from training_helpers import tiny_config as config

from fatstudio.core.config import TENSORBOARD_MISSING, RunConfig, TrainConfig
from fatstudio.core.runs.folder import Run
from fatstudio.core.runs.tensorboard_log import SAMPLE_TAG, SCALAR_TAGS, TENSORBOARD_DIR
from fatstudio.core.training import train

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
from tensorboard.backend.event_processing import plugin_event_accumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402


def events(run_dir: Path):
    """The run's event files read back with tensorboard's EventAccumulator, keeping every event."""
    acc = event_accumulator.EventAccumulator(str(run_dir / TENSORBOARD_DIR), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def served(run_dir: Path):
    """The run's event files read as the TensorBoard server reads them (its plugin accumulator, which also
    drops the text that a restart outdates), keeping every event."""
    acc = plugin_event_accumulator.EventAccumulator(str(run_dir / TENSORBOARD_DIR), size_guidance={"tensors": 0})
    acc.Reload()
    return acc


def scalars(acc, tag: str) -> list[tuple[int, float]]:
    if isinstance(acc, plugin_event_accumulator.EventAccumulator):  # scalars are tensors there
        found = acc.Tags()["tensors"]
        return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)] if tag in found else []
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def expected(rows: list[dict], key: str) -> list[tuple[int, float]]:
    """The rows' ``key`` as TensorBoard keeps it (float32), at the rows' steps; throughput at window ends."""
    return [(r["step"], float(np.float32(r[key]))) for r in rows
            if r.get(key) is not None and (key != "tokens_per_s" or r.get("window_end"))]


def samples(acc) -> list[tuple[int, str]]:
    """The text samples, as written (TensorBoard's Markdown code block undone: four spaces a line)."""
    def verbatim(text: str) -> str:
        assert all(line.startswith("    ") for line in text.splitlines(keepends=True))
        return "".join(line[4:] for line in text.splitlines(keepends=True))

    tag = f"{SAMPLE_TAG}/text_summary"
    return [(e.step, verbatim(e.tensor_proto.string_val[0].decode("utf-8"))) for e in acc.Tensors(tag)]


def writer_threads() -> int:
    """TensorBoard's event-file writer threads alive (one per open writer)."""
    return sum(type(t).__name__ == "_AsyncWriterThread" for t in threading.enumerate())


def open_files_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds open (Linux's /proc; elsewhere, none found). Without
    TensorFlow, TensorBoard's writer opens the file for each write; with it, it keeps it open."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        return []
    found = []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith(str(folder.resolve())):
            found.append(target)
    return found


def assert_same_as_the_run(run_dir: Path, after: int = 0):
    """The event files' scalars and texts equal metrics.jsonl's and samples.jsonl's (those after step
    ``after``), as TensorBoard's EventAccumulator and its server read them; the former returned."""
    run, acc, server = Run.open(run_dir), events(run_dir), served(run_dir)
    rows = [r for r in run.metrics() if r["step"] > after]
    for key, tag in SCALAR_TAGS.items():
        assert scalars(acc, tag) == expected(rows, key), key
        assert scalars(server, tag) == expected(rows, key), key
    assert samples(server) == [(s["step"], s["text"]) for s in run.samples() if s["step"] > after]
    return acc


def test_event_files_hold_the_runs_metrics_and_samples(text_file, tmp_path):
    seen_live, threads = [], writer_threads()
    for e in train(config(text_file, steps=30, tensorboard=True), run_dir=tmp_path / "run"):
        if e.kind == "evaluation":  # the rows are written and flushed before the evaluation is announced
            seen_live.append(dict(scalars(events(tmp_path / "run"), SCALAR_TAGS["val_loss"])).get(e.step))
            assert seen_live[-1] == pytest.approx(e.val_loss, rel=1e-6)
    assert len(seen_live) == 3
    acc = assert_same_as_the_run(tmp_path / "run")
    assert [s for s, _ in scalars(acc, "loss/train")] == list(range(1, 31))  # the run's steps, every one
    assert [s for s, _ in scalars(acc, "loss/val")] == [10, 20, 30]  # the evaluations
    assert [s for s, _ in scalars(acc, "eval/accuracy")] == [10, 20, 30]
    assert [s for s, _ in samples(acc)] == [10, 20, 30] and all(text for _, text in samples(acc))  # on the Text tab
    assert scalars(acc, "speed/tokens_per_s") and scalars(acc, "optim/lr") and scalars(acc, "optim/grad_norm")
    assert Run.open(tmp_path / "run").meta["status"] == "finished"
    assert open_files_under(tmp_path / "run") == [] and writer_threads() == threads  # closed when it finished


def test_off_by_default_writes_no_event_files(text_file, tmp_path):
    assert TrainConfig().tensorboard is False and RunConfig.from_dict({}).train.tensorboard is False
    list(train(config(text_file, steps=10), run_dir=tmp_path / "run"))
    assert not (tmp_path / "run" / TENSORBOARD_DIR).exists()
    assert Run.open(tmp_path / "run").metrics()  # the run itself wrote its rows


def test_importing_fatstudio_imports_no_tensorboard():
    code = ("import sys, fatstudio.core.runs.folder, fatstudio.core.training, fatstudio.core.runs.tensorboard_log\n"
            "from fatstudio.core.config import TrainConfig\n"
            "TrainConfig(tensorboard=True).validate()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorboard' or 'utils.tensorboard' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_set_and_toml_turn_it_on(tmp_path):
    assert RunConfig().with_overrides(["train.tensorboard=true"]).train.tensorboard is True
    (tmp_path / "c.toml").write_text('[data]\ncorpus = "x"\n[train]\ntensorboard = true\n', encoding="utf-8")
    assert RunConfig.load(tmp_path / "c.toml").train.tensorboard is True
    with pytest.raises(ValueError, match="train.tensorboard = 'yes' is not allowed; it must be true or false"):
        TrainConfig(tensorboard="yes").validate()


def test_a_resumed_run_continues_the_curves(text_file, tmp_path):
    """Closed mid-run at step 15 (its last checkpoint at 10), then resumed to 25: steps 11-15 are trained
    again, and TensorBoard shows each step and sample once, the resumed run's (as metrics.jsonl does)."""
    cfg = config(text_file, steps=25, tensorboard=True, eval_interval=5, checkpoint_interval=10)
    threads, gen = writer_threads(), train(cfg, run_dir=tmp_path / "run")
    for e in gen:
        if e.kind == "sample" and e.step == 15:
            break
    gen.close()
    run = Run.open(tmp_path / "run")
    assert run.meta["status"] == "stopped" and run.meta["checkpoint_step"] == 10
    assert writer_threads() == threads  # closing the generator closed the event file…
    assert open_files_under(tmp_path / "run") == []
    first = events(tmp_path / "run")
    assert [s for s, _ in scalars(first, "loss/train")] == list(range(1, 16))
    assert [s for s, _ in samples(first)] == [5, 10, 15]
    # TensorBoard reads a folder's event files in the order of their names, which hold the second they were
    # opened and a per-process counter that sorts as text: let the resumed one start in a later second
    time.sleep(1.01 - time.time() % 1)
    resumed = list(train(run.config, run_dir=run.path, resume=True))
    assert next(e for e in resumed if e.kind == "started").start_step == 10 and resumed[-1].step == 25
    assert len(list((run.path / TENSORBOARD_DIR).iterdir())) == 2  # one event file per session
    acc = assert_same_as_the_run(run.path)
    assert [s for s, _ in scalars(acc, "loss/train")] == list(range(1, 26))
    assert [s for s, _ in scalars(acc, "loss/val")] == [5, 10, 15, 20, 25]
    assert [s for s, _ in samples(served(run.path))] == [5, 10, 15, 20, 25]
    assert writer_threads() == threads and open_files_under(run.path) == []


def test_resuming_can_turn_it_on(text_file, tmp_path):
    list(train(config(text_file, steps=10), run_dir=tmp_path / "run"))
    run = Run.open(tmp_path / "run")
    list(train(run.config.with_overrides(["train.steps=20", "train.tensorboard=true"]), run_dir=run.path,
               resume=True))
    acc = assert_same_as_the_run(run.path, after=10)
    assert [s for s, _ in scalars(acc, "loss/train")] == list(range(11, 21))  # from where it was turned on


def test_a_missing_package_is_one_clear_error_before_training(text_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # importing it fails, as if not installed
    with pytest.raises(ValueError) as e:
        TrainConfig(tensorboard=True).validate()
    assert str(e.value) == TENSORBOARD_MISSING == "train.tensorboard needs the tensorboard package: pip install tensorboard"
    TrainConfig().validate()  # off: not needed
    with pytest.raises(ValueError, match="needs the tensorboard package: pip install tensorboard"):
        next(train(config(text_file, tensorboard=True), run_dir=tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_broken_install_fails_at_the_start_not_mid_run(text_file, tmp_path, monkeypatch):
    """The package is there (validation passes) but TensorBoard's writer cannot be imported: the run stops
    before its first step with the same advice."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    kinds = []
    with pytest.raises(ValueError, match=f"^{TENSORBOARD_MISSING} \\(the installed one fails to import"):
        for e in train(config(text_file, tensorboard=True), run_dir=tmp_path / "run"):
            kinds.append(e.kind)
    assert "started" not in kinds and "steps" not in kinds
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / TENSORBOARD_DIR).exists()


@pytest.mark.parametrize("status", ["finished", "failed", "stopped"])
def test_the_run_closes_its_event_file_when_it_ends(tmp_path, status):
    """The Run opens the writer at its first row, keeps it open while running and closes it with the status
    the run ends with; rows written later go into a new event file."""
    threads = writer_threads()
    run = Run.create(RunConfig().replace(train=TrainConfig(tensorboard=True)), tmp_path, "run")
    run.write_meta(status="running")
    assert not (run.path / TENSORBOARD_DIR).exists() and writer_threads() == threads  # nothing to write yet
    run.append_metrics([{"step": 1, "train_loss": 2.5, "lr": 1e-3, "grad_norm": None, "skipped": True,
                         "tokens_per_s": 10.0}])  # not a window end: no throughput yet
    run.append_sample(1, "# not a heading\n*text*")
    assert writer_threads() == threads + 1
    run.write_meta(step=1)
    assert writer_threads() == threads + 1
    run.write_meta(status=status, step=1)
    assert writer_threads() == threads and open_files_under(run.path) == []
    acc = events(run.path)
    assert scalars(acc, "loss/train") == [(1, 2.5)] and scalars(acc, "optim/lr") == [(1, float(np.float32(1e-3)))]
    assert scalars(acc, "optim/grad_norm") == [] and scalars(acc, "speed/tokens_per_s") == []
    assert samples(served(run.path)) == [(1, "# not a heading\n*text*")]
    run.append_metrics([{"step": 2, "train_loss": 2.0, "lr": 1e-3, "grad_norm": 1.0}])
    assert len(list((run.path / TENSORBOARD_DIR).iterdir())) == 2
    assert writer_threads() == threads + 1
    run.delete()  # closes it first
    assert writer_threads() == threads and not run.path.exists()
