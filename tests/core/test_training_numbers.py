"""The numbers training produces, pinned against values computed here independently: the learning-rate
schedule written out, AdamW and SGD stepped by hand (weight decay on ≥ 2-D weights only), gradient clipping
redone with torch.nn.utils.clip_grad_norm_ on a copy, a resumed run against the uninterrupted one, bf16
autocast inside a step, evaluation in eval mode, and the seq2seq loss of a padded batch.

The trainer is watched from outside through torch's global hooks (module forward pre-hooks, parameter
post-accumulate-grad hooks, optimizer step hooks), so these tests use only `train` and its events."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import pytest
import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from training_helpers import TINY, assert_resuming_repeats
from training_helpers import tiny_config as config

from fatstudio import ModelConfig, build_model
from fatstudio.core import training
from fatstudio.core.config import TrainConfig
from fatstudio.core.data.corpora import IGNORE, build_dataset, load_corpus
from fatstudio.core.data.tokenization import train_tokenizer
from fatstudio.core.model import Transformer
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import lr_at, make_optimizer, task_loss, train


def expected_lr(step: int, t: TrainConfig) -> float:
    """The schedule as documented, step 0-based: η·(step+1)/(warmup+1) during warm-up, then η constant or
    min_lr + ½(1 + cos(π·progress))(η - min_lr), progress = (step - warmup) / (steps - warmup) capped at 1."""
    if step < t.warmup:
        return t.lr * (step + 1) / (t.warmup + 1)
    if t.lr_schedule == "constant":
        return t.lr
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


# ---- watching the trainer from outside ------------------------------------------------------------------
@dataclass
class Forward:
    training: bool  # the model's mode
    grad: bool  # autograd on (a training step) or off (evaluation, sample, probe)
    batch: int
    autocast: bool
    dtype: torch.dtype


@dataclass
class OptimizerStep:
    raw: list[torch.Tensor]  # each parameter's gradient as backward left it (before clipping)
    seen: list[torch.Tensor]  # the gradient the optimizer stepped with
    before: list[torch.Tensor]
    after: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Watch:
    forwards: list[Forward] = field(default_factory=list)
    steps: list[OptimizerStep] = field(default_factory=list)
    params: list[torch.nn.Parameter] = field(default_factory=list)  # the trained model's, in model order


@contextlib.contextmanager
def watch():
    """Record every forward of a fatstudio model, and for each optimizer step of the trained model (the one
    run with autograd on) its parameters before and after, and their gradients before and after clipping."""
    w = Watch()
    raw: dict[int, torch.Tensor] = {}

    def keep_raw(p):
        raw[id(p)] = p.grad.detach().clone()

    def on_forward(module, args):
        if not isinstance(module, Transformer):
            return
        dev = next(module.parameters()).device.type
        batch = args[0].shape[0] if args else 0  # (the ids may come as a keyword)
        w.forwards.append(Forward(module.training, torch.is_grad_enabled(), batch, torch.is_autocast_enabled(dev),
                                  torch.get_autocast_dtype(dev)))
        if torch.is_grad_enabled() and not w.params:
            w.params = list(module.parameters())
            for p in w.params:
                p.register_post_accumulate_grad_hook(keep_raw)

    def pre_step(optimizer, args, kwargs):
        mine = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if w.params and mine == {id(p) for p in w.params}:
            w.steps.append(OptimizerStep([raw[id(p)] for p in w.params], [p.grad.detach().clone() for p in w.params],
                                         [p.detach().clone() for p in w.params]))

    def post_step(optimizer, args, kwargs):
        if w.steps and not w.steps[-1].after:
            w.steps[-1].after = [p.detach().clone() for p in w.params]

    handles = [torch.nn.modules.module.register_module_forward_pre_hook(on_forward),
               register_optimizer_step_pre_hook(pre_step), register_optimizer_step_post_hook(post_step)]
    try:
        yield w
    finally:
        for h in handles:
            h.remove()


def steps_of(events, what: str) -> list:
    return [v for e in events if e.kind == "steps" for v in getattr(e, what)]


# ---- the schedule ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("t", [
    TrainConfig(steps=50, warmup=7, lr=2e-3, min_lr=3e-4),
    TrainConfig(steps=50, warmup=0, lr=1e-2, min_lr=0.0),
    TrainConfig(steps=20, warmup=20, lr=1e-3, min_lr=1e-4),
    TrainConfig(steps=30, warmup=5, lr=5e-3, min_lr=1e-3, lr_schedule="constant"),
])
def test_lr_at_is_the_warmup_and_cosine_formula_value_by_value(t):
    for step in range(t.steps + 10):  # past the end too: min_lr (cosine), lr (constant)
        assert lr_at(step, t) == pytest.approx(expected_lr(step, t), rel=1e-12, abs=1e-15), step


def test_each_step_trains_at_the_scheduled_lr_and_records_it(text_file, tmp_path):
    cfg = config(text_file, steps=12, warmup=3, lr=4e-3, min_lr=1e-3, eval_interval=12, checkpoint_interval=12,
                 sample_tokens=0)
    with watch() as w:
        events = list(train(cfg, run_dir=tmp_path / "run"))
    t = cfg.train
    want = [expected_lr(s, t) for s in range(t.steps)]
    assert steps_of(events, "lr") == pytest.approx(want, rel=1e-12)
    assert [r["lr"] for r in Run.open(tmp_path / "run").metrics()] == pytest.approx(want, rel=1e-12)
    assert len(w.steps) == t.steps  # one optimizer step per training step, each at its lr (see the AdamW test)


# ---- the optimizers ----------------------------------------------------------------------------------------
def adamw_by_hand(steps: list[OptimizerStep], t: TrainConfig, decayed: list[bool]) -> None:
    """AdamW (Loshchilov & Hutter, as torch computes it) from zero moments, step by step in float64: each
    recorded step's parameters after must follow from those before and the gradient the optimizer saw."""
    m = [torch.zeros_like(g, dtype=torch.float64) for g in steps[0].seen]
    v = [torch.zeros_like(g, dtype=torch.float64) for g in steps[0].seen]
    for k, s in enumerate(steps):
        lr, n = expected_lr(k, t), k + 1
        for i, (g, before, after) in enumerate(zip(s.seen, s.before, s.after)):
            g, theta = g.double(), before.double()
            m[i] = t.beta1 * m[i] + (1 - t.beta1) * g
            v[i] = t.beta2 * v[i] + (1 - t.beta2) * g * g
            m_hat, v_hat = m[i] / (1 - t.beta1 ** n), v[i] / (1 - t.beta2 ** n)
            theta = theta * (1 - lr * (t.weight_decay if decayed[i] else 0.0)) - lr * m_hat / (v_hat.sqrt() + 1e-8)
            torch.testing.assert_close(after.double(), theta, rtol=1e-5, atol=1e-6, msg=f"step {k}, parameter {i}")


