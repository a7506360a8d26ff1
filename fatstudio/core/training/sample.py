"""A human-readable sample of what the model does now, written at each evaluation."""
from __future__ import annotations

import torch

from ..config import Task, TrainConfig
from ..data.corpora import IGNORE
from ..device import model_device, to_device
from ..inference import generation


def make_sample(model, tokenizer, dataset, task: Task, t: TrainConfig, seed: int, split: str = "val") -> str:
    """A human-readable sample of what the model does now, for each task type, from an example of ``split``."""
    g = torch.Generator().manual_seed(seed)
    batch = dataset.batch(split, 1, g)
    if task == "next_token":
        prompt = tokenizer.decode(batch["x"][0, :8].tolist())
        text = "".join(c.text for c in generation.generate(model, tokenizer, prompt, tokens=t.sample_tokens,
                                                          temperature=0.8, seed=seed))
        return prompt + text
    if task == "seq2seq":
        source = tokenizer.decode(batch["z"][0].tolist())
        target = tokenizer.decode(batch["y"][0][batch["y"][0] != IGNORE].tolist())
        out = "".join(c.text for c in generation.translate(model, tokenizer, source))
        return f"{source} → {out}   (target: {target})"
    if task == "classification":
        text = tokenizer.decode(batch["x"][0][batch["x_pad_mask"][0]].tolist())
        probs = generation.classify(model, tokenizer, text, dataset.class_names)
        truth = dataset.class_names[int(batch["label"][0])]
        return f"{text} → {probs[0][0]} ({probs[0][1]:.0%})   (true: {truth})"
    x = batch["x"][0]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        pred = model(**to_device({"x": x[None]}, model_device(model)))[0].argmax(-1).cpu()
    model.train(was_training)
    filled = torch.where(x == tokenizer.mask_id, pred, x)
    return f"{tokenizer.decode(x.tolist())}\n→ {tokenizer.decode(filled.tolist())}"
