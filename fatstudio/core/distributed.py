"""Data-parallel training under torchrun: one process per device, DistributedDataParallel averaging the
gradients (gloo on CPUs, NCCL on CUDA GPUs).

``train.batch_size`` stays the global minibatch: every process draws the same global batch from the same
generator (so the data order is the one process's) and trains on its own slice of rows (`World.shard`);
the averaged gradient is the one process's for the next-token task, whose slices count equally many
positions (masked LM and padded tasks weight each slice's mean equally: close, not identical). Rank 0
alone writes the run; the logged losses are averaged over the processes (`World.mean`). The processes
agree after every step, over a CPU (gloo) group, on whether to stop (anyone's Ctrl-C) and whether to
report (rank 0's clock), so they stop, evaluate and checkpoint at the same steps.

Without torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK) the world is one process and nothing here
runs a collective.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from .environment import torchrun_world


class World:
    """This process's place among the training processes (a world of one outside torchrun)."""

    def __init__(self, rank: int = 0, size: int = 1, local_rank: int = 0):
        self.rank, self.size, self.local_rank = rank, size, local_rank
        self._control: Any = None  # the CPU group the per-step agreement runs on

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> World:
        """The world torchrun describes in the environment, else a world of one; a ValueError naming a variable
        out of its range (`environment.torchrun_world`)."""
        world = torchrun_world(env)
        return cls(*world) if world else cls()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def start(self, dev: torch.device, batch_size: int) -> torch.device:
        """Join the process group (NCCL on CUDA, each process on the GPU of its local rank; gloo on the CPU)
        and return the device to train on. ValueError for a device or batch size that cannot be split."""
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"torchrun trains on CPUs (gloo) or CUDA GPUs (NCCL), not {dev.type}; "
                             "set train.device to cpu or cuda.")
        if batch_size % self.size:
            raise ValueError(f"train.batch_size ({batch_size}) is the global batch and must split evenly over "
                             f"the {self.size} processes; make it a multiple of {self.size}.")
        if dev.type == "cuda":
            if self.local_rank >= torch.cuda.device_count():
                raise ValueError(f"process {self.rank} has local rank {self.local_rank}, but this machine has "
                                 f"{torch.cuda.device_count()} GPU(s): give --nproc_per_node at most that.")
            dev = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(dev)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                                    device_id=dev if dev.type == "cuda" else None)
        self._control = dist.new_group(backend="gloo")
        return dev

    def end(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def share(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (plain Python data, CPU tensors), in every process."""
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]

    def agree(self, report: bool, stop: bool) -> tuple[bool, bool]:
        """After a step: (rank 0's ``report``, anyone's ``stop``), the same in every process."""
        votes = torch.tensor([int(report and self.is_main), int(stop)])
        dist.all_reduce(votes, group=self._control)
        return bool(votes[0]), bool(votes[1])

    def mean(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` averaged over the processes (every process calls it with a tensor of the same shape)."""
        t = t.clone()
        dist.all_reduce(t)
        return t / self.size

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This process's rows of a global minibatch."""
        n = next(iter(batch.values())).shape[0] // self.size
        return {k: v[self.rank * n:(self.rank + 1) * n] for k, v in batch.items()}

    def wrap(self, loss_module: torch.nn.Module, dev: torch.device, find_unused: bool) -> torch.nn.Module:
        """``loss_module`` under DistributedDataParallel (which copies rank 0's parameters to every process);
        ``find_unused`` where the task leaves parameters out of the loss (classification: the unembedding)."""
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(loss_module, device_ids=[dev] if dev.type == "cuda" else None,
                                       find_unused_parameters=find_unused)
