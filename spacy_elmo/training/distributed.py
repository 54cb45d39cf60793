"""Data-parallel training over `torch.distributed`, as launched by `torchrun`.

Every process builds the same global batch and takes rows `rank::world_size` of it;
gradients are summed across processes with one all-reduce per step, so a step equals
the single-process step on the whole global batch (exactly so with dropout off and the
full softmax; otherwise each process draws its own masks and negatives). gloo on CPU, nccl on GPU; only rank
0 writes files.
"""
import datetime
import os
from typing import List, NamedTuple

import torch
import torch.distributed as dist


COLLECTIVE_TIMEOUT = datetime.timedelta(hours=1)
"""How long a process waits for the others (rank 0 may be writing a large checkpoint)."""


class Process(NamedTuple):
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def start_process(device: torch.device) -> Process:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Process()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return Process(dist.get_rank(), dist.get_world_size())


def stop_process(process: Process) -> None:
    if process.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def sum_gradients(parameters: List[torch.nn.Parameter], process: Process) -> None:
    """Sum every parameter's gradient over all processes (missing gradients count as zero)."""
    if process.world_size <= 1:
        return
    grads = []
    for param in parameters:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        grads.append(param.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def sum_values(values: List[float], process: Process, device: torch.device) -> List[float]:
    """Element-wise sum of small per-process figures (losses, counts, flags)."""
    if process.world_size <= 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def rng_states() -> List[torch.Tensor]:
    """This process's torch RNG state, plus the current GPU's if CUDA is in use."""
    states = [torch.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.append(torch.cuda.get_rng_state())
    return states


def set_rng_states(states: List[torch.Tensor]) -> None:
    torch.set_rng_state(states[0])
    if len(states) > 1 and torch.cuda.is_available():
        torch.cuda.set_rng_state(states[1])


def gather_rng_states(process: Process) -> List[List[torch.Tensor]]:
    """`rng_states()` of every process, in rank order."""
    if process.world_size <= 1:
        return [rng_states()]
    gathered: List[List[torch.Tensor]] = [[] for _ in range(process.world_size)]
    dist.all_gather_object(gathered, rng_states())
    return gathered


def barrier(process: Process) -> None:
    if process.world_size > 1:
        dist.barrier()
