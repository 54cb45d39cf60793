"""Row counts of bf16 training products rounded up, so that matrix-product shapes repeat.

On the CPU, PyTorch runs bfloat16 matrix products through oneDNN, which compiles a kernel
for every new shape (1-2 ms each, page faults included) and keeps the most recent ones.
A training batch's token count, its number of distinct tokens and its packed LSTM rows
differ from one batch to the next, so the products over them (the LSTM's input product
and weight gradients, the char-CNN and highways, the sampled softmax) met a new shape at
almost every step: some 30 compilations a step. Rounded up to a multiple of
`ROW_MULTIPLE`, a few shapes recur. Padding rows are zeros or copies of a real row; their
results are dropped and their gradients are exactly zero, so values agree with the
unpadded products up to rounding. fp32 products go to MKL, which compiles nothing per
shape: there padding would only add work, and rows are not rounded.
"""

from typing import Optional

import torch

ROW_MULTIPLE = 64


def rounding_pays(device: torch.device) -> bool:
    """Whether products on `device` run here in bf16 through oneDNN: under bf16 autocast on the CPU."""
    return device.type == "cpu" and _cpu_autocast_dtype() == torch.bfloat16


def product_rows(n: int, device: torch.device) -> int:
    """How many rows products over `n` rows on `device` run over: `n` rounded up where that
    pays (`rounding_pays`), else `n`."""
    return rounded_rows(n) if rounding_pays(device) else n


def rounded_rows(n: int, multiple: int = ROW_MULTIPLE) -> int:
    """`n` rounded up to a multiple of `multiple`."""
    return -(-n // multiple) * multiple


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """(n, ...) -> (rows, ...): `x` with zero rows appended (`x` itself if n == rows)."""
    if len(x) == rows:
        return x
    return torch.cat([x, x.new_zeros(rows - len(x), *x.shape[1:])])


def repeat_first_row(x: torch.Tensor, rows: int) -> torch.Tensor:
    """(n, ...) -> (rows, ...): `x` with copies of its first row appended (`x` itself if n == rows)."""
    if len(x) == rows:
        return x
    return torch.cat([x, x[:1].expand(rows - len(x), *x.shape[1:])])


def _cpu_autocast_dtype() -> Optional[torch.dtype]:
    """The dtype CPU autocast runs products in, None when it is off."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
