"""The trainer on every device this machine has (the CPU always; CUDA and MPS when present) × every task ×
the precisions the device supports, and the GPU paths checked on the CPU: inputs moved through one place,
out of memory anywhere, loss-scaling skips, no device read per step, torch.compile, timing."""
import contextlib
import json
import math
import time

import pytest
import torch

from fatstudio.core import device, training
from fatstudio.core.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from fatstudio.core.inference import generation
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import Control, train

TINY = dict(l_max=16, L=1, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32)
TASKS = {"next_token": ("gpt", "python-stdlib"), "masked_lm": ("bert", "python-stdlib"),
         "seq2seq": ("edt", "reverse"), "classification": ("bert", "sort")}


def _devices():
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if device.mps_available():
        found.append("mps")
    return found


def _precisions(name):
    dev = torch.device(name)
    out = ["auto", "fp32"] + (["bf16"] if device.bf16_native(dev) else [])
    return out + (["fp16"] if dev.type != "cpu" else [])


DEVICE_PRECISIONS = [(d, p) for d in _devices() for p in _precisions(d)]


def config(task="next_token", steps=6, corpus=None, **train_kw):
    arch, builtin = TASKS[task]
    t = dict(steps=steps, batch_size=4, eval_interval=3, eval_iters=2, checkpoint_interval=3, warmup=1,
             sample_tokens=4, device="cpu")
    return RunConfig(ModelConfig(arch=arch, **TINY), DataConfig(corpus=corpus or builtin, task=task),
                     TrainConfig(**{**t, **train_kw}))


@pytest.fixture(scope="module")
def stdlib_prepared():
    """python-stdlib loaded and tokenized once for the module (it is 1.5 MB of text)."""
    from fatstudio.core.data import corpora as data
    from fatstudio.core.data.tokenization import train_tokenizer

    corpus = data.load_corpus("python-stdlib", "next_token")
    corpus = data.Corpus(corpus.name, "text", text=corpus.text[:20000])
    return data.Prepared("python-stdlib", "next_token", "char", 1000, 0, corpus, train_tokenizer("char", corpus.texts()))


def _prepared_for(task, stdlib_prepared):
    if TASKS[task][1] != "python-stdlib":
        return None
    from dataclasses import replace
    return replace(stdlib_prepared, task=task)


@pytest.mark.parametrize("dev, precision", DEVICE_PRECISIONS)
@pytest.mark.parametrize("task", list(TASKS))
def test_every_task_trains_and_prompts_on_every_device(task, dev, precision, tmp_path, stdlib_prepared):
    cfg = config(task, device=dev, precision=precision)
    events = list(train(cfg, run_dir=tmp_path / "run", prepared=_prepared_for(task, stdlib_prepared)))
    started = next(e for e in events if e.kind == "started")
    assert started.precision == device.resolve_precision(precision, torch.device(dev))
    assert events[-1].status == "finished", events[-1].message
    assert all(math.isfinite(v) for e in events if e.kind == "steps" for v in e.train_loss)
    loaded = Run.open(tmp_path / "run").load_model(device=dev)
    tok = loaded.tokenizer
    if task == "next_token":
        assert len(list(generation.generate(loaded.model, tok, "def ", tokens=5, seed=0))) == 5
    elif task == "masked_lm":
        assert generation.fill_mask(loaded.model, tok, "de[MASK] f")[0].candidates
    elif task == "seq2seq":
        list(generation.translate(loaded.model, tok, "abc", max_tokens=4))
    else:
        probs = generation.classify(loaded.model, tok, "abc", loaded.class_names)
        assert sum(p for _, p in probs) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("task", list(TASKS))
