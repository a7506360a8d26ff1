"""The task losses (Algorithms 11-13 and classification), minibatches, evaluation, and the loss function each
step calls (compiled or eager, or under DistributedDataParallel)."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..config import ResolvedPrecision, Task, TrainConfig
from ..data.corpora import IGNORE
from ..device import at_least_fp32, autocast, pin, to_device
from ..distributed import World

Batch = dict[str, torch.Tensor]  # see `data.Dataset.batch` for each task's keys


def task_loss(model, batch: Batch, task: Task) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean cross-entropy over the counted positions (Algorithms 11, 12, 13; classification), with the
    logits and targets it was computed from. The paper sums over positions; the mean only rescales η.
    ``batch`` is on the model's device (see `device.to_device`); its ``*_pad_mask`` are padding masks,
    passed as the model's ``mask`` / ``context_mask``."""
    if task == "classification":
        logits = model.classify(batch["x"], mask=batch["x_pad_mask"])
        return F.cross_entropy(at_least_fp32(logits), batch["label"]), logits, batch["label"]
    if task == "seq2seq":  # Algorithm 11: P = EDTransformer(z, x)
        logits = model(batch["x"], context=batch["z"], mask=batch["x_pad_mask"], context_mask=batch["z_pad_mask"])
    else:  # Algorithm 12 (only masked positions count) and Algorithm 13; a window without padding has no padding mask
        logits = model(batch["x"], mask=batch.get("x_pad_mask"))
    y = batch["y"]
    return F.cross_entropy(at_least_fp32(logits.flatten(0, 1)), y.flatten(), ignore_index=IGNORE), logits, y


def tokens_in(batch: Batch) -> int:
    return int(batch["x"].numel() + (batch["z"].numel() if "z" in batch else 0))


def next_batch(dataset, split: str, batch_size: int, generator: torch.Generator, dev: torch.device,
               world: World | None = None) -> Batch:
    """A minibatch drawn on the CPU (so the data order does not depend on the device) and moved to ``dev``,
    through pinned memory on CUDA so the copy does not stall the GPU; under torchrun (``world``) this
    process's rows of it (`distributed`)."""
    batch = dataset.batch(split, batch_size, generator)
    if world is not None and world.distributed:
        batch = world.shard(batch)
    return to_device(pin(batch, dev), dev)


@torch.no_grad()
def evaluate(model, dataset, task: Task, t: TrainConfig, dev: torch.device, seed: int,
             precision: ResolvedPrecision = "fp32") -> tuple[float, float, float, float]:
    """Mean loss on ``eval_iters`` batches of each split (the same batches every time), and the token (or
    class) accuracy on each: (train loss, val loss, val accuracy, train accuracy). The numbers stay on the
    device until the one read at the end."""
    was_training = model.training
    model.eval()
    numbers = []
    for split in ("train", "val"):
        g = torch.Generator().manual_seed(seed + (1 if split == "val" else 0))
        total = torch.zeros((), device=dev)
        correct = torch.zeros((), dtype=torch.long, device=dev)
        counted = torch.zeros((), dtype=torch.long, device=dev)
        for _ in range(t.eval_iters):
            with autocast(dev, precision):
                loss, logits, y = task_loss(model, next_batch(dataset, split, t.batch_size, g, dev), task)
            total += loss.float()
            keep = y != IGNORE
            correct += (logits.argmax(-1) == y)[keep].sum()
            counted += keep.sum()
        numbers += [total / t.eval_iters, correct.float() / counted.clamp(min=1)]
    model.train(was_training)
    tr, train_acc, va, val_acc = torch.stack(numbers).tolist()
    return tr, va, val_acc, train_acc


LossFunction = Callable[[Batch], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class TaskLoss(torch.nn.Module):
    """task_loss on ``model`` as a module's forward: what DistributedDataParallel wraps (it synchronises
    the gradients of what its forward computed, so classification's ``model.classify`` must run inside)."""

    def __init__(self, model: torch.nn.Module, task: Task):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return task_loss(self.model, batch, self.task)


def loss_function(eager: LossFunction, compiled: bool) -> LossFunction:
    """What each training step calls: the task's loss (`task_loss`, or the DDP module computing it), compiled
    as a whole (so classification's ``model.classify`` is compiled too, not only ``forward``) or eager.
    Compiling starts from a clean slate: what an earlier run in this process compiled is dropped
    (torch._dynamo.reset)."""
    if not compiled:
        return eager
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(eager)