def sgd_by_hand(steps: list[OptimizerStep], t: TrainConfig, decayed: list[bool]) -> None:
    """The paper's θ ← θ - η(∇loss + λθ), λ = weight_decay on ≥ 2-D weights and 0 elsewhere."""
    for k, s in enumerate(steps):
        lr = expected_lr(k, t)
        for i, (g, before, after) in enumerate(zip(s.seen, s.before, s.after)):
            decay = t.weight_decay if decayed[i] else 0.0
            torch.testing.assert_close(after.double(), before.double() - lr * (g.double() + decay * before.double()),
                                       rtol=1e-5, atol=1e-7, msg=f"step {k}, parameter {i}")


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_every_update_is_the_optimizer_by_hand_with_decay_on_matrices_only(optimizer, text_file, tmp_path):
    """Large lr and weight decay, so that decay on a bias or a norm's γ (or none on a matrix) shows."""
    cfg = config(text_file, steps=6, warmup=2, optimizer=optimizer, lr=0.05, min_lr=0.01, weight_decay=0.5,
                 beta1=0.8, beta2=0.95, grad_clip=0.0, eval_interval=6, checkpoint_interval=6, sample_tokens=0)
    with watch() as w:
        list(train(cfg, run_dir=tmp_path / "run"))
    decayed = [p.dim() >= 2 for p in w.params]
    assert any(decayed) and not all(decayed)
    assert len(w.steps) == 6 and all(s.after for s in w.steps)
    (adamw_by_hand if optimizer == "adamw" else sgd_by_hand)(w.steps, cfg.train, decayed)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_make_optimizer_decays_exactly_the_matrices(optimizer):
    """With a zero gradient both optimizers only decay: θ(1 - ηλ) on every ≥ 2-D weight, nothing elsewhere."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY, vocab_size=10))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()  # biases, γ and β non-zero, so that decaying them would show
    before = [p.detach().clone() for p in model.parameters()]
    opt = make_optimizer(model, TrainConfig(optimizer=optimizer, lr=0.1, weight_decay=0.3))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for (name, p), b in zip(model.named_parameters(), before):
        torch.testing.assert_close(p.detach(), b * (1 - 0.1 * 0.3) if p.dim() >= 2 else b, msg=name)


# ---- clipping ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grad_clip", [0.05, 0.0, 1e6])
def test_the_optimizer_sees_the_gradient_clipped_at_grad_clip(grad_clip, text_file, tmp_path):
    """The gradient stepped with is backward's scaled by min(1, grad_clip / (‖g‖ + 1e-6)) (none for
    grad_clip = 0), as torch.nn.utils.clip_grad_norm_ does on a copy; the norm reported is ‖g‖ before."""
    cfg = config(text_file, steps=5, grad_clip=grad_clip, lr=0.05, eval_interval=5, checkpoint_interval=5,
                 sample_tokens=0)
    with watch() as w:
        events = list(train(cfg, run_dir=tmp_path / "run"))
    reported = steps_of(events, "grad_norm")
    assert len(w.steps) == len(reported) == 5
    for s, norm in zip(w.steps, reported):
        copy = [torch.nn.Parameter(g.clone()) for g in s.raw]
        for c, g in zip(copy, s.raw):
            c.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(copy, grad_clip if grad_clip > 0 else math.inf)
        assert norm == pytest.approx(float(total), rel=1e-5)
        for c, seen in zip(copy, s.seen):
            torch.testing.assert_close(seen, c.grad, rtol=1e-6, atol=1e-9)
        seen_norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in s.seen])))
        if grad_clip == 0.05:
            assert norm > 0.05 and seen_norm == pytest.approx(0.05, rel=1e-4)
        else:
            assert seen_norm == pytest.approx(norm, rel=1e-5)


# ---- resuming ----------------------------------------------------------------------------------------------
def test_a_resumed_run_repeats_the_uninterrupted_run_exactly(text_file, tmp_path):
    """Stopped at the step-10 checkpoint and resumed, a run with dropout (the random state matters) gives
    the uninterrupted run's losses, gradient norms and final weights bit for bit: the data order, AdamW's
    moments and the random state all continue where they were."""
    cfg = config(text_file, steps=20, eval_interval=10, checkpoint_interval=10, sample_tokens=4, lr=3e-3)
    assert_resuming_repeats(cfg.with_overrides(["model.dropout=0.2"]), tmp_path)


# ---- precision ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_bf16_autocast_is_on_inside_each_training_step_when_chosen(precision, text_file, tmp_path):
    cfg = config(text_file, steps=4, precision=precision, eval_interval=4, checkpoint_interval=4, sample_tokens=0)
    with watch() as w:
        events = list(train(cfg, run_dir=tmp_path / "run"))
    assert next(e for e in events if e.kind == "started").precision == precision
    stepping = [f for f in w.forwards if f.grad]
    evaluating = [f for f in w.forwards if not f.grad and f.batch == cfg.train.batch_size]
    assert len(stepping) == 4 and len(evaluating) == 2 * cfg.train.eval_iters
    for f in stepping + evaluating:
        assert f.autocast == (precision == "bf16")
        if f.autocast:
            assert f.dtype == torch.bfloat16


def test_the_loss_under_autocast_is_computed_in_fp32():
    torch.manual_seed(0)
    model = build_model(ModelConfig(**TINY, vocab_size=11))
    x = torch.randint(0, 11, (3, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, logits, y = task_loss(model, {"x": x[:, :-1], "y": x[:, 1:]}, "next_token")
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    assert loss.item() == F.cross_entropy(logits.float().flatten(0, 1), y.flatten()).item()


# ---- modes -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("task, arch", [("next_token", "gpt"), ("masked_lm", "bert")])
def test_steps_run_in_training_mode_and_everything_else_in_eval_mode(task, arch, text_file, tmp_path):
    cfg = config(text_file, steps=10, eval_interval=5, checkpoint_interval=10).with_overrides(
        ["model.dropout=0.3", f"data.task={task}", f"model.arch={arch}"])
    with watch() as w:
        list(train(cfg, run_dir=tmp_path / "run"))
    assert sum(f.grad for f in w.forwards) == 10
    assert sum(not f.grad and f.batch == cfg.train.batch_size for f in w.forwards) == 2 * 2 * cfg.train.eval_iters
    for f in w.forwards:
        assert f.training == f.grad  # a step trains; evaluation, samples and probes read the model in eval mode


def test_evaluate_is_the_mean_loss_of_fixed_batches_in_eval_mode(text_file):
    """``evaluate`` = the mean task loss over eval_iters batches drawn with generators seeded seed (train)
    and seed + 1 (val), and the val accuracy over the counted positions, computed in eval mode whatever
    mode the model was in (dropout off), which it gets back."""
    tok = train_tokenizer("char", [text_file.read_text()])
    dataset = build_dataset(load_corpus(str(text_file)), tok, "masked_lm", 16, 0.2, 0.3, 0)
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="bert", **TINY, vocab_size=tok.vocab_size, dropout=0.5))
    t = TrainConfig(batch_size=3, eval_iters=4)
    model.train()
    tr, va, acc, _ = training.evaluate(model, dataset, "masked_lm", t, torch.device("cpu"), seed=5)
    assert model.training
    plain = build_model(ModelConfig(arch="bert", **TINY, vocab_size=tok.vocab_size)).eval()
    plain.load_state_dict(model.state_dict())
    expected = {}
    with torch.no_grad():
        for split, seed in (("train", 5), ("val", 6)):
            g = torch.Generator().manual_seed(seed)
            losses, right, counted = [], 0, 0
            for _ in range(t.eval_iters):
                b = dataset.batch(split, t.batch_size, g)
                logits = plain(b["x"])
                keep = b["y"] != IGNORE
                losses.append(F.cross_entropy(logits[keep], b["y"][keep]).item())
                right += int((logits.argmax(-1)[keep] == b["y"][keep]).sum())
                counted += int(keep.sum())
            expected[split] = (sum(losses) / len(losses), right / counted)
    assert tr == pytest.approx(expected["train"][0], rel=1e-5)
    assert va == pytest.approx(expected["val"][0], rel=1e-5)
    assert acc == pytest.approx(expected["val"][1], abs=1e-9)


# ---- dropout -----------------------------------------------------------------------------------------------
def _random_weights(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)


@pytest.mark.parametrize("arch", ["gpt", "bert", "edt"])
def test_dropout_is_on_every_sublayer_output_in_training_mode(arch):
    """Each layer's sublayer outputs (attention, cross-attention, MLP) go through dropout: with p = 1 each one
    drops out entirely, leaving a pre-LN layer the identity and a post-LN layer its norms alone; the
    embedding's output is dropped too."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, **TINY, vocab_size=12, dropout=0.5))
    _random_weights(model)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 1.0
    model.train()
    layers = [m for m in model.modules() if type(m).__name__ == "Layer"]
    assert len(layers) == (2 if arch == "edt" else 1)
    X, Z = torch.randn(2, 5, TINY["d_e"]), torch.randn(2, 4, TINY["d_e"])
    for layer in layers:
        kw = {"Z": Z} if layer.cross is not None else {}
        out = layer(X, **kw)
        if layer.pre:
            expected = X
        else:
            expected = layer.norm_attn(X)
            if layer.cross is not None:
                expected = layer.norm_cross(expected)
            expected = layer.norm_mlp(expected)
        torch.testing.assert_close(out, expected)
        layer.eval()
        assert not torch.allclose(layer(X, **kw), expected)  # in eval mode the sublayers do count
        layer.train()
    assert torch.equal(model.embed(torch.randint(0, 12, (2, 5))), torch.zeros(2, 5, TINY["d_e"]))


