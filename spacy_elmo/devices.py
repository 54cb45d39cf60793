"""The one reading of a device setting, for the component, `dump`, `evaluate` and training.

A setting names a kind with an optional index ("cpu", "cuda", "cuda:1", "mps"), or is
"auto" where the caller allows it (CUDA when torch sees a GPU, else the CPU). Each caller
says which kinds it can run on. `check_device` looks at the spelling only, so a config is
checked where it is read, on any machine; `pick_device` also resolves "auto", checks that
torch can use the device here and, under torchrun, gives each process its own GPU.
"""

import os
import re
from typing import NamedTuple, Tuple

import torch


class DeviceKinds(NamedTuple):
    """The device kinds a caller can run on, and those of them that may carry ":N"."""

    names: Tuple[str, ...]
    indexed: Tuple[str, ...]


INFERENCE_DEVICES = DeviceKinds(("cpu", "cuda", "mps", "xpu"), ("cpu", "cuda", "mps", "xpu"))
"""Where the biLM runs for inference, the component and `dump` (any index, as torch.device takes it)."""
TRAINING_DEVICES = DeviceKinds(("cpu", "cuda"), ("cuda",))
"""Where pretraining and `evaluate` run (gloo on CPUs, nccl on GPUs; the CPU is one device)."""


def check_device(setting: str, kinds: DeviceKinds, *, auto: bool = False, name: str = "device") -> None:
    """Raise a ValueError naming `name` unless `setting` spells one of `kinds.names`, with
    ":N" for those in `kinds.indexed`, or "auto" when `auto`."""
    plain = "|".join(re.escape(kind) for kind in kinds.names)
    indexed = "|".join(re.escape(kind) for kind in kinds.indexed)
    if isinstance(setting, str) and (re.fullmatch(rf"(?:{plain})|(?:{indexed}):\d+", setting) or (auto and setting == "auto")):
        return
    choices = ", ".join([*kinds.names, *(f"{kind}:N" for kind in kinds.indexed if kind != "cpu"), *(["auto"] if auto else [])])
    raise ValueError(f"{name} must be one of {choices}; got {setting!r}")


def pick_device(setting: str, kinds: DeviceKinds, *, auto: bool = False, torchrun: bool = False, name: str = "device") -> torch.device:
    """The torch device `setting` names, usable here. With `torchrun` (a training process)
    and WORLD_SIZE > 1, "cuda" means this process's LOCAL_RANK GPU, which becomes torch's
    current device, and "cuda:N" is refused (every process would share GPU N)."""
    check_device(setting, kinds, auto=auto, name=name)
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(setting)
    if device.type == "cuda":
        return _cuda_device(setting, torchrun, name)
    available = {"mps": lambda: torch.backends.mps.is_available(), "xpu": lambda: hasattr(torch, "xpu") and torch.xpu.is_available()}
    if device.type in available and not available[device.type]():
        raise ValueError(f"{name} = {setting!r} asked for, but torch sees no {device.type} device here")
    return device


def _cuda_device(setting: str, torchrun: bool, name: str) -> torch.device:
    if not torch.cuda.is_available():
        raise ValueError(f"{name} = {setting!r} asked for, but torch sees no CUDA device here")
    if setting != "cuda" and torchrun and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(f"{name} = {setting!r} would put every torchrun process on one GPU; use 'cuda'")
    if setting == "cuda" and not torchrun:
        return torch.device("cuda")  # the current GPU, chosen when CUDA starts (not here)
    index = int(os.environ.get("LOCAL_RANK", "0")) if setting == "cuda" else int(setting.split(":")[1])
    if index >= torch.cuda.device_count():
        raise ValueError(f"{name} asks for GPU {index}, torch sees {torch.cuda.device_count()}")
    if torchrun:
        torch.cuda.set_device(index)
    return torch.device("cuda", index)
