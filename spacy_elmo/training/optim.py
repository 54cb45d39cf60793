"""Optimizer and learning-rate schedule of pretraining."""

import logging
import math
from typing import Any, Callable, Dict, Iterable

import torch

from .config import OptimizerSettings, ScheduleSettings, TrainingSettings

logger = logging.getLogger(__name__)


def make_optimizer(settings: OptimizerSettings, parameters: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Adagrad (bilm-tf's choice, with its starting accumulator) or Adam, in torch's fused
    implementation where this torch has it for the parameters' device (one kernel per step
    for all parameters: 4x faster than the default per-tensor loop on the demo model's CPU
    step), else its multi-tensor one."""
    parameters = list(parameters)
    if settings.name == "adagrad":
        kind: Callable[..., torch.optim.Optimizer] = torch.optim.Adagrad
        options: Dict[str, Any] = {"initial_accumulator_value": settings.initial_accumulator}
    else:
        kind, options = torch.optim.Adam, {"betas": (settings.beta1, settings.beta2)}
    options.update(lr=settings.learning_rate, eps=settings.eps, weight_decay=settings.weight_decay)
    device = parameters[0].device if parameters else torch.device("cpu")
    return kind(parameters, **options, **_fastest_implementation(kind, device))


def _fastest_implementation(kind: Callable[..., torch.optim.Optimizer], device: torch.device) -> Dict[str, bool]:
    """{"fused": True} where one step of `kind` runs fused on `device` (torch 2.4 added the
    CPU kernels, later versions the CUDA Adagrad one), else {"foreach": True}."""
    probe = torch.nn.Parameter(torch.zeros(1, device=device))
    probe.grad = torch.zeros(1, device=device)
    try:
        kind([probe], fused=True).step()
    except (TypeError, RuntimeError) as err:
        logger.info("no fused %s step on %s in this torch (%s): the multi-tensor one runs", kind.__name__, device, err)
        return {"foreach": True}
    return {"fused": True}


def learning_rate_factor(schedule: ScheduleSettings, training: TrainingSettings, step: int, elapsed: float) -> float:
    """Multiplier of the base learning rate for optimizer step `step` (1-based), taken
    `elapsed` seconds into the run. A linear decay spans the budget `schedule.budget_key`
    names (the steps after warmup out of `max_steps - warmup_steps`, or the seconds out of
    `max_seconds`) from its share `decay_start` to its end."""
    if schedule.warmup_steps and step <= schedule.warmup_steps:
        return step / schedule.warmup_steps
    if schedule.decay == "inverse_sqrt":
        return math.sqrt(max(schedule.warmup_steps, 1) / step)
    if schedule.decay == "linear":
        budget = getattr(training, schedule.budget_key)
        if schedule.horizon == "seconds":
            spent = elapsed / max(budget, 1e-9)
        else:
            spent = (step - schedule.warmup_steps) / max(budget - schedule.warmup_steps, 1)
        decayed = (spent - schedule.decay_start) / (1.0 - schedule.decay_start)
        return 1.0 - (1.0 - schedule.final_fraction) * min(max(decayed, 0.0), 1.0)
    return 1.0
