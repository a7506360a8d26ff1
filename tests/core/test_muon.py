"""train.optimizer = "muon": torch.optim.Muon for the hidden matrices and AdamW for the rest, per architecture;
the schedule scaling both; a resumed Muon run repeating the uninterrupted one bit for bit."""
from __future__ import annotations

import pytest
import torch
from training_helpers import TINY, assert_resuming_repeats
from training_helpers import tiny_config as config

from fatstudio import ModelConfig, build_model
from fatstudio.core.config import TrainConfig
from fatstudio.core.runs.folder import Run
from fatstudio.core.training import lr_at, make_optimizer, train
from fatstudio.core.training.schedule import MuonAdamW, set_lr

MUON = TrainConfig(optimizer="muon", lr=1e-3, muon_lr=0.02, weight_decay=0.1, muon_weight_decay=0.05)


@pytest.mark.parametrize("arch, tied, n_classes", [("gpt", False, 0), ("gpt", True, 0), ("gopher", False, 0),
                                                   ("bert", True, 0), ("bert", False, 3), ("edt", False, 0)])
def test_every_parameter_is_in_exactly_one_group_and_no_embedding_under_muon(arch, tied, n_classes):
    model = build_model(ModelConfig(arch=arch, **TINY, tie_embeddings=tied, n_classes=n_classes))
    opt = make_optimizer(model, MUON)
    assert isinstance(opt, MuonAdamW)
    muon = [p for g in opt.muon.param_groups for p in g["params"]]
    adamw = [p for g in opt.adamw.param_groups for p in g["params"]]
    grouped = [id(p) for p in muon + adamw]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters()) and len(set(grouped)) == len(grouped)
    names = {id(p): n for n, p in model.named_parameters()}
    under_muon = {names[id(p)] for p in muon}
    outer = {id(p) for name in ("embed", "unembed", "class_head") if getattr(model, name, None) is not None
             for p in getattr(model, name).parameters()}
    assert not outer & {id(p) for p in muon}  # W_e, W_p, W_u (tied or not), the class head
    assert all(p.dim() == 2 for p in muon) and under_muon
    assert all(n.endswith(".weight") for n in under_muon)
    hidden = {n for n, p in model.named_parameters() if p.dim() == 2 and "." in n and n.split(".")[-2].startswith("W_")
              and not n.startswith(("embed.", "unembed.", "class_head"))}
    assert hidden == under_muon  # every W_q, W_k, W_v, W_o, W_mlp1, W_mlp2 (and W_r, W_f) and nothing else
    if arch == "gopher":  # Transformer-XL's 2-D biases u and v stay with AdamW
        assert not any(n.endswith((".u", ".v")) for n in under_muon)
    assert [g["weight_decay"] for g in opt.muon.param_groups] == [0.05]
    assert [g["weight_decay"] for g in opt.adamw.param_groups] == [0.1, 0.0]
    assert all(p.dim() < 2 for p in opt.adamw.param_groups[1]["params"])


def test_the_schedule_scales_both_optimizers_alike():
    model = build_model(ModelConfig(**TINY))
    t = MUON.replace(steps=50, warmup=5, min_lr=1e-4)
    opt = make_optimizer(model, t)
    for step in (0, 3, 10, 49):
        lr = lr_at(step, t)
        set_lr(opt, lr, t)
        assert [g["lr"] for g in opt.muon.param_groups] == [pytest.approx(lr * 20)]
        assert [g["lr"] for g in opt.adamw.param_groups] == [lr, lr]
    assert opt.param_groups == opt.muon.param_groups + opt.adamw.param_groups


def test_muon_and_its_keys_are_validated():
    for key, value in (("muon_lr", 0.0), ("muon_lr", -1.0), ("muon_weight_decay", -0.1)):
        with pytest.raises(ValueError, match=f"train.{key}"):
            TrainConfig(**{key: value}).validate()
    with pytest.raises(ValueError, match="'muon'"):
        TrainConfig(optimizer="lion").validate()


def test_a_resumed_muon_run_repeats_the_uninterrupted_run_exactly(text_file, tmp_path):
    """Stopped at the step-10 checkpoint and resumed, Muon's momentum and AdamW's moments continue where they
    were: the losses, gradient norms and final weights equal the uninterrupted run's bit for bit."""
    cfg = config(text_file, steps=20, eval_interval=10, checkpoint_interval=10, sample_tokens=0, optimizer="muon",
                 muon_weight_decay=0.01)

    def stopped(run):
        state = run.load_training_state()
        assert set(state["optimizer"]) == {"muon", "adamw"} and state["optimizer"]["muon"]["state"]

    a = assert_resuming_repeats(cfg, tmp_path, stopped)
    adamw = list(train(cfg.with_overrides(["train.optimizer=\"adamw\""]), run_dir=tmp_path / "adamw"))
    assert adamw[-1].status == "finished"
    c = Run.open(tmp_path / "adamw").load_model().model.state_dict()
    assert not torch.equal(a["layers.0.attn.W_q.weight"], c["layers.0.attn.W_q.weight"])  # Muon did step them
