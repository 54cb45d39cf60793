"""Row counts of training products rounded up, so that matrix-product shapes repeat.

On the CPU, PyTorch runs bfloat16 matrix products through oneDNN, which compiles a kernel
for every new shape (1-2 ms each, page faults included) and keeps the most recent ones.
A training batch's token count, its number of distinct tokens and its packed LSTM rows
differ from one batch to the next, so the products over them (the LSTM's input product
and weight gradients, the char-CNN and highways, the sampled softmax) met a new shape at
almost every step: some 30 compilations a step. Rounded up to a multiple of
`ROW_MULTIPLE`, a few shapes recur. Padding rows are zeros (or copies of a real row) whose
results are dropped and whose gradients are zero, so results do not change.
"""

import torch

ROW_MULTIPLE = 64


def rounded_rows(n: int) -> int:
    """`n` rounded up to a multiple of `ROW_MULTIPLE`."""
    return -(-n // ROW_MULTIPLE) * ROW_MULTIPLE


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """(n, ...) -> (rows, ...): `x` with zero rows appended (`x` itself if n == rows)."""
    if len(x) == rows:
        return x
    return torch.cat([x, x.new_zeros(rows - len(x), *x.shape[1:])])


def pad_index(index: torch.Tensor) -> torch.Tensor:
    """(n,) row indices -> (rounded_rows(n),): `index` with its first entry repeated after
    it (0 if empty): selecting with it gives the same rows plus copies of the first."""
    missing = rounded_rows(len(index)) - len(index)
    if not missing:
        return index
    first = index[:1] if len(index) else index.new_zeros(1)
    return torch.cat([index, first.expand(missing)])