def test_every_model_call_gets_its_inputs_through_to_device(task, tmp_path, monkeypatch, stdlib_prepared):
    """Training steps, evaluations and each task's sample hand the model tensors that `to_device` returned
    (the masked-LM sample used to pass a CPU batch to a GPU model)."""
    moved: set[int] = set()
    real = training.loss.to_device

    def recording(tensors, dev):
        out = real(tensors, dev)
        moved.update(id(t) for t in out.values())
        return out

    monkeypatch.setattr(training.loss, "to_device", recording)
    monkeypatch.setattr(training.sample, "to_device", recording)
    from fatstudio.core import model as model_pkg
    build = model_pkg.build_model
    strays = []

    def check(module, args, kwargs):
        if capturing:
            return
        for name, v in [*enumerate(args), *kwargs.items()]:
            if isinstance(v, torch.Tensor) and id(v) not in moved:
                strays.append(name)

    def built(cfg):
        m = build(cfg)
        m.register_forward_pre_hook(check, with_kwargs=True)
        if task == "classification":
            m.classify = _checked(m.classify, check, m)
        return m

    monkeypatch.setattr(model_pkg, "build_model", built)
    from fatstudio.core.inspect import probes
    capturing = []

    def capture(real):  # inference makes its own inputs on the model's device (its own tests)
        def run(*a, **k):
            capturing.append(True)
            try:
                return real(*a, **k)
            finally:
                capturing.pop()
        return run

    for name in ("probe_maps", "measure_scores"):  # the probe's maps, the induction score's forward pass
        monkeypatch.setattr(probes, name, capture(getattr(probes, name)))
    from fatstudio.core.inspect import probe_lens
    monkeypatch.setattr(probe_lens, "measure", capture(probe_lens.measure))  # the probe's lens and attribution
    monkeypatch.setattr(generation, "generate", lambda *a, **k: iter(()))  # inference has its own tests
    monkeypatch.setattr(generation, "translate", lambda *a, **k: iter(()))
    monkeypatch.setattr(generation, "classify", lambda *a, **k: [("x", 1.0)])
    events = list(train(config(task), run_dir=tmp_path / "run", prepared=_prepared_for(task, stdlib_prepared)))
    assert events[-1].status == "finished"
    assert strays == []


def _checked(method, check, module):
    def wrapper(*args, **kwargs):
        check(module, args, kwargs)
        return method(*args, **kwargs)
    return wrapper


# ---- out of memory, anywhere ----------------------------------------------------------------------------
def _oom(*_, **__):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


class _Fails:
    """Raise an out-of-memory error (of the given kind) on call number ``at`` of the wrapped function."""

    def __init__(self, fn, at=1, error=None):
        self.fn, self.at, self.n = fn, at, 0
        self.error = error or torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    def __call__(self, *args, **kwargs):
        self.n += 1
        if self.n == self.at:
            raise self.error
        return self.fn(*args, **kwargs)


@pytest.fixture
def freed(monkeypatch):
    calls = []
    monkeypatch.setattr(training.trainer, "free_memory", lambda *a: calls.append(a))
    return calls


@pytest.mark.parametrize("where", ["build", "move", "optimizer"])
def test_out_of_memory_while_setting_up_is_one_clear_error(where, tmp_path, monkeypatch, freed):
    from fatstudio.core import model as model_pkg

    if where == "build":
        monkeypatch.setattr(model_pkg, "build_model", _oom)
    elif where == "move":
        build = model_pkg.build_model

        def unmovable(cfg):
            m = build(cfg)
            m.to = _oom
            return m
        monkeypatch.setattr(model_pkg, "build_model", unmovable)
    else:
        monkeypatch.setattr(training.trainer, "make_optimizer", _oom)
    with pytest.raises(device.OutOfMemory, match="out of GPU memory|out of memory") as err:
        list(train(config(), run_dir=tmp_path / "run"))
    assert "batch_size, l_max or d_e" in str(err.value) and isinstance(err.value, ValueError)
    assert freed


@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("CUDA out of memory"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("MPS backend out of memory (MPS allocated: 17.00 GB)"),
])
def test_out_of_memory_while_resuming_is_not_a_corrupt_checkpoint(error, tmp_path, monkeypatch, freed):
    list(train(config(steps=3), run_dir=tmp_path / "run"))
    import safetensors.torch
    monkeypatch.setattr(safetensors.torch, "load_model", _Fails(safetensors.torch.load_model, error=error))
    run = Run.open(tmp_path / "run")
    with pytest.raises(device.OutOfMemory) as err:
        list(train(run.config.with_overrides(["train.steps=6"]), run_dir=run.path, resume=True))
    assert "corrupt" not in str(err.value) and "batch_size" in str(err.value)


def _step_loss_fails_at(step):
    real = training.task_loss
    calls = {"n": 0}

    def loss(model, batch, task):
        calls["n"] += model.training
        if model.training and calls["n"] == step:
            raise RuntimeError("CUDA error: out of memory")
        return real(model, batch, task)
    return loss