@pytest.mark.parametrize("arch", ["gpt", "bert", "edt"])
def test_no_dropout_anywhere_in_eval_mode(arch):
    """In eval mode a model with dropout computes exactly what the same weights without dropout compute
    (the attention weights' dropout included, with and without the explicit maps)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, **TINY, vocab_size=12, dropout=0.5))
    _random_weights(model)
    plain = build_model(ModelConfig(arch=arch, **TINY, vocab_size=12))
    plain.load_state_dict(model.state_dict())
    model.eval(), plain.eval()
    x = torch.randint(0, 12, (2, 7))
    kw = {"context": torch.randint(0, 12, (2, 5))} if arch == "edt" else {}
    assert torch.equal(model(x, **kw), plain(x, **kw))
    (a, maps_a), (b, maps_b) = model(x, return_attention=True, **kw), plain(x, return_attention=True, **kw)
    assert torch.equal(a, b) and all(torch.equal(maps_a[k], maps_b[k]) for k in maps_b)
    model.train()
    assert not torch.equal(model(x, **kw), plain(x, **kw))


# ---- the seq2seq loss with padding ---------------------------------------------------------------------------
def test_seq2seq_loss_of_a_padded_batch_is_that_of_each_example_alone():
    """A batch of sources and targets of different lengths, padded: the loss is the mean over every real
    target position of -log P(y | the example's own unpadded z and x), padding neither attended to nor counted."""
    corpus = load_corpus("reverse", "seq2seq", seed=0)
    tok = train_tokenizer("char", corpus.texts())
    dataset = build_dataset(corpus, tok, "seq2seq", 24, 0.1, 0.15, 0)
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="edt", **{**TINY, "l_max": 24}, vocab_size=tok.vocab_size)).double().eval()
    _random_weights(model)
    batch = dataset.batch("train", 6, torch.Generator().manual_seed(1))
    assert not batch["z_pad_mask"].all() and not batch["x_pad_mask"].all()  # there is padding on both sides
    loss, _, _ = task_loss(model, batch, "seq2seq")
    total, counted = 0.0, 0
    with torch.no_grad():
        for i in range(batch["z"].shape[0]):
            z = batch["z"][i][batch["z_pad_mask"][i]]
            x = batch["x"][i][batch["x_pad_mask"][i]]
            y = batch["y"][i][: len(x)]
            assert (y != IGNORE).all() and (batch["y"][i][len(x):] == IGNORE).all()
            logits = model(x[None], context=z[None])[0]
            total += float(F.cross_entropy(logits, y, reduction="sum"))
            counted += len(y)
    assert loss.item() == pytest.approx(total / counted, rel=1e-10)
