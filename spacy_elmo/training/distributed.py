"""Data-parallel training over `torch.distributed`, as launched by `torchrun`.

Every process builds the same global batch and takes rows `rank::world_size` of it; the
objective is wrapped in `DistributedDataParallel`, whose all-reduce (in buckets, during
the backward pass) sums the processes' gradients, so a step equals the single-process
step on the whole global batch (exactly so with dropout off and the full softmax;
otherwise each process draws its own masks and negatives). gloo on CPU, nccl on GPU;
only rank 0 writes files. A run lets go of its DDP wrapper (whose reducer holds the gloo
group) before it destroys the process group: a DDP that outlived the group made scripts
that call `pretrain` under torchrun abort at exit. The command line also ends such
processes without Python's teardown (`cli.app.run_app`).
"""

import datetime
import os
from typing import List, NamedTuple, Tuple

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

COLLECTIVE_TIMEOUT = datetime.timedelta(hours=1)
"""How long a process waits for the others (rank 0 may be writing a large checkpoint)."""


class Process(NamedTuple):
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_as_one_of_several() -> bool:
    """Whether torchrun started this process as one of several (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def start_process(device: torch.device) -> Process:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else a single process."""
    if not launched_as_one_of_several():
        return Process()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=COLLECTIVE_TIMEOUT)
    return Process(dist.get_rank(), dist.get_world_size())


def stop_process(process: Process) -> None:
    if process.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def data_parallel(module: torch.nn.Module, process: Process) -> torch.nn.Module:
    """`module` itself in a single process, else `module` in DistributedDataParallel with
    its gradients summed, not averaged: each process's loss is already its share of the
    global batch's mean. Every process must then run a forward and backward pass through
    it in every step (a process with no sentences runs a zero-weighted one)."""
    if process.world_size <= 1:
        return module
    wrapped = DistributedDataParallel(module, broadcast_buffers=False)
    wrapped.register_comm_hook(None, _sum_gradients)
    return wrapped


def _sum_gradients(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients summed over all processes."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    assert work is not None
    return work.get_future().then(lambda done: done.value()[0])


def sum_values(values: List[float], process: Process, device: torch.device) -> List[float]:
    """Element-wise sum of small per-process figures (losses, counts, flags)."""
    if process.world_size <= 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def agree_on_budget(spent: bool, interrupted: bool, elapsed: float, process: Process, device: torch.device) -> Tuple[bool, bool, float]:
    """(has any process spent its budget, was any interrupted, the processes' mean elapsed
    seconds): one verdict and one clock for all, so that a decay over seconds sets one rate."""
    votes = sum_values([float(spent), float(interrupted), elapsed], process, device)
    return votes[0] > 0, votes[1] > 0, votes[2] / process.world_size


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