@pytest.mark.parametrize("where", ["step", "evaluation", "sample", "compile"])
def test_out_of_memory_while_training_ends_the_run_with_advice(where, tmp_path, monkeypatch, freed):
    kw = {}
    if where == "step":
        monkeypatch.setattr(training.loss, "task_loss", _step_loss_fails_at(5))
    elif where == "evaluation":
        monkeypatch.setattr(training.trainer, "evaluate", _Fails(training.evaluate, at=2))
    elif where == "sample":
        monkeypatch.setattr(training.trainer, "make_sample", _Fails(training.make_sample, at=2))
    else:
        monkeypatch.setattr(training.trainer, "compile_problem", lambda dev: None)
        monkeypatch.setattr(torch, "compile", lambda fn, **k: _oom)
        kw = dict(compile=True)
    events = list(train(config(**kw), run_dir=tmp_path / "run"))
    end = events[-1]
    assert end.status == "failed" and "batch_size, l_max or d_e" in end.message and freed
    run = Run.open(tmp_path / "run")
    assert run.meta["status"] == "failed"
    if where != "compile":
        assert run.meta["checkpoint_step"] == 3 and run.load_model()  # the last checkpoint stays usable


def test_out_of_memory_for_a_snapshot_is_told_and_training_goes_on(tmp_path, monkeypatch, freed):
    monkeypatch.setattr(training.trainer, "_snapshot", _oom)
    control = Control()
    events = []
    for e in train(config(steps=6), run_dir=tmp_path / "run", control=control):
        events.append(e)
        if e.kind == "started":
            control.request_snapshot()
    snap = next(e for e in events if e.kind == "snapshot")
    assert "batch_size" in snap.message and control.take_snapshot() is None
    assert events[-1].status == "finished" and freed


