"""What the command-line tests share: a tiny run's config file (``write_config``), and such a run trained by
``fatstudio train`` (``train_tiny``)."""
import json
from pathlib import Path

from fatstudio.cli import main

MODEL = dict(l_max=16, L=1, H=2, d_e=16, d_mlp=32)
TRAIN = dict(batch_size=4, eval_interval=10, eval_iters=2, checkpoint_interval=10, sample_tokens=5, device="cpu")
TEXT = "hello world, hello transformers.\n" * 100


def toml_table(name: str, values: dict) -> str:
    return f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())


def write_config(folder: Path, steps: int, text: str = TEXT, **train: object) -> Path:
    """``folder/cfg{steps}.toml``: the tiny model trained ``steps`` steps on ``text`` (written to ``folder/c.txt``),
    ``train`` adding to or replacing the [train] table's keys."""
    corpus = folder / "c.txt"
    corpus.write_text(text, encoding="utf-8")
    p = folder / f"cfg{steps}.toml"
    p.write_text(toml_table("model", MODEL) + toml_table("data", {"corpus": corpus.as_posix()})
                 + toml_table("train", {"steps": steps, **TRAIN, **train}), encoding="utf-8")
    return p


def train_tiny(tmp: Path, steps: int) -> Path:
    """``tmp/run``: the tiny config trained ``steps`` steps on a short repeated text (``tmp/c.txt``)."""
    assert main(["train", str(write_config(tmp, steps)), "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp / "run"
