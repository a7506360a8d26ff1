"""What the command-line tests share: a tiny run's config (format it with ``corpus`` and ``steps``), and such a run
trained by ``fatstudio train``."""
from pathlib import Path

from fatstudio.cli import main

TOML = """
[model]
l_max = 16
L = 1
H = 2
d_e = 16
d_mlp = 32
[data]
corpus = "{corpus}"
[train]
steps = {steps}
batch_size = 4
eval_interval = 10
eval_iters = 2
checkpoint_interval = 10
sample_tokens = 5
device = "cpu"
"""


def train_tiny(tmp: Path, steps: int) -> Path:
    """``tmp/run``: the tiny config trained ``steps`` steps on a short repeated text (``tmp/c.txt``)."""
    corpus = tmp / "c.txt"
    corpus.write_text("hello world, hello transformers.\n" * 100, encoding="utf-8")
    cfg = tmp / "cfg.toml"
    cfg.write_text(TOML.format(corpus=corpus.as_posix(), steps=steps), encoding="utf-8")
    assert main(["train", str(cfg), "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp / "run"