# ---- loss scaling, device reads, non-finite checks, timing ----------------------------------------------
class _InfGrad(torch.autograd.Function):
    """The identity, whose gradient overflows: what a too-large fp16 loss scale does."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * math.inf


def _overflow_at(step: int, monkeypatch) -> None:
    """Make the gradient of training step ``step`` overflow (its loss stays finite)."""
    real = training.task_loss
    calls = {"n": 0}

    def overflowing(model, batch, task):
        loss, logits, y = real(model, batch, task)
        calls["n"] += model.training
        return (_InfGrad.apply(loss) if model.training and calls["n"] == step else loss), logits, y

    monkeypatch.setattr(training.loss, "task_loss", overflowing)


def test_steps_skipped_by_loss_scaling_write_no_inf_or_nan(tmp_path, monkeypatch):
    monkeypatch.setattr(training.trainer, "resolve_precision", lambda p, d: "fp16")  # a GradScaler on the CPU
    monkeypatch.setattr(training.trainer, "autocast", lambda d, p: contextlib.nullcontext())
    monkeypatch.setattr(training.loss, "autocast", lambda d, p: contextlib.nullcontext())
    _overflow_at(3, monkeypatch)
    events = list(train(config(steps=6), run_dir=tmp_path / "run"))
    assert events[-1].status == "finished"

    def strict(text):
        raise AssertionError(f"{text} in metrics.jsonl")
    rows = [json.loads(line, parse_constant=strict) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert rows[2]["step"] == 3 and rows[2]["skipped"] and rows[2]["grad_norm"] is None
    assert all(math.isfinite(r["grad_norm"]) for r in rows if r["step"] != 3)
    numbers = [v for e in events if e.kind == "steps" for v in e.train_loss + e.grad_norm if v is not None]
    assert all(math.isfinite(v) for v in numbers)


def test_a_diverging_gradient_fails_the_run_before_any_checkpoint(tmp_path, monkeypatch):
    _overflow_at(5, monkeypatch)
    events = list(train(config(steps=9), run_dir=tmp_path / "run"))
    assert events[-1].status == "failed" and "gradient norm became" in events[-1].message
    assert "step 5" in events[-1].message
    run = Run.open(tmp_path / "run")
    assert run.meta["checkpoint_step"] == 3  # the checkpoint due at step 6 was never written
    assert all(torch.isfinite(p).all() for p in run.load_model().model.parameters())


def test_losses_are_read_from_the_device_once_per_emission_not_per_step(tmp_path, monkeypatch):
    reads = {"n": 0}
    for name in ("item", "tolist"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            reads["n"] += 1
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, counted)
    monkeypatch.setattr(training.trainer, "EMIT_INTERVAL_S", 1e9)  # emit only at evaluations and the end
    events = list(train(config(steps=40, eval_interval=40, checkpoint_interval=40, sample_tokens=0),
                        run_dir=tmp_path / "run"))
    assert sum(len(e.steps) for e in events if e.kind == "steps") == 40
    assert reads["n"] <= 5  # the first step, one emission, one evaluation (not 40 loss.item() calls)


def test_tokens_per_second_and_eta_leave_out_start_up(tmp_path, monkeypatch):
    real = training.task_loss
    calls = {"n": 0}

    def slow_first(model, batch, task):
        calls["n"] += model.training
        if model.training and calls["n"] == 1:
            time.sleep(1.5)  # what compiling does to the first step
        return real(model, batch, task)

    monkeypatch.setattr(training.loss, "task_loss", slow_first)
    events = list(train(config(steps=30, eval_interval=30, sample_tokens=0), run_dir=tmp_path / "run"))
    steps = [e for e in events if e.kind == "steps"]
    assert steps[-1].elapsed_s < 1.5  # the slow first step is not in the elapsed time the ETA comes from
    assert min(e.tokens_per_s for e in steps) > 4 * 16 / 1.5  # nor in any tokens/s window


# ---- torch.compile ----------------------------------------------------------------------------------------
class _RecordingCompile:
    def __init__(self, fails=False):
        self.compiled, self.calls, self.fails = 0, 0, fails

    def __call__(self, fn, **kwargs):
        self.compiled += 1

        def run(*args):
            self.calls += 1
            if self.fails:
                raise RuntimeError("Cannot find a working triton installation")
            return fn(*args)
        return run


@pytest.fixture
def compile_here(monkeypatch):
    monkeypatch.setattr(training.trainer, "compile_problem", lambda dev: None)
    resets = []
    import torch._dynamo
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    return resets


def test_compile_covers_classification_and_resets_between_runs(tmp_path, monkeypatch, compile_here):
    rec = _RecordingCompile()
    monkeypatch.setattr(torch, "compile", rec)
    seen = []
    real = training.task_loss
    monkeypatch.setattr(training.loss, "task_loss", lambda m, b, t: seen.append(m.training) or real(m, b, t))
    for name in ("a", "b"):
        events = list(train(config("classification", steps=4, compile=True), run_dir=tmp_path / name))
        assert events[-1].status == "finished"
    assert rec.compiled == 2 and len(compile_here) == 2  # each run compiles afresh
    assert rec.calls == 8 == sum(seen)  # every training step went through the compiled function


def test_compile_falls_back_to_eager_with_a_note(tmp_path, monkeypatch, compile_here):
    monkeypatch.setattr(torch, "compile", _RecordingCompile(fails=True))
    events = list(train(config(steps=4, compile=True), run_dir=tmp_path / "run"))
    notes = [e.message for e in events if e.kind == "note"]
    assert events[-1].status == "finished" and any("torch.compile failed" in n for n in notes)


def test_compile_is_skipped_with_a_note_where_it_cannot_work(tmp_path, monkeypatch):
    monkeypatch.setattr(training.trainer, "compile_problem", lambda dev: "torch.compile needs Triton for the GPU")
    monkeypatch.setattr(torch, "compile", _oom)  # never called
    events = list(train(config(steps=3, compile=True), run_dir=tmp_path / "run"))
    assert events[-1].status == "finished"
    assert any(e.kind == "note" and "Triton" in e.message for e in events)


def test_compiled_training_traces_and_matches_eager(tmp_path, monkeypatch):
    """A real Dynamo trace of the training loss (the eager backend: no C++ compiler needed) gives the eager
    run's losses."""
    monkeypatch.setattr(training.trainer, "compile_problem", lambda dev: None)
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **k: real_compile(fn, backend="eager"))
    losses = {}
    for c in (False, True):
        events = list(train(config("classification", steps=3, compile=c, sample_tokens=0),
                            run_dir=tmp_path / str(c)))
        assert events[-1].status == "finished" and not any(e.kind == "note" for e in events)
        losses[c] = [v for e in events if e.kind == "steps" for v in e.train_loss]
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)
