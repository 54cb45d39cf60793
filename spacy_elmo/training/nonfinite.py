"""Steps with a non-finite loss or gradient are skipped, never applied to the weights.

The check comes after the gradients are summed across processes and before clipping and
the optimizer step. It reads the gradients of the fp32 master weights: under bf16
autocast only activations are bf16, and an overflow there reaches these gradients as inf
or NaN. A non-finite gradient sum is non-finite on every process, but a process's
non-finite loss need not reach the gradients (an infinite NLL whose gradient is zero), so
each process's loss and gradient verdict go through the all-reduce that sums the loss
anyway: every process reaches the same decision, with no extra collective.
"""

import math
from typing import Iterable, List, Tuple

import torch

from .distributed import Process, sum_values


class NonFiniteTraining(ValueError):
    """Too many consecutive steps had a non-finite loss or gradient: the run stopped (a
    ValueError, so the command line reports it as one line)."""


def finite_gradients(parameters: Iterable[torch.nn.Parameter]) -> bool:
    """Whether every gradient there is holds only finite values."""
    checks: List[torch.Tensor] = [torch.isfinite(p.grad).all() for p in parameters if p.grad is not None]
    return bool(torch.stack(checks).all()) if checks else True


def agree_on_step(loss_sum: float, parameters: List[torch.nn.Parameter], process: Process, device: torch.device) -> Tuple[float, bool]:
    """(`loss_sum` summed over processes, whether the step may be taken), the same on every
    process. Call it after the backward pass (and its gradient all-reduce)."""
    total, bad = sum_values([loss_sum, float(not finite_gradients(parameters))], process, device)
    return total, bad == 0 and math.isfinite(total)
