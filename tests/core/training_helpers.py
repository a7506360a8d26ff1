"""A tiny model and run configuration that the trainer's tests share."""
from fatstudio import ModelConfig
from fatstudio.core.config import DataConfig, RunConfig, TrainConfig

TINY = dict(l_max=16, L=1, L_enc=1, L_dec=1, H=2, d_e=16, d_mlp=32)


def tiny_config(corpus, steps=30, **train_kw) -> RunConfig:
    """A run of the TINY model on ``corpus`` for ``steps`` steps, evaluating and checkpointing every 10."""
    t = dict(steps=steps, batch_size=4, eval_interval=10, eval_iters=2, checkpoint_interval=10, warmup=2,
             sample_tokens=8, device="cpu")
    return RunConfig(ModelConfig(**TINY), DataConfig(corpus=str(corpus)), TrainConfig(**{**t, **train_kw}))
